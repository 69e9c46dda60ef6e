//! A thread's decoded records, held in columns.
//!
//! ```text
//!  per event  start u32 │ dur u32 │ func u16 │ tag u8 │ has-row bit      11.4 bytes
//!                                      │          └─► rows[rank of the bit]: where
//!                                      │              its payload is (4 bytes, only
//!                                      │              events with a payload)
//!                                      └─ variant, and flags: the payload has an
//!                                         op, rc ≠ 0, duration ≥ 2^32 − 1
//!  payloads   bytes: each call's payload as varints      (halo2d: 14 B/event)
//!             rcs, long                                  (sparse, sorted by event)
//!             started                                    (Start items)
//!             other                                      (rare payloads as decoded)
//!             defs, tids                                 (DefComm, DefThread)
//! ```
//!
//! A payload is kept as LEB128 varints (zigzag for signed fields) in the
//! thread's `bytes`, each self-contained: times as differences from the
//! record's start, nothing relative to an earlier record. `rows` holds its
//! offset from the first payload byte of its word of 64 events
//! (`byte_base`), or, for the variants kept in tables (`other`, `defs`,
//! `tids`), its index there. Layouts, an `[x]` there only if a flag says:
//!
//! ```text
//!  send      peer:i tag:i comm:u bytes:u [op:u]
//!  recv      src:i tag:i comm:u (start−posted):i [op:u] status
//!  sendrecv  peer:i stag:i bytes:u src:i rtag:i (start−posted):i comm:u status
//!  isendrecv peer:i stag:i bytes:u src:i rtag:i (start−posted):i comm:u [op:u]
//!  probe     src:i tag:i comm:u status [op:u]
//!  coll      comm:u root:u (0 none, else zigzag + 1) sent:u recvd:u seq:u [op:u]
//!  start     first:u n:u                                  (into `started`)
//!  complete  n:u, n × (flags:1 [op:u] [status])
//!  status    flags:1 [flags2:1] [source:i] [tag:i] [bytes:u]
//!            [pb: id:u lc:u (start−sent):i [vc:u]]
//! ```
//!
//! A record is read back by value ([`Events::get`]) as the view types of
//! this module, which mirror `pmtrace_format::record` except that lists
//! are read from the bytes as they are walked: [`Record`], [`Call`],
//! [`Payload`], [`Done`]. Hot loops that need only times or the function
//! read the columns themselves ([`Events::stamps`], [`Events::func`]).

use pmtrace_format::record::{self as fmt, CommDef, Completion, Pb, Status};
use pmtrace_format::varint::{get_u, unzigzag, zigzag};

/// One record, viewed (see [`Events::get`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    Call(Call<'a>),
    BufferWait { t_start: u64, t_end: u64 },
    DefComm { t: u64, def: &'a CommDef },
    DefThread { t: u64, tid: u64 },
}

/// An MPI call, viewed: `pmtrace_format::record::Call` with lists borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    pub func: u32,
    pub t_start: u64,
    pub t_end: u64,
    /// MPI return code (0 = MPI_SUCCESS).
    pub rc: i32,
    pub payload: Payload<'a>,
}

/// `pmtrace_format::record::Payload`, its lists borrowed from the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
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
        name: Option<&'a str>,
    },
    Send {
        peer: i32,
        tag: i32,
        comm: u32,
        bytes: u64,
        op: Option<u64>,
    },
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
    Probe {
        src: i32,
        tag: i32,
        comm: u32,
        status: Status,
        op: Option<u64>,
    },
    Mrecv {
        msg: Option<u64>,
        posted: u64,
        status: Option<Status>,
        op: Option<u64>,
    },
    /// (persistent request started, new instance id)
    Start {
        started: &'a [(Option<u64>, u64)],
    },
    Complete {
        done: Done<'a>,
    },
    OpRef {
        op: Option<u64>,
        /// A freed operation whose cancellation succeeded.
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

/// The operations a completion call completed, read item by item.
#[derive(Clone, Copy)]
pub struct Done<'a> {
    /// The items' bytes, from the first on.
    bytes: &'a [u8],
    n: u32,
    /// The record's start (piggyback send times are kept against it).
    t: u64,
}

impl<'a> Done<'a> {
    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn get(&self, i: usize) -> Option<Completion> {
        self.iter().nth(i)
    }

    pub fn iter(&self) -> DoneIter<'a> {
        DoneIter {
            g: Get::new(self.bytes, 0),
            left: self.n,
            t: self.t,
        }
    }
}

/// The items of a [`Done`], decoded in order.
pub struct DoneIter<'a> {
    g: Get<'a>,
    left: u32,
    t: u64,
}

impl Iterator for DoneIter<'_> {
    type Item = Completion;

    #[inline]
    fn next(&mut self) -> Option<Completion> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let flags = self.g.byte();
        let op = (flags & ITEM_OP != 0).then(|| self.g.u());
        let status = if flags & ITEM_NONE != 0 {
            none_status()
        } else {
            get_status(&mut self.g, self.t).unwrap_or_default()
        };
        Some(Completion { op, status })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for DoneIter<'_> {}

impl std::fmt::Debug for Done<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Done<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Done<'_> {}

// ---- payload bytes ----

const HAS_SOURCE: u8 = 1;
const HAS_TAG: u8 = 2;
const HAS_BYTES: u8 = 4;
const CANCELLED: u8 = 8;
const EMPTY: u8 = 16;
const NONE: u8 = 32;
const HAS_PB: u8 = 64;
/// For an `Option<Status>`: there is one.
const PRESENT: u8 = 128;

/// Second flags byte of a status (there only with `HAS_PB`).
const HAS_VC: u8 = 1;

/// Flags of a completion item: its op is there; its status is that of an
/// operation without a receive status (a send's, a collective's: most of
/// them), which is not stored.
const ITEM_OP: u8 = 1;
const ITEM_NONE: u8 = 2;

/// Appends varints to a thread's payload bytes.
struct Put<'a>(&'a mut Vec<u8>);

impl Put<'_> {
    #[inline]
    fn u(&mut self, mut v: u64) -> &mut Self {
        // Byte by byte: a copy of a few bytes from a scratch buffer is a
        // call to memcpy.
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
        self
    }

    #[inline]
    fn i(&mut self, v: i64) -> &mut Self {
        self.u(zigzag(v))
    }

    /// `later - earlier` of two times, either way round.
    #[inline]
    fn dt(&mut self, later: u64, earlier: u64) -> &mut Self {
        self.i(later.wrapping_sub(earlier) as i64)
    }

    fn byte(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }
}

/// Reads varints back from payload bytes this module wrote (so never past
/// their end; a read there gives 0 rather than a panic).
#[derive(Clone)]
struct Get<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Get<'a> {
    fn new(b: &'a [u8], pos: usize) -> Self {
        Get { b, pos }
    }

    #[inline]
    fn byte(&mut self) -> u8 {
        let v = self.b.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        v
    }

    #[inline]
    fn u(&mut self) -> u64 {
        get_u(self.b, &mut self.pos).unwrap_or(0)
    }

    #[inline]
    fn i(&mut self) -> i64 {
        unzigzag(self.u())
    }

    #[inline]
    fn i32(&mut self) -> i32 {
        self.i() as i32
    }

    #[inline]
    fn u32(&mut self) -> u32 {
        self.u() as u32
    }

    /// A time kept as `t - time` (see [`Put::dt`]).
    #[inline]
    fn time(&mut self, t: u64) -> u64 {
        t.wrapping_sub(self.i() as u64)
    }
}

/// Writes an `Option<Status>` (one byte for `None`); `t` is the record's
/// start.
fn put_status(out: &mut Put, s: Option<&Status>, t: u64) {
    let Some(s) = s else {
        out.byte(0);
        return;
    };
    let mut flags = PRESENT;
    for (set, bit) in [
        (s.source.is_some(), HAS_SOURCE),
        (s.tag.is_some(), HAS_TAG),
        (s.bytes.is_some(), HAS_BYTES),
        (s.cancelled, CANCELLED),
        (s.empty, EMPTY),
        (s.none, NONE),
        (s.pb.is_some(), HAS_PB),
    ] {
        if set {
            flags |= bit;
        }
    }
    out.byte(flags);
    if let Some(pb) = &s.pb {
        out.byte(if pb.vc.is_some() { HAS_VC } else { 0 });
    }
    if let Some(v) = s.source {
        out.i(v.into());
    }
    if let Some(v) = s.tag {
        out.i(v.into());
    }
    if let Some(v) = s.bytes {
        out.u(v);
    }
    if let Some(pb) = &s.pb {
        out.u(pb.id).u(pb.lc).dt(t, pb.sent);
        if let Some(vc) = pb.vc {
            out.u(vc.into());
        }
    }
}

#[inline]
fn get_status(g: &mut Get, t: u64) -> Option<Status> {
    let f = g.byte();
    if f & PRESENT == 0 {
        return None;
    }
    let f2 = if f & HAS_PB != 0 { g.byte() } else { 0 };
    let source = (f & HAS_SOURCE != 0).then(|| g.i32());
    let tag = (f & HAS_TAG != 0).then(|| g.i32());
    let bytes = (f & HAS_BYTES != 0).then(|| g.u());
    let pb = (f & HAS_PB != 0).then(|| {
        let (id, lc) = (g.u(), g.u());
        let sent = g.time(t);
        let vc = (f2 & HAS_VC != 0).then(|| g.u32());
        Pb { id, lc, sent, vc }
    });
    Some(Status {
        source,
        tag,
        bytes,
        cancelled: f & CANCELLED != 0,
        empty: f & EMPTY != 0,
        none: f & NONE != 0,
        pb,
    })
}

/// The status of a completion without a receive status, as decoded.
fn none_status() -> Status {
    Status {
        none: true,
        ..Status::default()
    }
}

// ---- the columns ----

/// Variants (low bits of the tag column).
mod tag {
    pub const NONE: u8 = 0;
    pub const SEND: u8 = 1;
    pub const RECV: u8 = 2;
    pub const SENDRECV: u8 = 3;
    pub const ISENDRECV: u8 = 4;
    pub const PROBE: u8 = 5;
    pub const COLL: u8 = 6;
    pub const START: u8 = 7;
    pub const COMPLETE: u8 = 8;
    /// A call with a payload kept as decoded (`other`).
    pub const OTHER: u8 = 9;
    pub const BUFFER_WAIT: u8 = 10;
    pub const DEF_COMM: u8 = 11;
    pub const DEF_THREAD: u8 = 12;
    pub const VARIANT: u8 = 0x1f;
    /// Flag: the row's `op` is there.
    pub const OP: u8 = 0x20;
    /// Flags: the call's rc is not 0 (`rcs`), its duration is in `long`.
    pub const RC: u8 = 0x40;
    pub const LONG: u8 = 0x80;
}

/// Durations at or past this are kept in `long`.
const LONG_DUR: u32 = u32::MAX;

/// A start offset kept in `far`.
const FAR: u32 = u32::MAX;

/// The records of one thread, in order (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Events {
    /// Each record's start less its word's `t_base` ([`FAR`]: the start is
    /// in `far`).
    t_off: Vec<u32>,
    /// The start of the first record of each word of 64 (see `has_row`).
    t_base: Vec<u64>,
    /// (record, start) of the records whose start is not within 2^32 − 1
    /// ns after their word's first, in order.
    far: Vec<(u32, u64)>,
    dur: Vec<u32>,
    func: Vec<u16>,
    tag: Vec<u8>,
    /// A bit per event: it has a row (every variant but a plain call and
    /// a buffer wait).
    has_row: Vec<u64>,
    /// Rows before each word of `has_row`.
    row_base: Vec<u32>,
    /// The row of each event that has one, in order: the offset of its
    /// payload from its word's `byte_base`, or its index in `other`,
    /// `defs` or `tids`.
    rows: Vec<u32>,
    /// The payloads (see the module docs).
    bytes: Vec<u8>,
    /// Payload bytes before each word of `has_row`.
    byte_base: Vec<u64>,
    rcs: Vec<(u32, i32)>,
    long: Vec<(u32, u64)>,
    started: Vec<(Option<u64>, u64)>,
    other: Vec<fmt::Payload>,
    defs: Vec<CommDef>,
    tids: Vec<u64>,
}

/// A table position as a `u32`: a thread's tables hold fewer than 2^32
/// rows (the reader refuses more events per thread than that).
fn index(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 rows per thread")
}

/// Most events one thread may hold.
pub const MAX_EVENTS: usize = u32::MAX as usize;

/// Function ids past this cannot be held (the reader refuses such headers).
pub const MAX_FUNCS: usize = u16::MAX as usize + 1;

impl Events {
    pub fn len(&self) -> usize {
        self.t_off.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_off.is_empty()
    }

    /// Bytes the columns and tables hold (their lengths, not capacities).
    pub fn bytes(&self) -> usize {
        use std::mem::size_of_val;
        size_of_val(&self.t_off[..])
            + size_of_val(&self.t_base[..])
            + size_of_val(&self.far[..])
            + size_of_val(&self.dur[..])
            + size_of_val(&self.func[..])
            + size_of_val(&self.tag[..])
            + size_of_val(&self.has_row[..])
            + size_of_val(&self.row_base[..])
            + size_of_val(&self.rows[..])
            + size_of_val(&self.bytes[..])
            + size_of_val(&self.byte_base[..])
            + size_of_val(&self.rcs[..])
            + size_of_val(&self.long[..])
            + size_of_val(&self.started[..])
            + size_of_val(&self.other[..])
            + size_of_val(&self.defs[..])
            + size_of_val(&self.tids[..])
    }

    /// Appends a decoded record. The caller keeps below [`MAX_EVENTS`]
    /// events and [`MAX_FUNCS`] functions.
    pub fn push(&mut self, r: fmt::Record) {
        let at = index(self.t_off.len());
        if at.is_multiple_of(64) {
            self.has_row.push(0);
            self.row_base.push(index(self.rows.len()));
            self.byte_base.push(self.bytes.len() as u64);
        }
        let (t_start, t_end, func, rc, tag, row) = match r {
            fmt::Record::Call(c) => {
                let (tag, row) = self.push_payload(c.payload, c.t_start);
                (c.t_start, c.t_end, c.func, c.rc, tag, row)
            }
            fmt::Record::BufferWait { t_start, t_end } => {
                (t_start, t_end, 0, 0, tag::BUFFER_WAIT, 0)
            }
            fmt::Record::DefComm { t, def } => {
                self.defs.push(def);
                (t, t, 0, 0, tag::DEF_COMM, index(self.defs.len() - 1))
            }
            fmt::Record::DefThread { t, tid } => {
                self.tids.push(tid);
                (t, t, 0, 0, tag::DEF_THREAD, index(self.tids.len() - 1))
            }
        };
        let mut tag = tag;
        let dur = t_end.wrapping_sub(t_start);
        if dur >= u64::from(LONG_DUR) {
            tag |= tag::LONG;
            self.long.push((at, t_end));
            self.dur.push(LONG_DUR);
        } else {
            self.dur.push(dur as u32);
        }
        if rc != 0 {
            tag |= tag::RC;
            self.rcs.push((at, rc));
        }
        if at.is_multiple_of(64) {
            self.t_base.push(t_start);
        }
        let off = t_start.wrapping_sub(*self.t_base.last().expect("a word for every event"));
        match u32::try_from(off) {
            Ok(off) if off != FAR => self.t_off.push(off),
            _ => {
                self.t_off.push(FAR);
                self.far.push((at, t_start));
            }
        }
        self.func.push(func as u16);
        self.tag.push(tag);
        if !matches!(tag & tag::VARIANT, tag::NONE | tag::BUFFER_WAIT) {
            self.has_row[at as usize / 64] |= 1 << (at % 64);
            self.rows.push(row);
        }
    }

    /// Keeps a call's payload; returns its tag and row. `t` is the call's
    /// start.
    fn push_payload(&mut self, p: fmt::Payload, t: u64) -> (u8, u32) {
        // An op goes in last, and a flag in the tag.
        let op_flag = |op: Option<u64>| if op.is_some() { tag::OP } else { 0 };
        let base = *self.byte_base.last().expect("a word for every event");
        let row = u32::try_from(self.bytes.len() as u64 - base)
            .expect("fewer than 4 GiB of payloads in 64 records");
        let out = &mut Put(&mut self.bytes);
        let put_op = |out: &mut Put, op: Option<u64>| {
            if let Some(op) = op {
                out.u(op);
            }
        };
        let tag = match p {
            fmt::Payload::None => return (tag::NONE, 0),
            fmt::Payload::Send {
                peer,
                tag,
                comm,
                bytes,
                op,
            } => {
                out.i(peer.into()).i(tag.into()).u(comm.into()).u(bytes);
                put_op(out, op);
                tag::SEND | op_flag(op)
            }
            fmt::Payload::Recv {
                src,
                tag,
                comm,
                posted,
                status,
                op,
            } => {
                out.i(src.into()).i(tag.into()).u(comm.into()).dt(t, posted);
                put_op(out, op);
                put_status(out, status.as_ref(), t);
                tag::RECV | op_flag(op)
            }
            fmt::Payload::Sendrecv {
                peer,
                stag,
                bytes,
                src,
                rtag,
                posted,
                comm,
                status,
            } => {
                out.i(peer.into()).i(stag.into()).u(bytes);
                out.i(src.into())
                    .i(rtag.into())
                    .dt(t, posted)
                    .u(comm.into());
                put_status(out, Some(&status), t);
                tag::SENDRECV
            }
            fmt::Payload::Isendrecv {
                peer,
                stag,
                bytes,
                src,
                rtag,
                posted,
                comm,
                op,
            } => {
                out.i(peer.into()).i(stag.into()).u(bytes);
                out.i(src.into())
                    .i(rtag.into())
                    .dt(t, posted)
                    .u(comm.into());
                put_op(out, op);
                tag::ISENDRECV | op_flag(op)
            }
            fmt::Payload::Probe {
                src,
                tag,
                comm,
                status,
                op,
            } => {
                out.i(src.into()).i(tag.into()).u(comm.into());
                put_status(out, Some(&status), t);
                put_op(out, op);
                tag::PROBE | op_flag(op)
            }
            fmt::Payload::Coll {
                comm,
                root,
                sent,
                recvd,
                seq,
                op,
            } => {
                let root = root.map_or(0, |r| zigzag(r.into()) + 1);
                out.u(comm.into()).u(root).u(sent).u(recvd).u(seq);
                put_op(out, op);
                tag::COLL | op_flag(op)
            }
            fmt::Payload::Start { started } => {
                out.u(self.started.len() as u64).u(started.len() as u64);
                self.started.extend_from_slice(&started);
                tag::START
            }
            fmt::Payload::Complete { done } => {
                out.u(done.len() as u64);
                for c in &done {
                    let none = c.status == none_status();
                    let flags =
                        if c.op.is_some() { ITEM_OP } else { 0 } | if none { ITEM_NONE } else { 0 };
                    out.byte(flags);
                    put_op(out, c.op);
                    if !none {
                        put_status(out, Some(&c.status), t);
                    }
                }
                tag::COMPLETE
            }
            other => {
                self.other.push(other);
                return (tag::OTHER, index(self.other.len() - 1));
            }
        };
        (tag, row)
    }

    /// The row of record `i` (0 for a record without one).
    #[inline]
    fn row(&self, i: usize) -> usize {
        let word = self.has_row[i / 64];
        let bit = 1u64 << (i % 64);
        if word & bit == 0 {
            return 0;
        }
        let before = (word & (bit - 1)).count_ones();
        self.rows[(self.row_base[i / 64] + before) as usize] as usize
    }

    /// The payload bytes of record `i`, a call kept in `bytes`, from its
    /// first on.
    #[inline]
    fn payload_at(&self, i: usize) -> Get<'_> {
        let at = self.byte_base[i / 64] as usize + self.row(i);
        Get::new(&self.bytes, at)
    }

    /// Start time of record `i`.
    #[inline]
    fn start(&self, i: usize) -> u64 {
        match self.t_off[i] {
            FAR => {
                let at = self.far.partition_point(|&(j, _)| (j as usize) < i);
                self.far[at].1
            }
            off => self.t_base[i / 64].wrapping_add(u64::from(off)),
        }
    }

    /// Start and end time of record `i`.
    #[inline]
    pub fn stamps(&self, i: usize) -> (u64, u64) {
        let t = self.start(i);
        let d = self.dur[i];
        if d == LONG_DUR && self.tag[i] & tag::LONG != 0 {
            (t, self.long_end(i))
        } else {
            (t, t.wrapping_add(u64::from(d)))
        }
    }

    /// The time at stamp position `p`: 2·record for its start, 2·record + 1
    /// for its end.
    #[inline]
    pub fn stamp(&self, p: usize) -> u64 {
        let (a, b) = self.stamps(p / 2);
        if p.is_multiple_of(2) {
            a
        } else {
            b
        }
    }

    fn long_end(&self, i: usize) -> u64 {
        let at = self.long.partition_point(|&(j, _)| (j as usize) < i);
        self.long[at].1
    }

    /// Whether record `i` is an MPI call.
    #[inline]
    pub fn is_call(&self, i: usize) -> bool {
        self.tag[i] & tag::VARIANT < tag::BUFFER_WAIT
    }

    /// How many records are buffer waits.
    pub fn buffer_waits(&self) -> usize {
        (0..self.len()).filter(|&i| self.is_buffer_wait(i)).count()
    }

    /// Whether record `i` is a buffer wait.
    #[inline]
    pub fn is_buffer_wait(&self, i: usize) -> bool {
        self.tag[i] & tag::VARIANT == tag::BUFFER_WAIT
    }

    /// Whether record `i` is a call with a payload (not `Payload::None`).
    #[inline]
    pub fn has_payload(&self, i: usize) -> bool {
        let v = self.tag[i] & tag::VARIANT;
        v != tag::NONE && v < tag::BUFFER_WAIT
    }

    /// Whether record `i` is a call whose payload is a send, a send and
    /// receive (blocking or not), or a start: the calls that may send.
    #[inline]
    pub fn may_send(&self, i: usize) -> bool {
        matches!(
            self.tag[i] & tag::VARIANT,
            tag::SEND | tag::SENDRECV | tag::ISENDRECV | tag::START
        )
    }

    /// The function of record `i`, if it is a call.
    #[inline]
    pub fn func(&self, i: usize) -> Option<u32> {
        self.is_call(i).then(|| u32::from(self.func[i]))
    }

    fn rc(&self, i: usize) -> i32 {
        if self.tag[i] & tag::RC == 0 {
            return 0;
        }
        let at = self.rcs.partition_point(|&(j, _)| (j as usize) < i);
        self.rcs[at].1
    }

    /// Record `i`, viewed; panics past the end, as indexing does.
    pub fn get(&self, i: usize) -> Record<'_> {
        let t_start = self.start(i);
        match self.tag[i] & tag::VARIANT {
            tag::BUFFER_WAIT => Record::BufferWait {
                t_start,
                t_end: self.stamps(i).1,
            },
            tag::DEF_COMM => Record::DefComm {
                t: t_start,
                def: &self.defs[self.row(i)],
            },
            tag::DEF_THREAD => Record::DefThread {
                t: t_start,
                tid: self.tids[self.row(i)],
            },
            _ => Record::Call(self.call_view(i)),
        }
    }

    /// The call at `i`, if record `i` is one.
    #[inline]
    pub fn call(&self, i: usize) -> Option<Call<'_>> {
        self.is_call(i).then(|| self.call_view(i))
    }

    /// Record `i`, a call, viewed.
    fn call_view(&self, i: usize) -> Call<'_> {
        let (t_start, t_end) = self.stamps(i);
        let has_op = self.tag[i] & tag::OP != 0;
        let t = t_start;
        let variant = self.tag[i] & tag::VARIANT;
        let mut g = match variant {
            tag::NONE | tag::OTHER => Get::new(&[], 0),
            _ => self.payload_at(i),
        };
        let g = &mut g;
        let op = |g: &mut Get| has_op.then(|| g.u());
        let payload = match variant {
            tag::NONE => Payload::None,
            tag::SEND => {
                let (peer, tag, comm, bytes) = (g.i32(), g.i32(), g.u32(), g.u());
                Payload::Send {
                    peer,
                    tag,
                    comm,
                    bytes,
                    op: op(g),
                }
            }
            tag::RECV => {
                let (src, tag, comm, posted) = (g.i32(), g.i32(), g.u32(), g.time(t));
                let op = op(g);
                Payload::Recv {
                    src,
                    tag,
                    comm,
                    posted,
                    status: get_status(g, t),
                    op,
                }
            }
            tag::SENDRECV | tag::ISENDRECV => {
                let (peer, stag, bytes) = (g.i32(), g.i32(), g.u());
                let (src, rtag, posted, comm) = (g.i32(), g.i32(), g.time(t), g.u32());
                if variant == tag::SENDRECV {
                    Payload::Sendrecv {
                        peer,
                        stag,
                        bytes,
                        src,
                        rtag,
                        posted,
                        comm,
                        status: get_status(g, t).unwrap_or_default(),
                    }
                } else {
                    Payload::Isendrecv {
                        peer,
                        stag,
                        bytes,
                        src,
                        rtag,
                        posted,
                        comm,
                        op: op(g),
                    }
                }
            }
            tag::PROBE => {
                let (src, tag, comm) = (g.i32(), g.i32(), g.u32());
                let status = get_status(g, t).unwrap_or_default();
                Payload::Probe {
                    src,
                    tag,
                    comm,
                    status,
                    op: op(g),
                }
            }
            tag::COLL => {
                let comm = g.u32();
                let root = match g.u() {
                    0 => None,
                    r => Some(unzigzag(r - 1) as i32),
                };
                let (sent, recvd, seq) = (g.u(), g.u(), g.u());
                Payload::Coll {
                    comm,
                    root,
                    sent,
                    recvd,
                    seq,
                    op: op(g),
                }
            }
            tag::START => {
                let (first, n) = (g.u() as usize, g.u() as usize);
                Payload::Start {
                    started: self.started.get(first..first + n).unwrap_or(&[]),
                }
            }
            tag::COMPLETE => {
                let n = g.u32();
                Payload::Complete {
                    done: Done {
                        bytes: g.b.get(g.pos..).unwrap_or(&[]),
                        n,
                        t,
                    },
                }
            }
            tag::OTHER => view_other(&self.other[self.row(i)]),
            v => unreachable!("variant {v} is not a call's"),
        };
        Call {
            func: u32::from(self.func[i]),
            t_start,
            t_end,
            rc: self.rc(i),
            payload,
        }
    }

    /// Every record, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            events: self,
            at: 0..self.len(),
        }
    }

    /// Every communicator definition, in order.
    pub fn defs(&self) -> impl Iterator<Item = (u64, &CommDef)> + '_ {
        (0..self.len())
            .filter(|&i| self.tag[i] & tag::VARIANT == tag::DEF_COMM)
            .map(|i| (self.start(i), &self.defs[self.row(i)]))
    }

    /// The first DefThread record's thread id.
    pub fn first_tid(&self) -> Option<u64> {
        self.tids.first().copied()
    }

    /// Room for `n` more records in the per-record columns.
    pub fn reserve(&mut self, n: usize) {
        self.t_off.reserve_exact(n);
        self.t_base.reserve_exact(n.div_ceil(64));
        self.dur.reserve_exact(n);
        self.func.reserve_exact(n);
        self.tag.reserve_exact(n);
        self.has_row.reserve_exact(n.div_ceil(64));
        self.row_base.reserve_exact(n.div_ceil(64));
        self.byte_base.reserve_exact(n.div_ceil(64));
    }

    /// Trims each column to its length (after the last push).
    pub fn shrink_to_fit(&mut self) {
        self.t_off.shrink_to_fit();
        self.t_base.shrink_to_fit();
        self.far.shrink_to_fit();
        self.dur.shrink_to_fit();
        self.func.shrink_to_fit();
        self.tag.shrink_to_fit();
        self.has_row.shrink_to_fit();
        self.row_base.shrink_to_fit();
        self.rows.shrink_to_fit();
        self.bytes.shrink_to_fit();
        self.byte_base.shrink_to_fit();
        self.started.shrink_to_fit();
    }
}

/// The records of an [`Events`], viewed in order.
pub struct Iter<'a> {
    events: &'a Events,
    at: std::ops::Range<usize>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        self.at.next().map(|i| self.events.get(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.at.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.at.next_back().map(|i| self.events.get(i))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Events {
    type Item = Record<'a>;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<fmt::Record> for Events {
    fn from_iter<I: IntoIterator<Item = fmt::Record>>(records: I) -> Events {
        let mut e = Events::default();
        for r in records {
            e.push(r);
        }
        e
    }
}

/// A rare payload, viewed from the decoded one it is kept as.
fn view_other(p: &fmt::Payload) -> Payload<'_> {
    match *p {
        fmt::Payload::InitThread { required, provided } => {
            Payload::InitThread { required, provided }
        }
        fmt::Payload::Abort { comm, code } => Payload::Abort { comm, code },
        fmt::Payload::Pcontrol { level } => Payload::Pcontrol { level },
        fmt::Payload::Phase { ref name } => Payload::Phase {
            name: name.as_deref(),
        },
        fmt::Payload::Mrecv {
            msg,
            posted,
            status,
            op,
        } => Payload::Mrecv {
            msg,
            posted,
            status,
            op,
        },
        fmt::Payload::OpRef { op, cancelled } => Payload::OpRef { op, cancelled },
        fmt::Payload::CommNew { parent, comm } => Payload::CommNew { parent, comm },
        fmt::Payload::CommFree { comm } => Payload::CommFree { comm },
        // Every other variant has a table of its own (`push_payload`).
        _ => Payload::None,
    }
}

/// Whether a view shows exactly what was decoded: for tests and checks.
pub fn same(view: Record<'_>, decoded: &fmt::Record) -> bool {
    use fmt::Payload as P;
    match (view, decoded) {
        (Record::Call(v), fmt::Record::Call(d)) => {
            v.func == d.func
                && v.t_start == d.t_start
                && v.t_end == d.t_end
                && v.rc == d.rc
                && match (v.payload, &d.payload) {
                    (Payload::Start { started }, P::Start { started: s }) => started == &s[..],
                    (Payload::Complete { done }, P::Complete { done: d }) => {
                        done.len() == d.len() && done.iter().eq(d.iter().copied())
                    }
                    (p, d) => format!("{p:?}") == format!("{d:?}"),
                }
        }
        (
            Record::BufferWait { t_start, t_end },
            fmt::Record::BufferWait {
                t_start: a,
                t_end: b,
            },
        ) => t_start == *a && t_end == *b,
        (Record::DefComm { t, def }, fmt::Record::DefComm { t: a, def: b }) => t == *a && def == b,
        (Record::DefThread { t, tid }, fmt::Record::DefThread { t: a, tid: b }) => {
            t == *a && tid == *b
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_take_the_bytes_the_module_docs_give() {
        // halo2d's calls, 100 ns apart: Isend, Irecv, a Waitall of a send
        // and a receive with a piggyback sent 20 ns before, an Allreduce.
        let t = 1_000_000_000;
        let op = |n| fmt::op_id(0, n);
        let status = Status {
            source: Some(1),
            tag: Some(5),
            bytes: Some(64),
            pb: Some(Pb {
                id: 300,
                lc: 40,
                sent: t + 200 - 20,
                vc: None,
            }),
            ..Status::default()
        };
        let payloads = [
            (
                fmt::Payload::Send {
                    peer: 1,
                    tag: 5,
                    comm: 0,
                    bytes: 64,
                    op: Some(op(100)),
                },
                1 + 1 + 1 + 1 + 1,
            ),
            (
                fmt::Payload::Recv {
                    src: 1,
                    tag: 5,
                    comm: 0,
                    posted: t + 100,
                    status: None,
                    op: Some(op(101)),
                },
                1 + 1 + 1 + 1 + 1 + 1,
            ),
            (
                fmt::Payload::Complete {
                    done: vec![
                        Completion {
                            op: Some(op(100)),
                            status: none_status(),
                        },
                        Completion {
                            op: Some(op(101)),
                            status,
                        },
                    ],
                },
                // n, then (flags, op), then (flags, op, status flags,
                // source, tag, bytes, pb id (2), lc, sent)
                1 + 2 + (1 + 1 + 2 + 1 + 1 + 1 + 2 + 1 + 1),
            ),
            (
                fmt::Payload::Coll {
                    comm: 0,
                    root: None,
                    sent: 8,
                    recvd: 8,
                    seq: 1000,
                    op: None,
                },
                1 + 1 + 1 + 1 + 2,
            ),
        ];
        let mut events = Events::default();
        for (k, (p, want)) in payloads.into_iter().enumerate() {
            let before = events.bytes.len();
            events.push(call(t + k as u64 * 100, 10, 0, p.clone()));
            let got = &events.bytes[before..];
            assert_eq!(got.len(), want, "{p:?}: {got:?}");
            assert!(same(events.get(k), &call(t + k as u64 * 100, 10, 0, p)));
        }
    }

    fn status(pb: bool) -> Status {
        Status {
            source: Some(3),
            tag: None,
            bytes: Some(1 << 40),
            cancelled: false,
            empty: false,
            none: false,
            pb: pb.then_some(Pb {
                id: 7,
                lc: 9,
                sent: 11,
                vc: Some(2),
            }),
        }
    }

    fn call(t: u64, dur: u64, rc: i32, payload: fmt::Payload) -> fmt::Record {
        fmt::Record::Call(fmt::Call {
            func: 5,
            t_start: t,
            t_end: t + dur,
            rc,
            payload,
        })
    }

    #[test]
    fn every_variant_reads_back_as_decoded() {
        let records = vec![
            call(10, 2, 0, fmt::Payload::None),
            call(
                20,
                u64::from(u32::MAX) + 5,
                -3,
                fmt::Payload::Send {
                    peer: 1,
                    tag: -1,
                    comm: 2,
                    bytes: 1 << 33,
                    op: Some(1 << 41),
                },
            ),
            call(
                30,
                u64::from(u32::MAX),
                0,
                fmt::Payload::Recv {
                    src: -2,
                    tag: 4,
                    comm: 0,
                    posted: 8,
                    status: Some(status(true)),
                    op: None,
                },
            ),
            call(
                40,
                1,
                0,
                fmt::Payload::Recv {
                    src: 1,
                    tag: 4,
                    comm: 0,
                    posted: 8,
                    status: None,
                    op: Some(3),
                },
            ),
            call(
                50,
                1,
                0,
                fmt::Payload::Sendrecv {
                    peer: 1,
                    stag: 2,
                    bytes: 3,
                    src: 4,
                    rtag: 5,
                    posted: 6,
                    comm: 7,
                    status: status(false),
                },
            ),
            call(
                60,
                1,
                0,
                fmt::Payload::Isendrecv {
                    peer: 1,
                    stag: 2,
                    bytes: 3,
                    src: 4,
                    rtag: 5,
                    posted: 6,
                    comm: 7,
                    op: Some(8),
                },
            ),
            call(
                70,
                1,
                0,
                fmt::Payload::Probe {
                    src: 1,
                    tag: 2,
                    comm: 3,
                    status: Status {
                        empty: true,
                        ..Default::default()
                    },
                    op: None,
                },
            ),
            call(
                80,
                1,
                17,
                fmt::Payload::Coll {
                    comm: 1,
                    root: Some(0),
                    sent: 2,
                    recvd: 3,
                    seq: 4,
                    op: None,
                },
            ),
            call(
                90,
                1,
                0,
                fmt::Payload::Start {
                    started: vec![(Some(1), 2), (None, 3)],
                },
            ),
            call(
                100,
                1,
                0,
                fmt::Payload::Complete {
                    done: vec![
                        Completion {
                            op: Some(1),
                            status: status(true),
                        },
                        Completion {
                            op: None,
                            status: Status {
                                none: true,
                                cancelled: true,
                                ..Default::default()
                            },
                        },
                        // A send's completion: its status is not stored.
                        Completion {
                            op: Some(2),
                            status: Status {
                                none: true,
                                ..Default::default()
                            },
                        },
                        Completion {
                            op: None,
                            status: Status {
                                none: true,
                                ..Default::default()
                            },
                        },
                    ],
                },
            ),
            call(110, 1, 0, fmt::Payload::Complete { done: vec![] }),
            call(
                120,
                1,
                0,
                fmt::Payload::Mrecv {
                    msg: Some(1),
                    posted: 2,
                    status: Some(status(true)),
                    op: None,
                },
            ),
            call(
                130,
                1,
                0,
                fmt::Payload::InitThread {
                    required: 3,
                    provided: 2,
                },
            ),
            call(131, 1, 0, fmt::Payload::Abort { comm: 0, code: 9 }),
            call(132, 1, 0, fmt::Payload::Pcontrol { level: 1 }),
            call(
                133,
                1,
                0,
                fmt::Payload::OpRef {
                    op: Some(4),
                    cancelled: false,
                },
            ),
            call(
                134,
                1,
                0,
                fmt::Payload::CommNew {
                    parent: Some(0),
                    comm: None,
                },
            ),
            call(135, 1, 0, fmt::Payload::CommFree { comm: 3 }),
            fmt::Record::BufferWait {
                t_start: 140,
                t_end: 150,
            },
            fmt::Record::DefComm {
                t: 160,
                def: CommDef {
                    index: 2,
                    global_id: 99,
                    inter: false,
                    size: 2,
                    rank: 1,
                    remote_size: 0,
                    members: vec![0, 1],
                },
            },
            fmt::Record::DefThread { t: 170, tid: 1234 },
            // a clock that went back: the duration wraps, and stays exact
            call(180, 0, 0, fmt::Payload::None),
        ];
        let mut events: Events = records.iter().cloned().collect();
        events.push(fmt::Record::Call(fmt::Call {
            func: 6,
            t_start: 200,
            t_end: 190,
            rc: 0,
            payload: fmt::Payload::None,
        }));
        assert_eq!(events.len(), records.len() + 1);
        for (i, r) in records.iter().enumerate() {
            assert!(
                same(events.get(i), r),
                "record {i}: {:?} vs {r:?}",
                events.get(i)
            );
        }
        assert_eq!(events.stamps(records.len()), (200, 190));
        assert_eq!(events.stamps(1), (20, 20 + u64::from(u32::MAX) + 5));
        assert_eq!(events.stamps(2), (30, 30 + u64::from(u32::MAX)));
        assert_eq!(events.func(0), Some(5));
        assert_eq!(events.func(records.len() - 4), None, "BufferWait");
        let Record::Call(c) = events.get(7) else {
            panic!("a call")
        };
        assert_eq!(c.rc, 17);
        let defs: Vec<_> = events.defs().map(|(t, d)| (t, d.global_id)).collect();
        assert_eq!(defs, vec![(160, 99)]);
        assert_eq!(events.first_tid(), Some(1234));
        let Payload::Complete { done } = events.call(9).unwrap().payload else {
            panic!("a completion")
        };
        assert_eq!(done.len(), 4);
        assert_eq!(done.get(0).unwrap().status.pb.unwrap().id, 7);
        assert_eq!(done.get(2).unwrap().op, Some(2));
        assert!(done.get(3).unwrap().status.none);
        assert_eq!(done.get(4), None);
    }

    #[test]
    fn rows_are_found_across_words_of_plain_calls() {
        // Runs of plain calls of every length between calls with rows.
        let mut records = Vec::new();
        for k in 0..300u64 {
            for j in 0..(k % 70) {
                records.push(call(k * 1000 + j, 1, 0, fmt::Payload::None));
            }
            records.push(call(
                k * 1000 + 500,
                2,
                0,
                fmt::Payload::Send {
                    peer: k as i32,
                    tag: 0,
                    comm: 0,
                    bytes: k,
                    op: None,
                },
            ));
        }
        let events: Events = records.iter().cloned().collect();
        for (i, r) in records.iter().enumerate() {
            assert!(same(events.get(i), r), "record {i}");
        }
    }

    #[test]
    fn a_plain_call_takes_fifteen_bytes_and_a_bit() {
        let events: Events = (0..1024)
            .map(|t| call(t * 10, 3, 0, fmt::Payload::None))
            .collect();
        // 11 bytes each, and per 64 events a word of bits, a row count, a
        // payload byte count and a base time.
        assert_eq!(events.bytes(), 11 * 1024 + 16 * (8 + 4 + 8 + 8));
    }

    #[test]
    fn starts_far_from_their_words_first_read_back() {
        // Within a word: 2^32 − 1 ns and more after its first, and before
        // it (a thread whose record order is not time order).
        let starts = [
            5_000_000_000,
            5_000_000_000 + u64::from(u32::MAX) - 1,
            5_000_000_000 + u64::from(u32::MAX),
            1,
            20_000_000_000,
            u64::MAX - 1000,
            0,
        ];
        let mut records: Vec<fmt::Record> = Vec::new();
        for k in 0..200u64 {
            let t = starts[k as usize % starts.len()] + k % 3;
            records.push(call(t, k, 0, fmt::Payload::None));
        }
        let events: Events = records.iter().cloned().collect();
        for (i, r) in records.iter().enumerate() {
            assert!(same(events.get(i), r), "record {i}");
        }
        // Some starts are kept far, not all.
        assert!(!events.far.is_empty());
        assert!(events.far.len() < records.len());
    }
}
