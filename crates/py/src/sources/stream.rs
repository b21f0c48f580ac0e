//! An iterable dataset (a stream) as a [`dlrs_core::Source`]: batch `b` is the next
//! `batch_size` items of one of the epoch's readers, read in order, then transformed and
//! collated by the worker that loads it, in parallel with the reading of the next batches.
//!
//! With one reader, every batch comes from one `iter(dataset)`. With one reader per worker
//! (torch's way), reader `k` is its own `iter(dataset)`, made and read with
//! `get_worker_info()` saying worker `k` of `n`; batch `b` is reader `b % n`'s next, and once
//! a reader ran dry its turns are skipped: torch's interleaving.
//!
//! Each reader's items pass through this rank's filter (every `world_size`-th item, complete
//! rounds only, so that every rank gets the same number) and a shuffle buffer; a resumed epoch
//! reads and drops what the batches it skips held.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use pyo3::PyTraverseError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::types::{PyIterator, PyList};

use dlrs_core::sync::lock;
use dlrs_core::{BatchCtx, LoadError, Source};

use crate::errors::no_stop_iteration;
use crate::pipeline::{Loaded, Pipeline};

/// The dataset states kept for batches read and not yet handed out, at most.
const MAX_STATES: usize = 1024;

/// How the items of a stream are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readers {
    /// One `iter(dataset)` for the epoch.
    One,
    /// One `iter(dataset)` per worker (`n` of them).
    PerWorker(usize),
}

impl Readers {
    fn count(self) -> usize {
        match self {
            Self::One => 1,
            Self::PerWorker(n) => n.max(1),
        }
    }
}

/// What an epoch of a stream is started with.
#[derive(Debug, Clone, Copy)]
pub struct StreamEpoch {
    /// The loader's epoch number.
    pub number: u64,
    /// The first batch handed out (a resumed epoch).
    pub start: u64,
    /// `(rank, world_size)`.
    pub shard: (u64, u64),
    /// The seed of the shuffle buffer.
    pub seed: u64,
    /// The dataset was given its state after this many batches (`load_state_dict`): the one
    /// reader goes on from there, dropping only the items of the batches skipped beyond.
    pub restored_at: Option<u64>,
}

/// How a stream is read and batched.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    pub readers: Readers,
    pub batch_size: usize,
    /// Each reader's short last batch is dropped.
    pub drop_last: bool,
    /// Items held by the shuffle buffer (0: none).
    pub shuffle_buffer: usize,
    /// The dataset has `state_dict` and `load_state_dict`.
    pub stateful: bool,
}

/// An iterable dataset, read by the epoch's readers.
pub struct StreamSource {
    pub dataset: Py<PyAny>,
    /// `make_iter()` gives a reader's iterator (None: `iter(dataset)`).
    pub make_iter: Option<Py<PyAny>>,
    pub pipeline: Pipeline,
    pub readers: Readers,
    pub batch_size: usize,
    pub drop_last: bool,
    /// Items held by the shuffle buffer (0: none).
    pub shuffle_buffer: usize,
    /// The one reader takes the dataset's `state_dict()` after each batch (the dataset has
    /// `state_dict` and `load_state_dict`).
    pub stateful: bool,
    current: Mutex<Option<Arc<EpochStream>>>,
    /// The dataset's state after the latest batch handed out: (epoch, batches handed out,
    /// state).
    delivered: Mutex<Option<(u64, u64, Py<PyAny>)>>,
}

/// The readers of one epoch.
struct EpochStream {
    number: u64,
    /// The core epoch that reads it: the first batch to arrive claims it, so that an older
    /// iterator of the same number never reads this epoch's readers.
    id: OnceLock<usize>,
    readers: Vec<Reader>,
    shard: (u64, u64),
    /// The dataset's state after each batch read and not yet handed out (`stateful`).
    states: Mutex<VecDeque<(u64, Py<PyAny>)>>,
}

struct Reader {
    state: Mutex<ReaderState>,
    turn: Condvar,
    /// The first batch of this reader with no items (`u64::MAX`: not known yet).
    dry_at: AtomicU64,
}

struct ReaderState {
    /// The reader's next batch (counted among its own batches).
    next: u64,
    /// Items still to read and drop before the next batch (a resumed epoch).
    drop: u64,
    iter: Option<Py<PyIterator>>,
    ended: bool,
    /// Items handed on so far (after the filter and the shuffle buffer).
    emitted: u64,
    buffer: Vec<PyResult<Py<PyAny>>>,
    rng: u64,
}

/// What reading one batch found.
enum Read {
    Items(Vec<(u64, PyResult<Py<PyAny>>)>),
    /// The reader has no more items: this batch is empty.
    Dry,
}

impl StreamSource {
    pub fn new(
        dataset: Py<PyAny>,
        make_iter: Option<Py<PyAny>>,
        pipeline: Pipeline,
        how: StreamConfig,
    ) -> Self {
        Self {
            dataset,
            make_iter,
            pipeline,
            readers: how.readers,
            batch_size: how.batch_size,
            drop_last: how.drop_last,
            shuffle_buffer: how.shuffle_buffer,
            // A shuffle buffer holds items read past the batch: the dataset's state would skip them.
            stateful: how.stateful && how.readers == Readers::One && how.shuffle_buffer == 0,
            current: Mutex::new(None),
            delivered: Mutex::new(None),
        }
    }

    /// Makes the readers of the epoch about to start (each calls `iter(dataset)` when it first
    /// reads).
    pub fn start_epoch(&self, epoch: StreamEpoch) {
        let n = self.readers.count() as u64;
        let per_batch = self.batch_size as u64;
        let readers = (0..n)
            .map(|k| {
                // Reader k's batches are k, k + n, ...: those before `start` are skipped.
                let skipped = epoch.start.saturating_sub(k).div_ceil(n);
                let before = skipped.saturating_mul(per_batch);
                let restored = epoch.restored_at.filter(|_| self.stateful);
                let read = restored.map_or(0, |at| at.min(skipped).saturating_mul(per_batch));
                Reader {
                    state: Mutex::new(ReaderState {
                        next: skipped,
                        drop: before - read,
                        iter: None,
                        ended: false,
                        // A restored reader's items keep the indices they have unbroken.
                        emitted: read,
                        buffer: Vec::new(),
                        rng: crate::worker::worker_seed(epoch.seed, epoch.number, k) | 1,
                    }),
                    turn: Condvar::new(),
                    dry_at: AtomicU64::new(u64::MAX),
                }
            })
            .collect();
        *lock(&self.current) = Some(Arc::new(EpochStream {
            number: epoch.number,
            id: OnceLock::new(),
            readers,
            shard: epoch.shard,
            states: Mutex::new(VecDeque::new()),
        }));
    }

    /// Whether no batch after `batch` holds items: every reader ran dry at or before its next
    /// turn after `batch`.
    pub fn finished_after(&self, batch: u64) -> bool {
        let Some(stream) = lock(&self.current).clone() else {
            return true;
        };
        let dry: Vec<u64> = stream
            .readers
            .iter()
            .map(|r| r.dry_at.load(Ordering::Acquire))
            .collect();
        no_turn_left(&dry, batch)
    }

    /// Batch `batch` of epoch `epoch` was handed out: the dataset's state after it becomes
    /// the one a checkpoint saves.
    pub fn delivered(&self, epoch: u64, batch: u64) {
        if !self.stateful {
            return;
        }
        let Some(stream) = lock(&self.current).clone() else {
            return;
        };
        let mut states = lock(&stream.states);
        while let Some((b, state)) = states.pop_front() {
            if b == batch {
                *lock(&self.delivered) = Some((epoch, batch + 1, state));
                return;
            }
            if b > batch {
                states.push_front((b, state));
                return;
            }
        }
    }

    /// The dataset's state after the latest batch handed out: (epoch, batches handed out,
    /// state).
    pub fn delivered_state(&self, py: Python<'_>) -> Option<(u64, u64, Py<PyAny>)> {
        lock(&self.delivered)
            .as_ref()
            .map(|(e, p, s)| (*e, *p, s.clone_ref(py)))
    }

    /// Visits the dataset, the readers and the items they hold.
    pub fn visit(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.dataset)?;
        visit.call(&self.make_iter)?;
        self.pipeline.visit(visit)?;
        if let Ok(delivered) = self.delivered.try_lock()
            && let Some((_, _, state)) = delivered.as_ref()
        {
            visit.call(state)?;
        }
        let Ok(current) = self.current.try_lock() else {
            return Ok(());
        };
        if let Some(stream) = current.as_ref() {
            for reader in &stream.readers {
                if let Ok(state) = reader.state.try_lock() {
                    visit.call(&state.iter)?;
                    for item in state.buffer.iter().flatten() {
                        visit.call(item)?;
                    }
                }
            }
            if let Ok(states) = stream.states.try_lock() {
                for (_, state) in states.iter() {
                    visit.call(state)?;
                }
            }
        }
        Ok(())
    }

    /// The epoch's readers, when `ctx` belongs to the epoch they were made for.
    fn stream_of(&self, ctx: &BatchCtx) -> Option<Arc<EpochStream>> {
        let stream = lock(&self.current).clone()?;
        if stream.number != ctx.epoch_number() {
            return None;
        }
        (*stream.id.get_or_init(|| ctx.epoch_id()) == ctx.epoch_id()).then_some(stream)
    }

    /// Waits for reader `k`'s turn at its batch `j` (without the interpreter), then reads
    /// it and hands the turn on, and gives the items to `then`, all in one attachment to the
    /// interpreter.
    fn read<R>(
        &self,
        stream: &EpochStream,
        k: usize,
        j: u64,
        batch: u64,
        ctx: &BatchCtx,
        then: impl FnOnce(Python<'_>, Read) -> Result<R, LoadError<PyErr>>,
    ) -> Result<R, LoadError<PyErr>> {
        let reader = &stream.readers[k];
        let state = lock(&reader.state);
        let mut state = ctx
            .wait_until(&reader.turn, state, |s| s.next == j)
            .ok_or(LoadError::Cancelled)?;
        crate::attach::attach(|py| {
            let result = self.read_batch(py, stream, k, &mut state, ctx);
            // The dataset's state after this batch, taken and kept before the turn is handed
            // on: on a free-threaded build the next reader reads on at once, interpreter or
            // not, and the states must stay in the batches' order.
            let failed = match &result {
                Ok(Read::Items(_)) if self.stateful => {
                    match self.dataset.bind(py).call_method0("state_dict") {
                        Ok(taken) => {
                            let mut states = lock(&stream.states);
                            states.push_back((batch, taken.unbind()));
                            if states.len() > MAX_STATES {
                                states.pop_front();
                            }
                            None
                        }
                        Err(e) => Some(e),
                    }
                }
                _ => None,
            };
            if matches!(result, Ok(Read::Dry)) {
                reader.dry_at.fetch_min(batch, Ordering::AcqRel);
            } else if state.ended {
                // This batch took the last items: the reader's next turn finds none.
                let n = stream.readers.len() as u64;
                reader
                    .dry_at
                    .fetch_min(batch.saturating_add(n), Ordering::AcqRel);
            }
            state.next += 1;
            drop(state);
            reader.turn.notify_all();
            let read = result?;
            if let Some(e) = failed {
                return Err(LoadError::Source(e));
            }
            then(py, read)
        })
    }

    /// Reads the next batch of reader `k`, as worker `k` of the readers when each worker has
    /// its own.
    fn read_batch(
        &self,
        py: Python<'_>,
        stream: &EpochStream,
        k: usize,
        state: &mut ReaderState,
        ctx: &BatchCtx,
    ) -> Result<Read, LoadError<PyErr>> {
        if state.ended && state.buffer.is_empty() {
            return Ok(Read::Dry);
        }
        let worker = match self.readers {
            // The one reader is not a worker: a dataset that shards itself by
            // `get_worker_info()` must give all its items to it.
            Readers::One => None,
            Readers::PerWorker(_) => Some(k),
        };
        let info = &self.pipeline.info;
        crate::worker::scope(info, worker, ctx.epoch_number(), None, || {
            if state.iter.is_none() {
                let made = match &self.make_iter {
                    None => self.dataset.bind(py).try_iter(),
                    Some(f) => f.bind(py).call0().and_then(|i| i.try_iter()),
                };
                let iter = made.map_err(|e| {
                    state.ended = true;
                    LoadError::Source(no_stop_iteration(py, e, "__iter__"))
                })?;
                state.iter = Some(iter.unbind());
            }
            while state.drop > 0 {
                if ctx.is_cancelled() {
                    return Err(LoadError::Cancelled);
                }
                if self.next_item(py, stream, state).is_none() {
                    break;
                }
                state.drop -= 1;
            }
            let n = stream.readers.len() as u64;
            let mut items = Vec::with_capacity(self.batch_size.min(1024));
            let started = std::time::Instant::now();
            while items.len() < self.batch_size {
                if ctx.is_cancelled() {
                    return Err(LoadError::Cancelled);
                }
                let Some(item) = self.next_item(py, stream, state) else {
                    break;
                };
                // An index unique among the readers: the item's place in its reader.
                let index = (state.emitted - 1).saturating_mul(n) + k as u64;
                items.push((index, item));
                if items.len() == 1 {
                    // The first item's latency, as for map-style datasets (a clock read per
                    // item would cost more than a trivial item).
                    self.pipeline.stats.fetch_took(Some(started));
                }
            }
            if items.is_empty() || (self.drop_last && items.len() < self.batch_size) {
                state.ended = true;
                state.buffer.clear();
                return Ok(Read::Dry);
            }
            Ok(Read::Items(items))
        })
    }

    /// The reader's next item after this rank's filter and the shuffle buffer; None once the
    /// stream (and the buffer) ran dry.
    fn next_item(
        &self,
        py: Python<'_>,
        stream: &EpochStream,
        state: &mut ReaderState,
    ) -> Option<PyResult<Py<PyAny>>> {
        if self.shuffle_buffer == 0 {
            let item = state.next_of_rank(py, stream.shard)?;
            state.emitted += 1;
            return Some(item);
        }
        while !state.ended && state.buffer.len() < self.shuffle_buffer {
            match state.next_of_rank(py, stream.shard) {
                Some(item) => state.buffer.push(item),
                None => break,
            }
        }
        if state.buffer.is_empty() {
            return None;
        }
        let pick = below(&mut state.rng, state.buffer.len() as u64);
        state.emitted += 1;
        Some(state.buffer.swap_remove(usize::try_from(pick).unwrap_or(0)))
    }
}

impl ReaderState {
    /// This rank's next item: of each complete round of `world` items of the stream, the one
    /// at `rank`. An incomplete last round ends the stream on every rank alike.
    fn next_of_rank(
        &mut self,
        py: Python<'_>,
        (rank, world): (u64, u64),
    ) -> Option<PyResult<Py<PyAny>>> {
        let mut mine = None;
        for place in 0..world {
            let item = self.next_raw(py)?;
            if place == rank {
                mine = Some(item);
            }
        }
        mine
    }

    /// The next item of the iterator: None at `StopIteration` (and ever after).
    fn next_raw(&mut self, py: Python<'_>) -> Option<PyResult<Py<PyAny>>> {
        if self.ended {
            return None;
        }
        let next = self.iter.as_ref()?.bind(py).clone().next();
        match next {
            None => {
                self.ended = true;
                None
            }
            Some(Ok(item)) => Some(Ok(item.unbind())),
            Some(Err(e)) => Some(Err(e)),
        }
    }
}

/// Whether no batch after `batch` holds items, when reader `k` (of `dry_at.len()`, taking
/// turns `k, k + n, ...`) has none from batch `dry_at[k]` on (`u64::MAX`: not known yet).
fn no_turn_left(dry_at: &[u64], batch: u64) -> bool {
    let n = dry_at.len() as u64;
    dry_at.iter().zip(0u64..).all(|(&dry, k)| {
        // Reader k's first turn after `batch`.
        let next = batch + 1 + (k + n - (batch + 1) % n) % n;
        dry <= next
    })
}

/// A uniform draw in `0..n` from a splitmix64 state.
fn below(state: &mut u64, n: u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // Lemire's multiply-shift: unbiased enough for a buffer of at most 2^32 items.
    ((u128::from(z) * u128::from(n)) >> 64) as u64
}

impl Source for StreamSource {
    type Batch = Loaded;
    type Error = PyErr;

    fn load_batch(&self, _indices: &[u64], ctx: &BatchCtx) -> Result<Loaded, LoadError<PyErr>> {
        let Some(stream) = self.stream_of(ctx) else {
            return crate::attach::attach(|py| Ok(Loaded::dry(py)));
        };
        let b = ctx.batch_number();
        let n = stream.readers.len() as u64;
        let k = usize::try_from(b % n).unwrap_or(0);
        let epoch = ctx.epoch_id();
        self.read(&stream, k, b / n, b, ctx, |py, read| {
            let Read::Items(items) = read else {
                return Ok(Loaded::dry(py));
            };
            let mut kept = Vec::with_capacity(items.len());
            let mut samples = Vec::with_capacity(items.len());
            let items = items
                .into_iter()
                .map(|(index, item)| {
                    let item = item
                        .map(|x| x.into_bound(py))
                        .map_err(|e| no_stop_iteration(py, e, "__next__"));
                    (index, item)
                })
                .collect();
            for (index, item) in self.pipeline.transform_batch_attached(py, items) {
                if let Some(x) = self.pipeline.skipper.kept(py, epoch, index, item)? {
                    samples.push(x);
                    kept.push(index);
                }
            }
            let items = kept.len();
            let list = PyList::new(py, samples)?;
            let batch = self.pipeline.collate_attached(py, list, &kept)?;
            Ok(Loaded::new(batch, items))
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{below, no_turn_left};

    proptest! {
        /// Against the rule spelled out: some reader still has a turn after `batch` before
        /// the one at which it runs dry.
        #[test]
        fn a_turn_is_left_exactly_when_a_reader_has_items_after_the_batch(
            dry in proptest::collection::vec(0u64..40, 1..5),
            batch in 0u64..40,
        ) {
            let n = dry.len() as u64;
            // Reader k's turns are the batches ≡ k (mod n); the ones before dry_at[k] hold items.
            let dry: Vec<u64> = dry.iter().zip(0..).map(|(&d, k)| d / n * n + k).collect();
            let left = (batch + 1..batch + 1 + 2 * 40).any(|b| {
                let k = usize::try_from(b % n).unwrap();
                b < dry[k]
            });
            prop_assert_eq!(no_turn_left(&dry, batch), !left);
        }

        #[test]
        fn a_draw_is_below_its_bound(seed: u64, n in 1u64..1000) {
            let mut state = seed;
            prop_assert!(below(&mut state, n) < n);
        }
    }

    #[test]
    fn a_reader_not_known_dry_leaves_a_turn() {
        assert!(!no_turn_left(&[u64::MAX], 5));
        assert!(no_turn_left(&[6], 5));
        assert!(!no_turn_left(&[2, u64::MAX], 1));
    }
}
