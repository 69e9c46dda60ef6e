//! The main thread's fast lane: one word that says, in one comparison
//! with the calling thread's pointer, that the call comes from the thread
//! that initialised MPI and that nothing unusual is on.
//!
//! The word is the main thread's pointer with a bit set for each reason
//! the lane is closed. A thread pointer is aligned (a thread control block
//! is at least 64-byte aligned), so its low bits are free, and a thread
//! pointer equals the word only when no bit is set. Each reason is set and
//! cleared by one atomic `or` or `and`, so that two threads changing two
//! reasons at once never lose one.
//!
//! A call admitted to the lane skips the tests these reasons stand for:
//! the timer is the bare TSC, no freed request waits to be tested, and no
//! call is excluded or paused. A reason set while a call is in the lane
//! holds from the next call on, as a flag read at the start of a call
//! would.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Tracing is not active (before `MPI_Init`, after `MPI_Finalize`, or
/// disabled).
pub const INACTIVE: usize = 1;
/// No main thread is known (its pointer could not be read, or another
/// thread initialised MPI).
pub const NO_MAIN: usize = 2;
/// The timer is not the bare TSC (before calibration, without an
/// invariant TSC, or simulated).
pub const TIMER: usize = 4;
/// Freed requests wait to be tested at the end of a traced call
/// (`orphans`).
pub const ORPHANS: usize = 8;
/// Some calls may be left out: excluded, or recording paused
/// (`exclusion`).
pub const LEAVE_OUT: usize = 16;
/// Recording stopped (`recorder::stop_recording`).
pub const STOPPED: usize = 32;
/// A guard's mark on a thread that holds it (`guard::Local`): the high
/// bits from 31 up, of which no user-space thread pointer has all, nor
/// therefore the word. The main thread's pointer with its mark never
/// equals the word, so one comparison tests lane and mark; and one
/// instruction stores the mark, as a 32-bit immediate.
pub const BUSY: usize = !(u32::MAX as usize >> 1);
/// The bits a thread pointer must leave free.
const REASONS: usize = 63;

static WORD: AtomicUsize = AtomicUsize::new(INACTIVE | NO_MAIN | TIMER);

/// Whether the thread of pointer `tp` is the main thread with the lane open.
#[inline(always)]
pub fn admits(tp: usize) -> bool {
    tp == WORD.load(Relaxed)
}

/// Sets reason `bit` (`closed`) or clears it.
pub fn close(bit: usize, closed: bool) {
    if closed {
        WORD.fetch_or(bit, Relaxed);
    } else {
        WORD.fetch_and(!bit, Relaxed);
    }
}

/// Opens the lane to the thread of pointer `tp` (all other reasons
/// permitting). False, and the lane stays closed to every thread, when
/// `tp` is unknown (0), not aligned, or has all the guard's busy bits
/// (`BUSY`), which no user-space pointer has.
pub fn open_to(tp: usize) -> bool {
    if tp == 0 || tp & REASONS != 0 || tp & BUSY == BUSY {
        return false;
    }
    let _ = WORD.fetch_update(Relaxed, Relaxed, |w| Some(tp | (w & REASONS & !NO_MAIN)));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_admits_its_thread_only_when_no_reason_is_set() {
        let tp = 0x7f00_1234_5640usize;
        assert!(!admits(tp));
        assert!(
            !open_to(0x7f00_1234_5641),
            "an unaligned pointer is refused"
        );
        assert!(!admits(0x7f00_1234_5641));
        assert!(open_to(tp));
        assert!(!admits(tp), "inactive, and the timer not yet the TSC");
        close(INACTIVE, false);
        close(TIMER, false);
        assert!(admits(tp));
        assert!(!admits(tp + 64), "another thread");
        close(ORPHANS, true);
        close(LEAVE_OUT, true);
        assert!(!admits(tp));
        close(ORPHANS, false);
        assert!(!admits(tp), "one reason left");
        close(LEAVE_OUT, false);
        assert!(admits(tp));
        close(INACTIVE, true);
        assert!(!admits(tp));
    }
}
