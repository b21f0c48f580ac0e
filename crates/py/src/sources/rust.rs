//! A Rust dataset as a core source: [`dlrs_io::Pipeline`] (the items of a batch fetched as
//! futures without the interpreter, each transformed on the loader's pool as it arrives) with
//! the loader's transform and collation as its [`Stages`].

use std::sync::Arc;

use bytes::Bytes;
use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use dlrs_io::{ItemAt, Stages};

use super::skip_or_fail;
use crate::errors::io_error;
use crate::pipeline::{Loaded, Pipeline, Sample};

/// A Rust dataset (`HttpDataset`, `FileDataset`, `ObjectStoreDataset`, `TarDataset`), loaded a
/// batch at a time.
pub type RustSource = dlrs_io::Pipeline<PyStages>;

/// The loader's transform, skipping and collation, as the stages of a [`dlrs_io::Pipeline`]
/// (of a Rust dataset) or of the transforms of an async one ([`super::stage::Stage`]).
pub struct PyStages(pub Arc<Pipeline>);

impl PyStages {
    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.0
    }

    /// Transforms `sample` of item `at` (on a thread without the interpreter), as
    /// `get_worker_info()` sees it on the batch's worker.
    pub fn transform_sample(&self, at: &ItemAt, sample: Sample) -> PyResult<Sample> {
        let pipeline = &*self.0;
        crate::worker::scope(&pipeline.info, at.worker, at.epoch, Some(at.index), || {
            pipeline.transform_detached(at.index, sample)
        })
    }

    /// Visits the pipeline's Python callables (for [`crate::gc::Refs`]).
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.0.visit(visit)
    }
}

impl Stages for PyStages {
    type Item = Sample;
    type Batch = Loaded;
    type Error = PyErr;

    fn transform(&self, at: &ItemAt, bytes: Bytes) -> PyResult<Sample> {
        let sample = if self.0.tar_samples {
            Sample::Tar(bytes)
        } else {
            Sample::Bytes(bytes)
        };
        if self.0.transform.is_none() {
            return Ok(sample);
        }
        self.transform_sample(at, sample)
    }

    fn runs_on_pool(&self) -> bool {
        self.0.transform.is_some()
    }

    fn io_error(&self, _: Option<&ItemAt>, error: dlrs_io::Error) -> PyErr {
        io_error(&error)
    }

    fn skip(&self, at: &ItemAt, error: PyErr) -> PyResult<()> {
        skip_or_fail(&self.0, at.epoch_id, at.index, error)
    }

    fn collate(&self, items: Vec<Sample>, indices: &[u64]) -> PyResult<Loaded> {
        let batch = self.0.collate_detached(items, indices)?;
        Ok(Loaded::new(batch, indices.len()))
    }
}
