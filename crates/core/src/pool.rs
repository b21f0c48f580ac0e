//! The worker threads of one loader: created on demand, kept for every later epoch.
//!
//! A job never waits for a thread: when no thread is idle the pool starts one, so work that an
//! abandoned epoch is still finishing never delays the next epoch. Threads beyond the pool's
//! size retire as soon as they find nothing to do, so the pool settles back to its size.
//! Threads have 8 MiB stacks (a main thread's usual size).
//!
//! After `fork`, the child has none of the parent's threads, and the pool's lock may have been
//! held by one of them: [`Pool::for_this_process`] notices the changed pid, leaks the parent's
//! state untouched and starts afresh.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use crate::sync::{lock, wait};

/// The stack size of worker threads.
pub const STACK_SIZE: usize = 8 << 20;

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads waiting for a job (some may have been woken and not yet run).
    idle: usize,
    /// Live threads.
    threads: usize,
    shutdown: bool,
}

struct Inner {
    state: Mutex<State>,
    work: Condvar,
    /// Threads kept when idle.
    size: usize,
    name: String,
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
    /// A pool that keeps up to `size` idle threads named `name`; threads start with the first jobs.
    #[must_use]
    pub fn new(size: usize, name: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                size,
                name: name.to_owned(),
            }),
            pid: std::process::id(),
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
        if self.pid != std::process::id() {
            let fresh = Self::new(self.inner.size, &self.inner.name);
            let old = std::mem::replace(self, fresh);
            std::mem::forget(old);
        }
        self
    }

    /// Runs `job` on a pool thread, starting one if none is idle.
    pub fn execute(&self, job: impl FnOnce() + Send + 'static) {
        let mut st = lock(&self.inner.state);
        st.queue.push_back(Box::new(job));
        if st.idle >= st.queue.len() {
            drop(st);
            self.inner.work.notify_one();
        } else {
            st.threads += 1;
            drop(st);
            self.spawn();
        }
    }

    /// Lets every thread exit once the queue is empty: idle ones at once, busy ones after their
    /// job. Jobs submitted later still run (each on a thread of its own). Does nothing in a
    /// forked child, whose pool state belongs to threads that do not exist.
    pub fn shutdown(&self) {
        if self.pid != std::process::id() {
            return;
        }
        lock(&self.inner.state).shutdown = true;
        self.inner.work.notify_all();
    }

    fn spawn(&self) {
        let inner = Arc::clone(&self.inner);
        let spawned = std::thread::Builder::new()
            .name(self.inner.name.clone())
            .stack_size(STACK_SIZE)
            .spawn(move || run(&inner));
        if let Err(e) = spawned {
            // Out of threads: the queued job is run by the next thread that frees up.
            lock(&self.inner.state).threads -= 1;
            eprintln!("dataloader-rs: could not start a worker thread: {e}");
        }
    }
}

fn run(inner: &Inner) {
    let mut st = lock(&inner.state);
    loop {
        if let Some(job) = st.queue.pop_front() {
            drop(st);
            // A panicking job must not take the thread's bookkeeping down with it; jobs report
            // their own panics (see `epoch`), so the payload is dropped here.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            st = lock(&inner.state);
            continue;
        }
        if st.shutdown || st.threads > inner.size {
            st.threads -= 1;
            return;
        }
        st.idle += 1;
        st = wait(&inner.work, st);
        st.idle -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

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
}
