//! The piggyback header: what every point-to-point message carries before
//! the user's data, and how it is written and read.
//!
//! **Layout.** Every message carries, before the user's data, a header of
//! 32 bytes (the job's magic value, the sender's Lamport clock, the message
//! id, the sender's timer value at the send), followed in vector mode by
//! the sender's vector clock (one u64 per world rank). Header first, so
//! that a receive posted larger than the message still works. Messages of
//! more than `large_headers::limit()` bytes go untouched, their header
//! apart (`crate::large_headers`).
//!
//! ```text
//!  0        8        16       24       32             32 + 8·world size
//!  +--------+--------+--------+--------+- - - - - - - -+-----------------
//!  | magic  | clock  | msg id | t send | vector clock  | user data ...
//!  +--------+--------+--------+--------+- - - - - - - -+-----------------
//!   u64 each, in the host's byte order; the vector in vector mode only
//! ```

use crate::large_headers;
use crate::piggyback_lamport::{self as lamport, Mode};
use crate::thread::Thread;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

pub use crate::recorder::Got;

/// Header bytes before the vector clock.
pub const BASE: usize = 32;

static HDR: AtomicUsize = AtomicUsize::new(BASE);

/// Vector mode: headers carry a vector clock of `size` entries.
pub fn carry_vector(size: usize) {
    HDR.store(BASE + 8 * size, Relaxed);
}

/// Most bytes a recorded piggyback takes (three varints, and the vector).
#[inline(always)]
pub fn record_room() -> usize {
    if lamport::on() {
        30 + 10 * ((header_len() - BASE) / 8)
    } else {
        0
    }
}

/// Bytes of a header: the base, and the vector in vector mode.
#[inline(always)]
pub fn header_len() -> usize {
    HDR.load(Relaxed)
}

/// Fills a header at `dst` for the next message of this thread.
#[inline(always)]
pub fn write_header(dst: *mut u8, thread: &mut Thread, t0: u64) {
    let id = thread.next_msg_id();
    let lc = lamport::clock();
    // SAFETY: `dst` has room for a whole header (callers size it so).
    unsafe {
        core::ptr::write_unaligned(dst as *mut u64, large_headers::magic());
        core::ptr::write_unaligned(dst.add(8) as *mut u64, lc);
        core::ptr::write_unaligned(dst.add(16) as *mut u64, id);
        core::ptr::write_unaligned(dst.add(24) as *mut u64, t0);
    }
    if lamport::mode() == Mode::Vector {
        // SAFETY: as above; the header holds the whole vector.
        unsafe { lamport::stamp_vector(dst.add(BASE)) };
    }
}

/// What a received header says.
#[inline(always)]
pub fn read_header(src: *const u8) -> Got {
    // SAFETY: `src` holds a received header of `header_len()` bytes.
    let mut g = unsafe {
        Got {
            lc: core::ptr::read_unaligned(src.add(8) as *const u64),
            id: core::ptr::read_unaligned(src.add(16) as *const u64),
            sent: core::ptr::read_unaligned(src.add(24) as *const u64),
            vc: Vec::new(),
        }
    };
    if lamport::mode() == Mode::Vector {
        g.vc = read_vector(src);
    }
    g
}

/// The vector clock of a received header (vector mode).
#[inline(never)]
fn read_vector(src: *const u8) -> Vec<u64> {
    let n = (header_len() - BASE) / 8;
    // SAFETY: the header holds `n` clock entries after its base.
    (0..n)
        .map(|k| unsafe { core::ptr::read_unaligned(src.add(BASE + 8 * k) as *const u64) })
        .collect()
}
