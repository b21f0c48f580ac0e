//! `BatchIterator`, the iterator of one epoch: `next()` waits for the next batch (with the
//! interpreter released while workers load it) and reports it in the run's progress.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pyo3::PyTraverseError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use dlrs_core::{Epoch, ItemStats, Recv};

use crate::errors::{load_error, no_stop_iteration};
use crate::gc::Refs;
use crate::run::RunState;
use crate::seam::{Slice, wait_interruptibly};
use crate::sources::AnySource;

/// The batches of one epoch, in order.
#[pyclass(
    frozen,
    weakref,
    module = "dataloader_rs._native",
    name = "BatchIterator"
)]
pub struct BatchIterator {
    pub(super) epoch: Epoch<AnySource>,
    /// Counts the items handed out.
    pub(super) item_stats: Arc<ItemStats>,
    /// The epoch's number.
    pub(super) number: u64,
    /// Where checkpoints read the progress.
    pub(super) run: Arc<RunState>,
    pub(super) busy: AtomicBool,
    pub(super) workers: bool,
    /// How long `next()` waits for a batch before it raises (workers only).
    pub(super) timeout: Option<Duration>,
    /// Without workers but with concurrent items, this thread waits for helpers that need the
    /// interpreter, so it releases it while the batch loads.
    pub(super) inline_releases: bool,
    /// The loader's Python objects (see `crate::gc`); also keeps the event loop of a
    /// `PyAsyncDataset` open while the iterator lives. Dropped after the epoch.
    pub(super) refs: Py<Refs>,
}

/// Marks an iterator as being advanced; a second thread gets RuntimeError.
struct Busy<'a>(&'a AtomicBool);

impl<'a> Busy<'a> {
    fn enter(flag: &'a AtomicBool) -> PyResult<Self> {
        if flag
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(PyRuntimeError::new_err(
                "this iterator is being advanced by another thread: a loader iterator is used by one thread at a time",
            ));
        }
        Ok(Self(flag))
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[pymethods]
impl BatchIterator {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.check_process()?;
        let _busy = Busy::enter(&self.busy)?;
        loop {
            let recv = self.recv(py)?;
            if matches!(recv, Recv::Batch(_)) {
                self.run
                    .record(self.number, self.epoch.position(), self.epoch.num_batches());
            }
            match recv {
                // A stream's reader that ran dry: its turn is skipped, and the epoch ends once
                // no reader has items left.
                Recv::Batch(Ok(loaded)) if loaded.dry => {
                    let AnySource::Stream(stream) = &**self.epoch.source() else {
                        unreachable!("only streams have readers that run dry");
                    };
                    let batch = self.epoch.position().saturating_sub(1);
                    if stream.finished_after(batch) {
                        let ended = self.epoch.num_batches();
                        self.run.record(self.number, ended, ended);
                        return Ok(None);
                    }
                }
                Recv::Batch(Ok(loaded)) => {
                    self.item_stats.delivered(loaded.items);
                    if let AnySource::Stream(stream) = &**self.epoch.source() {
                        let batch = self.epoch.position().saturating_sub(1);
                        stream.delivered(self.number, batch);
                    }
                    return Ok(Some(loaded.batch));
                }
                // Any StopIteration left would end the epoch quietly.
                Recv::Batch(Err(e)) => {
                    return Err(no_stop_iteration(py, load_error(e), "user code"));
                }
                Recv::Finished => return Ok(None),
                Recv::Pending => unreachable!("waits until ready"),
            }
        }
    }

    /// The number of the epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.number
    }

    /// Reports its reference to the loader's Python objects (see `crate::gc`). Batches
    /// waiting in the ring are not reported.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.refs)
    }

    /// The batches handed out so far (counting those a resumed epoch skipped).
    #[getter]
    fn position(&self) -> PyResult<u64> {
        self.check_process()?;
        Ok(self.epoch.position())
    }

    /// The number of batches left in the epoch.
    fn __len__(&self) -> PyResult<usize> {
        self.check_process()?;
        if matches!(&**self.epoch.source(), AnySource::Stream(_)) {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "an epoch of an iterable dataset (a stream) has no len(): it ends when the stream does",
            ));
        }
        Ok(usize::try_from(self.epoch.remaining()).unwrap_or(usize::MAX))
    }
}

impl BatchIterator {
    /// Waits for the next outcome of the epoch (with the interpreter released while workers
    /// load it).
    fn recv(&self, py: Python<'_>) -> PyResult<Recv<crate::pipeline::Loaded, PyErr>> {
        let recv = if self.workers {
            let deadline = self.timeout.map(|t| (t, Instant::now() + t));
            wait_interruptibly(py, |slice| {
                let slice = match (slice, deadline) {
                    (Some(s), Some((_, d))) => {
                        Some(s.min(d.saturating_duration_since(Instant::now())))
                    }
                    (s, _) => s,
                };
                match self.epoch.recv(slice) {
                    Recv::Pending => match deadline {
                        Some((t, d)) if Instant::now() >= d => Slice::Ready(Err(t)),
                        _ => Slice::Pending,
                    },
                    other => Slice::Ready(Ok(other)),
                }
            })?
            .map_err(|t| {
                PyRuntimeError::new_err(format!(
                    "no batch arrived within timeout={} seconds",
                    t.as_secs_f64()
                ))
            })?
        } else if self.inline_releases {
            // The batch loads inside the core on this thread, which cannot return mid-batch to
            // slice here: `PySource` waits for its item helpers in `SIGNAL_SLICE`s instead and
            // checks signals between them.
            crate::seam::wait_on_loader(py, || self.epoch.recv(None))?
        } else {
            self.epoch.recv(None)
        };
        Ok(recv)
    }

    /// An iterator inherited through `fork` would wait forever for the parent's workers.
    fn check_process(&self) -> PyResult<()> {
        if self.epoch.is_inherited() {
            return Err(PyRuntimeError::new_err(
                "this iterator was started before the process forked: its workers are in the \
                 parent process; start a new epoch with iter(loader) in the child",
            ));
        }
        Ok(())
    }
}
