//! The MPI library's own functions, found by name when first called.
//!
//! Wrappers reach the real `PMPI_` functions through here (the generated
//! `real` and `pass` modules), not through link-time references: the
//! library then loads under any release of its MPI family, whichever
//! functions that release lacks (a program can only call what its MPI
//! has), and is linkable into programs of an older release. The next
//! definition after pmtrace's own comes first (`RTLD_NEXT`: the MPI
//! library, or another tool that interposes `PMPI_` functions); failing
//! that, the process's first.

use core::ffi::CStr;
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The address of `name`, cached in `at`.
#[inline(always)]
pub fn function(at: &AtomicUsize, name: &CStr) -> usize {
    match at.load(Relaxed) {
        0 => resolve(at, name),
        f => f,
    }
}

#[cold]
#[inline(never)]
fn resolve(at: &AtomicUsize, name: &CStr) -> usize {
    // SAFETY: a NUL-terminated name, looked up in the process's scope.
    let mut f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        // SAFETY: as above.
        f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    }
    if f.is_null() {
        // The program called a function its MPI library does not have,
        // which it could not have linked against: nothing to pass it to.
        eprintln!("pmtrace: the MPI library has no {}", name.to_string_lossy());
        std::process::abort();
    }
    at.store(f as usize, Relaxed);
    f as usize
}
