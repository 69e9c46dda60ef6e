//! Buffers attached for buffered sends (`MPI_Buffer_attach`, and MPI-4's
//! large-count, per-communicator and per-session forms).
//!
//! Every buffered message carries the piggyback header, which a buffer
//! sized exactly for the application's messages would not hold. So
//! pmtrace attaches a buffer of its own, larger by a header per message
//! the application's buffer could hold, and gives the application's
//! buffer back at the detach. Without piggybacking, and for sizes MPI
//! rejects itself or the automatic buffering of MPI-4.1 (size 0), the
//! call goes through unchanged.

use crate::ffi;
use crate::piggyback::{self, Mode};
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;

/// Whose buffer: the process's, a communicator's or a session's (by handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Process,
    #[allow(dead_code)] // MPI-4.1 libraries only
    Comm(u64),
    #[allow(dead_code)] // MPI-4.1 libraries only
    Session(u64),
}

struct Attached {
    scope: Scope,
    user: usize,
    size: i64,
    ours: Vec<u8>,
}

static ATTACHED: Mutex<Vec<Attached>> = Mutex::new(Vec::new());

/// An attach: `real(buffer, size)` is the library's function with the
/// other arguments bound.
pub fn attach(
    scope: Scope,
    buffer: *mut c_void,
    size: i64,
    real: impl FnOnce(*mut c_void, i64) -> c_int,
) -> c_int {
    if piggyback::mode() == Mode::None || size <= 0 {
        return real(buffer, size);
    }
    // Each message in the buffer takes at least MPI_BSEND_OVERHEAD bytes,
    // so this bounds how many the application can have in it at once.
    let messages = size as usize / ffi::MPI_BSEND_OVERHEAD as usize + 1;
    let extra = messages * (piggyback::header_len() + 8);
    // An `int` size stays an `int`; a large-count one may grow past it.
    let limit = if size <= i64::from(c_int::MAX) {
        c_int::MAX as usize
    } else {
        usize::MAX
    };
    let total = (size as usize).saturating_add(extra).min(limit);
    let mut ours = vec![0u8; total];
    let rc = real(ours.as_mut_ptr() as *mut c_void, total as i64);
    if rc == 0 {
        ATTACHED.lock().push(Attached {
            scope,
            user: buffer as usize,
            size,
            ours,
        });
    }
    rc
}

/// A detach: `real(buffer_addr, size)` is the library's function with the
/// other arguments bound; `size` points to an `MPI_Count` when `wide`,
/// else to an `int`.
pub fn detach(
    scope: Scope,
    buffer_addr: *mut c_void,
    size: *mut c_void,
    wide: bool,
    real: impl FnOnce(*mut c_void, *mut c_void) -> c_int,
) -> c_int {
    let mut attached = ATTACHED.lock();
    let at = attached.iter().position(|a| a.scope == scope);
    let Some(at) = at.filter(|_| !buffer_addr.is_null() && !size.is_null()) else {
        // Not a buffer pmtrace replaced (piggybacking off, attached before
        // tracing began), or arguments MPI rejects itself.
        drop(attached);
        return real(buffer_addr, size);
    };
    let mut ours: *mut c_void = core::ptr::null_mut();
    let mut our_size = [0u8; 8];
    // Detaching blocks until the buffer's messages are out: the lock is
    // held, as no other buffer of this scope can be attached meanwhile.
    let rc = real(
        &mut ours as *mut *mut c_void as *mut c_void,
        our_size.as_mut_ptr() as *mut c_void,
    );
    if rc == 0 {
        let a = attached.swap_remove(at);
        // SAFETY: the detach's outputs: where to put the buffer address (a
        // `void **` passed as `void *`) and its size, of the width `wide` says.
        unsafe {
            *(buffer_addr as *mut *mut c_void) = a.user as *mut c_void;
            if wide {
                *(size as *mut i64) = a.size;
            } else {
                *(size as *mut c_int) = a.size as c_int;
            }
        }
        drop(a.ours);
    }
    rc
}
