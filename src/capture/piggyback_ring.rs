//! The send ring: where a small nonblocking send's header and data wait
//! until the send completes. Each thread that sends has a ring of
//! `ENTRIES` areas of `ENTRY` bytes and a word with a bit for each area in
//! use. An `MPI_Isend` of a small dense message takes the lowest free
//! area (its owner sets the bit), and whichever thread completes the send
//! clears it: no slot to fill, no spare list, no lock. The request table
//! names the area by a tagged word in `Op::pb` (`is_ring`), where a slot
//! (`piggyback_slots`) is an aligned address.
//!
//! Rings are never freed: a thread that ends gives its ring to the pool,
//! for the next thread, with any areas still in flight still marked (their
//! sends clear them when they complete, whoever completes them).

use core::sync::atomic::{AtomicU64, Ordering};
use parking_lot::Mutex;

/// Areas in a ring: a bit each in `Ring::busy`.
pub const ENTRIES: usize = 64;
/// Bytes of an area: a header and the message's data.
pub const ENTRY: usize = 512;

/// Bytes before the first area (the busy word, padded to the alignment).
const HEAD: usize = 128;

#[repr(C, align(128))]
pub struct Ring {
    busy: AtomicU64,
    _pad: [u8; HEAD - 8],
    areas: [[u8; ENTRY]; ENTRIES],
}

// The tag bit and the area's number fit below the ring's alignment.
const _: () = assert!(core::mem::align_of::<Ring>() >= 2 * ENTRIES);
const _: () = assert!(core::mem::offset_of!(Ring, areas) == HEAD);

/// Rings of threads that ended, for new threads.
static POOL: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A thread's ring, made at its first small send.
pub struct Owned(*mut Ring);

impl Owned {
    pub const fn none() -> Owned {
        Owned(core::ptr::null_mut())
    }

    /// A free area of this thread's ring: its word for the request table,
    /// and its address; `None` when all are in flight.
    #[inline(always)]
    pub fn take(&mut self) -> Option<(usize, *mut u8)> {
        if self.0.is_null() {
            self.0 = ring();
        }
        // SAFETY: a ring of `ring()`, never freed.
        let r = unsafe { &*self.0 };
        // Acquire: the thread that cleared a bit has finished with its
        // area (its send completed) before this thread writes it.
        let free = !r.busy.load(Ordering::Acquire);
        if free == 0 {
            return None;
        }
        let i = free.trailing_zeros() as usize;
        // Only the owner sets bits; others only clear theirs, so the bit
        // is still free here.
        r.busy.fetch_or(1 << i, Ordering::Relaxed);
        let area = (self.0 as usize + HEAD + i * ENTRY) as *mut u8;
        Some((self.0 as usize | i << 1 | 1, area))
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if !self.0.is_null() {
            POOL.lock().push(self.0 as usize);
        }
    }
}

/// A ring from the pool, or a new one.
#[cold]
#[inline(never)]
fn ring() -> *mut Ring {
    if let Some(r) = POOL.lock().pop() {
        return r as *mut Ring;
    }
    let layout = std::alloc::Layout::new::<Ring>();
    // SAFETY: the layout is not zero-sized; a zeroed ring has every area
    // free. (Never freed: see the module docs.)
    let r = unsafe { std::alloc::alloc_zeroed(layout) } as *mut Ring;
    if r.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    r
}

/// Whether a request's piggyback word names a ring area (a slot's is an
/// aligned address, 0 for none).
#[inline(always)]
pub fn is_ring(pb: usize) -> bool {
    pb & 1 != 0
}

/// The send in the area `pb` names completed: the area is free again.
#[inline(always)]
pub fn release(pb: usize) {
    let ring = (pb & !(2 * ENTRIES - 1)) as *const Ring;
    let i = (pb >> 1) & (ENTRIES - 1);
    // SAFETY: `pb` came from `Owned::take`; rings are never freed.
    // Release: this send is done with the area before its owner reuses it.
    unsafe { (*ring).busy.fetch_and(!(1u64 << i), Ordering::Release) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_are_taken_lowest_first_and_come_back_when_released() {
        let mut own = Owned::none();
        let mut taken = Vec::new();
        for k in 0..ENTRIES {
            let (pb, area) = own.take().expect("a free area");
            assert!(is_ring(pb));
            assert_eq!((pb >> 1) & (ENTRIES - 1), k);
            assert_eq!(area as usize, (pb & !(2 * ENTRIES - 1)) + HEAD + k * ENTRY);
            taken.push(pb);
        }
        assert!(own.take().is_none(), "all {ENTRIES} in flight");
        release(taken[5]);
        release(taken[2]);
        assert_eq!(own.take().map(|t| t.0), Some(taken[2]));
        assert_eq!(own.take().map(|t| t.0), Some(taken[5]));
        assert!(own.take().is_none());
        for pb in taken {
            release(pb);
        }
    }

    #[test]
    fn another_thread_may_free_an_area() {
        let mut own = Owned::none();
        let (pb, _) = own.take().unwrap();
        std::thread::spawn(move || release(pb)).join().unwrap();
        assert_eq!(own.take().map(|t| t.0), Some(pb));
        release(pb);
    }
}
