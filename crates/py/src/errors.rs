//! Every Rust error of the workspace becomes a Python exception here, one arm per variant.
//!
//! Exceptions raised by user code (a dataset, a transform, a collate_fn, a sampler) travel
//! through Rust as the original `PyErr` and are never re-created, so they keep their type,
//! message and traceback.

use std::io;

use pyo3::exceptions::{
    PyBlockingIOError, PyBrokenPipeError, PyConnectionAbortedError, PyConnectionRefusedError,
    PyConnectionResetError, PyFileExistsError, PyFileNotFoundError, PyIndexError,
    PyInterruptedError, PyIsADirectoryError, PyNotADirectoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyStopIteration, PyTimeoutError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;

use dlrs_core::LoadError;
use dlrs_io::ErrorKind;

pyo3::create_exception!(
    dataloader_rs,
    ShardChangedError,
    PyOSError,
    "A tar shard is not the one its index was made from (its size, ETag, Last-Modified or \
     modification time differ): nothing of it was read with the old index."
);

/// A configuration the core refused: always the caller's fault.
pub fn core_error(e: &dlrs_core::Error) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Why a batch did not load, as the exception the consumer gets.
pub fn load_error(e: LoadError<PyErr>) -> PyErr {
    match e {
        LoadError::Source(err) => err,
        LoadError::Panicked(msg) => {
            PyRuntimeError::new_err(format!("a dataloader-rs worker panicked: {msg}"))
        }
        LoadError::Cancelled => PyRuntimeError::new_err(
            "the batch was abandoned with its epoch (its iterator was dropped, or the \
             interpreter is exiting)",
        ),
    }
}

/// `err`, or, when it is a `StopIteration` raised by user code (`what`: `__getitem__`, the
/// transform, ...), a `RuntimeError` caused by it: raised from `__next__`, a StopIteration
/// would end the epoch early without a word (PEP 479 does the same for generators).
pub fn no_stop_iteration(py: Python<'_>, err: PyErr, what: &str) -> PyErr {
    if !err.is_instance_of::<PyStopIteration>(py) {
        return err;
    }
    let wrapped = PyRuntimeError::new_err(format!("{what} raised StopIteration"));
    wrapped.set_cause(py, Some(err));
    wrapped
}

/// A `dlrs-io` error as a Python exception, chosen from its [`dlrs_io::Error::kind`]: bad values
/// and over-limit items are `ValueError`; an I/O error becomes the `OSError` subclass of its kind
/// (`FileNotFoundError` for `NotFound`, ...), with its errno when the OS gave one; an HTTP status
/// or a failed request is a plain `OSError`; malformed data (a truncated or corrupt tar shard)
/// is `ValueError`, as corrupt images are; a shard that changed since it was indexed is
/// `ShardChangedError`, an `OSError`. Messages are already redacted by `dlrs-io`.
pub fn io_error(e: &dlrs_io::Error) -> PyErr {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::TooLarge | ErrorKind::InvalidData => {
            PyValueError::new_err(message)
        }
        ErrorKind::Changed => ShardChangedError::new_err(message),
        ErrorKind::InvalidType => PyTypeError::new_err(message),
        ErrorKind::IndexOutOfRange => PyIndexError::new_err(message),
        ErrorKind::TimedOut => PyTimeoutError::new_err(message),
        ErrorKind::Runtime | ErrorKind::Transform => PyRuntimeError::new_err(message),
        ErrorKind::Io(kind) => os_error(e.raw_os_error(), Some(kind), message),
        // A failed request stays a plain OSError whatever its kind (refused, reset, TLS).
        ErrorKind::Http(_) | ErrorKind::Request(_) => os_error(None, None, message),
        // Non-exhaustive: a kind added later is an I/O failure until it gets its own arm.
        _ => os_error(e.raw_os_error(), None, message),
    }
}

/// `OSError` or its subclass for `kind`; `OSError(errno, message)` when there is an errno, so
/// `.errno` and `.strerror` are set as for an error raised by Python's own I/O.
fn os_error(errno: Option<i32>, kind: Option<io::ErrorKind>, message: String) -> PyErr {
    macro_rules! raise {
        ($ty:ty) => {
            match errno {
                Some(errno) => <$ty>::new_err((errno, message)),
                None => <$ty>::new_err(message),
            }
        };
    }
    match kind {
        Some(io::ErrorKind::NotFound) => raise!(PyFileNotFoundError),
        Some(io::ErrorKind::PermissionDenied) => raise!(PyPermissionError),
        Some(io::ErrorKind::AlreadyExists) => raise!(PyFileExistsError),
        Some(io::ErrorKind::IsADirectory) => raise!(PyIsADirectoryError),
        Some(io::ErrorKind::NotADirectory) => raise!(PyNotADirectoryError),
        Some(io::ErrorKind::Interrupted) => raise!(PyInterruptedError),
        Some(io::ErrorKind::WouldBlock) => raise!(PyBlockingIOError),
        Some(io::ErrorKind::TimedOut) => raise!(PyTimeoutError),
        Some(io::ErrorKind::ConnectionRefused) => raise!(PyConnectionRefusedError),
        Some(io::ErrorKind::ConnectionReset) => raise!(PyConnectionResetError),
        Some(io::ErrorKind::ConnectionAborted) => raise!(PyConnectionAbortedError),
        Some(io::ErrorKind::BrokenPipe) => raise!(PyBrokenPipeError),
        _ => raise!(PyOSError),
    }
}

/// An image error of `dlrs-transforms`: the spec makes every one a `ValueError` (bad arguments,
/// over-limit, corrupt or truncated images, a transform given an image it does not take, a batch
/// of mixed shapes or types), with the crate's message, which says why.
pub fn image_error(e: &dlrs_transforms::Error) -> PyErr {
    use dlrs_transforms::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidArgument { .. } | E::InvalidImage { .. } => PyValueError::new_err(msg),
        E::TooLarge { .. } | E::AllocationTooLarge { .. } => PyValueError::new_err(msg),
        E::UnknownFormat { .. }
        | E::Corrupt { .. }
        | E::Truncated { .. }
        | E::Unsupported { .. } => PyValueError::new_err(msg),
        E::WrongInput { .. } => PyValueError::new_err(msg),
        E::ShapeMismatch { .. } | E::DtypeMismatch { .. } | E::EmptyBatch => {
            PyValueError::new_err(msg)
        }
        // The enum is non-exhaustive: a variant added later is still the caller's data.
        _ => PyValueError::new_err(msg),
    }
}
