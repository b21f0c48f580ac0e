//! Attaching the loader's own threads (workers, item helpers, the I/O runtime) to the
//! interpreter, with one Python thread state per thread for the thread's whole life.
//!
//! `Python::attach` on a thread that has no thread state creates one and, when it detaches,
//! destroys it again. For a worker that attaches once per run of batches, that would mean a
//! new thread state every few batches: its cost on every hand-over, and, worse, every
//! `threading.local` of the dataset emptied between two runs (a per-thread table would be
//! rebuilt again and again, which is the very thing `threading.local` is there to avoid).
//!
//! [`attach`] gives such a thread a thread state of its own on first use and keeps it, detached,
//! until the thread ends; the thread's exit then deletes it. Once the interpreter has started
//! to shut down ([`interpreter_exiting`], registered with `atexit`, which also waits for the
//! deletions under way), no thread state is made or deleted any more: deleting one means taking
//! the interpreter, which a thread must not try while it finalizes (CPython ends such a thread
//! where it stands); the few left are reclaimed with the process.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::ffi;
use pyo3::prelude::*;

/// Set once the interpreter runs its `atexit` handlers: from then on, threads neither keep
/// nor delete thread states.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Threads deleting their thread state right now (see `Kept::drop`).
static DELETING: AtomicUsize = AtomicUsize::new(0);

/// How long `interpreter_exiting` waits for threads deleting their thread state.
const EXIT_WAIT: Duration = Duration::from_secs(5);

/// The thread state this thread made and keeps (detached), or null when it made none.
struct Kept(Cell<*mut ffi::PyThreadState>);

impl Kept {
    /// Whether this thread should make a thread state and keep it: it has none, it made none,
    /// and the interpreter runs and is not exiting.
    fn needs_state(&self) -> bool {
        if !self.0.get().is_null() || EXITING.load(Ordering::SeqCst) {
            return false;
        }
        // SAFETY: both calls only read the runtime's state; they are safe at any time after
        // the interpreter was initialized, which importing this module implies. A thread with a
        // thread state is one Python made (or one already attached): Python owns that state.
        unsafe { ffi::Py_IsInitialized() != 0 && ffi::PyGILState_GetThisThreadState().is_null() }
    }
}

/// Detaches the thread state [`attach`] made on a thread's first call, without deleting it,
/// and keeps it in [`KEPT`] (also when the call unwinds).
struct KeepOnLeave;

impl Drop for KeepOnLeave {
    fn drop(&mut self) {
        // SAFETY: `attach` made this thread's state with `PyGILState_Ensure` (counter 1), and
        // the `Python::attach` inside it has released its own hold (counter back to 1, still
        // attached, as the state was already current when it began). `PyEval_SaveThread`
        // detaches that state without deleting it and returns it; later `Python::attach` calls
        // find it (raising the counter to 2 and lowering it back to 1), so they never make or
        // delete one.
        let state = unsafe { ffi::PyEval_SaveThread() };
        let _ = KEPT.try_with(|k| k.0.set(state));
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let state = self.0.get();
        if state.is_null() {
            return;
        }
        // Announce the deletion before checking `EXITING` (both sequentially consistent):
        // either this thread sees the interpreter exiting and leaves the state, or
        // `interpreter_exiting` sees this deletion and waits for it, with the interpreter
        // released, before finalization begins. So no thread waits for the interpreter while it
        // finalizes (CPython would end such a thread in the middle of this destructor).
        DELETING.fetch_add(1, Ordering::SeqCst);
        if !EXITING.load(Ordering::SeqCst) {
            // SAFETY: `state` is this thread's own thread state, detached by `KeepOnLeave` and
            // not used since (every attach after it released it again). The interpreter is not
            // finalizing (checked above, and `interpreter_exiting` waits for this block), so
            // restoring it waits for the interpreter like any attach; `PyGILState_Release` with
            // `PyGILState_UNLOCKED` then brings its counter from 1 to 0, which clears it,
            // deletes it and releases the interpreter.
            unsafe {
                if ffi::Py_IsInitialized() != 0 {
                    ffi::PyEval_RestoreThread(state);
                    ffi::PyGILState_Release(ffi::PyGILState_STATE::PyGILState_UNLOCKED);
                }
            }
        }
        self.0.set(ptr::null_mut());
        DELETING.fetch_sub(1, Ordering::SeqCst);
    }
}

thread_local! {
    static KEPT: Kept = const { Kept(Cell::new(ptr::null_mut())) };
}

/// `Python::attach` for the loader's threads: the thread keeps its thread state (and so its
/// `threading.local` values) between calls.
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    // During the thread's exit (after `KEPT` was dropped) this is a plain attach.
    if KEPT.try_with(Kept::needs_state).unwrap_or(false) {
        // SAFETY: the interpreter runs and is not exiting, and this thread has no thread state
        // (`needs_state`), so `PyGILState_Ensure` makes one and attaches it, counter at 1. The
        // first call thus takes the interpreter once, not twice.
        unsafe { ffi::PyGILState_Ensure() };
        let _keep = KeepOnLeave;
        return Python::attach(f);
    }
    Python::attach(f)
}

/// Registered with `atexit` by the module: the interpreter is shutting down. From now on no
/// thread state is made or deleted by the loader's threads; the deletions under way finish
/// first (they need the interpreter, released here while waiting, at most [`EXIT_WAIT`]).
#[pyfunction]
pub fn interpreter_exiting(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let start = Instant::now();
        while DELETING.load(Ordering::SeqCst) > 0 && start.elapsed() < EXIT_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
