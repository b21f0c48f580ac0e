//! Lock helpers: a poisoned lock (a panic while holding it) is not a reason to stop delivering;
//! the message of a caught panic; and the primitives the crate's threads share.
//!
//! Every critical section in this crate leaves its state consistent before anything that can
//! panic runs, so the data behind a poisoned lock is still valid and is used as is.
//!
//! The crate takes its `Mutex`, `Condvar`, `Instant`, thread spawning and the flag of an
//! abandoned epoch (`AtomicBool`) from here: std's, or, in this crate's unit tests built with
//! `RUSTFLAGS="--cfg dlrs_model"`, the model checker's (`sync/model.rs`), under which the
//! `model::` tests explore the schedules of the epoch ring's and the pool's threads.

#[cfg(not(all(test, dlrs_model)))]
pub(crate) use std::sync::atomic::AtomicBool;
#[cfg(not(all(test, dlrs_model)))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
#[cfg(not(all(test, dlrs_model)))]
pub(crate) use std::{thread, time::Instant};

#[cfg(all(test, dlrs_model))]
pub mod model;
#[cfg(all(test, dlrs_model))]
pub(crate) use model::{AtomicBool, Condvar, Instant, Mutex, MutexGuard, thread};

/// Locks `m`, poisoned or not.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Locks `m` through `&mut` (no other thread holds it), poisoned or not.
pub fn lock_mut<T>(m: &mut Mutex<T>) -> &mut T {
    m.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// The message of a caught panic's payload (`panic!` with a literal or a format), or `fallback`.
#[must_use]
pub fn panic_message(payload: &(dyn std::any::Any + Send), fallback: &str) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| fallback.to_owned())
}
