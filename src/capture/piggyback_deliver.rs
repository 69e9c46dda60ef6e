//! The receive side of the piggyback: what a blocking receive passes to
//! MPI instead of the user's arguments, and the delivery of what came
//! (data to the user, header to the clocks), for every route and for a
//! header that came apart.
//!
//! **Receives.** The header is taken off, the data copied to the user's
//! buffer (staging route), and the status made to report the user's byte
//! count, so `MPI_Get_count` and `MPI_Get_elements` see what they would
//! without pmtrace. Probes get the same status fix. Nonblocking receives
//! keep their staging slot with the request until it completes
//! (`piggyback_slots`).

use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Message, MPI_Status};
use crate::large_headers;
use crate::piggyback_header::{header_len, read_header, Got};
use crate::piggyback_lamport::{on, receive_clock};
use crate::piggyback_routes::{
    bottom, copy_bytes, free_type, struct_type, Elements, Route, COPY_MAX,
};
use crate::thread::Thread;
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;

/// What a receive expects: for the clock rules, and for taking a header
/// that came apart.
#[derive(Clone, Copy)]
pub struct Rx {
    pub wildcard: bool,
    pub comm: u64,
    /// The communicator (None: a matched-probe receive whose probe pmtrace
    /// did not see, or a send's slot).
    pub handle: Option<MPI_Comm>,
    /// The posted source.
    pub source: c_int,
}

impl Rx {
    #[inline(always)]
    pub fn new(source: c_int, comm: MPI_Comm) -> Rx {
        Rx {
            wildcard: source == ffi::consts().any_source,
            comm: ffi::handle_key(comm),
            handle: Some(comm),
            source,
        }
    }

    /// No receive at all (a send's slot).
    #[inline(always)]
    pub fn matched() -> Rx {
        Rx {
            wildcard: false,
            comm: 0,
            handle: None,
            source: -1,
        }
    }

    /// A matched-probe receive: its message was matched at the probe,
    /// which noted the communicator (`fix_probe_status`).
    pub fn of_message(message: MPI_Message) -> Rx {
        let key = ffi::handle_key(message);
        let mut m = MATCHED.lock();
        let handle = m
            .iter()
            .position(|e| e.0 == key)
            .map(|i| m.swap_remove(i).1 .0);
        Rx {
            wildcard: false,
            comm: 0,
            handle,
            source: -1,
        }
    }
}

struct CommHandle(MPI_Comm);
// SAFETY: a communicator handle is a plain identifier, valid from any thread.
unsafe impl Send for CommHandle {}
/// The communicators of messages matched by `MPI_(I)mprobe` and not yet
/// received, by message handle.
static MATCHED: Mutex<Vec<(u64, CommHandle)>> = Mutex::new(Vec::new());

/// Where a received message lands: what taking its header off needs.
#[derive(Clone, Copy)]
pub struct Landing {
    pub route: Route,
    pub area: *mut u8,
    pub user: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    /// The user's buffer in bytes.
    pub posted: u64,
    pub dense: bool,
}

/// Whether a dense receive of `bytes` can take any message untouched:
/// every inline message fits (inline data is at most the limit), and every
/// process that may send is of this world.
#[inline]
pub fn untouched(bytes: u64, rx: &Rx) -> bool {
    let limit = large_headers::limit();
    limit > 0
        && bytes >= limit + header_len() as u64
        && rx.handle.is_some_and(large_headers::all_local)
}

/// The arguments a receive passes to MPI instead of the user's.
pub struct In {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    temp: Option<MPI_Datatype>,
    /// Null: no header expected (piggybacking off, or MPI rejects the call).
    pub land: Landing,
}

impl In {
    #[inline(always)]
    pub fn new(
        thread: &mut Thread,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
        rx: Rx,
    ) -> In {
        In::new_with(thread, buf, count, datatype, rx, true)
    }

    #[inline(always)]
    pub fn new_with(
        thread: &mut Thread,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
        rx: Rx,
        may_leave: bool,
    ) -> In {
        let mut inp = In {
            buf,
            count,
            datatype,
            temp: None,
            land: Landing {
                route: Route::Struct,
                area: core::ptr::null_mut(),
                user: buf,
                count,
                datatype,
                posted: 0,
                dense: false,
            },
        };
        if !on() {
            return inp;
        }
        let Some((bytes, dense)) = thread.state.types.layout(count, datatype) else {
            return inp;
        };
        inp.land.posted = bytes;
        inp.land.dense = dense;
        let h = header_len();
        if dense && bytes <= COPY_MAX {
            inp.land.route = Route::Staged;
            inp.land.area = thread.state.stage_in(h + bytes as usize);
            inp.buf = inp.land.area as *mut c_void;
            inp.count = (h + bytes as usize) as i64;
            inp.datatype = ffi::consts().byte;
        } else if may_leave && dense && untouched(bytes, &rx) {
            inp.land.route = Route::Untouched;
            let keep = saved_len(bytes);
            inp.land.area = thread.state.stage_in(keep);
            // SAFETY: the user's buffer holds `bytes` ≥ `keep` bytes.
            unsafe { core::ptr::copy_nonoverlapping(buf as *const u8, inp.land.area, keep) };
        } else {
            let area = thread.state.stage_in(h);
            if let Some(t) = struct_type(area, buf, count, datatype) {
                inp.land.area = area;
                inp.buf = bottom() as *mut c_void;
                inp.count = 1;
                inp.datatype = t;
                inp.temp = Some(t);
            }
        }
        inp
    }

    /// After the real call: unpacks, fixes the status, runs the clock rules.
    #[inline(always)]
    pub fn finish(mut self, rc: c_int, status: *mut MPI_Status, rx: Rx) -> Option<Got> {
        free_type(&mut self.temp);
        if self.land.area.is_null() || !completed_ok(rc, status) {
            return None;
        }
        unpack(&self.land, status, rx, None, false)
    }
}

/// The first bytes of an untouched receive's buffer kept before it: all an
/// inline message (at most the limit, plus its header) may overwrite.
#[inline(always)]
pub fn saved_len(bytes: u64) -> usize {
    bytes.min(large_headers::limit() + header_len() as u64) as usize
}

/// Whether a receive delivered a message whose header can be read: the call
/// succeeded, and the status is neither MPI_PROC_NULL's nor a cancellation.
#[inline(always)]
pub fn completed_ok(rc: c_int, status: *const MPI_Status) -> bool {
    completed_count(rc, status as *mut MPI_Status).is_some()
}

/// `completed_ok`, with the status's count to read and set.
#[inline(always)]
pub fn completed_count(rc: c_int, status: *mut MPI_Status) -> Option<ffi::StatusCount> {
    if rc != 0 {
        return None;
    }
    // SAFETY: MPI filled the status for this call.
    if unsafe { (*status).MPI_SOURCE } == ffi::consts().proc_null {
        return None;
    }
    let count = ffi::StatusCount::of(status);
    (!count.cancelled()).then_some(count)
}

/// Takes the header off a received message and runs the clock rules.
/// `own` is a nonblocking receive's slot, post number and posted tag.
#[inline(always)]
pub fn unpack(
    land: &Landing,
    status: *mut MPI_Status,
    rx: Rx,
    own: Option<(usize, u64, i32)>,
    blind: bool,
) -> Option<Got> {
    let posted_tag = own.map_or(i32::MIN, |o| o.2);
    let got = deliver(land, status, rx, blind, posted_tag)?;
    let tag = if blind {
        posted_tag
    } else {
        // SAFETY: MPI filled the status.
        unsafe { (*status).MPI_TAG }
    };
    receive_clock(rx.wildcard, rx.comm, tag, own, &got);
    Some(got)
}

/// Takes the header off a received message: the user's buffer gets the
/// data alone, the status the user's byte count. None when the message
/// had no header (an untraced sender) or its header could not be had.
#[inline(always)]
pub fn deliver(
    land: &Landing,
    status: *mut MPI_Status,
    rx: Rx,
    blind: bool,
    posted_tag: c_int,
) -> Option<Got> {
    let h = header_len() as u64;
    if blind {
        return deliver_blind(land, rx, posted_tag);
    }
    let bytes = ffi::status_bytes(status);
    if bytes < h {
        // No header: the sender is not traced. Deliver what came (the
        // report counts the receive as one without an id).
        if land.route == Route::Staged {
            let n = bytes.min(land.posted) as usize;
            // SAFETY: the staging area holds `bytes` received bytes; the
            // user's buffer was posted with `posted` dense bytes.
            unsafe { copy_bytes(land.area, land.user as *mut u8, n) };
        }
        return None;
    }
    if large_headers::beyond(bytes) {
        if let Some(from) = came_apart(land, bytes, status, rx) {
            return deliver_apart(land, bytes, status, from);
        }
    }
    let data = bytes - h;
    let got = match land.route {
        Route::Staged => {
            let n = data.min(land.posted) as usize;
            // SAFETY: as above, the data follows the header.
            unsafe { copy_bytes(land.area.add(h as usize), land.user as *mut u8, n) };
            read_header(land.area)
        }
        Route::Struct => read_header(land.area),
        Route::Untouched => {
            let u = land.user as *mut u8;
            let got = read_header(u);
            // SAFETY: the buffer holds the header and `data` bytes (an
            // inline message is at most the limit, and the buffer larger);
            // the saved area holds its first `saved_len` bytes as they were,
            // which covers `data + h`.
            unsafe {
                core::ptr::copy(u.add(h as usize), u, data as usize);
                core::ptr::copy_nonoverlapping(
                    land.area.add(data as usize),
                    u.add(data as usize),
                    h as usize,
                );
            }
            got
        }
    };
    ffi::set_status_bytes(status, data);
    Some(got)
}

/// Whether a message of `bytes` came apart, and from which world rank and
/// communicator id: past the limit plus a header surely, within a header
/// of the limit when its front is not the job's magic. Peers outside this
/// world send everything inline.
#[inline(never)]
fn came_apart(
    land: &Landing,
    bytes: u64,
    status: *const MPI_Status,
    rx: Rx,
) -> Option<(c_int, u64)> {
    let comm = rx.handle?;
    // SAFETY: MPI filled the status.
    let source = unsafe { (*status).MPI_SOURCE };
    let from = large_headers::world_rank(comm, source)?;
    if bytes > large_headers::limit() + header_len() as u64 {
        return Some(from);
    }
    let front = match land.route {
        Route::Untouched => land.user as *const u8,
        _ => land.area as *const u8,
    };
    // SAFETY: at least 8 bytes arrived at the front.
    let first = unsafe { core::ptr::read_unaligned(front as *const u64) };
    (first != large_headers::magic()).then_some(from)
}

/// A message that came apart: its data is the user's where MPI put it
/// (after the header area, for a struct route: moved into place), its
/// header is the sender's on the side channel.
#[inline(never)]
fn deliver_apart(
    land: &Landing,
    bytes: u64,
    status: *const MPI_Status,
    (from, gid): (c_int, u64),
) -> Option<Got> {
    // SAFETY: MPI filled the status.
    let tag = unsafe { (*status).MPI_TAG };
    let taken = large_headers::take(
        &large_headers::Want {
            from,
            gid,
            tag: Some(tag),
            bytes: Some(bytes),
        },
        read_header,
    );
    land_apart(land, bytes);
    taken.map(|t| t.1)
}

/// Puts data that came apart (no header in front) where the user expects
/// it, for a receive that expected a header in front.
fn land_apart(land: &Landing, bytes: u64) {
    let h = header_len();
    match land.route {
        Route::Untouched => {}
        Route::Staged => {
            let n = bytes.min(land.posted) as usize;
            // SAFETY: the staging area holds the message.
            unsafe { copy_bytes(land.area, land.user as *mut u8, n) };
        }
        Route::Struct if land.dense => {
            // The header area holds the data's first h bytes, the user's
            // buffer the rest from its start: move it up by h.
            let total = bytes.min(land.posted) as usize;
            let u = land.user as *mut u8;
            // SAFETY: within the user's buffer of `posted` bytes.
            unsafe {
                if total > h {
                    core::ptr::copy(u, u.add(h), total - h);
                }
                core::ptr::copy_nonoverlapping(land.area, u, total.min(h));
            }
        }
        Route::Struct => shift_packed(land, bytes),
    }
}

/// `land_apart` for a non-contiguous type: the same move, in the packed
/// form of the user's elements (those the message reached), in pieces
/// that MPI's `int` arguments can take.
#[cold]
fn shift_packed(land: &Landing, bytes: u64) {
    let h = header_len();
    let n = bytes.min(land.posted) as usize;
    let Some(all) = Elements::of(land.user, land.count, land.datatype) else {
        return;
    };
    if n < h {
        return;
    }
    let elements = all.first(n.div_ceil(all.bytes(1)) as i64);
    let mut packed = vec![0u8; elements.packed_len()];
    if !elements.pack(&mut packed) {
        return;
    }
    packed.copy_within(0..n - h, h);
    // SAFETY: the header area holds h received bytes.
    packed[..h].copy_from_slice(unsafe { core::slice::from_raw_parts(land.area, h) });
    elements.unpack(&packed);
}

/// A receive whose status MPI does not fill (see `ISENDRECV_BLIND`): the
/// header is in front unless the job's magic is not, in which case the
/// message came apart and is looked for by the posted source and tag.
fn deliver_blind(land: &Landing, rx: Rx, posted_tag: c_int) -> Option<Got> {
    let h = header_len();
    // SAFETY: the area holds at least a header's bytes.
    let first = unsafe { core::ptr::read_unaligned(land.area as *const u64) };
    if large_headers::limit() > 0 && first != large_headers::magic() {
        let any_tag = ffi::consts().any_tag;
        let from = rx
            .handle
            .and_then(|c| large_headers::world_rank(c, rx.source))?;
        let (bytes, got) = large_headers::take(
            &large_headers::Want {
                from: from.0,
                gid: from.1,
                tag: (posted_tag != any_tag).then_some(posted_tag),
                bytes: None,
            },
            read_header,
        )?;
        land_apart(land, bytes);
        return Some(got);
    }
    // Staged data is the whole area back: `MPI_Isendrecv_replace`'s, whose
    // area went out with the user's data, so what no reply overwrote is the
    // user's data again.
    if land.route == Route::Staged {
        // SAFETY: the area holds the header and `posted` bytes.
        unsafe { copy_bytes(land.area.add(h), land.user as *mut u8, land.posted as usize) };
    }
    Some(read_header(land.area))
}

/// Fixes the status of a probe that found a message on `comm`: the header
/// is not the user's. In the band where an inline message and one that
/// came apart have the same size, the message came apart if its header
/// has come (it was sent first). A matched probe (`message`, not null)
/// notes the communicator for the receive of the message.
#[inline(always)]
pub fn fix_probe_status(status: *mut MPI_Status, comm: MPI_Comm, message: *const MPI_Message) {
    if !on() {
        return;
    }
    let h = header_len() as u64;
    let bytes = ffi::status_bytes(status);
    if !message.is_null() {
        note_matched(message, comm);
    }
    if bytes < h {
        return;
    }
    if large_headers::beyond(bytes) && probed_apart(status, comm, bytes) {
        return;
    }
    ffi::set_status_bytes(status, bytes - h);
}

#[inline(never)]
fn note_matched(message: *const MPI_Message, comm: MPI_Comm) {
    // SAFETY: MPI just stored the matched message handle there.
    let key = ffi::handle_key(unsafe { *message });
    let mut m = MATCHED.lock();
    m.retain(|e| e.0 != key);
    m.push((key, CommHandle(comm)));
}

#[inline(never)]
fn probed_apart(status: *const MPI_Status, comm: MPI_Comm, bytes: u64) -> bool {
    // SAFETY: MPI filled the status.
    let (source, tag) = unsafe { ((*status).MPI_SOURCE, (*status).MPI_TAG) };
    let Some((from, gid)) = large_headers::world_rank(comm, source) else {
        return false;
    };
    bytes > large_headers::limit() + header_len() as u64
        || large_headers::has_come(&large_headers::Want {
            from,
            gid,
            tag: Some(tag),
            bytes: Some(bytes),
        })
}

impl Drop for In {
    fn drop(&mut self) {
        free_type(&mut self.temp);
    }
}
