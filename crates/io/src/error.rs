//! The crate's one error type, sorted by who is at fault, and its mapping onto Python exceptions.

use std::io;

use crate::redact::redact_text;

/// Everything that can go wrong in `dlrs-io`.
///
/// Variants are sorted by who is at fault: the caller (`InvalidArgument`, `InvalidType`,
/// `IndexOutOfRange`), a limit (`TooLarge`), the remote side or the system (`Timeout`, `Http`,
/// `Io`, `Request`), and the runtime (`Runtime`). [`Error::python_kind`] says which Python
/// exception each one becomes. No message shows a URL's query string or credentials: every
/// location stored here has gone through [`crate::redact_url`] or [`crate::redact_text`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument value (a template, an option, a URL, a header). Python: `ValueError`.
    #[error("{0}")]
    InvalidArgument(String),

    /// An argument of the wrong type (a column that is neither ints nor strs). Python: `TypeError`.
    #[error("{0}")]
    InvalidType(String),

    /// An item index at or past the dataset's length. Python: `IndexError`.
    #[error("index {index} is out of range for a dataset of {len} items")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The dataset's length.
        len: usize,
    },

    /// An item larger than `max_bytes`, known from its announced size (`size`) or found while
    /// reading (`size` is `None`: more than `limit` bytes arrived). Python: `ValueError`.
    #[error("{location}: {} is larger than max_bytes ({limit} bytes)", describe_size(*.size))]
    TooLarge {
        /// The redacted URL, path or object location.
        location: String,
        /// The `max_bytes` in force.
        limit: u64,
        /// The size announced by Content-Length, file metadata or object metadata.
        size: Option<u64>,
    },

    /// The last attempt ran out of time. Python: `TimeoutError`.
    #[error("{location}: timed out (attempt {attempts} of {attempts})")]
    Timeout {
        /// The redacted URL, path or object location.
        location: String,
        /// The number of attempts made, all of them included.
        attempts: u32,
    },

    /// An HTTP status that is not a success, after the retries it allows. Python: `OSError`.
    #[error("{url}: HTTP status {status}{} (attempt {attempts})", reason(*.status))]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The redacted URL.
        url: String,
        /// The number of attempts made.
        attempts: u32,
    },

    /// A failed file or object read with an I/O error kind (not found, permission denied, ...).
    /// Python: `OSError` (the bindings pick the subclass from `kind`/errno).
    #[error("{location}: {source}")]
    Io {
        /// The redacted path or object location.
        location: String,
        /// The error kind, the same as `source.kind()`.
        kind: io::ErrorKind,
        /// The underlying error (its message is redacted when it came from a remote store).
        #[source]
        source: io::Error,
    },

    /// A request that failed without a status (connection refused or reset, truncated body,
    /// TLS, redirect loop, an object store's own failure). Python: `OSError`.
    #[error("{location}: {message}")]
    Request {
        /// The redacted URL or object location.
        location: String,
        /// What went wrong, redacted.
        message: String,
    },

    /// The tokio runtime could not be built or was used from inside an async context.
    /// Python: `RuntimeError`.
    #[error("{0}")]
    Runtime(String),
}

/// The Python exception an [`Error`] maps to; the bindings convert in one place from this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PyKind {
    /// `ValueError`.
    ValueError,
    /// `TypeError`.
    TypeError,
    /// `IndexError`.
    IndexError,
    /// `TimeoutError`.
    TimeoutError,
    /// `RuntimeError`.
    RuntimeError,
    /// `OSError`, or its subclass for `kind` (`FileNotFoundError` for `NotFound`, ...).
    OSError {
        /// The OS error number, when the error came from the OS.
        errno: Option<i32>,
        /// The I/O error kind, when known.
        kind: Option<io::ErrorKind>,
    },
}

impl Error {
    /// The Python exception this error becomes.
    pub fn python_kind(&self) -> PyKind {
        match self {
            Error::InvalidArgument(_) | Error::TooLarge { .. } => PyKind::ValueError,
            Error::InvalidType(_) => PyKind::TypeError,
            Error::IndexOutOfRange { .. } => PyKind::IndexError,
            Error::Timeout { .. } => PyKind::TimeoutError,
            Error::Runtime(_) => PyKind::RuntimeError,
            Error::Io { kind, source, .. } => PyKind::OSError {
                errno: source.raw_os_error(),
                kind: Some(*kind),
            },
            Error::Http { .. } | Error::Request { .. } => PyKind::OSError {
                errno: None,
                kind: None,
            },
        }
    }

    /// An I/O error at `location` (a path or object location, redacted here).
    pub(crate) fn io(location: &str, source: io::Error) -> Error {
        Error::Io {
            location: redact_text(location),
            kind: source.kind(),
            source,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::InvalidArgument(message.into())
    }
}

/// `error` and its sources, joined by ": ".
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

fn describe_size(size: Option<u64>) -> String {
    match size {
        Some(size) => format!("the item ({size} bytes)"),
        None => "the item".to_owned(),
    }
}

fn reason(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(reason) => format!(" {reason}"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: Error, message: &str, kind: PyKind) {
        assert_eq!(error.to_string(), message);
        assert_eq!(error.python_kind(), kind);
    }

    #[test]
    fn messages_and_python_kinds() {
        check(Error::invalid("bad"), "bad", PyKind::ValueError);
        check(
            Error::InvalidType("column 'x' is neither ints nor strs".into()),
            "column 'x' is neither ints nor strs",
            PyKind::TypeError,
        );
        check(
            Error::IndexOutOfRange { index: 7, len: 3 },
            "index 7 is out of range for a dataset of 3 items",
            PyKind::IndexError,
        );
        check(
            Error::TooLarge {
                location: "http://h/a".into(),
                limit: 10,
                size: Some(11),
            },
            "http://h/a: the item (11 bytes) is larger than max_bytes (10 bytes)",
            PyKind::ValueError,
        );
        check(
            Error::TooLarge {
                location: "http://h/a".into(),
                limit: 10,
                size: None,
            },
            "http://h/a: the item is larger than max_bytes (10 bytes)",
            PyKind::ValueError,
        );
        check(
            Error::Timeout {
                location: "/x".into(),
                attempts: 2,
            },
            "/x: timed out (attempt 2 of 2)",
            PyKind::TimeoutError,
        );
        check(
            Error::Http {
                status: 503,
                url: "http://h/a".into(),
                attempts: 4,
            },
            "http://h/a: HTTP status 503 Service Unavailable (attempt 4)",
            PyKind::OSError {
                errno: None,
                kind: None,
            },
        );
        check(
            Error::Request {
                location: "http://h/a".into(),
                message: "connection reset".into(),
            },
            "http://h/a: connection reset",
            PyKind::OSError {
                errno: None,
                kind: None,
            },
        );
        check(
            Error::Runtime("nested".into()),
            "nested",
            PyKind::RuntimeError,
        );
    }

    #[test]
    fn io_errors_keep_kind_and_errno_and_redact_the_location() {
        let error = Error::io(
            "https://user:secret@h/a?sig=1",
            io::Error::from_raw_os_error(2),
        );
        assert!(matches!(
            &error,
            Error::Io {
                kind: io::ErrorKind::NotFound,
                ..
            }
        ));
        assert_eq!(
            error.python_kind(),
            PyKind::OSError {
                errno: Some(2),
                kind: Some(io::ErrorKind::NotFound)
            }
        );
        let message = error.to_string();
        assert!(message.starts_with("https://h/a: "), "{message}");
        assert!(
            !message.contains("secret") && !message.contains("sig"),
            "{message}"
        );
    }
}
