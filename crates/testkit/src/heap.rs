//! A global allocator that counts the heap a test binary holds, for memory tests that must be
//! deterministic (allocation counts, not RSS). A test binary installs it with
//! `#[global_allocator] static ALLOCATOR: strait_testkit::heap::Counting = strait_testkit::heap::Counting;`
//! and reads [`live_bytes`] / [`live_blocks`] before and after what it measures; it should be
//! its own test binary, so that no other test allocates meanwhile.
// A global allocator cannot be written without unsafe code; this one only adds counters around
// `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// `System`, counting the bytes and blocks currently allocated.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_BLOCKS: AtomicIsize = AtomicIsize::new(0);
static PEAK_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIMIT_BYTES: AtomicIsize = AtomicIsize::new(isize::MAX);

/// The most bytes held at once since the last [`reset_peak`].
pub fn peak_bytes() -> isize {
    PEAK_BYTES.load(Ordering::Relaxed)
}

/// Starts a new peak at what is held now.
pub fn reset_peak() {
    PEAK_BYTES.store(live_bytes(), Ordering::Relaxed);
}

/// Refuses allocations that would make the live heap exceed `bytes` (the process then aborts
/// with "memory allocation of N bytes failed"): a memory test that fails this way cannot take
/// the machine down with it. `isize::MAX` lifts the limit.
pub fn set_limit(bytes: isize) {
    LIMIT_BYTES.store(bytes, Ordering::Relaxed);
}

/// Whether `more` bytes fit under the limit.
fn fits(more: isize) -> bool {
    more <= 0 || live_bytes().saturating_add(more) <= LIMIT_BYTES.load(Ordering::Relaxed)
}

fn grew(by: isize) {
    let now = LIVE_BYTES.fetch_add(by, Ordering::Relaxed) + by;
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
}

/// Bytes allocated and not yet freed (0 unless [`Counting`] is the global allocator).
pub fn live_bytes() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// Allocations not yet freed (0 unless [`Counting`] is the global allocator).
pub fn live_blocks() -> isize {
    LIVE_BLOCKS.load(Ordering::Relaxed)
}

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed on to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !fits(signed(layout.size())) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(signed(layout.size()));
            LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !fits(signed(layout.size())) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(signed(layout.size()));
            LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(signed(layout.size()), Ordering::Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !fits(signed(new_size) - signed(layout.size())) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            grew(signed(new_size) - signed(layout.size()));
        }
        p
    }
}
