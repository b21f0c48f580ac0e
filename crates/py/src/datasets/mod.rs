//! The Rust datasets as Python classes (`HttpDataset`, `FileDataset`, `ObjectStoreDataset`,
//! `TarDataset`); the sources that load them are in [`crate::sources`]. The network ones take
//! a local cache (`cache_dir=`, `cache_bytes=`: a [`dlrs_io::Cached`] around the dataset).
//!
//! - The constructors' arguments are read by [`crate::args::datasets`].
//! - `tar_stream`: `TarStream`, tar shards read in order (an iterable dataset).
//!
//! The constructors release the interpreter around CPU work only (parsing, building clients),
//! not around a wait, so it is not sliced; `dataset[i]` waits through [`crate::seam`].

mod tar_stream;

pub use tar_stream::{TarStream, TarStreamIter};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyType};

use dlrs_io::{
    Cache, Cached, Column, Dataset, FetchOptions, HttpOptions, ObjectStoreOptions, Runtime,
    TarOptions, redact_url,
};

use crate::args::datasets as args;
use crate::errors::io_error;
use crate::seam::{SIGNAL_SLICE, Slice, wait_interruptibly};
use crate::text::wrong_type;

/// The runtime of `dataset[i]` outside any loader (one thread, built on first use).
fn getitem_runtime() -> PyResult<&'static Runtime> {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = Runtime::new(Some(1)).map_err(|e| io_error(&e))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// `build` run with the interpreter released (CPU work only), its error raised as Python's.
fn detached<T: Send>(
    py: Python<'_>,
    build: impl FnOnce() -> Result<T, dlrs_io::Error> + Send,
) -> PyResult<T> {
    crate::seam::run_detached(py, build).map_err(|e| io_error(&e))
}

/// `len(dataset)`: Python's lengths are `Py_ssize_t`.
fn py_len(dataset: &dyn Dataset) -> usize {
    usize::try_from(dataset.len()).unwrap_or(usize::MAX)
}

/// Runs `future` on the runtime of `dataset[i]` on the calling thread, with the interpreter
/// released and Ctrl-C checked.
fn wait_for<T: Send>(
    py: Python<'_>,
    future: impl std::future::Future<Output = Result<T, dlrs_io::Error>> + Send,
) -> PyResult<T> {
    let runtime = getitem_runtime()?;
    // Pinned here, so a slice that ends leaves the future running for the next one.
    let mut future = std::pin::pin!(future);
    let outcome = wait_interruptibly(py, |slice| {
        let slice = slice.unwrap_or(SIGNAL_SLICE);
        match runtime.block_on_checked(future.as_mut(), slice, || Err(())) {
            Ok(Err(())) => Slice::Pending,
            Err(e) | Ok(Ok(Err(e))) => Slice::Ready(Err(e)),
            Ok(Ok(Ok(value))) => Slice::Ready(Ok(value)),
        }
    })?;
    outcome.map_err(|e| io_error(&e))
}

/// Fetches item `index` (negative counts from the end) on the calling thread, with the
/// interpreter released and Ctrl-C checked.
fn fetch_bytes(py: Python<'_>, dataset: &dyn Dataset, index: isize) -> PyResult<bytes::Bytes> {
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
    wait_for(py, dataset.fetch(i))
}

/// What a Python class of a Rust dataset holds: the dataset, its local cache and its repr.
struct Parts<D> {
    inner: D,
    cache: Option<Arc<Cache>>,
    /// What the dataset was made from, without secrets (no query, no header values).
    shown: String,
}

impl<D: Dataset + Clone + 'static> Parts<D> {
    /// `inner` with `cache`, shown as `head`, then the cache's keywords and `)`.
    fn new(inner: D, cache: Option<Arc<Cache>>, head: &str) -> Self {
        let shown = format!("{head}{})", shown_cache(cache.as_ref()));
        Self {
            inner,
            cache,
            shown,
        }
    }

    /// The dataset, read through its cache if it has one.
    fn dataset(&self) -> Arc<dyn Dataset> {
        through(Arc::new(self.inner.clone()), self.cache.as_ref())
    }
}

/// How a Python class of a Rust dataset shows an item.
trait RustClass {
    /// An item as Python sees it: its bytes, unless the class says otherwise.
    fn item<'py>(&self, py: Python<'py>, bytes: &bytes::Bytes) -> PyResult<Bound<'py, PyAny>> {
        Ok(PyBytes::new(py, bytes).into_any())
    }
}

/// What every `from_template` reads after its keywords: the columns and `length`, then the
/// class's options (with their repr) and cache. `build` makes the dataset without the
/// interpreter; it is shown as `head`, the columns, its length and the options.
fn templated<D, O: Send>(
    py: Python<'_>,
    kw: &args::Keywords<'_>,
    columns: Option<&Bound<'_, PyAny>>,
    options: impl FnOnce(&args::Keywords<'_>) -> PyResult<(O, String)>,
    head: &str,
    build: impl FnOnce(Vec<(String, Column)>, Option<usize>, O) -> Result<D, dlrs_io::Error> + Send,
) -> PyResult<Parts<D>>
where
    D: Dataset + Clone + Send + 'static,
{
    let columns = args::columns(columns)?;
    let length = args::length(kw.get("length"))?;
    let (options, shown_options) = options(kw)?;
    let cache = cache_arg(py, kw)?;
    let names = shown_columns(&columns);
    let inner = detached(py, || build(columns, length, options))?;
    let head = format!(
        "{head}, columns=[{names}], length={}{shown_options}",
        inner.len()
    );
    Ok(Parts::new(inner, cache, &head))
}

/// `dataset`, read through `cache` if there is one.
fn through(dataset: Arc<dyn Dataset>, cache: Option<&Arc<Cache>>) -> Arc<dyn Dataset> {
    match cache {
        Some(cache) => Arc::new(Cached::new(dataset, cache.clone())),
        None => dataset,
    }
}

/// The keywords of a local cache.
const CACHE_KEYWORDS: [&str; 2] = ["cache_dir", "cache_bytes"];

/// The cache `cache_dir=` and `cache_bytes=` ask for (opened now), or none.
fn cache_arg(py: Python<'_>, kw: &args::Keywords<'_>) -> PyResult<Option<Arc<Cache>>> {
    let budget = kw
        .get("cache_bytes")
        .map(|v| args::non_negative("cache_bytes", v))
        .transpose()?;
    let Some(dir) = kw.get("cache_dir") else {
        if budget.is_some() {
            return Err(PyValueError::new_err(
                "cache_bytes is the budget of a cache: give cache_dir too",
            ));
        }
        return Ok(None);
    };
    let dir: std::path::PathBuf = dir
        .extract()
        .map_err(|_| wrong_type("cache_dir must be a str or os.PathLike", dir))?;
    let cache = detached(py, || Cache::open(dir, budget))?;
    Ok(Some(cache))
}

/// `, cache_dir=..., cache_bytes=...` for a repr.
fn shown_cache(cache: Option<&Arc<Cache>>) -> String {
    match cache {
        Some(cache) => {
            let budget = match cache.budget() {
                u64::MAX => "None".to_owned(),
                b => b.to_string(),
            };
            format!(
                ", cache_dir={}, cache_bytes={budget}",
                quoted(&cache.dir().to_string_lossy())
            )
        }
        None => String::new(),
    }
}

/// What the cache of a dataset did, as a dict, or None without a cache.
fn cache_stats<'py>(
    py: Python<'py>,
    cache: Option<&Arc<Cache>>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(cache) = cache else {
        return Ok(None);
    };
    let s = cache.snapshot();
    let d = PyDict::new(py);
    d.set_item("hits", s.hits)?;
    d.set_item("misses", s.misses)?;
    d.set_item("written", s.written)?;
    d.set_item("not_admitted", s.not_admitted)?;
    d.set_item("corrupt", s.corrupt)?;
    d.set_item("evicted", s.evicted)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("writes_off", s.writes_off)?;
    Ok(Some(d))
}

/// Whether the items of the Rust dataset `obj` are `TarDataset` samples (dicts), not bytes.
pub fn yields_tar_samples(obj: &Bound<'_, PyAny>) -> bool {
    obj.cast::<TarDataset>()
        .is_ok_and(|d| d.get().0.inner.member().is_none())
}

/// The Rust dataset behind a Python object, or TypeError.
pub fn rust_dataset(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn Dataset>> {
    if let Ok(d) = obj.cast::<HttpDataset>() {
        return Ok(d.get().0.dataset());
    }
    if let Ok(d) = obj.cast::<FileDataset>() {
        return Ok(d.get().0.dataset());
    }
    if let Ok(d) = obj.cast::<ObjectStoreDataset>() {
        return Ok(d.get().0.dataset());
    }
    if let Ok(d) = obj.cast::<TarDataset>() {
        return Ok(d.get().0.dataset());
    }
    Err(wrong_type(
        "expected HttpDataset, FileDataset, ObjectStoreDataset or TarDataset",
        obj,
    ))
}

fn seconds_shown(d: Option<Duration>) -> String {
    d.map_or_else(|| "None".to_owned(), |d| format!("{:?}", d.as_secs_f64()))
}

/// The keywords of `what`, a `from_template`: `length`, then `keywords`, its constructor's.
fn template_keywords<'py>(
    what: &str,
    options: Option<&Bound<'py, PyDict>>,
    keywords: &[&str],
) -> PyResult<args::Keywords<'py>> {
    let mut known = vec!["length"];
    known.extend(keywords);
    args::Keywords::new(what, options, &known)
}

/// The names of a template's columns as a `repr` shows them: quoted, comma-separated.
fn shown_columns(columns: &[(String, Column)]) -> String {
    let names: Vec<String> = columns.iter().map(|(n, _)| quoted(n)).collect();
    names.join(", ")
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The start of a dataset's repr: `Name(3 URLs, first 'a'`, the first item shown by `show`.
fn listed<T>(name: &str, noun: &str, items: &[T], show: impl Fn(&T) -> String) -> String {
    let first = items
        .first()
        .map_or_else(String::new, |i| format!(", first {}", quoted(&show(i))));
    format!("{name}({} {noun}{first}", items.len())
}

/// `, member='jpg'` for a repr, or nothing.
fn shown_member(options: &TarOptions) -> String {
    options
        .member
        .as_deref()
        .map_or_else(String::new, |m| format!(", member={}", quoted(m)))
}

// The constructors read `retries` and `max_bytes` with `args` (messages of their own; `None`
// means "not given", and the default depends on the dataset), so each `text_signature` shows
// the defaults, as `_native.pyi` does; stubtest compares the two, and
// tests/test_rust_datasets.py checks that passing those defaults changes nothing.

/// The `#[pymethods]` of a Rust dataset class: its constructors and own methods (`{ ... }`),
/// then what every one has: `len()`, `dataset[i]` (one item fetched now, on the calling
/// thread, for a look at the data; loaders fetch many at once; through the cache if there is
/// one) and its `repr`; with `cached`, also `cache_stats()`.
macro_rules! dataset_methods {
    ($class:ident, { $($methods:tt)* }) => {
        dataset_methods!(@impl $class, { $($methods)* }, {});
    };
    ($class:ident, cached, { $($methods:tt)* }) => {
        dataset_methods!(@impl $class, { $($methods)* }, {
            /// What the local cache did (hits, misses, written, not_admitted, corrupt,
            /// evicted, bytes, writes_off), or None without one.
            fn cache_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
                cache_stats(py, self.0.cache.as_ref())
            }
        });
    };
    (@impl $class:ident, { $($methods:tt)* }, { $($extra:tt)* }) => {
        #[pymethods]
        impl $class {
            $($methods)*

            $($extra)*

            fn __len__(&self) -> usize {
                py_len(&self.0.inner)
            }

            fn __getitem__<'py>(&self, py: Python<'py>, index: isize) -> PyResult<Bound<'py, PyAny>> {
                let bytes = fetch_bytes(py, &*self.0.dataset(), index)?;
                self.item(py, &bytes)
            }

            fn __repr__(&self) -> String {
                self.0.shown.clone()
            }
        }
    };
}

/// Item i is the body of a GET request to `urls[i]` (or to the URL a template makes).
#[pyclass(frozen, module = "dataloader_rs._native", name = "HttpDataset")]
pub struct HttpDataset(Parts<dlrs_io::HttpDataset>);

impl HttpDataset {
    /// The keywords of the constructors (beyond `length`).
    fn keywords() -> Vec<&'static str> {
        keywords(
            &["headers", "connect_timeout"],
            &[&args::FETCH_KEYWORDS, &CACHE_KEYWORDS],
        )
    }

    /// The options and their repr (header names only).
    fn options(kw: &args::Keywords<'_>) -> PyResult<(HttpOptions, String)> {
        let headers = args::str_pairs("headers", kw.get("headers"))?;
        let connect_timeout = kw.seconds("connect_timeout", Some(Duration::from_secs(10)))?;
        let fetch = kw.fetch(FetchOptions::HTTP)?;
        let mut shown = String::new();
        if !headers.is_empty() {
            let names: Vec<String> = headers.iter().map(|(k, _)| quoted(k)).collect();
            shown.push_str(&format!(", headers=[{}]", names.join(", ")));
        }
        shown.push_str(&shown_fetch(&fetch));
        let options = HttpOptions {
            fetch,
            headers,
            connect_timeout,
        };
        Ok((options, shown))
    }
}

impl RustClass for HttpDataset {}

dataset_methods!(HttpDataset, cached, {
    #[new]
    #[pyo3(
        signature = (urls, **options),
        text_signature = "(urls, *, headers=None, timeout=30.0, connect_timeout=10.0, retries=3, \
                          backoff=0.1, max_backoff=5.0, max_bytes=67108864, cache_dir=None, \
                          cache_bytes=None)"
    )]
    fn new(
        py: Python<'_>,
        urls: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("HttpDataset", options, &Self::keywords())?;
        let urls = args::strs("urls", urls)?;
        let (options, shown_options) = Self::options(&kw)?;
        let cache = cache_arg(py, &kw)?;
        let head = listed("HttpDataset", "URLs", &urls, |u| redact_url(u)) + &shown_options;
        let inner = detached(py, || dlrs_io::HttpDataset::new(urls, options))?;
        Ok(Self(Parts::new(inner, cache, &head)))
    }

    /// A dataset of the URLs made from `template` with the values of `columns` (and `{index}`).
    #[classmethod]
    #[pyo3(
        signature = (template, columns=None, **options),
        text_signature = "($cls, template, columns=None, *, length=None, headers=None, \
                          timeout=30.0, connect_timeout=10.0, retries=3, backoff=0.1, \
                          max_backoff=5.0, max_bytes=67108864, cache_dir=None, cache_bytes=None)"
    )]
    fn from_template(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        template: &str,
        columns: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = template_keywords("HttpDataset.from_template", options, &Self::keywords())?;
        let head = format!(
            "HttpDataset.from_template({}",
            quoted(&redact_url(template))
        );
        let build = |c, l, o| dlrs_io::HttpDataset::from_template(template, c, l, o);
        let parts = templated(py, &kw, columns, Self::options, &head, build)?;
        Ok(Self(parts))
    }
});

/// `, timeout=..., retries=...` for a repr.
fn shown_fetch(fetch: &FetchOptions) -> String {
    format!(
        ", timeout={}, retries={}",
        seconds_shown(fetch.timeout),
        fetch.retry.retries
    )
}

/// Item i is the content of `paths[i]` (or of the path a template makes).
#[pyclass(frozen, module = "dataloader_rs._native", name = "FileDataset")]
pub struct FileDataset(Parts<dlrs_io::FileDataset>);

impl FileDataset {
    /// The options and their repr.
    fn options(kw: &args::Keywords<'_>) -> PyResult<(FetchOptions, String)> {
        let fetch = kw.fetch(FetchOptions::FILE)?;
        let shown = shown_fetch(&fetch);
        Ok((fetch, shown))
    }
}

impl RustClass for FileDataset {}

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
        let (options, shown_options) = Self::options(&kw)?;
        let head = listed("FileDataset", "paths", &paths, |p| {
            p.to_string_lossy().into_owned()
        }) + &shown_options;
        let inner = detached(py, || dlrs_io::FileDataset::new(paths, options))?;
        Ok(Self(Parts::new(inner, None, &head)))
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
        let kw = template_keywords("FileDataset.from_template", options, &args::FETCH_KEYWORDS)?;
        let template = args::path("template", 0, template)
            .map_err(|_| PyTypeError::new_err("template must be a str or os.PathLike"))?;
        let template = template
            .to_str()
            .ok_or_else(|| PyTypeError::new_err("template must be valid UTF-8"))?
            .to_owned();
        let head = format!("FileDataset.from_template({}", quoted(&template));
        let build = |c, l, o| dlrs_io::FileDataset::from_template(&template, c, l, o);
        let parts = templated(py, &kw, columns, Self::options, &head, build)?;
        Ok(Self(parts))
    }
});

/// Item i is the object `keys[i]` (or the key a template makes) under the store and prefix of
/// a URL.
#[pyclass(frozen, module = "dataloader_rs._native", name = "ObjectStoreDataset")]
pub struct ObjectStoreDataset(Parts<dlrs_io::ObjectStoreDataset>);

impl ObjectStoreDataset {
    /// The options and their repr (option names only).
    fn options(kw: &args::Keywords<'_>) -> PyResult<(ObjectStoreOptions, String)> {
        let options = args::str_pairs("options", kw.get("options"))?;
        let fetch = kw.fetch(FetchOptions::OBJECT_STORE)?;
        let keys: Vec<String> = options.iter().map(|(k, _)| quoted(k)).collect();
        let shown = format!(", options=[{}]{}", keys.join(", "), shown_fetch(&fetch));
        Ok((ObjectStoreOptions { options, fetch }, shown))
    }

    /// The keywords of the constructors (beyond `length`).
    fn keywords() -> Vec<&'static str> {
        keywords(&["options"], &[&args::FETCH_KEYWORDS, &CACHE_KEYWORDS])
    }
}

impl RustClass for ObjectStoreDataset {}

dataset_methods!(ObjectStoreDataset, cached, {
    #[new]
    #[pyo3(
        signature = (url, keys, **options),
        text_signature = "(url, keys, *, options=None, timeout=None, retries=3, backoff=0.1, \
                          max_backoff=5.0, max_bytes=67108864, cache_dir=None, cache_bytes=None)"
    )]
    fn new(
        py: Python<'_>,
        url: &str,
        keys: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("ObjectStoreDataset", options, &Self::keywords())?;
        let keys = args::strs("keys", keys)?;
        let (options, shown_options) = Self::options(&kw)?;
        let cache = cache_arg(py, &kw)?;
        let head = format!(
            "ObjectStoreDataset({}, {} keys{shown_options}",
            quoted(&redact_url(url)),
            keys.len()
        );
        let inner = detached(py, || dlrs_io::ObjectStoreDataset::new(url, keys, options))?;
        Ok(Self(Parts::new(inner, cache, &head)))
    }

    /// A dataset of the objects whose keys, under the prefix of `url`, are made from `template`.
    #[classmethod]
    #[pyo3(
        signature = (url, template, columns=None, **options),
        text_signature = "($cls, url, template, columns=None, *, length=None, options=None, \
                          timeout=None, retries=3, backoff=0.1, max_backoff=5.0, \
                          max_bytes=67108864, cache_dir=None, cache_bytes=None)"
    )]
    fn from_template(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        template: &str,
        columns: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let what = "ObjectStoreDataset.from_template";
        let kw = template_keywords(what, options, &Self::keywords())?;
        let head = format!("{what}({}, {}", quoted(&redact_url(url)), quoted(template));
        let build = |c, l, o| dlrs_io::ObjectStoreDataset::from_template(url, template, c, l, o);
        let parts = templated(py, &kw, columns, Self::options, &head, build)?;
        Ok(Self(parts))
    }
});

/// Item i is sample i of tar shards (WebDataset layout) at paths, http(s) or object-store
/// URLs: a dict `{extension: bytes}`, or with `member=` that member's bytes.
#[pyclass(frozen, module = "dataloader_rs._native", name = "TarDataset")]
pub struct TarDataset(Parts<dlrs_io::TarDataset>);

impl TarDataset {
    fn keywords() -> Vec<&'static str> {
        let groups = [&TAR_KEYWORDS[..], &args::FETCH_KEYWORDS, &CACHE_KEYWORDS];
        keywords(&["index_dir"], &groups)
    }
}

/// The shards' locations: str (a path or a URL) or os.PathLike, as str.
fn locations(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(format!(
            "locations must be a sequence of str or os.PathLike, not a single {}",
            crate::text::type_name(value)
        )));
    }
    let iter = value
        .try_iter()
        .map_err(|_| wrong_type("locations must be a sequence of str or os.PathLike", value))?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        if let Ok(s) = item.cast::<PyString>() {
            out.push(s.to_str()?.to_owned());
            continue;
        }
        let path = args::path("locations", i, &item)?;
        let text = path.to_str().ok_or_else(|| {
            PyValueError::new_err(format!("locations: item {i} is not valid UTF-8"))
        })?;
        out.push(text.to_owned());
    }
    Ok(out)
}

impl RustClass for TarDataset {
    /// `{extension: bytes}`, or the member's bytes with `member=`.
    fn item<'py>(&self, py: Python<'py>, bytes: &bytes::Bytes) -> PyResult<Bound<'py, PyAny>> {
        if self.0.inner.member().is_some() {
            return Ok(PyBytes::new(py, bytes).into_any());
        }
        Ok(crate::pipeline::tar_sample(py, bytes)?.into_any())
    }
}

/// The keywords [`tar_options`] reads beyond the fetch options.
const TAR_KEYWORDS: [&str; 4] = ["member", "headers", "options", "connect_timeout"];

/// A constructor's keywords: its own, then those of the option groups it reads.
fn keywords(own: &[&'static str], groups: &[&[&'static str]]) -> Vec<&'static str> {
    let mut known = own.to_vec();
    for group in groups {
        known.extend_from_slice(group);
    }
    known
}

/// The options a tar dataset or stream reads from its keywords, `index_dir` left unset.
fn tar_options(kw: &args::Keywords<'_>) -> PyResult<TarOptions> {
    let member = match kw.get("member") {
        None => None,
        Some(m) => Some(
            m.cast::<PyString>()
                .map_err(|_| wrong_type("member must be a str (an extension such as 'jpg')", m))?
                .to_str()?
                .to_ascii_lowercase(),
        ),
    };
    Ok(TarOptions {
        headers: args::str_pairs("headers", kw.get("headers"))?,
        store_options: args::str_pairs("options", kw.get("options"))?,
        connect_timeout: kw.seconds("connect_timeout", Some(Duration::from_secs(10)))?,
        fetch: kw.fetch(FetchOptions::HTTP)?,
        member,
        index_dir: None,
    })
}

dataset_methods!(TarDataset, cached, {
    #[new]
    #[pyo3(
        signature = (locations, **options),
        text_signature = "(locations, *, member=None, index_dir=None, cache_dir=None, \
                          cache_bytes=None, headers=None, options=None, timeout=30.0, \
                          connect_timeout=10.0, retries=3, backoff=0.1, max_backoff=5.0, \
                          max_bytes=67108864)"
    )]
    fn new(
        py: Python<'_>,
        locations: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let kw = args::Keywords::new("TarDataset", options, &Self::keywords())?;
        let locations = self::locations(locations)?;
        let mut options = tar_options(&kw)?;
        let cache = cache_arg(py, &kw)?;
        options.index_dir = match kw.get("index_dir") {
            Some(dir) => Some(
                dir.extract::<std::path::PathBuf>()
                    .map_err(|_| wrong_type("index_dir must be a str or os.PathLike", dir))?,
            ),
            None => match &cache {
                Some(cache) => Some(cache.dir().join("tar-index")),
                None => dlrs_io::tar::default_index_dir(),
            },
        };
        let listed = listed("TarDataset", "shards", &locations, |l| redact_url(l));
        let member = shown_member(&options);
        let inner = wait_for(py, dlrs_io::TarDataset::open(locations, options))?;
        let head = format!("{listed}, {} samples{member}", inner.len());
        Ok(Self(Parts::new(inner, cache, &head)))
    }

    /// The key of sample `index` (`'000123'` for `000123.jpg`), read from the index.
    fn key(&self, index: u64) -> PyResult<String> {
        self.0.inner.key(index).map(str::to_owned).ok_or_else(|| {
            PyIndexError::new_err(format!(
                "index {index} is out of range for a dataset of {} items",
                self.0.inner.len()
            ))
        })
    }

    /// The number of shards.
    #[getter]
    fn num_shards(&self) -> usize {
        self.0.inner.shards()
    }

    /// The member an item is (`member=`), or None: the whole sample.
    #[getter]
    fn member(&self) -> Option<&str> {
        self.0.inner.member()
    }
});
