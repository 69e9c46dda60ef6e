//! The live status file (layout in `pmtrace_format::live`): each thread's
//! slot, which its calls write a few words into, and the file they are in.
//!
//! A thread gets its slot when its recorder registers; until then, and
//! when the file could not be made or has no slot left, it writes into
//! `SINK`, a slot nobody reads, so that the hot path never branches on
//! whether there is a file. What the writer thread adds (heartbeat,
//! communicators, whom a blocked call waits for) is `live_tick`'s, run
//! through `tick` so that the writer thread need not import it.

use crate::ffi::{MPI_Comm, MPI_Request};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::Release};
use memmap2::MmapMut;
use parking_lot::Mutex;
use pmtrace_format::live::{self as fmt, h, w, IN_CALL, SLOT_LEN};
use std::sync::OnceLock;

/// One thread's slot: the file's words, written through atomics (plain
/// stores on the targets pmtrace runs on).
#[repr(C, align(64))]
pub struct Slot(pub [AtomicU64; SLOT_LEN / 8]);

impl Slot {
    #[inline(always)]
    pub fn word(&self, i: usize) -> &AtomicU64 {
        &self.0[i]
    }

    /// The low half of word `i` (the file is little-endian, as are the
    /// targets pmtrace runs on). The calls store 32-bit values there:
    /// a store of an immediate or of a 32-bit register, where a 64-bit
    /// store would first need the value widened. Only 32-bit accesses
    /// reach these halves in the process.
    #[inline(always)]
    pub fn low(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the slot is 8-aligned and words are 8 bytes; the half
        // lies inside word `i` and is only accessed as an AtomicU32.
        unsafe { &*(self.0.as_ptr().add(i) as *const AtomicU32) }
    }

    /// The high half of word `i` (see `low`).
    #[inline(always)]
    pub fn high(&self, i: usize) -> &AtomicU32 {
        // SAFETY: as in `low`, the other half.
        unsafe { &*((self.0.as_ptr().add(i) as *const AtomicU32).add(1)) }
    }

    /// Stores handle `h` into word `i` at the handle's own width (4 bytes
    /// in MPICH, 8 in Open MPI and the standard ABI): what `handle_key`
    /// makes of it, the other half staying 0.
    #[inline(always)]
    fn put_handle<T: Copy>(&self, i: usize, h: T) {
        if size_of::<T>() == 4 {
            self.low(i).store(crate::ffi::handle_key(h) as u32, Relaxed);
        } else {
            self.word(i).store(crate::ffi::handle_key(h), Relaxed);
        }
    }

    /// A handle's key that `put_handle::<T>` stored, read at its width.
    pub fn handle_at<T: Copy>(&self, i: usize) -> u64 {
        if size_of::<T>() == 4 {
            u64::from(self.low(i).load(Relaxed))
        } else {
            self.word(i).load(Relaxed)
        }
    }
}

/// Where threads without a slot write.
pub static SINK: Slot = Slot([const { AtomicU64::new(0) }; SLOT_LEN / 8]);

struct File {
    map: MmapMut,
    /// Kept open for the life of the mapping.
    _file: std::fs::File,
    next: AtomicU32,
}

impl File {
    fn u32_at(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is a 4-aligned header offset inside the mapping,
        // which lives as long as the process (the `File` is never dropped);
        // every access to these bytes is atomic.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU32) }
    }

    fn u64_at(&self, at: usize) -> &AtomicU64 {
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU64) }
    }

    fn slot(&self, i: usize) -> &'static Slot {
        // SAFETY: slot `i < MAX_THREADS` lies inside the mapping, 64-aligned
        // (the mapping is page-aligned and slots are 1 KiB apart), and lives
        // as long as the process.
        unsafe { &*(self.map.as_ptr().add(fmt::SLOTS_AT + i * SLOT_LEN) as *const Slot) }
    }
}

static FILE: OnceLock<File> = OnceLock::new();
static TICKER: OnceLock<fn()> = OnceLock::new();

/// Makes this rank's live file at `path` and fills its header. On
/// failure the run goes on without one (`top` says the rank has none).
pub fn create(path: &std::path::Path, rank: u32, size: u32, host: &str, start_ns: u64) {
    use std::os::unix::fs::OpenOptionsExt;
    let made = (|| -> std::io::Result<File> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o600)
            .open(path)?;
        file.set_len(fmt::FILE_LEN as u64)?;
        // SAFETY: a file this process just made, of the length mapped;
        // nothing else truncates it.
        let map = unsafe { memmap2::MmapOptions::new().populate().map_mut(&file)? };
        Ok(File {
            map,
            _file: file,
            next: AtomicU32::new(0),
        })
    })();
    let Ok(mut f) = made else { return };
    let m = &mut f.map;
    m[..4].copy_from_slice(fmt::LIVE_MAGIC);
    m[h::VERSION..h::VERSION + 4].copy_from_slice(&fmt::LIVE_VERSION.to_le_bytes());
    m[h::RANK..h::RANK + 4].copy_from_slice(&rank.to_le_bytes());
    m[h::SIZE..h::SIZE + 4].copy_from_slice(&size.to_le_bytes());
    m[h::PID..h::PID + 4].copy_from_slice(&std::process::id().to_le_bytes());
    m[h::STATE..h::STATE + 4].copy_from_slice(&fmt::STATE_RUNNING.to_le_bytes());
    m[h::START_NS..h::START_NS + 8].copy_from_slice(&start_ns.to_le_bytes());
    m[h::TICK_MS..h::TICK_MS + 4].copy_from_slice(&(TICK.as_millis() as u32).to_le_bytes());
    let host = host.as_bytes();
    let n = host.len().min(h::HOST_LEN - 1);
    m[h::HOST..h::HOST + n].copy_from_slice(&host[..n]);
    let _ = FILE.set(f);
}

/// How often the writer thread ticks.
pub const TICK: std::time::Duration = std::time::Duration::from_millis(250);

/// Ticks between syncs of the file (`PMTRACE_LIVE_SYNC`).
static SYNC_TICKS: AtomicU32 = AtomicU32::new(4);

/// Syncs every `ms` (at least every tick).
pub fn set_sync_ms(ms: u32) {
    SYNC_TICKS.store((ms / TICK.as_millis() as u32).max(1), Relaxed);
}

/// Ticks between syncs of the file.
pub fn sync_ticks() -> u64 {
    u64::from(SYNC_TICKS.load(Relaxed))
}

/// Slots of threads that ended, for threads that start later.
static FREE: Mutex<Vec<&'static Slot>> = Mutex::new(Vec::new());

/// A registering thread's slot, its own from now on: one an ended thread
/// gave back, the file's next, or, when the file has none (or there is no
/// file), one in memory that nobody reads, counted in the header.
pub fn slot_for(tid: u64) -> &'static Slot {
    let s = FREE.lock().pop().or_else(|| {
        let f = FILE.get()?;
        let i = f.next.fetch_add(1, Relaxed) as usize;
        if i >= fmt::MAX_THREADS {
            f.u32_at(h::LOST_THREADS).fetch_add(1, Relaxed);
            return None;
        }
        f.u32_at(h::THREADS).fetch_max(i as u32 + 1, Release);
        Some(f.slot(i))
    });
    let s =
        s.unwrap_or_else(|| Box::leak(Box::new(Slot([const { AtomicU64::new(0) }; SLOT_LEN / 8]))));
    s.word(w::TID).store(tid, Relaxed);
    s
}

/// An ending thread's slot, for another to take.
pub fn release(s: &'static Slot) {
    if !core::ptr::eq(s, &SINK) {
        FREE.lock().push(s);
    }
}

/// The slots in use.
pub fn slots() -> impl Iterator<Item = &'static Slot> {
    let f = FILE.get();
    let n = f.map_or(0, |f| f.u32_at(h::THREADS).load(Relaxed) as usize);
    (0..n).filter_map(move |i| f.map(|f| f.slot(i)))
}

/// A header word, for the writer thread.
pub fn header_u64(at: usize) -> Option<&'static AtomicU64> {
    FILE.get().map(|f| f.u64_at(at))
}

/// The communicator table's bytes, for the writer thread alone.
pub fn comms_table() -> Option<&'static [AtomicU64]> {
    let f = FILE.get()?;
    // SAFETY: the table lies inside the mapping, 8-aligned, for the life
    // of the process; only the writer thread writes it, through atomics.
    Some(unsafe {
        core::slice::from_raw_parts(
            f.map.as_ptr().add(fmt::COMMS_AT) as *const AtomicU64,
            fmt::COMMS_LEN / 8,
        )
    })
}

/// The run ended (`STATE_FINISHED`) or aborts (`STATE_ABORTED`): said in
/// the header and synced.
pub fn set_state(state: u32) {
    if let Some(f) = FILE.get() {
        f.u32_at(h::STATE).store(state, Release);
        sync();
    }
}

/// Writes the file's pages back, for readers on other nodes.
pub fn sync() {
    if let Some(f) = FILE.get() {
        let _ = f.map.flush();
    }
}

/// What the writer thread runs every `TICK` (`live_tick::tick`).
pub fn set_ticker(f: fn()) {
    let _ = TICKER.set(f);
}

pub fn tick() {
    if let (Some(t), Some(_)) = (TICKER.get(), FILE.get()) {
        t();
    }
}

/// A call begins: its word (`IN_CALL` set, by the caller: a constant,
/// stored as a 32-bit immediate). When it began is the writer thread's
/// to note (`live_tick`), within a tick: one store here, not two.
#[inline(always)]
pub fn enter(s: &Slot, word: u32) {
    debug_assert!(u64::from(word) & IN_CALL != 0);
    s.low(w::WORD).store(word, Release);
}

/// A call with a peer (a rank of `comm`) begins.
#[inline(always)]
pub fn enter_with(s: &Slot, word: u32, peer: i32, comm: MPI_Comm) {
    s.low(w::A).store(peer as u32, Relaxed);
    s.put_handle(w::B, comm);
    enter(s, word);
}

/// A call that sends to `dest` and receives from `source` begins.
#[inline(always)]
pub fn enter_pair(s: &Slot, word: u32, dest: i32, source: i32, comm: MPI_Comm) {
    s.high(w::A).store(source as u32, Relaxed);
    enter_with(s, word, dest, comm);
}

/// A collective begins on `comm`.
#[inline(always)]
pub fn enter_comm(s: &Slot, word: u32, comm: MPI_Comm) {
    s.put_handle(w::B, comm);
    enter(s, word);
}

/// `MPI_Wait` begins on `request` (one: the kind says so).
#[inline(always)]
pub fn enter_wait(s: &Slot, word: u32, request: MPI_Request) {
    s.put_handle(w::REQS, request);
    enter(s, word);
}

/// A wait begins on `requests`.
#[inline(always)]
pub fn enter_waits(s: &Slot, word: u32, requests: &[MPI_Request]) {
    for (i, &q) in requests.iter().take(fmt::REQS).enumerate() {
        s.put_handle(w::REQS + i, q);
    }
    s.low(w::A).store(requests.len() as u32, Relaxed);
    enter(s, word);
}

/// The call ended. When is left to the writer thread (`OUT_T`): one
/// store here, not two.
#[inline(always)]
pub fn leave(s: &Slot, func: u32) {
    s.low(w::WORD).store(func, Release);
}

/// A message of `bytes` bytes left this thread. Only a registered
/// thread calls this, on its own slot (never `SINK`), and no other thread
/// of the process writes these two words: a load and a store each, which
/// x86 makes one add to memory (not locked). Being atomics, the two adds
/// are also not merged into one vector add, which takes seven
/// instructions where these take three.
#[inline(always)]
pub fn sent(s: &Slot, bytes: u64) {
    let (m, b) = (s.word(w::MSGS), s.word(w::BYTES));
    m.store(m.load(Relaxed) + 1, Relaxed);
    b.store(b.load(Relaxed) + bytes, Relaxed);
}

/// The innermost phase is now `name` (none: outside every phase).
pub fn phase(s: &Slot, name: Option<&[u8]>) {
    let name = name.unwrap_or(&[]);
    let n = name.len().min(w::PHASE_WORDS * 8 - 1);
    let mut bytes = [0u8; w::PHASE_WORDS * 8];
    bytes[0] = n as u8;
    bytes[1..1 + n].copy_from_slice(&name[..n]);
    for (i, c) in bytes.chunks(8).enumerate() {
        s.word(w::PHASE + i)
            .store(u64::from_le_bytes(c.try_into().unwrap()), Relaxed);
    }
}
