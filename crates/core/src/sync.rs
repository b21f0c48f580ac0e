//! Lock helpers: a poisoned lock (a panic while holding it) is not a reason to stop delivering.
//!
//! Every critical section in this crate leaves its state consistent before anything that can
//! panic runs, so the data behind a poisoned lock is still valid and is used as is.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits at most `timeout`; returns the guard and whether the time ran out.
pub(crate) fn wait_timeout<'a, T>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, bool) {
    match cv.wait_timeout(g, timeout) {
        Ok((g, r)) => (g, r.timed_out()),
        Err(e) => {
            let (g, r) = e.into_inner();
            (g, r.timed_out())
        }
    }
}
