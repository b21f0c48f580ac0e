//! A Python dataset as a [`dlrs_core::Source`]: `__getitem__` / `__getitems__`, the per-item
//! `transform`, then `collate_fn`, all inside one attachment to the interpreter per batch (or per
//! item when the items of a batch are fetched concurrently).

use std::sync::Arc;
use std::time::Instant;

use pyo3::PyTraverseError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyType};

use dlrs_core::{BatchCtx, Config, LoadError, Source};

use crate::errors::no_stop_iteration;
use crate::pipeline::{Loaded, Pipeline};
use crate::run::Skipper;
use crate::worker::Slot;

/// The Python callables of one loader.
pub struct Calls {
    pub getitem: Py<PyAny>,
    pub getitems: Option<Py<PyAny>>,
    /// The transform, the collation and `return_indices`.
    pub pipeline: Pipeline,
    /// `types.CoroutineType`: a plain `__getitem__` returning one forgot an `await`.
    pub coroutine_type: Py<PyType>,
    /// Skips failed items when `max_failures` is set.
    pub skipper: Arc<Skipper>,
}

impl Calls {
    /// Fails on a coroutine where a sample was expected (and closes it, so it never warns).
    fn check_not_coroutine(&self, sample: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
        // A pointer comparison, without taking a reference to the type (this runs per item).
        if sample.get_type_ptr() == self.coroutine_type.as_ptr().cast() {
            let _ = sample.call_method0("close");
            return Err(PyTypeError::new_err(format!(
                "{what} returned a coroutine: an async def helper was called without await, \
                 or the dataset should subclass PyAsyncDataset"
            )));
        }
        Ok(())
    }

    /// `__getitem__(index)` then the transform; `timed`: the fetch's latency is recorded (the
    /// first item of each batch: a clock read per item would cost more than a trivial item).
    fn item<'py>(
        &self,
        py: Python<'py>,
        slot: &Slot<'_>,
        index: u64,
        timed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sample = self.fetch(py, slot, index, timed)?;
        self.pipeline.transform_attached(py, index, sample)
    }

    /// `__getitem__(index)`, not transformed.
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        slot: &Slot<'_>,
        index: u64,
        timed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        slot.set(index);
        let started = timed.then(Instant::now);
        let sample = self.getitem.bind(py).call1((index,));
        self.pipeline.stats.fetch_took(started);
        let sample = sample.map_err(|e| no_stop_iteration(py, e, "__getitem__"))?;
        self.check_not_coroutine(&sample, "__getitem__")?;
        Ok(sample)
    }

    /// The items of a batch fetched one by one, then transformed at once (a `Tokenize`): up
    /// to the first item that fails to be fetched, whose error comes after those of the
    /// transforms before it, as when each item is transformed as it is fetched.
    fn fetched_then_transformed<'py>(
        &self,
        py: Python<'py>,
        slot: &Slot<'_>,
        indices: &[u64],
        ctx: &BatchCtx,
    ) -> Result<Vec<Bound<'py, PyAny>>, LoadError<PyErr>> {
        let mut fetched = Vec::with_capacity(indices.len());
        let mut failed = None;
        for (pos, &i) in indices.iter().enumerate() {
            if ctx.is_cancelled() {
                return Err(LoadError::Cancelled);
            }
            match self.fetch(py, slot, i, pos == 0) {
                Ok(x) => fetched.push((i, Ok(x))),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let items = self
            .pipeline
            .transform_batch_attached(py, fetched)
            .into_iter()
            .map(|(_, item)| item)
            .collect::<PyResult<Vec<_>>>()?;
        match failed {
            Some(e) => Err(LoadError::Source(e)),
            None => Ok(items),
        }
    }

    /// The whole batch in one attachment: `__getitems__` when there is one, else one
    /// `__getitem__` per index. With skipping on, a failed `__getitems__` is retried item by
    /// item to find the items that fail.
    /// An abandoned epoch (dropped iterator, exiting interpreter) stops between items.
    fn batch(
        &self,
        py: Python<'_>,
        slot: &Slot<'_>,
        indices: &[u64],
        ctx: &BatchCtx,
    ) -> Result<Loaded, LoadError<PyErr>> {
        // One item at a time: one in flight while the batch is fetched (counted per batch).
        let _fetching = self.pipeline.stats.fetching();
        let epoch = ctx.epoch_id();
        let loaded = |batch| Loaded::new(batch, indices.len());
        let go_on = || {
            if ctx.is_cancelled() {
                Err(LoadError::Cancelled)
            } else {
                Ok(())
            }
        };
        if self.skipper.enabled() {
            if let Some(Ok(list)) = self.getitems_list(py, slot, indices) {
                return Ok(self
                    .pipeline
                    .collate_attached(py, list, indices)
                    .map(loaded)?);
            }
            let list = PyList::empty(py);
            let mut kept = Vec::with_capacity(indices.len());
            for (pos, &i) in indices.iter().enumerate() {
                go_on()?;
                let item = self.item(py, slot, i, pos == 0);
                if let Some(x) = self.skipper.kept(py, epoch, i, item)? {
                    list.append(x)?;
                    kept.push(i);
                }
            }
            let items = kept.len();
            slot.clear();
            let batch = self.pipeline.collate_attached(py, list, &kept)?;
            return Ok(Loaded::new(batch, items));
        }
        let list = match self.getitems_list(py, slot, indices) {
            Some(list) => list?,
            None if self.pipeline.transforms_by_batch() => {
                PyList::new(py, self.fetched_then_transformed(py, slot, indices, ctx)?)?
            }
            None => {
                // Collected first, then made into a list of the exact size at once (appending
                // grows the list several times per batch).
                let mut items = Vec::with_capacity(indices.len());
                for (pos, &i) in indices.iter().enumerate() {
                    go_on()?;
                    items.push(self.item(py, slot, i, pos == 0)?);
                }
                PyList::new(py, items)?
            }
        };
        go_on()?;
        slot.clear();
        Ok(self
            .pipeline
            .collate_attached(py, list, indices)
            .map(loaded)?)
    }

    /// The transformed samples of `__getitems__`, when the dataset has one.
    fn getitems_list<'py>(
        &self,
        py: Python<'py>,
        slot: &Slot<'_>,
        indices: &[u64],
    ) -> Option<PyResult<Bound<'py, PyList>>> {
        let getitems = self.getitems.as_ref()?;
        Some((|| {
            let started = Instant::now();
            let samples = getitems.bind(py).call1((PyList::new(py, indices)?,));
            self.pipeline.stats.fetch_took(Some(started));
            let samples = samples.map_err(|e| no_stop_iteration(py, e, "__getitems__"))?;
            let by_batch = self.pipeline.transforms_by_batch();
            let mut items = Vec::with_capacity(indices.len());
            for (pos, sample) in samples.try_iter()?.enumerate() {
                let sample = sample?;
                if pos >= indices.len() {
                    return Err(wrong_count(indices.len(), pos + 1, true));
                }
                self.check_not_coroutine(&sample, "__getitems__")?;
                if by_batch {
                    items.push((indices[pos], Ok(sample)));
                } else {
                    slot.set(indices[pos]);
                    let item = self.pipeline.transform_attached(py, indices[pos], sample)?;
                    items.push((indices[pos], Ok(item)));
                }
            }
            if items.len() != indices.len() {
                return Err(wrong_count(indices.len(), items.len(), false));
            }
            if by_batch {
                items = self.pipeline.transform_batch_attached(py, items);
            }
            let items = items
                .into_iter()
                .map(|(_, item)| item)
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)
        })())
    }
}

fn wrong_count(expected: usize, got: usize, more: bool) -> PyErr {
    let got = if more {
        format!("more than {expected}")
    } else {
        got.to_string()
    };
    PyValueError::new_err(format!(
        "__getitems__ must return one sample per index: it got {expected} indices and returned {got} samples"
    ))
}

/// A Python dataset, loaded a batch at a time.
pub struct PySource {
    pub calls: Arc<Calls>,
    /// The interpreter runs with a GIL: the workers' sessions and the consumer take turns.
    pub gil: bool,
}

impl PySource {
    /// Visits the dataset's callables (for [`crate::gc::Refs`]).
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        let calls = &self.calls;
        visit.call(&calls.getitem)?;
        visit.call(&calls.getitems)?;
        visit.call(&calls.coroutine_type)?;
        calls.pipeline.visit(visit)
    }
}

impl Source for PySource {
    type Batch = Loaded;
    type Error = PyErr;

    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<Loaded, LoadError<PyErr>> {
        if ctx.item_concurrency() > 1 {
            // One `__getitem__` call per item, up to item_concurrency at once (never
            // `__getitems__`, even for a batch of one); the interpreter is taken per item, and
            // released while this thread waits for the helpers.
            let (calls, epoch_id) = (Arc::clone(&self.calls), ctx.epoch_id());
            let first = indices.first().copied();
            let (worker, epoch) = (ctx.worker(), ctx.epoch_number());
            let fetch = move |i: u64| {
                let _fetching = calls.pipeline.stats.fetching();
                crate::worker::scope(&calls.pipeline.info, worker, epoch, Some(i), || {
                    crate::worker::with_slot(|slot| {
                        crate::attach::attach(|py| {
                            let item = calls.item(py, slot, i, Some(i) == first);
                            calls
                                .skipper
                                .kept(py, epoch_id, i, item)
                                .map(|x| x.map(Bound::unbind))
                        })
                    })
                })
            };
            let items = if ctx.worker().is_none() {
                // The consumer's own thread (no workers) only waits, in slices, so Ctrl-C
                // reaches it even while every item blocks.
                ctx.map_items_interruptible(
                    indices,
                    fetch,
                    crate::seam::SIGNAL_SLICE,
                    crate::seam::check_signals_detached,
                )?
            } else {
                ctx.map_items(indices, fetch)?
            };
            return crate::attach::attach(|py| {
                let kept: Vec<u64> = indices
                    .iter()
                    .zip(&items)
                    .filter_map(|(&i, x)| x.as_ref().map(|_| i))
                    .collect();
                let list = PyList::new(py, items.into_iter().flatten().collect::<Vec<_>>())?;
                let items = kept.len();
                let batch = self.calls.pipeline.collate_attached(py, list, &kept)?;
                Ok(Loaded::new(batch, items))
            })
            .map_err(LoadError::Source);
        }
        crate::worker::with_slot(|slot| {
            crate::attach::attach(|py| self.calls.batch(py, slot, indices, ctx))
        })
    }

    /// A worker keeps the interpreter across the batches it can load back to back: under the
    /// GIL, each hand-over between threads costs more than a small batch. Not when items are
    /// fetched on helpers: they need the interpreter while the worker waits for them.
    fn session<R>(&self, config: &Config, f: impl FnOnce() -> R) -> R {
        if config.item_concurrency > 1 {
            f()
        } else {
            // Refused once the interpreter exits: the batches then fail without it.
            let mut f = Some(f);
            match crate::attach::try_attach(|_| f.take().map(|f| f())) {
                Some(Some(r)) => r,
                _ => f.take().map(|f| f()).expect("f runs once"),
            }
        }
    }

    /// Not when a batch's transform runs without the interpreter (a `Tokenize`): its workers
    /// then run in parallel for most of the batch, and taking turns would run them one by one.
    fn takes_turns(&self, config: &Config) -> bool {
        self.gil && config.item_concurrency <= 1 && !self.calls.pipeline.transforms_by_batch()
    }
}
