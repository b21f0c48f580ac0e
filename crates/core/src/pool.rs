//! The worker threads of one loader: created on demand, kept for every later epoch.
//!
//! A job never waits for a thread that may block: when no thread is idle the pool starts one,
//! so work that an abandoned epoch is still finishing never delays the next epoch. A job queued
//! while another job is returning without blocking (`Leaving`, counted in `returning`) waits
//! for that thread instead: the epoch that just ended hands its threads to the next one, which
//! so runs on the same threads (a new thread per epoch would lose the per-thread state a
//! dataset built). Threads beyond the pool's size retire as soon as they find nothing to do,
//! so the pool settles back to its size.
//! Threads have 8 MiB stacks (a main thread's usual size). A pool made with [`Pool::in_lot`]
//! takes its threads from a [`Lot`] when it has some and gives them back there when it no
//! longer needs them (see [`Lot`]).
//!
//! After `fork`, the child has none of the parent's threads, and the pool's lock may have been
//! held by one of them: [`Pool::for_this_process`] notices the changed pid, leaks the parent's
//! state untouched and starts afresh.

use std::cell::Cell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::per_process::PerProcess;
use crate::sync::{Condvar, Instant, Mutex, lock, thread, wait, wait_timeout};

/// The stack size of worker threads.
pub const STACK_SIZE: usize = 8 << 20;

type Job = Box<dyn FnOnce(&Leaving<'_>) + Send + 'static>;

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads waiting for a job (some may have been woken and not yet run).
    idle: usize,
    /// Live threads.
    threads: usize,
    /// Threads started (or adopted from the lot) for a queued job that have not reached the
    /// queue yet: each takes a job there, as a woken idle thread does.
    starting: usize,
    shutdown: bool,
    /// Idle threads that `shutdown` already counted as parked in the pool's [`Lot`]: that many
    /// of the idle threads it woke go there without taking a job.
    donated: usize,
    /// Jobs that are returning, or will return when they run, without blocking
    /// ([`Leaving::now`], [`Pool::expect_returning`]): each frees its thread soon, which takes
    /// a queued job then, so a job queued meanwhile starts no thread.
    returning: usize,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    /// Threads kept when idle.
    size: usize,
    name: String,
    /// Where the threads go when the pool no longer needs them, if anywhere.
    lot: Option<&'static Lot>,
}

/// A pool of worker threads. Cloning gives another handle to the same threads.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
    pid: u32,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.inner.state);
        f.debug_struct("Pool")
            .field("size", &self.inner.size)
            .field("threads", &st.threads)
            .field("idle", &st.idle)
            .finish()
    }
}

impl Pool {
    /// A pool that keeps up to `size` idle threads named `name`; threads start with the first jobs
    /// and end when the pool no longer needs them.
    #[must_use]
    pub fn new(size: usize, name: &str) -> Self {
        Self::build(size, name, None)
    }

    /// A pool whose threads come from `lot` when it has some (else they start as in
    /// [`Pool::new`]) and go back there when the pool no longer needs them. They are named after
    /// the lot.
    #[must_use]
    pub fn in_lot(size: usize, lot: &'static Lot) -> Self {
        Self::build(size, lot.name, Some(lot))
    }

    fn build(size: usize, name: &str, lot: Option<&'static Lot>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                size,
                name: name.to_owned(),
                lot,
            }),
            pid: crate::pid::current(),
        }
    }

    /// The number of threads kept when idle.
    #[must_use]
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The live threads (busy or idle).
    #[must_use]
    pub fn threads(&self) -> usize {
        lock(&self.inner.state).threads
    }

    /// This pool, or a new one of the same size when the process forked since it was made.
    /// The parent's state is leaked: its threads do not exist here and its lock may be held.
    pub fn for_this_process(&mut self) -> &Self {
        if self.pid != crate::pid::current() {
            let fresh = Self::build(self.inner.size, &self.inner.name, self.inner.lot);
            let old = std::mem::replace(self, fresh);
            std::mem::forget(old);
        }
        self
    }

    /// Runs `job` on a pool thread, starting one (or taking one from the lot) if none is idle
    /// or returning. After [`Pool::shutdown`], each job gets a thread of its own.
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        self.execute_leaving(move |_| job());
    }

    /// [`Pool::execute`] for a job that tells the pool when it is about to return
    /// ([`Leaving`]).
    pub(crate) fn execute_leaving(&self, job: impl FnOnce(&Leaving<'_>) + Send + 'static) {
        let mut st = lock(&self.inner.state);
        st.queue.push_back(Box::new(job));
        if !st.shutdown && st.idle + st.starting + st.returning >= st.queue.len() {
            drop(st);
            self.inner.work.notify_one();
        } else {
            st.threads += 1;
            st.starting += 1;
            drop(st);
            self.spawn();
        }
    }

    /// Lets every thread go once the queue is empty: idle ones at once, busy ones after their
    /// job (to the pool's lot, or they end). Jobs submitted later still run (each on a thread
    /// of its own). Does nothing in a forked child, whose pool state belongs to threads that do
    /// not exist.
    pub fn shutdown(&self) {
        if self.pid != crate::pid::current() {
            return;
        }
        let mut st = lock(&self.inner.state);
        st.shutdown = true;
        if let Some(lot) = self.inner.lot {
            // The idle threads not needed for the queued jobs are as good as parked already:
            // count them there now, so a pool made right after this one takes them instead of
            // starting threads of its own while they are still waking up.
            // Counted before the pool's lock is released: a donated thread (woken spuriously,
            // say) must not reach the lot, and give up waiting there, before it is counted.
            // (The pool's lock is taken before the lot's here and nowhere the other way round.)
            let donated = st.idle.saturating_sub(st.queue.len() + st.donated);
            st.donated += donated;
            lot.expect(donated);
        }
        drop(st);
        self.inner.work.notify_all();
    }

    /// Counts `n` jobs of this pool, running or queued, that will return without blocking and
    /// each call [`Leaving::counted`] (once the pool is theirs: not in a forked child).
    pub(crate) fn expect_returning(&self, n: usize) {
        if n > 0 && self.pid == crate::pid::current() {
            lock(&self.inner.state).returning += n;
        }
    }

    fn spawn(&self) {
        let mut inner = Arc::clone(&self.inner);
        if let Some(lot) = self.inner.lot {
            match lot.adopt(inner) {
                Ok(()) => return,
                Err(back) => inner = back,
            }
        }
        let spawned = thread::Builder::new()
            .name(self.inner.name.clone())
            .stack_size(STACK_SIZE)
            .spawn(move || thread_main(inner));
        if let Err(e) = spawned {
            // Out of threads: the queued job is run by the next thread that frees up.
            let mut st = lock(&self.inner.state);
            st.threads -= 1;
            st.starting -= 1;
            eprintln!("dataloader-rs: could not start a worker thread: {e}");
        }
    }
}

/// What a job tells its pool about its end. A job that returns without blocking from some point
/// on says so there ([`Leaving::now`]), in the same critical section that makes its end known
/// (an epoch's last batch, the last item of a batch): whoever learns it and queues a job then
/// finds the thread counted as all but free, and the job waits for it instead of starting a
/// thread. Saying it and then blocking would delay the jobs queued meanwhile.
pub(crate) struct Leaving<'a> {
    inner: &'a Inner,
    /// Counted in `returning`: the thread takes the count back when the job has returned.
    told: Cell<bool>,
}

impl Leaving<'_> {
    /// The job returns now without blocking.
    pub(crate) fn now(&self) {
        if !self.told.replace(true) {
            lock(&self.inner.state).returning += 1;
        }
    }

    /// The job was counted by [`Pool::expect_returning`] already.
    pub(crate) fn counted(&self) {
        self.told.set(true);
    }
}

/// How a thread left a pool.
enum Left {
    /// On its own: it is not counted in the lot yet.
    Retired,
    /// Donated by [`Pool::shutdown`], which counted it in the lot already.
    Donated,
}

/// A pool thread's life: it serves a pool, then the pools its lot hands it, until none wants
/// it for the lot's time.
fn thread_main(mut inner: Arc<Inner>) {
    loop {
        let left = run(&inner);
        let Some(lot) = inner.lot else { return };
        drop(inner);
        let counted = matches!(left, Left::Donated);
        match lot.park(counted) {
            Some(next) => inner = next,
            None => return,
        }
    }
}

fn run(inner: &Inner) -> Left {
    let mut st = lock(&inner.state);
    st.starting -= 1;
    loop {
        if let Some(job) = st.queue.pop_front() {
            drop(st);
            let leaving = Leaving {
                inner,
                told: Cell::new(false),
            };
            // A panicking job must not take the thread's bookkeeping down with it; jobs report
            // their own panics (see `epoch`), so the payload is dropped here.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&leaving)));
            st = lock(&inner.state);
            if leaving.told.get() {
                st.returning -= 1;
            }
            continue;
        }
        if st.shutdown || st.threads > inner.size {
            st.threads -= 1;
            return Left::Retired;
        }
        st.idle += 1;
        st = wait(&inner.work, st);
        st.idle -= 1;
        if st.shutdown && st.donated > 0 {
            // `shutdown` left enough idle threads for the queued jobs (and jobs queued after
            // it get threads of their own), so this one goes as counted.
            st.donated -= 1;
            st.threads -= 1;
            return Left::Donated;
        }
    }
}

/// Where the threads of pools that no longer need them wait, for a while, for the next pool
/// that needs one: a loader made after another one was dropped starts on threads that exist
/// (with the per-thread state they built) instead of starting its own. A thread that waited
/// `keep_for` without being taken ends. After `fork` the child starts with an empty lot.
pub struct Lot {
    name: &'static str,
    keep_for: Duration,
    inner: PerProcess<LotInner>,
}

#[derive(Default)]
struct LotInner {
    state: Mutex<LotState>,
    arrivals: Condvar,
}

#[derive(Default)]
struct LotState {
    /// Threads waiting here, or on their way (see [`Pool::shutdown`]).
    parked: usize,
    /// Pools that took a parked thread, in order; each is served by one thread.
    wanted: VecDeque<Arc<Inner>>,
}

impl Lot {
    /// A lot of threads named `name`, each kept `keep_for` at most while no pool wants it.
    #[must_use]
    pub const fn new(name: &'static str, keep_for: Duration) -> Self {
        Self {
            name,
            keep_for,
            inner: PerProcess::new(),
        }
    }

    fn inner(&self) -> &LotInner {
        match self
            .inner
            .get_or_try_init(|| Ok::<_, Infallible>(LotInner::default()))
        {
            Ok(inner) => inner,
            Err(never) => match never {},
        }
    }

    /// The threads waiting in this lot (or on their way to it) that no pool took yet.
    #[must_use]
    pub fn parked(&self) -> usize {
        let st = lock(&self.inner().state);
        st.parked - st.wanted.len()
    }

    /// Counts `n` threads that are on their way here.
    fn expect(&self, n: usize) {
        if n > 0 {
            lock(&self.inner().state).parked += n;
        }
    }

    /// Gives `pool` a parked thread, or hands it back when every parked thread is taken.
    fn adopt(&self, pool: Arc<Inner>) -> Result<(), Arc<Inner>> {
        let lot = self.inner();
        let mut st = lock(&lot.state);
        if st.parked <= st.wanted.len() {
            return Err(pool);
        }
        st.wanted.push_back(pool);
        drop(st);
        lot.arrivals.notify_one();
        Ok(())
    }

    /// Waits here (`counted`: already counted by [`Lot::expect`]) until a pool wants this
    /// thread, or `keep_for` passed (`None`: the thread ends).
    fn park(&self, counted: bool) -> Option<Arc<Inner>> {
        let lot = self.inner();
        let mut st = lock(&lot.state);
        if !counted {
            st.parked += 1;
        }
        let deadline = Instant::now() + self.keep_for;
        loop {
            // A thread counted in `parked` leaves only with a pool, or when no pool waits for
            // one: so every pool in `wanted` is served.
            if let Some(pool) = st.wanted.pop_front() {
                st.parked -= 1;
                return Some(pool);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.parked -= 1;
                return None;
            }
            st = wait_timeout(&lot.arrivals, st, left).0;
        }
    }
}

impl std::fmt::Debug for Lot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lot")
            .field("name", &self.name)
            .field("keep_for", &self.keep_for)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    #[test]
    fn runs_jobs_and_keeps_threads() {
        let pool = Pool::new(2, "t");
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            pool.execute(move || tx.send(i).unwrap());
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        // Surplus threads retire; at most `size` remain once idle.
        for _ in 0..200 {
            if pool.threads() <= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(pool.threads() <= 2, "{pool:?}");
    }

    #[test]
    fn a_blocked_job_never_delays_another() {
        let pool = Pool::new(1, "t");
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        pool.execute(move || {
            release_rx.recv().unwrap();
        });
        // The only thread is blocked: the next job gets a thread of its own.
        pool.execute(move || done_tx.send(7).unwrap());
        assert_eq!(done_rx.recv().unwrap(), 7);
        release_tx.send(()).unwrap();
    }

    #[test]
    fn stacks_are_eight_mib() {
        fn depth(n: usize) -> usize {
            // About 4 KiB of stack per frame: 1000 frames need ~4 MiB, over the 2 MiB default.
            let buf = std::hint::black_box([0u8; 4000]);
            if n == 0 {
                usize::from(buf[0])
            } else {
                depth(n - 1) + usize::from(buf[n % 4000])
            }
        }
        let pool = Pool::new(1, "t");
        let (tx, rx) = mpsc::channel();
        pool.execute(move || tx.send(depth(1000)).unwrap());
        assert_eq!(rx.recv().unwrap(), 0);
    }

    #[test]
    fn a_panicking_job_keeps_the_pool_working() {
        let pool = Pool::new(1, "t");
        pool.execute(|| panic!("boom"));
        let n = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let n2 = Arc::clone(&n);
        pool.execute(move || {
            n2.fetch_add(1, Ordering::SeqCst);
            tx.send(()).unwrap();
        });
        rx.recv().unwrap();
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    /// Polls `cond` for up to 10 s.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cond()
    }

    /// Runs `n` jobs at once on `pool` (each waits for all of them) and returns their threads.
    fn threads_of(pool: &Pool, n: usize) -> Vec<std::thread::ThreadId> {
        let barrier = Arc::new(std::sync::Barrier::new(n));
        let (tx, rx) = mpsc::channel();
        for _ in 0..n {
            let (barrier, tx) = (Arc::clone(&barrier), tx.clone());
            pool.execute(move || {
                barrier.wait();
                tx.send(std::thread::current().id()).unwrap();
            });
        }
        let mut ids: Vec<_> = (0..n).map(|_| rx.recv().unwrap()).collect();
        ids.sort_by_key(|id| format!("{id:?}"));
        ids
    }

    #[test]
    fn a_pool_in_a_lot_starts_on_the_threads_of_a_shut_down_one() {
        static LOT: Lot = Lot::new("lot-a", Duration::from_secs(30));
        let first = Pool::in_lot(2, &LOT);
        let ids = threads_of(&first, 2);
        assert!(eventually(
            || first.threads() == 2 && lock(&first.inner.state).idle == 2
        ));
        first.shutdown();
        // Idle threads count as parked at once, before they even woke up.
        assert_eq!(LOT.parked(), 2);
        let second = Pool::in_lot(2, &LOT);
        assert_eq!(threads_of(&second, 2), ids);
        assert_eq!(LOT.parked(), 0);
        assert_eq!(second.threads(), 2);
        // Named after the lot.
        let (tx, rx) = mpsc::channel();
        second.execute(move || {
            tx.send(std::thread::current().name().map(str::to_owned))
                .unwrap()
        });
        assert_eq!(rx.recv().unwrap().as_deref(), Some("lot-a"));
        second.shutdown();
    }

    #[test]
    fn busy_threads_join_the_lot_after_their_job() {
        static LOT: Lot = Lot::new("lot-b", Duration::from_secs(30));
        let pool = Pool::in_lot(1, &LOT);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel();
        pool.execute(move || {
            started_tx.send(std::thread::current().id()).unwrap();
            release_rx.recv().unwrap();
        });
        let id = started_rx.recv().unwrap();
        pool.shutdown();
        assert_eq!(LOT.parked(), 0, "a busy thread is not parked");
        release_tx.send(()).unwrap();
        assert!(eventually(|| LOT.parked() == 1));
        let next = Pool::in_lot(1, &LOT);
        assert_eq!(threads_of(&next, 1), [id]);
        next.shutdown();
    }

    #[test]
    fn parked_threads_end_after_the_keep_time() {
        static LOT: Lot = Lot::new("lot-c", Duration::from_millis(20));
        struct Ended(mpsc::Sender<()>);
        impl Drop for Ended {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        thread_local! {
            static ENDED: std::cell::RefCell<Option<Ended>> = const { std::cell::RefCell::new(None) };
        }
        let (tx, rx) = mpsc::channel();
        let pool = Pool::in_lot(1, &LOT);
        pool.execute(move || ENDED.with(|e| *e.borrow_mut() = Some(Ended(tx))));
        pool.shutdown();
        // The thread-local is dropped when the thread ends, after its time in the lot.
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(LOT.parked(), 0);
    }

    #[test]
    fn lots_do_not_share_threads() {
        static X: Lot = Lot::new("lot-x", Duration::from_secs(30));
        static Y: Lot = Lot::new("lot-y", Duration::from_secs(30));
        let x = Pool::in_lot(1, &X);
        let ids = threads_of(&x, 1);
        assert!(eventually(|| lock(&x.inner.state).idle == 1));
        x.shutdown();
        let y = Pool::in_lot(1, &Y);
        assert_ne!(threads_of(&y, 1), ids);
        assert_eq!(X.parked(), 1);
        y.shutdown();
    }

    /// A source whose runners, on leaving their session, wait until the test started the
    /// epoch after the one they loaded for: the next epoch always starts while the last one's
    /// runners are still on their way back to the pool.
    #[derive(Default)]
    struct Gated {
        /// Epochs the test started.
        started: Mutex<u64>,
        opened: Condvar,
        threads: Mutex<std::collections::HashSet<std::thread::ThreadId>>,
    }

    thread_local! {
        static LOADED_FOR: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    impl crate::Source for Gated {
        type Batch = u64;
        type Error = ();

        fn load_batch(
            &self,
            indices: &[u64],
            ctx: &crate::BatchCtx,
        ) -> Result<u64, crate::LoadError<()>> {
            lock(&self.threads).insert(std::thread::current().id());
            LOADED_FOR.with(|e| e.set(ctx.epoch_number()));
            Ok(indices[0])
        }

        fn session<R>(&self, _: &crate::Config, f: impl FnOnce() -> R) -> R {
            let r = f();
            let after = LOADED_FOR.with(std::cell::Cell::get) + 1;
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut started = lock(&self.started);
            while *started <= after && Instant::now() < deadline {
                started = wait_timeout(&self.opened, started, Duration::from_millis(100)).0;
            }
            r
        }
    }

    #[test]
    fn an_epoch_hands_its_threads_to_the_next() {
        let config = crate::Config {
            num_workers: 2,
            // Room for every batch: a runner leaves its session only when the epoch is over.
            prefetch_depth: 8,
            ..crate::Config::default()
        };
        let loader = crate::Loader::new(Gated::default(), config).unwrap();
        let source = std::sync::Arc::clone(loader.source());
        for n in 0..50 {
            let epoch = loader.epoch_numbered(crate::Order::Sequential { len: 8 }, 0, n);
            *lock(&source.started) = n + 1;
            source.opened.notify_all();
            let got: Vec<u64> = (&epoch).map(Result::unwrap).collect();
            assert_eq!(got, (0..8).collect::<Vec<_>>());
        }
        *lock(&source.started) = u64::MAX;
        source.opened.notify_all();
        let threads = lock(&source.threads).len();
        assert!(threads <= 2, "50 epochs ran on {threads} threads");
    }

    #[test]
    fn every_job_runs_while_pools_come_and_go() {
        // Threads that give up waiting in the lot race with pools that take them: a job must
        // never be left without a thread (the test would hang on `recv_timeout`).
        static LOT: Lot = Lot::new("lot-d", Duration::from_micros(200));
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n).unwrap()
        };
        let (tx, rx) = mpsc::channel();
        let mut sent: usize = 0;
        for round in 0..300 {
            let pool = Pool::in_lot(1 + next(3), &LOT);
            let before = next(5);
            let after = next(3);
            sent += before;
            for _ in 0..before {
                let tx = tx.clone();
                let spin = next(50);
                pool.execute(move || {
                    std::thread::sleep(Duration::from_micros(spin as u64));
                    tx.send(round).unwrap();
                });
            }
            if next(2) == 0 {
                // Let the threads go idle first: `shutdown` then donates them to the lot.
                for _ in 0..before {
                    rx.recv_timeout(Duration::from_secs(10)).unwrap();
                }
                assert!(eventually(|| {
                    let st = lock(&pool.inner.state);
                    st.idle == st.threads
                }));
                sent -= before;
            }
            pool.shutdown();
            for _ in 0..after {
                let tx = tx.clone();
                pool.execute(move || tx.send(round).unwrap());
            }
            sent += after;
            if next(4) == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        for _ in 0..sent {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        assert!(eventually(|| LOT.parked() == 0));
    }
}

/// Model-checked (`--cfg dlrs_model`, see [`crate::sync::model`]): the threads of pools that
/// come and go on one lot, over every schedule shuttle explores. Threads that time out in the
/// lot race with pools that adopt them; the counts are checked whenever everything settled.
#[cfg(all(test, dlrs_model))]
mod model {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::sync::model::{check, freeze_clock, live_threads};

    /// A lot of this execution alone (a static one would outlive it).
    fn new_lot() -> &'static Lot {
        Box::leak(Box::new(Lot::new("model", Duration::from_secs(1))))
    }

    /// Lets the other threads run until `cond` holds; fails with `why()` when it never does
    /// (what it waits for is stuck: far fewer polls suffice in every schedule).
    fn until(cond: impl Fn() -> bool, why: impl Fn() -> String) {
        for _ in 0..20_000 {
            if cond() {
                return;
            }
            shuttle::thread::yield_now();
        }
        panic!("{}", why());
    }

    /// Lets the other threads run until `n` jobs ran.
    fn until_ran(runs: &Runs, n: usize) {
        until(
            || runs.get() == n,
            || format!("{} of {n} jobs ran", runs.get()),
        );
    }

    /// Counts the jobs that ran.
    #[derive(Clone, Default)]
    struct Runs(Arc<AtomicUsize>);

    impl Runs {
        fn job(&self) -> impl FnOnce() + Send + 'static {
            let n = Arc::clone(&self.0);
            move || {
                n.fetch_add(1, Ordering::SeqCst);
            }
        }

        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// `n` jobs that run at once (each waits for all to start): `pool` gets `n` threads.
    fn at_once(pool: &Pool, n: usize, runs: &Runs) {
        let started = Arc::new(AtomicUsize::new(0));
        for _ in 0..n {
            let (started, done) = (Arc::clone(&started), runs.job());
            pool.execute(move || {
                started.fetch_add(1, Ordering::SeqCst);
                while started.load(Ordering::SeqCst) < n {
                    shuttle::thread::yield_now();
                }
                done();
            });
        }
    }

    /// Whether every thread of `pool` waits for a job (none if it was shut down).
    fn settled(pool: &Pool) -> bool {
        let st = lock(&pool.inner.state);
        st.queue.is_empty() && st.idle == st.threads && (!st.shutdown || st.threads == 0)
    }

    /// With no wait in the lot running out, waits until every pool settled and every live
    /// thread is in a pool or counted in the lot, none in both; no pool then waits for a thread
    /// from the lot.
    fn settle(lot: &Lot, pools: &[&Pool]) {
        freeze_clock(true);
        let in_pools = || pools.iter().map(|p| p.threads()).sum::<usize>();
        until(
            || pools.iter().all(|p| settled(p)) && live_threads() == in_pools() + lot.parked(),
            || {
                let st = lock(&lot.inner().state);
                format!(
                    "never settled: {} live threads, {} in pools, parked {} with {} pools waiting",
                    live_threads(),
                    in_pools(),
                    st.parked,
                    st.wanted.len()
                )
            },
        );
        assert!(lock(&lot.inner().state).wanted.is_empty());
        freeze_clock(false);
    }

    /// Shuts `pools` down and waits for every thread to end: the lot then counts none.
    fn end(lot: &Lot, pools: &[&Pool]) {
        for p in pools {
            p.shutdown();
        }
        until(
            || live_threads() == 0,
            || format!("{} threads never ended", live_threads()),
        );
        let st = lock(&lot.inner().state);
        assert_eq!((st.parked, st.wanted.len()), (0, 0));
    }

    /// Model-checks `test` over `iterations` schedules, each with a lot and a job count of its
    /// own.
    fn check_lot(iterations: usize, test: impl Fn(&'static Lot, &Runs) + Send + Sync + 'static) {
        check(move || test(new_lot(), &Runs::default()), iterations);
    }

    #[test]
    fn shutdown_counts_the_idle_threads_it_donates() {
        check_lot(3000, |lot, runs| {
            let pool = Pool::in_lot(2, lot);
            at_once(&pool, 2, runs);
            until(
                || settled(&pool) && pool.threads() == 2,
                || format!("{pool:?} never idle"),
            );
            // Wakes one idle thread for the job; `shutdown` donates the other to the lot.
            pool.execute(runs.job());
            pool.shutdown();
            let next = Pool::in_lot(1, lot);
            next.execute(runs.job());
            until_ran(runs, 4);
            settle(lot, &[&pool, &next]);
            end(lot, &[&next]);
        });
    }

    #[test]
    fn pools_come_and_go_on_one_lot() {
        check_lot(2000, |lot, runs| {
            // Two loaders at once, each with a pool per epoch.
            let loaders: Vec<_> = (1..=2)
                .map(|size| {
                    let runs = runs.clone();
                    shuttle::thread::spawn(move || {
                        for _ in 0..2 {
                            let pool = Pool::in_lot(size, lot);
                            at_once(&pool, size, &runs);
                            pool.shutdown();
                            // A job after shutdown gets a thread of its own.
                            pool.execute(runs.job());
                        }
                    })
                })
                .collect();
            for l in loaders {
                l.join().unwrap();
            }
            until_ran(runs, 10);
            settle(lot, &[]);
            // A pool made now takes the parked threads that did not time out.
            let last = Pool::in_lot(2, lot);
            at_once(&last, 2, runs);
            until_ran(runs, 12);
            settle(lot, &[&last]);
            end(lot, &[&last]);
        });
    }
}
