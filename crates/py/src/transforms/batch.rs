//! `ImageCollator` and `ImageBatch`: images stacked into one buffer in Rust, handed to numpy and
//! torch as writable views (buffer protocol, DLPack) that keep the buffer alive; the buffer goes
//! back to the collator's pool when the last view is gone.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use dlrs_transforms::{Batch, BatchLayout, Collator, Dtype, Image};

use super::dlpack::{self, BatchData, Owner, View};
use super::image::PyImage;
use crate::errors::image_error;

/// One batch of images in one contiguous buffer: `(n, c, h, w)` or `(n, h, w, c)`.
#[pyclass(frozen, module = "dataloader_rs", name = "ImageBatch")]
pub struct ImageBatch {
    data: Arc<BatchData>,
}

impl ImageBatch {
    pub fn new(batch: Batch) -> Self {
        Self {
            data: Arc::new(BatchData::new(batch)),
        }
    }

    fn batch(&self) -> &Batch {
        &self.data.batch
    }
}

dlpack::export_methods!(
    ImageBatch,
    buffer = "A writable, C-contiguous view of the buffer.",
    dlpack = "A DLPack capsule of the buffer: a writable view (or a copy with `copy=True`).",
    {
        #[getter]
        fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
            PyTuple::new(py, self.batch().shape())
        }

        /// "uint8" or "float32".
        #[getter]
        fn dtype(&self) -> &'static str {
            self.batch().dtype().name()
        }

        /// "NCHW" or "NHWC".
        #[getter]
        fn layout(&self) -> String {
            self.batch().layout().to_string()
        }

        #[getter]
        fn nbytes(&self) -> usize {
            self.batch().nbytes()
        }

        /// The number of images.
        fn __len__(&self) -> usize {
            self.batch().len()
        }

        fn __repr__(&self) -> String {
            let s = self.batch().shape();
            format!(
                "ImageBatch(shape=({}, {}, {}, {}), dtype={}, layout={})",
                s[0],
                s[1],
                s[2],
                s[3],
                self.batch().dtype(),
                self.batch().layout()
            )
        }
    }
);

// SAFETY: `data.ptr` addresses the batch's `nbytes` bytes, writable through it (see
// `BatchData`), alive as long as the `Arc<BatchData>` the view owns and `self` holds.
unsafe impl dlpack::Export for ImageBatch {
    fn view(&self) -> View {
        View {
            data: self.data.ptr.as_ptr(),
            dtype: self.batch().dtype(),
            shape: self.batch().shape().to_vec(),
            readonly: false,
            owner: Owner::Batch(Arc::clone(&self.data)),
        }
    }
}

/// `ImageCollator(layout="NCHW", dtype=None, buffers=0)`.
#[pyclass(frozen, module = "dataloader_rs", name = "ImageCollator")]
pub struct ImageCollator {
    inner: Collator,
}

impl ImageCollator {
    /// The Rust collator (clones share the buffer pool).
    pub fn collator(&self) -> Collator {
        self.inner.clone()
    }
}

/// A dtype argument: None, "uint8" / "float32", or a numpy dtype or type of those.
fn dtype_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Dtype>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    let name: Option<String> = obj
        .extract::<String>()
        .ok()
        .or_else(|| obj.getattr("name").ok()?.extract().ok())
        .or_else(|| obj.getattr("__name__").ok()?.extract().ok());
    match name.as_deref() {
        Some("uint8") => Ok(Some(Dtype::U8)),
        Some("float32") => Ok(Some(Dtype::F32)),
        Some(other) if obj.extract::<String>().is_ok() => Err(PyValueError::new_err(format!(
            "ImageCollator: dtype must be \"uint8\", \"float32\" or None, got {other:?}"
        ))),
        _ => Err(PyTypeError::new_err(format!(
            "ImageCollator: dtype must be \"uint8\", \"float32\" or None, got {}",
            obj.repr()?
        ))),
    }
}

#[pymethods]
impl ImageCollator {
    #[new]
    // None: not given (the arguments are read with messages of their own); the text signature
    // shows the defaults, as `_native.pyi` does.
    #[pyo3(
        signature = (layout = None, dtype = None, buffers = None),
        text_signature = "(layout=\"NCHW\", dtype=None, buffers=0)"
    )]
    fn new(
        layout: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
        buffers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let layout: String = match layout {
            None => "NCHW".to_owned(),
            Some(l) => l.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "ImageCollator: layout must be \"NCHW\" or \"NHWC\", got {}",
                    crate::text::shown(l)
                ))
            })?,
        };
        let layout: BatchLayout = layout.parse().map_err(|e| image_error(&e))?;
        let dtype = dtype_arg(dtype)?;
        let buffers = match buffers {
            None => 0,
            Some(b) => crate::args::int_arg("ImageCollator", "buffers", b, 0, None)? as usize,
        };
        Ok(Self {
            inner: Collator::new(layout, dtype, buffers),
        })
    }

    #[getter]
    fn layout(&self) -> String {
        self.inner.layout().to_string()
    }

    #[getter]
    fn dtype(&self) -> Option<&'static str> {
        self.inner.dtype().map(Dtype::name)
    }

    #[getter]
    fn buffers(&self) -> usize {
        self.inner.buffers()
    }

    /// How many buffers of dropped batches wait for reuse now.
    #[getter]
    fn pooled(&self) -> usize {
        self.inner.pooled()
    }

    fn __repr__(&self) -> String {
        format!(
            "ImageCollator(layout={:?}, dtype={}, buffers={})",
            self.inner.layout().to_string(),
            self.inner
                .dtype()
                .map_or_else(|| "None".to_owned(), |d| format!("{:?}", d.name())),
            self.inner.buffers()
        )
    }

    /// Collates a list of Images (or of `(Image, metadata)` pairs, giving
    /// `(batch, [metadata])`), with the interpreter released while the batch is written.
    fn __call__(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let list = match items.cast::<PyList>() {
            Ok(l) => l.clone(),
            Err(_) => PyList::new(py, items.try_iter()?.collect::<PyResult<Vec<_>>>()?)?,
        };
        collate_list(py, &self.inner, &list)
    }
}

/// The images of a batch, and the metadata of each when the items are `(Image, metadata)`.
type ImagesAndMeta = (Vec<Arc<Image>>, Option<Vec<Py<PyAny>>>);

/// The images of a list of samples (and their metadata when the samples are pairs).
fn images_of(list: &Bound<'_, PyList>) -> PyResult<ImagesAndMeta> {
    let mut images = Vec::with_capacity(list.len());
    let mut meta: Option<Vec<Py<PyAny>>> = None;
    for (i, item) in list.iter().enumerate() {
        if let Ok(im) = item.cast::<PyImage>() {
            if meta.is_some() {
                return Err(mixed(i));
            }
            images.push(im.get().shared());
            continue;
        }
        if let Ok(t) = item.cast::<PyTuple>()
            && t.len() == 2
            && let Ok(im) = t.get_item(0)?.cast::<PyImage>()
        {
            if i > 0 && meta.is_none() {
                return Err(mixed(i));
            }
            images.push(im.get().shared());
            meta.get_or_insert_with(Vec::new)
                .push(t.get_item(1)?.unbind());
            continue;
        }
        return Err(PyTypeError::new_err(format!(
            "ImageCollator takes Image objects or (Image, metadata) pairs; item {i} of the batch is \
             {} (make an Image with a dataloader_rs.transforms transform or Image.from_array)",
            crate::text::type_name(&item)
        )));
    }
    Ok((images, meta))
}

fn mixed(i: usize) -> PyErr {
    PyTypeError::new_err(format!(
        "ImageCollator: item {i} of the batch mixes Image objects and (Image, metadata) pairs"
    ))
}

/// Collates a Python list of samples with `collator`, the interpreter released while the
/// batch is written.
pub fn collate_list(
    py: Python<'_>,
    collator: &Collator,
    list: &Bound<'_, PyList>,
) -> PyResult<Py<PyAny>> {
    let (images, meta) = images_of(list)?;
    let batch = crate::seam::run_detached(py, || {
        let refs: Vec<&Image> = images.iter().map(AsRef::as_ref).collect();
        collator.collate_refs(&refs)
    })
    .map_err(|e| image_error(&e))?;
    let batch = Bound::new(py, ImageBatch::new(batch))?.into_any();
    match meta {
        None => Ok(batch.unbind()),
        Some(meta) => Ok(
            PyTuple::new(py, [batch, PyList::new(py, meta)?.into_any()])?
                .into_any()
                .unbind(),
        ),
    }
}
