//! The model checker's stand-ins for the primitives of [`crate::sync`], in the unit tests of
//! `--cfg dlrs_model` builds only: shuttle's mutex, condition variable and threads, which it
//! runs in the orders it explores, plus what shuttle leaves out.
//!
//! - [`Condvar::wait`] may wake spuriously, as std's may.
//! - [`Condvar::wait_timeout`] never blocks: it lets the other threads run, then returns with its
//!   time run out or not, as the model picks. A timed wait that nothing notifies still ends, as a
//!   real one does; one that runs out moves the clock past its deadline.
//! - [`Instant`] reads a clock that moves only when a timed wait runs out, so a run replays the
//!   same whatever the real time. [`freeze_clock`] stops timed waits from running out: a wait
//!   long against everything else.
//! - [`AtomicBool`] is shuttle's: each access is a point where another thread may run, as it
//!   may between any two instructions of a real thread.
//! - [`thread::Builder`] counts the threads it started that have not ended ([`live_threads`]).
//!
//! Shuttle runs every thread of an execution on the thread of the test, so the clock and the
//! count are thread-locals of that thread; [`check`] resets them before each execution.

use std::cell::Cell;
use std::ops::{Add, Deref, DerefMut};
use std::sync::{LockResult, PoisonError};
use std::time::Duration;

use shuttle::rand::{Rng, thread_rng};
pub use shuttle::sync::atomic::AtomicBool;

/// One untimed wait in this many wakes spuriously.
const SPURIOUS_ONE_IN: u32 = 8;
/// One timed wait in this many runs out (unless the clock is frozen).
const TIMEOUT_ONE_IN: u32 = 6;

std::thread_local! {
    static NOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    static FROZEN: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
}

fn one_in(n: u32) -> bool {
    thread_rng().gen_range(0..n) == 0
}

/// A mutex whose guard knows it, so a wait can let it go and take it again.
#[derive(Default)]
pub struct Mutex<T: ?Sized>(shuttle::sync::Mutex<T>);

/// The guard of a [`Mutex`].
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    /// `None` only inside a wait.
    inner: Option<shuttle::sync::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    /// A mutex holding `value`.
    pub const fn new(value: T) -> Self {
        Self(shuttle::sync::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex.
    ///
    /// # Errors
    /// The lock is poisoned (the guard comes with the error).
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        rewrap(self, self.0.lock())
    }

    /// The value, through `&mut` (no lock needed).
    ///
    /// # Errors
    /// The lock is poisoned (the value comes with the error).
    pub fn get_mut(&mut self) -> LockResult<&mut T> {
        self.0.get_mut()
    }
}

fn rewrap<'a, T: ?Sized>(
    mutex: &'a Mutex<T>,
    r: LockResult<shuttle::sync::MutexGuard<'a, T>>,
) -> LockResult<MutexGuard<'a, T>> {
    let wrap = |g| MutexGuard {
        mutex,
        inner: Some(g),
    };
    r.map(wrap)
        .map_err(|e| PoisonError::new(wrap(e.into_inner())))
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.inner.as_deref().expect("a guard holds its lock")
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.as_deref_mut().expect("a guard holds its lock")
    }
}

/// Whether a timed wait ran out.
#[derive(Debug, Clone, Copy)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// Whether the time ran out.
    #[must_use]
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// A condition variable with spurious wakeups and modelled timeouts.
#[derive(Default)]
pub struct Condvar(shuttle::sync::Condvar);

impl Condvar {
    /// A condition variable.
    #[must_use]
    pub const fn new() -> Self {
        Self(shuttle::sync::Condvar::new())
    }

    /// Wakes one waiting thread.
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiting thread.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }

    /// Waits for a notification, or wakes spuriously.
    ///
    /// # Errors
    /// The lock is poisoned (the guard comes with the error).
    pub fn wait<'a, T>(&self, mut g: MutexGuard<'a, T>) -> LockResult<MutexGuard<'a, T>> {
        let mutex = g.mutex;
        let inner = g.inner.take().expect("a guard holds its lock");
        if one_in(SPURIOUS_ONE_IN) {
            drop(inner);
            return mutex.lock();
        }
        rewrap(mutex, self.0.wait(inner))
    }

    /// Lets the lock go and the other threads run, then takes it again: the time ran out or not
    /// (see the module's documentation).
    ///
    /// # Errors
    /// The lock is poisoned (the guard comes with the error).
    pub fn wait_timeout<'a, T>(
        &self,
        g: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> LockResult<(MutexGuard<'a, T>, WaitTimeoutResult)> {
        let deadline = Instant::now() + timeout;
        let mutex = g.mutex;
        drop(g);
        shuttle::thread::yield_now();
        let timed_out = !FROZEN.with(Cell::get) && one_in(TIMEOUT_ONE_IN);
        if timed_out {
            NOW.with(|now| now.set(now.get().max(deadline.0)));
        }
        let with = |g| (g, WaitTimeoutResult(timed_out));
        mutex
            .lock()
            .map(with)
            .map_err(|e| PoisonError::new(with(e.into_inner())))
    }
}

/// A point on the model's clock (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The model's time now.
    #[must_use]
    pub fn now() -> Self {
        Self(NOW.with(Cell::get))
    }

    /// The time from `earlier` to this one, zero if `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(&self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The model's time since this one.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        Self::now().saturating_duration_since(*self)
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    fn add(self, d: Duration) -> Self {
        Self(self.0 + d)
    }
}

/// While `frozen`, no timed wait runs out.
pub fn freeze_clock(frozen: bool) {
    FROZEN.with(|f| f.set(frozen));
}

/// The threads started by [`thread::Builder`] in this execution that have not ended.
#[must_use]
pub fn live_threads() -> usize {
    LIVE.with(Cell::get)
}

/// Threads of the model, counted while they run.
pub mod thread {
    use super::LIVE;

    /// Lets the other threads run, as [`std::thread::yield_now`] does.
    pub fn yield_now() {
        shuttle::thread::yield_now();
    }

    /// Builds a thread as [`std::thread::Builder`] does.
    #[derive(Default)]
    pub struct Builder(shuttle::thread::Builder);

    impl Builder {
        /// A thread with default settings.
        #[must_use]
        pub fn new() -> Self {
            Self(shuttle::thread::Builder::new())
        }

        /// Names the thread.
        #[must_use]
        pub fn name(self, name: String) -> Self {
            Self(self.0.name(name))
        }

        /// Sets the thread's stack size.
        #[must_use]
        pub fn stack_size(self, size: usize) -> Self {
            Self(self.0.stack_size(size))
        }

        /// Starts the thread, counted until `f` returns or unwinds.
        ///
        /// # Errors
        /// None under the model; the signature is std's.
        pub fn spawn<F, T>(self, f: F) -> std::io::Result<shuttle::thread::JoinHandle<T>>
        where
            F: FnOnce() -> T + Send + 'static,
            T: Send + 'static,
        {
            struct Ends;
            impl Drop for Ends {
                fn drop(&mut self) {
                    LIVE.with(|n| n.set(n.get() - 1));
                }
            }
            LIVE.with(|n| n.set(n.get() + 1));
            self.0.spawn(move || {
                let _ends = Ends;
                f()
            })
        }
    }
}

/// Runs `f` under shuttle: `iterations` executions with its random scheduler, then as many with
/// its PCT scheduler (depth 3), each seeded, so a run explores the same schedules every time.
/// `DLRS_MODEL_ITERATIONS` and `DLRS_MODEL_SEED` change the count and the seed (a longer or
/// another search); a failing schedule is printed for `shuttle::replay`.
pub fn check(f: impl Fn() + Send + Sync + 'static, iterations: usize) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let iterations = env("DLRS_MODEL_ITERATIONS")
        .map_or(iterations, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let seed = env("DLRS_MODEL_SEED").unwrap_or(0x5EED);
    let f = std::sync::Arc::new(move || {
        NOW.with(|now| now.set(Duration::ZERO));
        FROZEN.with(|f| f.set(false));
        LIVE.with(|n| n.set(0));
        f();
    });
    let random = shuttle::scheduler::RandomScheduler::new_from_seed(seed, iterations);
    let g = std::sync::Arc::clone(&f);
    shuttle::Runner::new(random, config()).run(move || g());
    let pct = shuttle::scheduler::PctScheduler::new_from_seed(seed, 3, iterations);
    shuttle::Runner::new(pct, config()).run(move || f());
}

fn config() -> shuttle::Config {
    let mut config = shuttle::Config::new();
    // Its warning is that atomics are not modelled as weaker than sequentially consistent: this
    // crate's critical decisions are made under locks.
    config.silence_warnings = true;
    config
}
