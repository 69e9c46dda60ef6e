//! Running out of memory ends `pmtrace` with one line and exit status 1,
//! like any other error, not with the runtime's abort: every allocation
//! goes through [`Guarded`], which on failure writes the line without
//! allocating and exits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

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
/// exits with status 1. Only the first thread to fail does: threads that
/// decode rank files in parallel can fail together, and the line is one.
#[cold]
fn out_of_memory(size: usize) -> ! {
    static FIRST: AtomicBool = AtomicBool::new(true);
    if !FIRST.swap(false, Ordering::AcqRel) {
        loop {
            std::thread::park();
        }
    }
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

/// What a verb holds: bytes per event, and bytes per record byte beyond 4
/// an event (point-to-point, completion and collective records, which are
/// longer on disk and bring matching, clock and flow state with them).
/// Resident peaks of the unsynced trace (the exports sync in memory),
/// solved from two traces and rounded up by a tenth: syncbench (4.3
/// record bytes a call) and halo2d (12 bytes a call, a message per 5
/// calls); see docs/notes.md, "Messages by position".
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    pub per_event: u64,
    pub per_payload_byte: u64,
}

pub mod cost {
    use super::Cost;
    pub const REPORT: Cost = Cost {
        per_event: 20,
        per_payload_byte: 23,
    };
    pub const SYNC: Cost = Cost {
        per_event: 41,
        per_payload_byte: 20,
    };
    pub const MERGE: Cost = Cost {
        per_event: 40,
        per_payload_byte: 22,
    };
    pub const EXPORT: Cost = Cost {
        per_event: 55,
        per_payload_byte: 35,
    };
    /// The whole trace drawn (a window holds less).
    pub const TIMELINE: Cost = Cost {
        per_event: 47,
        per_payload_byte: 25,
    };
}

impl Cost {
    /// Bytes a trace of `events` events in `record_bytes` bytes of records needs.
    pub fn of(&self, events: u64, record_bytes: u64) -> u64 {
        let payload = record_bytes.saturating_sub(events.saturating_mul(4));
        events
            .saturating_mul(self.per_event)
            .saturating_add(payload.saturating_mul(self.per_payload_byte))
    }
}

/// Refuses, in one line and before reading, a trace whose `verb` would
/// need more memory than the process can get (available memory and swap,
/// and the address-space limit). `PMTRACE_MEMORY_CHECK=off` skips this.
/// A trace whose census cannot be taken is left to the verb, whose own
/// reading reports what is wrong with it.
pub fn check(dir: &std::path::Path, verb: &str, cost: Cost) -> anyhow::Result<()> {
    if std::env::var("PMTRACE_MEMORY_CHECK").is_ok_and(|v| v == "off") {
        return Ok(());
    }
    let Ok(census) = pmtrace_analysis::census(dir) else {
        return Ok(());
    };
    let Some(available) = available() else {
        return Ok(());
    };
    // The costs are resident peaks; growing vectors, threads and the
    // allocator's slack take more address space on the way: a third more.
    let need = cost.of(census.events, census.record_bytes) / 3 * 4 + (64 << 20);
    if need <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    anyhow::bail!(
        "this trace holds {}{:.1} M events over {} ranks; `pmtrace {verb}` needs about {:.1} GiB \
         for it, and this process can have {:.1} GiB (PMTRACE_MEMORY_CHECK=off tries anyway)",
        if census.guessed { "about " } else { "" },
        census.events as f64 / 1e6,
        census.ranks,
        gib(need),
        gib(available)
    )
}

/// The memory this process can still get: available memory plus free swap,
/// and what its address-space limit leaves; None if neither is known.
fn available() -> Option<u64> {
    let kib = |text: &str, key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let ram = meminfo
        .as_deref()
        .and_then(|m| Some(kib(m, "MemAvailable:")? + kib(m, "SwapFree:").unwrap_or(0)));
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            let line = l.lines().find(|l| l.starts_with("Max address space"))?;
            let soft = line["Max address space".len()..]
                .split_whitespace()
                .next()?;
            soft.parse::<u64>().ok()
        });
    let used = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| kib(&s, "VmSize:"))
        .unwrap_or(0);
    let room = limit.map(|l| l.saturating_sub(used));
    match (ram, room) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
