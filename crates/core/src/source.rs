//! What a loader loads: the [`Source`] trait, and the per-batch context that fetches the items
//! of one batch concurrently on the loader's pool.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::config::Config;
use crate::error::{LoadError, worker_panic_message};
use crate::pool::Pool;
use crate::sync::{self, Condvar, Mutex, lock, wait, wait_timeout};

/// Turns the dataset indices of one batch into a batch.
///
/// `load_batch` runs on a worker thread (or on the caller's thread with no workers); several
/// batches load at once, so a source is shared between threads. Everything a batch needs (the
/// items, their transform, the collation) happens inside one call, so a source that needs a
/// lock or an interpreter takes it once per batch, not once per item.
pub trait Source: Send + Sync + 'static {
    /// What one batch is.
    type Batch: Send + 'static;
    /// What can go wrong while loading one; it is handed to the consumer at the batch's place.
    type Error: Send + 'static;

    /// Loads the batch made of `indices` (in sampler order). `ctx` tells whether the epoch was
    /// abandoned and fetches items concurrently ([`BatchCtx::map_items`]).
    ///
    /// # Errors
    /// Whatever the source fails with; the consumer receives it in place of this batch.
    fn load_batch(
        &self,
        indices: &[u64],
        ctx: &BatchCtx,
    ) -> Result<Self::Batch, LoadError<Self::Error>>;

    /// Runs `f`, which loads one or more batches back to back on this worker, inside one
    /// session of the source: a source that must take a lock or an interpreter to load can take
    /// it once for the whole run. `f` never waits for the consumer. `config` is the loader's.
    /// The default just calls `f`.
    fn session<R>(&self, config: &Config, f: impl FnOnce() -> R) -> R {
        let _ = config;
        f()
    }

    /// The threads the source's own jobs need on the loader's pool ([`BatchCtx::pool`]) beyond
    /// the workers and item helpers: the pool keeps that many more, so the jobs start no
    /// thread each. The default is none.
    fn extra_threads(&self) -> usize {
        0
    }

    /// Whether the items of a batch are fetched on the pool's threads, `item_concurrency` at
    /// once ([`BatchCtx::map_items`]): the pool then keeps `num_workers × item_concurrency`
    /// threads. A source that fetches them itself (futures on a runtime of its own) says no,
    /// and the pool keeps only the workers. The default is yes.
    fn items_on_pool(&self) -> bool {
        true
    }

    /// Whether the source's sessions and the epoch's consumer take turns on one lock (an
    /// interpreter lock) that the consumer lets go only while it waits for a batch. Workers
    /// then enter a session when the consumer waits, and the consumer takes its batch when the
    /// sessions ended, each waiting briefly without sleeping first: a hand-over between
    /// threads on two processors then costs no sleep on that lock. `config` is the loader's.
    /// The default is no.
    fn takes_turns(&self, config: &Config) -> bool {
        let _ = config;
        false
    }
}

/// A [`Source`] whose batches a function loads: `from_fn(|indices, ctx| ...)`, for a source
/// with no state of its own and none of the trait's other hooks.
///
/// ```
/// use dlrs_core::{Config, LoadError, Loader, Order, Recv, from_fn};
///
/// let squares = from_fn(|indices, _| {
///     Ok::<_, LoadError<()>>(indices.iter().map(|i| i * i).collect::<Vec<u64>>())
/// });
/// let loader = Loader::new(squares, Config { batch_size: 2, ..Config::default() }).unwrap();
/// let epoch = loader.epoch(Order::Sequential { len: 3 });
/// assert!(matches!(epoch.recv(None), Recv::Batch(Ok(b)) if b == [0, 1]));
/// assert!(matches!(epoch.recv(None), Recv::Batch(Ok(b)) if b == [4]));
/// ```
pub fn from_fn<F, B, E>(load: F) -> FromFn<F, B, E>
where
    F: Fn(&[u64], &BatchCtx) -> Result<B, LoadError<E>> + Send + Sync + 'static,
    B: Send + 'static,
    E: Send + 'static,
{
    FromFn {
        load,
        types: PhantomData,
    }
}

/// The source [`from_fn`] makes.
pub struct FromFn<F, B, E> {
    load: F,
    // Only names the types: a function pointer is Send and Sync whatever they are.
    types: PhantomData<fn() -> (B, E)>,
}

impl<F, B, E> Source for FromFn<F, B, E>
where
    F: Fn(&[u64], &BatchCtx) -> Result<B, LoadError<E>> + Send + Sync + 'static,
    B: Send + 'static,
    E: Send + 'static,
{
    type Batch = B;
    type Error = E;

    fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<B, LoadError<E>> {
        (self.load)(indices, ctx)
    }
}

/// The serial number of the next epoch of the process.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Epochs whose serial number is below this one are abandoned (see [`abandon_live_epochs`]).
static ABANDONED_BELOW: AtomicU64 = AtomicU64::new(0);

/// Abandons every epoch started so far in this process, as if its iterator had been dropped:
/// workers claim nothing more and the items of a batch being loaded stop between items.
/// Epochs started later are not affected. For a process that is exiting, whose threads must
/// stop calling into the interpreter.
pub fn abandon_live_epochs() {
    ABANDONED_BELOW.store(NEXT_EPOCH.load(Ordering::SeqCst), Ordering::SeqCst);
}

/// Whether an epoch was abandoned: its own flag (its iterator was dropped), or by
/// [`abandon_live_epochs`].
#[derive(Debug, Clone)]
pub(crate) struct Cancel {
    flag: Arc<sync::AtomicBool>,
    serial: u64,
}

impl Cancel {
    /// The flag of a new epoch.
    pub(crate) fn new() -> Self {
        Self {
            flag: Arc::new(sync::AtomicBool::new(false)),
            serial: NEXT_EPOCH.fetch_add(1, Ordering::SeqCst),
        }
    }

    pub(crate) fn set(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// The epoch's identity: its serial number, never reused in a process.
    pub(crate) fn id(&self) -> usize {
        usize::try_from(self.serial).unwrap_or(usize::MAX)
    }

    #[inline]
    pub(crate) fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || self.serial < ABANDONED_BELOW.load(Ordering::Relaxed)
    }
}

/// What a batch being loaded can ask of its loader.
#[derive(Debug)]
pub struct BatchCtx {
    pub(crate) cancelled: Cancel,
    pub(crate) item_concurrency: usize,
    pub(crate) pool: Pool,
    pub(crate) batch: u64,
    pub(crate) worker: Option<usize>,
    pub(crate) epoch: u64,
    /// The epoch's first batch, and the items of its order before it.
    pub(crate) first_batch: u64,
    pub(crate) skipped: u64,
}

impl BatchCtx {
    /// Whether the epoch was abandoned (its iterator dropped): the result will be discarded.
    #[must_use]
    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_set()
    }

    /// The identity of the batch's epoch ([`crate::Epoch::id`]), unique in the process.
    #[must_use]
    pub fn epoch_id(&self) -> usize {
        self.cancelled.id()
    }

    /// The loader's pool (of this process), for other work of the batch that needs threads.
    #[must_use]
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// How many items of one batch may be fetched at once.
    #[must_use]
    pub fn item_concurrency(&self) -> usize {
        self.item_concurrency
    }

    /// The number of the batch in its epoch.
    #[must_use]
    pub fn batch_number(&self) -> u64 {
        self.batch
    }

    /// Waits on `cv` until `ready` holds for the state `guard` guards, a
    /// [`WAIT_SLICE`](crate::WAIT_SLICE) at a time: an abandoned epoch's wait ends at the next
    /// slice (`None`), so no worker stays behind a turn that will not come.
    pub fn wait_until<'a, T>(
        &self,
        cv: &Condvar,
        mut guard: sync::MutexGuard<'a, T>,
        mut ready: impl FnMut(&T) -> bool,
    ) -> Option<sync::MutexGuard<'a, T>> {
        while !ready(&guard) {
            if self.is_cancelled() {
                return None;
            }
            guard = wait_timeout(cv, guard, crate::WAIT_SLICE).0;
        }
        Some(guard)
    }

    /// The epoch's first batch: 0, or where a resumed epoch starts.
    #[must_use]
    pub fn first_batch(&self) -> u64 {
        self.first_batch
    }

    /// The items of the epoch's order before its first batch: those the batches a resumed
    /// epoch skips held (a source that reads its items in order must pass over them).
    #[must_use]
    pub fn skipped_items(&self) -> u64 {
        self.skipped
    }

    /// The worker loading the batch, `0..num_workers`; `None` when the batch loads on the
    /// consumer's thread (no workers).
    #[must_use]
    pub fn worker(&self) -> Option<usize> {
        self.worker
    }

    /// The number the loader gave the epoch (see [`crate::Loader::epoch_numbered`]).
    #[must_use]
    pub fn epoch_number(&self) -> u64 {
        self.epoch
    }

    /// Calls `f` on every index, up to [`Self::item_concurrency`] at once: this thread and
    /// helpers on the loader's pool. Results come back in the order of `indices`.
    ///
    /// After a failure no new item is started, and the failure of the earliest item is returned.
    /// A panic in `f` becomes [`LoadError::Panicked`]; an abandoned epoch stops early with
    /// [`LoadError::Cancelled`]. The call returns only once every helper has finished.
    ///
    /// # Errors
    /// The first failing item's error, a panic, or the cancellation.
    pub fn map_items<T, E, F>(&self, indices: &[u64], f: F) -> Result<Vec<T>, LoadError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(u64) -> Result<T, E> + Send + Sync + 'static,
    {
        let helpers = self.item_concurrency.min(indices.len()).saturating_sub(1);
        let shared = self.start_helpers(indices, f, helpers);
        shared.work();
        {
            let mut running = lock(&shared.running_helpers);
            while *running > 0 {
                running = wait(&shared.helpers_done, running);
            }
        }
        shared.results()
    }

    /// [`Self::map_items`] for a thread that must stay responsive (a consumer that checks for
    /// Ctrl-C): it fetches no item itself, up to [`Self::item_concurrency`] helpers do, and it
    /// waits for them at most `slice` at a time, calling `interrupted` between slices. When
    /// that fails, no new item is started and its error is returned at once, without waiting
    /// for the helpers (what they still deliver is dropped).
    ///
    /// # Errors
    /// As [`Self::map_items`], or the error of `interrupted`.
    pub fn map_items_interruptible<T, E, F>(
        &self,
        indices: &[u64],
        f: F,
        slice: Duration,
        mut interrupted: impl FnMut() -> Result<(), E>,
    ) -> Result<Vec<T>, LoadError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(u64) -> Result<T, E> + Send + Sync + 'static,
    {
        let helpers = self.item_concurrency.min(indices.len());
        let shared = self.start_helpers(indices, f, helpers);
        let mut running = lock(&shared.running_helpers);
        while *running > 0 {
            let (g, timed_out) = wait_timeout(&shared.helpers_done, running, slice);
            running = g;
            if timed_out && *running > 0 {
                drop(running);
                if let Err(e) = interrupted() {
                    shared.stop.store(true, Ordering::Relaxed);
                    return Err(LoadError::Source(e));
                }
                running = lock(&shared.running_helpers);
            }
        }
        drop(running);
        shared.results()
    }

    /// The shared state of one `map_items`, with `helpers` jobs working on it on the pool.
    fn start_helpers<T, E, F>(
        &self,
        indices: &[u64],
        f: F,
        helpers: usize,
    ) -> Arc<MapState<T, E, F>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(u64) -> Result<T, E> + Send + Sync + 'static,
    {
        let shared = Arc::new(MapState {
            indices: indices.to_vec(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            cancelled: self.cancelled.clone(),
            results: Mutex::new(
                std::iter::repeat_with(|| None)
                    .take(indices.len())
                    .collect(),
            ),
            running_helpers: Mutex::new(helpers),
            helpers_done: Condvar::new(),
            f,
        });
        for _ in 0..helpers {
            let shared = Arc::clone(&shared);
            self.pool.execute_leaving(move |leaving| {
                shared.work();
                let mut running = lock(&shared.running_helpers);
                // Before the batch learns its items are done: the next batch's helpers, which
                // its worker may start at once, then wait for this thread.
                leaving.now();
                *running -= 1;
                if *running == 0 {
                    shared.helpers_done.notify_all();
                }
            });
        }
        shared
    }
}

type Slot<T, E> = Option<Result<T, LoadError<E>>>;

struct MapState<T, E, F> {
    indices: Vec<u64>,
    next: AtomicUsize,
    stop: AtomicBool,
    cancelled: Cancel,
    results: Mutex<Vec<Slot<T, E>>>,
    running_helpers: Mutex<usize>,
    helpers_done: Condvar,
    f: F,
}

impl<T, E, F: Fn(u64) -> Result<T, E>> MapState<T, E, F> {
    /// The results in the order of the indices, once every item was worked on.
    fn results(&self) -> Result<Vec<T>, LoadError<E>> {
        let results = std::mem::take(&mut *lock(&self.results));
        let mut out = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Some(Ok(v)) => out.push(v),
                Some(Err(e)) => return Err(e),
                // An item was never started: something failed or the epoch was abandoned.
                None => return Err(LoadError::Cancelled),
            }
        }
        Ok(out)
    }

    fn work(&self) {
        loop {
            if self.stop.load(Ordering::Relaxed) || self.cancelled.is_set() {
                return;
            }
            let pos = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&index) = self.indices.get(pos) else {
                return;
            };
            let r = match catch_unwind(AssertUnwindSafe(|| (self.f)(index))) {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(LoadError::Source(e)),
                Err(payload) => Err(LoadError::Panicked(worker_panic_message(&*payload))),
            };
            if r.is_err() {
                self.stop.store(true, Ordering::Relaxed);
            }
            lock(&self.results)[pos] = Some(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(k: usize) -> BatchCtx {
        BatchCtx {
            cancelled: Cancel::new(),
            item_concurrency: k,
            pool: Pool::new(k, "t"),
            batch: 0,
            worker: None,
            epoch: 0,
            first_batch: 0,
            skipped: 0,
        }
    }

    #[test]
    fn results_keep_the_order_of_indices() {
        let c = ctx(4);
        let idx: Vec<u64> = (0..50).rev().collect();
        let out = c
            .map_items(&idx, |i| {
                std::thread::sleep(Duration::from_micros(i * 37 % 300));
                Ok::<_, ()>(i * 10)
            })
            .unwrap();
        assert_eq!(out, idx.iter().map(|i| i * 10).collect::<Vec<_>>());
    }

    #[test]
    fn at_most_k_items_at_once() {
        let c = ctx(3);
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (n2, p2) = (Arc::clone(&now), Arc::clone(&peak));
        let idx: Vec<u64> = (0..40).collect();
        c.map_items(&idx, move |_| {
            let cur = n2.fetch_add(1, Ordering::SeqCst) + 1;
            p2.fetch_max(cur, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            n2.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, ()>(())
        })
        .unwrap();
        assert!(peak.load(Ordering::SeqCst) <= 3);
        assert!(peak.load(Ordering::SeqCst) >= 1);
    }

    #[test]
    fn the_earliest_failure_wins_and_panics_are_reported() {
        let c = ctx(1);
        let idx: Vec<u64> = (0..10).collect();
        let r = c.map_items(&idx, |i| if i >= 3 { Err(i) } else { Ok(i) });
        assert!(matches!(r, Err(LoadError::Source(3))));
        let r = c.map_items(&idx, |i| {
            if i == 5 {
                panic!("item {i} broke")
            } else {
                Ok::<_, ()>(i)
            }
        });
        match r {
            Err(LoadError::Panicked(m)) => assert_eq!(m, "item 5 broke"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interruptible_map_returns_its_results_or_the_interruption() {
        let c = ctx(3);
        let idx: Vec<u64> = (0..20).collect();
        let out = c
            .map_items_interruptible(
                &idx,
                |i| Ok::<_, &str>(i * 2),
                Duration::from_millis(1),
                || Ok(()),
            )
            .unwrap();
        assert_eq!(out, idx.iter().map(|i| i * 2).collect::<Vec<_>>());

        // Items that never finish on their own: the interruption comes back without them.
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let r2 = Arc::clone(&release);
        let r = c.map_items_interruptible(
            &idx,
            move |i| {
                let mut go = lock(&r2.0);
                while !*go {
                    go = wait(&r2.1, go);
                }
                Ok(i)
            },
            Duration::from_millis(1),
            || Err("interrupted"),
        );
        assert!(matches!(r, Err(LoadError::Source("interrupted"))));
        *lock(&release.0) = true;
        release.1.notify_all();
    }
}
