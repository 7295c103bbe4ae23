//! The allocator of `tranche`: the system's malloc for short commands, mimalloc for
//! long-running work (the commands that run the scheduler: `dev`, `sim`, `scenario`,
//! `bench`). `tranched` uses mimalloc for everything.
//!
//! A full scheduling pass over a large cluster makes tens of thousands of allocations
//! and megabytes of plan (a reason for each of 100,000 waiting jobs is 7 MB). On the
//! scheduler benchmark a pass took 48–50 ms with mimalloc against 56–59 ms with glibc's
//! malloc; most of the gain went with mimalloc's huge pages (50–57 ms without them).
//! But a `tranche` built with mimalloc for everything started 0.5 ms slower and its
//! loop of `tranche submit` ran 76 submits/s against 93, so a short command never
//! switches to it. (Linking mimalloc alone still costs a start about 0.2 ms: its set-up
//! runs when the program loads.)
//!
//! [`Alloc`] serves every allocation from the system's malloc until [`use_mimalloc`] is
//! called, and from mimalloc after. A block is always freed or resized by the
//! allocator that made it: mimalloc knows the memory it manages
//! (`mi_is_in_heap_region`), and the two never share an address.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

static MIMALLOC: AtomicBool = AtomicBool::new(false);

/// The binaries' global allocator (see the module docs).
pub struct Alloc;

/// From now on, new blocks come from mimalloc. Call it early, in `main`.
pub fn use_mimalloc() {
    // mimalloc's own tables are set up by its first allocation, before any block of
    // the system's malloc is asked about.
    // SAFETY: a plain allocation and free of one byte.
    unsafe {
        let p = MiMalloc.alloc(Layout::new::<u8>());
        if !p.is_null() {
            MiMalloc.dealloc(p, Layout::new::<u8>());
        }
    }
    MIMALLOC.store(true, Ordering::SeqCst);
}

/// Whether `p` was allocated by mimalloc.
fn is_mimalloc(p: *mut u8) -> bool {
    // Before the switch mimalloc has made no block (and may not be set up).
    // SAFETY: mi_is_in_heap_region only looks `p` up in mimalloc's page map.
    MIMALLOC.load(Ordering::Relaxed)
        && unsafe { libmimalloc_sys::mi_is_in_heap_region(p as *const _) }
}

// SAFETY: every block is made by one of two sound allocators and always freed or
// resized by the one that made it.
unsafe impl GlobalAlloc for Alloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Relaxed) {
            unsafe { MiMalloc.alloc(l) }
        } else {
            unsafe { System.alloc(l) }
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Relaxed) {
            unsafe { MiMalloc.alloc_zeroed(l) }
        } else {
            unsafe { System.alloc_zeroed(l) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if is_mimalloc(p) {
            unsafe { MiMalloc.dealloc(p, l) }
        } else {
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if is_mimalloc(p) {
            unsafe { MiMalloc.realloc(p, l, new_size) }
        } else {
            unsafe { System.realloc(p, l, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_made_before_the_switch_are_freed_by_the_system_allocator() {
        let l = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: allocations and frees of blocks made here, each with its layout.
        unsafe {
            let before = Alloc.alloc(l);
            assert!(!before.is_null());
            before.write_bytes(7, 4096);
            use_mimalloc();
            assert!(!is_mimalloc(before), "a system block taken for mimalloc's");
            let after = Alloc.alloc(l);
            assert!(
                is_mimalloc(after),
                "a block made after the switch is mimalloc's"
            );
            // Resizing keeps each block with its allocator and its bytes.
            let before = Alloc.realloc(before, l, 8192);
            assert!(!is_mimalloc(before));
            assert_eq!(*before.add(4095), 7);
            let l2 = Layout::from_size_align(8192, 8).unwrap();
            Alloc.dealloc(before, l2);
            Alloc.dealloc(after, l);
        }
    }
}
