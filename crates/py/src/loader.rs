//! The native half of `PyDataloader`: a core [`dlrs_core::Loader`] over a Python dataset, and
//! the iterator of one epoch. Argument checking lives in `python/dataloader_rs/_loader.py`,
//! which builds these.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyType};

use dlrs_core::{Config, Epoch, Indices, Order, Recv, Shuffle};

use crate::errors::{core_error, load_error};
use crate::pipeline::Pipeline;
use crate::seam::{Slice, wait_interruptibly};
use crate::source::{Calls, PySource};

/// A loader over a Python dataset (made by `PyDataloader`).
#[pyclass(frozen, module = "dataloader_rs._native", name = "Loader")]
pub struct Loader {
    inner: dlrs_core::Loader<PySource>,
    shuffle: Option<Shuffle>,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (
        getitem, getitems, transform, collate_fn, *, batch_size, num_workers, prefetch_depth,
        item_concurrency, drop_last, return_indices, shuffle, seed
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        getitem: Py<PyAny>,
        getitems: Option<Py<PyAny>>,
        transform: Option<Py<PyAny>>,
        collate_fn: Option<Py<PyAny>>,
        batch_size: usize,
        num_workers: usize,
        prefetch_depth: usize,
        item_concurrency: usize,
        drop_last: bool,
        return_indices: bool,
        shuffle: bool,
        seed: Option<u64>,
    ) -> PyResult<Self> {
        let coroutine_type = py
            .import("types")?
            .getattr("CoroutineType")?
            .cast_into::<PyType>()?
            .unbind();
        let pipeline = Pipeline::from_py(transform, collate_fn, return_indices);
        let calls = Calls {
            getitem,
            getitems,
            pipeline,
            coroutine_type,
        };
        let config = Config {
            batch_size,
            num_workers,
            prefetch_depth,
            item_concurrency,
            drop_last,
        };
        let inner = dlrs_core::Loader::new(
            PySource {
                calls: Arc::new(calls),
                item_concurrency,
            },
            config,
        )
        .map_err(|e| core_error(&e))?;
        let shuffle = shuffle.then(|| seed.map_or_else(Shuffle::from_entropy, Shuffle::seeded));
        Ok(Self { inner, shuffle })
    }

    /// The number of batches of an epoch of `len` items.
    fn num_batches(&self, len: u64) -> u64 {
        self.inner.config().num_batches(len)
    }

    /// The seed of the shuffle (drawn from the OS when none was given), or None.
    #[getter]
    fn seed(&self) -> Option<u64> {
        self.shuffle.map(|s| s.seed())
    }

    /// The number of the next epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.next_epoch_number()
    }

    /// Starts the next epoch over `len` items, in order or shuffled.
    fn epoch_over(&self, len: u64) -> BatchIterator {
        let e = self.inner.advance_epoch();
        let order = match self.shuffle {
            Some(s) => s.order(len, e),
            None => Order::Sequential { len },
        };
        self.start(order)
    }

    /// Starts the next epoch in the order of `sampler`, read whole now.
    fn epoch_from_sampler(&self, sampler: &Bound<'_, PyAny>) -> PyResult<BatchIterator> {
        let indices = read_sampler(sampler)?;
        self.inner.advance_epoch();
        Ok(self.start(Order::Explicit(Arc::new(indices))))
    }
}

impl Loader {
    fn start(&self, order: Order) -> BatchIterator {
        let config = *self.inner.config();
        BatchIterator {
            epoch: self.inner.epoch(order),
            busy: AtomicBool::new(false),
            workers: config.num_workers > 0,
            inline_releases: config.num_workers == 0 && config.item_concurrency > 1,
        }
    }
}

/// Reads a sampler whole: every value a non-negative int (numpy integers included).
fn read_sampler(sampler: &Bound<'_, PyAny>) -> PyResult<Indices> {
    let iter = sampler.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "sampler must be an iterable of ints, got {}",
            sampler
                .get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })?;
    let mut out = Indices::with_capacity(sampler.len().unwrap_or(0));
    for item in iter {
        let item = item?;
        out.push(index_of(&item)?);
    }
    out.shrink_to_fit();
    Ok(out)
}

fn index_of(item: &Bound<'_, PyAny>) -> PyResult<u64> {
    let bad_type = || {
        let ty = item
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        let shown = item
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        PyTypeError::new_err(format!(
            "the sampler yielded {shown} of type {ty}: indices must be non-negative ints"
        ))
    };
    if item.is_instance_of::<PyBool>() {
        return Err(bad_type());
    }
    match item.extract::<i64>() {
        Ok(v) => u64::try_from(v).map_err(|_| {
            PyValueError::new_err(format!(
                "the sampler yielded {v}: indices must be non-negative ints"
            ))
        }),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(item.py()) => {
            item.extract::<u64>().map_err(|_| {
                PyValueError::new_err(format!(
                    "the sampler yielded {item}: indices must fit in 64 bits and be non-negative"
                ))
            })
        }
        Err(_) => Err(bad_type()),
    }
}

/// The batches of one epoch, in order.
#[pyclass(frozen, module = "dataloader_rs._native", name = "BatchIterator")]
pub struct BatchIterator {
    epoch: Epoch<PySource>,
    busy: AtomicBool,
    workers: bool,
    /// Without workers but with concurrent items, this thread waits for helpers that need the
    /// interpreter, so it releases it while the batch loads.
    inline_releases: bool,
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
        let _busy = Busy::enter(&self.busy)?;
        let recv = if self.workers {
            wait_interruptibly(py, |timeout| match self.epoch.recv(timeout) {
                Recv::Pending => Slice::Pending,
                other => Slice::Ready(other),
            })?
        } else if self.inline_releases {
            py.detach(|| self.epoch.recv(None))
        } else {
            self.epoch.recv(None)
        };
        match recv {
            Recv::Batch(Ok(batch)) => Ok(Some(batch)),
            Recv::Batch(Err(e)) => Err(load_error(e)),
            Recv::Finished => Ok(None),
            Recv::Pending => unreachable!("waits until ready"),
        }
    }

    /// The number of batches left in the epoch.
    fn __len__(&self) -> usize {
        usize::try_from(self.epoch.remaining()).unwrap_or(usize::MAX)
    }
}
