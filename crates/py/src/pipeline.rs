//! What the loader does to every item after the dataset fetched it: the `transform`, then the
//! collation into a batch, and the `(batch, indices)` pair of `return_indices`.
//!
//! A sample is either a Python object or a native item (bytes fetched in Rust, an image
//! decoded in Rust). Python transforms and collate functions take the interpreter for their
//! call only; native ones (the `dataloader_rs.transforms` classes, `ImageCollator`) never take
//! it: with a Rust dataset, a batch is fetched, decoded and collated without the interpreter,
//! which is taken once at the end to make the `ImageBatch` object.

use std::sync::Arc;

use dlrs_core::ItemStats;
use pyo3::PyTraverseError;
use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use dlrs_transforms::{Collator, Image, Item, Transform};

use crate::errors::{image_error, io_error, no_stop_iteration};
use crate::run::Skipper;
use crate::transforms::batch::{ImageBatch, ImageCollator, collate_list};
use crate::transforms::fixed::{PyTransform, item_from_py, item_into_py};
use crate::transforms::text::{TextStep, Tokenize};
use crate::worker::ItemInfo;

/// One item between the dataset and the batch.
pub enum Sample {
    /// A Python object (what a Python dataset or a Python transform returned).
    Py(Py<PyAny>),
    /// Bytes fetched in Rust.
    Bytes(bytes::Bytes),
    /// A sample of a `TarDataset` (its tar fragment), a dict `{extension: bytes}` in Python.
    Tar(bytes::Bytes),
    /// An item made by a native transform (an image, or bytes it let through).
    Native(Item),
}

impl Sample {
    /// The sample as a Python object (bytes become `bytes`, images `Image`).
    pub fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            Self::Py(obj) => Ok(obj.into_bound(py)),
            Self::Bytes(b) => Ok(PyBytes::new(py, &b).into_any()),
            Self::Tar(b) => Ok(tar_sample(py, &b)?.into_any()),
            Self::Native(item) => item_into_py(py, item),
        }
    }
}

/// A `TarDataset` item, the tar fragment of one sample, as `{extension: bytes}`.
pub fn tar_sample<'py>(py: Python<'py>, fragment: &bytes::Bytes) -> PyResult<Bound<'py, PyDict>> {
    let sample = dlrs_io::Sample::from_fragment(fragment).map_err(|e| io_error(&e))?;
    let dict = PyDict::new(py);
    for (ext, data) in sample.members() {
        dict.set_item(ext, PyBytes::new(py, data))?;
    }
    Ok(dict)
}

/// The per-item transform.
pub enum ItemTransform {
    /// A Python callable, called as `f(index, sample)` when `takes_index`, else `f(sample)`
    /// (`_loader.py` tells which from its signature).
    Python {
        /// The callable.
        f: Py<PyAny>,
        /// Called with the item's index first.
        takes_index: bool,
    },
    /// A `dataloader_rs.transforms` object (a Compose or a single transform), run in Rust.
    Native(Arc<dyn Transform>),
    /// A `dataloader_rs.text.Tokenize`: texts tokenised in Rust.
    Text(Arc<TextStep>),
}

/// How the samples of a batch become a batch.
pub enum Collate {
    /// A Python list of the samples.
    List,
    /// `collate_fn(list_of_samples)` in Python.
    Python(Py<PyAny>),
    /// `ImageCollator`: one `ImageBatch` (with `[metadata]` for `(Image, metadata)` items).
    Images(Collator),
}

/// The transform, the collation and `return_indices` of one loader.
pub struct Pipeline {
    pub transform: Option<ItemTransform>,
    pub collate: Collate,
    pub return_indices: bool,
    /// What `get_worker_info()` and `item_seed()` report on this loader's threads.
    pub info: ItemInfo,
    /// The loader's per-item counters (every source has a pipeline; the sources count fetches).
    pub stats: Arc<ItemStats>,
    /// Skips failed items of a Rust or async source (a Python source has its own in `Calls`).
    pub skipper: Arc<Skipper>,
    /// The items are `TarDataset` samples (dicts in Python), not bytes.
    pub tar_samples: bool,
}

/// A loaded batch and the number of items in it (fewer than its indices when some were skipped).
pub struct Loaded {
    pub batch: Py<PyAny>,
    pub items: usize,
    /// A stream's reader had no items for this batch: nothing to hand out (see
    /// `sources::stream`).
    pub dry: bool,
}

impl Loaded {
    pub fn new(batch: Py<PyAny>, items: usize) -> Self {
        Self {
            batch,
            items,
            dry: false,
        }
    }

    /// The place of a batch a stream's reader had no items for.
    pub fn dry(py: Python<'_>) -> Self {
        Self {
            batch: py.None(),
            items: 0,
            dry: true,
        }
    }
}

impl Pipeline {
    /// The pipeline of `PyDataloader(transform=..., collate_fn=..., return_indices=...)`:
    /// a `dataloader_rs.transforms` object runs in Rust, `ImageCollator` collates in Rust;
    /// anything else is a Python callable (`takes_index`: called as `f(index, sample)`).
    pub fn from_py(
        py: Python<'_>,
        transform: Option<Py<PyAny>>,
        takes_index: bool,
        collate_fn: Option<Py<PyAny>>,
        return_indices: bool,
    ) -> Self {
        {
            let transform = transform.map(|t| {
                let bound = t.bind(py);
                if let Ok(native) = bound.cast::<PyTransform>() {
                    ItemTransform::Native(native.get().transform())
                } else if let Ok(text) = bound.cast::<Tokenize>() {
                    ItemTransform::Text(text.get().step())
                } else {
                    ItemTransform::Python { f: t, takes_index }
                }
            });
            let collate = match collate_fn {
                None => Collate::List,
                Some(c) => match c.bind(py).cast::<ImageCollator>() {
                    Ok(ic) => Collate::Images(ic.get().collator()),
                    Err(_) => Collate::Python(c),
                },
            };
            Self {
                transform,
                collate,
                return_indices,
                info: ItemInfo::default(),
                stats: Arc::default(),
                skipper: Arc::default(),
                tar_samples: false,
            }
        }
    }

    /// Transforms a Python sample on a thread that holds the interpreter; a native transform
    /// runs with it released.
    #[inline]
    pub fn transform_attached<'py>(
        &self,
        py: Python<'py>,
        index: u64,
        sample: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(transform) = &self.transform else {
            return Ok(sample);
        };
        let started = self.stats.transform_clock();
        let out = match transform {
            ItemTransform::Python { f, takes_index } => {
                call_transform(f.bind(py), *takes_index, index, sample)
            }
            ItemTransform::Native(t) => {
                let item = item_from_py(&sample)?;
                drop(sample);
                let key = self.info.key(index);
                let out = crate::seam::run_detached(py, || t.apply_keyed(key, item))
                    .map_err(|e| image_error(&e))?;
                item_into_py(py, out)
            }
            ItemTransform::Text(step) => step.apply_attached(sample),
        };
        self.stats.transform_took(started);
        out
    }

    /// Whether the transform takes a batch's items at once ([`Self::transform_batch_attached`]);
    /// the others take them one by one.
    pub fn transforms_by_batch(&self) -> bool {
        matches!(self.transform, Some(ItemTransform::Text(_)))
    }

    /// Transforms the items of a batch on a thread that holds the interpreter, as
    /// [`Self::transform_attached`] does one by one; a `Tokenize` reads them all, then
    /// releases the interpreter once to tokenise them. A failed item keeps its error.
    pub fn transform_batch_attached<'py>(
        &self,
        py: Python<'py>,
        items: Vec<(u64, PyResult<Bound<'py, PyAny>>)>,
    ) -> Vec<(u64, PyResult<Bound<'py, PyAny>>)> {
        if let Some(ItemTransform::Text(step)) = &self.transform {
            let started = self.stats.transform_clock();
            let out = step.apply_batch_attached(py, items);
            self.stats.transform_took(started);
            return out;
        }
        items
            .into_iter()
            .map(|(index, item)| {
                (
                    index,
                    item.and_then(|x| self.transform_attached(py, index, x)),
                )
            })
            .collect()
    }

    /// Transforms a sample on a thread that does not hold the interpreter: a Python transform
    /// takes it for its call only; a native one never takes it (unless the sample is a Python
    /// object, which is read under the interpreter first).
    pub fn transform_detached(&self, index: u64, sample: Sample) -> PyResult<Sample> {
        let Some(transform) = &self.transform else {
            return Ok(sample);
        };
        let started = self.stats.transform_clock();
        let out = match transform {
            ItemTransform::Python { f, takes_index } => crate::attach::attach(|py| {
                let arg = sample.into_py(py)?;
                let out = call_transform(f.bind(py), *takes_index, index, arg)?;
                Ok(Sample::Py(out.unbind()))
            }),
            ItemTransform::Native(t) => {
                let item = match sample {
                    Sample::Bytes(b) => Item::Bytes(b),
                    Sample::Tar(_) => return Err(tar_needs_a_member()),
                    Sample::Native(item) => item,
                    Sample::Py(obj) => crate::attach::attach(|py| item_from_py(obj.bind(py)))?,
                };
                t.apply_keyed(self.info.key(index), item)
                    .map(Sample::Native)
                    .map_err(|e| image_error(&e))
            }
            ItemTransform::Text(step) => match sample {
                Sample::Bytes(b) if !step.takes_dicts() => {
                    let ids = step.ids_of_bytes(&b)?;
                    crate::attach::attach(|py| {
                        Ok(Sample::Py(PyList::new(py, ids)?.into_any().unbind()))
                    })
                }
                Sample::Native(_) => Err(PyValueError::new_err(
                    "Tokenize takes text; the item is an image or bytes a transform made",
                )),
                other => crate::attach::attach(|py| {
                    let arg = other.into_py(py)?;
                    Ok(Sample::Py(step.apply_attached(arg)?.unbind()))
                }),
            },
        };
        self.stats.transform_took(started);
        out
    }

    /// Collates a list of Python samples on a thread that holds the interpreter.
    pub fn collate_attached(
        &self,
        py: Python<'_>,
        samples: Bound<'_, PyList>,
        indices: &[u64],
    ) -> PyResult<Py<PyAny>> {
        let batch = match &self.collate {
            Collate::Python(c) => c
                .bind(py)
                .call1((samples,))
                .map_err(|e| no_stop_iteration(py, e, "collate_fn"))?,
            Collate::List => samples.into_any(),
            Collate::Images(c) => collate_list(py, c, &samples)?.into_bound(py),
        };
        self.with_indices(py, batch, indices)
    }

    /// Collates samples on a thread that does not hold the interpreter. With `ImageCollator`
    /// and native images, the batch is written before the interpreter is taken (once, to make
    /// the batch object).
    pub fn collate_detached(&self, samples: Vec<Sample>, indices: &[u64]) -> PyResult<Py<PyAny>> {
        if let Collate::Images(c) = &self.collate
            && samples.iter().all(|s| matches!(s, Sample::Native(_)))
        {
            let images = native_images(samples)?;
            let batch = c.collate(images).map_err(|e| image_error(&e))?;
            return crate::attach::attach(|py| {
                let batch = Bound::new(py, ImageBatch::new(batch))?.into_any();
                self.with_indices(py, batch, indices)
            });
        }
        crate::attach::attach(|py| {
            let list = PyList::empty(py);
            for s in samples {
                list.append(s.into_py(py)?)?;
            }
            self.collate_attached(py, list, indices)
        })
    }

    /// Visits the Python callables (for the garbage collector).
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(ItemTransform::Python { f, .. }) = &self.transform {
            visit.call(f)?;
        }
        if let Collate::Python(c) = &self.collate {
            visit.call(c)?;
        }
        self.info.visit(visit)
    }

    fn with_indices(
        &self,
        py: Python<'_>,
        batch: Bound<'_, PyAny>,
        indices: &[u64],
    ) -> PyResult<Py<PyAny>> {
        if self.return_indices {
            Ok(
                PyTuple::new(py, [batch, PyList::new(py, indices)?.into_any()])?
                    .into_any()
                    .unbind(),
            )
        } else {
            Ok(batch.unbind())
        }
    }
}

/// Why a native transform cannot take a whole `TarDataset` sample.
pub fn tar_needs_a_member() -> PyErr {
    PyValueError::new_err(
        "the dataloader_rs.transforms take one member of a TarDataset sample: make the \
         dataset with member='jpg' (its items are then that member's bytes), or use a Python \
         transform that picks the member, e.g. lambda s: decode(s['jpg'])",
    )
}

/// Calls a Python transform `f` on item `index`'s `sample`.
fn call_transform<'py>(
    f: &Bound<'py, PyAny>,
    takes_index: bool,
    index: u64,
    sample: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if takes_index {
        f.call1((index, sample))
    } else {
        f.call1((sample,))
    }
    .map_err(|e| no_stop_iteration(f.py(), e, "the transform"))
}

/// The images of native samples; bytes that no transform decoded fail the batch.
fn native_images(samples: Vec<Sample>) -> PyResult<Vec<Image>> {
    samples
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s {
            Sample::Native(Item::Image(im)) => Ok(im),
            Sample::Native(Item::Bytes(b)) => Err(PyValueError::new_err(format!(
                "ImageCollator takes images; item {i} of the batch is {} bytes of encoded data \
                 (put Decode in the transform)",
                b.len()
            ))),
            _ => unreachable!("only native samples are passed"),
        })
        .collect()
}
