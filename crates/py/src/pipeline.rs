//! What the loader does to every item after the dataset fetched it: the `transform`, then the
//! collation into a batch, and the `(batch, indices)` pair of `return_indices`.
//!
//! A sample is either a Python object or a native item (bytes fetched in Rust, an image
//! decoded in Rust). Python transforms and collate functions take the interpreter for their
//! call only; native ones never take it.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// One item between the dataset and the batch.
pub enum Sample {
    /// A Python object (what a Python dataset or a Python transform returned).
    Py(Py<PyAny>),
    /// Bytes fetched in Rust.
    Bytes(bytes::Bytes),
}

impl Sample {
    /// The sample as a Python object (bytes become `bytes`).
    pub fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            Self::Py(obj) => Ok(obj.into_bound(py)),
            Self::Bytes(b) => Ok(PyBytes::new(py, &b).into_any()),
        }
    }
}

/// The per-item transform.
pub enum ItemTransform {
    /// `f(index, sample)` in Python (one-argument callables were wrapped in Python).
    Python(Py<PyAny>),
}

/// How the samples of a batch become a batch.
pub enum Collate {
    /// A Python list of the samples.
    List,
    /// `collate_fn(list_of_samples)` in Python.
    Python(Py<PyAny>),
}

/// The transform, the collation and `return_indices` of one loader.
pub struct Pipeline {
    pub transform: Option<ItemTransform>,
    pub collate: Collate,
    pub return_indices: bool,
}

impl Pipeline {
    /// The pipeline of `PyDataloader(transform=..., collate_fn=..., return_indices=...)`:
    /// Python callables (one-argument transforms were wrapped in Python already).
    pub fn from_py(
        transform: Option<Py<PyAny>>,
        collate_fn: Option<Py<PyAny>>,
        return_indices: bool,
    ) -> Self {
        Self {
            transform: transform.map(ItemTransform::Python),
            collate: collate_fn.map_or(Collate::List, Collate::Python),
            return_indices,
        }
    }

    /// Transforms a Python sample on a thread that holds the interpreter.
    pub fn transform_attached<'py>(
        &self,
        py: Python<'py>,
        index: u64,
        sample: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match &self.transform {
            None => Ok(sample),
            Some(ItemTransform::Python(f)) => f.bind(py).call1((index, sample)),
        }
    }

    /// Transforms a sample on a thread that does not hold the interpreter: a Python transform
    /// takes it for its call only.
    pub fn transform_detached(&self, index: u64, sample: Sample) -> PyResult<Sample> {
        match &self.transform {
            None => Ok(sample),
            Some(ItemTransform::Python(f)) => Python::attach(|py| {
                let arg = sample.into_py(py)?;
                Ok(Sample::Py(f.bind(py).call1((index, arg))?.unbind()))
            }),
        }
    }

    /// Collates a list of Python samples on a thread that holds the interpreter.
    pub fn collate_attached(
        &self,
        py: Python<'_>,
        samples: Bound<'_, PyList>,
        indices: &[u64],
    ) -> PyResult<Py<PyAny>> {
        let batch = match &self.collate {
            Collate::Python(c) => c.bind(py).call1((samples,))?,
            Collate::List => samples.into_any(),
        };
        self.with_indices(py, batch, indices)
    }

    /// Collates samples on a thread that does not hold the interpreter.
    pub fn collate_detached(&self, samples: Vec<Sample>, indices: &[u64]) -> PyResult<Py<PyAny>> {
        Python::attach(|py| {
            let list = PyList::empty(py);
            for s in samples {
                list.append(s.into_py(py)?)?;
            }
            self.collate_attached(py, list, indices)
        })
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
