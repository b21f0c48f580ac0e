//! `cli_main`: the `dlrs` console script's way into the Rust command (`dlrs_cli`).

use std::ffi::OsString;
use std::sync::mpsc::{self, RecvTimeoutError};

use pyo3::prelude::*;

use crate::seam::{Slice, wait_interruptibly};

/// The exit status of a command that panicked (Rust's own for a panicking `main`).
const PANICKED: i32 = 101;

/// Runs the `dlrs` command with `argv` (`argv[0]` is the program name) and returns its exit
/// status. The command runs on a thread of its own while this one waits with the interpreter
/// released, checking signals: Ctrl-C raises `KeyboardInterrupt` here (the command's thread is
/// left to end with the process; a prefetch it was running resumes cleanly, see `.part` files).
/// `dlrs --version` names the interpreter it runs in.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let runtime = interpreter(py)?;
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("dlrs-cli".to_owned())
        .spawn(move || {
            let status = dlrs_cli::run_status(argv.into_iter().map(OsString::from), &runtime);
            let _ = tx.send(status);
        })?;
    wait_interruptibly(py, move |timeout| {
        let received = match timeout {
            Some(t) => rx.recv_timeout(t),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok(status) => Slice::Ready(i32::from(status)),
            Err(RecvTimeoutError::Timeout) => Slice::Pending,
            Err(RecvTimeoutError::Disconnected) => Slice::Ready(PANICKED),
        }
    })
}

/// This interpreter as `dlrs --version` names it: `CPython 3.11.7`, `CPython 3.14.7,
/// free-threaded`, or `..., free-threaded build, GIL enabled` when the GIL was turned back on
/// (`PYTHON_GIL=1`, or an extension that needs it).
fn interpreter(py: Python<'_>) -> PyResult<String> {
    let platform = py.import("platform")?;
    let name: String = platform.call_method0("python_implementation")?.extract()?;
    let version: String = platform.call_method0("python_version")?.extract()?;
    let gil_disabled: Option<i64> = py
        .import("sysconfig")?
        .call_method1("get_config_var", ("Py_GIL_DISABLED",))?
        .extract()?;
    if gil_disabled != Some(1) {
        return Ok(format!("{name} {version}"));
    }
    Ok(if crate::attach::gil_enabled(py)? {
        format!("{name} {version}, free-threaded build, GIL enabled")
    } else {
        format!("{name} {version}, free-threaded")
    })
}
