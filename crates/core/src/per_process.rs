//! A lazily built value that is built again in a forked child and never dropped there.
//!
//! After `fork`, only the forking thread exists in the child: a tokio runtime, a connection pool
//! or a lock inherited from the parent refers to threads and tasks that are gone. Dropping such
//! a value would join threads that do not exist, so it is leaked instead, and a new value is
//! built for the child. Reads take no lock (a lock held by another thread at `fork` time would
//! stay locked forever in the child).

use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

struct Entry<T> {
    pid: u32,
    value: T,
}

/// A value of `T` for the current process, built on first use.
pub struct PerProcess<T> {
    current: AtomicPtr<Entry<T>>,
    _owns: PhantomData<Box<Entry<T>>>,
}

impl<T> PerProcess<T> {
    /// An empty cell; the value is built on first use.
    #[must_use]
    pub const fn new() -> Self {
        PerProcess {
            current: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// The value built in this process, building it with `init` if there is none yet.
    ///
    /// Two threads that race here may both call `init`; one value wins and the other is dropped.
    /// # Errors
    /// What `init` fails with; nothing is stored then.
    pub fn get_or_try_init<E>(&self, init: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        let pid = crate::pid::current();
        let seen = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in `current` comes from `Box::into_raw` below. It is freed
        // only by `Drop`, which has exclusive access, and an entry replaced by a newer one is
        // leaked, never freed. So the entry lives at least as long as `&self`.
        if let Some(entry) = unsafe { seen.as_ref() }
            && entry.pid == pid
        {
            return Ok(&entry.value);
        }
        let fresh = Box::into_raw(Box::new(Entry {
            pid,
            value: init()?,
        }));
        match self
            .current
            .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // The replaced entry, if any, belongs to a parent process: it is leaked on purpose.
            // SAFETY: `fresh` is now owned by `current` and lives as long as `&self` (see above).
            Ok(_) => Ok(unsafe { &(*fresh).value }),
            Err(winner) => {
                // SAFETY: `fresh` was never published, so this is its only owner.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: `winner` is non-null (it differs from `seen` after a successful store
                // by another thread) and, like every published entry, outlives `&self`.
                Ok(unsafe { &(*winner).value })
            }
        }
    }

    /// Whether a value has been built (in this process or a parent).
    pub fn is_built(&self) -> bool {
        !self.current.load(Ordering::Acquire).is_null()
    }
}

impl<T> Default for PerProcess<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let current = *self.current.get_mut();
        if current.is_null() {
            return;
        }
        // SAFETY: a non-null pointer came from `Box::into_raw`, and `&mut self` means no other
        // reference to the entry exists.
        let entry = unsafe { Box::from_raw(current) };
        if entry.pid != crate::pid::current() {
            // Built by a parent process: its threads are gone, never drop it here.
            std::mem::forget(entry);
        }
    }
}

// SAFETY: `PerProcess<T>` hands out `&T` to any thread and moves a `T` between threads (built on
// one, dropped on another), exactly like `OnceLock<T>`, so it needs the same bounds.
unsafe impl<T: Send + Sync> Sync for PerProcess<T> {}
// SAFETY: as above; owning the entry is owning a `T`.
unsafe impl<T: Send> Send for PerProcess<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn builds_once_per_process() {
        let cell = PerProcess::new();
        assert!(!cell.is_built());
        let builds = AtomicUsize::new(0);
        let build = || -> Result<String, ()> {
            builds.fetch_add(1, Ordering::SeqCst);
            Ok("value".to_owned())
        };
        assert_eq!(cell.get_or_try_init(build).unwrap(), "value");
        assert_eq!(cell.get_or_try_init(build).unwrap(), "value");
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert!(cell.is_built());
    }

    #[test]
    fn an_error_builds_nothing() {
        let cell: PerProcess<u32> = PerProcess::new();
        assert_eq!(cell.get_or_try_init(|| Err("no")), Err("no"));
        assert!(!cell.is_built());
        assert_eq!(cell.get_or_try_init(|| Ok::<_, ()>(3)), Ok(&3));
    }

    #[test]
    fn an_entry_of_another_process_is_rebuilt_and_leaked() {
        let dropped = Arc::new(AtomicUsize::new(0));
        struct Probe(Arc<AtomicUsize>, u32);
        impl Drop for Probe {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let cell = PerProcess::new();
        // Pretend a parent process built the current entry.
        let parent = Box::into_raw(Box::new(Entry {
            pid: crate::pid::current().wrapping_add(1),
            value: Probe(dropped.clone(), 1),
        }));
        cell.current.store(parent, Ordering::Release);
        let value = cell
            .get_or_try_init(|| Ok::<_, ()>(Probe(dropped.clone(), 2)))
            .unwrap();
        assert_eq!(value.1, 2);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            0,
            "the parent's entry is leaked"
        );
        drop(cell);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "this process's entry is dropped"
        );
    }

    #[test]
    fn racing_threads_agree_on_one_value() {
        let cell = Arc::new(PerProcess::new());
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let cell = cell.clone();
                std::thread::spawn(move || *cell.get_or_try_init(|| Ok::<_, ()>(i)).unwrap())
            })
            .collect();
        let values: Vec<i32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(values.iter().all(|v| *v == values[0]), "{values:?}");
    }
}
