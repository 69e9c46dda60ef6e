//! Record encoding: one record per MPI call.
//!
//! ```text
//! record   := head gap dur [rc] payload
//! head     := varint( code << 1 | error_bit )
//! gap      := varint ns from the end of the thread's previous record
//!             (or from the chunk's base_ns) to this record's start
//! dur      := varint ns from start to end
//! rc       := zigzag varint MPI return code, present only if error_bit
//! code     := 0 never (a zero byte ends the data of an open chunk)
//!           | 1 Continuation: more list items of the previous record
//!           | 2 BufferWait: the thread waited for a free buffer (gap, dur)
//!           | 3 DefComm: a communicator definition
//!           | 4 DefThread: the OS thread id of this stream
//!           | 16 + f: a call of function f of the header's function table
//! ```
//!
//! Continuation records carry only `head n item*`. Payloads by [`Kind`]
//! (`u` varint, `i` zigzag varint, `comm` the rank-local communicator index):
//!
//! ```text
//! send, isend, send_init     peer:i tag:i comm:u bytes:u
//! recv                       src:i tag:i comm:u posted:u status
//! irecv, recv_init           src:i tag:i comm:u posted:u
//! sendrecv                   peer:i stag:i bytes:u src:i rtag:i posted:u comm:u status
//! isendrecv                  peer:i stag:i bytes:u src:i rtag:i posted:u comm:u
//! psend_init                 peer:i tag:i comm:u bytes:u  (bytes of all partitions)
//! precv_init                 src:i tag:i comm:u posted:u
//! probe, iprobe, mprobe, improbe   src:i tag:i comm:u status
//! mrecv                      msg:ref posted:u status
//! imrecv                     msg:ref posted:u
//! start                      n:u (init:ref)*n             (continuable)
//! complete                   n:u (op:ref status)*n        (continuable)
//! cancel, request_free       op:ref
//! coll, icoll, coll_init    comm:u root:r sent:u recvd:u seq:seqcode
//!                            (root:r is 0 for collectives without a root,
//!                            else zigzag(root) + 1, MPI_ROOT and
//!                            MPI_PROC_NULL included)
//! comm_new                   parent:u+1 new:u+1   (0 = none / MPI_COMM_NULL)
//! comm_free                  comm:u
//! init_thread                required:i provided:i
//! abort                      comm:u code:i
//! pcontrol                   level:i
//! plain, init, finalize      (nothing)
//! status := flags:u [source:i] [tag:i] [bytes:u] [pb]
//!           flags: 1 source present, 2 tag present, 4 bytes present,
//!                  8 cancelled, 16 nothing found (probe/test miss),
//!                  32 no status (a completed non-receive),
//!                  64 a piggyback follows
//! pb     := id:i lc:i sent:i vc:i*   (id and lc as deltas from the thread's
//!           previous piggyback, sent as record start minus send time, the
//!           vector clock (vector mode only, world-size entries) entrywise
//!           against the previous one)
//!           an absent field equals the posted value; mrecv, and the
//!           completions of imrecv, write every field (nothing is posted)
//! ```
//!
//! **Communicator indices** are never reused within a rank: a communicator
//! freed and another created with the same handle get different indices, each
//! with its own DefComm record (written before the first record that uses it).
//!
//! **Operation ids.** Every nonblocking operation, persistent request,
//! started instance and matched-probe message gets an id: `thread << 40 | n`
//! with `n` counting from 1 per thread, in record order, for each successful
//! record that *creates* an operation (isend, irecv, send_init, recv_init,
//! isendrecv, psend_init, precv_init, icoll, coll_init, imrecv, each
//! started request, and mprobe/improbe that found a message). An
//! isendrecv's operation is its receive half; its completion carries the
//! receive's status. A coll_init is a persistent collective: each start of
//! it is one collective instance, the k-th start on every member the same. Ids are never written; readers count. A reference (`ref`) is
//! zigzag(next − id) where `next` is the id the thread would assign next; 0
//! means "not a traced operation".
//!
//! **Message ids.** With piggybacking on, every message a thread sends gets
//! the id `thread << 40 | n`, `n` counting from 1 per thread in record order
//! over send, isend (and modes), sendrecv and isendrecv records (failed
//! ones included), and every started instance of a persistent send.
//! Partitioned sends (psend_init) carry no header and take no id. The receiver records the
//! id it got; the sender's ids are implicit.
//!
//! **Collective sequence numbers** are per communicator. `seqcode` is 0 when
//! the collective is on the same communicator as the thread's previous
//! collective and its number is one more; otherwise it is seq + 1.

use crate::varint::{get_i, get_u, Sink};
use crate::FormatError;

pub const CODE_CONTINUATION: u64 = 1;
pub const CODE_BUFFER_WAIT: u64 = 2;
pub const CODE_DEF_COMM: u64 = 3;
pub const CODE_DEF_THREAD: u64 = 4;
pub const FIRST_FUNCTION_CODE: u64 = 16;

/// Bytes any fixed-size record fits in; list records are split in batches
/// of [`LIST_BATCH`] items so that each part fits in [`MAX_LIST_RECORD`].
pub const MAX_FIXED_RECORD: usize = 160;
pub const LIST_BATCH: usize = 64;
pub const MAX_LIST_ITEM: usize = 48;
pub const MAX_LIST_RECORD: usize = MAX_FIXED_RECORD + LIST_BATCH * MAX_LIST_ITEM;

pub const OP_THREAD_SHIFT: u32 = 40;

/// The payload layout of a function's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Plain,
    Init,
    InitThread,
    Finalize,
    Abort,
    Pcontrol,
    Send,
    Isend,
    SendInit,
    Recv,
    Irecv,
    RecvInit,
    Sendrecv,
    Probe,
    Iprobe,
    Mprobe,
    Improbe,
    Mrecv,
    Imrecv,
    Start,
    Complete,
    Cancel,
    RequestFree,
    /// `MPI_Request_free` since the trace says whether a cancelled
    /// operation's cancellation succeeded (the op reference, then status
    /// flags: `ST_NONE`, with `ST_CANCELLED` when it did).
    Freed,
    Coll,
    Icoll,
    CommNew,
    CommFree,
    Isendrecv,
    CollInit,
    PsendInit,
    PrecvInit,
    /// pmtrace's own `pmtrace_phase_begin(name)` and `pmtrace_phase_end()`.
    Phase,
}

impl Kind {
    pub const ALL: [Kind; 33] = [
        Kind::Plain,
        Kind::Init,
        Kind::InitThread,
        Kind::Finalize,
        Kind::Abort,
        Kind::Pcontrol,
        Kind::Send,
        Kind::Isend,
        Kind::SendInit,
        Kind::Recv,
        Kind::Irecv,
        Kind::RecvInit,
        Kind::Sendrecv,
        Kind::Probe,
        Kind::Iprobe,
        Kind::Mprobe,
        Kind::Improbe,
        Kind::Mrecv,
        Kind::Imrecv,
        Kind::Start,
        Kind::Complete,
        Kind::Cancel,
        Kind::RequestFree,
        Kind::Freed,
        Kind::Coll,
        Kind::Icoll,
        Kind::CommNew,
        Kind::CommFree,
        Kind::Isendrecv,
        Kind::CollInit,
        Kind::PsendInit,
        Kind::PrecvInit,
        Kind::Phase,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Init => "init",
            Kind::InitThread => "init_thread",
            Kind::Finalize => "finalize",
            Kind::Abort => "abort",
            Kind::Pcontrol => "pcontrol",
            Kind::Send => "send",
            Kind::Isend => "isend",
            Kind::SendInit => "send_init",
            Kind::Recv => "recv",
            Kind::Irecv => "irecv",
            Kind::RecvInit => "recv_init",
            Kind::Sendrecv => "sendrecv",
            Kind::Probe => "probe",
            Kind::Iprobe => "iprobe",
            Kind::Mprobe => "mprobe",
            Kind::Improbe => "improbe",
            Kind::Mrecv => "mrecv",
            Kind::Imrecv => "imrecv",
            Kind::Start => "start",
            Kind::Complete => "complete",
            Kind::Cancel => "cancel",
            Kind::RequestFree => "request_free",
            Kind::Freed => "freed",
            Kind::Coll => "coll",
            Kind::Icoll => "icoll",
            Kind::CommNew => "comm_new",
            Kind::CommFree => "comm_free",
            Kind::Isendrecv => "isendrecv",
            Kind::CollInit => "coll_init",
            Kind::PsendInit => "psend_init",
            Kind::PrecvInit => "precv_init",
            Kind::Phase => "phase",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a receive-side status said. `None` fields equal the posted values
/// and are resolved by [`Status::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub source: Option<i32>,
    pub tag: Option<i32>,
    pub bytes: Option<u64>,
    pub cancelled: bool,
    /// A probe or test that found nothing.
    pub empty: bool,
    /// A completion of an operation that has no receive status (a send, a
    /// collective).
    pub none: bool,
    /// The piggyback the received message carried, if any.
    pub pb: Option<Pb>,
}

/// A received message's piggyback: the sender's message id and Lamport
/// clock, and the sender's timer value when it sent. In vector mode `vc`
/// indexes the decoder's `vc_arena` (`vc_len` entries from `vc * vc_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pb {
    pub id: u64,
    pub lc: u64,
    pub sent: u64,
    pub vc: Option<u32>,
}

/// Message ids: `thread << MSG_THREAD_SHIFT | n`, `n` counting the
/// messages a thread sent from 1, in record order (see the module docs).
pub const MSG_THREAD_SHIFT: u32 = 40;

pub fn msg_id(thread: u32, n: u64) -> u64 {
    (u64::from(thread) << MSG_THREAD_SHIFT) | n
}

/// The previous piggyback of a thread, against which the next is delta-coded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PbState {
    pub id: u64,
    pub lc: u64,
    pub vc: Vec<u64>,
}

/// Writes a piggyback (after a status with `ST_PIGGYBACK`): deltas against
/// the thread's previous piggyback, the send time against the record start.
#[inline(always)]
pub fn put_pb<S: Sink>(
    out: &mut S,
    prev: &mut PbState,
    start: u64,
    id: u64,
    lc: u64,
    sent: u64,
    vc: &[u64],
) {
    put_pb_scalars(out, (&mut prev.id, &mut prev.lc), start, id, lc, sent);
    put_pb_vector(out, &mut prev.vc, vc);
}

/// The scalar part of [`put_pb`]: message id, Lamport clock, send time.
#[inline(always)]
pub fn put_pb_scalars<S: Sink>(
    out: &mut S,
    prev: (&mut u64, &mut u64),
    start: u64,
    id: u64,
    lc: u64,
    sent: u64,
) {
    out.put_i(id.wrapping_sub(*prev.0) as i64);
    out.put_i(lc.wrapping_sub(*prev.1) as i64);
    out.put_i(start.wrapping_sub(sent) as i64);
    *prev.0 = id;
    *prev.1 = lc;
}

/// The vector clock part of [`put_pb`] (nothing when `vc` is empty).
#[inline]
pub fn put_pb_vector<S: Sink>(out: &mut S, prev: &mut Vec<u64>, vc: &[u64]) {
    if !vc.is_empty() {
        if prev.len() != vc.len() {
            *prev = vec![0; vc.len()];
        }
        for (p, &v) in prev.iter_mut().zip(vc) {
            out.put_i(v.wrapping_sub(*p) as i64);
            *p = v;
        }
    }
}

pub const ST_SOURCE: u64 = 1;
pub const ST_TAG: u64 = 2;
pub const ST_BYTES: u64 = 4;
pub const ST_CANCELLED: u64 = 8;
pub const ST_EMPTY: u64 = 16;
pub const ST_NONE: u64 = 32;
/// A piggyback follows the status fields.
pub const ST_PIGGYBACK: u64 = 64;

impl Status {
    pub fn resolve(mut self, src: i32, tag: i32, bytes: u64) -> Status {
        self.source.get_or_insert(src);
        self.tag.get_or_insert(tag);
        self.bytes.get_or_insert(bytes);
        self
    }
}

/// Writes a status, leaving out fields that equal the posted ones.
#[inline(always)]
pub fn put_status<S: Sink>(
    out: &mut S,
    posted: (i32, i32, Option<u64>),
    actual: (i32, i32, u64),
    extra_flags: u64,
) {
    let mut flags = extra_flags;
    if actual.0 != posted.0 {
        flags |= ST_SOURCE;
    }
    if actual.1 != posted.1 {
        flags |= ST_TAG;
    }
    if posted.2 != Some(actual.2) {
        flags |= ST_BYTES;
    }
    out.put_u(flags);
    if flags & ST_SOURCE != 0 {
        out.put_i(actual.0 as i64);
    }
    if flags & ST_TAG != 0 {
        out.put_i(actual.1 as i64);
    }
    if flags & ST_BYTES != 0 {
        out.put_u(actual.2);
    }
}

/// The seqcode rule of the module docs, for writer and reader alike.
#[inline(always)]
pub fn coll_seq_code(last: Option<(u32, u64)>, comm: u32, seq: u64) -> u64 {
    match last {
        Some((c, s)) if c == comm && s.wrapping_add(1) == seq => 0,
        _ => seq + 1,
    }
}

pub fn op_id(thread: u32, n: u64) -> u64 {
    (u64::from(thread) << OP_THREAD_SHIFT) | n
}

/// Encodes a reference to operation `id` from a thread whose next id is `next`.
#[inline(always)]
pub fn op_ref(next: u64, id: Option<u64>) -> i64 {
    match id {
        Some(id) => {
            let d = next.wrapping_sub(id) as i64;
            if d == 0 {
                i64::MIN // cannot happen for a real id; keeps 0 reserved
            } else {
                d
            }
        }
        None => 0,
    }
}

/// The `root:r` field of collectives.
#[inline(always)]
pub fn root_code(root: Option<i32>) -> u64 {
    match root {
        None => 0,
        Some(r) => crate::varint::zigzag(i64::from(r)) + 1,
    }
}

/// A communicator definition (rank-local view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommDef {
    /// Rank-local index used in records.
    pub index: u32,
    /// The same on every member.
    pub global_id: u64,
    pub inter: bool,
    pub size: u32,
    /// This rank's rank in the (local group of the) communicator.
    pub rank: u32,
    pub remote_size: u32,
    /// World ranks of the (local) group, in rank order. Written only by the
    /// group's rank 0, so empty on other ranks.
    pub members: Vec<u32>,
}

/// One completed operation in a completion call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub op: Option<u64>,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    None,
    InitThread {
        required: i32,
        provided: i32,
    },
    Abort {
        comm: u32,
        code: i32,
    },
    Pcontrol {
        level: i32,
    },
    /// A phase begins (its name) or ends (`None`).
    Phase {
        name: Option<String>,
    },
    /// send, isend, send_init, psend_init; `op` set for all but send.
    Send {
        peer: i32,
        tag: i32,
        comm: u32,
        bytes: u64,
        op: Option<u64>,
    },
    /// recv (with status), irecv, recv_init and precv_init (with op).
    Recv {
        src: i32,
        tag: i32,
        comm: u32,
        posted: u64,
        status: Option<Status>,
        op: Option<u64>,
    },
    Sendrecv {
        peer: i32,
        stag: i32,
        bytes: u64,
        src: i32,
        rtag: i32,
        posted: u64,
        comm: u32,
        status: Status,
    },
    /// isendrecv: a sendrecv whose receive half completes later, as `op`.
    Isendrecv {
        peer: i32,
        stag: i32,
        bytes: u64,
        src: i32,
        rtag: i32,
        posted: u64,
        comm: u32,
        op: Option<u64>,
    },
    /// probe family; `op` names the message for mprobe/improbe hits.
    Probe {
        src: i32,
        tag: i32,
        comm: u32,
        status: Status,
        op: Option<u64>,
    },
    /// mrecv (status) and imrecv (op).
    Mrecv {
        msg: Option<u64>,
        posted: u64,
        status: Option<Status>,
        op: Option<u64>,
    },
    /// (persistent request started, new instance id)
    Start {
        started: Vec<(Option<u64>, u64)>,
    },
    Complete {
        done: Vec<Completion>,
    },
    /// cancel, request_free, freed
    OpRef {
        op: Option<u64>,
        /// freed: the operation was cancelled, and that succeeded (it
        /// moved no data).
        cancelled: bool,
    },
    Coll {
        comm: u32,
        root: Option<i32>,
        sent: u64,
        recvd: u64,
        seq: u64,
        op: Option<u64>,
    },
    CommNew {
        parent: Option<u32>,
        comm: Option<u32>,
    },
    CommFree {
        comm: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub func: u32,
    pub t_start: u64,
    pub t_end: u64,
    /// MPI return code (0 = MPI_SUCCESS).
    pub rc: i32,
    pub payload: Payload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Call(Call),
    BufferWait { t_start: u64, t_end: u64 },
    DefComm { t: u64, def: CommDef },
    DefThread { t: u64, tid: u64 },
}

/// Per-thread decoding state: what the writer kept implicit.
#[derive(Debug, Clone)]
pub struct ThreadDecoder {
    pub thread: u32,
    prev_end: u64,
    next_n: u64,
    last_coll: Option<(u32, u64)>,
    /// Start of the record being decoded.
    start: u64,
    pb: PbState,
    /// Vector-clock entries per piggyback (0 unless vector mode).
    pub vc_len: usize,
    /// The vector clocks of decoded piggybacks (see [`Pb::vc`]).
    pub vc_arena: Vec<u64>,
}

/// What the decoder needs to continue a list record in a later record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Start,
    Complete,
    Members,
}

fn trunc() -> FormatError {
    FormatError::Truncated("record".into())
}

fn corrupt(what: &str) -> FormatError {
    FormatError::Corrupt(format!("bad record: {what}"))
}

/// The longest phase name kept, in bytes.
pub const PHASE_NAME_MAX: usize = 255;

/// A phase name: its length, then each byte (none: the end of a phase).
pub fn put_name<S: Sink>(out: &mut S, name: Option<&[u8]>) {
    match name {
        None => out.put_u(0),
        Some(b) => {
            let b = &b[..b.len().min(PHASE_NAME_MAX)];
            out.put_u(b.len() as u64);
            for &x in b {
                out.put_u(u64::from(x));
            }
        }
    }
}

fn get_name(buf: &[u8], pos: &mut usize) -> Result<Option<String>, FormatError> {
    let n = u(buf, pos)? as usize;
    if n == 0 {
        return Ok(None);
    }
    if n > PHASE_NAME_MAX {
        return Err(corrupt("phase name too long"));
    }
    let mut b = Vec::with_capacity(n);
    for _ in 0..n {
        b.push(u8::try_from(u(buf, pos)?).map_err(|_| corrupt("phase name byte"))?);
    }
    Ok(Some(String::from_utf8_lossy(&b).into_owned()))
}

fn u(buf: &[u8], pos: &mut usize) -> Result<u64, FormatError> {
    get_u(buf, pos).ok_or_else(trunc)
}

fn i(buf: &[u8], pos: &mut usize) -> Result<i64, FormatError> {
    get_i(buf, pos).ok_or_else(trunc)
}

fn i32v(buf: &[u8], pos: &mut usize) -> Result<i32, FormatError> {
    let v = i(buf, pos)?;
    i32::try_from(v).map_err(|_| corrupt("value out of range"))
}

fn u32v(buf: &[u8], pos: &mut usize) -> Result<u32, FormatError> {
    let v = u(buf, pos)?;
    u32::try_from(v).map_err(|_| corrupt("value out of range"))
}

fn status(buf: &[u8], pos: &mut usize) -> Result<Status, FormatError> {
    let flags = u(buf, pos)?;
    if flags >= 128 {
        return Err(corrupt("status flags"));
    }
    let mut s = Status {
        cancelled: flags & ST_CANCELLED != 0,
        empty: flags & ST_EMPTY != 0,
        none: flags & ST_NONE != 0,
        // A placeholder until the decoder reads the piggyback itself.
        pb: (flags & ST_PIGGYBACK != 0).then_some(Pb {
            id: 0,
            lc: 0,
            sent: 0,
            vc: None,
        }),
        ..Status::default()
    };
    if flags & ST_SOURCE != 0 {
        s.source = Some(i32v(buf, pos)?);
    }
    if flags & ST_TAG != 0 {
        s.tag = Some(i32v(buf, pos)?);
    }
    if flags & ST_BYTES != 0 {
        s.bytes = Some(u(buf, pos)?);
    }
    Ok(s)
}

impl ThreadDecoder {
    pub fn new(thread: u32) -> Self {
        ThreadDecoder {
            thread,
            prev_end: 0,
            next_n: 1,
            last_coll: None,
            start: 0,
            pb: PbState::default(),
            vc_len: 0,
            vc_arena: Vec::new(),
        }
    }

    /// A decoder for a trace whose piggybacks carry `vc_len` vector-clock
    /// entries (0 without vector clocks).
    pub fn with_vc_len(thread: u32, vc_len: usize) -> Self {
        ThreadDecoder {
            vc_len,
            ..Self::new(thread)
        }
    }

    fn status(&mut self, buf: &[u8], pos: &mut usize) -> Result<Status, FormatError> {
        let mut s = status(buf, pos)?;
        if s.pb.is_some() {
            let id = self.pb.id.wrapping_add(i(buf, pos)? as u64);
            let lc = self.pb.lc.wrapping_add(i(buf, pos)? as u64);
            let sent = self.start.wrapping_sub(i(buf, pos)? as u64);
            self.pb.id = id;
            self.pb.lc = lc;
            let vc = if self.vc_len > 0 {
                check_count(buf, *pos, self.vc_len)?;
                if self.pb.vc.len() != self.vc_len {
                    self.pb.vc = vec![0; self.vc_len];
                }
                let at = u32::try_from(self.vc_arena.len() / self.vc_len)
                    .map_err(|_| corrupt("too many vector clocks"))?;
                for k in 0..self.vc_len {
                    let v = self.pb.vc[k].wrapping_add(i(buf, pos)? as u64);
                    self.pb.vc[k] = v;
                    self.vc_arena.push(v);
                }
                Some(at)
            } else {
                None
            };
            s.pb = Some(Pb { id, lc, sent, vc });
        }
        Ok(s)
    }

    /// What a writer continuing this thread's stream would hold: the end of
    /// its last record and its previous piggyback's id and clock.
    pub(crate) fn encoder_state(&self) -> (u64, u64, u64) {
        (self.prev_end, self.pb.id, self.pb.lc)
    }

    /// Call at the start of each chunk of this thread, in chunk order.
    pub fn start_chunk(&mut self, base_ns: u64) {
        self.prev_end = base_ns;
    }

    fn next_id(&self) -> u64 {
        op_id(self.thread, self.next_n)
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id();
        self.next_n += 1;
        id
    }

    fn reference(&self, buf: &[u8], pos: &mut usize) -> Result<Option<u64>, FormatError> {
        let d = i(buf, pos)?;
        Ok(if d == 0 {
            None
        } else {
            Some(self.next_id().wrapping_sub(d as u64))
        })
    }

    /// Returns the code of the record at `pos` without consuming it, or
    /// `None` at the end of the data (end of slice or a zero byte).
    pub fn peek_code(buf: &[u8], pos: usize) -> Result<Option<u64>, FormatError> {
        if pos >= buf.len() || buf[pos] == 0 {
            return Ok(None);
        }
        let mut p = pos;
        Ok(Some(u(buf, &mut p)? >> 1))
    }

    /// Decodes the items of a continuation record into `list`.
    pub fn continuation(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        into: &mut Record,
    ) -> Result<(), FormatError> {
        let head = u(buf, pos)?;
        if head >> 1 != CODE_CONTINUATION {
            return Err(corrupt("expected continuation"));
        }
        let n = u(buf, pos)? as usize;
        match into {
            Record::Call(Call {
                payload: Payload::Start { started },
                ..
            }) => self.start_items(buf, pos, n, started),
            Record::Call(Call {
                payload: Payload::Complete { done },
                ..
            }) => self.complete_items(buf, pos, n, done),
            Record::DefComm { def, .. } => members(buf, pos, n, &mut def.members),
            _ => Err(corrupt("continuation after a record without a list")),
        }
    }

    fn start_items(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        n: usize,
        out: &mut Vec<(Option<u64>, u64)>,
    ) -> Result<(), FormatError> {
        check_count(buf, *pos, n)?;
        for _ in 0..n {
            let init = self.reference(buf, pos)?;
            let id = self.take_id();
            out.push((init, id));
        }
        Ok(())
    }

    fn complete_items(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        n: usize,
        out: &mut Vec<Completion>,
    ) -> Result<(), FormatError> {
        check_count(buf, *pos, n)?;
        for _ in 0..n {
            let op = self.reference(buf, pos)?;
            let status = self.status(buf, pos)?;
            out.push(Completion { op, status });
        }
        Ok(())
    }

    /// Decodes one record (not a continuation) at `pos`. `kinds` is the
    /// function table's kinds, indexed by function id.
    pub fn record(
        &mut self,
        buf: &[u8],
        pos: &mut usize,
        kinds: &[Kind],
    ) -> Result<Record, FormatError> {
        let head = u(buf, pos)?;
        let code = head >> 1;
        let err = head & 1 != 0;
        if code == CODE_CONTINUATION {
            return Err(corrupt("continuation without a list record"));
        }
        let gap = u(buf, pos)?;
        let dur = u(buf, pos)?;
        let t_start = self
            .prev_end
            .checked_add(gap)
            .ok_or_else(|| corrupt("time overflow"))?;
        let t_end = t_start
            .checked_add(dur)
            .ok_or_else(|| corrupt("time overflow"))?;
        self.prev_end = t_end;
        self.start = t_start;
        let rc = if err { i32v(buf, pos)? } else { 0 };
        let ok = !err;
        match code {
            CODE_BUFFER_WAIT => return Ok(Record::BufferWait { t_start, t_end }),
            CODE_DEF_THREAD => {
                return Ok(Record::DefThread {
                    t: t_start,
                    tid: u(buf, pos)?,
                })
            }
            CODE_DEF_COMM => {
                let index = u32v(buf, pos)?;
                let global_id = u(buf, pos)?;
                let flags = u(buf, pos)?;
                let size = u32v(buf, pos)?;
                let rank = u32v(buf, pos)?;
                let remote_size = u32v(buf, pos)?;
                let n = u(buf, pos)? as usize;
                let mut def = CommDef {
                    index,
                    global_id,
                    inter: flags & 1 != 0,
                    size,
                    rank,
                    remote_size,
                    members: Vec::new(),
                };
                members(buf, pos, n, &mut def.members)?;
                return Ok(Record::DefComm { t: t_start, def });
            }
            c if c < FIRST_FUNCTION_CODE => return Err(corrupt("unknown record code")),
            _ => {}
        }
        let func = (code - FIRST_FUNCTION_CODE) as usize;
        let kind = *kinds
            .get(func)
            .ok_or_else(|| corrupt("function id beyond the function table"))?;
        let payload = match kind {
            Kind::Plain | Kind::Init | Kind::Finalize => Payload::None,
            Kind::InitThread => Payload::InitThread {
                required: i32v(buf, pos)?,
                provided: i32v(buf, pos)?,
            },
            Kind::Abort => Payload::Abort {
                comm: u32v(buf, pos)?,
                code: i32v(buf, pos)?,
            },
            Kind::Pcontrol => Payload::Pcontrol {
                level: i32v(buf, pos)?,
            },
            Kind::Phase => Payload::Phase {
                name: get_name(buf, pos)?,
            },
            Kind::Send | Kind::Isend | Kind::SendInit | Kind::PsendInit => {
                let peer = i32v(buf, pos)?;
                let tag = i32v(buf, pos)?;
                let comm = u32v(buf, pos)?;
                let bytes = u(buf, pos)?;
                let op = (kind != Kind::Send && ok).then(|| self.take_id());
                Payload::Send {
                    peer,
                    tag,
                    comm,
                    bytes,
                    op,
                }
            }
            Kind::Recv | Kind::Irecv | Kind::RecvInit | Kind::PrecvInit => {
                let src = i32v(buf, pos)?;
                let tag = i32v(buf, pos)?;
                let comm = u32v(buf, pos)?;
                let posted = u(buf, pos)?;
                let (status, op) = if kind == Kind::Recv {
                    (Some(self.status(buf, pos)?.resolve(src, tag, posted)), None)
                } else {
                    (None, ok.then(|| self.take_id()))
                };
                Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted,
                    status,
                    op,
                }
            }
            Kind::Sendrecv | Kind::Isendrecv => {
                let peer = i32v(buf, pos)?;
                let stag = i32v(buf, pos)?;
                let bytes = u(buf, pos)?;
                let src = i32v(buf, pos)?;
                let rtag = i32v(buf, pos)?;
                let posted = u(buf, pos)?;
                let comm = u32v(buf, pos)?;
                if kind == Kind::Isendrecv {
                    let op = ok.then(|| self.take_id());
                    Payload::Isendrecv {
                        peer,
                        stag,
                        bytes,
                        src,
                        rtag,
                        posted,
                        comm,
                        op,
                    }
                } else {
                    let status = self.status(buf, pos)?.resolve(src, rtag, posted);
                    Payload::Sendrecv {
                        peer,
                        stag,
                        bytes,
                        src,
                        rtag,
                        posted,
                        comm,
                        status,
                    }
                }
            }
            Kind::Probe | Kind::Iprobe | Kind::Mprobe | Kind::Improbe => {
                let src = i32v(buf, pos)?;
                let tag = i32v(buf, pos)?;
                let comm = u32v(buf, pos)?;
                let st = status(buf, pos)?;
                let found = !st.empty;
                let st = st.resolve(src, tag, 0);
                let op = (matches!(kind, Kind::Mprobe | Kind::Improbe) && ok && found)
                    .then(|| self.take_id());
                Payload::Probe {
                    src,
                    tag,
                    comm,
                    status: st,
                    op,
                }
            }
            Kind::Mrecv | Kind::Imrecv => {
                let msg = self.reference(buf, pos)?;
                let posted = u(buf, pos)?;
                let (status, op) = if kind == Kind::Mrecv {
                    (Some(self.status(buf, pos)?), None)
                } else {
                    (None, ok.then(|| self.take_id()))
                };
                Payload::Mrecv {
                    msg,
                    posted,
                    status,
                    op,
                }
            }
            Kind::Start => {
                let n = u(buf, pos)? as usize;
                let mut started = Vec::new();
                self.start_items(buf, pos, n, &mut started)?;
                Payload::Start { started }
            }
            Kind::Complete => {
                let n = u(buf, pos)? as usize;
                let mut done = Vec::new();
                self.complete_items(buf, pos, n, &mut done)?;
                Payload::Complete { done }
            }
            Kind::Cancel | Kind::RequestFree => Payload::OpRef {
                op: self.reference(buf, pos)?,
                cancelled: false,
            },
            Kind::Freed => Payload::OpRef {
                op: self.reference(buf, pos)?,
                cancelled: u(buf, pos)? & ST_CANCELLED != 0,
            },
            Kind::Coll | Kind::Icoll | Kind::CollInit => {
                let comm = u32v(buf, pos)?;
                let root = match u(buf, pos)? {
                    0 => None,
                    r => Some(
                        i32::try_from(crate::varint::unzigzag(r - 1))
                            .map_err(|_| corrupt("root"))?,
                    ),
                };
                let sent = u(buf, pos)?;
                let recvd = u(buf, pos)?;
                let code = u(buf, pos)?;
                let seq = if code == 0 {
                    match self.last_coll {
                        Some((c, s)) if c == comm => s + 1,
                        _ => return Err(corrupt("collective sequence without a predecessor")),
                    }
                } else {
                    code - 1
                };
                self.last_coll = Some((comm, seq));
                let op = (kind != Kind::Coll && ok).then(|| self.take_id());
                Payload::Coll {
                    comm,
                    root,
                    sent,
                    recvd,
                    seq,
                    op,
                }
            }
            Kind::CommNew => {
                let parent = u32v(buf, pos)?;
                let new = u32v(buf, pos)?;
                Payload::CommNew {
                    parent: parent.checked_sub(1),
                    comm: new.checked_sub(1),
                }
            }
            Kind::CommFree => Payload::CommFree {
                comm: u32v(buf, pos)?,
            },
        };
        Ok(Record::Call(Call {
            func: func as u32,
            t_start,
            t_end,
            rc,
            payload,
        }))
    }
}

fn check_count(buf: &[u8], pos: usize, n: usize) -> Result<(), FormatError> {
    // Every item takes at least one byte: a larger count is corruption, and
    // checking it first keeps a flipped bit from allocating gigabytes.
    if n > buf.len().saturating_sub(pos) {
        return Err(corrupt("list longer than its chunk"));
    }
    Ok(())
}

fn members(buf: &[u8], pos: &mut usize, n: usize, out: &mut Vec<u32>) -> Result<(), FormatError> {
    check_count(buf, *pos, n)?;
    let mut prev = out.last().map(|&m| i64::from(m)).unwrap_or(-1);
    for _ in 0..n {
        let m = prev + i(buf, pos)?;
        let m = u32::try_from(m).map_err(|_| corrupt("member rank"))?;
        out.push(m);
        prev = i64::from(m);
    }
    Ok(())
}

/// Encodes a list of member ranks (delta to the previous, starting from -1).
pub fn put_members<S: Sink>(out: &mut S, prev: &mut i64, members: &[u32]) {
    for &m in members {
        out.put_i(i64::from(m) - *prev);
        *prev = i64::from(m);
    }
}

/// The writer's clock rule: a record spanning `t0..t1` starts no earlier
/// than the thread's previous record ended. Returns (gap, duration) and
/// moves `prev_end` to the record's end.
#[inline(always)]
pub fn advance(prev_end: &mut u64, t0: u64, t1: u64) -> (u64, u64) {
    let prev = *prev_end;
    let start = t0.max(prev);
    let end = t1.max(start);
    *prev_end = end;
    (start - prev, end - start)
}

/// Writes the common record prefix.
#[inline(always)]
pub fn put_head<S: Sink>(out: &mut S, code: u64, gap: u64, dur: u64, rc: i32) {
    let err = rc != 0;
    out.put_u((code << 1) | err as u64);
    out.put_u(gap);
    out.put_u(dur);
    if err {
        out.put_i(rc as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::varint::SliceSink;

    const KINDS: &[Kind] = &[
        Kind::Send,
        Kind::Irecv,
        Kind::Complete,
        Kind::Coll,
        Kind::Iprobe,
        Kind::Recv,
    ];

    fn f(idx: u64) -> u64 {
        FIRST_FUNCTION_CODE + idx
    }

    #[test]
    fn send_record_is_small_and_round_trips() {
        let mut buf = vec![0u8; 256];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        put_head(&mut w, f(0), 40, 90, 0);
        w.put_i(1);
        w.put_i(7);
        w.put_u(0);
        w.put_u(8);
        assert_eq!(w.pos, 7, "an 8-byte send to a neighbour is 7 bytes");
        let mut d = ThreadDecoder::new(0);
        d.start_chunk(1000);
        let mut rd = 0;
        let rec = d.record(&buf, &mut rd, KINDS).unwrap();
        assert_eq!(
            rec,
            Record::Call(Call {
                func: 0,
                t_start: 1040,
                t_end: 1130,
                rc: 0,
                payload: Payload::Send {
                    peer: 1,
                    tag: 7,
                    comm: 0,
                    bytes: 8,
                    op: None
                }
            })
        );
        assert_eq!(
            ThreadDecoder::peek_code(&buf, rd).unwrap(),
            None,
            "zero byte ends the data"
        );
    }

    #[test]
    fn piggybacks_are_delta_coded_and_round_trip_with_vector_clocks() {
        let mut buf = vec![0u8; 512];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        let mut prev = PbState::default();
        // Two waits, each completing a receive whose message carried a
        // piggyback; the records start at 1000 and 2000.
        let msgs = [
            (msg_id(0, 7), 41u64, 990u64, [3u64, 9, 0]),
            (msg_id(2, 8), 40, 1995, [4, 9, 1]),
        ];
        let mut start = 0;
        for (k, &(id, lc, sent, vc)) in msgs.iter().enumerate() {
            put_head(&mut w, f(2), if k == 0 { 1000 } else { 990 }, 10, 0);
            start += 1000;
            w.put_u(1);
            w.put_i(0);
            put_status(&mut w, (1, 5, Some(8)), (1, 5, 8), ST_PIGGYBACK);
            put_pb(&mut w, &mut prev, start, id, lc, sent, &vc);
        }
        // Deltas keep a steady stream of messages small.
        assert!(
            w.pos < 40,
            "two completions with piggybacks took {} bytes",
            w.pos
        );
        let mut d = ThreadDecoder::with_vc_len(0, 3);
        let mut rd = 0;
        for &(id, lc, sent, vc) in &msgs {
            let Record::Call(Call {
                payload: Payload::Complete { done },
                ..
            }) = d.record(&buf, &mut rd, KINDS).unwrap()
            else {
                panic!()
            };
            let pb = done[0].status.pb.unwrap();
            assert_eq!((pb.id, pb.lc, pb.sent), (id, lc, sent));
            let at = pb.vc.unwrap() as usize * 3;
            assert_eq!(d.vc_arena[at..at + 3], vc);
        }
    }

    #[test]
    fn iprobe_miss_is_seven_bytes() {
        let mut buf = vec![0u8; 64];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        put_head(&mut w, f(4), 20, 50, 0);
        w.put_i(-1); // MPI_ANY_SOURCE in Open MPI
        w.put_i(3);
        w.put_u(0);
        put_status(&mut w, (-1, 3, None), (-1, 3, 0), ST_EMPTY | ST_BYTES);
        // flags carry EMPTY|BYTES, so bytes (0) is written: 8 bytes in all.
        assert!(w.pos <= 8);
    }

    #[test]
    fn irecv_then_wait_links_operation_ids_and_resolves_status() {
        let mut buf = vec![0u8; 256];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        // Irecv(src=-1 any, tag 5, comm 0, 40 bytes posted) -> op id (0<<40)|1
        put_head(&mut w, f(1), 0, 10, 0);
        w.put_i(-1);
        w.put_i(5);
        w.put_u(0);
        w.put_u(40);
        // Wait completing it: actual source 3, tag 5, 16 bytes.
        put_head(&mut w, f(2), 5, 10, 0);
        w.put_u(1);
        w.put_i(op_ref(2, Some(1)));
        put_status(&mut w, (-1, 5, Some(40)), (3, 5, 16), 0);
        let mut d = ThreadDecoder::new(0);
        let mut rd = 0;
        let irecv = d.record(&buf, &mut rd, KINDS).unwrap();
        let Record::Call(Call {
            payload: Payload::Recv { op, .. },
            ..
        }) = irecv
        else {
            panic!()
        };
        assert_eq!(op, Some(1));
        let wait = d.record(&buf, &mut rd, KINDS).unwrap();
        let Record::Call(Call {
            t_start,
            payload: Payload::Complete { done },
            ..
        }) = wait
        else {
            panic!()
        };
        assert_eq!(t_start, 15);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].op, Some(1));
        assert_eq!(
            done[0].status.resolve(-1, 5, 40),
            Status {
                source: Some(3),
                tag: Some(5),
                bytes: Some(16),
                ..Status::default()
            }
        );
    }

    #[test]
    fn collective_sequence_numbers_are_implicit_in_a_loop() {
        let mut buf = vec![0u8; 256];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        let mut last = None;
        for seq in [0u64, 1, 2, 10] {
            put_head(&mut w, f(3), 1, 1, 0);
            w.put_u(2);
            w.put_u(root_code(None));
            w.put_u(8);
            w.put_u(8);
            w.put_u(coll_seq_code(last, 2, seq));
            last = Some((2, seq));
        }
        let mut d = ThreadDecoder::new(0);
        let mut rd = 0;
        let seqs: Vec<u64> = (0..4)
            .map(|_| match d.record(&buf, &mut rd, KINDS).unwrap() {
                Record::Call(Call {
                    payload: Payload::Coll { seq, .. },
                    ..
                }) => seq,
                r => panic!("{r:?}"),
            })
            .collect();
        assert_eq!(seqs, vec![0, 1, 2, 10]);
    }

    #[test]
    fn error_bit_carries_return_code_and_consumes_no_op_id() {
        let mut buf = vec![0u8; 64];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        put_head(&mut w, f(1), 0, 1, 5);
        w.put_i(0);
        w.put_i(0);
        w.put_u(0);
        w.put_u(4);
        let mut d = ThreadDecoder::new(0);
        let Record::Call(c) = d.record(&buf, &mut 0, KINDS).unwrap() else {
            panic!()
        };
        assert_eq!(c.rc, 5);
        assert!(matches!(c.payload, Payload::Recv { op: None, .. }));
    }

    #[test]
    fn huge_list_count_is_corruption_not_allocation() {
        let mut buf = vec![0u8; 32];
        let mut w = SliceSink {
            buf: &mut buf,
            pos: 0,
        };
        put_head(&mut w, f(2), 0, 0, 0);
        w.put_u(u64::MAX >> 2);
        let mut d = ThreadDecoder::new(0);
        assert!(d.record(&buf, &mut 0, KINDS).is_err());
    }
}
