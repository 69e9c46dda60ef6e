//! Hooks of point-to-point calls: blocking sends and receives,
//! `MPI_Sendrecv` and `MPI_Isendrecv`, the nonblocking and persistent
//! posts (`issue`), probes, and matched receives. Their messages' headers
//! are the piggyback's (the wrappers call it around the real call); these
//! record what came of it.

use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Message, MPI_Request, MPI_Status};
use crate::guard::Held;
use crate::hooks_call::{actual, comm_info, guarded, register, register_kept, Call};
use crate::live;
use crate::piggyback::{self, Got};
use crate::recorder::{fixed_head, Writer};
use crate::requests::{key, OpKind, MESSAGES};
use crate::thread::{ProbeMiss, SendMemo, Thread};
use core::ffi::c_int;
use core::sync::atomic::Ordering::Relaxed;
use pmtrace_format::pending::PendingRecv;
use pmtrace_format::record::{ST_EMPTY, ST_NONE};
use pmtrace_format::varint::{Packed, Sink};

#[inline(always)]
fn put_send(r: &mut impl Sink, peer: c_int, tag: c_int, comm: u32, bytes: u64) {
    r.put_i(i64::from(peer));
    r.put_i(i64::from(tag));
    r.put_u(u64::from(comm));
    r.put_u(bytes);
}

/// Whether the thread's kept point-to-point payload is this call's, but
/// for its tag (see `SendMemo`). The message calls ask before the call,
/// so that the piggyback takes the message's layout from it and the hook
/// its payload (`SendMemo::payload_for`).
#[inline(always)]
pub fn memo_hit(
    thread: &Thread,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    comm: MPI_Comm,
) -> bool {
    let m = &thread.state.send_memo;
    m.comm == ffi::handle_key(comm)
        && m.datatype == ffi::handle_key(datatype)
        && m.count == count
        && m.peer == peer
        && m.epoch == ffi::EPOCH.load(Relaxed)
}

/// Keeps the payload a successful point-to-point call just recorded
/// (`put_send`'s fields) for the next call like it. Not kept when the
/// piggyback is on and cannot lay the message out (it then takes its
/// general path, which the memo would skip).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn keep_memo(
    thread: &mut Thread,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    index: u32,
    bytes: u64,
) {
    let dense = if crate::piggyback_lamport::on() {
        match thread.state.types.layout(count, datatype) {
            Some((b, dense)) if b == bytes => dense,
            _ => return,
        }
    } else {
        false
    };
    let mut payload = Packed::default();
    put_send(&mut payload, peer, tag, index, bytes);
    if payload.len <= 8 {
        let mut head = Packed::default();
        head.put_i(i64::from(peer));
        let mut tail = Packed::default();
        tail.put_u(u64::from(index));
        tail.put_u(bytes);
        thread.state.send_memo = SendMemo {
            comm: ffi::handle_key(comm),
            epoch: ffi::EPOCH.load(Relaxed),
            datatype: ffi::handle_key(datatype),
            count,
            peer,
            tag,
            index,
            bytes,
            dense,
            payload: payload.bytes,
            len: payload.len,
            head_len: head.len,
            tail: tail.bytes,
            tail_len: tail.len,
        };
    }
}

/// A blocking send. One like the thread's last recorded point-to-point
/// call (same count, datatype, peer, tag and communicator) is a fixed
/// record.
#[inline(always)]
pub fn send(
    call: Call,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
) {
    if call.ok() {
        let thread = call.thread();
        let hit = memo_hit(thread, count, datatype, peer, comm);
        if let Some(payload) = hit
            .then(|| thread.state.send_memo.payload_for(tag))
            .flatten()
        {
            let m = thread.state.send_memo;
            let head = fixed_head(call.func);
            if let Some(w) =
                thread
                    .recorder
                    .fixed_call(head, (call.t0, call.t1), payload, call.lane())
            {
                live::sent(w.live(), m.bytes);
                w.commit();
                return;
            }
        }
    }
    send_full(call, count, datatype, peer, tag, comm);
}

#[inline(never)]
fn send_full(
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
            live::sent(r.live(), bytes);
            put_send(&mut r, peer, tag, info.index, bytes);
            r.commit();
        }
        if call.ok() {
            keep_memo(
                call.thread(),
                count,
                datatype,
                peer,
                tag,
                comm,
                info.index,
                bytes,
            );
        }
    })
}

/// What a nonblocking or persistent point-to-point call starts.
pub enum Issued {
    Send,
    Recv,
}

/// Isend and its modes, Irecv, and the persistent `*_init` calls. `pb` is
/// the piggyback slot the wrapper made; the request keeps it even when the
/// call cannot be recorded, since completing it must unpack the message.
/// A nonblocking one like the thread's last recorded point-to-point call
/// (same count, datatype, peer, tag and communicator: `memo`, asked
/// before the call by `memo_hit`) is a fixed record: its payload is that
/// call's bytes (`Recorder::fixed_call`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
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
    memo: bool,
) {
    let payload = (call.ok() && !persistent && memo)
        .then(|| call.thread().state.send_memo.payload_for(tag))
        .flatten();
    if let Some(payload) = payload {
        let thread = call.thread();
        let m = thread.state.send_memo;
        let head = fixed_head(call.func);
        if let Some(mut w) =
            thread
                .recorder
                .fixed_call(head, (call.t0, call.t1), payload, call.lane())
        {
            let id = w.take_op();
            let recv = matches!(issued, Issued::Recv);
            let kind = if recv {
                OpKind::Recv {
                    src: peer,
                    tag,
                    posted: Some(m.bytes),
                }
            } else {
                OpKind::Send { dst: peer }
            };
            register_kept(&mut thread.state.kept, request, id, kind, pb, m.index + 1);
            if recv {
                piggyback::posted_recv(pb, true);
            } else {
                live::sent(w.live(), m.bytes);
            }
            w.commit();
            return;
        }
    }
    // Made here, on the general path only: nothing of it is stored on the
    // fast path for this call's sake.
    let (guard, func, t0, t1, rc) = call.parts();
    issue_full(IssueArgs {
        guard,
        func,
        t0,
        t1,
        rc,
        count,
        datatype,
        peer,
        tag,
        comm,
        request,
        issued,
        persistent,
        pb,
    });
}

/// `issue`'s call and arguments, for its general path.
struct IssueArgs<'g> {
    guard: Held<'g>,
    func: u32,
    t0: u64,
    t1: u64,
    rc: c_int,
    count: i64,
    datatype: MPI_Datatype,
    peer: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
    issued: Issued,
    persistent: bool,
    pb: usize,
}

#[inline(never)]
fn issue_full(a: IssueArgs) {
    let IssueArgs {
        guard,
        func,
        t0,
        t1,
        rc,
        count,
        datatype,
        peer,
        tag,
        comm,
        request,
        issued,
        persistent,
        pb,
    } = a;
    let call = Call::new(guard, func, t0, t1, rc);
    guarded(|| {
        let info = comm_info(&call, comm);
        let bytes = call.bytes(count, datatype);
        let kind = match issued {
            Issued::Recv => OpKind::Recv {
                src: peer,
                tag,
                posted: Some(bytes),
            },
            Issued::Send => OpKind::Send { dst: peer },
        };
        let mut w = call.begin();
        let recv = matches!(kind, OpKind::Recv { .. });
        if call.ok() {
            let id = w.as_mut().map_or(0, |r| r.take_op());
            register(request, id, kind, persistent, pb, info.index + 1);
            // (A send's slot never joins the pending receives.)
            if !persistent && recv {
                piggyback::posted_recv(pb, true);
            }
        } else {
            piggyback::release(pb);
        }
        if let Some(mut r) = w {
            if !recv && !persistent && call.ok() {
                live::sent(r.live(), bytes);
            }
            put_send(&mut r, peer, tag, info.index, bytes);
            r.commit();
        }
        if !persistent && call.ok() {
            let thread = call.thread();
            keep_memo(thread, count, datatype, peer, tag, comm, info.index, bytes);
        }
    })
}

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

/// A blocking receive (the general path: `hooks_recv` has the fast one).
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
) {
    guarded(|| {
        if call.ok() && got.as_ref().is_none_or(|g| g.vc.is_empty()) {
            let pb = got.map(|g| (g.id, g.lc, g.sent));
            call.rec().write_recv(&PendingRecv {
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

/// The send half (peer, tag, bytes), the receive half (source, tag,
/// bytes posted) and the communicator of a send-receive.
#[inline(always)]
fn put_sendrecv(r: &mut Writer, send: (c_int, c_int, u64), recv: (c_int, c_int, u64), comm: u32) {
    r.put_i(i64::from(send.0));
    r.put_i(i64::from(send.1));
    r.put_u(send.2);
    r.put_i(i64::from(recv.0));
    r.put_i(i64::from(recv.1));
    r.put_u(recv.2);
    r.put_u(u64::from(comm));
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
        live::sent(r.live(), bytes);
        put_sendrecv(
            &mut r,
            (dest, sendtag, bytes),
            (source, recvtag, posted),
            info.index,
        );
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
        if let Some(r) = w.as_ref().filter(|_| call.ok()) {
            live::sent(r.live(), bytes);
        }
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
            register(request, id, kind, false, pb, info.index + 1);
            piggyback::posted_recv(pb, true);
        } else {
            piggyback::release(pb);
        }
        if let Some(mut r) = w {
            put_sendrecv(
                &mut r,
                (dest, sendtag, bytes),
                (source, recvtag, posted),
                info.index,
            );
            r.commit();
        }
    })
}

/// After `MPI_Iprobe` or `MPI_Improbe`, which MPI gave a local status:
/// the status to the caller's, when the probe found a message and the
/// caller asked for one. (A probe that finds nothing leaves the status
/// undefined, and MPI leaves it as it was.) The caller's `MPI_ERROR`
/// stays as it was too: a probe does not set it, and MPI leaves it alone.
#[inline(always)]
pub fn probe_out(rc: c_int, flag: *const c_int, local: *const MPI_Status, user: *mut MPI_Status) {
    // SAFETY: MPI set *flag when the call succeeded, and filled the local
    // status when it found a message; `user` is the caller's, valid unless
    // null or MPI_STATUS_IGNORE.
    unsafe {
        if rc == 0 && *flag != 0 && !user.is_null() && user != ffi::RSMPI_STATUS_IGNORE {
            let error = (*user).MPI_ERROR;
            user.write(local.read());
            (*user).MPI_ERROR = error;
        }
    }
}

/// Probe, Iprobe (`flag`), Mprobe (`message`), Improbe (both): `flag`
/// is `None` for the blocking probes.
/// A probe. One that finds nothing, as the thread's last recorded miss
/// did (same source, tag and communicator), is a fixed record: its
/// payload is that miss's bytes, written without a look at the message
/// machinery (`Recorder::fixed_call`).
#[inline(always)]
pub fn probe(
    call: Call,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: Option<*mut c_int>,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
) {
    // SAFETY: MPI set *flag for this call when it succeeded (so the
    // pointer is valid then, with no test of its own).
    let missed = match flag {
        Some(f) => call.ok() && unsafe { *f } == 0,
        None => false,
    };
    if missed && !call.may_leave_out() {
        let thread = call.thread();
        let miss = thread.state.probe_miss;
        if miss.comm == ffi::handle_key(comm)
            && miss.from == ProbeMiss::of(src, tag)
            && miss.epoch == ffi::EPOCH.load(Relaxed)
        {
            let head = fixed_head(call.func);
            let payload = (miss.bytes, miss.len);
            if let Some(w) =
                thread
                    .recorder
                    .fixed_call(head, (call.t0, call.t1), payload, call.lane())
            {
                w.commit();
                return;
            }
        }
    }
    // Made here, on the general path only (as in `issue`).
    let (guard, func, t0, t1, rc) = call.parts();
    probe_full(ProbeArgs {
        guard,
        func,
        t0,
        t1,
        rc,
        src,
        tag,
        comm,
        flag: flag.unwrap_or(core::ptr::null_mut()),
        message,
        status,
    });
}

/// `probe`'s call and arguments, for its general path.
struct ProbeArgs<'g> {
    guard: Held<'g>,
    func: u32,
    t0: u64,
    t1: u64,
    rc: c_int,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    message: *mut MPI_Message,
    status: *mut MPI_Status,
}

#[inline(never)]
fn probe_full(a: ProbeArgs) {
    let ProbeArgs {
        guard,
        func,
        t0,
        t1,
        rc,
        src,
        tag,
        comm,
        flag,
        message,
        status,
    } = a;
    let call = Call::new(guard, func, t0, t1, rc);
    guarded(|| {
        let info = comm_info(&call, comm);
        // SAFETY: MPI set *flag for this call when a flag was passed.
        let found = call.ok() && (flag.is_null() || unsafe { *flag } != 0);
        if found {
            piggyback::fix_probe_status(status, comm, message);
        }
        // A matched message gets an operation id: that probe stays.
        if (!found || message.is_null()) && call.leave_out() {
            return;
        }
        let Some(mut r) = call.begin() else { return };
        put_probe_fields(&mut r, src, tag, info.index);
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
        if !found {
            // The payload just written, kept for the next such miss.
            let mut payload = Packed::default();
            put_probe_fields(&mut payload, src, tag, info.index);
            payload.put_u(ST_EMPTY);
            if payload.len <= 8 {
                call.thread().state.probe_miss = ProbeMiss {
                    comm: ffi::handle_key(comm),
                    epoch: ffi::EPOCH.load(Relaxed),
                    from: ProbeMiss::of(src, tag),
                    bytes: payload.bytes,
                    len: payload.len,
                };
            }
        }
    })
}

/// A probe's source, tag and communicator: into a record, or into the
/// bytes a fixed record repeats (`ProbeMiss`).
#[inline(always)]
fn put_probe_fields<S: Sink>(out: &mut S, src: c_int, tag: c_int, comm: u32) {
    out.put_i(i64::from(src));
    out.put_i(i64::from(tag));
    out.put_u(u64::from(comm));
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
            // The message is here already: completing waits on no one.
            register(request, id, kind, false, pb, 0);
        } else {
            piggyback::release(pb);
        }
        if let Some(r) = w {
            r.commit();
        }
    })
}

/// The operation id of a matched-probe message, taken out of the table
/// before the receive that consumes the message.
pub fn claim_message(message: MPI_Message) -> Option<u64> {
    MESSAGES.remove(key(message)).map(|m| m.0)
}
