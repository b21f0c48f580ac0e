//! The crate's one error type, sorted by who is at fault, and its kinds ([`ErrorKind`]).

use std::io;

use crate::redact::redact_text;

/// Everything that can go wrong in `dlrs-io`.
///
/// Variants are sorted by who is at fault: the caller (`InvalidArgument`, `InvalidType`,
/// `IndexOutOfRange`), a limit (`TooLarge`), the remote side or the system (`Timeout`, `Http`,
/// `Io`, `Request`), and the runtime (`Runtime`). [`Error::kind`] classifies them without the
/// message. No message shows a URL's query string or credentials: every
/// location stored here has gone through [`crate::redact_url`] or [`crate::redact_text`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument value (a template, an option, a URL, a header).
    #[error("{0}")]
    InvalidArgument(String),

    /// An argument of the wrong type (a column that is neither ints nor strs).
    #[error("{0}")]
    InvalidType(String),

    /// An item index at or past the dataset's length.
    #[error("index {index} is out of range for a dataset of {len} items")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The dataset's length.
        len: u64,
    },

    /// An item larger than `max_bytes`, known from its announced size (`size`) or found while
    /// reading (`size` is `None`: more than `limit` bytes arrived).
    #[error("{location}: {} is larger than max_bytes ({limit} bytes)", describe_size(*.size))]
    TooLarge {
        /// The redacted URL, path or object location.
        location: String,
        /// The `max_bytes` in force.
        limit: u64,
        /// The size announced by Content-Length, file metadata or object metadata.
        size: Option<u64>,
    },

    /// The last attempt ran out of time.
    #[error("{location}: timed out (attempt {attempts} of {attempts})")]
    Timeout {
        /// The redacted URL, path or object location.
        location: String,
        /// The number of attempts made, all of them included.
        attempts: u32,
    },

    /// An HTTP status that is not a success, after the retries it allows.
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
    /// TLS, redirect loop, an object store's own failure), of a kind read from the failure's
    /// source errors, not from their messages.
    #[error("{location}: {message}")]
    Request {
        /// The redacted URL or object location.
        location: String,
        /// What kind of failure it is.
        kind: RequestKind,
        /// What went wrong, redacted.
        message: String,
    },

    /// The data at `location` are not what they should be: a malformed or truncated tar
    /// archive, a sample without the member asked for.
    #[error("{location}: {message}")]
    InvalidData {
        /// The redacted URL, path or object location (and the member, if one is meant).
        location: String,
        /// What is wrong.
        message: String,
    },

    /// A tar shard is not the one its index was made from: its size, ETag, modification time
    /// or Last-Modified differ (or the server refused the precondition). Nothing of it was
    /// read with the old index.
    #[error(
        "{location}: the shard changed since it was indexed ({message}); build the dataset \
         again to index it anew"
    )]
    Changed {
        /// The redacted location of the shard.
        location: String,
        /// What differs.
        message: String,
    },

    /// The tokio runtime could not be built or was used from inside an async context.
    #[error("{0}")]
    Runtime(String),

    /// The fetch of item `index` of a [`crate::Pipeline`] failed with `error`.
    #[error("item {index}: {error}")]
    Item {
        /// The dataset index.
        index: u64,
        /// Why the fetch failed.
        error: Box<Error>,
    },

    /// The transform of item `index` of a [`crate::Pipeline`] failed.
    #[cfg(feature = "transforms")]
    #[error("item {index}: {error}")]
    Transform {
        /// The dataset index.
        index: u64,
        /// What the transform failed with.
        error: dlrs_transforms::Error,
    },

    /// The images of a batch could not be collated.
    #[cfg(feature = "transforms")]
    #[error("cannot collate the batch: {0}")]
    Collate(dlrs_transforms::Error),
}

/// What kind of failure an [`Error`] is, without its message: for callers that react to a
/// failure (skip a missing item, retry later, map it onto their own error types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A bad argument value ([`Error::InvalidArgument`]).
    InvalidArgument,
    /// An argument of the wrong type ([`Error::InvalidType`]).
    InvalidType,
    /// An item index past the dataset's length ([`Error::IndexOutOfRange`]).
    IndexOutOfRange,
    /// An item over `max_bytes` ([`Error::TooLarge`]).
    TooLarge,
    /// The last attempt ran out of time ([`Error::Timeout`]).
    TimedOut,
    /// An HTTP status that is not a success ([`Error::Http`]).
    Http(u16),
    /// A file or object read failed with this I/O error kind ([`Error::Io`]): `NotFound`,
    /// `PermissionDenied`, ...
    Io(io::ErrorKind),
    /// A request failed without a status ([`Error::Request`]), for this reason.
    Request(RequestKind),
    /// Malformed or truncated data ([`Error::InvalidData`]).
    InvalidData,
    /// A shard changed since it was indexed ([`Error::Changed`]).
    Changed,
    /// The tokio runtime failed ([`Error::Runtime`]).
    Runtime,
    /// A transform or the collation of a pipeline failed.
    Transform,
}

/// Why a request failed without a status ([`Error::Request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKind {
    /// Nothing accepted the connection.
    ConnectionRefused,
    /// The other side reset, aborted or closed the connection before the answer was complete.
    ConnectionReset,
    /// The body ended before the length its head announced.
    Truncated,
    /// The TLS handshake or a TLS record failed (a server that does not speak TLS, ...).
    Tls,
    /// The server's certificate was refused (untrusted, expired, for another name): another
    /// attempt would be refused too.
    Certificate,
    /// More redirects than allowed, or a redirect to an invalid or non-HTTP URL.
    Redirect,
    /// Connecting failed otherwise (a name that does not resolve, an unreachable network).
    Connect,
    /// Any other failure (an object store's own, ...).
    Other,
}

impl RequestKind {
    /// Whether another attempt may succeed: all but a refused certificate and a redirect.
    pub fn is_transient(self) -> bool {
        !matches!(self, RequestKind::Certificate | RequestKind::Redirect)
    }
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::InvalidType(_) => ErrorKind::InvalidType,
            Error::IndexOutOfRange { .. } => ErrorKind::IndexOutOfRange,
            Error::TooLarge { .. } => ErrorKind::TooLarge,
            Error::Timeout { .. } => ErrorKind::TimedOut,
            Error::Http { status, .. } => ErrorKind::Http(*status),
            Error::Io { kind, .. } => ErrorKind::Io(*kind),
            Error::Request { kind, .. } => ErrorKind::Request(*kind),
            Error::InvalidData { .. } => ErrorKind::InvalidData,
            Error::Changed { .. } => ErrorKind::Changed,
            Error::Runtime(_) => ErrorKind::Runtime,
            Error::Item { error, .. } => error.kind(),
            #[cfg(feature = "transforms")]
            Error::Transform { .. } | Error::Collate(_) => ErrorKind::Transform,
        }
    }

    /// The OS error number, when the error came from the OS (a file read).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Item { error, .. } => error.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the item does not exist: an I/O `NotFound` (a file, an object) or HTTP 404/410.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Io(io::ErrorKind::NotFound) | ErrorKind::Http(404 | 410)
        )
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

/// The messages of `error` and its sources, joined by ": ", leaving out the errors whose
/// message already shows their source's (known by their types: object_store's `HttpError`, a
/// reqwest error around another).
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let repeats_its_source = |e: &(dyn std::error::Error + 'static)| {
        #[cfg(feature = "object-store")]
        if e.is::<object_store::client::HttpError>() {
            return true;
        }
        e.is::<reqwest::Error>() && e.source().is_some_and(|s| s.is::<reqwest::Error>())
    };
    let levels = std::iter::successors(Some(error), |e| e.source());
    let shown: Vec<String> = levels
        .filter(|e| !repeats_its_source(*e))
        .map(|e| e.to_string())
        .collect();
    shown.join(": ")
}

/// `error` and every error under it, stepping into the error an `io::Error` wraps (its
/// `source()` skips that one).
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn causes<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| {
        match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        }
    })
}

/// The kind of a failed request, read from the typed errors in its chain: a rustls error, an
/// OS error kind, reqwest's (or object_store's) own connect flag.
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn request_kind(error: &(dyn std::error::Error + 'static)) -> RequestKind {
    let mut connect = false;
    for cause in causes(error) {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return match tls {
                rustls::Error::InvalidCertificate(_) => RequestKind::Certificate,
                _ => RequestKind::Tls,
            };
        }
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            match io.kind() {
                io::ErrorKind::ConnectionRefused => return RequestKind::ConnectionRefused,
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe => return RequestKind::ConnectionReset,
                // Before any answer (a TLS handshake cut short) the connection was closed.
                io::ErrorKind::UnexpectedEof if connect => return RequestKind::ConnectionReset,
                io::ErrorKind::UnexpectedEof => return RequestKind::Truncated,
                _ => {}
            }
        }
        if let Some(e) = cause.downcast_ref::<reqwest::Error>() {
            connect |= e.is_connect();
            if e.is_redirect() {
                return RequestKind::Redirect;
            }
        }
        #[cfg(feature = "object-store")]
        if let Some(e) = cause.downcast_ref::<object_store::client::HttpError>() {
            connect |= e.kind() == object_store::client::HttpErrorKind::Connect;
        }
    }
    if connect {
        RequestKind::Connect
    } else {
        RequestKind::Other
    }
}

fn describe_size(size: Option<u64>) -> String {
    match size {
        Some(size) => format!("the item ({size} bytes)"),
        None => "the item".to_owned(),
    }
}

#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn reason(status: u16) -> String {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(reason) => format!(" {reason}"),
        None => String::new(),
    }
}

/// Without an HTTP client there are no HTTP errors to explain.
#[cfg(not(any(feature = "http", feature = "object-store")))]
pub(crate) fn reason(_status: u16) -> String {
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: Error, message: &str, kind: ErrorKind) {
        assert_eq!(error.to_string(), message);
        assert_eq!(error.kind(), kind);
        assert_eq!(error.raw_os_error(), None);
    }

    #[test]
    fn messages_and_kinds() {
        check(Error::invalid("bad"), "bad", ErrorKind::InvalidArgument);
        check(
            Error::InvalidType("column 'x' is neither ints nor strs".into()),
            "column 'x' is neither ints nor strs",
            ErrorKind::InvalidType,
        );
        check(
            Error::IndexOutOfRange { index: 7, len: 3 },
            "index 7 is out of range for a dataset of 3 items",
            ErrorKind::IndexOutOfRange,
        );
        check(
            Error::TooLarge {
                location: "http://h/a".into(),
                limit: 10,
                size: Some(11),
            },
            "http://h/a: the item (11 bytes) is larger than max_bytes (10 bytes)",
            ErrorKind::TooLarge,
        );
        check(
            Error::TooLarge {
                location: "http://h/a".into(),
                limit: 10,
                size: None,
            },
            "http://h/a: the item is larger than max_bytes (10 bytes)",
            ErrorKind::TooLarge,
        );
        check(
            Error::Timeout {
                location: "/x".into(),
                attempts: 2,
            },
            "/x: timed out (attempt 2 of 2)",
            ErrorKind::TimedOut,
        );
        // Only an HTTP client's build creates (and explains) HTTP statuses.
        #[cfg(any(feature = "http", feature = "object-store"))]
        check(
            Error::Http {
                status: 503,
                url: "http://h/a".into(),
                attempts: 4,
            },
            "http://h/a: HTTP status 503 Service Unavailable (attempt 4)",
            ErrorKind::Http(503),
        );
        check(
            Error::Request {
                location: "http://h/a".into(),
                kind: RequestKind::ConnectionReset,
                message: "connection reset".into(),
            },
            "http://h/a: connection reset",
            ErrorKind::Request(RequestKind::ConnectionReset),
        );
        check(
            Error::InvalidData {
                location: "s.tar".into(),
                message: "the archive is truncated".into(),
            },
            "s.tar: the archive is truncated",
            ErrorKind::InvalidData,
        );
        check(
            Error::Changed {
                location: "http://h/s.tar".into(),
                message: "size 10, indexed 12".into(),
            },
            "http://h/s.tar: the shard changed since it was indexed (size 10, indexed 12); \
             build the dataset again to index it anew",
            ErrorKind::Changed,
        );
        check(
            Error::Runtime("nested".into()),
            "nested",
            ErrorKind::Runtime,
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
        assert_eq!(error.kind(), ErrorKind::Io(io::ErrorKind::NotFound));
        assert_eq!(error.raw_os_error(), Some(2));
        assert!(error.is_not_found());
        let message = error.to_string();
        assert!(message.starts_with("https://h/a: "), "{message}");
        assert!(
            !message.contains("secret") && !message.contains("sig"),
            "{message}"
        );
    }

    #[test]
    fn not_found_covers_io_and_http() {
        let http = |status| Error::Http {
            status,
            url: "u".into(),
            attempts: 1,
        };
        assert!(http(404).is_not_found() && http(410).is_not_found());
        assert!(!http(403).is_not_found());
        assert!(!Error::IndexOutOfRange { index: 1, len: 1 }.is_not_found());
        let denied = Error::io("/x", io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(
            denied.kind(),
            ErrorKind::Io(io::ErrorKind::PermissionDenied)
        );
        assert!(!denied.is_not_found());
    }
}
