//! What the unit tests of several modules share.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::Error;

/// A fresh empty directory under the system's temporary directory, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> TempDir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dlrs-io-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asserts that `error` is an [`Error::Io`] of `kind`.
#[track_caller]
pub(crate) fn assert_io(error: &Error, kind: io::ErrorKind) {
    assert!(
        matches!(error, Error::Io { kind: k, .. } if *k == kind),
        "{error:?}"
    );
}

/// Asserts that the message of `error` starts with `prefix` (what failed, named).
#[track_caller]
pub(crate) fn assert_starts_with(error: &Error, prefix: &str) {
    assert!(error.to_string().starts_with(prefix), "{error}");
}

/// Asserts that `error` is an [`Error::TooLarge`] over `limit` bytes, of `size` when one was
/// announced.
#[track_caller]
pub(crate) fn assert_too_large(error: &Error, limit: u64, size: Option<u64>) {
    assert!(
        matches!(error, Error::TooLarge { limit: l, size: s, .. } if *l == limit && *s == size),
        "{error:?}"
    );
}

/// Asserts that `error` is an [`Error::Http`] of `status` after `attempts` attempts.
#[cfg(any(feature = "http", feature = "object-store"))]
#[track_caller]
pub(crate) fn assert_http(error: &Error, status: u16, attempts: u32) {
    assert!(
        matches!(error, Error::Http { status: s, attempts: a, .. } if *s == status && *a == attempts),
        "{error:?}"
    );
}

/// Asserts that `error` is a failed request of `kind`.
#[cfg(any(feature = "http", feature = "object-store"))]
#[track_caller]
pub(crate) fn assert_request(error: &Error, kind: crate::RequestKind) {
    assert_eq!(error.kind(), crate::ErrorKind::Request(kind), "{error:?}");
}

/// A port nothing listens on (bound, then closed).
#[cfg(any(feature = "http", feature = "object-store"))]
pub(crate) fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `dataset[index]`, fetched on `runtime`.
pub(crate) fn fetch(
    runtime: &crate::Runtime,
    dataset: &dyn crate::Dataset,
    index: u64,
) -> Result<bytes::Bytes, Error> {
    runtime.block_on(dataset.fetch(index)).unwrap()
}

/// With two retries: item `once.0` of `dataset` (at `once.1` on `server`) was reset on its
/// first request and answered `once.2` on the next; item `always.0` (at `always.1`) is reset
/// on each of its three attempts and fails as a reset connection, its location first.
#[cfg(any(feature = "http", feature = "object-store"))]
#[track_caller]
pub(crate) fn assert_resets_retried(
    runtime: &crate::Runtime,
    server: &crate::test_server::LoopbackServer,
    dataset: &dyn crate::Dataset,
    once: (u64, &str, &[u8]),
    always: (u64, &str),
) {
    assert_eq!(fetch(runtime, dataset, once.0).unwrap(), once.2);
    assert_eq!(server.hits(once.1), 2);
    let error = fetch(runtime, dataset, always.0).unwrap_err();
    assert_request(&error, crate::RequestKind::ConnectionReset);
    assert_starts_with(&error, &format!("{}{}: ", server.base_url(), always.1));
    assert_eq!(server.hits(always.1), 3);
}
