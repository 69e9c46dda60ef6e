//! The blocking receive's fast path: `MPI_Recv` of a small dense message
//! under Lamport clocks, with the thread's last communicator and datatype.
//! It does what `In::new`, `In::finish` and `recv` do for such a receive,
//! with the values in locals: the message lands in the thread's staging
//! area, its header is read in place, and the record is written from the
//! fields at hand. Anything unusual after the call (an error, an untraced
//! sender, a header that came apart) goes back to those general functions,
//! as if they had run from the start.

use crate::comms;
use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Status};
use crate::guard::{Guard, Held};
use crate::hooks_call::Call;
use crate::hooks_p2p;
use crate::large_headers;
use crate::piggyback_deliver::{completed_count, completed_ok, unpack, Landing, Rx};
use crate::piggyback_header::header_len;
use crate::piggyback_lamport::{mode, receive_lamport, Mode};
use crate::piggyback_routes::{copy_bytes, Route, COPY_MAX};
use crate::recorder::fixed_head;
use core::ffi::{c_int, c_void};
use pmtrace_format::pending::PendingRecv;

/// The arguments a fast receive passes to MPI (its staging area, as
/// bytes), and what its second half needs.
pub struct FastRecv {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    posted: u64,
    index: u32,
    /// The thread's point-to-point memo is this receive's (posted as the
    /// last point-to-point call was): its layout, communicator index and
    /// record payload are the memo's.
    memo: bool,
}

/// Before the call: the fast path's arguments; `None` (nothing done that
/// matters) when the receive takes the general path.
#[inline(always)]
pub fn recv_fast(
    guard: &Guard,
    count: i64,
    datatype: MPI_Datatype,
    src: c_int,
    comm: MPI_Comm,
) -> Option<FastRecv> {
    if mode() != Mode::Lamport {
        return None;
    }
    let thread = guard.thread();
    let memo = hooks_p2p::memo_hit(thread, count, datatype, src, comm);
    let (bytes, dense, index) = if memo {
        let m = &thread.state.send_memo;
        (m.bytes, m.dense, m.index)
    } else {
        let (bytes, dense) = thread.state.types.cached_layout(count, datatype)?;
        (bytes, dense, comms::cached(comm, &thread.state)?.index)
    };
    if !dense || bytes > COPY_MAX {
        return None;
    }
    let len = header_len() + bytes as usize;
    let area = thread.state.stage_in(len);
    Some(FastRecv {
        buf: area as *mut c_void,
        count: len as i64,
        datatype: ffi::consts().byte,
        posted: bytes,
        index,
        memo,
    })
}

/// After the call: the data to the user's buffer, the status fixed, the
/// clock rule, the record.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn recv_fast_end(
    guard: &Guard,
    f: FastRecv,
    (func, rc, t0, t1): (u32, c_int, u64, u64),
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) {
    let h = header_len() as u64;
    if let Some(count) = completed_count(rc, status) {
        let bytes = count.bytes();
        if bytes >= h && !large_headers::beyond(bytes) {
            let data = bytes - h;
            let area = f.buf as *const u8;
            // SAFETY: the staging area holds the header and `data` bytes
            // received; the user's buffer was posted with `posted` dense
            // bytes. The header's fields are u64s at 8, 16 and 24.
            let (lc, id, sent) = unsafe {
                copy_bytes(
                    area.add(h as usize),
                    buf as *mut u8,
                    data.min(f.posted) as usize,
                );
                (
                    core::ptr::read_unaligned(area.add(8) as *const u64),
                    core::ptr::read_unaligned(area.add(16) as *const u64),
                    core::ptr::read_unaligned(area.add(24) as *const u64),
                )
            };
            count.set(data);
            // SAFETY: MPI filled the status.
            let (got_src, got_tag) = unsafe { ((*status).MPI_SOURCE, (*status).MPI_TAG) };
            let wildcard = src == ffi::consts().any_source;
            receive_lamport(wildcard, ffi::handle_key(comm), got_tag, None, lc);
            let thread = guard.thread();
            let actual = (got_src, got_tag, data);
            // Posted as the thread's last point-to-point call was (a send
            // back to the same peer, say): those fields are the memo's.
            let payload = f
                .memo
                .then(|| thread.state.send_memo.payload_for(tag))
                .flatten();
            if let Some(payload) = payload {
                let head = fixed_head(func);
                if let Some(mut w) =
                    thread
                        .recorder
                        .fixed_call_pb(head, (t0, t1), payload, guard.held().lane())
                {
                    let posted = (src, tag, Some(f.posted));
                    w.put_status_scalars(posted, actual, 0, (id, lc, sent));
                    w.commit();
                    return;
                }
            }
            thread.recorder.write_recv(&PendingRecv {
                func,
                t0,
                t1,
                src,
                tag,
                comm: f.index,
                posted: f.posted,
                actual,
                pb: Some((id, lc, sent)),
            });
            return;
        }
    }
    // Made here, in the unusual case only: nothing of it is stored on the
    // way above.
    let args = RecvArgs {
        func,
        rc,
        t0,
        t1,
        area: f.buf,
        posted: f.posted,
        buf,
        count,
        datatype,
        src,
        tag,
        comm,
        status,
    };
    recv_fast_general(guard.held(), args);
}

/// A fast receive's call, for the unusual cases: its function, outcome
/// and times, its staging area and posted bytes, and its own arguments.
#[derive(Clone, Copy)]
struct RecvArgs {
    func: u32,
    rc: c_int,
    t0: u64,
    t1: u64,
    area: *mut c_void,
    posted: u64,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    src: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
}

/// `recv_fast_end` for the unusual: `In::finish` and `recv` as the general
/// path runs them, the record through `recv`, the general hook.
#[cold]
#[inline(never)]
fn recv_fast_general(guard: Held, a: RecvArgs) {
    let got = if completed_ok(a.rc, a.status) {
        let land = Landing {
            route: Route::Staged,
            area: a.area as *mut u8,
            user: a.buf,
            count: a.count,
            datatype: a.datatype,
            posted: a.posted,
            dense: true,
        };
        unpack(&land, a.status, Rx::new(a.src, a.comm), None, false)
    } else {
        None
    };
    let call = Call::new(guard, a.func, a.t0, a.t1, a.rc);
    let RecvArgs {
        count,
        datatype,
        src,
        tag,
        comm,
        status,
        ..
    } = a;
    hooks_p2p::recv(call, count, datatype, src, tag, comm, status, got);
}
