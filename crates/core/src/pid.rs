//! The current process's id, without a system call on every look-up.
//!
//! What the loader inherits through `fork` is told apart by the process id; the iterator checks
//! it on every `next()`, and `getpid` is a system call (costly on a virtual machine). So the id
//! is read once and kept; a handler that runs in every forked child (`pthread_atfork`) forgets
//! it, so the child's first look-up reads its own.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

/// The kept id; 0 when it must be read again (no process has id 0).
static PID: AtomicU32 = AtomicU32::new(0);
static HOOK: Once = Once::new();

extern "C" fn forget_in_child() {
    PID.store(0, Ordering::SeqCst);
}

/// This process's id (what `std::process::id` returns), read from the system once per process.
#[must_use]
pub fn current() -> u32 {
    let pid = PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    HOOK.call_once(|| {
        // SAFETY: registering a fork handler has no precondition; the handler only stores to an
        // atomic, which is async-signal-safe, as a handler that runs in a forked child must be.
        // If registration fails (out of memory) the id is read on every call instead.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) } == 0;
        if !registered {
            PID.store(0, Ordering::SeqCst);
        }
    });
    let pid = std::process::id();
    PID.store(pid, Ordering::Relaxed);
    pid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_process_id_and_a_forked_child_sees_its_own() {
        assert_eq!(current(), std::process::id());
        assert_eq!(current(), std::process::id());
        // SAFETY: the child only calls async-signal-safe code and `current` (an atomic load,
        // then `getpid`), writes to a pipe, and leaves with `_exit`.
        unsafe {
            let mut fds = [0i32; 2];
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let child = libc::fork();
            assert!(child >= 0);
            if child == 0 {
                let ok = u8::from(current() == libc::getpid() as u32 && current() != 0);
                libc::write(fds[1], (&raw const ok).cast(), 1);
                libc::_exit(0);
            }
            let mut ok = 0u8;
            assert_eq!(libc::read(fds[0], (&raw mut ok).cast(), 1), 1);
            libc::waitpid(child, std::ptr::null_mut(), 0);
            assert_eq!(ok, 1, "the child saw its parent's id");
        }
        assert_eq!(current(), std::process::id());
    }
}
