//! A thread's decoded records, held in columns.
//!
//! ```text
//!  per event  t_start u64 │ dur u32 │ func u16 │ tag u8 │ has-row bit    15.1 bytes
//!                                      │          └─► rows[rank of the bit]: row of
//!                                      │              the tag's side table (4 bytes,
//!                                      │              only events with a payload)
//!                                      └─ variant, and flags: the row has an op,
//!                                         rc ≠ 0, duration ≥ 2^32 − 1
//!  side tables  sends 28 B, recvs 32, sendrecvs, probes, colls 44
//!               statuses                                 (of receives, 24 B)
//!               pbs                                      (a status's piggyback, 28 B)
//!               lists → completions 12 B, started        (Complete and Start items)
//!               rcs, long                                (sparse, sorted by event)
//!               other                                    (rare payloads as decoded)
//!               defs, tids                               (DefComm, DefThread)
//! ```
//!
//! Rows are packed to 4-byte alignment and read by value; an `Option` is
//! a value and a flag (in the tag, or in a status's second flags byte).
//!
//! A record is read back by value ([`Events::get`]) as the view types of
//! this module, which mirror `pmtrace_format::record` except that lists
//! borrow from the tables: [`Record`], [`Call`], [`Payload`]. Hot loops
//! that need only times or the function read the columns themselves
//! ([`Events::stamps`], [`Events::func`]).

use pmtrace_format::record::{self as fmt, CommDef, Completion, Pb, Status};

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
    items: &'a [PackedCompletion],
    statuses: &'a [PackedStatus],
    pbs: &'a [PackedPb],
}

impl<'a> Done<'a> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<Completion> {
        self.items.get(i).map(|c| c.unpack(self.statuses, self.pbs))
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = Completion> + DoubleEndedIterator + 'a {
        let (statuses, pbs) = (self.statuses, self.pbs);
        self.items.iter().map(move |c| c.unpack(statuses, pbs))
    }
}

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

// ---- packed rows ----

const HAS_SOURCE: u8 = 1;
const HAS_TAG: u8 = 2;
const HAS_BYTES: u8 = 4;
const CANCELLED: u8 = 8;
const EMPTY: u8 = 16;
const NONE: u8 = 32;
const HAS_PB: u8 = 64;
/// For an `Option<Status>`: there is one.
const PRESENT: u8 = 128;

/// Second flags byte of a `PackedStatus`.
const HAS_VC: u8 = 1;

/// A `Status` in 24 bytes, its piggyback in the thread's `pbs`. Rows are
/// packed to 4-byte alignment: their fields are read by value.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, packed(4))]
struct PackedStatus {
    bytes: u64,
    source: i32,
    tag: i32,
    pb: u32,
    flags: u8,
    flags2: u8,
}

/// A `Pb` in 28 bytes: its vector clock index is there if the status
/// says so (`HAS_VC`).
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct PackedPb {
    id: u64,
    lc: u64,
    sent: u64,
    vc: u32,
}

impl PackedStatus {
    fn pack(s: Option<&Status>, pbs: &mut Vec<PackedPb>) -> PackedStatus {
        let Some(s) = s else {
            return PackedStatus::default();
        };
        let mut p = PackedStatus {
            flags: PRESENT,
            ..Default::default()
        };
        if let Some(v) = s.source {
            p.source = v;
            p.flags |= HAS_SOURCE;
        }
        if let Some(v) = s.tag {
            p.tag = v;
            p.flags |= HAS_TAG;
        }
        if let Some(v) = s.bytes {
            p.bytes = v;
            p.flags |= HAS_BYTES;
        }
        for (set, bit) in [(s.cancelled, CANCELLED), (s.empty, EMPTY), (s.none, NONE)] {
            if set {
                p.flags |= bit;
            }
        }
        if let Some(pb) = s.pb {
            p.pb = index(pbs.len());
            p.flags |= HAS_PB;
            if pb.vc.is_some() {
                p.flags2 |= HAS_VC;
            }
            pbs.push(PackedPb {
                id: pb.id,
                lc: pb.lc,
                sent: pb.sent,
                vc: pb.vc.unwrap_or(0),
            });
        }
        p
    }

    fn unpack(&self, pbs: &[PackedPb]) -> Option<Status> {
        let f = self.flags;
        (f & PRESENT != 0).then(|| Status {
            source: (f & HAS_SOURCE != 0).then_some(self.source),
            tag: (f & HAS_TAG != 0).then_some(self.tag),
            bytes: (f & HAS_BYTES != 0).then_some(self.bytes),
            cancelled: f & CANCELLED != 0,
            empty: f & EMPTY != 0,
            none: f & NONE != 0,
            pb: (f & HAS_PB != 0).then(|| {
                let p = pbs[self.pb as usize];
                Pb {
                    id: p.id,
                    lc: p.lc,
                    sent: p.sent,
                    vc: (self.flags2 & HAS_VC != 0).then_some(p.vc),
                }
            }),
        })
    }

    /// A status that is always there.
    fn status(&self, pbs: &[PackedPb]) -> Status {
        self.unpack(pbs).unwrap_or_default()
    }
}

/// A completion in 12 bytes: its op, and in `status` a flag that the op
/// is there (`COMPLETION_OP`) and the index of its status in the thread's
/// `statuses`, or `NONE_STATUS` for the status of an operation that has
/// none (a send's, a collective's: most of them), which is not stored.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct PackedCompletion {
    op: u64,
    status: u32,
}

const COMPLETION_OP: u32 = 1 << 31;
const NONE_STATUS: u32 = COMPLETION_OP - 1;

/// The status of a completion without a receive status, as decoded.
fn none_status() -> Status {
    Status {
        none: true,
        ..Status::default()
    }
}

impl PackedCompletion {
    fn pack(c: &Completion, statuses: &mut Vec<PackedStatus>, pbs: &mut Vec<PackedPb>) -> Self {
        let mut status = if c.status == none_status() {
            NONE_STATUS
        } else {
            let k = index(statuses.len());
            assert!(k < NONE_STATUS, "fewer than 2^31 - 1 statuses per thread");
            statuses.push(PackedStatus::pack(Some(&c.status), pbs));
            k
        };
        if c.op.is_some() {
            status |= COMPLETION_OP;
        }
        PackedCompletion {
            op: c.op.unwrap_or(0),
            status,
        }
    }

    fn unpack(&self, statuses: &[PackedStatus], pbs: &[PackedPb]) -> Completion {
        let status = self.status;
        Completion {
            op: (status & COMPLETION_OP != 0).then_some(self.op),
            status: match status & !COMPLETION_OP {
                NONE_STATUS => none_status(),
                k => statuses[k as usize].status(pbs),
            },
        }
    }
}

/// Rows: an `op` is there if the record's tag has `tag::OP`.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct SendRow {
    bytes: u64,
    op: u64,
    peer: i32,
    tag: i32,
    comm: u32,
}

/// Its status, if it has one, is `statuses[status]` (else `NO_STATUS`):
/// a nonblocking receive has none.
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct RecvRow {
    posted: u64,
    op: u64,
    src: i32,
    tag: i32,
    comm: u32,
    status: u32,
}

const NO_STATUS: u32 = u32::MAX;

/// `Sendrecv` (status) and `Isendrecv` (op).
#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct SendrecvRow {
    bytes: u64,
    posted: u64,
    op: u64,
    status: PackedStatus,
    peer: i32,
    stag: i32,
    src: i32,
    rtag: i32,
    comm: u32,
}

#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct ProbeRow {
    op: u64,
    status: PackedStatus,
    src: i32,
    tag: i32,
    comm: u32,
}

#[derive(Debug, Clone, Copy)]
#[repr(C, packed(4))]
struct CollRow {
    sent: u64,
    recvd: u64,
    seq: u64,
    op: u64,
    root: Option<i32>,
    comm: u32,
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

/// The records of one thread, in order (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Events {
    t_start: Vec<u64>,
    dur: Vec<u32>,
    func: Vec<u16>,
    tag: Vec<u8>,
    /// A bit per event: it has a row (every variant but a plain call and
    /// a buffer wait).
    has_row: Vec<u64>,
    /// Rows before each word of `has_row`.
    row_base: Vec<u32>,
    /// The row of each event that has one, in order.
    rows: Vec<u32>,
    rcs: Vec<(u32, i32)>,
    long: Vec<(u32, u64)>,
    sends: Vec<SendRow>,
    recvs: Vec<RecvRow>,
    sendrecvs: Vec<SendrecvRow>,
    probes: Vec<ProbeRow>,
    colls: Vec<CollRow>,
    /// The statuses of blocking receives (`RecvRow::status`) and of
    /// completions (`PackedCompletion::status`).
    statuses: Vec<PackedStatus>,
    pbs: Vec<PackedPb>,
    /// (first item, items) of each Complete or Start record.
    lists: Vec<(u32, u32)>,
    completions: Vec<PackedCompletion>,
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
        self.t_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_start.is_empty()
    }

    /// Bytes the columns and tables hold (their lengths, not capacities).
    pub fn bytes(&self) -> usize {
        use std::mem::size_of_val;
        size_of_val(&self.t_start[..])
            + size_of_val(&self.dur[..])
            + size_of_val(&self.func[..])
            + size_of_val(&self.tag[..])
            + size_of_val(&self.has_row[..])
            + size_of_val(&self.row_base[..])
            + size_of_val(&self.rows[..])
            + size_of_val(&self.rcs[..])
            + size_of_val(&self.long[..])
            + size_of_val(&self.sends[..])
            + size_of_val(&self.recvs[..])
            + size_of_val(&self.sendrecvs[..])
            + size_of_val(&self.probes[..])
            + size_of_val(&self.colls[..])
            + size_of_val(&self.statuses[..])
            + size_of_val(&self.pbs[..])
            + size_of_val(&self.lists[..])
            + size_of_val(&self.completions[..])
            + size_of_val(&self.started[..])
            + size_of_val(&self.other[..])
            + size_of_val(&self.defs[..])
            + size_of_val(&self.tids[..])
    }

    /// Appends a decoded record. The caller keeps below [`MAX_EVENTS`]
    /// events and [`MAX_FUNCS`] functions.
    pub fn push(&mut self, r: fmt::Record) {
        let at = index(self.t_start.len());
        let (t_start, t_end, func, rc, tag, row) = match r {
            fmt::Record::Call(c) => {
                let (tag, row) = self.push_payload(c.payload);
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
        self.t_start.push(t_start);
        self.func.push(func as u16);
        self.tag.push(tag);
        if at.is_multiple_of(64) {
            self.has_row.push(0);
            self.row_base.push(index(self.rows.len()));
        }
        if !matches!(tag & tag::VARIANT, tag::NONE | tag::BUFFER_WAIT) {
            self.has_row[at as usize / 64] |= 1 << (at % 64);
            self.rows.push(row);
        }
    }

    fn push_payload(&mut self, p: fmt::Payload) -> (u8, u32) {
        fn row<T>(v: &mut Vec<T>, x: T) -> u32 {
            v.push(x);
            index(v.len() - 1)
        }
        // An op goes in as a u64 and a flag in the tag.
        let op_flag = |op: Option<u64>| if op.is_some() { tag::OP } else { 0 };
        match p {
            fmt::Payload::None => (tag::NONE, 0),
            fmt::Payload::Send {
                peer,
                tag,
                comm,
                bytes,
                op,
            } => (
                tag::SEND | op_flag(op),
                row(
                    &mut self.sends,
                    SendRow {
                        bytes,
                        op: op.unwrap_or(0),
                        peer,
                        tag,
                        comm,
                    },
                ),
            ),
            fmt::Payload::Recv {
                src,
                tag,
                comm,
                posted,
                status,
                op,
            } => {
                let status = match status {
                    Some(st) => {
                        let st = PackedStatus::pack(Some(&st), &mut self.pbs);
                        row(&mut self.statuses, st)
                    }
                    None => NO_STATUS,
                };
                (
                    tag::RECV | op_flag(op),
                    row(
                        &mut self.recvs,
                        RecvRow {
                            posted,
                            op: op.unwrap_or(0),
                            src,
                            tag,
                            comm,
                            status,
                        },
                    ),
                )
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
                let status = PackedStatus::pack(Some(&status), &mut self.pbs);
                (
                    tag::SENDRECV,
                    row(
                        &mut self.sendrecvs,
                        SendrecvRow {
                            bytes,
                            posted,
                            op: 0,
                            status,
                            peer,
                            stag,
                            src,
                            rtag,
                            comm,
                        },
                    ),
                )
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
            } => (
                tag::ISENDRECV | op_flag(op),
                row(
                    &mut self.sendrecvs,
                    SendrecvRow {
                        bytes,
                        posted,
                        op: op.unwrap_or(0),
                        status: PackedStatus::default(),
                        peer,
                        stag,
                        src,
                        rtag,
                        comm,
                    },
                ),
            ),
            fmt::Payload::Probe {
                src,
                tag,
                comm,
                status,
                op,
            } => {
                let status = PackedStatus::pack(Some(&status), &mut self.pbs);
                (
                    tag::PROBE | op_flag(op),
                    row(
                        &mut self.probes,
                        ProbeRow {
                            op: op.unwrap_or(0),
                            status,
                            src,
                            tag,
                            comm,
                        },
                    ),
                )
            }
            fmt::Payload::Coll {
                comm,
                root,
                sent,
                recvd,
                seq,
                op,
            } => (
                tag::COLL | op_flag(op),
                row(
                    &mut self.colls,
                    CollRow {
                        sent,
                        recvd,
                        seq,
                        op: op.unwrap_or(0),
                        root,
                        comm,
                    },
                ),
            ),
            fmt::Payload::Start { started } => {
                let first = index(self.started.len());
                self.started.extend_from_slice(&started);
                let list = (first, index(started.len()));
                (tag::START, row(&mut self.lists, list))
            }
            fmt::Payload::Complete { done } => {
                let first = index(self.completions.len());
                for c in &done {
                    let c = PackedCompletion::pack(c, &mut self.statuses, &mut self.pbs);
                    self.completions.push(c);
                }
                let list = (first, index(done.len()));
                (tag::COMPLETE, row(&mut self.lists, list))
            }
            other => (tag::OTHER, row(&mut self.other, other)),
        }
    }

    /// The side-table row of record `i` (0 for a record without one).
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

    /// Start and end time of record `i`.
    #[inline]
    pub fn stamps(&self, i: usize) -> (u64, u64) {
        let t = self.t_start[i];
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
        let t_start = self.t_start[i];
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
        let row = self.row(i);
        let has_op = self.tag[i] & tag::OP != 0;
        let op = |op: u64| has_op.then_some(op);
        let payload = match self.tag[i] & tag::VARIANT {
            tag::NONE => Payload::None,
            tag::SEND => {
                let s = self.sends[row];
                Payload::Send {
                    peer: s.peer,
                    tag: s.tag,
                    comm: s.comm,
                    bytes: s.bytes,
                    op: op(s.op),
                }
            }
            tag::RECV => {
                let r = self.recvs[row];
                Payload::Recv {
                    src: r.src,
                    tag: r.tag,
                    comm: r.comm,
                    posted: r.posted,
                    status: match r.status {
                        NO_STATUS => None,
                        k => self.statuses[k as usize].unpack(&self.pbs),
                    },
                    op: op(r.op),
                }
            }
            tag::SENDRECV => {
                let r = self.sendrecvs[row];
                let status = r.status;
                Payload::Sendrecv {
                    peer: r.peer,
                    stag: r.stag,
                    bytes: r.bytes,
                    src: r.src,
                    rtag: r.rtag,
                    posted: r.posted,
                    comm: r.comm,
                    status: status.status(&self.pbs),
                }
            }
            tag::ISENDRECV => {
                let r = self.sendrecvs[row];
                Payload::Isendrecv {
                    peer: r.peer,
                    stag: r.stag,
                    bytes: r.bytes,
                    src: r.src,
                    rtag: r.rtag,
                    posted: r.posted,
                    comm: r.comm,
                    op: op(r.op),
                }
            }
            tag::PROBE => {
                let p = self.probes[row];
                let status = p.status;
                Payload::Probe {
                    src: p.src,
                    tag: p.tag,
                    comm: p.comm,
                    status: status.status(&self.pbs),
                    op: op(p.op),
                }
            }
            tag::COLL => {
                let c = self.colls[row];
                Payload::Coll {
                    comm: c.comm,
                    root: c.root,
                    sent: c.sent,
                    recvd: c.recvd,
                    seq: c.seq,
                    op: op(c.op),
                }
            }
            tag::START => {
                let (first, n) = self.lists[row];
                Payload::Start {
                    started: &self.started[first as usize..][..n as usize],
                }
            }
            tag::COMPLETE => {
                let (first, n) = self.lists[row];
                Payload::Complete {
                    done: Done {
                        items: &self.completions[first as usize..][..n as usize],
                        statuses: &self.statuses,
                        pbs: &self.pbs,
                    },
                }
            }
            tag::OTHER => view_other(&self.other[row]),
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
            .map(|i| (self.t_start[i], &self.defs[self.row(i)]))
    }

    /// The first DefThread record's thread id.
    pub fn first_tid(&self) -> Option<u64> {
        self.tids.first().copied()
    }

    /// Room for `n` more records in the per-record columns.
    pub fn reserve(&mut self, n: usize) {
        self.t_start.reserve_exact(n);
        self.dur.reserve_exact(n);
        self.func.reserve_exact(n);
        self.tag.reserve_exact(n);
        self.has_row.reserve_exact(n.div_ceil(64));
        self.row_base.reserve_exact(n.div_ceil(64));
    }

    /// Trims each column to its length (after the last push).
    pub fn shrink_to_fit(&mut self) {
        self.t_start.shrink_to_fit();
        self.dur.shrink_to_fit();
        self.func.shrink_to_fit();
        self.tag.shrink_to_fit();
        self.has_row.shrink_to_fit();
        self.row_base.shrink_to_fit();
        self.rows.shrink_to_fit();
        self.sends.shrink_to_fit();
        self.recvs.shrink_to_fit();
        self.sendrecvs.shrink_to_fit();
        self.probes.shrink_to_fit();
        self.colls.shrink_to_fit();
        self.statuses.shrink_to_fit();
        self.pbs.shrink_to_fit();
        self.lists.shrink_to_fit();
        self.completions.shrink_to_fit();
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
    fn rows_have_the_sizes_the_module_docs_give() {
        use std::mem::size_of;
        assert_eq!(size_of::<SendRow>(), 28);
        assert_eq!(size_of::<RecvRow>(), 32);
        assert_eq!(size_of::<PackedStatus>(), 24);
        assert_eq!(size_of::<PackedPb>(), 28);
        assert_eq!(size_of::<PackedCompletion>(), 12);
        assert_eq!(size_of::<ProbeRow>(), 44);
        assert_eq!(size_of::<CollRow>(), 44);
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
        // 15 bytes each, and per 64 events a word of bits and a row count.
        assert_eq!(events.bytes(), 15 * 1024 + 16 * 12);
    }
}
