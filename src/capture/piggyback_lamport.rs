//! The clocks a message carries, and the rules that move them: which mode
//! runs (`PMTRACE_CLOCKS`), the process's Lamport clock, the vector clock
//! in vector mode, and LLCP's set of pending wildcard receives.
//!
//! **Clocks (LLCP, `003_…` §5.1).** Sends attach the clock and do not tick.
//! A nonblocking wildcard receive is *pending* from its post until it
//! completes, or until a receive that must match after it (same
//! communicator, a tag it accepts, posted later: MPI's non-overtaking rule)
//! completes first. Completing a receive ticks once for each pending receive
//! it completes, once more for itself when it is a wildcard receive still
//! pending (or blocking), then merges: `LC = max(LC, m.LC + 1)` (the `+ 1`
//! makes every receive strictly later than its send). Vector mode keeps a
//! Mattern vector clock besides: own entry ticks at every send and every
//! receive, receives merge entrywise. Collectives are not merged here: the
//! CLI reconstructs them exactly from the trace (docs/notes.md has the
//! argument and the costs).

use crate::ffi;
use crate::recorder::Got;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

pub use crate::config::Mode;

static MODE: AtomicU8 = AtomicU8::new(0);
static ME: AtomicUsize = AtomicUsize::new(0);
static LC: AtomicU64 = AtomicU64::new(0);
/// At most one thread calls MPI at a time (below MPI_THREAD_MULTIPLE): the
/// clock merge needs no atomic read-modify-write.
static SERIAL: AtomicBool = AtomicBool::new(true);
static VC: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Nonblocking wildcard receives not yet matched (LLCP's Pending set).
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static PENDING_N: AtomicUsize = AtomicUsize::new(0);
/// Post order of nonblocking receives.
static POSTS: AtomicU64 = AtomicU64::new(1);

struct Pending {
    slot: usize,
    comm: u64,
    tag: i32,
    post: u64,
}

/// Switches the clocks on; every rank does the same (agreed at init).
pub fn enable(mode: Mode, rank: usize, size: usize, serial: bool) {
    SERIAL.store(serial, Relaxed);
    if mode == Mode::Vector {
        *VC.lock() = vec![0; size];
    }
    ME.store(rank, Relaxed);
    MODE.store(mode as u8, Relaxed);
}

#[inline(always)]
pub fn mode() -> Mode {
    match MODE.load(Relaxed) {
        0 => Mode::None,
        1 => Mode::Lamport,
        _ => Mode::Vector,
    }
}

/// Whether messages carry a header at all.
#[inline(always)]
pub fn on() -> bool {
    MODE.load(Relaxed) != 0
}

/// The clock a message sent now carries (sends do not tick it).
#[inline(always)]
pub fn clock() -> u64 {
    LC.load(Relaxed)
}

/// Vector mode: ticks this process's entry for a send and copies the
/// vector to `dst`.
///
/// # Safety
/// `dst` is writable for the whole vector (8 bytes per world rank).
#[inline(always)]
pub unsafe fn stamp_vector(dst: *mut u8) {
    let mut vc = VC.lock();
    vc[ME.load(Relaxed)] += 1;
    // SAFETY: per the contract.
    unsafe { core::ptr::copy_nonoverlapping(vc.as_ptr() as *const u8, dst, vc.len() * 8) };
}

/// The post number of a nonblocking receive posted (or started) now.
#[inline(always)]
pub fn next_post() -> u64 {
    POSTS.fetch_add(1, Relaxed)
}

/// A nonblocking wildcard receive was posted: it is pending until it
/// completes or a receive that must match after it completes first.
pub fn join_pending(slot: usize, comm: u64, tag: i32, post: u64) {
    let mut p = PENDING.lock();
    p.push(Pending {
        slot,
        comm,
        tag,
        post,
    });
    PENDING_N.store(p.len(), Relaxed);
}

/// A receive left the pending set without completing (cancelled, failed,
/// freed, or released).
pub fn forget_pending(slot: usize) {
    if PENDING_N.load(Relaxed) == 0 {
        return;
    }
    let mut p = PENDING.lock();
    p.retain(|e| e.slot != slot);
    PENDING_N.store(p.len(), Relaxed);
}

/// LLCP rule R4 with the merge of the module docs, for a receive on
/// communicator `comm` (its key) of a message with tag `tag`; `own` is the
/// slot, post number and posted tag of a nonblocking receive (None for
/// blocking ones).
#[inline(always)]
pub fn receive_clock(
    wildcard: bool,
    comm: u64,
    tag: i32,
    own: Option<(usize, u64, i32)>,
    got: &Got,
) {
    receive_lamport(wildcard, comm, tag, own, got.lc);
    if mode() == Mode::Vector {
        merge_vector(got);
    }
}

/// `receive_clock`'s Lamport part, for a message that carried clock `lc`
/// (all of it, outside vector mode).
#[inline(always)]
pub fn receive_lamport(
    wildcard: bool,
    comm: u64,
    tag: i32,
    own: Option<(usize, u64, i32)>,
    lc: u64,
) {
    let (ticks, was_pending) = if PENDING_N.load(Relaxed) > 0 {
        pending_ticks(comm, tag, own)
    } else {
        (0, false)
    };
    let own_tick = u64::from(wildcard && (own.is_none() || was_pending));
    let add = ticks + own_tick;
    let floor = lc.saturating_add(1);
    if SERIAL.load(Relaxed) {
        LC.store((LC.load(Relaxed) + add).max(floor), Relaxed);
    } else {
        let _ = LC.fetch_update(Relaxed, Relaxed, |c| Some((c + add).max(floor)));
    }
}

/// The pending wildcard receives a receive completes by non-overtaking
/// (ticks), and whether it was itself pending; both leave the set.
#[inline(never)]
fn pending_ticks(comm: u64, tag: i32, own: Option<(usize, u64, i32)>) -> (u64, bool) {
    let any_tag = ffi::consts().any_tag;
    let post = own.map_or(u64::MAX, |o| o.1);
    let mut was_pending = false;
    let mut p = PENDING.lock();
    if let Some((slot, _, _)) = own {
        if let Some(i) = p.iter().position(|e| e.slot == slot) {
            p.swap_remove(i);
            was_pending = true;
        }
    }
    let before = p.len();
    p.retain(|e| !(e.comm == comm && (e.tag == any_tag || e.tag == tag) && e.post < post));
    let ticks = (before - p.len()) as u64;
    PENDING_N.store(p.len(), Relaxed);
    (ticks, was_pending)
}

#[inline(never)]
fn merge_vector(got: &Got) {
    let mut vc = VC.lock();
    for (mine, &theirs) in vc.iter_mut().zip(&got.vc) {
        *mine = (*mine).max(theirs);
    }
    vc[ME.load(Relaxed)] += 1;
}
