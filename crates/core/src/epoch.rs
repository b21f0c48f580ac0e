//! One pass over the data: workers claim batches in order, a ring of slots hands them out in
//! order, and dropping the epoch abandons what is left.
//!
//! Invariants:
//! - batch `b` is claimed only while `b < next_deliver + capacity`, so at most `capacity`
//!   (`num_workers + prefetch_depth`, saturating) batches are in progress or waiting at any
//!   time; batch `b` lands in slot `b - next_deliver` of a queue that grows as batches land, so
//!   a huge depth makes no slot for a batch that does not exist or has not loaded;
//! - batches are handed out in the order of their numbers, an error in its batch's place;
//! - the consumer is woken once per batch, only when the batch it waits for lands (or, in an
//!   epoch abandoned while in use, by a worker that stops with that batch unclaimed);
//! - dropping the epoch sets `cancelled`: workers claim nothing more, results that land later
//!   are dropped with the epoch, and nothing waits for them.
//!
//! With no workers, [`Epoch::recv`] loads each batch on the calling thread.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{LoadError, worker_panic_message};
use crate::plan::EpochPlan;
use crate::pool::{Leaving, Pool};
use crate::source::{BatchCtx, Cancel, Source};
use crate::stats::Stats;
use crate::sync::{Condvar, Mutex, MutexGuard, lock, thread, wait, wait_timeout};

/// What [`Epoch::recv`] found.
#[derive(Debug)]
pub enum Recv<B, E> {
    /// The next batch, or why it failed; the batch after it comes next.
    Batch(Result<B, LoadError<E>>),
    /// The timeout passed before the next batch was ready; call again.
    Pending,
    /// Every batch of the epoch was handed out.
    Finished,
}

type Outcome<B, E> = Result<B, LoadError<E>>;

/// A batch a worker finished: its number and outcome.
type Finished<S> = (u64, Outcome<<S as Source>::Batch, <S as Source>::Error>);

fn load<S: Source>(source: &S, indices: &[u64], ctx: &BatchCtx) -> Outcome<S::Batch, S::Error> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        source.load_batch(indices, ctx)
    })) {
        Ok(r) => r,
        Err(payload) => Err(LoadError::Panicked(worker_panic_message(&*payload))),
    }
}

struct Ring<B, E> {
    next_claim: u64,
    next_deliver: u64,
    /// Slot `i` holds batch `next_deliver + i` once it landed.
    slots: VecDeque<Option<Outcome<B, E>>>,
    /// The consumer sleeps until the batch it waits for lands.
    consumer_waiting: bool,
    /// The consumer is inside a wait of [`Epoch::recv`], asleep or not: for a turn-taking
    /// source, it holds no turn.
    consumer_in_recv: bool,
    workers_waiting: usize,
    /// Workers of a turn-taking source inside a session or about to enter one.
    sessions: usize,
    /// How many times `sessions` fell to zero.
    session_breaks: u64,
    /// Whether the consumer's yields pay.
    consumer_backoff: Backoff,
    /// Workers of a turn-taking source waiting for a turn.
    turn_waiters: usize,
    /// The worker that claimed the last batch.
    last_claim: Option<usize>,
    peak_in_flight: u64,
    /// Runner jobs of the epoch that have not left yet (started or still queued).
    runners: usize,
    /// Whether the pool counts the runners that had not left when the last batch was handed
    /// out as returning ([`Pool::expect_returning`]).
    runners_counted: bool,
}

impl<B, E> Ring<B, E> {
    /// Whether no batch is left to claim: the epoch was abandoned or every batch was claimed.
    fn over(&self, ctx: &BatchCtx, num_batches: u64) -> bool {
        ctx.cancelled.is_set() || self.next_claim >= num_batches
    }

    /// Whether the next batch may be claimed without exceeding `capacity` in flight.
    fn has_room(&self, capacity: u64) -> bool {
        self.next_claim < self.next_deliver.saturating_add(capacity)
    }

    /// Stores the outcome of batch `b` (not yet delivered).
    fn store(&mut self, b: u64, outcome: Outcome<B, E>) {
        let i = usize::try_from(b - self.next_deliver).expect("at most the claimed batches");
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(outcome);
    }

    /// Whether the next batch to deliver has landed.
    fn next_landed(&self) -> bool {
        self.slots.front().is_some_and(Option::is_some)
    }

    /// Whether worker `me` of a turn-taking source may enter a session now. When no session
    /// runs: its turn (the consumer waits for a batch that has not landed), or `away` (the
    /// consumer runs code of its own: checked once a turn did not come soon). Either way not
    /// when `me` claimed the last batch while another worker waits to enter, so every worker
    /// takes part, as they do without turns.
    fn may_enter(&self, me: Option<usize>, away: bool) -> bool {
        let waiting = if away {
            !self.consumer_in_recv
        } else {
            self.consumer_in_recv && !self.next_landed()
        };
        waiting && self.sessions == 0 && (self.turn_waiters <= 1 || self.last_claim != me)
    }
}

struct Shared<S: Source> {
    stats: Arc<Stats>,
    ring: Mutex<Ring<S::Batch, S::Error>>,
    ready: Condvar,
    space: Condvar,
    capacity: u64,
    /// The source's sessions take turns with the consumer ([`Source::takes_turns`]).
    turns: bool,
}

enum Mode<S: Source> {
    /// Batches load on the caller's thread; the number of the next one.
    Inline(Mutex<u64>),
    /// Batches load on the pool.
    Workers(Arc<Shared<S>>),
}

/// One epoch of a loader: an iterator of batches in order, with a bounded number in flight.
pub struct Epoch<S: Source> {
    stats: Arc<Stats>,
    plan: Arc<EpochPlan>,
    source: Arc<S>,
    pool: Pool,
    cancelled: Cancel,
    item_concurrency: usize,
    num_batches: u64,
    number: u64,
    /// The first batch, and the items of the order before it.
    first_batch: u64,
    skipped: u64,
    mode: Mode<S>,
    /// The process that started the epoch: after `fork`, its workers are not in this one.
    pid: u32,
}

impl<S: Source> std::fmt::Debug for Epoch<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoch")
            .field("num_batches", &self.num_batches)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl<S: Source> Epoch<S> {
    /// Starts an epoch: with `num_workers > 0`, that many workers start loading at once.
    /// Starts an epoch at batch `start` (0 for a whole epoch; more to resume one).
    pub(crate) fn start(
        source: Arc<S>,
        plan: EpochPlan,
        pool: Pool,
        config: &Config,
        start: u64,
        number: u64,
        stats: Arc<Stats>,
    ) -> Self {
        let config = *config;
        let Config {
            num_workers,
            prefetch_depth,
            item_concurrency,
            ..
        } = config;
        let plan = Arc::new(plan);
        let num_batches = plan.num_batches();
        let start = start.min(num_batches);
        let skipped = plan.items_before(start);
        let cancelled = Cancel::new();
        let mode = if num_workers == 0 {
            Mode::Inline(Mutex::new(start))
        } else {
            let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
            let capacity = to_u64(num_workers).saturating_add(to_u64(prefetch_depth));
            let shared = Arc::new(Shared {
                stats: Arc::clone(&stats),
                ring: Mutex::new(Ring {
                    next_claim: start,
                    next_deliver: start,
                    slots: VecDeque::new(),
                    consumer_waiting: false,
                    consumer_in_recv: false,
                    workers_waiting: 0,
                    sessions: 0,
                    session_breaks: 0,
                    consumer_backoff: Backoff::default(),
                    turn_waiters: 0,
                    last_claim: None,
                    peak_in_flight: 0,
                    runners: 0,
                    runners_counted: false,
                }),
                ready: Condvar::new(),
                space: Condvar::new(),
                capacity,
                turns: source.takes_turns(&config),
            });
            let runners = u64::try_from(num_workers)
                .unwrap_or(u64::MAX)
                .min(num_batches - start);
            lock(&shared.ring).runners = usize::try_from(runners).unwrap_or(usize::MAX);
            for worker in 0..runners {
                let (shared, source, plan) =
                    (Arc::clone(&shared), Arc::clone(&source), Arc::clone(&plan));
                let ctx = BatchCtx {
                    cancelled: cancelled.clone(),
                    item_concurrency,
                    pool: pool.clone(),
                    batch: 0,
                    worker: usize::try_from(worker).ok(),
                    epoch: number,
                    first_batch: start,
                    skipped,
                };
                pool.execute_leaving(move |leaving| {
                    let _leave = Leave(&shared, leaving);
                    run_worker(&shared, &*source, &config, &plan, ctx, num_batches);
                });
            }
            Mode::Workers(shared)
        };
        Self {
            stats,
            plan,
            source,
            pool,
            cancelled,
            item_concurrency,
            num_batches,
            number,
            first_batch: start,
            skipped,
            mode,
            pid: crate::pid::current(),
        }
    }

    /// Whether this process is a child forked after the epoch started: the epoch's workers
    /// (and the locks they held) belong to the parent, so it must not be used here.
    #[must_use]
    pub fn is_inherited(&self) -> bool {
        self.pid != crate::pid::current()
    }

    /// The number of batches of the epoch.
    #[must_use]
    pub fn num_batches(&self) -> u64 {
        self.num_batches
    }

    /// The number of batches not yet handed out.
    #[must_use]
    pub fn remaining(&self) -> u64 {
        self.num_batches - self.position()
    }

    /// The number of the next batch to hand out: the batches before it were handed out (or
    /// skipped by a resumed epoch). Prefetched batches not yet handed out do not count.
    #[must_use]
    pub fn position(&self) -> u64 {
        match &self.mode {
            Mode::Inline(next) => *lock(next),
            Mode::Workers(shared) => lock(&shared.ring).next_deliver,
        }
    }

    /// This epoch's identity, unique in the process: [`BatchCtx::epoch_id`] of its batches.
    #[must_use]
    pub fn id(&self) -> usize {
        self.cancelled.id()
    }

    /// The most batches that were in progress or waiting at once (for tests and stats).
    #[must_use]
    pub fn peak_in_flight(&self) -> u64 {
        match &self.mode {
            Mode::Inline(_) => 0,
            Mode::Workers(shared) => lock(&shared.ring).peak_in_flight,
        }
    }

    /// The source the epoch loads.
    #[must_use]
    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// The plan of the epoch.
    #[must_use]
    pub fn plan(&self) -> &EpochPlan {
        &self.plan
    }

    /// The next batch. With workers, waits at most `timeout` (`None`: as long as it takes; zero:
    /// not at all) and answers [`Recv::Pending`] when it passed; without workers, loads the batch
    /// on this thread.
    pub fn recv(&self, timeout: Option<Duration>) -> Recv<S::Batch, S::Error> {
        match &self.mode {
            Mode::Inline(next) => self.recv_inline(next),
            Mode::Workers(shared) => Self::recv_from_workers(shared, self, timeout),
        }
    }

    fn recv_inline(&self, next: &Mutex<u64>) -> Recv<S::Batch, S::Error> {
        let b = {
            let mut next = lock(next);
            if *next >= self.num_batches {
                return Recv::Finished;
            }
            *next += 1;
            *next - 1
        };
        let mut indices = Vec::with_capacity(self.plan.batch_len(b));
        self.plan.fill_batch(b, &mut indices);
        let ctx = BatchCtx {
            cancelled: self.cancelled.clone(),
            item_concurrency: self.item_concurrency,
            pool: self.pool.clone(),
            batch: b,
            worker: None,
            epoch: self.number,
            first_batch: self.first_batch,
            skipped: self.skipped,
        };
        let t = Instant::now();
        let outcome = load(&*self.source, &indices, &ctx);
        self.stats.load.record(t.elapsed());
        self.stats.delivered(indices.len(), outcome.is_ok());
        Recv::Batch(outcome)
    }

    fn recv_from_workers(
        shared: &Shared<S>,
        epoch: &Self,
        timeout: Option<Duration>,
    ) -> Recv<S::Batch, S::Error> {
        let (plan, num_batches) = (&epoch.plan, epoch.num_batches);
        let mut waited_since: Option<Instant> = None;
        let stats = &shared.stats;
        let waited = |since: Option<Instant>| {
            if let Some(t) = since {
                stats.waited(t.elapsed());
            }
        };
        let mut ring = lock(&shared.ring);
        let b = ring.next_deliver;
        if b >= num_batches {
            return Recv::Finished;
        }
        let mut yielded = false;
        let recv = loop {
            if ring.next_landed() {
                let outcome = ring.slots.pop_front().flatten().expect("landed");
                ring.next_deliver += 1;
                ring.consumer_in_recv = false;
                let last = ring.next_deliver >= num_batches;
                if last && !ring.runners_counted {
                    // Every batch is loaded: the runners still here only return now, without
                    // running the source again (those asleep are woken below). The next epoch's
                    // runners, which the caller may start at once, wait for their threads.
                    ring.runners_counted = true;
                    epoch.pool.expect_returning(ring.runners);
                }
                let wake = ring.workers_waiting > 0;
                drop(ring);
                if wake && (shared.turns || last) {
                    // The worker whose turn it is may not be the one a single wake would find.
                    shared.space.notify_all();
                } else if wake {
                    shared.space.notify_one();
                }
                stats.delivered(plan.batch_len(b), outcome.is_ok());
                break Recv::Batch(outcome);
            }
            if ring.next_claim <= b && epoch.cancelled.is_set() {
                // Abandoned while still in use (the process exits): no worker will load this
                // batch, so it fails instead of being waited for.
                ring.next_claim = b + 1;
                ring.next_deliver = b + 1;
                ring.consumer_in_recv = false;
                break Recv::Batch(Err(LoadError::Cancelled));
            }
            if timeout == Some(Duration::ZERO) {
                return Recv::Pending;
            }
            waited_since.get_or_insert_with(Instant::now);
            if shared.turns && !yielded {
                // Until the batch landed and the session that loaded it let the lock go: then
                // the caller takes the lock back without sleeping on it.
                yielded = true;
                ring.consumer_in_recv = true;
                if ring.consumer_backoff.tries() {
                    let found = |r: &Ring<_, _>| r.next_landed() && r.sessions == 0;
                    ring = yield_until(shared, ring, found);
                    let hit = found(&ring);
                    ring.consumer_backoff.record(hit);
                }
                continue;
            }
            ring.consumer_waiting = true;
            ring.consumer_in_recv = true;
            match timeout {
                None => ring = wait(&shared.ready, ring),
                Some(t) => {
                    let (r, timed_out) = wait_timeout(&shared.ready, ring, t);
                    ring = r;
                    if timed_out && !ring.next_landed() {
                        ring.consumer_waiting = false;
                        ring.consumer_in_recv = false;
                        break Recv::Pending;
                    }
                }
            }
            ring.consumer_waiting = false;
        };
        waited(waited_since);
        recv
    }
}

/// The batches in order, each waited for as long as it takes (`recv(None)`); ends after the
/// last one. An error stands in its batch's place and the batch after it comes next.
impl<S: Source> Iterator for &Epoch<S> {
    type Item = Result<S::Batch, LoadError<S::Error>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.recv(None) {
                Recv::Batch(r) => return Some(r),
                Recv::Finished => return None,
                // Not answered without a timeout; asking again is still right.
                Recv::Pending => {}
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Another thread may take batches from the same epoch: only the upper bound holds.
        (0, usize::try_from(self.remaining()).ok())
    }
}

impl<S: Source> std::iter::FusedIterator for &Epoch<S> {}

/// An owned epoch iterates as [`&Epoch`](#impl-Iterator-for-%26Epoch%3CS%3E) does; the epoch is
/// abandoned when the iterator is dropped.
impl<S: Source> Iterator for Epoch<S> {
    type Item = Result<S::Batch, LoadError<S::Error>>;

    fn next(&mut self) -> Option<Self::Item> {
        (&*self).next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // Owned, so nothing else takes batches: the count is exact.
        match usize::try_from(self.remaining()) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl<S: Source> ExactSizeIterator for Epoch<S> {}

impl<S: Source> std::iter::FusedIterator for Epoch<S> {}

impl<S: Source> Drop for Epoch<S> {
    fn drop(&mut self) {
        self.cancelled.set();
        if let Mode::Workers(shared) = &self.mode
            && !self.is_inherited()
        {
            // Take the lock so no worker is between its check and its wait, then wake them all.
            drop(lock(&shared.ring));
            shared.space.notify_all();
        }
    }
}

/// What a worker found when it went for its next batch.
enum Claim {
    /// This batch is its to load.
    Got(u64),
    /// The ring is full.
    Full,
    /// The epoch is over or abandoned.
    Stop,
}

/// Stores the batch a worker finished (waking the consumer if it waits for that one), then
/// claims the next batch if the ring has room for it.
fn store_and_claim<S: Source>(
    shared: &Shared<S>,
    ctx: &BatchCtx,
    done: &mut Option<Finished<S>>,
    num_batches: u64,
) -> Claim {
    let mut ring = lock(&shared.ring);
    if let Some((b, outcome)) = done.take() {
        ring.store(b, outcome);
        if b == ring.next_deliver && ring.consumer_waiting {
            shared.ready.notify_one();
        }
    }
    if stops(shared, &ring, ctx, num_batches) {
        return Claim::Stop;
    }
    if ring.has_room(shared.capacity) {
        let b = ring.next_claim;
        ring.next_claim += 1;
        ring.last_claim = ctx.worker();
        ring.peak_in_flight = ring.peak_in_flight.max(ring.next_claim - ring.next_deliver);
        return Claim::Got(b);
    }
    Claim::Full
}

/// Whether a worker stops: the ring is [over](Ring::over). If the consumer waits for a batch
/// that was not claimed, the epoch was abandoned while in use and no worker will claim it: the
/// consumer is woken to fail it.
fn stops<S: Source>(
    shared: &Shared<S>,
    ring: &Ring<S::Batch, S::Error>,
    ctx: &BatchCtx,
    num_batches: u64,
) -> bool {
    if !ring.over(ctx, num_batches) {
        return false;
    }
    if ring.consumer_waiting && ring.next_claim <= ring.next_deliver {
        shared.ready.notify_one();
    }
    true
}

/// Waits until the ring has room for another batch; false when the epoch is over or abandoned.
/// Claims nothing: another worker may take the room first. For a turn-taking source it yields
/// for a while before it sleeps: its consumer takes the batches it waited for at once.
fn wait_for_room<S: Source>(shared: &Shared<S>, ctx: &BatchCtx, num_batches: u64) -> bool {
    let mut ring = lock(&shared.ring);
    if shared.turns {
        ring = yield_until(shared, ring, |r| {
            r.over(ctx, num_batches) || r.has_room(shared.capacity)
        });
    }
    loop {
        if stops(shared, &ring, ctx, num_batches) {
            return false;
        }
        if ring.has_room(shared.capacity) {
            return true;
        }
        ring.workers_waiting += 1;
        ring = wait(&shared.space, ring);
        ring.workers_waiting -= 1;
    }
}

/// How long a waiter of a turn-taking source yields its processor, checking again after each
/// time, before it sleeps: longer than a hand-over of small batches takes, shorter than any
/// batch worth the wait.
const TURN_SPIN: Duration = Duration::from_micros(100);

/// At most this many yields, whatever the clock says (under the model checker, whose clock
/// stands still, this is what ends a spin).
#[cfg(not(all(test, dlrs_model)))]
const TURN_YIELDS: u32 = u32::MAX;
#[cfg(all(test, dlrs_model))]
const TURN_YIELDS: u32 = 2;

type RingGuard<'a, S> = MutexGuard<'a, Ring<<S as Source>::Batch, <S as Source>::Error>>;

/// Whether the consumer's yields pay: after yields that ran out, it skips the next 2, 4, ... 64
/// chances to yield (sleeping at once), then tries again. When its batches come from sessions
/// that run long (items that let the interpreter go while they compute), it so stops taking a
/// processor from the workers. The workers need none: they yield only while they load nothing.
#[derive(Clone, Copy, Default)]
struct Backoff {
    misses: u32,
    skip: u32,
}

impl Backoff {
    const MOST_MISSES: u32 = 6;

    /// Whether to yield this time.
    fn tries(&mut self) -> bool {
        if self.skip == 0 {
            return true;
        }
        self.skip -= 1;
        false
    }

    /// What the yields found.
    fn record(&mut self, hit: bool) {
        if hit {
            self.misses = 0;
        } else {
            self.misses = (self.misses + 1).min(Self::MOST_MISSES);
            self.skip = 1 << self.misses;
        }
    }
}

/// Lets the lock go and yields the processor, again and again, until `done` holds for the ring
/// or [`TURN_SPIN`] has passed; returns the ring locked. A thread that waits like this is woken
/// by no one: the thread it waits for finds it running, not asleep on another processor.
fn yield_until<'a, S: Source>(
    shared: &'a Shared<S>,
    mut ring: RingGuard<'a, S>,
    done: impl Fn(&Ring<S::Batch, S::Error>) -> bool,
) -> RingGuard<'a, S> {
    let start = Instant::now();
    let mut yields = 0;
    while !done(&ring) && yields < TURN_YIELDS && start.elapsed() < TURN_SPIN {
        drop(ring);
        thread::yield_now();
        yields += 1;
        ring = lock(&shared.ring);
    }
    ring
}

/// How long a session of a turn-taking source must run without a break before a worker enters
/// another beside it: the items of such a session let the lock go while they wait (sleeping,
/// reading a file), and then both sessions make progress.
const BESIDE_AFTER: Duration = Duration::from_millis(1);

/// A worker of a turn-taking source waits until it may enter ([`Ring::may_enter`]): its turn,
/// or, once that did not come within [`TURN_SPIN`], the consumer away; or beside a session that
/// ran without a break for [`BESIDE_AFTER`]. Then it counts itself in; the consumer takes its
/// batch once no session is counted. Between checks it yields for [`TURN_SPIN`], then
/// sleeps until the consumer takes a batch or [`BESIDE_AFTER`] passed.
fn enter_turn<'a, S: Source>(
    shared: &'a Shared<S>,
    ctx: &BatchCtx,
    num_batches: u64,
) -> InTurn<'a, S> {
    let me = ctx.worker();
    let turn = |r: &Ring<S::Batch, S::Error>| r.over(ctx, num_batches) || r.may_enter(me, false);
    let mut ring = lock(&shared.ring);
    ring.turn_waiters += 1;
    loop {
        ring = yield_until(shared, ring, turn);
        if turn(&ring) || ring.may_enter(me, true) {
            break;
        }
        let breaks = ring.session_breaks;
        ring.workers_waiting += 1;
        let (r, timed_out) = wait_timeout(&shared.space, ring, BESIDE_AFTER);
        ring = r;
        ring.workers_waiting -= 1;
        if timed_out && ring.sessions > 0 && ring.session_breaks == breaks {
            break;
        }
    }
    ring.turn_waiters -= 1;
    ring.sessions += 1;
    InTurn(shared)
}

/// A worker of a turn-taking source in its session: counted out when it leaves (or unwinds).
struct InTurn<'a, S: Source>(&'a Shared<S>);

impl<S: Source> Drop for InTurn<'_, S> {
    fn drop(&mut self) {
        let mut ring = lock(&self.0.ring);
        ring.sessions -= 1;
        if ring.sessions == 0 {
            ring.session_breaks += 1;
        }
    }
}

/// Counts a runner out of its epoch when its job ends (or unwinds), and tells the pool its
/// thread is free now (or that it was counted when the last batch was handed out).
struct Leave<'a, S: Source>(&'a Shared<S>, &'a Leaving<'a>);

impl<S: Source> Drop for Leave<'_, S> {
    fn drop(&mut self) {
        let mut ring = lock(&self.0.ring);
        ring.runners -= 1;
        if ring.runners_counted {
            self.1.counted();
        } else {
            self.1.now();
        }
    }
}

/// A worker: waits for room in the ring, then enters a [`Source::session`] and loads every
/// batch it can claim, back to back, storing each in its slot.
///
/// Batches are claimed inside the session, not before it: a source whose session waits for
/// something shared (an interpreter lock) never holds a claimed batch while it waits, so the
/// batch the consumer needs next is never stuck behind a worker that cannot run. The worker
/// leaves the session when the ring is full, before it waits for room. For a turn-taking
/// source it first waits for its turn ([`enter_turn`]).
fn run_worker<S: Source>(
    shared: &Shared<S>,
    source: &S,
    config: &Config,
    plan: &EpochPlan,
    mut ctx: BatchCtx,
    num_batches: u64,
) {
    let mut indices = Vec::new();
    let mut done: Option<Finished<S>> = None;
    while wait_for_room(shared, &ctx, num_batches) {
        let turn = shared.turns.then(|| enter_turn(shared, &ctx, num_batches));
        let over = source.session(config, || {
            loop {
                let b = match store_and_claim(shared, &ctx, &mut done, num_batches) {
                    Claim::Got(b) => b,
                    Claim::Full => return false,
                    Claim::Stop => return true,
                };
                plan.fill_batch(b, &mut indices);
                ctx.batch = b;
                let t = Instant::now();
                done = Some((b, load(source, &indices, &ctx)));
                shared.stats.load.record(t.elapsed());
            }
        });
        drop(turn);
        if over {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::{Loader, Order};

    #[derive(Debug, PartialEq)]
    struct Odd(u64);

    impl std::fmt::Display for Odd {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "index {} is odd", self.0)
        }
    }

    impl std::error::Error for Odd {}

    /// Batches are their indices; a batch starting at 3 fails.
    struct Echo;

    impl Source for Echo {
        type Batch = Vec<u64>;
        type Error = Odd;

        fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<Vec<u64>, LoadError<Odd>> {
            match indices.first() {
                Some(3) => Err(LoadError::Source(Odd(3))),
                _ => Ok(indices.to_vec()),
            }
        }
    }

    fn loader(num_workers: usize) -> Loader<Echo> {
        let config = Config {
            batch_size: 3,
            num_workers,
            ..Config::default()
        };
        Loader::new(Echo, config).unwrap()
    }

    #[test]
    fn a_batch_knows_where_its_epoch_started() {
        // Each batch is (its number, the epoch's first batch, the items before that).
        let starts = || {
            crate::from_fn(|_: &[u64], ctx: &BatchCtx| {
                Ok::<_, LoadError<()>>((ctx.batch_number(), ctx.first_batch(), ctx.skipped_items()))
            })
        };
        for num_workers in [0, 2] {
            let config = Config {
                batch_size: 4,
                num_workers,
                ..Config::default()
            };
            let loader = Loader::new(starts(), config).unwrap();
            let order = || Order::Sequential { len: 14 };
            let got: Vec<_> = loader.epoch_from(order(), 2).map(Result::unwrap).collect();
            assert_eq!(got, [(2, 2, 8), (3, 2, 8)], "{num_workers} workers");
            let got: Vec<_> = loader.epoch(order()).map(Result::unwrap).collect();
            assert_eq!(got[0], (0, 0, 0));
            // Batches of a batch sampler: their own lengths.
            let bounds: Arc<[u64]> = Arc::from([0, 5, 6, 14]);
            let plan = EpochPlan::with_bounds(order(), bounds);
            let got: Vec<_> = loader
                .epoch_of_plan(plan, 1, 0)
                .map(Result::unwrap)
                .collect();
            assert_eq!(got, [(1, 1, 5), (2, 1, 5)], "{num_workers} workers");
            assert_eq!(loader.epoch_from(order(), 9).count(), 0, "past the end");
        }
    }

    #[test]
    fn load_error_displays_and_chains_the_source_error() {
        let e: LoadError<Odd> = LoadError::Source(Odd(3));
        assert_eq!(e.to_string(), "loading a batch failed: index 3 is odd");
        let inner = e.source().expect("the source error");
        assert_eq!(inner.downcast_ref::<Odd>(), Some(&Odd(3)));
        let panicked = LoadError::<Odd>::Panicked("boom".into());
        assert_eq!(panicked.to_string(), "loading a batch panicked: boom");
        assert!(panicked.source().is_none());
        assert!(LoadError::<Odd>::Cancelled.source().is_none());
    }

    #[test]
    fn load_error_goes_into_box_dyn_error_with_question_mark() {
        fn first(epoch: &Epoch<Echo>) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
            let mut batches = epoch;
            let _ = batches.next().expect("batch 0")?;
            Ok(batches.next().expect("batch 1")?)
        }
        let loader = loader(0);
        let e = first(&loader.epoch(Order::Sequential { len: 9 })).unwrap_err();
        let e = e.downcast::<LoadError<Odd>>().expect("a LoadError");
        assert_eq!(*e, LoadError::Source(Odd(3)));
    }

    #[test]
    fn an_epoch_iterates_its_batches_in_order_with_errors_in_place() {
        for num_workers in [0, 2] {
            let loader = loader(num_workers);
            let epoch = loader.epoch(Order::Sequential { len: 8 });
            assert_eq!(Iterator::size_hint(&&epoch), (0, Some(3)));
            let got: Vec<_> = (&epoch).collect();
            assert_eq!(
                got,
                [
                    Ok(vec![0, 1, 2]),
                    Err(LoadError::Source(Odd(3))),
                    Ok(vec![6, 7])
                ]
            );
            assert_eq!((&epoch).next(), None, "fused");
            let owned = loader.epoch(Order::Sequential { len: 7 });
            assert_eq!(owned.len(), 3);
            assert_eq!(owned.filter_map(Result::ok).flatten().count(), 4);
        }
    }

    /// Batch `[b]` is `b`. Counts the batches whose load started; its sessions wait until it
    /// is open. With `turns`, it takes turns with its consumer; with `first_waits`, batch 0
    /// loads only once batch 1 started (else it fails, after 10 s).
    #[derive(Default)]
    struct Watched {
        turns: bool,
        first_waits: bool,
        state: Mutex<Watch>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct Watch {
        open: bool,
        started: u64,
    }

    impl Watched {
        fn turns(first_waits: bool) -> Self {
            let source = Self {
                turns: true,
                first_waits,
                ..Self::default()
            };
            lock(&source.state).open = true;
            source
        }

        fn open(&self) {
            lock(&self.state).open = true;
            self.changed.notify_all();
        }
    }

    impl Source for Watched {
        type Batch = u64;
        type Error = ();

        fn load_batch(&self, indices: &[u64], _: &BatchCtx) -> Result<u64, LoadError<()>> {
            let mut state = lock(&self.state);
            state.started += 1;
            self.changed.notify_all();
            if self.first_waits && indices[0] == 0 {
                let deadline = Instant::now() + Duration::from_secs(10);
                while state.started < 2 {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(LoadError::Source(()));
                    }
                    state = wait_timeout(&self.changed, state, left).0;
                }
            }
            Ok(indices[0])
        }

        fn session<R>(&self, _: &Config, f: impl FnOnce() -> R) -> R {
            let mut state = lock(&self.state);
            while !state.open {
                state = wait(&self.changed, state);
            }
            drop(state);
            f()
        }

        fn takes_turns(&self, _: &Config) -> bool {
            self.turns
        }
    }

    fn turns_loader(source: Watched) -> Loader<Watched> {
        let config = Config {
            batch_size: 1,
            num_workers: 2,
            prefetch_depth: 2,
            ..Config::default()
        };
        Loader::new(source, config).unwrap()
    }

    #[test]
    fn the_consumer_yields_less_after_yields_that_ran_out() {
        let mut b = Backoff::default();
        let skipped_before_next_try = |b: &mut Backoff| (0..).take_while(|_| !b.tries()).count();
        assert!(b.tries(), "tries at first");
        let mut skips = vec![];
        for _ in 0..8 {
            b.record(false);
            skips.push(skipped_before_next_try(&mut b));
        }
        assert_eq!(skips, [2, 4, 8, 16, 32, 64, 64, 64]);
        b.record(true);
        assert!(b.tries(), "a hit makes it try every time again");
        assert!(b.tries());
    }

    #[test]
    fn a_worker_does_not_enter_after_its_own_claim_while_another_waits() {
        let mut ring: Ring<u64, ()> = Ring {
            next_claim: 4,
            next_deliver: 4,
            slots: VecDeque::new(),
            consumer_waiting: true,
            consumer_in_recv: true,
            workers_waiting: 0,
            sessions: 0,
            session_breaks: 0,
            consumer_backoff: Backoff::default(),
            turn_waiters: 2,
            last_claim: Some(0),
            peak_in_flight: 0,
            runners: 2,
            runners_counted: false,
        };
        let (w0, w1) = (Some(0), Some(1));
        assert!(
            !ring.may_enter(w0, false),
            "worker 0 claimed last, worker 1 waits"
        );
        assert!(ring.may_enter(w1, false));
        assert!(!ring.may_enter(w1, true), "the consumer waits: not away");
        ring.consumer_in_recv = false;
        assert!(
            !ring.may_enter(w1, false),
            "the consumer holds the lock: no turn"
        );
        assert!(
            ring.may_enter(w1, true) && !ring.may_enter(w0, true),
            "away, fairly"
        );
        ring.turn_waiters = 1;
        assert!(ring.may_enter(w0, true), "alone, it may go again");
        ring.sessions = 1;
        assert!(
            !ring.may_enter(w0, true) && !ring.may_enter(w1, true),
            "a session runs"
        );
    }

    #[test]
    fn a_session_that_runs_long_gets_another_beside_it() {
        // Batch 0 waits for batch 1 to start: a second session must enter beside the first
        // (as when items let the interpreter go while they sleep or read).
        let loader = turns_loader(Watched::turns(true));
        let got: Vec<_> = (&loader.epoch(Order::Sequential { len: 6 })).collect();
        assert_eq!(got, (0..6).map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn a_turn_taking_source_loads_ahead_while_the_consumer_is_away() {
        // The consumer does not ask yet (a training step): the workers still fill the ring.
        let loader = turns_loader(Watched::turns(false));
        let epoch = loader.epoch(Order::Sequential { len: 10 });
        let source = epoch.source();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = lock(&source.state);
        while state.started < 4 && Instant::now() < deadline {
            state = wait_timeout(&source.changed, state, Duration::from_millis(10)).0;
        }
        assert_eq!(state.started, 4, "the ring's 4 batches loaded ahead");
        drop(state);
        let got: Vec<_> = (&epoch).collect();
        assert_eq!(got, (0..10).map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn a_consumer_waiting_when_its_epoch_is_abandoned_gets_the_batch_failed() {
        let source = Arc::new(Watched::default());
        let config = Config {
            num_workers: 1,
            ..Config::default()
        };
        let plan = EpochPlan::new(Order::Sequential { len: 3 }, 1, false);
        let pool = Pool::new(1, "t");
        let epoch = Arc::new(Epoch::start(
            Arc::clone(&source),
            plan,
            pool,
            &config,
            0,
            0,
            Arc::default(),
        ));
        let (tx, rx) = std::sync::mpsc::channel();
        let consumer = Arc::clone(&epoch);
        std::thread::spawn(move || tx.send(consumer.recv(None)).unwrap());
        // The consumer waits for batch 0, which the gated worker has not claimed yet.
        let Mode::Workers(shared) = &epoch.mode else {
            unreachable!("workers")
        };
        while !lock(&shared.ring).consumer_waiting {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Abandoned as `abandon_live_epochs` does it (the epoch is not dropped): the worker
        // claims nothing, and the consumer must not wait for it.
        epoch.cancelled.set();
        source.open();
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the consumer woke");
        assert!(
            matches!(got, Recv::Batch(Err(LoadError::Cancelled))),
            "{got:?}"
        );
        assert!(matches!(
            epoch.recv(None),
            Recv::Batch(Err(LoadError::Cancelled))
        ));
    }
}

/// Model-checked (`--cfg dlrs_model`, see [`crate::sync::model`]): the claim/deliver protocol of
/// the ring, waits and wakeups, and abandonment, over every schedule shuttle explores.
#[cfg(all(test, dlrs_model))]
mod model {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use super::*;
    use crate::sampler::Order;
    use crate::sync::model::check;

    /// Batch `b` is `[b]`; counts the loads of each batch and the loads in progress.
    struct Numbered {
        loads: Vec<AtomicUsize>,
        loading: AtomicUsize,
        most_loading: AtomicUsize,
        turns: bool,
    }

    impl Source for Numbered {
        type Batch = u64;
        type Error = ();

        fn load_batch(&self, indices: &[u64], ctx: &BatchCtx) -> Result<u64, LoadError<()>> {
            assert_eq!(indices, [ctx.batch_number()]);
            let now = self.loading.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_loading.fetch_max(now, Ordering::SeqCst);
            self.loads[usize::try_from(indices[0]).unwrap()].fetch_add(1, Ordering::SeqCst);
            // Other threads may run while a batch loads.
            shuttle::thread::yield_now();
            self.loading.fetch_sub(1, Ordering::SeqCst);
            Ok(indices[0])
        }

        fn takes_turns(&self, _: &Config) -> bool {
            self.turns
        }
    }

    /// An epoch of `batches` batches of one item on a pool of its own; its source takes turns
    /// with the consumer or not.
    fn start(
        workers: usize,
        prefetch: usize,
        batches: u64,
        turns: bool,
    ) -> (Epoch<Numbered>, Arc<Numbered>) {
        let config = Config {
            num_workers: workers,
            prefetch_depth: prefetch,
            ..Config::default()
        };
        let source = Arc::new(Numbered {
            loads: (0..batches).map(|_| AtomicUsize::new(0)).collect(),
            loading: AtomicUsize::new(0),
            most_loading: AtomicUsize::new(0),
            turns,
        });
        let plan = EpochPlan::new(Order::Sequential { len: batches }, 1, false);
        let pool = Pool::new(workers, "model");
        let epoch = Epoch::start(
            Arc::clone(&source),
            plan,
            pool,
            &config,
            0,
            0,
            Arc::default(),
        );
        (epoch, source)
    }

    /// The ring's bounds, checked under its lock.
    fn check_ring(epoch: &Epoch<Numbered>) {
        let Mode::Workers(shared) = &epoch.mode else {
            unreachable!("workers")
        };
        let ring = lock(&shared.ring);
        let in_flight = ring.next_claim - ring.next_deliver;
        assert!(
            in_flight <= shared.capacity,
            "{in_flight} claimed in flight"
        );
        assert!(
            ring.slots.len() as u64 <= in_flight,
            "a slot for an unclaimed batch"
        );
        let workers = epoch.pool.size();
        assert!(
            ring.sessions <= workers,
            "{} sessions counted",
            ring.sessions
        );
    }

    /// Ends the epoch and its pool; shuttle fails the run if a thread never ends.
    fn finish(epoch: Epoch<Numbered>) -> u64 {
        let pool = epoch.pool.clone();
        let peak = epoch.peak_in_flight();
        drop(epoch);
        pool.shutdown();
        peak
    }

    /// The next batch, waited for in turn without a timeout, with one, and by polling.
    fn next(epoch: &Epoch<Numbered>, turn: u64) -> Recv<u64, ()> {
        let timeout = match turn % 3 {
            0 => None,
            1 => Some(Duration::from_millis(5)),
            _ => Some(Duration::ZERO),
        };
        loop {
            match epoch.recv(timeout) {
                Recv::Pending => shuttle::thread::yield_now(),
                other => return other,
            }
        }
    }

    /// The model picks whether the source takes turns with the consumer.
    fn takes_turns() -> bool {
        shuttle::rand::Rng::gen_bool(&mut shuttle::rand::thread_rng(), 0.5)
    }

    /// Epochs started one right after the other on one pool run on its threads: the runners
    /// of the epoch that just ended, however far they got on their way back, are waited for,
    /// and no thread is started beyond the pool's size.
    #[test]
    fn back_to_back_epochs_start_no_thread_beyond_the_pool() {
        check(
            || {
                let workers = 2;
                let config = Config {
                    num_workers: workers,
                    prefetch_depth: 1,
                    ..Config::default()
                };
                let turns = takes_turns();
                let pool = Pool::new(workers, "model");
                for _ in 0..3 {
                    let source = Arc::new(Numbered {
                        loads: (0..3).map(|_| AtomicUsize::new(0)).collect(),
                        loading: AtomicUsize::new(0),
                        most_loading: AtomicUsize::new(0),
                        turns,
                    });
                    let plan = EpochPlan::new(Order::Sequential { len: 3 }, 1, false);
                    let epoch =
                        Epoch::start(source, plan, pool.clone(), &config, 0, 0, Arc::default());
                    assert!(pool.threads() <= workers, "{pool:?}");
                    for b in 0..3 {
                        match next(&epoch, b) {
                            Recv::Batch(Ok(got)) => assert_eq!(got, b),
                            other => panic!("batch {b}: {other:?}"),
                        }
                    }
                    assert!(matches!(epoch.recv(None), Recv::Finished));
                }
                pool.shutdown();
            },
            2000,
        );
    }

    fn every_batch_once_in_order(workers: usize, prefetch: usize, batches: u64) {
        check(
            move || {
                let (epoch, source) = start(workers, prefetch, batches, takes_turns());
                for b in 0..batches {
                    match next(&epoch, b) {
                        Recv::Batch(Ok(got)) => assert_eq!(got, b),
                        other => panic!("batch {b}: {other:?}"),
                    }
                    check_ring(&epoch);
                }
                assert!(matches!(epoch.recv(None), Recv::Finished));
                let capacity = (workers + prefetch) as u64;
                assert!(finish(epoch) <= capacity);
                for (b, n) in source.loads.iter().enumerate() {
                    assert_eq!(n.load(Ordering::SeqCst), 1, "loads of batch {b}");
                }
                assert!(source.most_loading.load(Ordering::SeqCst) <= workers);
            },
            2000,
        );
    }

    #[test]
    fn one_worker_delivers_every_batch_once_in_order() {
        every_batch_once_in_order(1, 1, 4);
    }

    #[test]
    fn two_workers_deliver_every_batch_once_in_order() {
        every_batch_once_in_order(2, 1, 5);
    }

    #[test]
    fn three_workers_on_a_deep_ring_deliver_every_batch_once_in_order() {
        every_batch_once_in_order(3, 2, 6);
    }

    #[test]
    fn a_dropped_epoch_stops_its_workers() {
        check(
            || {
                let (workers, prefetch, batches) = (2, 1, 8);
                let (epoch, source) = start(workers, prefetch, batches, takes_turns());
                // Batches taken before the drop: 0, 1 or 2, as the model picks.
                let taken = shuttle::rand::Rng::gen_range(&mut shuttle::rand::thread_rng(), 0..3);
                for b in 0..taken {
                    assert!(matches!(next(&epoch, b), Recv::Batch(Ok(got)) if got == b));
                }
                assert!(finish(epoch) <= (workers + prefetch) as u64);
                // The pool's threads end (shuttle checks it); no batch past the ring's room was
                // claimed, none twice.
                let loaded: usize = source.loads.iter().map(|n| n.load(Ordering::SeqCst)).sum();
                assert!(
                    loaded <= taken as usize + workers + prefetch,
                    "{loaded} loaded"
                );
                assert!(source.loads.iter().all(|n| n.load(Ordering::SeqCst) <= 1));
            },
            2000,
        );
    }

    #[test]
    fn an_epoch_abandoned_in_use_hands_out_every_batch_then_finishes() {
        // As `abandon_live_epochs` does, from another thread, while the consumer may be waiting.
        check(
            || {
                let batches = 5;
                let (epoch, source) = start(2, 1, batches, takes_turns());
                let cancel = epoch.cancelled.clone();
                let abandoner = shuttle::thread::spawn(move || cancel.set());
                let delivered = AtomicU64::new(0);
                for b in 0..batches {
                    match next(&epoch, b) {
                        Recv::Batch(Ok(got)) => assert_eq!(got, b),
                        Recv::Batch(Err(LoadError::Cancelled)) => {
                            assert_eq!(source.loads[b as usize].load(Ordering::SeqCst), 0);
                        }
                        other => panic!("batch {b}: {other:?}"),
                    }
                    delivered.fetch_add(1, Ordering::SeqCst);
                }
                assert!(matches!(epoch.recv(None), Recv::Finished));
                abandoner.join().unwrap();
                finish(epoch);
                assert!(source.loads.iter().all(|n| n.load(Ordering::SeqCst) <= 1));
            },
            2000,
        );
    }
}
