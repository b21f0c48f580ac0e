//! The tokio runtime that runs the datasets' futures: built lazily, rebuilt after `fork`.
//!
//! # `block_on` rules
//!
//! - Call [`Runtime::block_on`] from a plain thread (the interpreter's thread with the GIL
//!   released, a worker-pool thread). From inside any tokio runtime (a task, another
//!   `block_on`) it returns [`Error::Runtime`] instead of panicking or deadlocking.
//! - `block_on` drives the given future on the calling thread; the runtime's worker threads run
//!   the I/O driver, the timers and whatever is spawned. To spread CPU work (TLS, copying bodies)
//!   over the workers, [`Runtime::spawn`] the futures and await the join handles in `block_on`.
//! - Several threads may `block_on` the same runtime at once.
//! - [`Runtime::block_on_checked`] also calls a check (Python's signal check, say) on the
//!   calling thread at a fixed interval while it waits, and gives up when the check fails.
//! - After `fork`, the child builds a new runtime on first use; the parent's runtime is leaked
//!   there, never dropped or joined (its threads do not exist in the child).
//!
//! # Reuse
//!
//! Dropping a [`Runtime`] does not wait for anything. Its tokio runtime is kept, idle, for the
//! next [`Runtime`] of the same number of threads in this process (at most [`MAX_IDLE`] are
//! kept; the oldest beyond that is shut down in the background, its tasks cancelled). So a
//! fresh loader per epoch neither starts threads again nor loses its connections: an HTTP
//! client's pooled connections are tasks of the runtime that opened them, and they would die
//! with it. Tasks still running when a [`Runtime`] is dropped keep running (abort them first if
//! they must stop; the loader's fetches are aborted when their batch is dropped).

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::future::{Either, select};

use tokio::task::JoinHandle;

use crate::error::Error;
use dlrs_core::per_process::PerProcess;

/// The most worker threads a [`Runtime`] accepts.
pub const MAX_THREADS: usize = 1024;

/// The most tokio runtimes kept idle for reuse in a process (see the module's "Reuse").
pub const MAX_IDLE: usize = 4;

/// A multi-thread tokio runtime with a fixed number of worker threads, built on first use.
pub struct Runtime {
    threads: usize,
    inner: PerProcess<Owned>,
}

/// A tokio runtime with `threads` workers, kept for reuse when dropped.
struct Owned {
    threads: usize,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            keep_idle(self.threads, runtime);
        }
    }
}

/// A runtime no [`Runtime`] uses any more.
struct Idle {
    threads: usize,
    runtime: tokio::runtime::Runtime,
}

/// The idle runtimes of this process, the most recently dropped last. A forked child starts
/// with none (the parent's are leaked there, see [`PerProcess`]).
static IDLE: PerProcess<Mutex<Vec<Idle>>> = PerProcess::new();

fn idle() -> Option<MutexGuard<'static, Vec<Idle>>> {
    let idle = IDLE
        .get_or_try_init(|| Ok::<_, ()>(Mutex::new(Vec::new())))
        .ok()?;
    Some(idle.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The idle runtime with `threads` workers dropped last, if any.
fn take_idle(threads: usize) -> Option<tokio::runtime::Runtime> {
    let mut idle = idle()?;
    let i = idle.iter().rposition(|r| r.threads == threads)?;
    Some(idle.remove(i).runtime)
}

/// Keeps `runtime` for reuse; the oldest idle runtime beyond [`MAX_IDLE`] is shut down in the
/// background.
fn keep_idle(threads: usize, runtime: tokio::runtime::Runtime) {
    let evicted = match idle() {
        Some(mut idle) => push_capped(&mut idle, Idle { threads, runtime }),
        None => Some(runtime),
    };
    // Outside the lock: shutting down wakes the runtime's threads.
    if let Some(runtime) = evicted {
        runtime.shutdown_background();
    }
}

/// Appends `entry` to `idle`, and removes and returns the oldest runtime beyond [`MAX_IDLE`].
fn push_capped(idle: &mut Vec<Idle>, entry: Idle) -> Option<tokio::runtime::Runtime> {
    let evicted = (idle.len() >= MAX_IDLE).then(|| idle.remove(0).runtime);
    idle.push(entry);
    evicted
}

/// The number of idle runtimes with `threads` workers.
#[cfg(test)]
fn idle_count(threads: usize) -> usize {
    idle().map_or(0, |idle| {
        idle.iter().filter(|r| r.threads == threads).count()
    })
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl Default for Runtime {
    /// A runtime of one thread per CPU available (at most [`MAX_THREADS`]).
    fn default() -> Runtime {
        Runtime {
            threads: std::thread::available_parallelism()
                .map_or(1, NonZeroUsize::get)
                .min(MAX_THREADS),
            inner: PerProcess::new(),
        }
    }
}

impl Runtime {
    /// A runtime with `threads` worker threads (1 to [`MAX_THREADS`]); `None` means the CPUs
    /// available to the process ([`std::thread::available_parallelism`]). Nothing is started
    /// until the runtime is first used.
    pub fn new(threads: Option<usize>) -> Result<Runtime, Error> {
        let threads = match threads {
            Some(n) if (1..=MAX_THREADS).contains(&n) => n,
            Some(n) => {
                return Err(Error::invalid(format!(
                    "runtime_threads must be between 1 and {MAX_THREADS}, got {n}"
                )));
            }
            None => return Ok(Runtime::default()),
        };
        Ok(Runtime {
            threads,
            inner: PerProcess::new(),
        })
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// A handle to the runtime of this process: an idle one of the same size (see "Reuse"),
    /// else a new one.
    pub fn handle(&self) -> Result<&tokio::runtime::Handle, Error> {
        let owned = self.inner.get_or_try_init(|| {
            let runtime = match take_idle(self.threads) {
                Some(runtime) => runtime,
                None => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(self.threads)
                    .thread_name("dlrs-io")
                    .enable_io()
                    .enable_time()
                    .build()
                    .map_err(|e| Error::Runtime(format!("cannot start the I/O runtime: {e}")))?,
            };
            Ok(Owned {
                threads: self.threads,
                runtime: Some(runtime),
            })
        })?;
        match &owned.runtime {
            Some(runtime) => Ok(runtime.handle()),
            None => unreachable!("an Owned runtime is only emptied when dropped"),
        }
    }

    /// Runs `future` to completion on the calling thread (see the module's rules).
    pub fn block_on<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::Runtime(
                "block_on was called from inside an async runtime".to_owned(),
            ));
        }
        Ok(self.handle()?.block_on(future))
    }

    /// Runs `future` like [`Runtime::block_on`], calling `check` on the calling thread every
    /// `interval` while it waits. When `check` fails, `future` is dropped (cancelled) and the
    /// check's error is returned as `Ok(Err(e))`.
    pub fn block_on_checked<F: Future, E>(
        &self,
        future: F,
        interval: Duration,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<F::Output, E>, Error> {
        self.block_on(async move {
            let mut future = std::pin::pin!(future);
            loop {
                let tick = std::pin::pin!(tokio::time::sleep(interval));
                match select(future.as_mut(), tick).await {
                    Either::Left((output, _)) => return Ok(output),
                    Either::Right(((), _)) => check()?,
                }
            }
        })
    }

    /// Spawns `future` on the worker threads.
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>, Error>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Ok(self.handle()?.spawn(future))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts() {
        assert_eq!(Runtime::new(Some(1)).unwrap().threads(), 1);
        assert_eq!(Runtime::new(Some(1024)).unwrap().threads(), 1024);
        let default = Runtime::new(None).unwrap().threads();
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert_eq!(default, cpus.min(MAX_THREADS));
        for bad in [0, 1025] {
            let error = Runtime::new(Some(bad)).unwrap_err();
            assert!(matches!(error, Error::InvalidArgument(_)));
            assert_eq!(
                error.to_string(),
                format!("runtime_threads must be between 1 and 1024, got {bad}")
            );
        }
    }

    #[test]
    fn lazy_and_runs_futures() {
        let runtime = Runtime::new(Some(2)).unwrap();
        assert!(!runtime.inner.is_built());
        assert_eq!(runtime.block_on(async { 41 + 1 }).unwrap(), 42);
        assert!(runtime.inner.is_built());
        let spawned = runtime
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .unwrap();
        let name = runtime.block_on(spawned).unwrap().unwrap();
        assert_eq!(name.as_deref(), Some("dlrs-io"));
    }

    #[test]
    fn nested_block_on_is_an_error() {
        let runtime = std::sync::Arc::new(Runtime::new(Some(1)).unwrap());
        let inner = runtime.clone();
        let nested = runtime
            .block_on(async move {
                inner
                    .block_on(async { 1 })
                    .map_err(|e| (e.to_string(), e.kind()))
            })
            .unwrap();
        assert_eq!(
            nested,
            Err((
                "block_on was called from inside an async runtime".to_owned(),
                crate::ErrorKind::Runtime
            ))
        );
    }

    #[test]
    fn checked_waits_call_the_check_on_the_calling_thread() {
        let runtime = Runtime::new(Some(1)).unwrap();
        let caller = std::thread::current().id();
        let mut calls = 0;
        let result = runtime
            .block_on_checked(
                std::future::pending::<()>(),
                Duration::from_millis(1),
                || {
                    assert_eq!(std::thread::current().id(), caller);
                    calls += 1;
                    if calls == 3 {
                        Err("interrupted")
                    } else {
                        Ok(())
                    }
                },
            )
            .unwrap();
        assert_eq!(result, Err("interrupted"));
        assert_eq!(calls, 3);
        let done = runtime
            .block_on_checked(async { 7 }, Duration::from_secs(3600), || {
                Err::<(), _>("never")
            })
            .unwrap();
        assert_eq!(done, Ok(7));
    }

    #[test]
    fn a_dropped_runtime_is_reused_with_its_tasks() {
        // 3 threads: no other test uses this size, so none takes the idle runtime meanwhile.
        let first = Runtime::new(Some(3)).unwrap();
        let (go, wait) = tokio::sync::oneshot::channel::<u32>();
        let running = first.spawn(async move { wait.await.unwrap() + 1 }).unwrap();
        drop(first);
        assert_eq!(idle_count(3), 1);
        let second = Runtime::new(Some(3)).unwrap();
        assert_eq!(second.threads(), 3);
        second.handle().unwrap();
        assert_eq!(idle_count(3), 0, "the idle runtime was taken");
        // The task spawned on the first is still alive: it runs on the same tokio runtime.
        go.send(41).unwrap();
        assert_eq!(second.block_on(running).unwrap().unwrap(), 42);
    }

    #[test]
    fn at_most_max_idle_runtimes_are_kept_the_oldest_evicted() {
        let mut idle = Vec::new();
        for tag in 0..MAX_IDLE + 2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let evicted = push_capped(
                &mut idle,
                Idle {
                    threads: tag,
                    runtime,
                },
            );
            assert_eq!(evicted.is_some(), tag >= MAX_IDLE, "{tag}");
        }
        let kept: Vec<usize> = idle.iter().map(|r| r.threads).collect();
        assert_eq!(kept, (2..MAX_IDLE + 2).collect::<Vec<_>>());
        // A Runtime never used leaves nothing behind.
        drop(Runtime::new(Some(5)).unwrap());
        assert_eq!(idle_count(5), 0);
    }

    #[test]
    fn drop_inside_a_task_does_not_panic() {
        let outer = Runtime::new(Some(1)).unwrap();
        let inner = Runtime::new(Some(1)).unwrap();
        assert_eq!(inner.block_on(async { 5 }).unwrap(), 5);
        outer.block_on(async move { drop(inner) }).unwrap();
    }
}
