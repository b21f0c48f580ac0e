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

use super::{collate_kept, skip_or_fail, wait_batch};
use crate::datasets::stage::Stage;
use crate::errors::io_error;
use crate::pipeline::{Loaded, Sample};

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
        collate_kept(self.stage.pipeline(), slots, indices)
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
