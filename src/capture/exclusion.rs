//! Calls left out of the trace, and counted: those `PMTRACE_EXCLUDE` names
//! (set once, at `MPI_Init`), and, between `MPI_Pcontrol(0)` and
//! `MPI_Pcontrol(1)`, every call that moves no message, creates no
//! operation and completes none. Only the hooks of such calls ask
//! (`leave_out`); the others are recorded all the same, so that messages
//! and clocks stay exact. The counts go into each rank's trailer.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// `PMTRACE_EXCLUDE`: per function id, whether its calls are left out,
/// and how many were.
static EXCLUDED: OnceLock<Box<[bool]>> = OnceLock::new();
static LEFT_OUT: OnceLock<Box<[AtomicU64]>> = OnceLock::new();

/// Whether any call may be left out now (some are excluded, or recording
/// is paused): the one load a call makes when none is.
static ANY: AtomicBool = AtomicBool::new(false);

/// Leaves the calls of `ids` out of the trace (set once, at `MPI_Init`).
pub fn exclude(ids: &[u32]) {
    let n = crate::mpi::FUNCTIONS.len();
    let mut set = vec![false; n];
    for &i in ids {
        set[i as usize] = true;
    }
    let _ = EXCLUDED.set(set.into_boxed_slice());
    let _ = LEFT_OUT.set((0..n).map(|_| Default::default()).collect());
    if !ids.is_empty() {
        ANY.store(true, Relaxed);
        crate::lane::close(crate::lane::LEAVE_OUT, true);
    }
}

/// `MPI_Pcontrol(0)` to `MPI_Pcontrol(1)`: calls that move no message,
/// create no operation and complete none are left out (and counted);
/// the others are still recorded, so that messages and clocks stay exact.
static PAUSED: AtomicBool = AtomicBool::new(false);
static PAUSED_OUT: OnceLock<Box<[AtomicU64]>> = OnceLock::new();

/// Pauses recording (`true`) or resumes it.
pub fn pause(on: bool) {
    PAUSED_OUT.get_or_init(|| {
        (0..crate::mpi::FUNCTIONS.len())
            .map(|_| Default::default())
            .collect()
    });
    PAUSED.store(on, Relaxed);
    let excluded = EXCLUDED.get().is_some_and(|set| set.contains(&true));
    ANY.store(on || excluded, Relaxed);
    crate::lane::close(crate::lane::LEAVE_OUT, on || excluded);
}

/// Calls left out while paused, by function name.
pub fn paused_out() -> BTreeMap<String, u64> {
    counts_by_name(PAUSED_OUT.get().map(|b| &b[..]))
}

fn counts_by_name(counts: Option<&[AtomicU64]>) -> BTreeMap<String, u64> {
    let Some(counts) = counts else {
        return Default::default();
    };
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(Relaxed)))
        .filter(|&(_, c)| c > 0)
        .map(|(i, c)| (crate::mpi::FUNCTIONS[i].0.to_string(), c))
        .collect()
}

/// Calls left out so far, by function name.
pub fn left_out() -> BTreeMap<String, u64> {
    counts_by_name(LEFT_OUT.get().map(|b| &b[..]))
}

/// Whether this call of function `func` is left out (counted if so).
/// Only the hooks whose calls move no message, create no operation and
/// complete none ask.
#[inline(always)]
pub fn leave_out(func: u32) -> bool {
    ANY.load(Relaxed) && leave_out_slow(func)
}

/// Whether any call may be left out now (see `ANY`).
#[inline(always)]
pub fn any() -> bool {
    ANY.load(Relaxed)
}

#[cold]
#[inline(never)]
fn leave_out_slow(func: u32) -> bool {
    if PAUSED.load(Relaxed) {
        if let Some(c) = PAUSED_OUT.get().and_then(|c| c.get(func as usize)) {
            c.fetch_add(1, Relaxed);
        }
        return true;
    }
    let Some(set) = EXCLUDED.get() else {
        return false;
    };
    if !set.get(func as usize).copied().unwrap_or(false) {
        return false;
    }
    if let Some(c) = LEFT_OUT.get().and_then(|c| c.get(func as usize)) {
        c.fetch_add(1, Relaxed);
    }
    true
}
