//! The core sources of a loader, one per kind of dataset, and what they share.
//!
//! - [`python`]: a Python dataset (`__getitem__` / `__getitems__` on the loader's threads).
//! - [`rust`]: a Rust dataset (futures on the loader's tokio runtime, no interpreter).
//! - [`aio`]: a `PyAsyncDataset` (coroutines on the loader's asyncio loop), its items
//!   transformed on the loader's pool by [`stage`].
//!
//! [`AnySource`] is the one a loader holds; `wait_batch` is how the async source waits for a
//! batch on tokio.

pub mod aio;
pub mod python;
pub mod rust;
pub mod stage;
pub mod stream;

use std::future::Future;
use std::sync::Arc;

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use dlrs_core::{BatchCtx, Config, ItemStats, LoadError, Source, WAIT_SLICE};
use dlrs_io::Runtime;

use crate::errors::io_error;
use crate::pipeline::{Loaded, Pipeline, Sample};

pub use aio::AsyncSource;
pub use python::PySource;
pub use rust::RustSource;
pub use stream::StreamSource;

/// What a loader loads: a Python dataset (on worker threads), a Rust dataset (futures on
/// tokio) or a `PyAsyncDataset` (coroutines on the loader's event loop).
pub enum AnySource {
    Python(PySource),
    Rust(RustSource),
    Async(AsyncSource),
    Stream(StreamSource),
}

impl AnySource {
    /// The per-item counters (kept by the source's pipeline).
    pub(crate) fn item_stats(&self) -> &Arc<ItemStats> {
        &self.pipeline().stats
    }
}

impl Source for AnySource {
    type Batch = Loaded;
    type Error = PyErr;

    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<Loaded, LoadError<PyErr>> {
        let info = &self.pipeline().info;
        crate::worker::scope(
            info,
            ctx.worker(),
            ctx.epoch_number(),
            None,
            || match self {
                Self::Python(s) => s.load_batch(indices, ctx),
                Self::Rust(s) => s.load_batch(indices, ctx),
                Self::Async(s) => s.load_batch(indices, ctx),
                Self::Stream(s) => s.load_batch(indices, ctx),
            },
        )
    }

    fn session<R>(&self, config: &Config, f: impl FnOnce() -> R) -> R {
        match self {
            Self::Python(s) => s.session(config, f),
            // These wait on tokio with the interpreter released; a stream's batch waits for
            // its reader's turn without it.
            Self::Rust(_) | Self::Async(_) | Self::Stream(_) => f(),
        }
    }

    fn takes_turns(&self, config: &Config) -> bool {
        match self {
            Self::Python(s) => s.takes_turns(config),
            Self::Rust(_) | Self::Async(_) | Self::Stream(_) => false,
        }
    }

    fn items_on_pool(&self) -> bool {
        // Rust and async datasets fetch their items as futures on the loader's runtime.
        matches!(self, Self::Python(_) | Self::Stream(_))
    }

    fn extra_threads(&self) -> usize {
        match self {
            Self::Python(_) | Self::Stream(_) => 0,
            Self::Rust(s) => s.extra_threads(),
            Self::Async(s) => s.stage.threads(),
        }
    }
}

impl AnySource {
    /// The transform and collation of the loader.
    pub(crate) fn pipeline(&self) -> &Pipeline {
        match self {
            Self::Python(s) => &s.calls.pipeline,
            Self::Rust(s) => s.stages().pipeline(),
            Self::Async(s) => s.stage.pipeline(),
            Self::Stream(s) => &s.pipeline,
        }
    }

    /// Visits the source's Python objects (for `__traverse__`).
    pub(crate) fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Self::Python(s) => s.visit(visit),
            Self::Rust(s) => s.stages().visit(visit),
            Self::Async(s) => s.visit(visit),
            Self::Stream(s) => s.visit(visit),
        }
    }
}

/// Runs `future` on `runtime` from a worker thread, giving up when the epoch is abandoned
/// (dropping the future cancels what it started). Checked every [`WAIT_SLICE`] (workers wait
/// here, so no signal is checked).
pub(crate) fn wait_batch<T>(
    runtime: &Runtime,
    future: impl Future<Output = PyResult<T>>,
    ctx: &BatchCtx,
) -> Result<T, LoadError<PyErr>> {
    let outcome = runtime.block_on_checked(future, WAIT_SLICE, || {
        if ctx.is_cancelled() { Err(()) } else { Ok(()) }
    });
    match outcome {
        Err(e) => Err(LoadError::Source(io_error(&e))),
        Ok(Err(())) => Err(LoadError::Cancelled),
        Ok(Ok(result)) => result.map_err(LoadError::Source),
    }
}

/// Ok when item `index` may be skipped (`max_failures`), else the error to fail the batch with
/// (its own, or `TooManyFailures`).
pub(crate) fn skip_or_fail(
    pipeline: &Pipeline,
    epoch: usize,
    index: u64,
    e: PyErr,
) -> PyResult<()> {
    let skipper = &pipeline.skipper;
    if !skipper.enabled() {
        return Err(e);
    }
    crate::attach::attach(|py| skipper.skip(py, epoch, index, &e))
}

/// The samples that arrived and their indices (skipped items left out).
fn kept_samples(slots: Vec<Option<Sample>>, indices: &[u64]) -> (Vec<Sample>, Vec<u64>) {
    slots
        .into_iter()
        .zip(indices)
        .filter_map(|(s, &i)| s.map(|s| (s, i)))
        .unzip()
}

/// The batch of the items that arrived in `slots` (skipped items, `None`, left out), collated
/// by `pipeline`.
pub(crate) fn collate_kept(
    pipeline: &Pipeline,
    slots: Vec<Option<Sample>>,
    indices: &[u64],
) -> Result<Loaded, LoadError<PyErr>> {
    let (samples, kept) = kept_samples(slots, indices);
    let items = kept.len();
    pipeline
        .collate_detached(samples, &kept)
        .map(|batch| Loaded::new(batch, items))
        .map_err(LoadError::Source)
}
