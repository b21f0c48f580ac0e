//! The one place where a Python call waits on Rust: the interpreter is released while waiting,
//! and signals (Ctrl-C) are checked at least every [`SIGNAL_SLICE`]. A wait that happens deep
//! inside Rust code, on a thread that released the interpreter already, slices by
//! [`SIGNAL_SLICE`] and checks with [`check_signals_detached`].

use std::time::Duration;

use pyo3::prelude::*;

/// How long a wait may go without checking for signals (the spec promises 100 ms): the
/// loader's one wait slice.
pub const SIGNAL_SLICE: Duration = dlrs_core::WAIT_SLICE;

/// What one slice of a wait found.
pub enum Slice<T> {
    /// Done.
    Ready(T),
    /// Not yet: check signals and wait again.
    Pending,
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
        if let Slice::Ready(v) = crate::attach::detach_counted(py, || poll(Some(SIGNAL_SLICE)))? {
            return Ok(v);
        }
        py.check_signals()?;
    }
}

/// Between two slices of a wait on a thread that released the interpreter: runs a pending
/// signal handler and returns its exception (KeyboardInterrupt).
pub fn check_signals_detached() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
