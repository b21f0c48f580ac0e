//! What a loader keeps across epochs beyond the core: the shard of a distributed run, the batch
//! a resumed epoch starts at, the progress a checkpoint records, and the skipped samples.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyList;

use dlrs_core::Order;

/// Where the latest epoch stands.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// The number of the epoch.
    pub epoch: u64,
    /// The batches of it handed out (or skipped by resuming).
    pub position: u64,
    /// The batches it has.
    pub num_batches: u64,
    /// Whether an epoch was started at all.
    pub started: bool,
}

/// Sharding, resume and progress of one loader.
#[derive(Default)]
pub struct RunState {
    shard: Mutex<Option<(u64, u64)>>,
    resume_at: AtomicU64,
    progress: Mutex<Progress>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RunState {
    /// Shards every later epoch: rank `rank` of `world_size`.
    pub fn set_shard(&self, rank: u64, world_size: u64) {
        *lock(&self.shard) = Some((rank, world_size));
    }

    /// Every later epoch is whole (not sharded).
    pub fn clear_shard(&self) {
        *lock(&self.shard) = None;
    }

    /// This rank's share of `order` (the order itself when not sharded).
    pub fn shard(&self, order: Order, drop_last: bool) -> Order {
        match *lock(&self.shard) {
            Some((rank, world)) => order.shard(rank, world, drop_last),
            None => order,
        }
    }

    /// The next epoch starts at batch `position`.
    pub fn resume_at(&self, position: u64) {
        self.resume_at.store(position, Ordering::Relaxed);
    }

    /// The batch the next epoch starts at (once: later epochs start at 0).
    pub fn take_start(&self) -> u64 {
        self.resume_at.swap(0, Ordering::Relaxed)
    }

    /// Records where epoch `epoch` stands.
    pub fn record(&self, epoch: u64, position: u64, num_batches: u64) {
        *lock(&self.progress) = Progress {
            epoch,
            position,
            num_batches,
            started: true,
        };
    }

    /// Where the latest epoch stands.
    pub fn progress(&self) -> Progress {
        *lock(&self.progress)
    }
}

/// How many failed items an epoch may skip.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// At most this many.
    Count(u64),
    /// At most this fraction of the epoch's items.
    Fraction(f64),
}

/// One failed item.
#[derive(Debug, Clone)]
struct Failure {
    index: u64,
    type_name: String,
    message: String,
}

/// Skips items whose fetch or transform fails, up to a limit per epoch, and records them.
#[derive(Default)]
pub struct Skipper {
    enabled: AtomicBool,
    limit: Mutex<Option<Limit>>,
    epoch_items: AtomicU64,
    failures: Mutex<Vec<Failure>>,
}

impl Skipper {
    /// Turns skipping on.
    pub fn set_limit(&self, limit: Limit) {
        *lock(&self.limit) = Some(limit);
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Whether failed items are skipped.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// A new epoch of `items` items: the record starts empty.
    pub fn new_epoch(&self, items: u64) {
        self.epoch_items.store(items, Ordering::Relaxed);
        lock(&self.failures).clear();
    }

    fn allowed(&self) -> u64 {
        match *lock(&self.limit) {
            Some(Limit::Count(n)) => n,
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            Some(Limit::Fraction(f)) => {
                (f * self.epoch_items.load(Ordering::Relaxed) as f64).floor() as u64
            }
            None => 0,
        }
    }

    /// Records that item `index` failed with `err`. Ok: skip it. Err: over the limit, a
    /// `TooManyFailures` with the whole record.
    pub fn skip(&self, py: Python<'_>, index: u64, err: &PyErr) -> PyResult<()> {
        let type_name = err
            .get_type(py)
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        let message = err
            .value(py)
            .str()
            .map_or_else(|_| String::new(), |s| s.to_string());
        let count = {
            let mut failures = lock(&self.failures);
            failures.push(Failure {
                index,
                type_name,
                message,
            });
            failures.len() as u64
        };
        let allowed = self.allowed();
        if count <= allowed {
            return Ok(());
        }
        let errors = py.import("dataloader_rs._errors")?;
        let record = self.failures(py)?;
        let exc = errors.getattr("TooManyFailures")?.call1((
            format!("{count} items failed in this epoch, more than max_failures allows ({allowed}); see .failures"),
            record,
        ))?;
        Err(PyErr::from_value(exc))
    }

    /// The failed items of the current epoch, as `dataloader_rs.Failure` tuples.
    pub fn failures<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let class = py.import("dataloader_rs._errors")?.getattr("Failure")?;
        let failures = lock(&self.failures).clone();
        let list = PyList::empty(py);
        for f in failures {
            list.append(class.call1((f.index, f.type_name, f.message))?)?;
        }
        Ok(list)
    }
}
