//! What each kind of wrapper records, after the real call returned. The
//! generated wrappers (see `wrappers/generate.rs`) call one function here per
//! kind; payload layouts are those of `pmtrace_format::record`.
//!
//! A hook never lets a panic escape into C: the body runs under
//! `catch_unwind`, and a panic stops recording for the rest of the run (later
//! events are counted as dropped; the application carries on, and the
//! wrappers keep their part in the communicator id agreement).

use crate::comms::{self, CommInfo};
use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Message, MPI_Request, MPI_Status, TypeSizes};
use crate::guard::Guard;
use crate::piggyback::{self, Got};
use crate::recorder::{Recorder, RecvSlot, Writer};
use crate::requests::{key, Op, OpKind, MESSAGES, REQUESTS};
use core::cell::{Cell, RefCell};
use core::ffi::{c_int, c_void};
use pmtrace_format::pending::PendingRecv;
use pmtrace_format::record::{
    root_code, LIST_BATCH, MAX_FIXED_RECORD, MAX_LIST_ITEM, ST_CANCELLED, ST_EMPTY, ST_NONE,
};
use pmtrace_format::varint::Sink;
use smallvec::SmallVec;

/// One traced call: its id, times and return code.
pub struct Call<'g> {
    guard: &'g Guard,
    pub func: u32,
    pub t0: u64,
    pub t1: u64,
    pub rc: c_int,
}

impl<'g> Call<'g> {
    #[inline(always)]
    pub fn new(guard: &'g Guard, func: u32, t0: u64, t1: u64, rc: c_int) -> Self {
        Call {
            guard,
            func,
            t0,
            t1,
            rc,
        }
    }

    #[inline(always)]
    fn rec(&self) -> &mut Recorder {
        self.guard.recorder()
    }

    #[inline(always)]
    fn ok(&self) -> bool {
        self.rc == 0
    }

    /// Bytes in `count` elements of `datatype`; 0 for a failed call,
    /// whose arguments may be invalid (and asking MPI about an invalid
    /// handle would raise an error the application did not cause).
    #[inline(always)]
    fn bytes(&self, count: i64, datatype: MPI_Datatype) -> u64 {
        if !self.ok() {
            return 0;
        }
        self.rec().types.bytes(count, datatype)
    }

    /// Bytes this rank sends and receives in a collective (none if it failed).
    #[inline(always)]
    fn coll_bytes(&self, shape: Shape, args: &CollArgs, info: &CommInfo) -> (u64, u64) {
        if !self.ok() {
            return (0, 0);
        }
        // The commonest shapes without a call.
        match shape {
            Shape::Barrier => (0, 0),
            Shape::Allreduce | Shape::Scan => {
                let data = self.bytes(args.count, args.datatype);
                (data, data)
            }
            _ => coll_bytes(&mut self.rec().types, shape, args, info),
        }
    }

    /// Starts this call's record with room for a fixed-size payload.
    #[inline(always)]
    fn begin(&self) -> Option<Writer<'_>> {
        self.rec()
            .begin_call(self.func, self.t0, self.t1, self.rc, MAX_FIXED_RECORD)
    }

    /// Starts this call's record with room for a fixed payload and one piggyback.
    #[inline(always)]
    fn begin_pb(&self) -> Option<Writer<'_>> {
        self.rec().begin_call(
            self.func,
            self.t0,
            self.t1,
            self.rc,
            MAX_FIXED_RECORD + piggyback::record_room(),
        )
    }

    /// Starts this call's record with room for a list of `items`.
    #[inline(always)]
    fn begin_list(&self, items: usize) -> Option<Writer<'_>> {
        self.rec().begin_call(
            self.func,
            self.t0,
            self.t1,
            self.rc,
            MAX_FIXED_RECORD + items * item_room(),
        )
    }
}

/// Most bytes one list item takes, piggyback included.
#[inline(always)]
fn item_room() -> usize {
    MAX_LIST_ITEM + piggyback::record_room()
}

/// Items per list record: fewer when vector clocks make items large.
#[inline(always)]
fn list_batch() -> usize {
    (LIST_BATCH * MAX_LIST_ITEM / item_room()).clamp(1, LIST_BATCH)
}

/// `PMTRACE_EXCLUDE`: per function id, whether its calls are left out,
/// and how many were.
static EXCLUDED: std::sync::OnceLock<Box<[bool]>> = std::sync::OnceLock::new();
static LEFT_OUT: std::sync::OnceLock<Box<[core::sync::atomic::AtomicU64]>> =
    std::sync::OnceLock::new();

/// Leaves the calls of `ids` out of the trace (set once, at `MPI_Init`).
pub fn exclude(ids: &[u32]) {
    let n = crate::mpi::FUNCTIONS.len();
    let mut set = vec![false; n];
    for &i in ids {
        set[i as usize] = true;
    }
    let _ = EXCLUDED.set(set.into_boxed_slice());
    let _ = LEFT_OUT.set((0..n).map(|_| Default::default()).collect());
}

/// `MPI_Pcontrol(0)` to `MPI_Pcontrol(1)`: calls that move no message,
/// create no operation and complete none are left out (and counted);
/// the others are still recorded, so that messages and clocks stay exact.
static PAUSED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
static PAUSED_OUT: std::sync::OnceLock<Box<[core::sync::atomic::AtomicU64]>> =
    std::sync::OnceLock::new();

/// Pauses recording (`true`) or resumes it.
pub fn pause(on: bool) {
    PAUSED_OUT.get_or_init(|| {
        (0..crate::mpi::FUNCTIONS.len())
            .map(|_| Default::default())
            .collect()
    });
    PAUSED.store(on, core::sync::atomic::Ordering::Relaxed);
}

/// Calls left out while paused, by function name.
pub fn paused_out() -> std::collections::BTreeMap<String, u64> {
    counts_by_name(PAUSED_OUT.get().map(|b| &b[..]))
}

fn counts_by_name(
    counts: Option<&[core::sync::atomic::AtomicU64]>,
) -> std::collections::BTreeMap<String, u64> {
    let Some(counts) = counts else {
        return Default::default();
    };
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| (i, c.load(core::sync::atomic::Ordering::Relaxed)))
        .filter(|&(_, c)| c > 0)
        .map(|(i, c)| (crate::mpi::FUNCTIONS[i].0.to_string(), c))
        .collect()
}

/// Calls left out so far, by function name.
pub fn left_out() -> std::collections::BTreeMap<String, u64> {
    counts_by_name(LEFT_OUT.get().map(|b| &b[..]))
}

/// Whether this call is left out (counted if so). Only the hooks whose
/// calls move no message, create no operation and complete none ask.
#[inline(always)]
fn leave_out(call: &Call) -> bool {
    if PAUSED.load(core::sync::atomic::Ordering::Relaxed) {
        if let Some(c) = PAUSED_OUT.get().and_then(|c| c.get(call.func as usize)) {
            c.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        }
        return true;
    }
    let Some(set) = EXCLUDED.get() else {
        return false;
    };
    if !set.get(call.func as usize).copied().unwrap_or(false) {
        return false;
    }
    if let Some(c) = LEFT_OUT.get().and_then(|c| c.get(call.func as usize)) {
        c.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
    true
}

/// Runs a hook body; a panic disables tracing instead of unwinding into C.
#[inline(always)]
fn guarded(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        crate::recorder::stop_recording();
    }
}

/// The communicator of a call. A communicator pmtrace does not know is
/// defined on first sight, unless the call failed (the handle may be invalid).
#[inline(always)]
fn comm_info(call: &Call, comm: MPI_Comm) -> &'static CommInfo {
    if call.ok() {
        comms::resolve(comm, call.rec(), call.t0)
    } else {
        comms::lookup(comm).unwrap_or_else(|| comms::unknown(call.rec(), call.t0))
    }
}

/// Source, tag and bytes of a filled status.
#[inline(always)]
fn actual(status: *const MPI_Status) -> (i32, i32, u64) {
    // SAFETY: MPI filled `status` (or our local substitute) for this call.
    let s = unsafe { &*status };
    (s.MPI_SOURCE, s.MPI_TAG, ffi::status_bytes(status))
}

// ---- plain ----

pub fn plain(call: Call) {
    guarded(|| {
        if leave_out(&call) {
            return;
        }
        if let Some(r) = call.begin() {
            r.commit();
        }
    })
}

// ---- sends ----

#[inline(always)]
fn put_send(r: &mut impl Sink, peer: c_int, tag: c_int, comm: u32, bytes: u64) {
    r.put_i(i64::from(peer));
    r.put_i(i64::from(tag));
    r.put_u(u64::from(comm));
    r.put_u(bytes);
}

pub fn send(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let bytes = call.bytes(count, datatype);
        if let Some(mut r) = call.begin() {
            put_send(&mut r, peer, tag, info.index, bytes);
            r.commit();
        }
    })
}

#[allow(clippy::too_many_arguments)]
/// What a nonblocking or persistent point-to-point call starts.
pub enum Issued {
    Send,
    Recv,
}

/// Isend and its modes, Irecv, and the persistent `*_init` calls. `pb` is
/// the piggyback slot the wrapper made; the request keeps it even when the
/// call cannot be recorded, since completing it must unpack the message.
#[allow(clippy::too_many_arguments)]
pub fn issue(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
    issued: Issued,
    persistent: bool,
    pb: usize,
) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let bytes = call.bytes(count, datatype);
        let kind = match issued {
            Issued::Recv => OpKind::Recv {
                src: peer,
                tag,
                posted: Some(bytes),
            },
            Issued::Send => OpKind::Send,
        };
        let mut w = call.begin();
        if call.ok() {
            let id = w.as_mut().map_or(0, |r| r.take_op());
            let recv = matches!(kind, OpKind::Recv { .. });
            register(request, id, kind, persistent, pb);
            // (A send's slot never joins the pending receives.)
            if !persistent && recv {
                piggyback::posted_recv(pb, true);
            }
        } else {
            piggyback::release(pb);
        }
        if let Some(mut r) = w {
            put_send(&mut r, peer, tag, info.index, bytes);
            r.commit();
        }
    })
}

/// Enters the operation a call just created under the request handle MPI
/// stored at `request`.
fn register(request: *mut MPI_Request, id: u64, kind: OpKind, persistent: bool, pb: usize) {
    // SAFETY: MPI just stored the new request handle there.
    let handle = unsafe { *request };
    REQUESTS.insert(
        key(handle),
        Op {
            id,
            kind,
            persistent,
            instance: None,
            cancelled: false,
            slot: request as usize,
            pb,
        },
    );
}

// ---- receives ----

/// A receive status relative to what was posted; nothing useful if the call failed.
#[inline(always)]
fn put_recv_status(
    r: &mut Writer,
    ok: bool,
    posted: (i32, i32, Option<u64>),
    status: *const MPI_Status,
    extra: u64,
    got: Option<&Got>,
) {
    if ok {
        r.put_status_pb(posted, actual(status), extra, got);
    } else {
        r.put_u(ST_NONE);
    }
}

/// Before a blocking receive's call, while the rank is about to wait for
/// the message anyway: makes room for its record and writes the fields
/// known now into the pending slot (see `Recorder::prepare_recv`). Only
/// when the communicator and the datatype are the ones this thread used
/// last, so that nothing is asked of MPI about handles the call has not
/// yet checked; otherwise `recv` does it all after the call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn recv_prepare(
    guard: &Guard,
    func: u32,
    t0: u64,
    count: i64,
    datatype: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Option<RecvSlot> {
    let rec = guard.recorder();
    let info = comms::cached(comm, rec)?;
    let posted = rec.types.cached_bytes(count, datatype)?;
    rec.prepare_recv(&PendingRecv {
        func,
        t0,
        src,
        tag,
        comm: info.index,
        posted,
        ..PendingRecv::default()
    })
}

/// A blocking receive. A successful one without a vector clock is not
/// encoded here, on the critical path of whatever the application sends
/// next, but left raw in the chunk's pending slot and encoded at the
/// thread's next record (see `Recorder::defer_recv`); the record is the
/// same. What was known before the call is there already when `pre` is.
#[allow(clippy::too_many_arguments)]
pub fn recv(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    got: Option<Got>,
    pre: Option<RecvSlot>,
) {
    guarded(|| {
        if call.ok() && got.as_ref().is_none_or(|g| g.vc.is_empty()) {
            let pb = got.map(|g| (g.id, g.lc, g.sent));
            if let Some(pre) = pre {
                if call.rec().finish_recv(pre, call.t1, actual(status), pb) {
                    return;
                }
            }
            call.rec().defer_recv(&PendingRecv {
                func: call.func,
                t0: call.t0,
                t1: call.t1,
                src,
                tag,
                comm: comm_info(&call, comm).index,
                posted: call.bytes(count, datatype),
                actual: actual(status),
                pb,
            });
            return;
        }
        let index = comm_info(&call, comm).index;
        let posted = call.bytes(count, datatype);
        let Some(mut r) = call.begin_pb() else { return };
        put_send(&mut r, src, tag, index, posted);
        put_recv_status(
            &mut r,
            call.ok(),
            (src, tag, Some(posted)),
            status,
            0,
            got.as_ref(),
        );
        r.commit();
    })
}

#[allow(clippy::too_many_arguments)]
pub fn sendrecv(
    call: Call,
    sendcount: i64,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvcount: i64,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
    got: Option<Got>,
) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let bytes = call.bytes(sendcount, sendtype);
        let posted = call.bytes(recvcount, recvtype);
        let Some(mut r) = call.begin_pb() else { return };
        r.put_i(i64::from(dest));
        r.put_i(i64::from(sendtag));
        r.put_u(bytes);
        r.put_i(i64::from(source));
        r.put_i(i64::from(recvtag));
        r.put_u(posted);
        r.put_u(u64::from(info.index));
        put_recv_status(
            &mut r,
            call.ok(),
            (source, recvtag, Some(posted)),
            status,
            0,
            got.as_ref(),
        );
        r.commit();
    })
}

/// `MPI_Isendrecv(_replace)`: the send half goes now, the receive half
/// completes with the request (`pb` holds both halves' piggyback slots).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn isendrecv(
    call: Call,
    sendcount: i64,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvcount: i64,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
    pb: usize,
) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let bytes = call.bytes(sendcount, sendtype);
        let posted = call.bytes(recvcount, recvtype);
        let mut w = call.begin();
        if call.ok() {
            let id = w.as_mut().map_or(0, |r| r.take_op());
            let kind = if piggyback::isendrecv_blind() {
                OpKind::RecvBlind {
                    src: source,
                    tag: recvtag,
                    posted,
                }
            } else {
                OpKind::Recv {
                    src: source,
                    tag: recvtag,
                    posted: Some(posted),
                }
            };
            register(request, id, kind, false, pb);
            piggyback::posted_recv(pb, true);
        } else {
            piggyback::release(pb);
        }
        if let Some(mut r) = w {
            r.put_i(i64::from(dest));
            r.put_i(i64::from(sendtag));
            r.put_u(bytes);
            r.put_i(i64::from(source));
            r.put_i(i64::from(recvtag));
            r.put_u(posted);
            r.put_u(u64::from(info.index));
            r.commit();
        }
    })
}

// ---- probes and matched receives ----

/// Probe, Iprobe (`flag`), Mprobe (`message`), Improbe (both).
pub fn probe(
    call: Call,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) {
    guarded(|| {
        let info = comm_info(&call, comm);
        // SAFETY: MPI set *flag for this call when a flag was passed.
        let found = call.ok() && (flag.is_null() || unsafe { *flag } != 0);
        if found {
            piggyback::fix_probe_status(status, comm, message);
        }
        // A matched message gets an operation id: that probe stays.
        if (!found || message.is_null()) && leave_out(&call) {
            return;
        }
        let Some(mut r) = call.begin() else { return };
        r.put_i(i64::from(src));
        r.put_i(i64::from(tag));
        r.put_u(u64::from(info.index));
        if found {
            let a = actual(status);
            r.put_status((src, tag, None), a, 0);
            if !message.is_null() {
                let id = r.take_op();
                // SAFETY: MPI just stored the matched message handle there.
                let m = unsafe { *message };
                MESSAGES.insert(key(m), (id, a.0, a.1, a.2));
            }
        } else {
            r.put_u(ST_EMPTY);
        }
        r.commit();
    })
}

/// Status fields are all written out for matched receives (`None` posted),
/// so that a reader needs no probe to resolve them.
const EXPLICIT: (i32, i32, Option<u64>) = (i32::MIN, i32::MIN, None);

pub fn mrecv(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    msg: Option<u64>,
    status: *mut MPI_Status,
    got: Option<Got>,
) {
    guarded(|| {
        let posted = call.bytes(count, datatype);
        let Some(mut r) = call.begin_pb() else { return };
        r.put_op_ref(msg);
        r.put_u(posted);
        put_recv_status(&mut r, call.ok(), EXPLICIT, status, 0, got.as_ref());
        r.commit();
    })
}

pub fn imrecv(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    msg: Option<u64>,
    request: *mut MPI_Request,
    pb: usize,
) {
    guarded(|| {
        let posted = call.bytes(count, datatype);
        let mut w = call.begin();
        // The message reference is written before the new id is taken.
        if let Some(r) = w.as_mut() {
            r.put_op_ref(msg);
            r.put_u(posted);
        }
        if call.ok() {
            let id = w.as_mut().map_or(0, |r| r.take_op());
            let kind = OpKind::Recv {
                src: EXPLICIT.0,
                tag: EXPLICIT.1,
                posted: EXPLICIT.2,
            };
            register(request, id, kind, false, pb);
        } else {
            piggyback::release(pb);
        }
        if let Some(r) = w {
            r.commit();
        }
    })
}

// ---- persistent starts ----

/// Before `MPI_Start(all)`: persistent sends load their next message.
pub fn before_start(guard: &Guard, t0: u64, requests: &[MPI_Request], slots: *const MPI_Request) {
    if piggyback::mode() == piggyback::Mode::None {
        return;
    }
    for (i, &h) in requests.iter().enumerate() {
        if let Some(op) = REQUESTS
            .get(key(h), slot_at(slots, i))
            .filter(|op| op.persistent)
        {
            piggyback::before_start(op.pb, guard.recorder(), t0);
        }
    }
}

pub fn start(call: Call, requests: &[MPI_Request], slots: *mut MPI_Request) {
    guarded(|| {
        if piggyback::mode() != piggyback::Mode::None {
            for (i, &h) in requests.iter().enumerate() {
                if let Some(op) = REQUESTS
                    .get(key(h), slot_at(slots, i))
                    .filter(|op| op.persistent)
                {
                    piggyback::posted_recv(op.pb, call.ok());
                }
            }
        }
        let n = if call.ok() { requests.len() } else { 0 };
        let mut batches = requests[..n].chunks(list_batch());
        let first = batches.next().unwrap_or(&[]);
        let Some(mut w) = call.begin_list(first.len()) else {
            return;
        };
        w.put_u(first.len() as u64);
        start_items(&mut w, first, slots);
        w.commit();
        let mut done = first.len();
        for batch in batches {
            let Some(mut w) = call
                .rec()
                .begin_continuation(32 + batch.len() * item_room())
            else {
                return;
            };
            w.put_u(batch.len() as u64);
            start_items(&mut w, batch, slot_at(slots, done) as *const MPI_Request);
            w.commit_part();
            done += batch.len();
        }
    })
}

fn start_items(r: &mut Writer, batch: &[MPI_Request], slots: *const MPI_Request) {
    for (i, &h) in batch.iter().enumerate() {
        let slot = slot_at(slots, i);
        let init = REQUESTS
            .get(key(h), slot)
            .filter(|op| op.persistent && op.id != 0)
            .map(|op| op.id);
        r.put_op_ref(init);
        let instance = r.take_op();
        if init.is_some() {
            REQUESTS.with_op(key(h), slot, false, |op| {
                op.instance = Some(instance);
                op.cancelled = false;
            });
        }
    }
}

/// Address of the i-th handle of the application's request array.
#[inline(always)]
fn slot_at(slots: *const MPI_Request, i: usize) -> usize {
    slots as usize + i * core::mem::size_of::<MPI_Request>()
}

// ---- completion ----

/// Which of the saved requests a completion call completed.
pub enum Done {
    One(*mut MPI_Status),
    IfFlag(*mut c_int, *mut MPI_Status),
    Index(*mut c_int, *mut MPI_Status),
    IndexIfFlag(*mut c_int, *mut c_int, *mut MPI_Status),
    All(*mut MPI_Status),
    AllIfFlag(*mut c_int, *mut MPI_Status),
    Some(*mut c_int, *mut c_int, *mut MPI_Status),
}

struct Completed {
    op: u64,
    kind: OpKind,
    cancelled: bool,
    /// Null when MPI freed the request without reporting it (an error).
    status: *const MPI_Status,
    /// What the received message's piggyback said.
    got: Option<Got>,
}

/// Takes the operation behind a completed request out of the table. A
/// nonpersistent request completed only if MPI set the application's handle
/// to MPI_REQUEST_NULL (Open MPI keeps a failed request alive, for one).
fn complete_op(
    handle: MPI_Request,
    slot: usize,
    status: *const MPI_Status,
    out: &mut Vec<Completed>,
) {
    if ffi::is_request_null(handle) {
        return;
    }
    let k = key(handle);
    // SAFETY: `slot` is the address of the application's handle that this
    // completion call was given (valid for the call's duration).
    let after = unsafe { *(slot as *const MPI_Request) };
    let freed = ffi::is_request_null(after);
    // A nonpersistent operation whose handle MPI freed is done: it leaves
    // the table in the same lookup.
    let Some(op) = REQUESTS.take_if(k, slot, |o| !o.persistent && freed) else {
        return;
    };
    // Without a status (the final scan of `completed_set`), only freed
    // nonpersistent requests count; a persistent one is never freed here.
    if (!op.persistent && !freed) || (op.persistent && status.is_null()) {
        return;
    }
    let cancelled = op.cancelled && !status.is_null() && ffi::status_cancelled(status);
    let got = piggyback::complete(op.pb, status as *mut MPI_Status, cancelled, op.persistent);
    let id = if op.persistent {
        // An inactive persistent request completes at once and has no instance.
        let Some(inst) = REQUESTS
            .with_op(k, slot, false, |o| o.instance.take())
            .flatten()
        else {
            return;
        };
        inst
    } else {
        op.id
    };
    out.push(Completed {
        op: id,
        kind: op.kind,
        cancelled: op.cancelled,
        status,
        got,
    });
}

fn completed_set(
    call: &Call,
    requests: &[MPI_Request],
    slots: *const MPI_Request,
    done: &Done,
    mut out: Vec<Completed>,
) -> Vec<Completed> {
    let at = |i: usize| slot_at(slots, i);
    let c = ffi::consts();
    // Requests looked at below, each once: the final scan skips them.
    let mut seen = Seen::new(requests.len());
    let mut visit = |i: usize, st: *const MPI_Status, out: &mut Vec<Completed>| {
        if seen.set(i) {
            complete_op(requests[i], at(i), st, out);
        }
    };
    let ok = call.rc == 0;
    let in_status = call.rc == c.err_in_status;
    // SAFETY (all reads below): MPI filled the flag, index, outcount,
    // indices and statuses outputs of this call; statuses were substituted
    // when ignored, so they are always readable.
    unsafe {
        match *done {
            Done::One(st) if ok => visit(0, st, &mut out),
            Done::IfFlag(flag, st) if ok && *flag != 0 => visit(0, st, &mut out),
            Done::Index(index, st) if ok && *index != c.undefined && *index >= 0 => {
                visit(*index as usize, st, &mut out)
            }
            Done::IndexIfFlag(index, flag, st)
                if ok && *flag != 0 && *index != c.undefined && *index >= 0 =>
            {
                visit(*index as usize, st, &mut out)
            }
            Done::All(sts) if ok || in_status => {
                for i in 0..requests.len() {
                    let st = sts.add(i);
                    if ok || (*st).MPI_ERROR != c.err_pending {
                        visit(i, st, &mut out);
                    }
                }
            }
            Done::AllIfFlag(flag, sts) if (ok && *flag != 0) || in_status => {
                for i in 0..requests.len() {
                    let st = sts.add(i);
                    if ok || (*st).MPI_ERROR != c.err_pending {
                        visit(i, st, &mut out);
                    }
                }
            }
            Done::Some(outcount, indices, sts) if ok || in_status => {
                let n = *outcount;
                if n != c.undefined && n > 0 {
                    for k in 0..n as usize {
                        let i = *indices.add(k) as usize;
                        if i < requests.len() {
                            visit(i, sts.add(k), &mut out);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // A nonpersistent request MPI freed without reporting it complete (a
    // failed call, in libraries that free failed requests) is over too.
    // Only a handle MPI set to MPI_REQUEST_NULL can be (`complete_op`
    // without a status does nothing for the others).
    if !seen.all() {
        for (i, &h) in requests.iter().enumerate() {
            // SAFETY: the application's handle array, valid for the call.
            let freed = || ffi::is_request_null(unsafe { *(at(i) as *const MPI_Request) });
            if !seen.has(i) && !ffi::is_request_null(h) && freed() {
                complete_op(h, at(i), core::ptr::null(), &mut out);
            }
        }
    }
    out
}

/// Which requests of a completion call were looked at: a bit each.
struct Seen {
    bits: SmallVec<[u64; 2]>,
    n: usize,
    count: usize,
}

impl Seen {
    #[inline(always)]
    fn new(n: usize) -> Seen {
        Seen {
            bits: smallvec::smallvec![0; n.div_ceil(64)],
            n,
            count: 0,
        }
    }

    /// Marks request `i`; false if it was marked already.
    #[inline(always)]
    fn set(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if self.bits[w] & b != 0 {
            return false;
        }
        self.bits[w] |= b;
        self.count += 1;
        true
    }

    #[inline(always)]
    fn has(&self, i: usize) -> bool {
        self.bits[i / 64] & (1u64 << (i % 64)) != 0
    }

    #[inline(always)]
    fn all(&self) -> bool {
        self.count == self.n
    }
}

thread_local! {
    /// The list `complete` fills, kept for the thread's next completion.
    static COMPLETED: Cell<Vec<Completed>> = const { Cell::new(Vec::new()) };
}

pub fn complete(call: Call, requests: &[MPI_Request], slots: *const MPI_Request, done: Done) {
    guarded(|| {
        let list = COMPLETED.try_with(Cell::take).unwrap_or_default();
        let mut set = completed_set(&call, requests, slots, &done, list);
        complete_set(&call, &set);
        set.clear();
        let _ = COMPLETED.try_with(|c| c.set(set));
    })
}

/// Records the operations a completion call completed.
#[inline(always)]
fn complete_set(call: &Call, set: &[Completed]) {
    // Communicators from completed MPI_Comm_idup are defined before the
    // record that completes them.
    for c in set {
        if let OpKind::Idup {
            newcomm,
            parent_gid,
            nth,
        } = c.kind
        {
            let comm = crate::requests::comm_of_idup(newcomm);
            comms::define_idup(comm, parent_gid, nth, call.rec(), call.t0);
        }
    }
    if set.is_empty() && leave_out(call) {
        return;
    }
    let mut batches = set.chunks(list_batch());
    let first = batches.next().unwrap_or(&[]);
    let Some(mut w) = call.begin_list(first.len()) else {
        return;
    };
    w.put_u(first.len() as u64);
    completion_items(&mut w, first);
    w.commit();
    for batch in batches {
        let Some(mut w) = call
            .rec()
            .begin_continuation(32 + batch.len() * item_room())
        else {
            return;
        };
        w.put_u(batch.len() as u64);
        completion_items(&mut w, batch);
        w.commit_part();
    }
}

fn completion_items(r: &mut Writer, batch: &[Completed]) {
    for c in batch {
        r.put_op_ref((c.op != 0).then_some(c.op));
        let cancelled = c.cancelled && !c.status.is_null() && ffi::status_cancelled(c.status);
        let extra = if cancelled { ST_CANCELLED } else { 0 };
        match c.kind {
            OpKind::Recv { src, tag, posted } if !cancelled && !c.status.is_null() => {
                r.put_status_pb((src, tag, posted), actual(c.status), extra, c.got.as_ref())
            }
            OpKind::RecvBlind { src, tag, posted } if !cancelled && !c.status.is_null() => {
                // The posted values; a wildcard's from the status, which
                // has them right where MPI fills them at all.
                let (s, t, _) = actual(c.status);
                let k = ffi::consts();
                let src_ = if src == k.any_source { s } else { src };
                let tag_ = if tag == k.any_tag { t } else { tag };
                r.put_status_pb(
                    (src, tag, Some(posted)),
                    (src_, tag_, posted),
                    extra,
                    c.got.as_ref(),
                )
            }
            _ => r.put_u(ST_NONE | extra),
        }
    }
}

pub fn cancel(call: Call, request: MPI_Request, slot: *mut MPI_Request) {
    guarded(|| {
        let k = key(request);
        let op = REQUESTS
            .with_op(k, slot as usize, false, |op| {
                op.cancelled = true;
                if op.persistent {
                    op.instance
                } else {
                    (op.id != 0).then_some(op.id)
                }
            })
            .flatten();
        if let Some(mut r) = call.begin() {
            r.put_op_ref(op);
            r.commit();
        }
    })
}

/// `MPI_Request_get_status`: a completed receive is unpacked now, since the
/// application may read its buffer before completing the request.
pub fn request_status(call: Call, request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status) {
    guarded(|| {
        // SAFETY: MPI set *flag for this call.
        if call.ok() && unsafe { *flag } != 0 && !ffi::is_request_null(request) {
            // The handle is not stored in the application's array here; any
            // live operation with this handle value will do.
            if let Some(op) = REQUESTS.get(key(request), 0) {
                piggyback::peek(op.pb, status);
            }
        }
        if leave_out(&call) {
            return;
        }
        if let Some(r) = call.begin() {
            r.commit();
        }
    })
}

/// `MPI_Request_get_status_all/any/some`: every receive reported complete
/// is unpacked now, as for `MPI_Request_get_status`.
#[allow(dead_code)] // MPI-4.1 libraries only
pub fn request_statuses(call: Call, requests: &[MPI_Request], done: Done) {
    guarded(|| {
        let c = ffi::consts();
        let peek = |i: usize, status: *mut MPI_Status| {
            let h = requests[i];
            if !ffi::is_request_null(h) {
                if let Some(op) = REQUESTS.get(key(h), 0) {
                    piggyback::peek(op.pb, status);
                }
            }
        };
        // SAFETY: MPI filled the flag, index, outcount, indices and
        // statuses of this call (statuses substituted when ignored).
        unsafe {
            match done {
                Done::AllIfFlag(flag, sts) if call.ok() && *flag != 0 => {
                    for i in 0..requests.len() {
                        peek(i, sts.add(i));
                    }
                }
                Done::IndexIfFlag(index, flag, st)
                    if call.ok()
                        && *flag != 0
                        && *index != c.undefined
                        && *index >= 0
                        && (*index as usize) < requests.len() =>
                {
                    peek(*index as usize, st);
                }
                Done::Some(outcount, indices, sts) if call.ok() => {
                    let n = *outcount;
                    if n != c.undefined && n > 0 {
                        for k in 0..n as usize {
                            let i = *indices.add(k) as usize;
                            if i < requests.len() {
                                peek(i, sts.add(k));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if leave_out(&call) {
            return;
        }
        if let Some(r) = call.begin() {
            r.commit();
        }
    })
}

pub fn request_free(call: Call, request: MPI_Request, slot: *mut MPI_Request) {
    guarded(|| {
        let slot = slot as usize;
        let op = if call.ok() {
            REQUESTS.remove(key(request), slot)
        } else {
            REQUESTS.get(key(request), slot)
        };
        if let Some(op) = op.filter(|op| call.ok() && op.persistent) {
            // An inactive persistent request (freeing an active one is the
            // rare case where the slot must outlive the handle: kept).
            if op.instance.is_none() {
                piggyback::release(op.pb);
            }
        }
        let id = op.map(|op| op.id).filter(|&id| id != 0);
        if let Some(mut r) = call.begin() {
            r.put_op_ref(id);
            r.commit();
        }
    })
}

// ---- collectives ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Scan,
    ReduceScatter,
    ReduceScatterBlock,
    Gather,
    Gatherv,
    Scatter,
    Scatterv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Alltoallw,
    NeighborAllgather,
    NeighborAllgatherv,
    NeighborAlltoall,
    NeighborAlltoallv,
    NeighborAlltoallw,
}

impl Shape {
    fn rooted(self) -> bool {
        matches!(
            self,
            Shape::Bcast
                | Shape::Reduce
                | Shape::Gather
                | Shape::Gatherv
                | Shape::Scatter
                | Shape::Scatterv
        )
    }
}

/// A collective's arguments by role; absent roles stay at their defaults.
pub struct CollArgs {
    pub sendbuf: *const c_void,
    pub recvbuf: *const c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    pub sendcount: i64,
    pub sendtype: MPI_Datatype,
    pub recvcount: i64,
    pub recvtype: MPI_Datatype,
    pub sendcounts: Counts,
    pub recvcounts: Counts,
    pub sendtypes: *const MPI_Datatype,
    pub recvtypes: *const MPI_Datatype,
    pub root: c_int,
    pub comm: MPI_Comm,
}

impl CollArgs {
    #[inline(always)]
    pub fn new(comm: MPI_Comm) -> CollArgs {
        // SAFETY: reads an initialised constant of mpi-sys's shim.
        let null = unsafe { ffi::RSMPI_DATATYPE_NULL };
        CollArgs {
            sendbuf: core::ptr::null(),
            recvbuf: core::ptr::null(),
            count: 0,
            datatype: null,
            sendcount: 0,
            sendtype: null,
            recvcount: 0,
            recvtype: null,
            sendcounts: Counts::Int(core::ptr::null()),
            recvcounts: Counts::Int(core::ptr::null()),
            sendtypes: core::ptr::null(),
            recvtypes: core::ptr::null(),
            root: 0,
            comm,
        }
    }
}

/// A collective's array of counts: `int` ones, or the `MPI_Count` ones of
/// the large-count (`_c`) functions.
#[derive(Clone, Copy)]
pub enum Counts {
    Int(*const c_int),
    #[cfg_attr(not(mpi4), allow(dead_code))]
    Large(*const ffi::MPI_Count),
}

impl Counts {
    fn is_null(self) -> bool {
        match self {
            Counts::Int(p) => p.is_null(),
            Counts::Large(p) => p.is_null(),
        }
    }

    /// The `i`-th count.
    ///
    /// # Safety
    /// The array is not null and has more than `i` entries.
    unsafe fn get(self, i: usize) -> i64 {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Counts::Int(p) => i64::from(*p.add(i)),
                #[allow(clippy::unnecessary_cast)] // MPI_Count is i64 everywhere so far
                Counts::Large(p) => *p.add(i) as i64,
            }
        }
    }
}

/// Sum of `counts[..n]`, each times the size of its type.
fn sum_bytes(
    sizes: &mut TypeSizes,
    counts: Counts,
    n: usize,
    datatype: MPI_Datatype,
    types: *const MPI_Datatype,
) -> u64 {
    if counts.is_null() {
        return 0;
    }
    let mut total = 0u64;
    for i in 0..n {
        // SAFETY: MPI requires count (and type) arrays of the group's size
        // (or degree) for this rank's role; we read only those.
        let (c, t) = unsafe {
            (
                counts.get(i),
                if types.is_null() {
                    datatype
                } else {
                    *types.add(i)
                },
            )
        };
        total = total.saturating_add(sizes.bytes(c, t));
    }
    total
}

/// (in-degree, out-degree) of a communicator's topology.
fn degrees(comm: MPI_Comm, rank: u32) -> (usize, usize) {
    let mut status = 0;
    // SAFETY: local topology queries on a valid communicator.
    unsafe {
        ffi::PMPI_Topo_test(comm, &mut status);
        if status == ffi::RSMPI_CART {
            let mut nd = 0;
            ffi::PMPI_Cartdim_get(comm, &mut nd);
            (2 * nd as usize, 2 * nd as usize)
        } else if status == ffi::RSMPI_GRAPH {
            let mut n = 0;
            ffi::PMPI_Graph_neighbors_count(comm, rank as c_int, &mut n);
            (n as usize, n as usize)
        } else if status == ffi::RSMPI_DIST_GRAPH {
            let (mut i, mut o, mut w) = (0, 0, 0);
            ffi::PMPI_Dist_graph_neighbors_count(comm, &mut i, &mut o, &mut w);
            (i as usize, o as usize)
        } else {
            (0, 0)
        }
    }
}

/// Bytes this rank sends and receives in a collective.
fn coll_bytes(sizes: &mut TypeSizes, shape: Shape, a: &CollArgs, info: &CommInfo) -> (u64, u64) {
    macro_rules! b {
        ($n:expr, $t:expr) => {
            sizes.bytes($n, $t)
        };
    }
    let c = ffi::consts();
    let in_place = a.sendbuf as usize == c.in_place;
    let recv_in_place = a.recvbuf as usize == c.in_place;
    // Peers whose blocks a rank handles: the remote group on an intercommunicator.
    let peers = if info.inter {
        info.remote_size
    } else {
        info.size
    } as c_int;
    let peers_u = peers.max(0) as usize;
    // Arguments significant only at the root (or only at non-roots) are read
    // only there: elsewhere they may be garbage or null.
    macro_rules! data {
        () => {
            b!(a.count, a.datatype)
        };
    }
    // Rooted collectives on an intercommunicator: MPI_ROOT sends (or
    // gathers), MPI_PROC_NULL does nothing, the others are the leaves.
    enum Role {
        Root,
        Leaf,
        Idle,
    }
    let role = if info.inter {
        if a.root == c.root {
            Role::Root
        } else if a.root == c.proc_null {
            Role::Idle
        } else {
            Role::Leaf
        }
    } else if a.root == info.rank as c_int {
        Role::Root
    } else {
        Role::Leaf
    };
    match shape {
        Shape::Barrier => (0, 0),
        Shape::Bcast => match role {
            Role::Root => (data!(), 0),
            Role::Leaf => (0, data!()),
            Role::Idle => (0, 0),
        },
        Shape::Reduce => match role {
            Role::Root if info.inter => (0, data!()),
            Role::Root => (data!(), data!()),
            Role::Leaf => (data!(), 0),
            Role::Idle => (0, 0),
        },
        Shape::Allreduce | Shape::Scan => (data!(), data!()),
        Shape::ReduceScatterBlock => (
            b!(a.recvcount, a.datatype) * info.size as u64,
            b!(a.recvcount, a.datatype),
        ),
        Shape::ReduceScatter => {
            let total = sum_bytes(
                sizes,
                a.recvcounts,
                info.size as usize,
                a.datatype,
                core::ptr::null(),
            );
            // SAFETY: recvcounts has one entry per rank of the group.
            let mine = if a.recvcounts.is_null() {
                0
            } else {
                b!(unsafe { a.recvcounts.get(info.rank as usize) }, a.datatype)
            };
            (total, mine)
        }
        Shape::Gather | Shape::Gatherv => {
            let gathered = |sizes: &mut TypeSizes| {
                if shape == Shape::Gather {
                    sizes.bytes(a.recvcount, a.recvtype) * peers_u as u64
                } else {
                    sum_bytes(sizes, a.recvcounts, peers_u, a.recvtype, core::ptr::null())
                }
            };
            match role {
                Role::Root if info.inter || in_place => (0, gathered(sizes)),
                Role::Root => (b!(a.sendcount, a.sendtype), gathered(sizes)),
                Role::Leaf => (b!(a.sendcount, a.sendtype), 0),
                Role::Idle => (0, 0),
            }
        }
        Shape::Scatter | Shape::Scatterv => {
            let scattered = |sizes: &mut TypeSizes| {
                if shape == Shape::Scatter {
                    sizes.bytes(a.sendcount, a.sendtype) * peers_u as u64
                } else {
                    sum_bytes(sizes, a.sendcounts, peers_u, a.sendtype, core::ptr::null())
                }
            };
            match role {
                Role::Root if info.inter || recv_in_place => (scattered(sizes), 0),
                Role::Root => (scattered(sizes), b!(a.recvcount, a.recvtype)),
                Role::Leaf => (0, b!(a.recvcount, a.recvtype)),
                Role::Idle => (0, 0),
            }
        }
        Shape::Allgather => {
            let block = b!(a.recvcount, a.recvtype);
            (
                if in_place {
                    block
                } else {
                    b!(a.sendcount, a.sendtype)
                },
                block * peers_u as u64,
            )
        }
        Shape::Allgatherv => {
            let total = sum_bytes(sizes, a.recvcounts, peers_u, a.recvtype, core::ptr::null());
            let sent = if in_place {
                // SAFETY: recvcounts has one entry per rank of the group.
                b!(unsafe { a.recvcounts.get(info.rank as usize) }, a.recvtype)
            } else {
                b!(a.sendcount, a.sendtype)
            };
            (sent, total)
        }
        Shape::Alltoall => {
            let r = b!(a.recvcount, a.recvtype) * peers_u as u64;
            (
                if in_place {
                    r
                } else {
                    b!(a.sendcount, a.sendtype) * peers_u as u64
                },
                r,
            )
        }
        Shape::Alltoallv | Shape::Alltoallw => {
            let per_peer = |t: *const MPI_Datatype| {
                if shape == Shape::Alltoallw {
                    t
                } else {
                    core::ptr::null()
                }
            };
            let r = sum_bytes(
                sizes,
                a.recvcounts,
                peers_u,
                a.recvtype,
                per_peer(a.recvtypes),
            );
            (
                if in_place {
                    r
                } else {
                    sum_bytes(
                        sizes,
                        a.sendcounts,
                        peers_u,
                        a.sendtype,
                        per_peer(a.sendtypes),
                    )
                },
                r,
            )
        }
        Shape::NeighborAllgather | Shape::NeighborAlltoall => {
            let (ins, outs) = degrees(a.comm, info.rank);
            // Allgather sends the same block to every out-neighbour,
            // alltoall one block each: the same bytes either way.
            (
                b!(a.sendcount, a.sendtype) * outs as u64,
                b!(a.recvcount, a.recvtype) * ins as u64,
            )
        }
        Shape::NeighborAllgatherv => {
            let (ins, outs) = degrees(a.comm, info.rank);
            (
                b!(a.sendcount, a.sendtype) * outs as u64,
                sum_bytes(sizes, a.recvcounts, ins, a.recvtype, core::ptr::null()),
            )
        }
        Shape::NeighborAlltoallv | Shape::NeighborAlltoallw => {
            let (ins, outs) = degrees(a.comm, info.rank);
            let per_peer = |t: *const MPI_Datatype| {
                if shape == Shape::NeighborAlltoallw {
                    t
                } else {
                    core::ptr::null()
                }
            };
            (
                sum_bytes(sizes, a.sendcounts, outs, a.sendtype, per_peer(a.sendtypes)),
                sum_bytes(sizes, a.recvcounts, ins, a.recvtype, per_peer(a.recvtypes)),
            )
        }
    }
}

/// The sequence number of this rank's next collective on `info`. Counted
/// whether or not the record can be written, so that numbers stay aligned
/// across ranks. MPI orders collectives on one communicator, so no two
/// threads start one on it at once: a plain increment suffices.
#[inline(always)]
fn next_seq(info: &CommInfo) -> u64 {
    let seq = info.seq.load(core::sync::atomic::Ordering::Relaxed);
    info.seq
        .store(seq + 1, core::sync::atomic::Ordering::Relaxed);
    seq
}

#[inline(always)]
fn put_coll(r: &mut Writer, info: &CommInfo, seq: u64, root: Option<i32>, sent: u64, recvd: u64) {
    r.put_u(u64::from(info.index));
    r.put_u(root_code(root));
    r.put_u(sent);
    r.put_u(recvd);
    r.put_coll_seq(info.index, seq);
}

pub fn coll(call: Call, shape: Shape, args: &CollArgs) {
    guarded(|| {
        let info = comm_info(&call, args.comm);
        let seq = next_seq(info);
        let (sent, recvd) = call.coll_bytes(shape, args, info);
        if let Some(mut r) = call.begin() {
            put_coll(
                &mut r,
                info,
                seq,
                shape.rooted().then_some(args.root),
                sent,
                recvd,
            );
            r.commit();
        }
    })
}

pub fn icoll(call: Call, shape: Shape, args: &CollArgs, request: *mut MPI_Request) {
    guarded(|| {
        let info = comm_info(&call, args.comm);
        let seq = next_seq(info);
        let (sent, recvd) = call.coll_bytes(shape, args, info);
        let Some(mut r) = call.begin() else { return };
        put_coll(
            &mut r,
            info,
            seq,
            shape.rooted().then_some(args.root),
            sent,
            recvd,
        );
        if call.ok() {
            let id = r.take_op();
            register(request, id, OpKind::Coll, false, 0);
        }
        r.commit();
    })
}

/// A persistent collective (`MPI_*_init`): its sequence number is taken
/// now (the init call is ordered as a collective); each `MPI_Start` of
/// the request is an instance of its own (see `start`).
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn pcoll(call: Call, shape: Shape, args: &CollArgs, request: *mut MPI_Request) {
    guarded(|| {
        let info = comm_info(&call, args.comm);
        let seq = next_seq(info);
        let (sent, recvd) = call.coll_bytes(shape, args, info);
        let Some(mut r) = call.begin() else { return };
        put_coll(
            &mut r,
            info,
            seq,
            shape.rooted().then_some(args.root),
            sent,
            recvd,
        );
        if call.ok() {
            let id = r.take_op();
            register(request, id, OpKind::Coll, true, 0);
        }
        r.commit();
    })
}

// ---- datatypes ----

/// The operation id of a matched-probe message, taken out of the table
/// before the receive that consumes the message.
pub fn claim_message(message: MPI_Message) -> Option<u64> {
    MESSAGES.remove(key(message)).map(|m| m.0)
}

/// Before `MPI_Type_free`: cached datatype sizes become stale.
pub fn types_changing() {
    ffi::TYPE_GENERATION.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
}

// ---- communicators ----

/// How a new communicator came about, which decides how its id is found.
pub enum Origin {
    /// A collective constructor over the members (dup, split, create, ...):
    /// they agree on the id.
    Constructed,
    /// Spawn, accept, connect, join: the other side may be untraced, so
    /// the id is local.
    Dynamic,
    /// `MPI_Comm_get_parent`: known already, or local.
    Parent,
}

pub fn comm_new(call: Call, parent: Option<MPI_Comm>, newcomm: *mut MPI_Comm, origin: Origin) {
    guarded(|| {
        let parent = parent.map(|p| comm_info(&call, p).index);
        let new = if call.ok() {
            // SAFETY: MPI stored the new communicator there.
            let c = unsafe { *newcomm };
            // SAFETY: reads an initialised constant of mpi-sys's shim.
            if ffi::handle_key(c) == ffi::handle_key(unsafe { ffi::RSMPI_COMM_NULL }) {
                None
            } else {
                let (rec, t) = (call.rec(), call.t0);
                Some(match origin {
                    Origin::Constructed => comms::define_constructed(c, rec, t),
                    Origin::Dynamic => comms::define_dynamic(c, rec, t),
                    Origin::Parent => comms::resolve(c, rec, t),
                })
            }
        } else {
            None
        };
        if let Some(mut r) = call.begin() {
            r.put_u(parent.map_or(0, |p| u64::from(p) + 1));
            r.put_u(new.map_or(0, |n| u64::from(n.index) + 1));
            r.commit();
        }
    })
}

pub fn comm_idup(call: Call, comm: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) {
    guarded(|| {
        let info = comm_info(&call, comm);
        let seq = next_seq(info);
        let nth = info
            .idups
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        let Some(mut r) = call.begin() else { return };
        put_coll(&mut r, info, seq, None, 0, 0);
        if call.ok() {
            let id = r.take_op();
            let kind = OpKind::Idup {
                newcomm: newcomm as usize,
                parent_gid: info.gid,
                nth,
            };
            register(request, id, kind, false, 0);
        }
        r.commit();
    })
}

/// Before `MPI_Comm_free`/`MPI_Comm_disconnect`: the communicator is taken
/// out of the table (looked up only: the handle is about to die).
pub fn release_comm(comm: MPI_Comm) -> Option<&'static CommInfo> {
    comms::release(comm)
}

pub fn comm_free(call: Call, comm: MPI_Comm, released: Option<&'static CommInfo>) {
    guarded(|| {
        if !call.ok() {
            // Still alive after all.
            if let Some(info) = released {
                comms::restore(comm, info);
            }
        }
        let index = released
            .unwrap_or_else(|| comms::unknown(call.rec(), call.t0))
            .index;
        if let Some(mut r) = call.begin() {
            r.put_u(u64::from(index));
            r.commit();
        }
    })
}

// ---- scratch storage for array arguments ----

thread_local! {
    static SCRATCH: RefCell<(Vec<MPI_Status>, Vec<MPI_Request>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Per-thread arrays reused across calls: substitute statuses for
/// MPI_STATUSES_IGNORE, and the request handles as they were before the call.
pub struct Scratch {
    statuses: Vec<MPI_Status>,
    requests: Vec<MPI_Request>,
}

impl Scratch {
    pub fn take() -> Scratch {
        let (statuses, requests) = SCRATCH
            .try_with(|s| core::mem::take(&mut *s.borrow_mut()))
            .unwrap_or_default();
        Scratch { statuses, requests }
    }

    pub fn statuses(&mut self, statuses: *mut MPI_Status, n: c_int) -> *mut MPI_Status {
        // SAFETY: reads an initialised constant of mpi-sys's shim.
        let ignore = unsafe { ffi::RSMPI_STATUSES_IGNORE };
        if !statuses.is_null() && statuses != ignore {
            return statuses;
        }
        let n = n.max(1) as usize;
        if self.statuses.len() < n {
            // SAFETY: MPI_Status is plain data; all-zero is a valid value.
            self.statuses.resize(n, unsafe { core::mem::zeroed() });
        }
        self.statuses.as_mut_ptr()
    }

    pub fn save_requests(&mut self, requests: *const MPI_Request, n: c_int) {
        self.requests.clear();
        if !requests.is_null() && n > 0 {
            // SAFETY: MPI requires `n` valid request handles there.
            self.requests
                .extend_from_slice(unsafe { core::slice::from_raw_parts(requests, n as usize) });
        }
    }

    pub fn requests(&self) -> &[MPI_Request] {
        &self.requests
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let bufs = (
            core::mem::take(&mut self.statuses),
            core::mem::take(&mut self.requests),
        );
        let _ = SCRATCH.try_with(|s| *s.borrow_mut() = bufs);
    }
}
