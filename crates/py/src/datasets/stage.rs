//! The per-item work of async and Rust datasets: each item is transformed on the loader's pool
//! as soon as it arrives, at most `min(num_workers × item_concurrency, CPUs)` at once, while the
//! other items are still in flight; then the batch is collated.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use futures::channel::oneshot;
use pyo3::PyTraverseError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use tokio::sync::Semaphore;

use dlrs_core::Pool;
use dlrs_core::sync::{lock, lock_mut, panic_message};

use crate::gc::only;
use crate::pipeline::{Pipeline, Sample};

/// The transform threads of one loader, rebuilt in a forked child.
struct Workers {
    size: usize,
    state: Mutex<Option<PerPid>>,
}

/// The pool and the permits of one process.
#[derive(Clone)]
struct PerPid {
    pid: u32,
    pool: Pool,
    permits: Arc<Semaphore>,
}

impl Workers {
    fn get(&self) -> PerPid {
        let mut state = lock(&self.state);
        let pid = dlrs_core::pid::current();
        match &*state {
            Some(current) if current.pid == pid => current.clone(),
            _ => {
                // In a forked child, the parent's pool and permits belong to threads that do not
                // exist here: leak them untouched.
                if let Some(old) = state.take() {
                    std::mem::forget(old);
                }
                let fresh = PerPid {
                    pid,
                    pool: Pool::new(self.size, "dataloader-rs"),
                    permits: Arc::new(Semaphore::new(self.size)),
                };
                *state = Some(fresh.clone());
                fresh
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let state = lock_mut(&mut self.state);
        if let Some(current) = state.take() {
            if current.pid == dlrs_core::pid::current() {
                current.pool.shutdown();
            } else {
                std::mem::forget(current);
            }
        }
    }
}

/// The transform and collation of a loader over an async or Rust dataset.
pub struct Stage {
    pipeline: Arc<Pipeline>,
    /// The pool that runs the transform; None without a transform.
    workers: Option<Workers>,
}

impl Stage {
    /// The stage of `pipeline`, whose transform runs on up to `threads` (at least 1) threads.
    pub fn new(pipeline: Pipeline, threads: usize) -> Self {
        let workers = pipeline.transform.is_some().then(|| Workers {
            size: threads.max(1),
            state: Mutex::new(None),
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

    /// Transforms item `index` on the pool; a future that is ready at once without a transform.
    /// Dropping the future before the transform started skips it.
    pub fn transform(
        &self,
        index: u64,
        sample: Sample,
    ) -> impl Future<Output = PyResult<Sample>> + Send + 'static {
        let job = self
            .workers
            .as_ref()
            .map(|w| (w.get(), Arc::clone(&self.pipeline)));
        let (worker, epoch) = crate::worker::current_at();
        async move {
            let Some((workers, pipeline)) = job else {
                return Ok(sample);
            };
            let permit = Arc::clone(&workers.permits)
                .acquire_owned()
                .await
                .map_err(|_| PyRuntimeError::new_err("the loader's transform pool was closed"))?;
            let (tx, rx) = oneshot::channel();
            workers.pool.execute(move || {
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
