//! What the fuzz targets share: a global allocator that turns any single
//! allocation larger than the input justifies into a crash, scratch
//! directories in memory, the golden traces, and the layout that turns a
//! compact input into rank files whose pages and checksums are right (so
//! that the fuzzer spends its time past the checks, in the decoding).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The largest single allocation the current input justifies (bytes).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The system allocator, aborting on an allocation above [`LIMIT`]: AFL
/// counts the abort as a crash, and the input is kept.
pub struct Bounded;

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's layout, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        check(new);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

fn check(size: usize) {
    if size > LIMIT.load(Relaxed) {
        let msg = b"pmtrace-fuzz: an allocation larger than the input justifies\n";
        // SAFETY: a write of a static buffer to stderr; no allocation.
        unsafe { libc_write(2, msg.as_ptr(), msg.len()) };
        std::process::abort();
    }
}

extern "C" {
    #[link_name = "write"]
    fn libc_write(fd: i32, buf: *const u8, len: usize) -> isize;
}

/// Allocations up to 16 MiB, and `per_byte` bytes for each byte of data
/// the input stands for, are justified: a record of a few bytes becomes
/// a few tens of bytes of tables; a length field that claims gigabytes is
/// not.
pub fn justify(bytes: usize, per_byte: usize) {
    LIMIT.store((16 << 20) + bytes.saturating_mul(per_byte), Relaxed);
}

/// A directory of this process in memory (/dev/shm), empty.
///
/// A process killed mid-input (a crash, a hang) or one whose directory
/// lives as long as it does (`sync`'s traces) leaves its own behind: each
/// process first removes those of processes that are gone, so that
/// replaying a corpus, one process per input, does not fill the memory.
pub fn scratch(name: &str) -> PathBuf {
    let prefix = format!("pmtrace-fuzz-{name}-");
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = e.file_name();
        let pid = file.to_str().and_then(|f| f.strip_prefix(&prefix));
        if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let dir = PathBuf::from(format!("/dev/shm/{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory in /dev/shm");
    dir
}

/// The repository's golden traces (tests/golden/NAME/trace).
pub fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/golden")
        .join(name)
        .join("trace")
}

/// The small golden traces the targets start from.
pub const GOLDEN: &[&str] = &["ring", "collectives", "master_worker", "zerocoll"];

/// Copies a golden trace's rank files into `to`.
pub fn copy_golden(name: &str, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(golden(name)).unwrap() {
        let e = e.unwrap();
        let n = e.file_name();
        if n.to_string_lossy().ends_with(".pmt") {
            std::fs::copy(e.path(), to.join(n)).unwrap();
        }
    }
}

pub mod layout;
