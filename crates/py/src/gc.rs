//! Garbage-collector support of the pyclasses that hold Python objects (`Loader`,
//! `BatchIterator`): a loader whose `collate_fn` is a bound method of an object that holds the
//! loader is a reference cycle, collected only if the collector sees the loader's references.
//!
//! The Python objects of a loader live in Rust structures shared through `Arc`s: by the loader,
//! its iterators' epochs, the worker jobs still running and the item helpers. Each reference
//! must be reported by at most one object, and only by one that keeps it alive on its own (else
//! the collector would free objects still used elsewhere): so a pyclass reports the objects
//! behind an `Arc` only while it holds the only handle ([`only`]). While an iterator or a job
//! shares them, they are not reported, and a cycle through them waits for the next collection.
//! Handles are only ever added by calls into the loader, which cannot run while the collector
//! traverses it, so a count of one stays one.
//!
//! There is no `__clear__`: these pyclasses are frozen, their references never change after
//! construction, so a cycle through them always passes through a mutable object (the instance
//! or dict that was given the loader after it was made), whose own clear breaks it; this keeps
//! the per-item path free of any lock or indirection. (PyO3's guide: immutable references do
//! not have to be cleared.)

use std::sync::Arc;

/// The value behind `arc` when `arc` is its only handle.
pub fn only<T>(arc: &Arc<T>) -> Option<&T> {
    (Arc::strong_count(arc) == 1 && Arc::weak_count(arc) == 0).then(|| &**arc)
}
