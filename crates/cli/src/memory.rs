//! Running out of memory ends `pmtrace` with one line and exit status 1,
//! like any other error, not with the runtime's abort: every allocation
//! goes through [`Guarded`], which on failure writes the line without
//! allocating and exits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// The system allocator, with the one-line exit on failure.
pub struct Guarded;

// SAFETY: every call is passed to the system allocator unchanged; only a
// null result is acted on, and then the process ends.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Writes the error line from a stack buffer (the heap is what failed) and
/// exits with status 1.
#[cold]
fn out_of_memory(size: usize) -> ! {
    let mut line = [0u8; 256];
    let mut w = &mut line[..];
    let _ = writeln!(
        w,
        "pmtrace: error: out of memory: {} MiB more could not be had; this trace needs \
         more memory than this machine (or its limit) gives",
        size.div_ceil(1 << 20)
    );
    let left = w.len();
    let n = line.len() - left;
    let _ = std::io::stderr().write_all(&line[..n]);
    std::process::exit(1);
}
