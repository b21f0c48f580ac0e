//! What user code running on a loader's thread can ask: which worker it runs on
//! (`dataloader_rs.get_worker_info()`) and the seed of the item it is working on
//! (`dataloader_rs.item_seed()`).
//!
//! Workers are threads, so torch's recipe (reseed the global RNGs in each worker process)
//! cannot work: every thread shares them. Instead each item gets a seed of its own, a function
//! of the loader's base seed, the epoch and the item's index: a Python augmentation seeds its
//! own generator from it, and a seeded run gives the same items whatever the thread count.
//!
//! The loader sets a thread-local `Current` around each batch and each item ([`scope`]);
//! reading it costs no lock and no reference count.

use std::cell::Cell;
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::PyTraverseError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;

/// What `get_worker_info()` reports of one loader: a `LoaderInfo` (dataset, num_workers) and
/// the base seed of its per-item seeds.
#[derive(Default)]
pub struct ItemInfo {
    set: OnceLock<Py<PyAny>>,
    /// Changes only between epochs (a resumed run takes its first run's), so a relaxed read
    /// inside an epoch sees one value.
    base_seed: AtomicU64,
}

impl ItemInfo {
    /// Sets the loader's info object (once, right after construction) and base seed.
    pub fn set(&self, info: Py<PyAny>, base_seed: u64) -> PyResult<()> {
        self.set
            .set(info)
            .map_err(|_| PyRuntimeError::new_err("the worker info of a loader is set once"))?;
        self.set_base_seed(base_seed);
        Ok(())
    }

    /// Replaces the base seed: a run resumed from a state draws what the run that took it drew.
    pub fn set_base_seed(&self, base_seed: u64) {
        self.base_seed.store(base_seed, Ordering::Relaxed);
    }

    pub fn base_seed(&self) -> u64 {
        self.base_seed.load(Ordering::Relaxed)
    }
}

impl ItemInfo {
    /// The key the random transforms of item `index` draw from on this thread: the loader's
    /// base seed, the epoch the thread is loading (set by [`scope`]) and the index.
    #[must_use]
    pub fn key(&self, index: u64) -> dlrs_transforms::Key {
        let seed = self.base_seed();
        dlrs_transforms::Key::new(seed, current_at().1, index)
    }

    /// Visits the info object (it holds the dataset) for the garbage collector.
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self.set.get() {
            Some(info) => visit.call(info),
            None => Ok(()),
        }
    }
}

/// Where the current thread is in a loader's work (set per batch).
#[derive(Clone, Copy)]
struct Current {
    info: *const ItemInfo,
    worker: Option<usize>,
    epoch: u64,
    /// The item being loaded: a cell on the stack of the enclosing [`scope`].
    index: *const Cell<u64>,
}

const OUTSIDE: Current = Current {
    info: ptr::null(),
    worker: None,
    epoch: 0,
    index: ptr::null(),
};

/// The index of [`Slot`] when no item is being loaded.
const NO_ITEM: u64 = u64::MAX;

thread_local! {
    static CURRENT: Cell<Current> = const { Cell::new(OUTSIDE) };
}

/// Restores what the thread had before a [`scope`] (also when the call unwinds).
struct Restore(Current);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| c.set(self.0));
    }
}

/// Runs `f` as work of the loader whose info is `info`: on `worker` (None: the consumer's
/// thread), for epoch `epoch` and, when given, the item `index`.
pub fn scope<R>(
    info: &ItemInfo,
    worker: Option<usize>,
    epoch: u64,
    index: Option<u64>,
    f: impl FnOnce() -> R,
) -> R {
    let slot = Cell::new(index.unwrap_or(NO_ITEM));
    let now = Current {
        info: ptr::from_ref(info),
        worker,
        epoch,
        index: ptr::from_ref(&slot),
    };
    let _restore = Restore(CURRENT.try_with(|c| c.replace(now)).unwrap_or(OUTSIDE));
    f()
}

/// The worker and epoch the thread is loading for, to carry to another thread (the transform
/// pool of an async or Rust dataset).
#[must_use]
pub fn current_at() -> (Option<usize>, u64) {
    CURRENT
        .try_with(Cell::get)
        .map_or((None, 0), |c| (c.worker, c.epoch))
}

/// Where a batch writes the index of the item it loads: found once per batch, then written
/// with a plain store per item (a thread-local look-up per item costs a call in a shared
/// library, which a trivial `__getitem__` notices).
pub struct Slot<'a>(Option<&'a Cell<u64>>);

impl Slot<'_> {
    /// Item `index` is being loaded now.
    #[inline]
    pub fn set(&self, index: u64) {
        if let Some(cell) = self.0 {
            cell.set(index);
        }
    }

    /// No item is being loaded (the batch is being collated).
    #[inline]
    pub fn clear(&self) {
        self.set(NO_ITEM);
    }
}

/// Runs `f` with the [`Slot`] of the enclosing [`scope`] (one that writes nowhere outside one).
pub fn with_slot<R>(f: impl FnOnce(&Slot<'_>) -> R) -> R {
    let cell = CURRENT.try_with(|c| c.get().index).unwrap_or(ptr::null());
    // SAFETY: a non-null `index` was set by the enclosing `scope` from a cell on its stack; the
    // scope restores the previous value (null outside any scope) before that cell goes away, and
    // `f` runs inside it, so the reference does not outlive the cell. `Cell` is not `Sync`, and
    // both the scope and `f` run on this thread.
    let slot = Slot(unsafe { cell.as_ref() });
    f(&slot)
}

/// SplitMix64's finalizer: a bijection that spreads every input bit over the output.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of item `index` in epoch `epoch` of a loader whose base seed is `base`.
#[must_use]
pub const fn item_seed(base: u64, epoch: u64, index: u64) -> u64 {
    mix(mix(mix(base) ^ epoch.wrapping_add(0x9e37_79b9_7f4a_7c15)) ^ index)
}

/// The seed of worker `worker` in epoch `epoch` (distinct from every item seed's stream only
/// by construction of the inputs; it is what `get_worker_info().seed` reports).
#[must_use]
pub const fn worker_seed(base: u64, epoch: u64, worker: u64) -> u64 {
    mix(mix(mix(base ^ 0x5851_f42d_4c95_7f2d) ^ epoch) ^ worker)
}

/// `(info, worker, epoch, worker_seed, item_seed)` on a loader's thread, None elsewhere:
/// the native half of `get_worker_info()` and `item_seed()`.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn worker_state(py: Python<'_>) -> Option<(Py<PyAny>, Option<usize>, u64, u64, Option<u64>)> {
    let now = CURRENT.try_with(Cell::get).ok()?;
    if now.info.is_null() {
        return None;
    }
    // SAFETY: as in `with_slot`: this runs on the thread whose scope set the cell, inside it.
    let index = unsafe { now.index.as_ref() }
        .map(Cell::get)
        .filter(|&i| i != NO_ITEM);
    // SAFETY: `info` was set by `scope` from a reference that outlives the scope (the loader's
    // `ItemInfo`, held by the pipeline that runs the user code calling this), and `Restore`
    // clears it when the scope ends, so while it is non-null here it points to a live value.
    let info = unsafe { &*now.info };
    let obj = info.set.get()?;
    let base = info.base_seed();
    let worker = now.worker.map_or(0, |w| w as u64);
    Some((
        obj.clone_ref(py),
        now.worker,
        now.epoch,
        worker_seed(base, now.epoch, worker),
        index.map(|i| item_seed(base, now.epoch, i)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_by_item_epoch_and_base() {
        let s = item_seed(1, 0, 0);
        assert_ne!(s, item_seed(1, 0, 1));
        assert_ne!(s, item_seed(1, 1, 0));
        assert_ne!(s, item_seed(2, 0, 0));
        assert_eq!(s, item_seed(1, 0, 0));
        // Not a sum: (epoch 0, index 1) and (epoch 1, index 0) differ.
        assert_ne!(item_seed(1, 0, 1), item_seed(1, 1, 0));
    }
}
