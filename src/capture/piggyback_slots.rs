//! The slot table: piggyback state that lives with a nonblocking or
//! persistent request, from its post (or `MPI_Start`) until it completes
//! (or, persistent, until it is freed). A slot is boxed and its address is
//! the request table's `pb` (0: none); released slots are kept, areas and
//! all, so that a nonblocking call allocates nothing.
//!
//! ```text
//!           new_slot           a post, or MPI_Start
//!  spare ───────────► inactive ─────────────────────► active
//!    ▲                   ▲  │                            │
//!    │                   │  │ MPI_Request_free           │ complete
//!    │                   │  ▼                            │
//!    └──── release ◄─────┼──┴────────────────────────────┤ nonpersistent
//!                        └───────────────────────────────┘ persistent
//! ```

use crate::ffi::{self, MPI_Datatype, MPI_Status};
use crate::large_headers;
use crate::piggyback_deliver::{completed_ok, deliver, saved_len, unpack, untouched, Landing, Rx};
use crate::piggyback_header::{header_len, write_header, Got};
use crate::piggyback_lamport::{forget_pending, join_pending, next_post, on};
use crate::piggyback_replace::{apart_send, replace_apart};
use crate::piggyback_ring::{self, is_ring};
use crate::piggyback_routes::{bottom, copy_bytes, free_type, struct_type, Route, COPY_MAX};
use crate::piggyback_send::{
    apart_header, isendrecv_blind, isendrecv_stage_max, send_apart, skip_header, To,
};
use crate::thread::Thread;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering::AcqRel};
use parking_lot::Mutex;

/// Piggyback state that lives with a request until it completes (or, for a
/// persistent request, until it is freed).
pub struct Slot {
    /// Receives: see `Landing`; sends: header and staged data.
    area: Vec<u8>,
    route: Route,
    send: bool,
    temp: Option<MPI_Datatype>,
    user: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    posted: u64,
    dense: bool,
    rx: Rx,
    tag: i32,
    post: u64,
    /// A send whose message goes apart (its header sent at each start).
    apart: Option<To>,
    /// A receive already unpacked (by `MPI_Request_get_status`).
    got: Option<Got>,
    data_len: u64,
    /// Between the post (or `MPI_Start`) and the completion.
    active: bool,
    /// The send half of an `MPI_Isendrecv`, released with this slot.
    partner: usize,
    /// Completed with a status MPI does not fill (see `unpack`).
    blind: bool,
    /// The data of an `MPI_Isendrecv_replace` whose message goes apart.
    copy: Vec<u8>,
}

// SAFETY: a slot is owned by one request; the raw pointers are the
// application's buffers, which MPI lets any thread complete.
unsafe impl Send for Slot {}

/// Released slots, kept with their areas for the next operations: a
/// nonblocking call then allocates nothing. Boxed: a slot's address is its
/// request's handle (`Posted::into_slot`).
#[allow(clippy::vec_box)]
static SPARE: Mutex<Vec<Box<Slot>>> = Mutex::new(Vec::new());
const SPARE_KEPT: usize = 256;
/// The slot released last (0: none), taken back with no lock: a thread
/// that posts and completes one operation at a time never touches `SPARE`.
/// A swap hands it over whole, so each slot has one owner at all times.
static LAST: AtomicUsize = AtomicUsize::new(0);
/// Areas larger than this are not kept.
const SPARE_AREA: usize = 1 << 16;

impl Slot {
    fn empty() -> Slot {
        Slot {
            area: Vec::new(),
            route: Route::Struct,
            send: false,
            temp: None,
            user: core::ptr::null_mut(),
            count: 0,
            // SAFETY: a handle is a plain value (pointer or int); this one
            // is overwritten before any use.
            datatype: unsafe { core::mem::zeroed() },
            posted: 0,
            dense: false,
            rx: Rx::matched(),
            tag: 0,
            post: 0,
            apart: None,
            got: None,
            data_len: 0,
            active: false,
            partner: 0,
            blind: false,
            copy: Vec::new(),
        }
    }
}

/// Puts a slot no operation owns any more into the spares.
#[inline(always)]
fn keep(mut s: Box<Slot>) {
    free_type(&mut s.temp);
    if s.got.is_some() {
        s.got = None;
    }
    s.partner = 0;
    if s.copy.capacity() != 0 {
        s.copy = Vec::new();
    }
    if s.area.capacity() > SPARE_AREA {
        s.area = Vec::new();
    }
    let older = LAST.swap(Box::into_raw(s) as usize, AcqRel);
    if older == 0 {
        return;
    }
    // SAFETY: `LAST` held a slot of `Box::into_raw`, now ours alone.
    let older = unsafe { Box::from_raw(older as *mut Slot) };
    let mut spare = SPARE.lock();
    if spare.len() < SPARE_KEPT {
        spare.push(older);
    }
}

/// A released slot to reuse, or a new one.
#[inline(always)]
fn reuse() -> Box<Slot> {
    match LAST.swap(0, AcqRel) {
        // SAFETY: as in `keep`.
        0 => SPARE
            .lock()
            .pop()
            .unwrap_or_else(|| Box::new(Slot::empty())),
        last => unsafe { Box::from_raw(last as *mut Slot) },
    }
}

impl Slot {
    fn landing(&mut self) -> Landing {
        Landing {
            route: self.route,
            area: self.area.as_mut_ptr(),
            user: self.user,
            count: self.count,
            datatype: self.datatype,
            posted: self.posted,
            dense: self.dense,
        }
    }
}

/// Substitute arguments for a nonblocking call, and the slot to keep.
pub struct Posted {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    pub slot: Option<Box<Slot>>,
    /// The send ring's area the message waits in (`piggyback_ring`; 0:
    /// none, when `slot` may be some).
    pub ring: usize,
}

impl Posted {
    fn passthrough(buf: *mut c_void, count: i64, datatype: MPI_Datatype) -> Posted {
        Posted {
            buf,
            count,
            datatype,
            slot: None,
            ring: 0,
        }
    }

    /// The arguments a call with `slot` passes instead of the user's, and
    /// the slot.
    fn with_slot(slot: Box<Slot>, buf: *mut c_void, count: i64, datatype: MPI_Datatype) -> Posted {
        let (buf, count, datatype) = slot_args(&slot, buf, count, datatype);
        Posted {
            buf,
            count,
            datatype,
            slot: Some(slot),
            ring: 0,
        }
    }

    /// The slot (or ring area) as an integer for the request table (0:
    /// none).
    #[inline(always)]
    pub fn into_slot(self) -> usize {
        if self.ring != 0 {
            return self.ring;
        }
        self.slot.map_or(0, |b| Box::into_raw(b) as usize)
    }

    /// An `MPI_Isendrecv_replace` whose message goes apart: the copy of
    /// the data it sends (the call is then an `MPI_Isendrecv`).
    #[inline(always)]
    #[cfg_attr(not(mpi4), allow(dead_code))]
    pub fn apart_send(&self) -> Option<(*const c_void, i64)> {
        apart_send(&self.slot.as_ref()?.copy)
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn new_slot(
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    route: Route,
    (posted, dense): (u64, bool),
    send: bool,
    rx: Rx,
    tag: i32,
) -> Option<Box<Slot>> {
    let h = header_len();
    let area = match route {
        Route::Staged => h + posted as usize,
        Route::Struct => h,
        Route::Untouched => saved_len(posted),
    };
    // A slot released earlier, area and all, or a new one.
    let mut slot = reuse();
    if route == Route::Untouched && !send {
        // The buffer's first bytes as they are (no zeroing first).
        slot.area.clear();
        // SAFETY: the user's buffer holds `posted` ≥ `area` bytes.
        slot.area
            .extend_from_slice(unsafe { core::slice::from_raw_parts(buf as *const u8, area) });
    } else {
        // A pooled slot keeps its old bytes (zeroing 4 KiB cost as much as
        // the message): a send writes every byte it sends, a receive reads
        // back only what came. A receive's front is cleared, so that no old
        // header is read as one that came (`deliver_blind`).
        slot.area.resize(area, 0);
        if !send && area >= 8 {
            // SAFETY: the area holds at least 8 bytes.
            unsafe { (slot.area.as_mut_ptr() as *mut u64).write_unaligned(0) };
        } else if !send {
            slot.area.fill(0);
        }
    }
    slot.route = route;
    slot.send = send;
    slot.user = buf;
    slot.count = count;
    slot.datatype = datatype;
    slot.posted = posted;
    slot.dense = dense;
    slot.rx = rx;
    slot.tag = tag;
    slot.post = 0;
    slot.apart = None;
    slot.data_len = 0;
    slot.active = false;
    slot.blind = false;
    if route == Route::Struct {
        match struct_type(slot.area.as_ptr(), buf, count, datatype) {
            Some(t) => slot.temp = Some(t),
            None => {
                keep(slot);
                return None;
            }
        }
    }
    Some(slot)
}

fn slot_args(
    slot: &Slot,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
) -> (*mut c_void, i64, MPI_Datatype) {
    match (slot.route, slot.temp) {
        (Route::Staged, _) => (
            slot.area.as_ptr() as *mut c_void,
            slot.area.len() as i64,
            ffi::consts().byte,
        ),
        (Route::Struct, Some(t)) => (bottom() as *mut c_void, 1, t),
        _ => (buf, count, datatype),
    }
}

/// Refills a send slot's header (and staged data) for the message about to
/// go, or sends the header of a message that goes apart.
#[inline(always)]
fn load_send(slot: &mut Slot, thread: &mut Thread, t0: u64) {
    if let Some(to) = slot.apart {
        if !apart_header(thread, t0, to, slot.posted) {
            // The destination can no longer be told (never expected): the
            // id is taken as for any send.
            skip_header(thread, t0);
        }
        return;
    }
    write_header(slot.area.as_mut_ptr(), thread, t0);
    if slot.route == Route::Staged {
        let h = header_len();
        let n = slot.area.len() - h;
        // SAFETY: the user's buffer holds `n` dense bytes.
        unsafe { copy_bytes(slot.user as *const u8, slot.area.as_mut_ptr().add(h), n) };
    }
}

/// A message's bytes and whether they are dense: the memo's when it is
/// this call's (`hooks::memo_hit`), else the datatype cache's.
#[inline(always)]
fn layout(
    thread: &mut Thread,
    count: i64,
    datatype: MPI_Datatype,
    memo: bool,
) -> Option<(u64, bool)> {
    if memo {
        let m = &thread.state.send_memo;
        return Some((m.bytes, m.dense));
    }
    thread.state.types.layout(count, datatype)
}

/// Isend (and modes) and Send_init (and modes). `memo`: the thread's
/// point-to-point memo is this call's (`hooks::memo_hit`), and gives the
/// message's layout.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn post_send(
    thread: &mut Thread,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
    persistent: bool,
    memo: bool,
) -> Posted {
    post_send_up_to(
        thread, t0, buf, count, datatype, to, persistent, COPY_MAX, true, memo,
    )
}

/// The send half of `MPI_Isendrecv`.
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_isendrecv_send(
    thread: &mut Thread,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
) -> Posted {
    post_send_up_to(
        thread,
        t0,
        buf,
        count,
        datatype,
        to,
        false,
        isendrecv_stage_max(),
        false,
        false,
    )
}

/// The receive half of `MPI_Isendrecv`.
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_isendrecv_recv(
    thread: &mut Thread,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
) -> Posted {
    if !isendrecv_blind() {
        return post_recv_up_to(
            thread, buf, count, datatype, rx, tag, false, COPY_MAX, true, false,
        );
    }
    // No status to size a staged message by: the data goes in place.
    let mut p = post_recv_up_to(
        thread, buf, count, datatype, rx, tag, false, 0, false, false,
    );
    if let Some(slot) = p.slot.as_mut() {
        slot.blind = true;
    }
    p
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn post_send_up_to(
    thread: &mut Thread,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
    persistent: bool,
    stage_max: u64,
    may_ring: bool,
    memo: bool,
) -> Posted {
    let buf = buf as *mut c_void;
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some((bytes, dense)) = layout(thread, count, datatype, memo) else {
        if !persistent {
            skip_header(thread, t0);
        }
        return Posted::passthrough(buf, count, datatype);
    };
    if large_headers::beyond(bytes) {
        if !persistent {
            if send_apart(thread, t0, to, bytes) {
                return Posted::passthrough(buf, count, datatype);
            }
        } else if large_headers::destination(to.comm, to.dest, to.tag, bytes).is_some() {
            let mut slot = new_slot(
                buf,
                count,
                datatype,
                Route::Untouched,
                (bytes, dense),
                true,
                Rx::matched(),
                0,
            );
            if let Some(s) = slot.as_mut() {
                s.apart = Some(to);
            }
            return Posted {
                buf,
                count,
                datatype,
                slot,
                ring: 0,
            };
        }
    }
    let route = if dense && bytes <= stage_max {
        Route::Staged
    } else {
        Route::Struct
    };
    if may_ring && route == Route::Staged && !persistent {
        if let Some(p) = post_ring(thread, t0, buf, bytes) {
            return p;
        }
    }
    let rx = Rx::matched();
    let Some(mut slot) = new_slot(buf, count, datatype, route, (bytes, dense), true, rx, 0) else {
        return Posted::passthrough(buf, count, datatype);
    };
    if !persistent {
        load_send(&mut slot, thread, t0);
        slot.active = true;
    }
    Posted::with_slot(slot, buf, count, datatype)
}

/// A small staged send in the thread's send ring: the header and the data
/// copied to a free area, which the call sends as bytes. `None` when it
/// does not fit or every area is in flight.
#[inline(always)]
fn post_ring(thread: &mut Thread, t0: u64, buf: *mut c_void, bytes: u64) -> Option<Posted> {
    let h = header_len();
    let len = h + bytes as usize;
    if len > piggyback_ring::ENTRY {
        return None;
    }
    let (pb, area) = thread.state.ring.take()?;
    write_header(area, thread, t0);
    // SAFETY: the user's buffer holds `bytes` dense bytes; the area holds
    // `ENTRY` ≥ h + bytes.
    unsafe { copy_bytes(buf as *const u8, area.add(h), bytes as usize) };
    Some(Posted {
        buf: area as *mut c_void,
        count: len as i64,
        datatype: ffi::consts().byte,
        slot: None,
        ring: pb,
    })
}

/// Irecv, Recv_init, Imrecv. `memo` as for `post_send`.
#[allow(clippy::too_many_arguments)]
pub fn post_recv(
    thread: &mut Thread,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
    persistent: bool,
    memo: bool,
) -> Posted {
    post_recv_up_to(
        thread, buf, count, datatype, rx, tag, persistent, COPY_MAX, true, memo,
    )
}

#[allow(clippy::too_many_arguments)]
fn post_recv_up_to(
    thread: &mut Thread,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
    persistent: bool,
    stage_max: u64,
    may_leave: bool,
    memo: bool,
) -> Posted {
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some((bytes, dense)) = layout(thread, count, datatype, memo) else {
        return Posted::passthrough(buf, count, datatype);
    };
    let route = if dense && bytes <= stage_max {
        Route::Staged
    } else if may_leave && dense && untouched(bytes, &rx) {
        Route::Untouched
    } else {
        Route::Struct
    };
    let Some(mut slot) = new_slot(buf, count, datatype, route, (bytes, dense), false, rx, tag)
    else {
        return Posted::passthrough(buf, count, datatype);
    };
    if !persistent {
        slot.post = next_post();
        slot.active = true;
    }
    Posted::with_slot(slot, buf, count, datatype)
}

/// `MPI_Isendrecv_replace`: a receive slot whose area goes out first, with
/// the header (and the staged data) of the send half; or, for a message
/// that goes apart, a receive slot that keeps a copy of the data, which
/// an `MPI_Isendrecv` sends (`Posted::apart_send`).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_replace(
    thread: &mut Thread,
    t0: u64,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
    to: To,
) -> Posted {
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    if let Some(copy) = replace_apart(thread, t0, buf, count, datatype, to) {
        let mut p = post_isendrecv_recv(thread, buf, count, datatype, rx, tag);
        match p.slot.as_mut() {
            Some(slot) => slot.copy = copy,
            None => {
                // No slot to keep the copy (piggybacking off, or the
                // receive half refused): the call stays a replace, inline.
                skip_header(thread, t0);
            }
        }
        return p;
    }
    let stage_max = if isendrecv_blind() {
        u64::MAX
    } else {
        COPY_MAX
    };
    let mut p = post_recv_up_to(
        thread, buf, count, datatype, rx, tag, false, stage_max, false, false,
    );
    match p.slot.as_mut() {
        Some(slot) => {
            load_send(slot, thread, t0);
            slot.blind = isendrecv_blind();
        }
        None => skip_header(thread, t0),
    }
    p
}

/// One request for two slots: the receive half's slot carries the send
/// half's, which is released with it (either may be 0).
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn paired(recv: usize, send: usize) -> usize {
    if recv == 0 {
        release(send);
        return 0;
    }
    // SAFETY: a live slot of this module.
    unsafe { (*(recv as *mut Slot)).partner = send };
    recv
}

/// After a nonblocking receive was posted (`ok`) or started: a wildcard one
/// joins the pending set.
pub fn posted_recv(slot: usize, ok: bool) {
    if slot == 0 || is_ring(slot) {
        return;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &mut *(slot as *mut Slot) };
    if s.send || !ok || !s.rx.wildcard {
        return;
    }
    join_pending(slot, s.rx.comm, s.tag, s.post);
}

/// Before `MPI_Start`: a persistent send loads its next message, a
/// persistent receive takes a new post number.
pub fn before_start(slot: usize, thread: &mut Thread, t0: u64) {
    if slot == 0 || is_ring(slot) {
        return;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &mut *(slot as *mut Slot) };
    s.active = true;
    if s.send {
        load_send(s, thread, t0);
    } else {
        s.post = next_post();
        s.got = None;
        if s.route == Route::Untouched {
            // SAFETY: the user's buffer holds at least the area's bytes.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    s.user as *const u8,
                    s.area.as_mut_ptr(),
                    s.area.len(),
                )
            };
        }
    }
}

/// A request completed: a receive is unpacked (unless `MPI_Request_get_status`
/// did it already) and its status fixed. A nonpersistent request's slot is
/// freed; a persistent one stays for the next `MPI_Start`.
#[inline(always)]
pub fn complete(
    slot: usize,
    status: *mut MPI_Status,
    cancelled: bool,
    persistent: bool,
) -> Option<Got> {
    if slot == 0 {
        return None;
    }
    if is_ring(slot) {
        piggyback_ring::release(slot);
        return None;
    }
    // SAFETY: a live slot of this module, owned by the completed request.
    let s = unsafe { &mut *(slot as *mut Slot) };
    let mut got = None;
    if !s.active {
        // An inactive persistent request: nothing was in flight.
    } else if !s.send {
        if cancelled || status.is_null() || !completed_ok(0, status) {
            forget_pending(slot);
        } else if let Some(g) = s.got.take() {
            ffi::set_status_bytes(status, s.data_len);
            got = Some(g);
        } else {
            let land = s.landing();
            got = unpack(&land, status, s.rx, Some((slot, s.post, s.tag)), s.blind);
        }
    }
    s.active = false;
    if !persistent {
        release(slot);
    }
    got
}

/// `MPI_Request_get_status` found the request complete: unpack now (the
/// user may read the buffer), keep what came for the completing call.
pub fn peek(slot: usize, status: *mut MPI_Status) {
    if slot == 0 || is_ring(slot) {
        return;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &mut *(slot as *mut Slot) };
    if s.send || !s.active || status.is_null() || !completed_ok(0, status) {
        return;
    }
    if s.got.is_some() {
        ffi::set_status_bytes(status, s.data_len);
    } else {
        let land = s.landing();
        s.got = unpack(&land, status, s.rx, Some((slot, s.post, s.tag)), s.blind);
        s.data_len = ffi::status_bytes(status);
    }
}

/// Whether the operation of `slot` (0: none) is in flight.
pub fn in_flight(slot: usize) -> bool {
    // (A ring area is taken at the send's post and freed at its completion.)
    // SAFETY: a live slot of this module.
    slot != 0 && (is_ring(slot) || unsafe { (*(slot as *const Slot)).active })
}

/// Whether completing the operation of `slot` writes to the user's buffer
/// (a receive not yet unpacked: staged data to copy, an inline header to
/// take off an untouched buffer, data that came apart to move).
pub fn delivers(slot: usize) -> bool {
    if is_ring(slot) {
        return false;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &*(slot as *const Slot) };
    !s.send && s.got.is_none()
}

/// Completes the operation of a freed request (see `orphans`): the user's
/// buffer gets its data, with no clock rule (the trace has no event for
/// it); the slot is released.
pub fn finish_orphan(slot: usize, status: *mut MPI_Status) {
    if is_ring(slot) {
        piggyback_ring::release(slot);
        return;
    }
    // SAFETY: a live slot of this module, owned by the orphan.
    let s = unsafe { &mut *(slot as *mut Slot) };
    // SAFETY: Testsome filled the status (zeroed before, so MPI_ERROR is 0
    // unless MPI reported an error for this request).
    let ok = unsafe { (*status).MPI_ERROR == 0 } && completed_ok(0, status);
    if s.active && !s.send && s.got.is_none() && ok {
        let land = s.landing();
        let _ = deliver(&land, status, s.rx, s.blind, s.tag);
    }
    s.active = false;
    release(slot);
}

#[inline(always)]
pub fn release(slot: usize) {
    if is_ring(slot) {
        piggyback_ring::release(slot);
        return;
    }
    if slot != 0 {
        release_slot(slot);
    }
}

/// `release` of a slot (not 0, not a ring area).
#[inline(never)]
fn release_slot(slot: usize) {
    forget_pending(slot);
    // SAFETY: the slot was made by `Posted::into_slot` and is released once.
    let s = unsafe { Box::from_raw(slot as *mut Slot) };
    // Tested here: most slots have no partner, and the call would cost
    // more than the test.
    if s.partner != 0 {
        release(s.partner);
    }
    keep(s);
}
