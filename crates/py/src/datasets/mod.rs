//! The Rust datasets as Python classes (`HttpDataset`, `FileDataset`, `ObjectStoreDataset`);
//! the sources that load them are in [`crate::sources`].
//!
//! - [`args`]: reading the constructors' arguments.
//!
//! The constructors release the interpreter around CPU work only (parsing, building clients),
//! not around a wait, so it is not sliced; `dataset[i]` waits through [`crate::seam`].

pub mod args;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyType};

use dlrs_io::{Dataset, FetchOptions, HttpOptions, ObjectStoreOptions, Runtime, redact_url};

use crate::errors::io_error;
use crate::seam::{SIGNAL_SLICE, Slice, wait_interruptibly};

/// The runtime of `dataset[i]` outside any loader (one thread, built on first use).
fn getitem_runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = Runtime::new(Some(1)).map_err(|e| io_error(&e))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// `len(dataset)`: Python's lengths are `Py_ssize_t`.
fn py_len(dataset: &dyn Dataset) -> usize {
    usize::try_from(dataset.len()).unwrap_or(usize::MAX)
}

/// Fetches item `index` (negative counts from the end) on the calling thread, with the
/// interpreter released and Ctrl-C checked.
fn fetch_one(py: Python<'_>, dataset: &dyn Dataset, index: isize) -> PyResult<Py<PyBytes>> {
    let len = dataset.len();
    let magnitude = index.unsigned_abs() as u64;
    let resolved = if index < 0 {
        len.checked_sub(magnitude)
    } else {
        Some(magnitude)
    };
    let Some(i) = resolved.filter(|&i| i < len) else {
        return Err(PyIndexError::new_err(format!(
            "index {index} is out of range for a dataset of {len} items"
        )));
    };
    let runtime = getitem_runtime()?;
    // Pinned here, so a slice that ends leaves the fetch running for the next one.
    let mut future = std::pin::pin!(dataset.fetch(i));
    let outcome = wait_interruptibly(py, |slice| {
        let slice = slice.unwrap_or(SIGNAL_SLICE);
        match runtime.block_on_checked(future.as_mut(), slice, || Err(())) {
            Ok(Err(())) => Slice::Pending,
            Err(e) | Ok(Ok(Err(e))) => Slice::Ready(Err(e)),
            Ok(Ok(Ok(bytes))) => Slice::Ready(Ok(bytes)),
        }
    })?;
    let bytes = outcome.map_err(|e| io_error(&e))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// The Rust dataset behind a Python object, or TypeError.
pub fn rust_dataset(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Dataset>> {
    if let Ok(d) = obj.cast::<HttpDataset>() {
        return Ok(Arc::new(d.get().inner.clone()));
    }
    if let Ok(d) = obj.cast::<FileDataset>() {
        return Ok(Arc::new(d.get().inner.clone()));
    }
    if let Ok(d) = obj.cast::<ObjectStoreDataset>() {
        return Ok(Arc::new(d.get().inner.clone()));
    }
    Err(PyTypeError::new_err(format!(
        "expected HttpDataset, FileDataset or ObjectStoreDataset, got {}",
        crate::text::type_name(obj)
    )))
}

fn seconds_shown(d: Option<Duration>) -> String {
    d.map_or_else(|| "None".to_owned(), |d| format!("{:?}", d.as_secs_f64()))
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

// The constructors read `retries` and `max_bytes` with `args` (messages of their own; `None`
// means "not given", and the default depends on the dataset), so each `text_signature` shows
// the defaults, as `_native.pyi` does; stubtest compares the two, and
// tests/test_rust_datasets.py checks that passing those defaults changes nothing.

/// The `#[pymethods]` of a Rust dataset class: its constructors (`{ ... }`), then what every
/// one has: `len()`, `dataset[i]` (one item fetched now, on the calling thread, for a look at
/// the data; loaders fetch many at once) and its `repr`.
macro_rules! dataset_methods {
    ($class:ident, { $($constructors:tt)* }) => {
        #[pymethods]
        impl $class {
            $($constructors)*

            fn __len__(&self) -> usize {
                py_len(&self.inner)
            }

            fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<Py<PyBytes>> {
                fetch_one(py, &self.inner, index)
            }

            fn __repr__(&self) -> String {
                self.shown.clone()
            }
        }
    };
}

/// Item i is the body of a GET request to `urls[i]` (or to the URL a template makes).
#[pyclass(frozen, module = "dataloader_rs._native", name = "HttpDataset")]
pub struct HttpDataset {
    inner: dlrs_io::HttpDataset,
    /// What the dataset was made from, without secrets (no query, no header values).
    shown: String,
}

impl HttpDataset {
    /// The keywords of the constructors (beyond `length`).
    const KEYWORDS: [&str; 7] = [
        "headers",
        "timeout",
        "connect_timeout",
        "retries",
        "backoff",
        "max_backoff",
        "max_bytes",
    ];

    fn options(kw: &args::Keywords<'_>) -> PyResult<HttpOptions> {
        let headers = args::str_pairs("headers", kw.get("headers"))?;
        let connect_timeout = kw.seconds("connect_timeout", Some(Duration::from_secs(10)))?;
        let fetch = kw.fetch(FetchOptions::HTTP)?;
        Ok(HttpOptions {
            fetch,
            headers,
            connect_timeout,
        })
    }

    fn shown_options(options: &HttpOptions) -> String {
        let mut out = String::new();
        if !options.headers.is_empty() {
            let names: Vec<String> = options.headers.iter().map(|(k, _)| quoted(k)).collect();
            out.push_str(&format!(", headers=[{}]", names.join(", ")));
        }
        out.push_str(&format!(
            ", timeout={}, retries={}",
            seconds_shown(options.fetch.timeout),
            options.fetch.retry.retries
        ));
        out
    }
}

dataset_methods!(HttpDataset, {
    #[new]
    #[pyo3(
        signature = (urls, **options),
        text_signature = "(urls, *, headers=None, timeout=30.0, connect_timeout=10.0, retries=3, \
                          backoff=0.1, max_backoff=5.0, max_bytes=67108864)"
    )]
    fn new(
        py: Python<'_>,
        urls: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("HttpDataset", options, &Self::KEYWORDS)?;
        let urls = args::strs("urls", urls)?;
        let options = Self::options(&kw)?;
        let first = urls.first().map_or_else(String::new, |u| {
            format!(", first {}", quoted(&redact_url(u)))
        });
        let shown = format!(
            "HttpDataset({} URLs{first}{})",
            urls.len(),
            Self::shown_options(&options)
        );
        let inner = py
            .detach(|| dlrs_io::HttpDataset::new(urls, options))
            .map_err(|e| io_error(&e))?;
        Ok(Self { inner, shown })
    }

    /// A dataset of the URLs made from `template` with the values of `columns` (and `{index}`).
    #[classmethod]
    #[pyo3(
        signature = (template, columns=None, **options),
        text_signature = "($cls, template, columns=None, *, length=None, headers=None, \
                          timeout=30.0, connect_timeout=10.0, retries=3, backoff=0.1, \
                          max_backoff=5.0, max_bytes=67108864)"
    )]
    fn from_template(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        template: &str,
        columns: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut known = vec!["length"];
        known.extend(Self::KEYWORDS);
        let kw = args::Keywords::new("HttpDataset.from_template", options, &known)?;
        let columns = args::columns(columns)?;
        let length = args::length(kw.get("length"))?;
        let options = Self::options(&kw)?;
        let names: Vec<String> = columns.iter().map(|(n, _)| quoted(n)).collect();
        let shown_options = Self::shown_options(&options);
        let inner = py
            .detach(|| dlrs_io::HttpDataset::from_template(template, columns, length, options))
            .map_err(|e| io_error(&e))?;
        let shown = format!(
            "HttpDataset.from_template({}, columns=[{}], length={}{shown_options})",
            quoted(&redact_url(template)),
            names.join(", "),
            inner.len(),
        );
        Ok(Self { inner, shown })
    }
});

/// Item i is the content of `paths[i]` (or of the path a template makes).
#[pyclass(frozen, module = "dataloader_rs._native", name = "FileDataset")]
pub struct FileDataset {
    inner: dlrs_io::FileDataset,
    shown: String,
}

impl FileDataset {
    fn options(kw: &args::Keywords<'_>) -> PyResult<FetchOptions> {
        kw.fetch(FetchOptions::FILE)
    }
}

dataset_methods!(FileDataset, {
    #[new]
    #[pyo3(
        signature = (paths, **options),
        text_signature = "(paths, *, timeout=None, retries=0, backoff=0.1, max_backoff=5.0, \
                          max_bytes=67108864)"
    )]
    fn new(
        py: Python<'_>,
        paths: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("FileDataset", options, &args::FETCH_KEYWORDS)?;
        let paths = args::paths(paths)?;
        let options = Self::options(&kw)?;
        let first = paths.first().map_or_else(String::new, |p| {
            format!(", first {}", quoted(&p.to_string_lossy()))
        });
        let shown = format!(
            "FileDataset({} paths{first}, timeout={}, retries={})",
            paths.len(),
            seconds_shown(options.timeout),
            options.retry.retries
        );
        let inner = py
            .detach(|| dlrs_io::FileDataset::new(paths, options))
            .map_err(|e| io_error(&e))?;
        Ok(Self { inner, shown })
    }

    /// A dataset of the paths made from `template` with the values of `columns` (and `{index}`).
    #[classmethod]
    #[pyo3(
        signature = (template, columns=None, **options),
        text_signature = "($cls, template, columns=None, *, length=None, timeout=None, \
                          retries=0, backoff=0.1, max_backoff=5.0, max_bytes=67108864)"
    )]
    fn from_template(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        template: &Bound<'_, PyAny>,
        columns: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut known = vec!["length"];
        known.extend(args::FETCH_KEYWORDS);
        let kw = args::Keywords::new("FileDataset.from_template", options, &known)?;
        let template = args::path("template", 0, template)
            .map_err(|_| PyTypeError::new_err("template must be a str or os.PathLike"))?;
        let template = template
            .to_str()
            .ok_or_else(|| PyTypeError::new_err("template must be valid UTF-8"))?
            .to_owned();
        let columns = args::columns(columns)?;
        let length = args::length(kw.get("length"))?;
        let options = Self::options(&kw)?;
        let names: Vec<String> = columns.iter().map(|(n, _)| quoted(n)).collect();
        let (timeout, retries) = (options.timeout, options.retry.retries);
        let inner = py
            .detach(|| dlrs_io::FileDataset::from_template(&template, columns, length, options))
            .map_err(|e| io_error(&e))?;
        let shown = format!(
            "FileDataset.from_template({}, columns=[{}], length={}, timeout={}, retries={retries})",
            quoted(&template),
            names.join(", "),
            inner.len(),
            seconds_shown(timeout),
        );
        Ok(Self { inner, shown })
    }
});

/// Item i is the object `keys[i]` (or the key a template makes) under the store and prefix of
/// a URL.
#[pyclass(frozen, module = "dataloader_rs._native", name = "ObjectStoreDataset")]
pub struct ObjectStoreDataset {
    inner: dlrs_io::ObjectStoreDataset,
    shown: String,
}

impl ObjectStoreDataset {
    fn options(kw: &args::Keywords<'_>) -> PyResult<ObjectStoreOptions> {
        let options = args::str_pairs("options", kw.get("options"))?;
        let fetch = kw.fetch(FetchOptions::OBJECT_STORE)?;
        Ok(ObjectStoreOptions { options, fetch })
    }

    /// The keywords of the constructors (beyond `length`).
    fn keywords() -> Vec<&'static str> {
        let mut known = vec!["options"];
        known.extend(args::FETCH_KEYWORDS);
        known
    }

    fn shown_options(options: &ObjectStoreOptions) -> String {
        let keys: Vec<String> = options.options.iter().map(|(k, _)| quoted(k)).collect();
        format!(
            ", options=[{}], timeout={}, retries={}",
            keys.join(", "),
            seconds_shown(options.fetch.timeout),
            options.fetch.retry.retries
        )
    }
}

dataset_methods!(ObjectStoreDataset, {
    #[new]
    #[pyo3(
        signature = (url, keys, **options),
        text_signature = "(url, keys, *, options=None, timeout=None, retries=3, backoff=0.1, \
                          max_backoff=5.0, max_bytes=67108864)"
    )]
    fn new(
        py: Python<'_>,
        url: &str,
        keys: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("ObjectStoreDataset", options, &Self::keywords())?;
        let keys = args::strs("keys", keys)?;
        let options = Self::options(&kw)?;
        let shown = format!(
            "ObjectStoreDataset({}, {} keys{})",
            quoted(&redact_url(url)),
            keys.len(),
            Self::shown_options(&options)
        );
        let inner = py
            .detach(|| dlrs_io::ObjectStoreDataset::new(url, keys, options))
            .map_err(|e| io_error(&e))?;
        Ok(Self { inner, shown })
    }

    /// A dataset of the objects whose keys, under the prefix of `url`, are made from `template`.
    #[classmethod]
    #[pyo3(
        signature = (url, template, columns=None, **options),
        text_signature = "($cls, url, template, columns=None, *, length=None, options=None, \
                          timeout=None, retries=3, backoff=0.1, max_backoff=5.0, \
                          max_bytes=67108864)"
    )]
    fn from_template(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        template: &str,
        columns: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut known = vec!["length"];
        known.extend(Self::keywords());
        let kw = args::Keywords::new("ObjectStoreDataset.from_template", options, &known)?;
        let columns = args::columns(columns)?;
        let length = args::length(kw.get("length"))?;
        let options = Self::options(&kw)?;
        let names: Vec<String> = columns.iter().map(|(n, _)| quoted(n)).collect();
        let shown_options = Self::shown_options(&options);
        let inner = py
            .detach(|| {
                dlrs_io::ObjectStoreDataset::from_template(url, template, columns, length, options)
            })
            .map_err(|e| io_error(&e))?;
        let shown = format!(
            "ObjectStoreDataset.from_template({}, {}, columns=[{}], length={}{shown_options})",
            quoted(&redact_url(url)),
            quoted(template),
            names.join(", "),
            inner.len(),
        );
        Ok(Self { inner, shown })
    }
});
