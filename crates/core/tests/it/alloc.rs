//! A global allocator that counts the bytes each thread allocates, so a test can tell what a
//! call allocated on its own thread while other tests run on theirs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

pub struct Counting;

fn count(bytes: usize) {
    // `try_with`: allocations while the thread's locals are torn down are not counted.
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + bytes as u64));
}

// SAFETY: every call is forwarded unchanged to `System`, under the caller's contract; counting
// touches only a const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `GlobalAlloc::alloc`, which our caller upholds.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `GlobalAlloc::alloc_zeroed`, which our caller upholds.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as for `GlobalAlloc::realloc`, which our caller upholds.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `GlobalAlloc::dealloc`, which our caller upholds.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// `f`'s result and the bytes allocated on this thread while it ran.
pub fn allocated_by<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATED.with(Cell::get);
    let out = f();
    (out, ALLOCATED.with(Cell::get) - before)
}
