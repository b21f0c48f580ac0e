//! Counters of a Rust dataset's I/O: requests in flight, bytes fetched, retries, cache hits.
//! Relaxed atomics, shared by every fetch of the dataset.

use std::sync::atomic::{AtomicU64, Ordering};

/// The I/O counters of one dataset (over all its fetches).
#[derive(Debug, Default)]
pub struct IoStats {
    in_flight: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
    cache_hits: AtomicU64,
}

/// A copy of [`IoStats`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoSnapshot {
    /// Requests (or file reads) under way now.
    pub requests_in_flight: u64,
    /// Bytes of the items fetched whole.
    pub bytes: u64,
    /// Attempts after the first one.
    pub retries: u64,
    /// Items read from a local cache instead ([`crate::Cached`]).
    pub cache_hits: u64,
}

/// A request under way; counted in flight until dropped.
pub(crate) struct Request<'a>(&'a IoStats);

impl Drop for Request<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl IoStats {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> IoSnapshot {
        IoSnapshot {
            requests_in_flight: self.in_flight.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn request(&self) -> Request<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Request(self)
    }

    /// Attempt `n` (from 1) starts: every one after the first is a retry.
    #[cfg_attr(not(any(feature = "http", feature = "file")), allow(dead_code))]
    pub(crate) fn attempt(&self, n: u32) {
        if n > 1 {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fetched(&self, bytes: usize) {
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}
