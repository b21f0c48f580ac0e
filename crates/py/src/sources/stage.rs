//! The transforms of a `PyAsyncDataset`'s items: each one on the loader's pool as soon as it
//! arrives, at most `min(num_workers × item_concurrency, CPUs)` at once, while the other items
//! are still in flight ([`dlrs_io::TransformPool`], as a Rust dataset's pipeline does).

use std::future::Future;
use std::sync::Arc;

use futures::future::Either;

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use dlrs_io::{ItemAt, TransformPool};

use super::rust::PyStages;
use crate::errors::io_error;
use crate::pipeline::{Pipeline, Sample};

/// The transform and collation of a loader over an async dataset.
pub struct Stage {
    stages: Arc<PyStages>,
    /// The transform's threads; None without a transform.
    transforms: Option<TransformPool>,
}

impl Stage {
    /// The stage of `pipeline`, whose transform runs on up to `threads` (at least 1) threads.
    pub fn new(pipeline: Arc<Pipeline>, threads: usize) -> Self {
        let transforms = pipeline
            .transform
            .is_some()
            .then(|| TransformPool::new(threads));
        Self {
            stages: Arc::new(PyStages(pipeline)),
            transforms,
        }
    }

    /// The most transforms that run at once (0 without a transform).
    pub fn threads(&self) -> usize {
        self.transforms.as_ref().map_or(0, TransformPool::threads)
    }

    /// The pipeline (for the collation).
    pub fn pipeline(&self) -> &Pipeline {
        self.stages.pipeline()
    }

    /// Visits the pipeline's Python callables.
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.stages.visit(visit)
    }

    /// Transforms `sample` of item `at` on `pool` (the loader's); a future that is ready at
    /// once without a transform. Dropping the future before the transform started skips it.
    pub fn transform(
        &self,
        pool: &dlrs_core::Pool,
        at: ItemAt,
        sample: Sample,
    ) -> impl Future<Output = PyResult<Sample>> + Send + 'static {
        let Some(transforms) = &self.transforms else {
            return Either::Left(std::future::ready(Ok(sample)));
        };
        let stages = Arc::clone(&self.stages);
        let job = transforms.run(pool, at.index, move || stages.transform_sample(&at, sample));
        Either::Right(async move { job.await.map_err(|e| io_error(&e))? })
    }
}
