//! The background writer: owns the rank's trace file, hands out buffers
//! that are regions of that file mapped into memory, and seals them.
//!
//! ```text
//!  app thread                         flusher thread                 file
//!  ----------                         --------------                 ----
//!  Register(link, channel) ---------> fallocate + map 2 regions  ---> [chunk][chunk]
//!      <------------------------------ active, spare (MAP_POPULATE)
//!  writes records into active
//!  active full: Full(region, used) -> seal: crc, used, state=sealed
//!  take spare (waits only if none:      unmap (the page cache writes back)
//!   the wait is recorded)               map a fresh region, send it --> [chunk]
//!  MPI_Finalize: Finish -------------> seal every thread's open region,
//!                                      reclaim unused spares, trailer chunk
//! ```
//!
//! The application thread never performs file I/O: it writes bytes into
//! pages that are already mapped and write-faulted in by the flusher. Space is reserved with
//! `fallocate`, so a full disk fails here, in the flusher, and not as a
//! SIGBUS in the application. Because the buffers are shared file mappings,
//! what a thread wrote is in the file even if the process dies before it is
//! sealed; the reader recovers open chunks by scanning.
//!
//! Buffers grow adaptively per thread: the first is 256 KiB, and each one a
//! thread fills doubles the next, up to `PMTRACE_BUFFER_SIZE`. A thread that
//! records little costs little; a busy one gets full-size buffers.
//!
//! A thread that ends gives back what it did not write: its unused spare,
//! and the pages of its last buffer past its records, which become a chunk
//! of their own that no thread owns. Both go to a pool that later threads
//! take their buffers from, so a program that starts a thread per task
//! grows its trace by a page per thread, not by two buffers.

use crossbeam_channel::{Receiver, Sender};
use memmap2::{MmapMut, MmapOptions};
use parking_lot::Mutex;
use pmtrace_format::{meta, ChunkHeader, ChunkKind, ChunkState, CHUNK_HEADER_LEN, PAGE};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Where an events chunk's records start: after its header (no pending
/// slot: `pmtrace_format::pending` is for traces of earlier runtimes).
pub const RECORDS_AT: usize = CHUNK_HEADER_LEN;

pub const FIRST_BUFFER: usize = 256 << 10;

/// The least of a buffer's room worth keeping for another thread: a
/// smaller rest of an ended thread's buffer is given back to the disk.
const POOLED_MIN: usize = 16 * PAGE;

/// Every thread that ever recorded, for the end-of-run totals.
static LINKS: Mutex<Vec<Arc<ThreadLink>>> = Mutex::new(Vec::new());

/// Enters a recording thread's link (for the end-of-run totals).
pub fn register_link(link: Arc<ThreadLink>) {
    LINKS.lock().push(link);
}

/// Every thread that ever recorded.
pub fn all_links() -> Vec<Arc<ThreadLink>> {
    LINKS.lock().clone()
}

/// Runs `f` on every thread that ever recorded, under the list's lock.
pub fn each_link(mut f: impl FnMut(&ThreadLink)) {
    for l in LINKS.lock().iter() {
        f(l);
    }
}

/// A mapped region of the trace file: one chunk, from `start` to the end
/// of its mapping (the rest of an ended thread's buffer keeps the mapping
/// whose front the sealed chunk holds).
pub struct Region {
    map: MmapMut,
    start: usize,
    /// The file offset of the chunk.
    pub offset: u64,
}

impl Region {
    pub fn capacity(&self) -> usize {
        self.map.len() - self.start
    }

    /// The chunk's bytes.
    pub fn bytes(&mut self) -> &mut [u8] {
        &mut self.map[self.start..]
    }
}

/// What a thread shares with the flusher.
pub struct ThreadLink {
    pub index: u32,
    pub tid: u64,
    /// The thread's slot in the live status file, whose call count the
    /// writer thread keeps (`live_tick`).
    pub live: &'static crate::live::Slot,
    /// Payload bytes written into the active region (published per record).
    pub pos: AtomicUsize,
    pub events: AtomicU64,
    pub waits: AtomicU64,
    pub wait_ns: AtomicU64,
    /// Events this thread could not record.
    pub dropped: AtomicU64,
    /// The region the thread is writing: (file offset, capacity).
    pub active: Mutex<Option<(u64, usize)>>,
    /// What a thread without a spare sleeps on (`spare::wait`): not
    /// crossbeam's blocking receive, which allocates a channel's list of
    /// waiters the first time a receiver blocks on it, inside whichever
    /// application call filled the buffer.
    pub spare: spare::Word,
}

/// A spare buffer's hand-over, without allocating: the thread waits on a
/// futex word that the flusher bumps after each send to the thread (and
/// when it drops the thread's sender), and wakes only a thread that said
/// it sleeps.
pub mod spare {
    use super::*;
    use crossbeam_channel::TryRecvError;
    use std::sync::atomic::Ordering::{Acquire, Release};

    /// Bit 0: the thread sleeps or is about to; the rest counts the flusher's
    /// sends.
    #[derive(Default)]
    pub struct Word(AtomicU32);

    const SLEEPS: u32 = 1;
    const SENT: u32 = 2;

    impl Word {
        /// The flusher sent a region to the thread, or dropped its sender.
        pub fn bump(&self) {
            if self.0.fetch_add(SENT, Release) & SLEEPS != 0 {
                futex(
                    &self.0,
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    i32::MAX as u32,
                    None,
                );
            }
        }
    }

    /// The next region from the flusher, waiting for it if need be; `None`
    /// once the flusher dropped this thread's sender.
    pub fn wait(spares: &Receiver<Region>, word: &Word) -> Option<Region> {
        loop {
            // Said before the look: a send after it bumps the word (and
            // wakes us); one before it is seen by the look.
            let seen = word.0.fetch_or(SLEEPS, Acquire) | SLEEPS;
            match spares.try_recv() {
                Ok(r) => {
                    word.0.fetch_and(!SLEEPS, Relaxed);
                    return Some(r);
                }
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => {}
            }
            // Rechecked at least every 100 ms, whatever happens to a wake.
            let limit = libc::timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            futex(
                &word.0,
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                Some(&limit),
            );
        }
    }

    fn futex(word: &AtomicU32, op: i32, val: u32, limit: Option<&libc::timespec>) {
        let limit = limit.map_or(core::ptr::null(), |l| l as *const libc::timespec);
        // SAFETY: the word is a live, aligned u32 for the call; a wait
        // returns when the word differs from `val`, on a wake, a signal or
        // the time limit, all of which the caller's loop handles.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), op, val, limit);
        }
    }
}

pub enum Msg {
    Register {
        link: Arc<ThreadLink>,
        to_thread: Sender<Region>,
        spares: Receiver<Region>,
    },
    Full {
        region: Region,
        used: usize,
        thread: u32,
        last: bool,
    },
    /// Tracing will not start after all: stop without writing anything.
    Abandon,
    Finish {
        trailer: Box<dyn FnOnce(&Totals) -> meta::Trailer + Send>,
        reply: Sender<Totals>,
    },
}

/// Counts the flusher reports at the end.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub events: u64,
    pub bytes: u64,
    pub chunks: u64,
    pub waits: u64,
    pub wait_ns: u64,
    pub file_bytes: u64,
    pub threads: Vec<meta::ThreadDef>,
    pub error: Option<String>,
    /// The file was removed while the job ran (`Some`), and whether it
    /// was written back under its name (`restore`).
    pub removed: Option<bool>,
}

struct ThreadEntry {
    link: Arc<ThreadLink>,
    /// `None` only while being dropped.
    to_thread: Option<Sender<Region>>,
    spares: Receiver<Region>,
    next_size: usize,
}

impl ThreadEntry {
    fn send(&self, r: Region) -> bool {
        let sent = self.to_thread.as_ref().is_some_and(|t| t.send(r).is_ok());
        self.link.spare.bump();
        sent
    }
}

/// A thread the flusher no longer serves: its sender goes, then the thread
/// is woken to find that out.
impl Drop for ThreadEntry {
    fn drop(&mut self) {
        drop(self.to_thread.take());
        self.link.spare.bump();
    }
}

pub struct Flusher {
    file: File,
    /// Where the file was made.
    path: std::path::PathBuf,
    len: u64,
    max_buffer: usize,
    threads: Vec<ThreadEntry>,
    /// Chunks of the file that ended threads left unwritten, owned by no
    /// thread, still mapped, for the next buffers.
    pool: Vec<Region>,
    totals: Totals,
}

fn io_err(what: &str, e: std::io::Error) -> String {
    format!("{what}: {e}")
}

impl Flusher {
    pub fn new(file: File, path: &std::path::Path, header_len: u64, max_buffer: usize) -> Flusher {
        Flusher {
            file,
            path: path.to_path_buf(),
            len: header_len,
            max_buffer,
            threads: Vec::new(),
            pool: Vec::new(),
            totals: Totals::default(),
        }
    }

    /// A buffer of about `cap` bytes for a thread: a chunk of the pool if
    /// one has at least a quarter of that room, else a fresh one.
    fn take(&mut self, cap: usize) -> Result<Region, String> {
        let fits = self
            .pool
            .iter()
            .enumerate()
            .filter(|(_, p)| p.capacity() >= cap / 4)
            .min_by_key(|(_, p)| p.capacity().abs_diff(cap))
            .map(|(i, _)| i);
        match fits {
            Some(i) => Ok(self.pool.swap_remove(i)),
            None => self.alloc(cap),
        }
    }

    /// Reserves and maps a fresh events chunk of `cap` bytes.
    fn alloc(&mut self, cap: usize) -> Result<Region, String> {
        let offset = self.len;
        // SAFETY: a valid fd; reserving blocks so that later writes through
        // the mapping cannot fail with SIGBUS on a full disk.
        let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), offset as i64, cap as i64) };
        if rc != 0 {
            return Err(io_err(
                "cannot extend the trace file",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        self.len += cap as u64;
        // SAFETY: the mapped range lies inside the file just extended; the
        // file is private to this process (created O_EXCL, 0600) and nothing
        // truncates it while mapped.
        let mut map = unsafe {
            MmapOptions::new()
                .offset(offset)
                .len(cap)
                .populate()
                .map_mut(&self.file)
        }
        .map_err(|e| io_err("cannot map the trace file", e))?;
        map[..CHUNK_HEADER_LEN].copy_from_slice(&ChunkHeader::unowned(cap as u64, 0).encode());
        // Write-fault every page here, not on the application thread: pages
        // of a shared file mapping start write-protected (the kernel tracks
        // their dirtying), and each first write costs a page fault into the
        // file system, microseconds, once per 4 KiB of records.
        for page in (0..cap).step_by(PAGE) {
            // SAFETY: inside the mapping; rewrites the zero already there.
            unsafe { core::ptr::write_volatile(map.as_mut_ptr().add(page), map[page]) };
        }
        Ok(Region {
            map,
            start: 0,
            offset,
        })
    }

    /// Stores fill and checksum, then marks the chunk sealed.
    fn seal_bytes(chunk: &mut [u8], used: usize) {
        let used = used.min(chunk.len() - RECORDS_AT);
        let crc = crc32fast::hash(&chunk[RECORDS_AT..RECORDS_AT + used]);
        chunk[24..32].copy_from_slice(&(used as u64).to_le_bytes());
        chunk[48..52].copy_from_slice(&crc.to_le_bytes());
        chunk[12..16].copy_from_slice(&(ChunkState::Sealed as u32).to_le_bytes());
    }

    fn seal(&mut self, mut region: Region, used: usize) {
        Self::seal_bytes(region.bytes(), used);
        self.account(used);
        self.release_tail(region.offset, region.capacity(), used);
    }

    /// Seals the last buffer of a thread that ended. The pages past its
    /// records, if enough, become a chunk owned by no thread, for the pool:
    /// its header is written before this chunk's capacity shrinks to its
    /// records' pages, so a reader (`pmtrace timeline --follow`, or one of
    /// a crashed run) finds whole chunks before and after.
    fn seal_last(&mut self, mut region: Region, used: usize) {
        let cap = region.capacity();
        let keep = (RECORDS_AT + used).div_ceil(PAGE) * PAGE;
        if cap < keep + POOLED_MIN {
            self.seal(region, used);
            return;
        }
        let chunk = region.bytes();
        Self::seal_bytes(chunk, used);
        chunk[keep..keep + CHUNK_HEADER_LEN]
            .copy_from_slice(&ChunkHeader::unowned((cap - keep) as u64, 0).encode());
        chunk[16..24].copy_from_slice(&(keep as u64).to_le_bytes());
        self.account(used);
        // The rest keeps the mapping, its pages already writable.
        region.start += keep;
        region.offset += keep as u64;
        self.pool.push(region);
    }

    /// An ended thread's spare, never written: to the pool.
    fn give_back(&mut self, spare: Region) {
        self.pool.push(spare);
    }

    fn account(&mut self, used: usize) {
        self.totals.bytes += used as u64;
        if used > 0 {
            self.totals.chunks += 1;
        }
    }

    /// Gives back the disk blocks of a chunk's unused whole pages.
    fn release_tail(&self, offset: u64, cap: usize, used: usize) {
        let keep = (RECORDS_AT + used).div_ceil(PAGE) * PAGE;
        if keep < cap {
            // SAFETY: a valid fd; the range is inside the file. Failure only
            // leaves the blocks allocated.
            unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    (offset + keep as u64) as i64,
                    (cap - keep) as i64,
                );
            }
        }
    }

    /// Seals a region some thread still has mapped, through a mapping of our own.
    fn seal_in_place(&mut self, offset: u64, cap: usize, used: usize) {
        // SAFETY: as in `alloc`; the owning thread no longer writes (tracing
        // has finished), and both mappings share the same page cache pages.
        match unsafe {
            MmapOptions::new()
                .offset(offset)
                .len(cap)
                .map_mut(&self.file)
        } {
            Ok(mut map) => {
                Self::seal_bytes(&mut map, used);
                self.account(used);
                self.release_tail(offset, cap, used);
            }
            Err(e) => {
                self.totals
                    .error
                    .get_or_insert(io_err("cannot seal a buffer", e));
            }
        }
    }

    fn grow(&mut self, thread: u32) -> usize {
        let max = self.max_buffer;
        match self.threads.iter_mut().find(|t| t.link.index == thread) {
            Some(t) => {
                let size = t.next_size;
                t.next_size = (t.next_size * 2).min(max);
                size
            }
            None => FIRST_BUFFER.min(max),
        }
    }

    pub fn run(mut self, rx: Receiver<Msg>) {
        let mut next_tick = std::time::Instant::now();
        loop {
            let now = std::time::Instant::now();
            if now >= next_tick {
                crate::live::tick();
                next_tick = now + crate::live::TICK;
            }
            let msg = match rx.recv_deadline(next_tick) {
                Ok(msg) => msg,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            };
            match msg {
                Msg::Register {
                    link,
                    to_thread,
                    spares,
                } => {
                    let first = FIRST_BUFFER.min(self.max_buffer);
                    let entry = ThreadEntry {
                        link,
                        to_thread: Some(to_thread),
                        spares,
                        next_size: (first * 2).min(self.max_buffer),
                    };
                    let mut ok = true;
                    for _ in 0..2 {
                        match self.take(first) {
                            Ok(r) => ok &= entry.send(r),
                            Err(e) => {
                                self.totals.error.get_or_insert(e);
                                ok = false;
                            }
                        }
                    }
                    // Dropping the entry of a thread we cannot serve wakes it
                    // with an error instead of leaving it waiting.
                    if ok {
                        self.threads.push(entry);
                    }
                }
                Msg::Full {
                    region,
                    used,
                    thread,
                    last,
                } => {
                    // The replacement first: the thread may be waiting for it.
                    if !last {
                        let size = self.grow(thread);
                        match self.take(size) {
                            Ok(r) => {
                                if let Some(t) =
                                    self.threads.iter().find(|t| t.link.index == thread)
                                {
                                    t.send(r);
                                }
                            }
                            Err(e) => {
                                self.totals.error.get_or_insert(e);
                                self.threads.retain(|t| t.link.index != thread);
                            }
                        }
                    }
                    if !last {
                        self.seal(region, used);
                    } else {
                        // A thread that is done: what it did not write goes
                        // to the pool.
                        self.seal_last(region, used);
                        if let Some(i) = self.threads.iter().position(|t| t.link.index == thread) {
                            let t = self.threads.remove(i);
                            while let Ok(spare) = t.spares.try_recv() {
                                self.give_back(spare);
                            }
                        }
                    }
                }
                Msg::Abandon => return,
                Msg::Finish { trailer, reply } => {
                    self.finish(trailer);
                    let _ = reply.send(self.totals.clone());
                    return;
                }
            }
        }
    }

    fn finish(&mut self, trailer: Box<dyn FnOnce(&Totals) -> meta::Trailer + Send>) {
        let threads = std::mem::take(&mut self.threads);
        for t in &threads {
            if let Some((offset, cap)) = t.link.active.lock().take() {
                let used = t.link.pos.load(Relaxed);
                self.seal_in_place(offset, cap, used);
            }
            while let Ok(spare) = t.spares.try_recv() {
                self.seal(spare, 0);
            }
        }
        // What no thread took: sealed empty, its blocks given back.
        for region in std::mem::take(&mut self.pool) {
            self.seal(region, 0);
        }
        for t in all_links() {
            self.totals.events += t.events.load(Relaxed);
            self.totals.waits += t.waits.load(Relaxed);
            self.totals.wait_ns += t.wait_ns.load(Relaxed);
            self.totals.threads.push(meta::ThreadDef {
                index: t.index,
                tid: t.tid,
                dropped: t.dropped.load(Relaxed),
            });
        }
        let tr = trailer(&self.totals);
        let json = serde_json::to_vec(&tr).expect("trailer serializes");
        let cap = (CHUNK_HEADER_LEN + json.len()).div_ceil(PAGE) * PAGE;
        let mut chunk = vec![0u8; cap];
        let h = ChunkHeader {
            kind: ChunkKind::Trailer,
            thread: 0,
            state: ChunkState::Sealed,
            capacity: cap as u64,
            used: json.len() as u64,
            base_ns: tr.end_ns,
            seq: 0,
            crc: crc32fast::hash(&json),
            slot: 0,
        };
        chunk[..CHUNK_HEADER_LEN].copy_from_slice(&h.encode());
        chunk[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + json.len()].copy_from_slice(&json);
        if let Err(e) = self.file.write_all_at(&chunk, self.len) {
            self.totals
                .error
                .get_or_insert(io_err("cannot write the trace trailer", e));
        }
        self.len += cap as u64;
        self.totals.file_bytes = self.len;
        self.totals.removed = self.restore();
    }

    /// Whether the file was removed while the job ran (its directory
    /// removed, say: the writes went on, into the open file); if so, it is
    /// written back under its name, the directory made anew, and whether
    /// that worked. A removed file cannot be linked again, so its bytes
    /// are copied.
    fn restore(&self) -> Option<bool> {
        use std::os::unix::fs::MetadataExt;
        if self.file.metadata().ok()?.nlink() > 0 {
            return None;
        }
        let copy = || -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                std::os::unix::fs::DirBuilderExt::mode(
                    std::fs::DirBuilder::new().recursive(true),
                    0o700,
                )
                .create(dir)?;
            }
            let mut to = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&self.path)?;
            let mut from = &self.file;
            std::io::Seek::seek(&mut from, std::io::SeekFrom::Start(0))?;
            std::io::copy(&mut from, &mut to)?;
            to.sync_all()
        };
        Some(copy().is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::time::Duration;

    /// The heap, counting the calls of the thread that makes them.
    struct Counting;

    thread_local! {
        static CALLS: Cell<u64> = const { Cell::new(0) };
    }

    fn calls() -> u64 {
        CALLS.with(Cell::get)
    }

    fn count() {
        let _ = CALLS.try_with(|c| c.set(c.get() + 1));
    }

    // SAFETY: System's calls, each counted first.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            count();
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            count();
            unsafe { System.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            count();
            unsafe { System.realloc(p, l, n) }
        }
    }

    #[global_allocator]
    static HEAP: Counting = Counting;

    fn region(offset: u64) -> Region {
        Region {
            map: MmapOptions::new().len(PAGE).map_anon().unwrap(),
            start: 0,
            offset,
        }
    }

    /// A thread that waits for its spare sleeps until the flusher sends it,
    /// and wakes to `None` when the flusher drops its sender; neither the
    /// first wait nor the later ones allocate (crossbeam's blocking receive
    /// allocates its list of waiters the first time a receiver blocks, which
    /// once fell inside the measured loop of `the_hot_paths_allocate_nothing`).
    #[test]
    fn a_thread_waits_for_its_spare_without_allocating() {
        let (tx, rx) = crossbeam_channel::bounded(2);
        let word = Arc::new(spare::Word::default());
        let regions: Vec<Region> = (1..=3).map(|i| region(i * PAGE as u64)).collect();
        let flusher = {
            let word = word.clone();
            std::thread::spawn(move || {
                for r in regions {
                    std::thread::sleep(Duration::from_millis(30));
                    tx.send(r).unwrap();
                    word.bump();
                }
                std::thread::sleep(Duration::from_millis(30));
                drop(tx);
                word.bump();
            })
        };
        let before = calls();
        let mut got = [0u64; 3];
        for g in &mut got {
            *g = spare::wait(&rx, &word).map(|r| r.offset).unwrap_or(0);
        }
        let after_last = spare::wait(&rx, &word).is_none();
        let heap = calls() - before;
        flusher.join().unwrap();
        let p = PAGE as u64;
        assert_eq!(got, [p, 2 * p, 3 * p]);
        assert!(after_last, "the dropped sender was not seen");
        assert_eq!(heap, 0, "heap calls while waiting");
    }
}
