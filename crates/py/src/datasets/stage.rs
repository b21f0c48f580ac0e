//! The per-item work of async and Rust datasets: each item is transformed on the loader's pool
//! as soon as it arrives, at most `min(num_workers × item_concurrency, CPUs)` at once, while the
//! other items are still in flight; then the batch is collated.

use std::convert::Infallible;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use futures::channel::oneshot;
use pyo3::PyTraverseError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use tokio::sync::Semaphore;

use dlrs_core::Pool;
use dlrs_core::per_process::PerProcess;
use dlrs_core::sync::panic_message;

use crate::gc::only;
use crate::pipeline::{Pipeline, Sample};

/// How many transforms of one loader may run at once, and their permits (per process: a
/// forked child does not inherit the permits its parent's jobs hold).
struct Permits {
    size: usize,
    per_process: PerProcess<Arc<Semaphore>>,
}

impl Permits {
    fn get(&self) -> Arc<Semaphore> {
        let built = self
            .per_process
            .get_or_try_init(|| Ok::<_, Infallible>(Arc::new(Semaphore::new(self.size))));
        match built {
            Ok(permits) => Arc::clone(permits),
            Err(never) => match never {},
        }
    }
}

/// The transform and collation of a loader over an async or Rust dataset.
pub struct Stage {
    pipeline: Arc<Pipeline>,
    /// The transform's permits (it runs on the loader's pool); None without a transform.
    workers: Option<Permits>,
}

impl Stage {
    /// The stage of `pipeline`, whose transform runs on up to `threads` (at least 1) threads.
    pub fn new(pipeline: Pipeline, threads: usize) -> Self {
        let workers = pipeline.transform.is_some().then(|| Permits {
            size: threads.max(1),
            per_process: PerProcess::new(),
        });
        Self {
            pipeline: Arc::new(pipeline),
            workers,
        }
    }

    /// The number of transform threads (0 without a transform).
    pub fn threads(&self) -> usize {
        self.workers.as_ref().map_or(0, |w| w.size)
    }

    /// The pipeline (for the collation).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Visits the pipeline's Python callables unless a transform job shares the pipeline (see
    /// `Loader::__traverse__`).
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match only(&self.pipeline) {
            Some(pipeline) => pipeline.visit(visit),
            None => Ok(()),
        }
    }

    /// Transforms item `index` on `pool` (the loader's, [`dlrs_core::BatchCtx::pool`]); a
    /// future that is ready at once without a transform. Dropping the future before the
    /// transform started skips it.
    pub fn transform(
        &self,
        pool: &Pool,
        index: u64,
        sample: Sample,
    ) -> impl Future<Output = PyResult<Sample>> + Send + 'static {
        let job = self
            .workers
            .as_ref()
            .map(|w| (w.get(), pool.clone(), Arc::clone(&self.pipeline)));
        let (worker, epoch) = crate::worker::current_at();
        async move {
            let Some((permits, pool, pipeline)) = job else {
                return Ok(sample);
            };
            let permit = permits
                .acquire_owned()
                .await
                .map_err(|_| PyRuntimeError::new_err("the loader's transform pool was closed"))?;
            let (tx, rx) = oneshot::channel();
            pool.execute(move || {
                let _permit = permit;
                if tx.is_canceled() {
                    return; // the batch was abandoned
                }
                let result = catch_unwind(AssertUnwindSafe(|| {
                    crate::worker::scope(&pipeline.info, worker, epoch, Some(index), || {
                        pipeline.transform_detached(index, sample)
                    })
                }))
                .unwrap_or_else(|payload| {
                    let message = panic_message(&*payload, "a panic");
                    Err(PyRuntimeError::new_err(format!(
                        "the transform of item {index} panicked: {message}"
                    )))
                });
                let _ = tx.send(result);
            });
            rx.await.unwrap_or_else(|_| {
                Err(PyRuntimeError::new_err(
                    "a transform did not finish: the loader's pool stopped",
                ))
            })
        }
    }
}
