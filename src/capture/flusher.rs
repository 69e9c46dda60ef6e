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

use crossbeam_channel::{Receiver, Sender};
use memmap2::{MmapMut, MmapOptions};
use parking_lot::Mutex;
use pmtrace_format::{meta, ChunkHeader, ChunkKind, ChunkState, CHUNK_HEADER_LEN, PAGE};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// Where an events chunk's records start: after its header (no pending
/// slot: `pmtrace_format::pending` is for traces of earlier runtimes).
pub const RECORDS_AT: usize = CHUNK_HEADER_LEN;

pub const FIRST_BUFFER: usize = 256 << 10;

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
use pmtrace_format::UNOWNED_THREAD as UNOWNED;

/// A mapped region of the trace file: one chunk.
pub struct Region {
    pub map: MmapMut,
    pub offset: u64,
}

impl Region {
    pub fn capacity(&self) -> usize {
        self.map.len()
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
    to_thread: Sender<Region>,
    spares: Receiver<Region>,
    next_size: usize,
}

pub struct Flusher {
    file: File,
    /// Where the file was made.
    path: std::path::PathBuf,
    len: u64,
    max_buffer: usize,
    threads: Vec<ThreadEntry>,
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
            totals: Totals::default(),
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
        let h = ChunkHeader {
            kind: ChunkKind::Events,
            // Owned by no thread until one activates it; an unused spare
            // stays so (sealed empty at the end).
            thread: UNOWNED,
            state: ChunkState::Open,
            capacity: cap as u64,
            used: 0,
            base_ns: 0,
            seq: 0,
            crc: 0,
            slot: 0,
        };
        map[..CHUNK_HEADER_LEN].copy_from_slice(&h.encode());
        // Write-fault every page here, not on the application thread: pages
        // of a shared file mapping start write-protected (the kernel tracks
        // their dirtying), and each first write costs a page fault into the
        // file system, microseconds, once per 4 KiB of records.
        for page in (0..cap).step_by(PAGE) {
            // SAFETY: inside the mapping; rewrites the zero already there.
            unsafe { core::ptr::write_volatile(map.as_mut_ptr().add(page), map[page]) };
        }
        Ok(Region { map, offset })
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
        Self::seal_bytes(&mut region.map, used);
        self.account(used);
        self.release_tail(region.offset, region.capacity(), used);
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
                    let mut ok = true;
                    for _ in 0..2 {
                        match self.alloc(first) {
                            Ok(r) => ok &= to_thread.send(r).is_ok(),
                            Err(e) => {
                                self.totals.error.get_or_insert(e);
                                ok = false;
                            }
                        }
                    }
                    // Dropping the sender of a thread we cannot serve wakes it
                    // with an error instead of leaving it waiting.
                    if ok {
                        self.threads.push(ThreadEntry {
                            link,
                            to_thread,
                            spares,
                            next_size: (first * 2).min(self.max_buffer),
                        });
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
                        match self.alloc(size) {
                            Ok(r) => {
                                if let Some(t) =
                                    self.threads.iter().find(|t| t.link.index == thread)
                                {
                                    let _ = t.to_thread.send(r);
                                }
                            }
                            Err(e) => {
                                self.totals.error.get_or_insert(e);
                                self.threads.retain(|t| t.link.index != thread);
                            }
                        }
                    }
                    self.seal(region, used);
                    if last {
                        // A thread that is done: its unused spare is sealed empty.
                        if let Some(i) = self.threads.iter().position(|t| t.link.index == thread) {
                            let t = self.threads.remove(i);
                            while let Ok(spare) = t.spares.try_recv() {
                                self.seal(spare, 0);
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
