//! Out of core. When a verb's trace needs more memory than the process can
//! have, [`enable`] turns every large allocation (256 KiB and more: the
//! model's columns, the message and clock tables) into the pages of an
//! unlinked file in a spill directory on disk, mapped shared. Under memory
//! pressure the kernel writes such pages back to their file and drops them,
//! as it does with any file's pages, where anonymous memory would have
//! nowhere to go: the verb runs slower, but it finishes. Small allocations
//! stay on the heap.
//!
//! The allocator ([`crate::memory::Guarded`]) asks here first. Which blocks
//! are spilled is known by address: a fixed table of the live ones, so that
//! a large heap block allocated before the switch is still freed to the
//! heap. A spill that cannot be had (no file, no disk blocks) returns null,
//! and the allocator takes the heap instead.
//!
//! Each file is allocated in full when it is made (`fallocate`), so that a
//! full disk fails the allocation, not a later write to the mapping (which
//! would be a `SIGBUS`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Allocations of this size and more are spilled.
pub const MIN: usize = 256 << 10;

/// Spilled blocks start on a page; stricter alignments stay on the heap.
const PAGE: usize = 4096;

static ON: AtomicBool = AtomicBool::new(false);
/// The spill directory, open (`O_PATH`) for the whole run.
static DIR: AtomicI32 = AtomicI32::new(-1);
/// Whether the directory's file system makes unnamed files (`O_TMPFILE`).
static UNNAMED: AtomicBool = AtomicBool::new(true);
static SERIAL: AtomicU64 = AtomicU64::new(0);
/// Bytes mapped now, and at most (for the notes and tests).
static MAPPED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The live spilled blocks by address: open addressing, `TOMB` where a
/// block was freed. A slot only ever goes from empty to a block, from a
/// block to `TOMB` and from `TOMB` to a block, so a lookup may stop at the
/// first empty slot of its run.
const SLOTS: usize = 1 << 17;
const TOMB: usize = 1;
static LIVE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

fn home(p: usize) -> usize {
    ((p / PAGE) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as usize >> (64 - 17)
}

fn remember(p: usize) -> bool {
    for k in 0..SLOTS {
        let slot = &LIVE[(home(p) + k) % SLOTS];
        let v = slot.load(Ordering::Acquire);
        if (v == 0 || v == TOMB)
            && slot
                .compare_exchange(v, p, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return true;
        }
    }
    false
}

/// The slot of live block `p`, if it is one.
fn find(p: usize) -> Option<&'static AtomicUsize> {
    for k in 0..SLOTS {
        let slot = &LIVE[(home(p) + k) % SLOTS];
        match slot.load(Ordering::Acquire) {
            0 => return None,
            v if v == p => return Some(slot),
            _ => {}
        }
    }
    None
}

fn pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

/// Whether a block of `size` bytes aligned to `align` would be spilled.
#[inline]
pub fn wants(size: usize, align: usize) -> bool {
    size >= MIN && align <= PAGE && ON.load(Ordering::Relaxed)
}

/// Whether `p` (a block of `size` bytes) is a spilled one.
#[inline]
pub fn owns(p: *mut u8, size: usize) -> bool {
    size >= MIN && ON.load(Ordering::Relaxed) && find(p as usize).is_some()
}

/// A new spilled block of `size` bytes, zero-filled; null if none can be
/// had (the caller then takes the heap).
pub fn alloc(size: usize) -> *mut u8 {
    let len = pages(size);
    let fd = new_file();
    if fd < 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: plain system calls on the file just made, closed below; the
    // mapping keeps the (unlinked) file alive until it is unmapped.
    let p = unsafe {
        let sized = match libc::fallocate(fd, 0, 0, len as libc::off_t) {
            0 => true,
            _ if errno() == libc::EOPNOTSUPP => libc::ftruncate(fd, len as libc::off_t) == 0,
            _ => false,
        };
        let p = if sized {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        p
    };
    if p == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    if !remember(p as usize) {
        // SAFETY: the mapping just made, not handed out.
        unsafe { libc::munmap(p, len) };
        return core::ptr::null_mut();
    }
    let now = MAPPED.fetch_add(len, Ordering::Relaxed) + len;
    PEAK.fetch_max(now, Ordering::Relaxed);
    p.cast()
}

/// Frees spilled block `p` of `size` bytes.
///
/// # Safety
/// `p` is a live spilled block of that size ([`owns`]).
pub unsafe fn free(p: *mut u8, size: usize) {
    if let Some(slot) = find(p as usize) {
        slot.store(TOMB, Ordering::Release);
    }
    MAPPED.fetch_sub(pages(size), Ordering::Relaxed);
    // SAFETY: the caller's block, a mapping of this length.
    unsafe { libc::munmap(p.cast(), pages(size)) };
}

/// Shrinks spilled block `p` from `size` to `new_size` bytes in place if
/// both are spill-sized (the tail pages are unmapped); false otherwise.
///
/// # Safety
/// `p` is a live spilled block of `size` bytes.
pub unsafe fn shrink(p: *mut u8, size: usize, new_size: usize) -> bool {
    if new_size < MIN || new_size > size {
        return false;
    }
    let (keep, had) = (pages(new_size), pages(size));
    if keep < had {
        // SAFETY: the tail of the caller's mapping.
        unsafe { libc::munmap(p.add(keep).cast(), had - keep) };
        MAPPED.fetch_sub(had - keep, Ordering::Relaxed);
    }
    true
}

/// The most bytes spilled at once so far.
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An unlinked file in the spill directory, open read-write; -1 if none.
fn new_file() -> i32 {
    let dir = DIR.load(Ordering::Relaxed);
    if UNNAMED.load(Ordering::Relaxed) {
        // SAFETY: a system call on the directory descriptor with a static name.
        let fd = unsafe {
            libc::openat(
                dir,
                c".".as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 || !matches!(errno(), libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL) {
            return fd;
        }
        UNNAMED.store(false, Ordering::Relaxed);
    }
    // A named file, unlinked at once. The name is built on the stack: the
    // heap is what is being allocated.
    let mut name = *b".pmtrace-spill-0000000000-0000000000\0";
    let mut put = |at: usize, mut v: u64| {
        for i in (0..10).rev() {
            name[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(15, u64::from(std::process::id()));
    put(26, SERIAL.fetch_add(1, Ordering::Relaxed));
    // SAFETY: system calls on the directory with a NUL-terminated name.
    unsafe {
        let path = name.as_ptr().cast();
        let fd = libc::openat(
            dir,
            path,
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            libc::unlinkat(dir, path, 0);
        }
        fd
    }
}

/// Why a directory cannot take the spill, if it cannot: it is not one, it
/// is in memory itself (tmpfs), it is not writable, or it has less free
/// room than `need` bytes.
pub fn unfit(dir: &Path, need: u64) -> Option<String> {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return Some(format!("{} is not a directory", dir.display()));
    };
    // SAFETY: statfs fills the struct it is given, for a NUL-terminated path.
    let mut fs: libc::statfs = unsafe { core::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Some(format!("{} cannot be used", dir.display()));
    }
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    if matches!(fs.f_type as i64, TMPFS | RAMFS) {
        return Some(format!(
            "{} is in memory (tmpfs); set PMTRACE_SPILL_DIR to a directory on disk",
            dir.display()
        ));
    }
    let free = fs.f_bavail as u64 * fs.f_bsize as u64;
    if free < need {
        return Some(format!(
            "{} has {:.1} GiB free, not the {:.1} GiB to work out of core (PMTRACE_SPILL_DIR \
             chooses another directory)",
            dir.display(),
            free as f64 / f64::from(1u32 << 30),
            need as f64 / f64::from(1u32 << 30)
        ));
    }
    // SAFETY: opening a directory by its NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Some(format!(
            "{} cannot be opened (PMTRACE_SPILL_DIR chooses another directory)",
            dir.display()
        ));
    }
    DIR.store(fd, Ordering::Relaxed);
    let probe = new_file();
    if probe < 0 {
        DIR.store(-1, Ordering::Relaxed);
        // SAFETY: the descriptor opened above.
        unsafe { libc::close(fd) };
        return Some(format!(
            "{} is not writable (PMTRACE_SPILL_DIR chooses another directory)",
            dir.display()
        ));
    }
    // SAFETY: the probe file just made.
    unsafe { libc::close(probe) };
    None
}

/// Spills from now on, into the directory [`unfit`] last accepted.
pub fn enable() {
    if DIR.load(Ordering::Relaxed) >= 0 {
        ON.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spilled_block_is_known_by_address_until_freed() {
        // The build tree is on disk, where spilling is meant to go (the
        // system's temporary directory may be a tmpfs, which `unfit`
        // refuses).
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp");
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(why) = unfit(&dir, 1 << 20) {
            panic!("spilling cannot be tried here: {why}");
        }
        enable();
        let p = alloc(MIN + 10);
        assert!(!p.is_null());
        assert!(owns(p, MIN + 10));
        // Zero-filled, and writable to its last byte.
        // SAFETY: the block just allocated, MIN + 10 bytes.
        unsafe {
            assert_eq!(*p.add(MIN + 9), 0);
            *p.add(MIN + 9) = 7;
            assert!(shrink(p, MIN + 10, MIN));
            assert!(owns(p, MIN));
            free(p, MIN);
        }
        assert!(!owns(p, MIN));
        // A heap block of spill size is not one.
        let layout = std::alloc::Layout::from_size_align(MIN, 8).unwrap();
        // SAFETY: a block of the system allocator, freed to it.
        unsafe {
            use std::alloc::GlobalAlloc;
            let h = std::alloc::System.alloc(layout);
            assert!(!owns(h, MIN));
            std::alloc::System.dealloc(h, layout);
        }
    }

    #[test]
    fn freed_slots_are_reused_and_lookups_pass_over_them() {
        // Addresses that share a home slot.
        let a = 0x7000_0000_0000usize;
        let b = (1..)
            .map(|k| a + k * PAGE)
            .find(|&b| home(b) == home(a))
            .unwrap();
        assert!(remember(a));
        assert!(remember(b));
        find(a).unwrap().store(TOMB, Ordering::Release);
        assert!(find(a).is_none());
        assert!(find(b).is_some(), "b sits past a's tombstone");
        assert!(remember(a));
        assert!(find(a).is_some());
        find(a).unwrap().store(TOMB, Ordering::Release);
        find(b).unwrap().store(TOMB, Ordering::Release);
    }
}
