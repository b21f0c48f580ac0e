//! What a loader keeps across epochs beyond the core: the shard of a distributed run, the batch
//! a resumed epoch starts at, the progress a checkpoint records, and the skipped samples.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::PyList;

use dlrs_core::Order;
use dlrs_core::sync::lock;

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

impl RunState {
    /// Shards every later epoch: rank `rank` of `world_size`.
    pub fn set_shard(&self, rank: u64, world_size: u64) {
        *lock(&self.shard) = Some((rank, world_size));
    }

    /// Every later epoch is whole (not sharded).
    pub fn clear_shard(&self) {
        *lock(&self.shard) = None;
    }

    /// `(rank, world_size)` of the later epochs, when sharded.
    pub fn current_shard(&self) -> Option<(u64, u64)> {
        *lock(&self.shard)
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

/// The failed items of one epoch.
struct Record {
    /// [`dlrs_core::Epoch::id`].
    epoch: usize,
    items: u64,
    failures: Vec<Failure>,
}

/// The records kept: the latest epochs' (a batch of an older one still running skips without
/// recording).
const RECORDS: usize = 4;

/// Skips items whose fetch or transform fails, up to a limit per epoch, and records them, each
/// in the record of its own epoch: an abandoned epoch whose workers are still busy never adds
/// to the next epoch's record.
#[derive(Default)]
pub struct Skipper {
    enabled: AtomicBool,
    limit: Mutex<Option<Limit>>,
    /// Newest first.
    records: Mutex<VecDeque<Record>>,
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

    /// Starts an epoch of `items` items with `start` and gives it an empty record (under the
    /// records' lock: a worker that fails on its first batch waits for the record).
    pub fn start_epoch<E>(
        &self,
        items: u64,
        start: impl FnOnce() -> E,
        id: impl Fn(&E) -> usize,
    ) -> E {
        let mut records = lock(&self.records);
        let epoch = start();
        records.push_front(Record {
            epoch: id(&epoch),
            items,
            failures: Vec::new(),
        });
        records.truncate(RECORDS);
        epoch
    }

    fn allowed(&self, items: u64) -> u64 {
        match *lock(&self.limit) {
            Some(Limit::Count(n)) => n,
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            Some(Limit::Fraction(f)) => (f * items as f64).floor() as u64,
            None => 0,
        }
    }

    /// The item `result` holds, or `None` for one that failed and may be skipped (see `skip`).
    pub fn kept<T>(
        &self,
        py: Python<'_>,
        epoch: usize,
        index: u64,
        result: PyResult<T>,
    ) -> PyResult<Option<T>> {
        match result {
            Ok(x) => Ok(Some(x)),
            Err(e) if self.enabled() => self.skip(py, epoch, index, &e).map(|()| None),
            Err(e) => Err(e),
        }
    }

    /// Records that item `index` of epoch `epoch` ([`dlrs_core::BatchCtx::epoch_id`]) failed
    /// with `err`. Ok: skip it. Err: over the limit, a `TooManyFailures` with the epoch's record.
    pub fn skip(&self, py: Python<'_>, epoch: usize, index: u64, err: &PyErr) -> PyResult<()> {
        let type_name = crate::text::name_of(&err.get_type(py));
        let message = err
            .value(py)
            .str()
            .map_or_else(|_| String::new(), |s| s.to_string());
        let (count, items, failures) = {
            let mut records = lock(&self.records);
            // Newest first: an id reused by a later epoch finds that epoch's record.
            let Some(record) = records.iter_mut().find(|r| r.epoch == epoch) else {
                return Ok(()); // an epoch older than the records kept
            };
            record.failures.push(Failure {
                index,
                type_name,
                message,
            });
            (
                record.failures.len() as u64,
                record.items,
                record.failures.clone(),
            )
        };
        let allowed = self.allowed(items);
        if count <= allowed {
            return Ok(());
        }
        let errors = py.import("dataloader_rs._errors")?;
        let record = failure_list(py, failures)?;
        let exc = errors.getattr("TooManyFailures")?.call1((
            format!("{count} items failed in this epoch, more than max_failures allows ({allowed}); see .failures"),
            record,
        ))?;
        Err(PyErr::from_value(exc))
    }

    /// The failed items of the latest epoch, as `dataloader_rs.Failure` tuples.
    pub fn failures<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let failures = lock(&self.records)
            .front()
            .map(|r| r.failures.clone())
            .unwrap_or_default();
        failure_list(py, failures)
    }
}

fn failure_list(py: Python<'_>, failures: Vec<Failure>) -> PyResult<Bound<'_, PyList>> {
    let class = py.import("dataloader_rs._errors")?.getattr("Failure")?;
    let list = PyList::empty(py);
    for f in failures {
        list.append(class.call1((f.index, f.type_name, f.message))?)?;
    }
    Ok(list)
}
