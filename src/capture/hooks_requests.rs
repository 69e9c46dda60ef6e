//! Hooks of requests: persistent starts, completions (the `MPI_Wait` and
//! `MPI_Test` families: which operations a call completed, and what their
//! receives got), cancellation, `MPI_Request_get_status*` and
//! `MPI_Request_free`. A completed receive's piggyback slot is unpacked
//! here (`piggyback::complete`), before its record is written.

use crate::comms;
use crate::ffi::{self, MPI_Request, MPI_Status};
use crate::guard::Guard;
use crate::hooks_call::{actual, guarded, slot_at, Call};
use crate::piggyback::{self, Got};
use crate::recorder::{fixed_head, Writer};
use crate::requests::{key, Kept, Op, OpKind, TakeSend, REQUESTS};
use core::cell::Cell;
use core::ffi::c_int;
use pmtrace_format::record::{self, ST_CANCELLED, ST_NONE};
use pmtrace_format::varint::{zigzag, Sink};
use smallvec::SmallVec;

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
            piggyback::before_start(op.pb, guard.thread(), t0);
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
        call.put_list(&requests[..n], |w, batch, at| {
            start_items(w, batch, slot_at(slots, at) as *const MPI_Request)
        });
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
    kept: Option<&Kept>,
    handle: MPI_Request,
    slot: usize,
    status: *const MPI_Status,
) -> Option<Completed> {
    let (op, id, got) = take_completed(kept, handle, slot, status)?;
    Some(Completed {
        op: id,
        kind: op.kind,
        cancelled: op.cancelled,
        status,
        got,
    })
}

/// `complete_op`'s parts, as they leave the table: the entry, the id its
/// record names (a persistent request's instance), and what the message's
/// piggyback said (the slot unpacked and released).
#[inline(always)]
fn take_completed(
    kept: Option<&Kept>,
    handle: MPI_Request,
    slot: usize,
    status: *const MPI_Status,
) -> Option<(Op, u64, Option<Got>)> {
    if ffi::is_request_null(handle) {
        return None;
    }
    let k = key(handle);
    // SAFETY: `slot` is the address of the application's handle that this
    // completion call was given (valid for the call's duration).
    let after = unsafe { *(slot as *const MPI_Request) };
    let freed = ffi::is_request_null(after);
    // A nonpersistent operation whose handle MPI freed is done: it leaves
    // the thread's kept place, or the table in the same lookup.
    let own = kept.filter(|_| freed).and_then(|c| c.take(k, slot));
    let op = match own {
        Some(op) => op,
        None => REQUESTS.take_if(k, slot, |o| !o.persistent && freed)?,
    };
    // Without a status (the final scan of `completed_set`), only freed
    // nonpersistent requests count; a persistent one is never freed here.
    if (!op.persistent && !freed) || (op.persistent && status.is_null()) {
        return None;
    }
    let cancelled = op.cancelled && !status.is_null() && ffi::status_cancelled(status);
    let got = piggyback::complete(op.pb, status as *mut MPI_Status, cancelled, op.persistent);
    let id = if op.persistent {
        // An inactive persistent request completes at once and has no instance.
        REQUESTS
            .with_op(k, slot, false, |o| o.instance.take())
            .flatten()?
    } else {
        op.id
    };
    Some((op, id, got))
}

/// `MPI_Wait` or `MPI_Test` of one request: `completed_set` and
/// `complete_set` in one, with no list and no marks, the record written
/// from the operation's parts as they leave the table.
#[inline(always)]
fn complete_single(call: &Call, h: MPI_Request, slot: usize, done: &Done, st: *mut MPI_Status) {
    // SAFETY: MPI filled the flag of this call.
    let reported = call.rc == 0
        && unsafe {
            match *done {
                Done::IfFlag(flag, _) => *flag != 0,
                _ => true,
            }
        };
    // Not reported complete but freed by MPI: over too, with no status
    // (as in `completed_set`'s final scan).
    // SAFETY: the application's handle, valid for the call.
    let freed = || ffi::is_request_null(unsafe { *(slot as *const MPI_Request) });
    let status: *const MPI_Status = if reported { st } else { core::ptr::null() };
    if !reported && !freed() {
        return complete_none(call);
    }
    let kept = call.thread().state.kept.peek();
    // A send: out of the thread's kept place or the table, its slot
    // released, its record written, with no more of the general path than
    // that. (A receive kept goes on below.)
    let mut own = None;
    if reported && call.rc == 0 && !ffi::is_request_null(h) && freed() {
        let k = key(h);
        own = kept.and_then(|c| c.take(k, slot));
        let sent = match own {
            Some(Op {
                kind: OpKind::Send { .. },
                id,
                pb,
                ..
            }) => Some((id, pb)),
            Some(_) => None,
            None => match REQUESTS.take_send(k, slot) {
                TakeSend::Sent { id, pb } => Some((id, pb)),
                TakeSend::Missing => return complete_none(call),
                TakeSend::Other => None,
            },
        };
        if let Some((id, pb)) = sent {
            piggyback::release(pb);
            if !fixed_send_completion(call, id) {
                complete_sent(call, id);
            }
            return;
        }
    }
    let taken = match own {
        // Kept: not persistent, never cancelled.
        Some(op) => Some((op, op.id, piggyback::complete(op.pb, st, false, false))),
        None => take_completed(kept, h, slot, status),
    };
    let Some((op, id, got)) = taken else {
        return complete_none(call);
    };
    if let OpKind::Idup { .. } = op.kind {
        let c = Completed {
            op: id,
            kind: op.kind,
            cancelled: op.cancelled,
            status,
            got,
        };
        return complete_set(call, core::slice::from_ref(&c));
    }
    let Some(mut w) = call.begin_list(1) else {
        return;
    };
    w.put_u(1);
    put_completion(&mut w, id, op.kind, op.cancelled, status, got.as_ref());
    w.commit();
}

/// The record of a successful `MPI_Wait` or `MPI_Test` that completed one
/// send, never cancelled, as a fixed record: the list's count 1, the
/// operation's reference and `ST_NONE`, the bytes `put_completion` writes.
/// False, with nothing written, when the reference takes more than a byte
/// or the recorder needs the general path.
#[inline(always)]
fn fixed_send_completion(call: &Call, id: u64) -> bool {
    let rec = call.rec();
    let op_ref = zigzag(record::op_ref(rec.next_op(), Some(id)));
    if op_ref >= 0x80 {
        return false;
    }
    let payload = 1 | op_ref << 8 | ST_NONE << 16;
    match rec.fixed_call(
        fixed_head(call.func),
        (call.t0, call.t1),
        (payload, 3),
        call.lane(),
    ) {
        Some(w) => {
            w.commit();
            true
        }
        None => false,
    }
}

/// The record of a completion call that completed one send, when
/// `fixed_send_completion` cannot write it.
#[inline(never)]
fn complete_sent(call: &Call, id: u64) {
    let Some(mut w) = call.begin_list(1) else {
        return;
    };
    w.put_u(1);
    let kind = OpKind::Send { dst: 0 };
    put_completion(&mut w, id, kind, false, core::ptr::null(), None);
    w.commit();
}

/// The record of a completion call that completed nothing.
#[inline(never)]
fn complete_none(call: &Call) {
    complete_set(call, &[]);
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
    let kept = call.thread().state.kept.peek();
    // Requests looked at below, each once: the final scan skips them.
    let mut seen = Seen::new(requests.len());
    let mut visit = |i: usize, st: *const MPI_Status, out: &mut Vec<Completed>| {
        if seen.set(i) {
            out.extend(complete_op(kept, requests[i], at(i), st));
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
                out.extend(complete_op(kept, h, at(i), core::ptr::null()));
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

/// A completion call: which of `requests` it completed, recorded.
#[inline(always)]
pub fn complete(call: Call, requests: &[MPI_Request], slots: *const MPI_Request, done: Done) {
    if let [h] = requests {
        if let Done::One(st) | Done::IfFlag(_, st) = done {
            return complete_one(&call, *h, slots as usize, &done, st);
        }
    }
    complete_many(&call, requests, slots, &done);
}

#[inline(never)]
fn complete_one(call: &Call, h: MPI_Request, slot: usize, done: &Done, st: *mut MPI_Status) {
    guarded(|| complete_single(call, h, slot, done, st));
}

#[inline(never)]
fn complete_many(call: &Call, requests: &[MPI_Request], slots: *const MPI_Request, done: &Done) {
    guarded(|| {
        let list = COMPLETED.try_with(Cell::take).unwrap_or_default();
        let mut set = completed_set(call, requests, slots, done, list);
        complete_set(call, &set);
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
            ..
        } = c.kind
        {
            let comm = crate::requests::comm_of_idup(newcomm);
            comms::define_idup(comm, parent_gid, nth, call.rec(), call.t0);
        }
    }
    if set.is_empty() && call.leave_out() {
        return;
    }
    call.put_list(set, |w, batch, _| completion_items(w, batch));
}

fn completion_items(r: &mut Writer, batch: &[Completed]) {
    for c in batch {
        put_completion(r, c.op, c.kind, c.cancelled, c.status, c.got.as_ref());
    }
}

/// A completed operation `op` (0: none) of `kind`; `cancel` if
/// `MPI_Cancel` was called on it; `status` null when MPI reported none.
#[inline(always)]
fn put_completion(
    r: &mut Writer,
    op: u64,
    kind: OpKind,
    cancel: bool,
    status: *const MPI_Status,
    got: Option<&Got>,
) {
    r.put_op_ref((op != 0).then_some(op));
    let cancelled = cancel && !status.is_null() && ffi::status_cancelled(status);
    let extra = if cancelled { ST_CANCELLED } else { 0 };
    match kind {
        OpKind::Recv { src, tag, posted } if !cancelled && !status.is_null() => {
            r.put_status_pb((src, tag, posted), actual(status), extra, got)
        }
        OpKind::RecvBlind { src, tag, posted } if !cancelled && !status.is_null() => {
            // The posted values; a wildcard's from the status, which
            // has them right where MPI fills them at all.
            let (s, t, _) = actual(status);
            let k = ffi::consts();
            let src_ = if src == k.any_source { s } else { src };
            let tag_ = if tag == k.any_tag { t } else { tag };
            r.put_status_pb((src, tag, Some(posted)), (src_, tag_, posted), extra, got)
        }
        _ => r.put_u(ST_NONE | extra),
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
        if call.leave_out() {
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
        if call.leave_out() {
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
        let cancelled = crate::orphans::take_freed_cancelled() && call.ok();
        if let Some(mut r) = call.begin() {
            r.put_op_ref(id);
            r.put_u(ST_NONE | if cancelled { ST_CANCELLED } else { 0 });
            r.commit();
        }
    })
}
