//! A `PyAsyncDataset` as a core source: the batch is one coroutine on the loader's asyncio event
//! loop (`python/dataloader_rs/_aio.py` runs the items, the loader's `items_in_flight` at a time
//! across its batches, the earliest batch first); each item is
//! handed back to Rust as it arrives and transformed on the loader's pool, then the batch is
//! collated. The worker waits without the interpreter; an abandoned batch cancels its coroutine.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::channel::mpsc;
use futures::future::{Either, select};
use futures::stream::{FuturesUnordered, StreamExt};
use pyo3::PyTraverseError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::PyList;

use dlrs_core::sync::{lock, lock_mut};
use dlrs_core::{BatchCtx, ItemStats, LoadError};
use dlrs_io::{ItemAt, Runtime};

use super::stage::Stage;
use super::{collate_kept, skip_or_fail, wait_batch};
use crate::pipeline::{Loaded, Sample};

/// One item (or the whole batch, `pos` None) as the event loop delivered it.
struct Arrival {
    pos: Option<usize>,
    result: PyResult<Py<PyAny>>,
}

/// The callback the batch coroutine calls with each item: `deliver(pos, value, failed)`.
#[pyclass(frozen, module = "dataloader_rs._native", name = "_Deliver")]
pub struct Deliver {
    tx: mpsc::UnboundedSender<Arrival>,
    stats: Arc<ItemStats>,
    /// The items in flight (`started(pos)`), with the clock of those timed.
    starts: Mutex<Vec<Option<Option<Instant>>>>,
    /// Failed items may be skipped: the batch goes on after one.
    skipping: bool,
}

impl Deliver {
    fn new(
        tx: mpsc::UnboundedSender<Arrival>,
        stats: Arc<ItemStats>,
        n: usize,
        skipping: bool,
    ) -> Self {
        Self {
            tx,
            stats,
            starts: Mutex::new(vec![None; n]),
            skipping,
        }
    }
}

impl Drop for Deliver {
    fn drop(&mut self) {
        // Items that never arrived (a cancelled or failed batch) are no longer in flight.
        let starts = lock_mut(&mut self.starts);
        self.stats.abandoned(starts.iter().flatten().count());
    }
}

impl Deliver {
    /// Calls `f` on the start slot of item `pos` (of every item, for `None`), under its lock.
    fn each_start(&self, pos: Option<usize>, mut f: impl FnMut(&mut Option<Option<Instant>>)) {
        let mut starts = lock(&self.starts);
        let range = pos.map_or(0..starts.len(), |p| p..p + 1);
        for slot in starts.get_mut(range).into_iter().flatten() {
            f(slot);
        }
    }
}

#[pymethods]
impl Deliver {
    /// Item `pos` (every item of the batch, for `None`: `__getitems__`) is being fetched.
    fn started(&self, pos: Option<usize>) {
        let clock = self.stats.fetch_clock();
        self.each_start(pos, |slot| {
            if slot.replace(clock).is_none() {
                self.stats.started();
            }
        });
    }

    /// Returns whether the batch goes on after a failed item (it may be skipped).
    fn __call__(&self, pos: Option<usize>, value: Bound<'_, PyAny>, failed: bool) -> bool {
        self.each_start(pos, |slot| {
            if let Some(clock) = slot.take() {
                self.stats.fetched(clock);
            }
        });
        let result = if failed {
            // The exception object itself: it reaches the consumer with its type and identity.
            Err(PyErr::from_value(value))
        } else {
            Ok(value.unbind())
        };
        // The batch may have been abandoned already: nobody listens then.
        let _ = self.tx.unbounded_send(Arrival { pos, result });
        self.skipping && pos.is_some()
    }
}

/// Cancels the batch's coroutine (its concurrent future) unless defused.
struct CancelOnDrop(Option<Py<PyAny>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(future) = self.0.take() {
            crate::attach::attach(|py| {
                let _ = future.bind(py).call_method0("cancel");
            });
        }
    }
}

/// A `PyAsyncDataset`, loaded a batch at a time on the loader's event loop.
pub struct AsyncSource {
    /// The loader's `_aio.EventLoop`.
    pub event_loop: Py<PyAny>,
    pub getitem: Py<PyAny>,
    /// `__getitems__`, given only when `item_concurrency` is 1.
    pub getitems: Option<Py<PyAny>>,
    /// The items fetched at once across the batches in flight, the earliest batch first; any
    /// batch may take them all (`_aio.Slots`).
    pub items_in_flight: usize,
    pub runtime: Arc<Runtime>,
    pub stage: Stage,
}

/// Closes the loader's event loop (awaiting `aclose()`) when dropped. The native loader and
/// each of its iterators hold one, so the loop closes once the loader and all its iterators are
/// gone: an iterator may outlive its loader, as in `for batch in PyDataloader(...)`. Batches
/// still loading in the background then fail, unseen.
pub struct CloseOnDrop(pub Py<PyAny>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        crate::attach::attach(|py| {
            let finalizing = py
                .import("sys")
                .and_then(|sys| sys.call_method0("is_finalizing"))
                .and_then(|f| f.is_truthy())
                .unwrap_or(true);
            // At exit, `_aio` closed every loop from an atexit hook, while threads still ran.
            if !finalizing && let Err(e) = self.0.bind(py).call_method0("close") {
                e.write_unraisable(py, Some(self.0.bind(py)));
            }
        });
    }
}

impl AsyncSource {
    /// Visits the loop and the dataset's callables.
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.event_loop)?;
        visit.call(&self.getitem)?;
        visit.call(&self.getitems)?;
        self.stage.visit(visit)
    }

    /// Loads one batch (on a worker thread).
    pub fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<Loaded, LoadError<PyErr>> {
        let (tx, rx) = mpsc::unbounded();
        let stats = Arc::clone(&self.stage.pipeline().stats);
        // Skipping finds the failed items one by one: no `__getitems__` then.
        let skipping = self.stage.pipeline().skipper.enabled();
        let future = crate::attach::attach(|py| {
            self.event_loop
                .bind(py)
                .call_method1(
                    "submit",
                    (
                        self.getitem.clone_ref(py),
                        self.getitems
                            .as_ref()
                            .filter(|_| !skipping)
                            .map(|g| g.clone_ref(py)),
                        PyList::new(py, indices)?,
                        self.items_in_flight,
                        (ctx.epoch_id(), ctx.batch_number()),
                        Deliver::new(tx, stats, indices.len(), skipping),
                    ),
                )
                .map(Bound::unbind)
        })
        .map_err(LoadError::Source)?;
        let mut guard = CancelOnDrop(Some(future));
        let slots = wait_batch(&self.runtime, self.gather(rx, indices, ctx), ctx)?;
        // Every item arrived: the coroutine is finishing by itself.
        guard.0 = None;
        collate_kept(self.stage.pipeline(), slots, indices)
    }

    /// Receives the items as the coroutine delivers them, transforming each as it arrives.
    async fn gather(
        &self,
        mut arrivals: mpsc::UnboundedReceiver<Arrival>,
        indices: &[u64],
        ctx: &BatchCtx,
    ) -> PyResult<Vec<Option<Sample>>> {
        let epoch = ctx.epoch_id();
        let n = indices.len();
        let mut slots: Vec<Option<Sample>> = std::iter::repeat_with(|| None).take(n).collect();
        let mut filled = 0;
        let mut transforming = FuturesUnordered::new();
        let mut arrived = 0;
        while filled < n {
            let event = if transforming.is_empty() || arrived == n {
                if arrived < n {
                    Either::Left(arrivals.next().await)
                } else {
                    Either::Right(transforming.next().await)
                }
            } else {
                match select(arrivals.next(), transforming.next()).await {
                    Either::Left((arrival, _)) => Either::Left(arrival),
                    Either::Right((done, _)) => Either::Right(done),
                }
            };
            match event {
                Either::Left(None) => {
                    return Err(PyRuntimeError::new_err(
                        "the loader's event loop stopped before the batch was loaded",
                    ));
                }
                Either::Left(Some(Arrival {
                    pos: Some(pos),
                    result: Err(e),
                })) if pos < n => {
                    skip_or_fail(self.stage.pipeline(), epoch, indices[pos], e)?;
                    arrived += 1;
                    filled += 1;
                }
                Either::Left(Some(Arrival { result: Err(e), .. })) => return Err(e),
                Either::Left(Some(Arrival { pos: None, .. })) => {
                    return Err(PyRuntimeError::new_err(
                        "the batch coroutine ended without its items",
                    ));
                }
                Either::Left(Some(Arrival {
                    pos: Some(pos),
                    result: Ok(value),
                })) => {
                    let Some(&index) = indices.get(pos) else {
                        return Err(PyRuntimeError::new_err(format!(
                            "item {pos} of a batch of {n} was delivered"
                        )));
                    };
                    arrived += 1;
                    let at = ItemAt {
                        index,
                        position: pos,
                        worker: ctx.worker(),
                        epoch: ctx.epoch_number(),
                        epoch_id: epoch,
                    };
                    let transform = self.stage.transform(ctx.pool(), at, Sample::Py(value));
                    transforming.push(async move { (pos, transform.await) });
                }
                Either::Right(None) => {}
                Either::Right(Some((pos, Err(e)))) => {
                    skip_or_fail(self.stage.pipeline(), epoch, indices[pos], e)?;
                    filled += 1;
                }
                Either::Right(Some((pos, Ok(sample)))) => {
                    if slots[pos].replace(sample).is_none() {
                        filled += 1;
                    }
                }
            }
        }
        Ok(slots)
    }
}
