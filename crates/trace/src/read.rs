//! Reading a trace directory into memory.
//!
//! ```text
//!  DIR/rank-NNNNN.pmt ──► header JSON ──► function kinds, MPI constants
//!        │
//!        └─► chunk walk: first chunk offset, then + capacity, to end of file
//!              events chunk, sealed   crc32 of payload[..used] checked
//!              events chunk, open     (the run died) scanned to the first zero byte
//!              trailer chunk          meta::Trailer JSON; none = rank never finalized
//!        │
//!        └─► events chunks grouped by thread, sorted by seq, decoded by one
//!            ThreadDecoder per thread (Continuation records extend the
//!            previous record, even across a chunk boundary)
//! ```
//!
//! Files are read with positioned reads, one chunk at a time, so memory
//! follows the decoded records rather than the (mostly preallocated) files,
//! and no length field is trusted before it is checked against the file.
//!
//! Anything that makes a trace unreadable is a [`ReadError`]; anything that
//! only makes it partial (a rank that never finalized, an unsealed chunk
//! that stops making sense) is kept as a warning on the [`Rank`].

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use pmtrace_format::chunk::{ChunkHeader, ChunkKind, ChunkState, CHUNK_HEADER_LEN};
use pmtrace_format::coll::{Coll, Flow, Shape};
use pmtrace_format::meta::{Header, MpiConstants, Trailer};
use pmtrace_format::pending::PendingRecv;
use pmtrace_format::record::{self as fmt, CommDef, ThreadDecoder, CODE_CONTINUATION};
use pmtrace_format::{decode_file_header, rank_file_name, FormatError, Kind, FILE_PREFIX_LEN};

use crate::comm::{Comm, Comms};
use crate::error::ReadError;
use crate::model::{self, Call, Events, Payload, Record};
use crate::ops::OpTable;

/// Where one record lives: world rank, thread index, position in the
/// thread's record list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventRef {
    pub rank: u32,
    pub thread: u32,
    /// A thread holds fewer than 2^32 records (`model::MAX_EVENTS`).
    pub index: u32,
}

impl EventRef {
    /// The record's position in its thread's `Events`.
    pub fn pos(&self) -> usize {
        self.index as usize
    }
}

/// Where each operation of a rank completed, by operation id
/// (`Rank::completions`).
pub type Completions = OpTable<EventRef>;

/// The records of one application thread, in order.
#[derive(Debug, Clone)]
pub struct Thread {
    /// The thread index of the chunk headers (and of operation ids).
    pub index: u32,
    /// OS thread id, from the thread's `DefThread` record or the trailer.
    pub tid: Option<u64>,
    pub records: Events,
    /// Vector clocks of received piggybacks (see `pmtrace_format::record::Pb`),
    /// `world_size` entries each; empty unless the trace has vector clocks.
    pub vcs: Vec<u64>,
}

/// What [`Rank::coll`] holds for a function that is no collective.
const NOT_A_COLLECTIVE: Coll = Coll {
    shape: Shape::NToN,
    flow: Flow::Unordered,
};

/// One rank's file, decoded.
#[derive(Debug, Clone)]
pub struct Rank {
    pub rank: u32,
    pub file_name: String,
    /// Size of the rank file on disk.
    pub file_bytes: u64,
    /// Payload bytes of the events chunks (what the records take).
    pub payload_bytes: u64,
    /// Events chunks in the file, empty ones included.
    pub chunks: u64,
    pub header: Header,
    /// Kind of each function of `header.functions`, by function id.
    pub kinds: Vec<Kind>,
    /// Shape and flow of each collective function, by function id (see
    /// [`Rank::coll`]).
    colls: Vec<Coll>,
    /// Written at `MPI_Finalize`; `None` if the rank never got there.
    pub trailer: Option<Trailer>,
    /// Threads sorted by index.
    pub threads: Vec<Thread>,
    /// Communicator definitions by rank-local index, each list in time
    /// order (an index may be reused after `MPI_Comm_free`).
    comms: BTreeMap<u32, Vec<(u64, CommDef)>>,
    /// Things that make this rank's data partial, one line each.
    pub warnings: Vec<String>,
}

impl Rank {
    /// Whether the rank reached `MPI_Finalize` (its trailer was written).
    pub fn complete(&self) -> bool {
        self.trailer.is_some()
    }

    pub fn function_name(&self, func: u32) -> &str {
        self.header
            .functions
            .get(func as usize)
            .map_or("?", |f| f.name.as_str())
    }

    /// The kind of function `func`; the reader guarantees every decoded
    /// call's `func` is in range.
    pub fn kind(&self, func: u32) -> Kind {
        self.kinds[func as usize]
    }

    /// The shape and flow of collective function `func`, as the header
    /// gives them or (older traces) as its name says. Meaningless for a
    /// function that is no collective.
    pub fn coll(&self, func: u32) -> Coll {
        self.colls[func as usize]
    }

    /// The definition of communicator `index` in force at time `t`: the
    /// latest one made at or before `t`, else the earliest one.
    pub fn comm_at(&self, index: u32, t: u64) -> Option<&CommDef> {
        let defs = self.comms.get(&index)?;
        defs.iter()
            .rev()
            .find(|(td, _)| *td <= t)
            .or(defs.first())
            .map(|(_, d)| d)
    }

    /// Every communicator definition of this rank.
    pub fn comm_defs(&self) -> impl Iterator<Item = &CommDef> {
        self.comms.values().flatten().map(|(_, d)| d)
    }

    /// The call that completed each operation id (a `Wait`/`Test` family
    /// record listing it); the last one if several did.
    pub fn completions(&self) -> Completions {
        let mut done_at = Completions::new(self.events() as usize);
        for (at, c) in self.payload_calls_of(|k| k == Kind::Complete) {
            if let Payload::Complete { done } = c.payload {
                for op in done.iter().filter_map(|d| d.op) {
                    done_at.insert(op, at);
                }
            }
        }
        done_at
    }

    /// The records that are MPI calls.
    pub fn calls(&self) -> impl Iterator<Item = (EventRef, Call<'_>)> {
        self.calls_where(Events::is_call)
    }

    /// The calls whose record passes `keep`.
    fn calls_where(
        &self,
        keep: fn(&Events, usize) -> bool,
    ) -> impl Iterator<Item = (EventRef, Call<'_>)> {
        self.threads.iter().flat_map(move |th| {
            (0..th.records.len())
                .filter(move |&index| keep(&th.records, index))
                .map(move |index| {
                    let at = EventRef {
                        rank: self.rank,
                        thread: th.index,
                        index: index as u32,
                    };
                    (at, th.records.call(index).expect("a call"))
                })
        })
    }

    /// The call at `at` (a record of this rank), if it is one.
    pub fn call_at(&self, at: EventRef) -> Option<Call<'_>> {
        let records = &self.thread(at.thread)?.records;
        (at.pos() < records.len()).then(|| records.call(at.pos()))?
    }

    /// The calls with a payload: every call that sends, receives, starts,
    /// completes, or names a communicator (no `Payload::None`).
    pub fn payload_calls(&self) -> impl Iterator<Item = (EventRef, Call<'_>)> {
        self.calls_where(Events::has_payload)
    }

    /// The calls with a payload whose function's kind passes `keep`, each
    /// decoded only if it does.
    pub fn payload_calls_of<'a>(
        &'a self,
        keep: impl Fn(Kind) -> bool + Copy + 'a,
    ) -> impl Iterator<Item = (EventRef, Call<'a>)> + 'a {
        self.threads
            .iter()
            .flat_map(move |th| self.thread_payload_calls_of(th, keep))
    }

    /// [`Rank::payload_calls_of`] of one of this rank's threads.
    pub fn thread_payload_calls_of<'a>(
        &'a self,
        th: &'a Thread,
        keep: impl Fn(Kind) -> bool + Copy + 'a,
    ) -> impl Iterator<Item = (EventRef, Call<'a>)> + 'a {
        let ev = &th.records;
        (0..ev.len())
            .filter(move |&i| ev.has_payload(i) && ev.func(i).is_some_and(|f| keep(self.kind(f))))
            .map(move |index| {
                let at = EventRef {
                    rank: self.rank,
                    thread: th.index,
                    index: index as u32,
                };
                (at, ev.call(index).expect("a call"))
            })
    }

    /// Number of MPI calls recorded.
    pub fn events(&self) -> u64 {
        self.threads
            .iter()
            .map(|th| {
                (0..th.records.len())
                    .filter(|&i| th.records.is_call(i))
                    .count() as u64
            })
            .sum()
    }

    /// The position in `threads` of thread `index`, which must exist.
    pub fn thread_slot(&self, index: u32) -> usize {
        self.threads
            .binary_search_by_key(&index, |t| t.index)
            .expect("a thread of this rank")
    }

    pub fn thread(&self, index: u32) -> Option<&Thread> {
        self.threads
            .binary_search_by_key(&index, |t| t.index)
            .ok()
            .map(|i| &self.threads[i])
    }
}

/// A whole trace directory, decoded, with communicators resolved.
#[derive(Debug, Clone)]
pub struct Trace {
    pub dir: PathBuf,
    pub world_size: u32,
    /// World rank of `ranks[0]`: 0 for a whole trace; a block's first rank
    /// for a block of it ([`Trace::open_block`]).
    pub first: u32,
    /// Indexed by world rank less `first`.
    pub ranks: Vec<Rank>,
    pub comms: Comms,
    /// Trace-wide problems that do not stop analysis (see also each
    /// rank's `warnings`).
    pub warnings: Vec<String>,
}

impl Trace {
    /// Reads every rank file of `dir`. Ranks `0..world_size` must all be
    /// present; a rank that never finalized is read as far as it got.
    pub fn open(dir: impl AsRef<Path>) -> Result<Trace, ReadError> {
        Trace::open_ranks(dir.as_ref(), None)
    }

    /// Reads the rank files of world ranks `block` only: one process's
    /// share of a trace read in parallel. Every rank of the block (less
    /// those past the world size) must be present. Communicators are
    /// resolved from the block's definitions alone: a caller that needs
    /// the member lists other ranks wrote resolves [`Trace::comms`] anew
    /// from every rank's definitions.
    pub fn open_block(dir: impl AsRef<Path>, block: Range<u32>) -> Result<Trace, ReadError> {
        Trace::open_ranks(dir.as_ref(), Some(block))
    }

    fn open_ranks(dir: &Path, block: Option<Range<u32>>) -> Result<Trace, ReadError> {
        let dir = dir.to_path_buf();
        let mut files = rank_files(&dir)?;
        let all = files.len() as u32;
        if let Some(block) = &block {
            // The world size is in every header: rank 0's decides.
            let world_size = match files.get(&0) {
                Some(path) => RankFile::open(path, 0)?.header()?.0.world_size,
                None => all,
            };
            files.retain(|r, _| block.contains(r));
            if let Some(missing) = block
                .clone()
                .find(|r| *r < world_size && !files.contains_key(r))
            {
                return Err(ReadError::MissingRank {
                    dir,
                    file: rank_file_name(missing),
                    world_size,
                });
            }
            if files.is_empty() {
                return Ok(Trace {
                    dir,
                    world_size,
                    first: block.start.min(world_size),
                    ranks: Vec::new(),
                    comms: Comms::resolve(world_size, [], &mut Vec::new()),
                    warnings: Vec::new(),
                });
            }
        }
        let first = *files.keys().next().expect("some rank file");
        // Each file is closed once its header is read and opened again to
        // decode it: a job has more ranks (65,536) than a process may have
        // open files (often 1,024 to 20,000).
        let mut headers = Vec::with_capacity(files.len());
        for (rank, path) in &files {
            let file = RankFile::open(path, *rank)?;
            let (header, first_chunk) = file.header()?;
            if header.rank != *rank {
                return Err(ReadError::corrupt(
                    &file.name,
                    format!("header says rank {}", header.rank),
                ));
            }
            headers.push((file.name, path, header, first_chunk));
        }
        let world_size = headers[0].2.world_size;
        if block.is_none() && first != 0 {
            return Err(ReadError::MissingRank {
                dir,
                file: rank_file_name(0),
                world_size,
            });
        }
        for (name, _, header, _) in &headers {
            if header.world_size != world_size {
                return Err(ReadError::corrupt(
                    name,
                    format!(
                        "world size {} differs from rank 0's {world_size}",
                        header.world_size
                    ),
                ));
            }
            if header.rank >= world_size {
                return Err(ReadError::corrupt(
                    name,
                    format!("rank beyond world size {world_size}"),
                ));
            }
        }
        let wanted = block.clone().unwrap_or(0..world_size);
        if let Some(missing) =
            (wanted.start..wanted.end.min(world_size)).find(|r| !files.contains_key(r))
        {
            return Err(ReadError::MissingRank {
                dir,
                file: rank_file_name(missing),
                world_size,
            });
        }
        // Each rank file decodes on its own: in parallel, in rank order.
        use rayon::prelude::*;
        let ranks = headers
            .into_par_iter()
            .map(|(_, path, header, first_chunk)| {
                RankFile::open(path, header.rank)?.read(header, first_chunk)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Result<Vec<Rank>, ReadError>>()?;
        let mut warnings = Vec::new();
        let constants = ranks[0].header.constants;
        for r in &ranks {
            if r.header.constants != constants {
                warnings.push(format!(
                    "{}: MPI constants differ from rank 0's",
                    r.file_name
                ));
            }
        }
        let comms = Comms::resolve(
            world_size,
            ranks
                .iter()
                .flat_map(|r| r.comm_defs().map(move |d| (r.rank, d))),
            &mut warnings,
        );
        Ok(Trace {
            dir,
            world_size,
            first,
            ranks,
            comms,
            warnings,
        })
    }

    /// The MPI library's special values (`MPI_ANY_SOURCE`, …) as rank 0 recorded them.
    pub fn constants(&self) -> MpiConstants {
        self.ranks[0].header.constants
    }

    /// World rank `rank`, if this trace (or block) holds it.
    pub fn rank(&self, rank: u32) -> Option<&Rank> {
        self.ranks.get(rank.checked_sub(self.first)? as usize)
    }

    /// World rank `rank`, which this trace (or block) must hold.
    pub fn held(&self, rank: u32) -> &Rank {
        self.rank(rank).expect("a rank this trace holds")
    }

    /// The world ranks this trace (or block) holds.
    pub fn block(&self) -> Range<u32> {
        self.first..self.first + self.ranks.len() as u32
    }

    /// The communicator that world rank `rank` called `index` at time `t`.
    pub fn comm_at(&self, rank: u32, index: u32, t: u64) -> Option<&Comm> {
        let def = self.rank(rank)?.comm_at(index, t)?;
        self.comms.get(def.global_id)
    }

    /// The world rank of `comm_rank` in rank `rank`'s communicator `index`
    /// (its latest definition); for an intercommunicator, a rank of the
    /// remote group.
    pub fn to_world(&self, rank: u32, comm_index: u32, comm_rank: u32) -> Option<u32> {
        self.comm_at(rank, comm_index, u64::MAX)?
            .to_world(rank, comm_rank)
    }

    pub fn record(&self, at: EventRef) -> Option<Record<'_>> {
        let records = &self.rank(at.rank)?.thread(at.thread)?.records;
        (at.pos() < records.len()).then(|| records.get(at.pos()))
    }

    /// Number of MPI calls recorded over all ranks.
    pub fn events(&self) -> u64 {
        self.ranks.iter().map(Rank::events).sum()
    }

    /// World ranks that never reached `MPI_Finalize`.
    pub fn incomplete_ranks(&self) -> Vec<u32> {
        self.ranks
            .iter()
            .filter(|r| !r.complete())
            .map(|r| r.rank)
            .collect()
    }

    /// Every warning of the trace and its ranks, one line each.
    pub fn all_warnings(&self) -> Vec<String> {
        let mut out = self.warnings.clone();
        for r in &self.ranks {
            out.extend(r.warnings.iter().map(|w| format!("{}: {w}", r.file_name)));
        }
        out
    }
}

/// The world size of the trace in `dir`, from rank 0's file header.
pub fn world_size(dir: impl AsRef<Path>) -> Result<u32, ReadError> {
    let dir = dir.as_ref();
    let path = dir.join(rank_file_name(0));
    if !path.exists() {
        rank_files(dir)?;
        return Err(ReadError::MissingRank {
            dir: dir.to_path_buf(),
            file: rank_file_name(0),
            world_size: 0,
        });
    }
    Ok(RankFile::open(&path, 0)?.header()?.0.world_size)
}

/// The `rank-NNNNN.pmt` files of `dir`, by rank.
fn rank_files(dir: &Path) -> Result<BTreeMap<u32, PathBuf>, ReadError> {
    let io = |source| ReadError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(digits) = name
            .strip_prefix("rank-")
            .and_then(|n| n.strip_suffix(".pmt"))
        else {
            continue;
        };
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(rank) = digits.parse::<u32>() {
            if rank_file_name(rank) == name {
                files.insert(rank, entry.path());
            }
        }
    }
    if files.is_empty() {
        return Err(ReadError::NoRankFiles {
            dir: dir.to_path_buf(),
        });
    }
    Ok(files)
}

/// An open rank file, read piecewise.
/// What a trace holds, read from its files' headers, chunk headers and
/// trailers only (no record decoded): enough to size a verb before it
/// starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    pub ranks: u32,
    /// Events: the trailers' counts, and for a rank without a trailer its
    /// record bytes over [`Census::BYTES_PER_EVENT_GUESS`].
    pub events: u64,
    /// Bytes of records over all ranks.
    pub record_bytes: u64,
    /// Whether some rank's count is a guess (it never finalized).
    pub guessed: bool,
}

impl Census {
    /// Record bytes per event assumed where no trailer counts them: the
    /// smallest records' size, so that the guess errs high.
    pub const BYTES_PER_EVENT_GUESS: u64 = 4;
}

/// The [`Census`] of the trace in `dir`.
pub fn census(dir: impl AsRef<Path>) -> Result<Census, ReadError> {
    let mut c = Census::default();
    for (rank, path) in rank_files(dir.as_ref())? {
        let file = RankFile::open(&path, rank)?;
        let (_, first_chunk) = file.header()?;
        let mut bytes = 0;
        let mut events = None;
        for (at, h) in file.walk_chunks(first_chunk, &mut Vec::new())? {
            match h.kind {
                ChunkKind::Trailer if h.state == ChunkState::Sealed => {
                    let json = file.sealed_payload(at, &h)?;
                    let t: Trailer = serde_json::from_slice(&json).map_err(|e| {
                        ReadError::corrupt(&file.name, format!("trailer at offset {at}: {e}"))
                    })?;
                    events = Some(t.events);
                }
                ChunkKind::Events if h.thread != pmtrace_format::UNOWNED_THREAD => {
                    bytes += h.used;
                }
                _ => {}
            }
        }
        c.ranks += 1;
        c.record_bytes += bytes;
        c.events += events.unwrap_or_else(|| {
            c.guessed = true;
            bytes / Census::BYTES_PER_EVENT_GUESS
        });
    }
    Ok(c)
}

struct RankFile {
    file: File,
    path: PathBuf,
    name: String,
    len: u64,
    rank: u32,
}

impl RankFile {
    fn open(path: &Path, rank: u32) -> Result<RankFile, ReadError> {
        let io = |source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(RankFile {
            file,
            path: path.to_path_buf(),
            name: rank_file_name(rank),
            len,
            rank,
        })
    }

    /// Reads `n` bytes at `offset`; the caller has checked they lie inside the file.
    fn read_at(&self, offset: u64, n: u64) -> Result<Vec<u8>, ReadError> {
        debug_assert!(offset + n <= self.len);
        let mut buf = vec![0u8; n as usize];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| ReadError::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(buf)
    }

    fn header(&self) -> Result<(Header, u64), ReadError> {
        let prefix = self.read_at(0, self.len.min(FILE_PREFIX_LEN as u64))?;
        let json_len = match prefix.get(12..16) {
            Some(b) => u64::from(u32::from_le_bytes(b.try_into().expect("4 bytes"))),
            None => 0,
        };
        let bytes = self.read_at(0, self.len.min(FILE_PREFIX_LEN as u64 + json_len))?;
        let (header, first_chunk) =
            decode_file_header(&bytes).map_err(|e| ReadError::from_format(&self.name, e, None))?;
        Ok((header, first_chunk as u64))
    }

    fn read(self, header: Header, first_chunk: u64) -> Result<Rank, ReadError> {
        let name = self.name.clone();
        let kinds = header
            .functions
            .iter()
            .map(|f| {
                Kind::from_name(&f.kind).ok_or_else(|| {
                    ReadError::corrupt(
                        &name,
                        format!("unknown record kind {:?} for function {}", f.kind, f.name),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if kinds.len() > model::MAX_FUNCS {
            return Err(ReadError::corrupt(
                &name,
                format!("{} functions in the header", kinds.len()),
            ));
        }
        let colls = header
            .functions
            .iter()
            .zip(&kinds)
            .map(|(f, k)| match k {
                Kind::Coll | Kind::Icoll | Kind::CollInit => f.coll(),
                _ => NOT_A_COLLECTIVE,
            })
            .collect();
        let mut warnings = Vec::new();
        let chunks = self.walk_chunks(first_chunk, &mut warnings)?;

        let mut trailer = None;
        let mut by_thread: BTreeMap<u32, Vec<(u64, ChunkHeader)>> = BTreeMap::new();
        let mut payload_bytes = 0;
        let mut n_chunks = 0;
        for (at, h) in chunks {
            match h.kind {
                ChunkKind::Trailer => {
                    if h.state == ChunkState::Sealed {
                        let json = self.sealed_payload(at, &h)?;
                        let t: Trailer = serde_json::from_slice(&json).map_err(|e| {
                            ReadError::corrupt(&name, format!("trailer at offset {at}: {e}"))
                        })?;
                        trailer = Some(t);
                    }
                }
                // A spare buffer no thread used holds nothing.
                ChunkKind::Events if h.thread == pmtrace_format::UNOWNED_THREAD => {}
                ChunkKind::Events => {
                    n_chunks += 1;
                    payload_bytes += h.used;
                    by_thread.entry(h.thread).or_default().push((at, h));
                }
            }
        }

        let mut threads = Vec::with_capacity(by_thread.len());
        let single = by_thread.len() == 1;
        for (index, mut chunks) in by_thread {
            chunks.sort_by_key(|(_, h)| h.seq);
            for pair in chunks.windows(2) {
                let ((a, ha), (b, hb)) = (&pair[0], &pair[1]);
                if ha.seq == hb.seq {
                    return Err(ReadError::corrupt(
                        &name,
                        format!(
                            "thread {index} has two chunks numbered {} (offsets {a} and {b})",
                            ha.seq
                        ),
                    ));
                }
                if hb.seq != ha.seq + 1 {
                    warnings.push(format!(
                        "thread {index}: chunks {} to {} are missing (events lost)",
                        ha.seq + 1,
                        hb.seq - 1
                    ));
                }
            }
            let vc_len = if header.clocks == "vector" {
                header.world_size as usize
            } else {
                0
            };
            // A rank of one thread: its trailer's count sizes the columns
            // at once (never more than its bytes, each record taking one).
            let hint = match (&trailer, single) {
                (Some(t), true) => t.events.min(payload_bytes) as usize,
                _ => 0,
            };
            let (records, vcs) =
                self.decode_thread(index, &chunks, &kinds, vc_len, hint, &mut warnings)?;
            // Buffers that never got a record (spares, pooled buffers the
            // runtime marks with thread u32::MAX) are not threads.
            if !records.is_empty() {
                threads.push(Thread {
                    index,
                    tid: None,
                    records,
                    vcs,
                });
            }
        }
        for th in &mut threads {
            th.tid = th.records.first_tid().or_else(|| {
                trailer
                    .as_ref()?
                    .threads
                    .iter()
                    .find(|d| d.index == th.index)
                    .map(|d| d.tid)
            });
        }

        let mut comms: BTreeMap<u32, Vec<(u64, CommDef)>> = BTreeMap::new();
        for th in &threads {
            for (t, def) in th.records.defs() {
                comms.entry(def.index).or_default().push((t, def.clone()));
            }
        }
        for defs in comms.values_mut() {
            defs.sort_by_key(|(t, _)| *t);
        }

        let rank = Rank {
            rank: self.rank,
            file_name: name,
            file_bytes: self.len,
            payload_bytes,
            chunks: n_chunks,
            header,
            kinds,
            colls,
            trailer,
            threads,
            comms,
            warnings,
        };
        check_comm_indices(rank)
    }

    /// Offsets and headers of every chunk, in file order.
    fn walk_chunks(
        &self,
        first_chunk: u64,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<(u64, ChunkHeader)>, ReadError> {
        let mut chunks = Vec::new();
        let mut at = first_chunk;
        if at > self.len {
            return Err(ReadError::Truncated {
                file: self.name.clone(),
                what: "file header ends early".into(),
            });
        }
        while at < self.len {
            if self.len - at < CHUNK_HEADER_LEN as u64 {
                return Err(ReadError::Truncated {
                    file: self.name.clone(),
                    what: format!("chunk at offset {at} ends early"),
                });
            }
            let raw = self.read_at(at, CHUNK_HEADER_LEN as u64)?;
            if raw.iter().all(|&b| b == 0) {
                // Space the runtime reserved but never handed out (a run
                // that died while growing the file).
                warnings.push(format!(
                    "unwritten space from offset {at} to the end of the file"
                ));
                break;
            }
            let h = ChunkHeader::decode(&raw, at as usize, self.len as usize)
                .map_err(|e| ReadError::from_format(&self.name, e, None))?;
            chunks.push((at, h));
            at += h.capacity;
        }
        Ok(chunks)
    }

    /// records[..used] of a sealed chunk, checksum verified.
    fn sealed_payload(&self, at: u64, h: &ChunkHeader) -> Result<Vec<u8>, ReadError> {
        let payload = self.read_at(at + h.records_offset(), h.used)?;
        if pmtrace_format::payload_crc(&payload) != h.crc {
            return Err(ReadError::corrupt(
                &self.name,
                format!("chunk checksum mismatch at offset {at}"),
            ));
        }
        Ok(payload)
    }

    fn decode_thread(
        &self,
        thread: u32,
        chunks: &[(u64, ChunkHeader)],
        kinds: &[Kind],
        vc_len: usize,
        hint: usize,
        warnings: &mut Vec<String>,
    ) -> Result<(Events, Vec<u64>), ReadError> {
        let mut decoder = ThreadDecoder::with_vc_len(thread, vc_len);
        let mut records = Staged::default();
        records.events.reserve(hint);
        for (at, h) in chunks {
            let sealed = h.state == ChunkState::Sealed;
            let data = if sealed {
                self.sealed_payload(*at, h)?
            } else {
                self.read_at(at + h.records_offset(), h.records_capacity())?
            };
            decoder.start_chunk(h.base_ns);
            let mut pos = 0;
            loop {
                let start = pos;
                match decode_one(&mut decoder, &data, &mut pos, kinds, &mut records) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.append_pending(
                            &mut decoder,
                            *at,
                            h,
                            pos,
                            kinds,
                            &mut records,
                            warnings,
                        )?;
                        break;
                    }
                    Err(e) => {
                        let offset = at + h.records_offset() + start as u64;
                        if sealed {
                            // The checksum matched, so the writer wrote this.
                            let what = match e {
                                FormatError::Truncated(_) => {
                                    "record runs past the chunk's fill".to_owned()
                                }
                                other => other.to_string(),
                            };
                            return Err(ReadError::corrupt(
                                &self.name,
                                format!("{what} (thread {thread}, chunk at offset {at}, record at offset {offset})"),
                            ));
                        }
                        warnings.push(format!(
                            "thread {thread}: unsealed chunk at offset {at} stops making sense at offset {offset} ({e}); the thread's later records are dropped"
                        ));
                        return Ok((records.finish(), decoder.vc_arena));
                    }
                }
            }
        }
        Ok((records.finish(), decoder.vc_arena))
    }
}

impl RankFile {
    /// Appends the receive a chunk's pending slot holds when the chunk's
    /// records end at `end`, exactly where it belongs (see
    /// `pmtrace_format::pending`): its thread stopped before encoding it.
    #[allow(clippy::too_many_arguments)]
    fn append_pending(
        &self,
        decoder: &mut ThreadDecoder,
        at: u64,
        h: &ChunkHeader,
        end: usize,
        kinds: &[Kind],
        records: &mut Staged,
        warnings: &mut Vec<String>,
    ) -> Result<(), ReadError> {
        if h.slot == 0 {
            return Ok(());
        }
        let slot = self.read_at(at + CHUNK_HEADER_LEN as u64, u64::from(h.slot))?;
        let Some(p) = PendingRecv::load(&slot, end as u64) else {
            return Ok(());
        };
        match decoder.pending(&p, kinds) {
            Ok(r) => records
                .push(r)
                .map_err(|e| ReadError::from_format(&self.name, e, None))?,
            Err(e) => warnings.push(format!(
                "thread {}: the pending receive of the chunk at offset {at} is unreadable ({e}); dropped",
                decoder.thread
            )),
        }
        Ok(())
    }
}

/// A thread's records as they decode: a record with a list stays apart
/// until the next begins, since a continuation record may still extend it.
#[derive(Default)]
struct Staged {
    events: Events,
    last: Option<fmt::Record>,
}

impl Staged {
    /// Takes a decoded record; only a record with a list waits as `last`.
    fn push(&mut self, r: fmt::Record) -> Result<(), FormatError> {
        if self.events.len() >= model::MAX_EVENTS - 2 {
            return Err(FormatError::Corrupt(format!(
                "more than {} records in one thread",
                model::MAX_EVENTS - 2
            )));
        }
        if let Some(prev) = self.last.take() {
            self.events.push(prev);
        }
        let listed = matches!(
            &r,
            fmt::Record::DefComm { .. }
                | fmt::Record::Call(fmt::Call {
                    payload: fmt::Payload::Start { .. } | fmt::Payload::Complete { .. },
                    ..
                })
        );
        if listed {
            self.last = Some(r);
        } else {
            self.events.push(r);
        }
        Ok(())
    }

    fn finish(mut self) -> Events {
        if let Some(last) = self.last.take() {
            self.events.push(last);
        }
        self.events.shrink_to_fit();
        self.events
    }
}

/// Decodes the record at `pos` into `records`; `Ok(false)` at the end of the data.
fn decode_one(
    decoder: &mut ThreadDecoder,
    data: &[u8],
    pos: &mut usize,
    kinds: &[Kind],
    records: &mut Staged,
) -> Result<bool, FormatError> {
    match ThreadDecoder::peek_code(data, *pos)? {
        None => Ok(false),
        Some(CODE_CONTINUATION) => {
            match records.last.as_mut() {
                Some(last) => decoder.continuation(data, pos, last)?,
                // After a record without a list: the decoder says so.
                None if !records.events.is_empty() => {
                    let mut none = fmt::Record::BufferWait {
                        t_start: 0,
                        t_end: 0,
                    };
                    decoder.continuation(data, pos, &mut none)?
                }
                None => {
                    return Err(FormatError::Corrupt(
                        "continuation record before any list record".into(),
                    ))
                }
            }
            Ok(true)
        }
        Some(_) => {
            records.push(decoder.record(data, pos, kinds)?)?;
            Ok(true)
        }
    }
}

/// The rank-local communicator indices a call names.
pub fn comm_indices(p: &Payload<'_>) -> impl Iterator<Item = u32> {
    let (a, b) = match *p {
        Payload::Send { comm, .. }
        | Payload::Recv { comm, .. }
        | Payload::Sendrecv { comm, .. }
        | Payload::Probe { comm, .. }
        | Payload::Coll { comm, .. }
        | Payload::Abort { comm, .. }
        | Payload::CommFree { comm } => (Some(comm), None),
        Payload::CommNew { parent, comm } => (parent, comm),
        _ => (None, None),
    };
    a.into_iter().chain(b)
}

/// Every communicator index a call uses must have a definition. A rank that
/// died may miss the definition of its newest communicator: a warning then.
fn check_comm_indices(mut rank: Rank) -> Result<Rank, ReadError> {
    let mut undefined = None;
    for (_, call) in rank.payload_calls() {
        if let Some(index) = comm_indices(&call.payload).find(|i| !rank.comms.contains_key(i)) {
            undefined = Some((
                index,
                rank.function_name(call.func).to_owned(),
                call.t_start,
            ));
            break;
        }
    }
    if let Some((index, func, t)) = undefined {
        let what =
            format!("communicator index {index} is used ({func} at {t} ns) but never defined");
        if rank.complete() {
            return Err(ReadError::corrupt(&rank.file_name, what));
        }
        rank.warnings.push(what);
    }
    Ok(rank)
}
