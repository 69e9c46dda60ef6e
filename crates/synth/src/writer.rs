//! A trace writer: rank files from calls described with the decoder's own
//! types, for the simulator ([`crate::write`]) and for tests (through
//! `pmtrace-fixture`).
//!
//! [`TraceBuilder`] writes rank files the way the runtime does, through the
//! format crate's own encoders: a file header, events chunks per thread
//! (interleaved in the file, split where a record would not fit, list
//! records continued with Continuation records), one empty spare chunk per
//! thread, one open chunk never handed to any thread, and a trailer. Tests describe calls with the decoder's own types
//! ([`Payload`], [`Status`], [`CommDef`]) and absolute times; the builder
//! works out gaps, operation ids, references and collective sequence codes.
//!
//! ```
//! use pmtrace_synth::writer::{self as fixture, TraceBuilder};
//! let mut tb = TraceBuilder::new(2);
//! for r in 0..2 {
//!     tb.rank(r).define_world_and_self(0);
//! }
//! tb.rank(0).thread(0).call("MPI_Send", 100, 150, fixture::send(1, 7, 0, 8));
//! tb.rank(1).thread(0).call("MPI_Recv", 90, 200, fixture::recv(0, 7, 0, 8, fixture::status(0, 7, 8)));
//! let dir = std::env::temp_dir().join(format!("pmtrace-doc-{}", std::process::id()));
//! tb.write(&dir).unwrap();
//! assert_eq!(pmtrace_trace::Trace::open(&dir).unwrap().events(), 2);
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! Its callers build what they describe: an unknown function name, time
//! going backwards or a payload that does not fit the function's kind is a
//! bug in the caller, and panics.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use pmtrace_format::chunk::{ChunkHeader, ChunkKind, ChunkState, CHUNK_HEADER_LEN, PAGE};
use pmtrace_format::coll::Coll;
use pmtrace_format::meta::{
    FunctionDef, Header, MpiConstants, OffsetSample, RunInfo, ThreadDef, TimerDef, Trailer,
};
use pmtrace_format::pending::{PendingRecv, PENDING_AT, PENDING_LEN};
use pmtrace_format::record::{
    coll_seq_code, op_id, op_ref, put_head, put_members, put_pb_scalars, root_code, Call, CommDef,
    Completion, Payload, PbState, Record, CODE_BUFFER_WAIT, CODE_CONTINUATION, CODE_DEF_COMM,
    CODE_DEF_THREAD, FIRST_FUNCTION_CODE, LIST_BATCH, ST_BYTES, ST_CANCELLED, ST_EMPTY, ST_NONE,
    ST_PIGGYBACK, ST_SOURCE, ST_TAG,
};
use pmtrace_format::varint::{put_u, Sink, MAX_VARINT};
use pmtrace_format::{encode_file_header, payload_crc, rank_file_name, Kind, Status};

use pmtrace_trace::comm::{self_comm_id, WORLD_ID};

/// The function table every fixture rank declares, by function id: name,
/// kind, and a collective's shape as `wrappers/mpi.wrap` names it.
pub const FUNCTIONS: &[(&str, Kind, &str)] = &[
    ("MPI_Init", Kind::Init, ""),
    ("MPI_Finalize", Kind::Finalize, ""),
    ("MPI_Comm_rank", Kind::Plain, ""),
    ("MPI_Send", Kind::Send, ""),
    ("MPI_Ssend", Kind::Send, ""),
    ("MPI_Isend", Kind::Isend, ""),
    ("MPI_Send_init", Kind::SendInit, ""),
    ("MPI_Recv", Kind::Recv, ""),
    ("MPI_Irecv", Kind::Irecv, ""),
    ("MPI_Recv_init", Kind::RecvInit, ""),
    ("MPI_Sendrecv", Kind::Sendrecv, ""),
    ("MPI_Probe", Kind::Probe, ""),
    ("MPI_Iprobe", Kind::Iprobe, ""),
    ("MPI_Mprobe", Kind::Mprobe, ""),
    ("MPI_Improbe", Kind::Improbe, ""),
    ("MPI_Mrecv", Kind::Mrecv, ""),
    ("MPI_Imrecv", Kind::Imrecv, ""),
    ("MPI_Start", Kind::Start, ""),
    ("MPI_Startall", Kind::Start, ""),
    ("MPI_Wait", Kind::Complete, ""),
    ("MPI_Waitall", Kind::Complete, ""),
    ("MPI_Test", Kind::Complete, ""),
    ("MPI_Cancel", Kind::Cancel, ""),
    ("MPI_Request_free", Kind::Freed, ""),
    ("MPI_Barrier", Kind::Coll, "barrier"),
    ("MPI_Bcast", Kind::Coll, "bcast"),
    ("MPI_Allreduce", Kind::Coll, "allreduce"),
    ("MPI_Ibarrier", Kind::Icoll, "barrier"),
    ("MPI_Comm_split", Kind::CommNew, ""),
    ("MPI_Comm_free", Kind::CommFree, ""),
    ("MPI_Init_thread", Kind::InitThread, ""),
    ("MPI_Abort", Kind::Abort, ""),
    ("MPI_Pcontrol", Kind::Pcontrol, ""),
    ("MPI_Reduce", Kind::Coll, "reduce"),
    ("MPI_Scan", Kind::Coll, "scan"),
    ("MPI_Exscan", Kind::Coll, "exscan"),
    ("MPI_Isendrecv", Kind::Isendrecv, ""),
    ("MPI_Allreduce_init", Kind::CollInit, "allreduce"),
    ("MPI_Psend_init", Kind::PsendInit, ""),
    ("MPI_Precv_init", Kind::PrecvInit, ""),
    ("MPI_Alltoall", Kind::Coll, "alltoall"),
    ("MPI_Gather", Kind::Coll, "gather"),
    ("MPI_Allgatherv", Kind::Coll, "allgatherv"),
    ("MPI_Neighbor_alltoall", Kind::Coll, "neighbor_alltoall"),
    ("MPI_Comm_idup", Kind::Icoll, "comm_idup"),
    ("MPI_Iallreduce", Kind::Icoll, "allreduce"),
    ("pmtrace_phase_begin", Kind::Phase, ""),
    ("pmtrace_phase_end", Kind::Phase, ""),
];

pub(crate) fn function_id(name: &str) -> u32 {
    FUNCTIONS
        .iter()
        .position(|(n, ..)| *n == name)
        .unwrap_or_else(|| panic!("fixture: {name} is not in fixture::FUNCTIONS")) as u32
}

/// A status with source, tag and byte count all written.
pub fn status(source: i32, tag: i32, bytes: u64) -> Status {
    Status {
        source: Some(source),
        tag: Some(tag),
        bytes: Some(bytes),
        ..Status::default()
    }
}

/// The status of a completed operation that is not a receive.
pub fn no_status() -> Status {
    Status {
        none: true,
        ..Status::default()
    }
}

/// The status of a test or probe that found nothing.
pub fn empty_status() -> Status {
    Status {
        empty: true,
        ..Status::default()
    }
}

/// The status of a cancelled operation.
pub fn cancelled_status() -> Status {
    Status {
        cancelled: true,
        ..Status::default()
    }
}

/// Payload of send, isend and send_init.
pub fn send(peer: i32, tag: i32, comm: u32, bytes: u64) -> Payload {
    Payload::Send {
        peer,
        tag,
        comm,
        bytes,
        op: None,
    }
}

/// Payload of a blocking receive.
pub fn recv(src: i32, tag: i32, comm: u32, posted: u64, status: Status) -> Payload {
    Payload::Recv {
        src,
        tag,
        comm,
        posted,
        status: Some(status),
        op: None,
    }
}

/// Payload of irecv and recv_init.
pub fn irecv(src: i32, tag: i32, comm: u32, posted: u64) -> Payload {
    Payload::Recv {
        src,
        tag,
        comm,
        posted,
        status: None,
        op: None,
    }
}

/// Payload of a completion call (wait, test and their -all/-any/-some forms).
pub fn complete(items: &[(u64, Status)]) -> Payload {
    Payload::Complete {
        done: items
            .iter()
            .map(|&(op, status)| Completion {
                op: Some(op),
                status,
            })
            .collect(),
    }
}

/// Payload of start/startall for the given persistent requests.
pub fn start(inits: &[u64]) -> Payload {
    Payload::Start {
        started: inits.iter().map(|&i| (Some(i), 0)).collect(),
    }
}

/// Payload of a collective; `root` is `None` for collectives without one.
pub fn coll(comm: u32, root: Option<i32>, sent: u64, recvd: u64, seq: u64) -> Payload {
    Payload::Coll {
        comm,
        root,
        sent,
        recvd,
        seq,
        op: None,
    }
}

/// `MPI_COMM_WORLD` as world rank `rank` defines it: index 0, no member list.
pub fn world_def(rank: u32, world_size: u32) -> CommDef {
    CommDef {
        index: 0,
        global_id: WORLD_ID,
        inter: false,
        size: world_size,
        rank,
        remote_size: 0,
        members: vec![],
    }
}

/// `MPI_COMM_SELF` of world rank `rank`: index 1.
pub fn self_def(rank: u32) -> CommDef {
    CommDef {
        index: 1,
        global_id: self_comm_id(rank),
        inter: false,
        size: 1,
        rank: 0,
        remote_size: 0,
        members: vec![],
    }
}

/// A whole trace directory under construction.
#[derive(Debug, Clone)]
pub struct TraceBuilder {
    world_size: u32,
    constants: MpiConstants,
    chunk_capacity: usize,
    list_batch: usize,
    ranks: BTreeMap<u32, RankBuilder>,
}

impl TraceBuilder {
    /// A trace of `world_size` ranks with Open MPI's constants and one-page chunks.
    pub fn new(world_size: u32) -> Self {
        TraceBuilder {
            world_size,
            constants: MpiConstants::OPEN_MPI,
            chunk_capacity: PAGE,
            list_batch: LIST_BATCH,
            ranks: BTreeMap::new(),
        }
    }

    /// The MPI constants the headers declare (for ranks created afterwards).
    pub fn constants(mut self, constants: MpiConstants) -> Self {
        self.constants = constants;
        self
    }

    /// Chunk size in bytes, a page multiple (for ranks created afterwards).
    pub fn chunk_capacity(mut self, bytes: usize) -> Self {
        assert!(
            bytes >= PAGE && bytes.is_multiple_of(PAGE),
            "fixture: chunk capacity must be a page multiple"
        );
        self.chunk_capacity = bytes;
        self
    }

    /// Most list items per record part (for ranks created afterwards).
    pub fn list_batch(mut self, n: usize) -> Self {
        assert!((1..=LIST_BATCH).contains(&n));
        self.list_batch = n;
        self
    }

    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// Rank `rank`, created on first use.
    pub fn rank(&mut self, rank: u32) -> &mut RankBuilder {
        let (ws, constants, cap, batch) = (
            self.world_size,
            self.constants,
            self.chunk_capacity,
            self.list_batch,
        );
        self.ranks
            .entry(rank)
            .or_insert_with(|| RankBuilder::new(rank, ws, constants, cap, batch))
    }

    /// A builder of rank `rank` with this trace's settings that the trace
    /// does not keep: for traces too large to hold, written rank by rank
    /// with [`RankBuilder::write_into`].
    pub fn detached_rank(&self, rank: u32) -> RankBuilder {
        RankBuilder::new(
            rank,
            self.world_size,
            self.constants,
            self.chunk_capacity,
            self.list_batch,
        )
    }

    /// Creates `dir` (and parents) and writes every rank file into it.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for rb in self.ranks.values() {
            rb.write_into(dir)?;
        }
        Ok(())
    }
}

/// One rank file under construction.
#[derive(Debug, Clone)]
pub struct RankBuilder {
    header: Header,
    chunk_capacity: usize,
    list_batch: usize,
    threads: BTreeMap<u32, ThreadBuilder>,
    finalized: bool,
    /// The trailer's offset measured inside `MPI_Finalize`.
    offset_finalize: Option<OffsetSample>,
    /// The trailer's CLOCK_MONOTONIC readings at init and finalize.
    monotonic: Option<(u64, u64)>,
}

impl RankBuilder {
    fn new(
        rank: u32,
        world_size: u32,
        constants: MpiConstants,
        chunk_capacity: usize,
        list_batch: usize,
    ) -> Self {
        let header = Header {
            library_version: "0.0.0-fixture".into(),
            mpi_library: "fixture MPI".into(),
            rank,
            world_size,
            hostname: format!("node{rank}"),
            pid: 1000 + rank,
            timer: TimerDef {
                source: "monotonic".into(),
                tsc_hz: None,
                resolution_ns: 1.0,
            },
            start_ns: 0,
            thread_level: 0,
            constants,
            functions: FUNCTIONS
                .iter()
                .map(|&(n, k, wrap)| {
                    let coll = Coll::of_wrap(wrap);
                    FunctionDef {
                        shape: coll.map(|c| c.shape),
                        flow: coll.map(|c| c.flow),
                        ..FunctionDef::new(n, k.name())
                    }
                })
                .collect(),
            run: (rank == 0).then(|| RunInfo {
                command_line: vec!["./fixture".into()],
                world_size,
                start_unix_ns: 1_700_000_000_000_000_000,
                config: BTreeMap::new(),
            }),
            clocks: "none".into(),
            clock_sim: None,
            offset_init: None,
        };
        RankBuilder {
            header,
            chunk_capacity,
            list_batch,
            threads: BTreeMap::new(),
            finalized: true,
            offset_finalize: None,
            monotonic: None,
        }
    }

    /// The file header, for fields the builder leaves at their defaults
    /// (host name, clock mode, simulated clock, offset at init, ...).
    pub fn header_mut(&mut self) -> &mut Header {
        &mut self.header
    }

    /// The clock offset the trailer says was measured inside `MPI_Finalize`.
    pub fn offset_finalize(&mut self, sample: OffsetSample) -> &mut Self {
        self.offset_finalize = Some(sample);
        self
    }

    /// The trailer's CLOCK_MONOTONIC readings at init and at finalize
    /// (default: 0 and the end of the last record).
    pub fn monotonic(&mut self, start_ns: u64, end_ns: u64) -> &mut Self {
        self.monotonic = Some((start_ns, end_ns));
        self
    }

    /// Writes the rank file into `dir`, which must exist.
    pub fn write_into(&self, dir: &Path) -> io::Result<u64> {
        let bytes = self.to_bytes();
        std::fs::write(dir.join(rank_file_name(self.header.rank)), &bytes)?;
        Ok(bytes.len() as u64)
    }

    /// Thread `index`, created on first use.
    pub fn thread(&mut self, index: u32) -> &mut ThreadBuilder {
        let (cap, batch) = (self.chunk_capacity, self.list_batch);
        self.threads.entry(index).or_insert_with(|| {
            ThreadBuilder::new(index, cap - CHUNK_HEADER_LEN - PENDING_LEN, batch)
        })
    }

    /// Defines `MPI_COMM_WORLD` (index 0) and `MPI_COMM_SELF` (index 1) on
    /// thread 0 at time `t`.
    pub fn define_world_and_self(&mut self, t: u64) -> &mut Self {
        let (rank, ws) = (self.header.rank, self.header.world_size);
        self.thread(0)
            .def_comm(t, world_def(rank, ws))
            .def_comm(t, self_def(rank));
        self
    }

    /// The rank dies before `MPI_Finalize`: no trailer, and each thread's
    /// last chunk stays open (unsealed).
    pub fn unfinished(&mut self) -> &mut Self {
        self.finalized = false;
        self
    }

    /// The rank file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = encode_file_header(&self.header);
        let cap = self.chunk_capacity;
        let push_chunk = |out: &mut Vec<u8>, h: ChunkHeader, payload: &[u8]| {
            let start = out.len();
            out.extend_from_slice(&h.encode());
            out.resize(start + h.records_offset() as usize, 0);
            out.extend_from_slice(payload);
            out.resize(start + h.capacity as usize, 0);
        };
        // The pending slot of an events chunk.
        let put_slot = |out: &mut Vec<u8>, at: usize, p: &PendingRecv, pos: usize| {
            let slot = &mut out[at + CHUNK_HEADER_LEN..at + CHUNK_HEADER_LEN + PENDING_LEN];
            p.store((&mut slot[..PENDING_AT]).try_into().unwrap());
            slot[PENDING_AT..].copy_from_slice(&(pos as u64 + 1).to_le_bytes());
        };
        // Threads' chunks interleave in the file, as buffers of concurrent
        // threads fill up; readers must sort them by seq.
        let most = self
            .threads
            .values()
            .map(|t| t.chunks.len())
            .max()
            .unwrap_or(0);
        let (mut events, mut bytes, mut chunks) = (0u64, 0u64, 0u64);
        for seq in 0..most {
            for th in self.threads.values() {
                let Some(c) = th.chunks.get(seq) else {
                    continue;
                };
                let last = seq + 1 == th.chunks.len();
                let sealed = self.finalized || !last;
                let h = ChunkHeader {
                    kind: ChunkKind::Events,
                    thread: th.index,
                    state: if sealed {
                        ChunkState::Sealed
                    } else {
                        ChunkState::Open
                    },
                    capacity: cap as u64,
                    used: if sealed { c.data.len() as u64 } else { 0 },
                    base_ns: c.base_ns,
                    seq: seq as u64,
                    crc: if sealed { payload_crc(&c.data) } else { 0 },
                    slot: PENDING_LEN as u32,
                };
                let at = out.len();
                push_chunk(&mut out, h, &c.data);
                if let Some(p) = th.pending.as_ref().filter(|_| last) {
                    put_slot(&mut out, at, p, c.data.len());
                }
                bytes += c.data.len() as u64;
                chunks += 1;
            }
        }
        // A pooled buffer never handed to a thread, as the runtime leaves
        // it: open, empty, thread index u32::MAX.
        let unassigned = ChunkHeader::unowned(cap as u64, PENDING_LEN as u32);
        push_chunk(&mut out, unassigned, &[]);
        chunks += 1;
        if !self.finalized {
            return out;
        }
        // The spare buffer of each thread, never filled.
        for th in self.threads.values() {
            let h = ChunkHeader {
                kind: ChunkKind::Events,
                thread: th.index,
                state: ChunkState::Sealed,
                capacity: cap as u64,
                used: 0,
                base_ns: 0,
                seq: th.chunks.len() as u64,
                crc: payload_crc(&[]),
                slot: PENDING_LEN as u32,
            };
            push_chunk(&mut out, h, &[]);
            chunks += 1;
        }
        for th in self.threads.values() {
            events += th.records;
        }
        let end_ns = self
            .threads
            .values()
            .map(|t| t.prev_end.unwrap_or(0))
            .max()
            .unwrap_or(0);
        let trailer = Trailer {
            events,
            bytes,
            chunks,
            buffer_waits: 0,
            buffer_wait_ns: 0,
            dropped: 0,
            excluded: Default::default(),
            paused: Default::default(),
            threads: self
                .threads
                .values()
                .map(|t| ThreadDef {
                    index: t.index,
                    tid: 5000 + u64::from(t.index),
                    dropped: 0,
                })
                .collect(),
            end_ns,
            monotonic_start_ns: self.monotonic.map_or(0, |m| m.0),
            monotonic_end_ns: self.monotonic.map_or(end_ns, |m| m.1),
            offset_finalize: self.offset_finalize,
        };
        let json = serde_json::to_vec(&trailer).expect("trailer serializes");
        let h = ChunkHeader {
            kind: ChunkKind::Trailer,
            thread: 0,
            state: ChunkState::Sealed,
            capacity: (CHUNK_HEADER_LEN + json.len()).div_ceil(PAGE) as u64 * PAGE as u64,
            used: json.len() as u64,
            base_ns: 0,
            seq: 0,
            crc: payload_crc(&json),
            slot: 0,
        };
        push_chunk(&mut out, h, &json);
        out
    }
}

#[derive(Debug, Clone)]
struct ChunkData {
    base_ns: u64,
    data: Vec<u8>,
}

/// One thread's record stream, encoded as it is added.
#[derive(Debug, Clone)]
pub struct ThreadBuilder {
    index: u32,
    payload_capacity: usize,
    list_batch: usize,
    prev_end: Option<u64>,
    next_n: u64,
    last_coll: Option<(u32, u64)>,
    chunks: Vec<ChunkData>,
    records: u64,
    /// A receive left in the pending slot of the thread's last chunk.
    pending: Option<PendingRecv>,
    /// The previous piggyback, against which the next is delta-coded.
    pb: PbState,
    /// Start of the record being encoded (piggybacks code their send
    /// time against it).
    start: u64,
}

impl ThreadBuilder {
    fn new(index: u32, payload_capacity: usize, list_batch: usize) -> Self {
        ThreadBuilder {
            index,
            payload_capacity,
            list_batch,
            prev_end: None,
            next_n: 1,
            last_coll: None,
            chunks: Vec::new(),
            records: 0,
            pending: None,
            pb: PbState::default(),
            start: 0,
        }
    }

    /// A blocking receive (function `func`, of kind `recv`, without a
    /// piggyback) left raw in the pending slot of the thread's last chunk,
    /// as the runtime leaves one when it stops before encoding it. Nothing
    /// may be added to the thread after it.
    #[allow(clippy::too_many_arguments)]
    pub fn pending_recv(
        &mut self,
        func: &str,
        t_start: u64,
        t_end: u64,
        posted: (i32, i32, u32, u64),
        actual: (i32, i32, u64),
    ) -> &mut Self {
        assert!(
            !self.chunks.is_empty(),
            "fixture: a pending receive needs a chunk"
        );
        let (src, tag, comm, bytes) = posted;
        self.pending = Some(PendingRecv {
            func: function_id(func),
            t0: t_start,
            t1: t_end,
            src,
            tag,
            comm,
            posted: bytes,
            actual,
            pb: None,
        });
        self.records += 1;
        self
    }

    /// The id the next operation-creating record will get.
    pub fn next_op(&self) -> u64 {
        op_id(self.index, self.next_n)
    }

    /// A successful call of `func` from `t_start` to `t_end`.
    pub fn call(&mut self, func: &str, t_start: u64, t_end: u64, payload: Payload) -> &mut Self {
        self.call_rc(func, t_start, t_end, 0, payload)
    }

    /// A call that returned `rc`.
    pub fn call_rc(
        &mut self,
        func: &str,
        t_start: u64,
        t_end: u64,
        rc: i32,
        payload: Payload,
    ) -> &mut Self {
        let id = function_id(func);
        self.record(&Record::Call(Call {
            func: id,
            t_start,
            t_end,
            rc,
            payload,
        }));
        self
    }

    pub fn def_comm(&mut self, t: u64, def: CommDef) -> &mut Self {
        self.record(&Record::DefComm { t, def });
        self
    }

    pub fn def_thread(&mut self, t: u64, tid: u64) -> &mut Self {
        self.record(&Record::DefThread { t, tid });
        self
    }

    pub fn buffer_wait(&mut self, t_start: u64, t_end: u64) -> &mut Self {
        self.record(&Record::BufferWait { t_start, t_end });
        self
    }

    /// Encodes any record; returns the ids of the operations it creates.
    pub fn record(&mut self, rec: &Record) -> Vec<u64> {
        assert!(
            self.pending.is_none(),
            "fixture: record after a pending receive"
        );
        let (t_start, t_end) = match rec {
            Record::Call(c) => (c.t_start, c.t_end),
            Record::BufferWait { t_start, t_end } => (*t_start, *t_end),
            Record::DefComm { t, .. } | Record::DefThread { t, .. } => (*t, *t),
        };
        assert!(t_end >= t_start, "fixture: record ends before it starts");
        let prev = *self.prev_end.get_or_insert(t_start);
        assert!(
            t_start >= prev,
            "fixture: thread {} goes back in time at {t_start}",
            self.index
        );
        let (gap, dur) = (t_start - prev, t_end - t_start);
        self.prev_end = Some(t_end);
        self.start = t_start;
        self.records += 1;
        let mut created = Vec::new();
        let mut head = Part::new();
        let mut rest: Vec<Part> = Vec::new();
        match rec {
            Record::BufferWait { .. } => put_head(&mut head, CODE_BUFFER_WAIT, gap, dur, 0),
            Record::DefThread { tid, .. } => {
                put_head(&mut head, CODE_DEF_THREAD, gap, dur, 0);
                head.u(*tid);
            }
            Record::DefComm { def, .. } => {
                put_head(&mut head, CODE_DEF_COMM, gap, dur, 0);
                head.u(u64::from(def.index));
                head.u(def.global_id);
                head.u(u64::from(def.inter));
                head.u(u64::from(def.size));
                head.u(u64::from(def.rank));
                head.u(u64::from(def.remote_size));
                let mut prev = -1i64;
                let mut batches = def.members.chunks(self.list_batch);
                let first = batches.next().unwrap_or(&[]);
                head.u(first.len() as u64);
                put_members(&mut head, &mut prev, first);
                for batch in batches {
                    let mut p = Part::continuation(batch.len());
                    put_members(&mut p, &mut prev, batch);
                    rest.push(p);
                }
            }
            Record::Call(c) => {
                let kind = FUNCTIONS[c.func as usize].1;
                put_head(
                    &mut head,
                    FIRST_FUNCTION_CODE + u64::from(c.func),
                    gap,
                    dur,
                    c.rc,
                );
                self.payload(
                    kind,
                    c.rc == 0,
                    &c.payload,
                    &mut head,
                    &mut rest,
                    &mut created,
                );
            }
        }
        // A record's gap counts from `prev`, so a chunk it opens has that
        // base; a chunk opened by a continuation starts after the record.
        self.place(head, prev);
        for p in rest {
            self.place(p, t_end);
        }
        created
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_op();
        self.next_n += 1;
        id
    }

    fn reference(&self, id: Option<u64>) -> i64 {
        op_ref(self.next_op(), id)
    }

    fn payload(
        &mut self,
        kind: Kind,
        ok: bool,
        payload: &Payload,
        head: &mut Part,
        rest: &mut Vec<Part>,
        created: &mut Vec<u64>,
    ) {
        let mismatch = || -> Status {
            panic!(
                "fixture: payload {payload:?} does not fit kind {}",
                kind.name()
            )
        };
        match (kind, payload) {
            (Kind::Plain | Kind::Init | Kind::Finalize, Payload::None) => {}
            (Kind::InitThread, Payload::InitThread { required, provided }) => {
                head.i(i64::from(*required));
                head.i(i64::from(*provided));
            }
            (Kind::Abort, Payload::Abort { comm, code }) => {
                head.u(u64::from(*comm));
                head.i(i64::from(*code));
            }
            (Kind::Pcontrol, Payload::Pcontrol { level }) => head.i(i64::from(*level)),
            (Kind::Phase, Payload::Phase { name }) => {
                // As `record::put_name`: the length, then each byte.
                let b = name.as_deref().map_or(&[][..], str::as_bytes);
                head.u(b.len() as u64);
                for &x in b {
                    head.u(u64::from(x));
                }
            }
            (
                Kind::Send | Kind::Isend | Kind::SendInit | Kind::PsendInit,
                Payload::Send {
                    peer,
                    tag,
                    comm,
                    bytes,
                    ..
                },
            ) => {
                head.i(i64::from(*peer));
                head.i(i64::from(*tag));
                head.u(u64::from(*comm));
                head.u(*bytes);
                if kind != Kind::Send && ok {
                    created.push(self.take_id());
                }
            }
            (
                Kind::Recv | Kind::Irecv | Kind::RecvInit | Kind::PrecvInit,
                Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted,
                    status,
                    ..
                },
            ) => {
                head.i(i64::from(*src));
                head.i(i64::from(*tag));
                head.u(u64::from(*comm));
                head.u(*posted);
                if kind == Kind::Recv {
                    head.status(&status.unwrap_or_else(mismatch), &mut self.pb, self.start);
                } else if ok {
                    created.push(self.take_id());
                }
            }
            (
                Kind::Sendrecv,
                Payload::Sendrecv {
                    peer,
                    stag,
                    bytes,
                    src,
                    rtag,
                    posted,
                    comm,
                    status,
                },
            ) => {
                head.i(i64::from(*peer));
                head.i(i64::from(*stag));
                head.u(*bytes);
                head.i(i64::from(*src));
                head.i(i64::from(*rtag));
                head.u(*posted);
                head.u(u64::from(*comm));
                head.status(status, &mut self.pb, self.start);
            }
            (
                Kind::Isendrecv,
                Payload::Isendrecv {
                    peer,
                    stag,
                    bytes,
                    src,
                    rtag,
                    posted,
                    comm,
                    ..
                },
            ) => {
                head.i(i64::from(*peer));
                head.i(i64::from(*stag));
                head.u(*bytes);
                head.i(i64::from(*src));
                head.i(i64::from(*rtag));
                head.u(*posted);
                head.u(u64::from(*comm));
                if ok {
                    created.push(self.take_id());
                }
            }
            (
                Kind::Probe | Kind::Iprobe | Kind::Mprobe | Kind::Improbe,
                Payload::Probe {
                    src,
                    tag,
                    comm,
                    status,
                    ..
                },
            ) => {
                head.i(i64::from(*src));
                head.i(i64::from(*tag));
                head.u(u64::from(*comm));
                head.status(status, &mut self.pb, self.start);
                if matches!(kind, Kind::Mprobe | Kind::Improbe) && ok && !status.empty {
                    created.push(self.take_id());
                }
            }
            (
                Kind::Mrecv | Kind::Imrecv,
                Payload::Mrecv {
                    msg,
                    posted,
                    status,
                    ..
                },
            ) => {
                head.i(self.reference(*msg));
                head.u(*posted);
                if kind == Kind::Mrecv {
                    head.status(&status.unwrap_or_else(mismatch), &mut self.pb, self.start);
                } else if ok {
                    created.push(self.take_id());
                }
            }
            (Kind::Start, Payload::Start { started }) => {
                let mut batches = started.chunks(self.list_batch);
                let first = batches.next().unwrap_or(&[]);
                head.u(first.len() as u64);
                for (init, _) in first {
                    head.i(self.reference(*init));
                    created.push(self.take_id());
                }
                for batch in batches {
                    let mut p = Part::continuation(batch.len());
                    for (init, _) in batch {
                        p.i(self.reference(*init));
                        created.push(self.take_id());
                    }
                    rest.push(p);
                }
            }
            (Kind::Complete, Payload::Complete { done }) => {
                let mut batches = done.chunks(self.list_batch);
                let first = batches.next().unwrap_or(&[]);
                head.u(first.len() as u64);
                for c in first {
                    head.i(self.reference(c.op));
                    head.status(&c.status, &mut self.pb, self.start);
                }
                for batch in batches {
                    let mut p = Part::continuation(batch.len());
                    for c in batch {
                        p.i(self.reference(c.op));
                        p.status(&c.status, &mut self.pb, self.start);
                    }
                    rest.push(p);
                }
            }
            (Kind::Cancel | Kind::RequestFree, Payload::OpRef { op, .. }) => {
                head.i(self.reference(*op))
            }
            (Kind::Freed, Payload::OpRef { op, cancelled }) => {
                head.i(self.reference(*op));
                head.u(ST_NONE | if *cancelled { ST_CANCELLED } else { 0 })
            }
            (
                Kind::Coll | Kind::Icoll | Kind::CollInit,
                Payload::Coll {
                    comm,
                    root,
                    sent,
                    recvd,
                    seq,
                    ..
                },
            ) => {
                head.u(u64::from(*comm));
                head.u(root_code(*root));
                head.u(*sent);
                head.u(*recvd);
                head.u(coll_seq_code(self.last_coll, *comm, *seq));
                self.last_coll = Some((*comm, *seq));
                if kind != Kind::Coll && ok {
                    created.push(self.take_id());
                }
            }
            (Kind::CommNew, Payload::CommNew { parent, comm }) => {
                head.u(parent.map_or(0, |p| u64::from(p) + 1));
                head.u(comm.map_or(0, |c| u64::from(c) + 1));
            }
            (Kind::CommFree, Payload::CommFree { comm }) => head.u(u64::from(*comm)),
            _ => {
                mismatch();
            }
        }
    }

    /// Appends one record part, starting a new chunk (with time base
    /// `base_ns`) if it does not fit in the current one.
    fn place(&mut self, part: Part, base_ns: u64) {
        let bytes = &part.buf[..];
        assert!(
            bytes.len() <= self.payload_capacity,
            "fixture: record larger than a chunk"
        );
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.data.len() + bytes.len() <= self.payload_capacity);
        if !fits {
            self.chunks.push(ChunkData {
                base_ns,
                data: Vec::new(),
            });
        }
        self.chunks
            .last_mut()
            .expect("a chunk")
            .data
            .extend_from_slice(bytes);
    }
}

impl Sink for Part {
    fn put_u(&mut self, v: u64) {
        let mut b = [0u8; MAX_VARINT];
        let mut n = 0;
        put_u(&mut b, &mut n, v);
        self.buf.extend_from_slice(&b[..n]);
    }
}

/// One record or continuation part being encoded.
struct Part {
    buf: Vec<u8>,
}

impl Part {
    fn new() -> Part {
        Part {
            buf: Vec::with_capacity(64),
        }
    }

    fn continuation(n: usize) -> Part {
        let mut p = Part::new();
        p.u(CODE_CONTINUATION << 1);
        p.u(n as u64);
        p
    }

    fn u(&mut self, v: u64) {
        Sink::put_u(self, v);
    }

    fn i(&mut self, v: i64) {
        Sink::put_i(self, v);
    }

    /// Writes exactly the fields the status holds, and its piggyback
    /// delta-coded against the thread's previous one (`prev`) and the
    /// start of the record (`start`), as the runtime does.
    fn status(&mut self, s: &Status, prev: &mut PbState, start: u64) {
        let flags = (s.source.is_some() as u64 * ST_SOURCE)
            | (s.tag.is_some() as u64 * ST_TAG)
            | (s.bytes.is_some() as u64 * ST_BYTES)
            | (s.cancelled as u64 * ST_CANCELLED)
            | (s.empty as u64 * ST_EMPTY)
            | (s.none as u64 * ST_NONE)
            | (s.pb.is_some() as u64 * ST_PIGGYBACK);
        self.u(flags);
        if let Some(v) = s.source {
            self.i(i64::from(v));
        }
        if let Some(v) = s.tag {
            self.i(i64::from(v));
        }
        if let Some(v) = s.bytes {
            self.u(v);
        }
        if let Some(pb) = s.pb {
            assert!(pb.vc.is_none(), "fixture: vector clocks are not supported");
            put_pb_scalars(
                self,
                (&mut prev.id, &mut prev.lc),
                start,
                pb.id,
                pb.lc,
                pb.sent,
            );
        }
    }
}
