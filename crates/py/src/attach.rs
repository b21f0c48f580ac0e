//! Attaching the loader's own threads (workers, item helpers, the I/O runtime) to the
//! interpreter, with one Python thread state per thread for the thread's whole life; and
//! keeping them out of the interpreter once it exits.
//!
//! `Python::attach` on a thread that has no thread state creates one and, when it detaches,
//! destroys it again. For a worker that attaches once per run of batches, that would mean a
//! new thread state every few batches: its cost on every hand-over, and, worse, every
//! `threading.local` of the dataset emptied between two runs (a per-thread table would be
//! rebuilt again and again, which is the very thing `threading.local` is there to avoid).
//!
//! [`attach`] gives such a thread a thread state of its own on first use and keeps it, detached,
//! until the thread ends; the thread's exit then deletes it. Once the interpreter has started
//! to shut down ([`interpreter_exiting`], registered with `atexit`), no thread state is made or
//! deleted any more, and the loader's threads no longer enter the interpreter: [`attach`]
//! refuses (an error, without touching Python). On CPython <= 3.13, a thread that takes the
//! interpreter after finalization began is ended with `pthread_exit`, whose forced unwind
//! through Rust frames aborts the process ("FATAL: exception not rethrown"); so
//! `interpreter_exiting` abandons every live epoch and waits, with the interpreter released,
//! until no loader thread is attached. A thread still attached after [`EXIT_WAIT`] runs user
//! code that does not return (a `__getitem__` that sleeps, say): the process then ends at once
//! with status 1 and a message on stderr, as `os._exit(1)`, rather than abort later. An exit
//! caused by an uncaught `KeyboardInterrupt` (Ctrl-C) waits only [`INTERRUPT_WAIT`] and then
//! ends the process as CPython itself would after it: by SIGINT (status 130 in a shell, -2 in
//! `subprocess`), with no message beyond the traceback already printed.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::ffi;
use pyo3::prelude::*;

/// Threads deleting their thread state right now (see `Kept::drop`).
static DELETING: AtomicUsize = AtomicUsize::new(0);

/// Loader threads inside [`attach`] right now (nested calls count again).
static ATTACHED: AtomicUsize = AtomicUsize::new(0);

/// How long `interpreter_exiting` waits for the loader's threads to leave the interpreter.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);

/// [`EXIT_WAIT`] after Ctrl-C: the user wants the prompt back now, and threads that are not
/// in user code leave far sooner than this.
pub const INTERRUPT_WAIT: Duration = Duration::from_millis(100);

/// The thread state this thread made and keeps (detached), or null when it made none.
struct Kept(Cell<*mut ffi::PyThreadState>);

impl Kept {
    /// Whether this thread should make a thread state and keep it: it has none, it made none,
    /// and the interpreter runs and is not exiting.
    fn needs_state(&self) -> bool {
        if !self.0.get().is_null() || crate::seam::exiting() {
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
        // Announce the deletion before checking `seam::exiting` (both sequentially consistent):
        // either this thread sees the interpreter exiting and leaves the state, or
        // `interpreter_exiting` sees this deletion and waits for it, with the interpreter
        // released, before finalization begins. So no thread waits for the interpreter while it
        // finalizes (CPython would end such a thread in the middle of this destructor).
        DELETING.fetch_add(1, Ordering::SeqCst);
        if !crate::seam::exiting() {
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

/// Whether the interpreter runs with a GIL now (a free-threaded build may turn it back on).
pub fn gil_enabled(py: Python<'_>) -> PyResult<bool> {
    let sys = py.import("sys")?;
    match sys.getattr("_is_gil_enabled") {
        Ok(f) => f.call0()?.extract(),
        Err(_) => Ok(true),
    }
}

/// What [`attach`] returns in place of the closure's result when it refuses to enter the
/// interpreter (it is exiting). Made without the interpreter.
pub trait Refused {
    fn refused() -> Self;
}

impl Refused for () {
    fn refused() -> Self {}
}

impl<T> Refused for PyResult<T> {
    fn refused() -> Self {
        // A lazy error: nothing of Python is touched until it is raised.
        Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the interpreter is exiting: dataloader-rs threads no longer run Python code",
        ))
    }
}

impl<T> Refused for Result<T, dlrs_core::LoadError<PyErr>> {
    fn refused() -> Self {
        Err(dlrs_core::LoadError::Cancelled)
    }
}

/// Counts a loader thread in [`ATTACHED`] while it lives.
struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        ATTACHED.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `Python::attach` for the loader's threads: the thread keeps its thread state (and so its
/// `threading.local` values) between calls. Once the interpreter exits, a loader thread is
/// refused ([`Refused::refused`]); threads of Python's own (the main thread running `atexit`
/// handlers, say) attach as always.
pub fn attach<R: Refused>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    try_attach(f).unwrap_or_else(R::refused)
}

/// [`attach`], with `None` when it refuses.
pub fn try_attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    // During the thread's exit (after `KEPT` was dropped), the thread is still a loader thread.
    let kept = KEPT.try_with(|k| !k.0.get().is_null()).unwrap_or(true);
    // SAFETY: `PyGILState_GetThisThreadState` only reads this thread's slot of the runtime,
    // safe at any time after initialization, which importing this module implies.
    if !kept && !unsafe { ffi::PyGILState_GetThisThreadState() }.is_null() {
        // A thread state this thread did not make through `attach`: a thread of Python's own,
        // or a loader thread inside its first `attach`, already counted.
        return Some(Python::attach(f));
    }
    // Counted before `seam::exiting` is read (both sequentially consistent): either this thread sees
    // the interpreter exiting and stays out, or `interpreter_exiting` sees it attached and
    // waits for it before finalization begins.
    ATTACHED.fetch_add(1, Ordering::SeqCst);
    let _counted = Counted;
    if crate::seam::exiting() {
        return None;
    }
    if KEPT.try_with(Kept::needs_state).unwrap_or(false) {
        // SAFETY: the interpreter runs and is not exiting, and this thread has no thread state
        // (`needs_state`), so `PyGILState_Ensure` makes one and attaches it, counter at 1. The
        // first call thus takes the interpreter once, not twice.
        unsafe { ffi::PyGILState_Ensure() };
        let _keep = KeepOnLeave;
        return Some(Python::attach(f));
    }
    Some(Python::attach(f))
}

/// Registered with `pthread_atfork` by the module ([`forget_threads_in_forked_children`]): the
/// threads the parent counted as attached, waiting or deleting do not exist in the child, whose
/// exit must not wait for them. Not a Python callable (`os.register_at_fork`): entering PyO3 in
/// the child takes its pool of deferred reference drops, whose lock a thread of the parent may
/// have held at the fork, and would hang every child forked then (torch's worker processes).
extern "C" fn forked_child() {
    ATTACHED.store(0, Ordering::SeqCst);
    crate::seam::forget_waiting();
    DELETING.store(0, Ordering::SeqCst);
}

/// Makes every forked child forget the parent's threads (`forked_child`); false if the
/// handler could not be registered (out of memory).
pub fn forget_threads_in_forked_children() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: registering a fork handler has no precondition; the handler only stores to
    // atomics, which is async-signal-safe, as a handler that runs in a forked child must be.
    *REGISTERED.get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(forked_child)) } == 0)
}

/// Registered with `atexit` by the module: the interpreter is shutting down. From now on the
/// loader's threads do not enter the interpreter, and no thread state is made or deleted by
/// them. Every live epoch is abandoned, then this waits, with the interpreter released, at
/// most [`EXIT_WAIT`] ([`INTERRUPT_WAIT`] after an uncaught `KeyboardInterrupt`), until no
/// loader thread is attached, no Python thread waits on a loader (`seam::wait_on_loader`) and the
/// deletions under way are done. A thread still attached then runs user code that did not
/// return: the process ends here, before finalization could abort it: by SIGINT after an
/// uncaught `KeyboardInterrupt` (the status CPython gives it), else with status 1 and a
/// message on stderr.
#[pyfunction]
pub fn interpreter_exiting(py: Python<'_>) -> PyResult<()> {
    crate::seam::begin_exit();
    dlrs_core::source::abandon_live_epochs();
    let interrupted = uncaught_keyboard_interrupt(py);
    let limit = if interrupted {
        INTERRUPT_WAIT
    } else {
        EXIT_WAIT
    };
    let attached = || ATTACHED.load(Ordering::SeqCst) + crate::seam::waiting();
    crate::seam::wait_bounded(py, limit, || {
        attached() > 0 || DELETING.load(Ordering::SeqCst) > 0
    });
    let attached = attached();
    if attached == 0 {
        return Ok(());
    }
    let sys = py.import("sys")?;
    for stream in ["stdout", "stderr"] {
        if let Ok(s) = sys.getattr(stream) {
            let _ = s.call_method0("flush");
        }
    }
    if interrupted {
        end_by_sigint(py);
    }
    let message = format!(
        "dataloader-rs: {attached} thread(s) still running Python code (a \
         __getitem__, transform or collate_fn that did not return) {} s after the \
         interpreter began to exit; ending the process now with status 1, as \
         os._exit(1) (finalizing the interpreter under them would abort it)\n",
        EXIT_WAIT.as_secs()
    );
    if let Ok(stderr) = sys.getattr("stderr") {
        let _ = stderr.call_method1("write", (message,));
        let _ = stderr.call_method0("flush");
    }
    py.import("os")?.call_method1("_exit", (1,))?;
    Ok(())
}

/// Whether the program ends because of an uncaught `KeyboardInterrupt`: CPython printed it
/// and kept it in `sys.last_exc` (`sys.last_value` before 3.12), and will end the process by
/// SIGINT after finalizing. Not in an interactive session, where that is an earlier error the
/// prompt already reported.
fn uncaught_keyboard_interrupt(py: Python<'_>) -> bool {
    let check = || -> PyResult<bool> {
        let sys = py.import("sys")?;
        if sys.hasattr("ps1")? || sys.getattr("flags")?.getattr("interactive")?.is_truthy()? {
            return Ok(false);
        }
        let last = match sys.getattr("last_exc") {
            Ok(e) => e,
            Err(_) => sys.getattr("last_value")?,
        };
        Ok(last.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>())
    };
    check().unwrap_or(false)
}

/// Ends the process as CPython ends it after an uncaught `KeyboardInterrupt`: SIGINT with its
/// default action, so a shell sees the program killed by Ctrl-C; 130 (128 + SIGINT, CPython's
/// own fallback) if the signal cannot be raised.
fn end_by_sigint(py: Python<'_>) -> ! {
    let raise = || -> PyResult<()> {
        let signal = py.import("signal")?;
        let sigint = signal.getattr("SIGINT")?;
        signal.call_method1("signal", (&sigint, signal.getattr("SIG_DFL")?))?;
        let os = py.import("os")?;
        os.call_method1("kill", (os.call_method0("getpid")?, &sigint))?;
        Ok(())
    };
    if raise().is_ok() {
        // The signal may reach another thread first; this one keeps the interpreter (no
        // loader thread comes back into Python) until it has ended the process.
        std::thread::sleep(Duration::from_secs(1));
    }
    let _ = py
        .import("os")
        .and_then(|os| os.call_method1("_exit", (130,)));
    std::process::exit(130)
}
