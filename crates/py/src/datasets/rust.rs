//! A Rust dataset as a core source: the items of a batch are futures on the loader's tokio
//! runtime, up to `item_concurrency` at once, fetched without the interpreter; each one is
//! transformed on the loader's pool as it arrives, then the batch is collated.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::task::JoinHandle;

use dlrs_core::{BatchCtx, LoadError};
use dlrs_io::{Dataset, Runtime};

use super::stage::Stage;
use crate::errors::io_error;
use crate::pipeline::{Loaded, Pipeline, Sample};
use crate::seam::SIGNAL_SLICE;

/// A spawned fetch that is aborted when dropped (an abandoned batch stops its requests).
struct Spawned(JoinHandle<Result<Bytes, dlrs_io::Error>>);

impl Future for Spawned {
    type Output = PyResult<Bytes>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<PyResult<Bytes>> {
        Pin::new(&mut self.0).poll(cx).map(|joined| match joined {
            Ok(Ok(bytes)) => Ok(bytes),
            Ok(Err(e)) => Err(io_error(&e)),
            Err(e) => Err(PyRuntimeError::new_err(format!(
                "a fetch did not finish: {e}"
            ))),
        })
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `future` on `runtime` from a worker thread, giving up when the epoch is abandoned
/// (dropping the future cancels what it started). Checked every [`SIGNAL_SLICE`], the one
/// slice of the loader's waits (workers wait here, so no signal is checked).
pub(crate) fn wait_batch<T>(
    runtime: &Runtime,
    future: impl Future<Output = PyResult<T>>,
    ctx: &BatchCtx,
) -> Result<T, LoadError<PyErr>> {
    let outcome = runtime.block_on_checked(future, SIGNAL_SLICE, || {
        if ctx.is_cancelled() { Err(()) } else { Ok(()) }
    });
    match outcome {
        Err(e) => Err(LoadError::Source(io_error(&e))),
        Ok(Err(())) => Err(LoadError::Cancelled),
        Ok(Ok(result)) => result.map_err(LoadError::Source),
    }
}

/// A Rust dataset (`HttpDataset`, `FileDataset`, `ObjectStoreDataset`), loaded a batch at a time.
pub struct RustSource {
    pub dataset: Arc<dyn Dataset>,
    pub runtime: Arc<Runtime>,
    pub item_concurrency: usize,
    pub stage: Stage,
}

impl RustSource {
    /// Loads one batch (on a worker thread).
    pub fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<Loaded, LoadError<PyErr>> {
        let slots = wait_batch(&self.runtime, self.fetch(indices, ctx), ctx)?;
        let (samples, kept) = kept_samples(slots, indices);
        let items = kept.len();
        self.stage
            .pipeline()
            .collate_detached(samples, &kept)
            .map(|batch| Loaded { batch, items })
            .map_err(LoadError::Source)
    }

    /// Fetches and transforms the items of `indices`, up to `item_concurrency` at once; the
    /// first failure abandons the rest, unless failed items are skipped (`None` slots).
    async fn fetch(&self, indices: &[u64], ctx: &BatchCtx) -> PyResult<Vec<Option<Sample>>> {
        let (epoch, pool) = (ctx.epoch_id(), ctx.pool());
        let handle = self.runtime.handle().map_err(|e| io_error(&e))?;
        let n = indices.len();
        let mut slots: Vec<Option<Sample>> = std::iter::repeat_with(|| None).take(n).collect();
        let mut running = FuturesUnordered::new();
        let mut next = 0;
        loop {
            while running.len() < self.item_concurrency && next < n {
                let (pos, index) = (next, indices[next]);
                next += 1;
                let fetch = Spawned(handle.spawn(self.dataset.fetch(index)));
                let stats = &self.stage.pipeline().stats;
                let (fetching, started) = (stats.fetching(), stats.fetch_clock());
                let transformed = async move {
                    let bytes = fetch.await;
                    stats.fetch_took(started);
                    drop(fetching);
                    let bytes = bytes?;
                    Ok::<_, PyErr>(Sample::Bytes(bytes))
                };
                let stage = &self.stage;
                running.push(async move {
                    let result = match transformed.await {
                        Ok(sample) => stage.transform(pool, index, sample).await,
                        Err(e) => Err(e),
                    };
                    (pos, result)
                });
            }
            match running.next().await {
                None => break,
                Some((pos, Ok(sample))) => slots[pos] = Some(sample),
                Some((pos, Err(e))) => skip_or_fail(self.stage.pipeline(), epoch, indices[pos], e)?,
            }
        }
        Ok(slots)
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
pub(crate) fn kept_samples(slots: Vec<Option<Sample>>, indices: &[u64]) -> (Vec<Sample>, Vec<u64>) {
    slots
        .into_iter()
        .zip(indices)
        .filter_map(|(s, &i)| s.map(|s| (s, i)))
        .unzip()
}
