//! Garbage-collector support of the pyclasses that hold Python objects (`Loader`,
//! `BatchIterator`): a loader whose `collate_fn` is a bound method of an object that holds the
//! loader (and perhaps one of its iterators, mid-epoch) is a reference cycle, collected only if
//! the collector sees every reference of the cycle.
//!
//! The Python objects of a loader (the dataset's callables, the transform and collation, the
//! worker info, the event loop) live in Rust structures shared through `Arc`s: by the loader,
//! its iterators' epochs, the worker jobs still running and the item helpers. The collector
//! must see each of those references exactly once, from an object that is garbage only when
//! they can no longer be used for anything anyone sees. So one Python object, [`Refs`], reports
//! them; the loader and each iterator hold a Python reference to it (and report that one), the
//! Rust threads none. A thread still working for an epoch keeps the `Arc`s, not `Refs`: it is
//! invisible to the collector, and rightly so, since what it loads goes to an iterator, which
//! holds `Refs`. Once the loader and its iterators are garbage, such a thread finishes a batch
//! that nobody takes (user code it runs holds its own references, which keep the cycle alive
//! meanwhile); the iterator's drop abandons the epoch and the loader's drop lets its threads go.
//!
//! There is no `__clear__`: these pyclasses are frozen, their references never change after
//! construction, so a cycle through them always passes through a mutable object (the instance
//! or dict that was given the loader after it was made), whose own clear breaks it; this keeps
//! the per-item path free of any lock or indirection. (PyO3's guide: immutable references do
//! not have to be cleared.)

use std::sync::Arc;

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

use crate::sources::AnySource;
use crate::sources::aio::CloseOnDrop;

/// The one Python object that reports a loader's Python objects to the collector; held by the
/// loader and by each of its iterators.
#[pyclass(frozen, module = "dataloader_rs._native", name = "_LoaderRefs")]
pub struct Refs {
    source: Arc<AnySource>,
    /// The event loop of a `PyAsyncDataset`, closed when the last holder goes.
    event_loop: Option<Arc<CloseOnDrop>>,
}

impl Refs {
    pub fn new(
        py: Python<'_>,
        source: Arc<AnySource>,
        event_loop: Option<Arc<CloseOnDrop>>,
    ) -> PyResult<Py<Self>> {
        Py::new(py, Self { source, event_loop })
    }
}

#[pymethods]
impl Refs {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.source.visit(&visit)?;
        if let Some(guard) = &self.event_loop {
            visit.call(&guard.0)?;
        }
        Ok(())
    }
}
