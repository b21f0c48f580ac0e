//! The one place where Python waits on Rust. A Python thread that waits on the loader
//! ([`wait_on_loader`], [`wait_interruptibly`]) releases the interpreter, is counted so that the
//! interpreter's exit waits for it, and checks signals (Ctrl-C) at least every [`SIGNAL_SLICE`];
//! a wait deep inside Rust code, on a thread that released the interpreter already, slices by
//! [`SIGNAL_SLICE`] and checks with [`check_signals_detached`]. CPU work of the calling thread
//! (a transform, a collation, building a dataset) runs through [`run_detached`], unsliced. The
//! exit's own wait for the loader's threads is [`wait_bounded`]; whether the interpreter is
//! exiting is kept here ([`exiting`]), set once by `attach::interpreter_exiting`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// How long a wait may go without checking for signals (the spec promises 100 ms): the
/// loader's one wait slice.
pub const SIGNAL_SLICE: Duration = dlrs_core::WAIT_SLICE;

/// Set once the interpreter runs its `atexit` handlers.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Python threads waiting on the loader with the interpreter released ([`wait_on_loader`]).
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Whether the interpreter has begun to exit (sequentially consistent with the counters of
/// waiting and attached threads).
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Marks the interpreter as exiting: from now on no thread other than the main one waits.
pub(crate) fn begin_exit() {
    EXITING.store(true, Ordering::SeqCst);
}

/// Python threads waiting on the loader right now.
pub fn waiting() -> usize {
    WAITING.load(Ordering::SeqCst)
}

/// In a forked child: the parent's waiting threads do not exist there.
pub(crate) fn forget_waiting() {
    WAITING.store(0, Ordering::SeqCst);
}

/// What one slice of a wait found.
pub enum Slice<T> {
    /// Done.
    Ready(T),
    /// Not yet: check signals and wait again.
    Pending,
}

/// Lowers [`WAITING`] when dropped.
struct Waiting;

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `f` run with the interpreter released by a Python thread that waits on the loader
/// (`__next__`), unsliced: for a wait whose work runs on this thread and checks signals itself.
/// It comes back into the interpreter when `f` returns, which must not happen during
/// finalization (a daemon thread iterating a loader at exit would abort the process): so the
/// thread is counted, and the exit waits for it; once the interpreter exits, a thread other
/// than the main one (which runs the `atexit` handlers) gets an error instead of waiting.
pub fn wait_on_loader<T: Send>(py: Python<'_>, f: impl Send + FnOnce() -> T) -> PyResult<T> {
    WAITING.fetch_add(1, Ordering::SeqCst);
    let _waiting = Waiting;
    if exiting() && !is_main_thread(py) {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the interpreter is exiting: a dataloader-rs iterator cannot wait on this thread",
        ));
    }
    Ok(py.detach(f))
}

fn is_main_thread(py: Python<'_>) -> bool {
    let check = || -> PyResult<bool> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?;
        Ok(main.is(&threading.call_method0("current_thread")?))
    };
    check().unwrap_or(false)
}

/// Calls `poll` with the interpreter released, at most [`SIGNAL_SLICE`] at a time, until it is
/// ready; between slices, a pending signal handler runs and its exception (KeyboardInterrupt)
/// is returned. `poll` is tried once first without releasing the interpreter, with a zero
/// timeout, so a result that is already there costs no hand-over.
pub fn wait_interruptibly<T: Send>(
    py: Python<'_>,
    mut poll: impl FnMut(Option<Duration>) -> Slice<T> + Send,
) -> PyResult<T> {
    if let Slice::Ready(v) = poll(Some(Duration::ZERO)) {
        return Ok(v);
    }
    loop {
        if let Slice::Ready(v) = wait_on_loader(py, || poll(Some(SIGNAL_SLICE)))? {
            return Ok(v);
        }
        py.check_signals()?;
    }
}

/// This thread's own CPU work with the interpreter released: not a wait on other threads, so
/// not sliced, like any Rust call.
pub fn run_detached<T: Send>(py: Python<'_>, work: impl Send + FnOnce() -> T) -> T {
    py.detach(work)
}

/// Waits with the interpreter released, unsliced (a KeyboardInterrupt here would skip the
/// interpreter's shutdown), until `busy` is false or `limit` has passed; returns whether it is
/// still busy.
pub fn wait_bounded(
    py: Python<'_>,
    limit: Duration,
    busy: impl Fn() -> bool + Send + Sync,
) -> bool {
    py.detach(|| {
        let start = Instant::now();
        loop {
            if !busy() {
                return false;
            }
            if start.elapsed() >= limit {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Between two slices of a wait on a thread that released the interpreter: runs a pending
/// signal handler and returns its exception (KeyboardInterrupt).
pub fn check_signals_detached() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
