//! Heap accounting for the memory bounds: [`CountingAlloc`], a global allocator that counts
//! the calling thread's live heap bytes and their peak, and the marks the runners read.
//! A binary opts in with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`
//! (the fuzz targets and `tests/fuzz_regressions.rs` do); without it the memory checks are
//! skipped.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn account(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

/// A global allocator that counts this thread's live heap bytes, for the memory bounds.
/// Install it with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`; without
/// it the memory checks are skipped.
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the same arguments; the bookkeeping only
// touches const-initialised thread-local `Cell`s, which neither allocate nor panic.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// This thread's live heap bytes and resets the peak to it; `None` without
/// [`CountingAlloc`].
pub fn memory_mark() -> Option<isize> {
    let before = LIVE.with(Cell::get);
    let probe = std::hint::black_box(vec![0u8; 64]);
    let tracking = LIVE.with(Cell::get) != before;
    drop(probe);
    if !tracking {
        return None;
    }
    let live = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live));
    Some(live)
}

pub fn memory_peak() -> isize {
    PEAK.with(Cell::get)
}

pub fn memory_live() -> isize {
    LIVE.with(Cell::get)
}
