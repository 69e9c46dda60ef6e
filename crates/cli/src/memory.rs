//! Running out of memory ends `pmtrace` with one line and exit status 1,
//! like any other error, not with the runtime's abort: every allocation
//! goes through [`Guarded`], which on failure writes the line without
//! allocating and exits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::spill;

/// The system allocator, with the one-line exit on failure, and large
/// blocks on disk once a verb works out of core (see [`crate::spill`]).
pub struct Guarded;

// SAFETY: blocks come either from the system allocator, passed the
// caller's layout unchanged, or from `spill` (page-aligned, for alignments
// up to a page); `spill::owns` tells which, so each block goes back where
// it came from. A null result ends the process.
unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if spill::wants(layout.size(), layout.align()) {
            let p = spill::alloc(layout.size());
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: the caller's layout, passed on.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if spill::wants(layout.size(), layout.align()) {
            // New file pages read as zeros.
            let p = spill::alloc(layout.size());
            if !p.is_null() {
                return p;
            }
        }
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let spilled = spill::owns(ptr, layout.size());
        // SAFETY: `ptr` is the caller's spilled block of `layout.size()`.
        if spilled && unsafe { spill::shrink(ptr, layout.size(), new_size) } {
            return ptr;
        }
        if spilled || spill::wants(new_size, layout.align()) {
            let mut q = if spill::wants(new_size, layout.align()) {
                spill::alloc(new_size)
            } else {
                core::ptr::null_mut()
            };
            if q.is_null() {
                // SAFETY: a valid layout: the caller's alignment, and a
                // size the caller's realloc contract allows.
                let to = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                // SAFETY: as above.
                q = unsafe { System.alloc(to) };
                if q.is_null() {
                    out_of_memory(new_size);
                }
            }
            // SAFETY: both blocks hold at least the bytes copied, and are
            // distinct allocations; the old one is then freed where it
            // came from.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            return q;
        }
        // SAFETY: a heap block, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if spill::owns(ptr, layout.size()) {
            // SAFETY: a live spilled block of this size.
            unsafe { spill::free(ptr, layout.size()) };
            return;
        }
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

/// A limit set with `--memory`, in bytes (0: none).
static BUDGET: AtomicU64 = AtomicU64::new(0);

/// Holds every verb to `bytes` of memory (`--memory`), below what the
/// machine would give.
pub fn set_budget(bytes: Option<u64>) {
    BUDGET.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// Before a verb reads its trace: estimates what it needs from the trace's
/// census, and when that is more than the process can have (available
/// memory and swap, its cgroup's limit, `--memory`) takes the out-of-core
/// path ([`crate::spill`], into `PMTRACE_SPILL_DIR` or else the trace
/// directory) with a one-line note. When it cannot (the address-space
/// limit, which mapped files count against, is too low; the directory is
/// in memory, full or read-only; `PMTRACE_SPILL=off`), refuses in one
/// line that says what it needs. `PMTRACE_MEMORY_CHECK=off` skips all this.
/// A trace whose census cannot be taken is left to the verb, whose own
/// reading reports what is wrong with it.
pub fn check(dir: &std::path::Path, verb: &str, cost: Cost) -> anyhow::Result<()> {
    if std::env::var("PMTRACE_MEMORY_CHECK").is_ok_and(|v| v == "off") {
        return Ok(());
    }
    let Ok(census) = pmtrace_trace::census(dir) else {
        return Ok(());
    };
    let room = Room::now();
    let Some(available) = room.available() else {
        return Ok(());
    };
    // The costs are resident peaks; growing vectors, threads and the
    // allocator's slack take more address space on the way: a third more.
    let need = cost.of(census.events, census.record_bytes) / 3 * 4 + (64 << 20);
    if need <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let refuse = |why: String| {
        anyhow::anyhow!(
            "this trace holds {}{:.1} M events over {} ranks; `pmtrace {verb}` needs about {:.1} \
             GiB for it, and this process can have {:.1} GiB; {why} (PMTRACE_MEMORY_CHECK=off \
             tries anyway)",
            if census.guessed { "about " } else { "" },
            census.events as f64 / 1e6,
            census.ranks,
            gib(need),
            gib(available)
        )
    };
    if std::env::var("PMTRACE_SPILL").is_ok_and(|v| v == "off") {
        return Err(refuse("PMTRACE_SPILL=off keeps it in memory".into()));
    }
    if let Some(address) = room.address.filter(|&a| a < need) {
        return Err(refuse(format!(
            "its address-space limit (ulimit -v) leaves {:.1} GiB, and out of core the files \
             it works in count against that limit too",
            gib(address)
        )));
    }
    let spill_dir = std::env::var_os("PMTRACE_SPILL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.to_path_buf());
    if let Some(why) = spill::unfit(&spill_dir, need) {
        return Err(refuse(format!("it cannot work out of core: {why}")));
    }
    spill::enable();
    eprintln!(
        "pmtrace: note: `pmtrace {verb}` needs about {:.1} GiB for this trace and this process \
         can have {:.1} GiB: working out of core, its large tables in files in {} (slower)",
        gib(need),
        gib(available),
        spill_dir.display()
    );
    Ok(())
}

/// What memory the process can still get, each limit where it is known.
#[derive(Debug, Default)]
struct Room {
    /// Available memory plus free swap.
    ram: Option<u64>,
    /// What the process's memory cgroup (v1 or v2) leaves.
    cgroup: Option<u64>,
    /// What the address-space limit leaves.
    address: Option<u64>,
    /// `--memory`.
    budget: Option<u64>,
}

impl Room {
    fn now() -> Room {
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
        let budget = BUDGET.load(Ordering::Relaxed);
        Room {
            ram,
            cgroup: cgroup_room(),
            address: limit.map(|l| l.saturating_sub(used)),
            budget: (budget > 0).then_some(budget),
        }
    }

    /// The least of the limits; None if none is known.
    fn available(&self) -> Option<u64> {
        [self.ram, self.cgroup, self.address, self.budget]
            .into_iter()
            .flatten()
            .min()
    }
}

/// The value of `key` (in kB) in a /proc file, in bytes.
fn kib(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// What the memory cgroup of this process leaves: its limit less what it
/// uses, not counting file pages it can drop (inactive ones). Batch systems
/// hold jobs to a cgroup's limit, not to the machine's memory. None where
/// there is no limit.
fn cgroup_room() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let number = |path: String| -> Option<u64> {
        std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()
    };
    let stat = |path: String, key: &str| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.split(' ').next() == Some(key))?;
                line.split(' ').nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0)
    };
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (limit, used, inactive) = if controllers.split(',').any(|c| c == "memory") {
            let d = format!("/sys/fs/cgroup/memory{path}");
            (
                number(format!("{d}/memory.limit_in_bytes")),
                number(format!("{d}/memory.usage_in_bytes")),
                stat(format!("{d}/memory.stat"), "total_inactive_file"),
            )
        } else if controllers.is_empty() {
            let d = format!("/sys/fs/cgroup{path}");
            (
                number(format!("{d}/memory.max")),
                number(format!("{d}/memory.current")),
                stat(format!("{d}/memory.stat"), "inactive_file"),
            )
        } else {
            continue;
        };
        // v1 says "no limit" with a huge number, v2 with "max" (no number).
        if let (Some(limit), Some(used)) = (limit.filter(|&l| l < 1 << 60), used) {
            return Some(limit.saturating_sub(used.saturating_sub(inactive)));
        }
    }
    None
}
