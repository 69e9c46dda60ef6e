//! Piggybacking: a hidden header in front of every point-to-point message.
//!
//! **Layout.** Every message carries, before the user's data, a header of
//! 32 bytes (the job's magic value, the sender's Lamport clock, the message
//! id, the sender's timer value at the send), followed in vector mode by
//! the sender's vector clock (one u64 per world rank). Header first, so
//! that a receive posted larger than the message still works. Messages of
//! more than `apart::limit()` bytes go untouched, their header apart
//! (`crate::apart`).
//!
//! **Two routes, one wire format.** A dense message (contiguous type, no
//! gaps) of at most [`COPY_MAX`] bytes is copied with its header into a
//! staging buffer and sent as bytes; anything else goes as a struct datatype
//! {header, user buffer} at `MPI_BOTTOM`, built per call (about 124 ns, and
//! Open MPI's noncontiguous path) but with no copy. The bytes on the wire
//! are the same either way, so each side chooses its route alone (measured
//! crossover: about 4 KiB, see docs/notes.md).
//!
//! **Receives.** The header is taken off, the data copied to the user's
//! buffer (staging route), and the status made to report the user's byte
//! count, so `MPI_Get_count` and `MPI_Get_elements` see what they would
//! without pmtrace. Probes get the same status fix. Nonblocking receives
//! keep their staging [`Slot`] with the request until it completes.
//!
//! **Clocks (LLCP, `003_…` §5.1).** Sends attach the clock and do not tick.
//! A nonblocking wildcard receive is *pending* from its post until it
//! completes, or until a receive that must match after it (same
//! communicator, a tag it accepts, posted later: MPI's non-overtaking rule)
//! completes first. Completing a receive ticks once for each pending receive
//! it completes, once more for itself when it is a wildcard receive still
//! pending (or blocking), then merges: `LC = max(LC, m.LC + 1)` (the `+ 1`
//! makes every receive strictly later than its send). Vector mode keeps a
//! Mattern vector clock besides: own entry ticks at every send and every
//! receive, receives merge entrywise. Collectives are not merged here: the
//! CLI reconstructs them exactly from the trace (docs/notes.md has the
//! argument and the costs).

use crate::apart;
use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Message, MPI_Status};
use crate::recorder::Recorder;
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

pub use crate::config::Mode;

/// Header bytes before the vector clock.
pub const BASE: usize = 32;
pub use crate::apart::COPY_MAX;

static MODE: AtomicU8 = AtomicU8::new(0);
static HDR: AtomicUsize = AtomicUsize::new(BASE);
static ME: AtomicUsize = AtomicUsize::new(0);
static LC: AtomicU64 = AtomicU64::new(0);
/// At most one thread calls MPI at a time (below MPI_THREAD_MULTIPLE): the
/// clock merge needs no atomic read-modify-write.
static SERIAL: AtomicBool = AtomicBool::new(true);
static VC: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Nonblocking wildcard receives not yet matched (LLCP's Pending set).
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static PENDING_N: AtomicUsize = AtomicUsize::new(0);
/// Post order of nonblocking receives.
static POSTS: AtomicU64 = AtomicU64::new(1);

struct Pending {
    slot: usize,
    comm: u64,
    tag: i32,
    post: u64,
}

/// Switches piggybacking on; every rank does the same (agreed at init).
pub fn enable(mode: Mode, rank: usize, size: usize, serial: bool) {
    SERIAL.store(serial, Relaxed);
    if mode == Mode::Vector {
        *VC.lock() = vec![0; size];
        HDR.store(BASE + 8 * size, Relaxed);
    }
    ME.store(rank, Relaxed);
    MODE.store(mode as u8, Relaxed);
}

#[inline(always)]
pub fn mode() -> Mode {
    match MODE.load(Relaxed) {
        0 => Mode::None,
        1 => Mode::Lamport,
        _ => Mode::Vector,
    }
}

#[inline(always)]
fn on() -> bool {
    MODE.load(Relaxed) != 0
}

/// Most bytes a recorded piggyback takes (three varints, and the vector).
#[inline(always)]
pub fn record_room() -> usize {
    if on() {
        30 + 10 * ((header_len() - BASE) / 8)
    } else {
        0
    }
}

#[inline(always)]
pub fn header_len() -> usize {
    HDR.load(Relaxed)
}

pub use crate::recorder::Got;

/// Fills a header at `dst` for the next message of this thread.
#[inline(always)]
fn write_header(dst: *mut u8, rec: &mut Recorder, t0: u64) {
    let id = rec.next_msg_id();
    let lc = LC.load(Relaxed);
    // SAFETY: `dst` has room for a whole header (callers size it so).
    unsafe {
        core::ptr::write_unaligned(dst as *mut u64, apart::magic());
        core::ptr::write_unaligned(dst.add(8) as *mut u64, lc);
        core::ptr::write_unaligned(dst.add(16) as *mut u64, id);
        core::ptr::write_unaligned(dst.add(24) as *mut u64, t0);
    }
    if mode() == Mode::Vector {
        let mut vc = VC.lock();
        vc[ME.load(Relaxed)] += 1;
        // SAFETY: as above; the header holds the whole vector.
        unsafe {
            core::ptr::copy_nonoverlapping(vc.as_ptr() as *const u8, dst.add(BASE), vc.len() * 8)
        };
    }
}

#[inline(always)]
fn read_header(src: *const u8) -> Got {
    // SAFETY: `src` holds a received header of `header_len()` bytes.
    let mut g = unsafe {
        Got {
            lc: core::ptr::read_unaligned(src.add(8) as *const u64),
            id: core::ptr::read_unaligned(src.add(16) as *const u64),
            sent: core::ptr::read_unaligned(src.add(24) as *const u64),
            vc: Vec::new(),
        }
    };
    if mode() == Mode::Vector {
        g.vc = read_vector(src);
    }
    g
}

/// The vector clock of a received header (vector mode).
#[inline(never)]
fn read_vector(src: *const u8) -> Vec<u64> {
    let n = (header_len() - BASE) / 8;
    // SAFETY: the header holds `n` clock entries after its base.
    (0..n)
        .map(|k| unsafe { core::ptr::read_unaligned(src.add(BASE + 8 * k) as *const u64) })
        .collect()
}

/// Copies `n` bytes between buffers that do not overlap. The short messages
/// whose latency the piggyback adds to go without a call into libc.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
#[inline(always)]
unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    use core::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: per the contract; each pair of (possibly overlapping) loads
    // and stores stays within the first `n` bytes.
    unsafe {
        match n {
            16..=32 => {
                let (a, b) = (rd(src as *const u128), rd(src.add(n - 16) as *const u128));
                wr(dst as *mut u128, a);
                wr(dst.add(n - 16) as *mut u128, b);
            }
            8..=15 => {
                let (a, b) = (rd(src as *const u64), rd(src.add(n - 8) as *const u64));
                wr(dst as *mut u64, a);
                wr(dst.add(n - 8) as *mut u64, b);
            }
            4..=7 => {
                let (a, b) = (rd(src as *const u32), rd(src.add(n - 4) as *const u32));
                wr(dst as *mut u32, a);
                wr(dst.add(n - 4) as *mut u32, b);
            }
            0..=3 => {
                for i in 0..n {
                    *dst.add(i) = *src.add(i);
                }
            }
            _ => core::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// A struct datatype {`hdr` bytes, `count` x `datatype` at `buf`} for use
/// at MPI_BOTTOM; None if MPI refuses (bad user arguments: the call then
/// goes through unchanged and fails as it would have).
fn struct_type(
    hdr: *const u8,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
) -> Option<MPI_Datatype> {
    let c = ffi::consts();
    let mut displs: [ffi::MPI_Aint; 2] = [0, 0];
    let types = [c.byte, datatype];
    // SAFETY: address queries and a type constructor on valid arrays.
    unsafe {
        if ffi::PMPI_Get_address(hdr as *const c_void, &mut displs[0]) != 0 {
            return None;
        }
        displs[1] = (buf as usize).wrapping_sub(c.bottom) as ffi::MPI_Aint;
        let mut t = core::mem::zeroed::<MPI_Datatype>();
        let made = match c_int::try_from(count) {
            Ok(n) => {
                let lens = [header_len() as c_int, n];
                ffi::PMPI_Type_create_struct(
                    2,
                    lens.as_ptr(),
                    displs.as_ptr(),
                    types.as_ptr(),
                    &mut t,
                )
            }
            // A count beyond `int` came through a large-count function,
            // which only an MPI-4 library has.
            Err(_) => large_struct(count, &displs, &types, &mut t),
        };
        if made != 0 {
            return None;
        }
        if ffi::PMPI_Type_commit(&mut t) != 0 {
            ffi::PMPI_Type_free(&mut t);
            return None;
        }
        Some(t)
    }
}

/// `struct_type` for a count beyond `int`.
#[cfg(mpi4)]
unsafe fn large_struct(
    count: i64,
    displs: &[ffi::MPI_Aint; 2],
    types: &[MPI_Datatype; 2],
    t: &mut MPI_Datatype,
) -> c_int {
    let lens: [ffi::MPI_Count; 2] = [header_len() as ffi::MPI_Count, count as ffi::MPI_Count];
    let displs: [ffi::MPI_Count; 2] = [displs[0] as ffi::MPI_Count, displs[1] as ffi::MPI_Count];
    // SAFETY: a type constructor on valid arrays.
    unsafe { ffi::PMPI_Type_create_struct_c(2, lens.as_ptr(), displs.as_ptr(), types.as_ptr(), t) }
}

/// Without large-count functions no count exceeds `int`.
#[cfg(not(mpi4))]
unsafe fn large_struct(
    _: i64,
    _: &[ffi::MPI_Aint; 2],
    _: &[MPI_Datatype; 2],
    _: &mut MPI_Datatype,
) -> c_int {
    1
}

fn free_type(t: &mut Option<MPI_Datatype>) {
    if let Some(mut t) = t.take() {
        // SAFETY: a type this module created and nobody else holds.
        unsafe { ffi::PMPI_Type_free(&mut t) };
    }
}

fn bottom() -> *const c_void {
    ffi::consts().bottom as *const c_void
}

// ---- blocking sends ----

/// The arguments a send passes to MPI instead of the user's.
pub struct Out {
    pub buf: *const c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    temp: Option<MPI_Datatype>,
}

/// A send that goes to MPI untouched (MPI rejects its arguments) still takes its
/// message id and clock tick, as a failing send with a header does: the
/// analysis replays the ids over every send call (`send_ids`).
#[cold]
fn skip_header(rec: &mut Recorder, t0: u64) {
    let scratch = rec.stage_out(header_len());
    write_header(scratch, rec, t0);
}

/// MPICH's `MPI_Isendrecv(_replace)` leave the byte count of the
/// request's status unfilled (and MPICH 4.0 its source and tag too), so a
/// staged receive could not tell how much arrived: there, a receive half
/// takes its data in place and its header on trust (`unpack`), and
/// `MPI_Isendrecv_replace` stages its whole buffer and copies all of it
/// back (what no reply overwrote is the user's data again).
static ISENDRECV_BLIND: AtomicBool = AtomicBool::new(false);
/// MPICH 4.0's `MPI_Isendrecv(_replace)` also release the send half's
/// derived datatype once too often (untraced programs that pass one crash
/// the same way): there a send half of any size is staged, so that only
/// `MPI_BYTE` goes out.
static ISENDRECV_TYPES_BROKEN: AtomicBool = AtomicBool::new(false);

/// Sets the quirks above for the MPI that runs.
pub fn isendrecv_quirks(blind: bool, types_broken: bool) {
    ISENDRECV_BLIND.store(blind, Relaxed);
    ISENDRECV_TYPES_BROKEN.store(types_broken, Relaxed);
}

fn isendrecv_stage_max() -> u64 {
    if ISENDRECV_TYPES_BROKEN.load(Relaxed) {
        u64::MAX
    } else {
        COPY_MAX
    }
}

/// Whether `MPI_Isendrecv(_replace)` leave their statuses unfilled.
pub fn isendrecv_blind() -> bool {
    ISENDRECV_BLIND.load(Relaxed)
}

/// Where a send goes: for the choice between inline and apart.
#[derive(Clone, Copy)]
pub struct To {
    pub comm: MPI_Comm,
    pub dest: c_int,
    pub tag: c_int,
}

impl To {
    #[inline(always)]
    pub fn new(dest: c_int, tag: c_int, comm: MPI_Comm) -> To {
        To { comm, dest, tag }
    }
}

/// A message of `bytes` bytes to `to` goes apart: its header is sent now,
/// before the data. False when it goes inline.
#[inline(always)]
fn send_apart(rec: &mut Recorder, t0: u64, to: To, bytes: u64) -> bool {
    if !apart::beyond(bytes) {
        return false;
    }
    apart_header(rec, t0, to, bytes)
}

#[inline(never)]
fn apart_header(rec: &mut Recorder, t0: u64, to: To, bytes: u64) -> bool {
    let Some((world, gid)) = apart::destination(to.comm, to.dest, to.tag, bytes) else {
        return false;
    };
    apart::send(world, gid, to.tag, bytes, header_len(), |dst| {
        write_header(dst, rec, t0)
    });
    true
}

impl Out {
    /// Packs a message for a blocking send; the staging buffer is the
    /// thread's own, valid until its next call.
    #[inline(always)]
    pub fn new(
        rec: &mut Recorder,
        t0: u64,
        buf: *const c_void,
        count: i64,
        datatype: MPI_Datatype,
        to: To,
    ) -> Out {
        let mut out = Out {
            buf,
            count,
            datatype,
            temp: None,
        };
        if !on() {
            return out;
        }
        let Some((bytes, dense)) = rec.types.layout(count, datatype) else {
            skip_header(rec, t0);
            return out;
        };
        if send_apart(rec, t0, to, bytes) {
            return out;
        }
        let h = header_len();
        if dense && bytes <= COPY_MAX {
            let n = bytes;
            let stage = rec.stage_out(h + n as usize);
            write_header(stage, rec, t0);
            // SAFETY: the user's buffer holds `n` dense bytes; the
            // staging buffer has room for header and data.
            unsafe { copy_bytes(buf as *const u8, stage.add(h), n as usize) };
            out.buf = stage as *const c_void;
            out.count = (h + n as usize) as i64;
            out.datatype = ffi::consts().byte;
        } else {
            let hdr = rec.stage_out(h);
            write_header(hdr, rec, t0);
            if let Some(t) = struct_type(hdr, buf, count, datatype) {
                out.buf = bottom();
                out.count = 1;
                out.datatype = t;
                out.temp = Some(t);
            }
        }
        out
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        free_type(&mut self.temp);
    }
}

// ---- blocking receives ----

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

/// How a receive takes its message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Route {
    /// Into a staging area of header and data, copied to the user's
    /// buffer (dense and small).
    Staged,
    /// A struct type {header area, user's buffer}.
    Struct,
    /// The user's arguments untouched (dense and large); the area keeps
    /// the buffer's first bytes as they were, for an inline message.
    Untouched,
}

/// Where a received message lands: what taking its header off needs.
#[derive(Clone, Copy)]
struct Landing {
    route: Route,
    area: *mut u8,
    user: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    /// The user's buffer in bytes.
    posted: u64,
    dense: bool,
}

/// Whether a dense receive of `bytes` can take any message untouched:
/// every inline message fits (inline data is at most the limit), and every
/// process that may send is of this world.
#[inline]
fn untouched(bytes: u64, rx: &Rx) -> bool {
    let limit = apart::limit();
    limit > 0 && bytes >= limit + header_len() as u64 && rx.handle.is_some_and(apart::all_local)
}

/// The arguments a receive passes to MPI instead of the user's.
pub struct In {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    temp: Option<MPI_Datatype>,
    /// Null: no header expected (piggybacking off, or MPI rejects the call).
    land: Landing,
}

impl In {
    #[inline(always)]
    pub fn new(
        rec: &mut Recorder,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
        rx: Rx,
    ) -> In {
        In::new_with(rec, buf, count, datatype, rx, true)
    }

    #[inline(always)]
    fn new_with(
        rec: &mut Recorder,
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
        let Some((bytes, dense)) = rec.types.layout(count, datatype) else {
            return inp;
        };
        inp.land.posted = bytes;
        inp.land.dense = dense;
        let h = header_len();
        if dense && bytes <= COPY_MAX {
            inp.land.route = Route::Staged;
            inp.land.area = rec.stage_in(h + bytes as usize);
            inp.buf = inp.land.area as *mut c_void;
            inp.count = (h + bytes as usize) as i64;
            inp.datatype = ffi::consts().byte;
        } else if may_leave && dense && untouched(bytes, &rx) {
            inp.land.route = Route::Untouched;
            let keep = saved_len(bytes);
            inp.land.area = rec.stage_in(keep);
            // SAFETY: the user's buffer holds `bytes` ≥ `keep` bytes.
            unsafe { core::ptr::copy_nonoverlapping(buf as *const u8, inp.land.area, keep) };
        } else {
            let area = rec.stage_in(h);
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
fn saved_len(bytes: u64) -> usize {
    bytes.min(apart::limit() + header_len() as u64) as usize
}

/// Whether a receive delivered a message whose header can be read: the call
/// succeeded, and the status is neither MPI_PROC_NULL's nor a cancellation.
#[inline(always)]
fn completed_ok(rc: c_int, status: *const MPI_Status) -> bool {
    if rc != 0 {
        return false;
    }
    let c = ffi::consts();
    // SAFETY: MPI filled the status for this call.
    let s = unsafe { &*status };
    s.MPI_SOURCE != c.proc_null && !ffi::status_cancelled(status)
}

/// Takes the header off a received message and runs the clock rules.
/// `own` is a nonblocking receive's slot, post number and posted tag.
#[inline(always)]
fn unpack(
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
    receive_clock(rx, tag, own, &got);
    Some(got)
}

/// Takes the header off a received message: the user's buffer gets the
/// data alone, the status the user's byte count. None when the message
/// had no header (an untraced sender) or its header could not be had.
#[inline(always)]
fn deliver(
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
    if apart::beyond(bytes) {
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
    let from = apart::world_rank(comm, source)?;
    if bytes > apart::limit() + header_len() as u64 {
        return Some(from);
    }
    let front = match land.route {
        Route::Untouched => land.user as *const u8,
        _ => land.area as *const u8,
    };
    // SAFETY: at least 8 bytes arrived at the front.
    let first = unsafe { core::ptr::read_unaligned(front as *const u64) };
    (first != apart::magic()).then_some(from)
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
    let taken = apart::take(
        &apart::Want {
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
/// form of the user's elements.
#[cold]
fn shift_packed(land: &Landing, bytes: u64) {
    let h = header_len();
    let p = land.posted as usize;
    let (Ok(count), Ok(size)) = (c_int::try_from(land.count), c_int::try_from(p)) else {
        return;
    };
    let Some(packed) = copy_out(land.user, land.count, land.datatype, land.posted, false) else {
        return;
    };
    let n = (bytes as usize).min(p);
    if n < h {
        return;
    }
    let mut stream = Vec::with_capacity(p);
    // SAFETY: the header area holds h received bytes.
    stream.extend_from_slice(unsafe { core::slice::from_raw_parts(land.area, h) });
    stream.extend_from_slice(&packed[..n - h]);
    stream.extend_from_slice(&packed[n..]);
    let mut pos: c_int = 0;
    // SAFETY: unpacks as many bytes as were packed into the same elements.
    unsafe {
        ffi::PMPI_Unpack(
            stream.as_ptr() as *const c_void,
            size,
            &mut pos,
            land.user,
            count,
            land.datatype,
            ffi::world(),
        )
    };
}

/// A receive whose status MPI does not fill (see `ISENDRECV_BLIND`): the
/// header is in front unless the job's magic is not, in which case the
/// message came apart and is looked for by the posted source and tag.
fn deliver_blind(land: &Landing, rx: Rx, posted_tag: c_int) -> Option<Got> {
    let h = header_len();
    // SAFETY: the area holds at least a header's bytes.
    let first = unsafe { core::ptr::read_unaligned(land.area as *const u64) };
    if apart::limit() > 0 && first != apart::magic() {
        let any_tag = ffi::consts().any_tag;
        let from = rx.handle.and_then(|c| apart::world_rank(c, rx.source))?;
        let (bytes, got) = apart::take(
            &apart::Want {
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

/// LLCP rule R4 with the merge of the module docs; `own` is the slot, post
/// number and posted tag of a nonblocking receive (None for blocking ones).
#[inline(always)]
fn receive_clock(rx: Rx, tag: i32, own: Option<(usize, u64, i32)>, got: &Got) {
    let (ticks, was_pending) = if PENDING_N.load(Relaxed) > 0 {
        pending_ticks(rx, tag, own)
    } else {
        (0, false)
    };
    let own_tick = u64::from(rx.wildcard && (own.is_none() || was_pending));
    let add = ticks + own_tick;
    let floor = got.lc.saturating_add(1);
    if SERIAL.load(Relaxed) {
        LC.store((LC.load(Relaxed) + add).max(floor), Relaxed);
    } else {
        let _ = LC.fetch_update(Relaxed, Relaxed, |c| Some((c + add).max(floor)));
    }
    if mode() == Mode::Vector {
        merge_vector(got);
    }
}

/// The pending wildcard receives a receive completes by non-overtaking
/// (ticks), and whether it was itself pending; both leave the set.
#[inline(never)]
fn pending_ticks(rx: Rx, tag: i32, own: Option<(usize, u64, i32)>) -> (u64, bool) {
    let any_tag = ffi::consts().any_tag;
    let post = own.map_or(u64::MAX, |o| o.1);
    let mut was_pending = false;
    let mut p = PENDING.lock();
    if let Some((slot, _, _)) = own {
        if let Some(i) = p.iter().position(|e| e.slot == slot) {
            p.swap_remove(i);
            was_pending = true;
        }
    }
    let before = p.len();
    p.retain(|e| !(e.comm == rx.comm && (e.tag == any_tag || e.tag == tag) && e.post < post));
    let ticks = (before - p.len()) as u64;
    PENDING_N.store(p.len(), Relaxed);
    (ticks, was_pending)
}

#[inline(never)]
fn merge_vector(got: &Got) {
    let mut vc = VC.lock();
    for (mine, &theirs) in vc.iter_mut().zip(&got.vc) {
        *mine = (*mine).max(theirs);
    }
    vc[ME.load(Relaxed)] += 1;
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
    if apart::beyond(bytes) && probed_apart(status, comm, bytes) {
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
    let Some((from, gid)) = apart::world_rank(comm, source) else {
        return false;
    };
    bytes > apart::limit() + header_len() as u64
        || apart::has_come(&apart::Want {
            from,
            gid,
            tag: Some(tag),
            bytes: Some(bytes),
        })
}

// ---- Sendrecv_replace ----

/// The arguments of `MPI_Sendrecv_replace`: the user's buffer with its
/// header in front (inline), or, for a message that goes apart, a
/// `MPI_Sendrecv` from a copy of the data into the user's buffer.
pub struct Replace {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    inp: In,
    /// The data of a message that goes apart (empty: inline).
    copy: Vec<u8>,
}

impl Replace {
    /// A message that goes apart: the copy of the data it sends, as bytes
    /// (the call is then an `MPI_Sendrecv`).
    #[inline(always)]
    pub fn apart_send(&self) -> Option<(*const c_void, i64)> {
        apart_send(&self.copy)
    }

    pub fn finish(self, rc: c_int, status: *mut MPI_Status, rx: Rx) -> Option<Got> {
        self.inp.finish(rc, status, rx)
    }
}

impl In {
    /// One buffer both sent from and received into: the header (and staged
    /// data) go out from the area the reply comes back into; a message that
    /// goes apart goes from a copy.
    pub fn replace(
        rec: &mut Recorder,
        t0: u64,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
        to: To,
        rx: Rx,
    ) -> Replace {
        if let Some(copy) = replace_apart(rec, t0, buf, count, datatype, to) {
            let inp = In::new(rec, buf, count, datatype, rx);
            return Replace {
                buf: inp.buf,
                count: inp.count,
                datatype: inp.datatype,
                inp,
                copy,
            };
        }
        let inp = In::new_with(rec, buf, count, datatype, rx, false);
        if !inp.land.area.is_null() {
            write_header(inp.land.area, rec, t0);
            if inp.land.route == Route::Staged {
                // SAFETY: dense user data of `posted` bytes into the staging area.
                unsafe {
                    copy_bytes(
                        buf as *const u8,
                        inp.land.area.add(header_len()),
                        inp.land.posted as usize,
                    )
                };
            }
        }
        Replace {
            buf: inp.buf,
            count: inp.count,
            datatype: inp.datatype,
            inp,
            copy: Vec::new(),
        }
    }
}

/// The send half of a replace whose message goes apart: its copy.
#[inline(always)]
fn apart_send(copy: &[u8]) -> Option<(*const c_void, i64)> {
    (!copy.is_empty()).then_some((copy.as_ptr() as *const c_void, copy.len() as i64))
}

/// A replace's message that goes apart: its data copied out (packed, for
/// a non-contiguous type) and its header sent. None: inline.
fn replace_apart(
    rec: &mut Recorder,
    t0: u64,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
) -> Option<Vec<u8>> {
    if !on() {
        return None;
    }
    let (bytes, dense) = rec.types.layout(count, datatype)?;
    apart::destination(to.comm, to.dest, to.tag, bytes)?;
    let copy = copy_out(buf, count, datatype, bytes, dense)?;
    apart_header(rec, t0, to, bytes);
    Some(copy)
}

/// The data of `count` elements at `buf` (`bytes` of them), in their
/// packed form: copied when `dense`, else packed by MPI.
fn copy_out(
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    bytes: u64,
    dense: bool,
) -> Option<Vec<u8>> {
    let size = c_int::try_from(bytes).ok()?;
    let mut copy = vec![0u8; bytes as usize];
    if dense {
        // SAFETY: the user's buffer holds `bytes` dense bytes.
        unsafe { core::ptr::copy_nonoverlapping(buf as *const u8, copy.as_mut_ptr(), copy.len()) };
        return Some(copy);
    }
    let count = c_int::try_from(count).ok()?;
    let mut pos: c_int = 0;
    // SAFETY: packs the user's elements into a buffer of their size.
    let rc = unsafe {
        ffi::PMPI_Pack(
            buf,
            count,
            datatype,
            copy.as_mut_ptr() as *mut c_void,
            size,
            &mut pos,
            ffi::world(),
        )
    };
    (rc == 0 && pos == size).then_some(copy)
}

impl Drop for In {
    fn drop(&mut self) {
        free_type(&mut self.temp);
    }
}

// ---- nonblocking and persistent operations ----

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
fn keep(mut s: Box<Slot>) {
    free_type(&mut s.temp);
    s.got = None;
    s.partner = 0;
    s.copy = Vec::new();
    if s.area.capacity() > SPARE_AREA {
        s.area = Vec::new();
    }
    let mut spare = SPARE.lock();
    if spare.len() < SPARE_KEPT {
        spare.push(s);
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
}

impl Posted {
    fn passthrough(buf: *mut c_void, count: i64, datatype: MPI_Datatype) -> Posted {
        Posted {
            buf,
            count,
            datatype,
            slot: None,
        }
    }

    /// The slot as an integer for the request table (0: none).
    pub fn into_slot(self) -> usize {
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
    let mut slot = SPARE
        .lock()
        .pop()
        .unwrap_or_else(|| Box::new(Slot::empty()));
    if route == Route::Untouched && !send {
        // The buffer's first bytes as they are (no zeroing first).
        slot.area.clear();
        // SAFETY: the user's buffer holds `posted` ≥ `area` bytes.
        slot.area
            .extend_from_slice(unsafe { core::slice::from_raw_parts(buf as *const u8, area) });
    } else {
        // A pooled slot keeps its old bytes (zeroing 4 KiB cost as much as
        // the message): a send writes every byte it sends, a receive reads
        // back only what came. The front is cleared, so that no old header
        // is read as one that came (`deliver_blind`).
        slot.area.resize(area, 0);
        let front = area.min(8);
        slot.area[..front].fill(0);
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
fn load_send(slot: &mut Slot, rec: &mut Recorder, t0: u64) {
    if let Some(to) = slot.apart {
        if !apart_header(rec, t0, to, slot.posted) {
            // The destination can no longer be told (never expected): the
            // id is taken as for any send.
            skip_header(rec, t0);
        }
        return;
    }
    write_header(slot.area.as_mut_ptr(), rec, t0);
    if slot.route == Route::Staged {
        let h = header_len();
        let n = slot.area.len() - h;
        // SAFETY: the user's buffer holds `n` dense bytes.
        unsafe { copy_bytes(slot.user as *const u8, slot.area.as_mut_ptr().add(h), n) };
    }
}

/// Isend (and modes) and Send_init (and modes).
pub fn post_send(
    rec: &mut Recorder,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
    persistent: bool,
) -> Posted {
    post_send_up_to(rec, t0, buf, count, datatype, to, persistent, COPY_MAX)
}

/// The send half of `MPI_Isendrecv`.
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_isendrecv_send(
    rec: &mut Recorder,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
) -> Posted {
    post_send_up_to(
        rec,
        t0,
        buf,
        count,
        datatype,
        to,
        false,
        isendrecv_stage_max(),
    )
}

/// The receive half of `MPI_Isendrecv`.
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_isendrecv_recv(
    rec: &mut Recorder,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
) -> Posted {
    if !isendrecv_blind() {
        return post_recv_up_to(rec, buf, count, datatype, rx, tag, false, COPY_MAX, true);
    }
    // No status to size a staged message by: the data goes in place.
    let mut p = post_recv_up_to(rec, buf, count, datatype, rx, tag, false, 0, false);
    if let Some(slot) = p.slot.as_mut() {
        slot.blind = true;
    }
    p
}

#[allow(clippy::too_many_arguments)]
fn post_send_up_to(
    rec: &mut Recorder,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
    persistent: bool,
    stage_max: u64,
) -> Posted {
    let buf = buf as *mut c_void;
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some((bytes, dense)) = rec.types.layout(count, datatype) else {
        if !persistent {
            skip_header(rec, t0);
        }
        return Posted::passthrough(buf, count, datatype);
    };
    if apart::beyond(bytes) {
        if !persistent {
            if send_apart(rec, t0, to, bytes) {
                return Posted::passthrough(buf, count, datatype);
            }
        } else if apart::destination(to.comm, to.dest, to.tag, bytes).is_some() {
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
            };
        }
    }
    let route = if dense && bytes <= stage_max {
        Route::Staged
    } else {
        Route::Struct
    };
    let rx = Rx::matched();
    let Some(mut slot) = new_slot(buf, count, datatype, route, (bytes, dense), true, rx, 0) else {
        return Posted::passthrough(buf, count, datatype);
    };
    if !persistent {
        load_send(&mut slot, rec, t0);
        slot.active = true;
    }
    let (b, c, d) = slot_args(&slot, buf, count, datatype);
    Posted {
        buf: b,
        count: c,
        datatype: d,
        slot: Some(slot),
    }
}

/// Irecv, Recv_init, Imrecv.
pub fn post_recv(
    rec: &mut Recorder,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
    persistent: bool,
) -> Posted {
    post_recv_up_to(
        rec, buf, count, datatype, rx, tag, persistent, COPY_MAX, true,
    )
}

#[allow(clippy::too_many_arguments)]
fn post_recv_up_to(
    rec: &mut Recorder,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    rx: Rx,
    tag: c_int,
    persistent: bool,
    stage_max: u64,
    may_leave: bool,
) -> Posted {
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some((bytes, dense)) = rec.types.layout(count, datatype) else {
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
        slot.post = POSTS.fetch_add(1, Relaxed);
        slot.active = true;
    }
    let (b, c, d) = slot_args(&slot, buf, count, datatype);
    Posted {
        buf: b,
        count: c,
        datatype: d,
        slot: Some(slot),
    }
}

/// `MPI_Isendrecv_replace`: a receive slot whose area goes out first, with
/// the header (and the staged data) of the send half; or, for a message
/// that goes apart, a receive slot that keeps a copy of the data, which
/// an `MPI_Isendrecv` sends (`Posted::apart_send`).
#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_replace(
    rec: &mut Recorder,
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
    if let Some(copy) = replace_apart(rec, t0, buf, count, datatype, to) {
        let mut p = post_isendrecv_recv(rec, buf, count, datatype, rx, tag);
        match p.slot.as_mut() {
            Some(slot) => slot.copy = copy,
            None => {
                // No slot to keep the copy (piggybacking off, or the
                // receive half refused): the call stays a replace, inline.
                skip_header(rec, t0);
            }
        }
        return p;
    }
    let stage_max = if isendrecv_blind() {
        u64::MAX
    } else {
        COPY_MAX
    };
    let mut p = post_recv_up_to(rec, buf, count, datatype, rx, tag, false, stage_max, false);
    match p.slot.as_mut() {
        Some(slot) => {
            load_send(slot, rec, t0);
            slot.blind = isendrecv_blind();
        }
        None => skip_header(rec, t0),
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
    if slot == 0 {
        return;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &mut *(slot as *mut Slot) };
    if s.send || !ok || !s.rx.wildcard {
        return;
    }
    let mut p = PENDING.lock();
    p.push(Pending {
        slot,
        comm: s.rx.comm,
        tag: s.tag,
        post: s.post,
    });
    PENDING_N.store(p.len(), Relaxed);
}

/// Before `MPI_Start`: a persistent send loads its next message, a
/// persistent receive takes a new post number.
pub fn before_start(slot: usize, rec: &mut Recorder, t0: u64) {
    if slot == 0 {
        return;
    }
    // SAFETY: a live slot of this module.
    let s = unsafe { &mut *(slot as *mut Slot) };
    s.active = true;
    if s.send {
        load_send(s, rec, t0);
    } else {
        s.post = POSTS.fetch_add(1, Relaxed);
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
pub fn complete(
    slot: usize,
    status: *mut MPI_Status,
    cancelled: bool,
    persistent: bool,
) -> Option<Got> {
    if slot == 0 {
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
    if slot == 0 {
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

pub fn forget_pending(slot: usize) {
    if PENDING_N.load(Relaxed) == 0 {
        return;
    }
    let mut p = PENDING.lock();
    p.retain(|e| e.slot != slot);
    PENDING_N.store(p.len(), Relaxed);
}

/// Whether the operation of `slot` (0: none) is in flight.
pub fn in_flight(slot: usize) -> bool {
    // SAFETY: a live slot of this module.
    slot != 0 && unsafe { (*(slot as *const Slot)).active }
}

/// Whether completing the operation of `slot` writes to the user's buffer
/// (a receive not yet unpacked: staged data to copy, an inline header to
/// take off an untouched buffer, data that came apart to move).
pub fn delivers(slot: usize) -> bool {
    // SAFETY: a live slot of this module.
    let s = unsafe { &*(slot as *const Slot) };
    !s.send && s.got.is_none()
}

/// Completes the operation of a freed request (see `orphans`): the user's
/// buffer gets its data, with no clock rule (the trace has no event for
/// it); the slot is released.
pub fn finish_orphan(slot: usize, status: *mut MPI_Status) {
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

pub fn release(slot: usize) {
    if slot == 0 {
        return;
    }
    forget_pending(slot);
    // SAFETY: the slot was made by `Posted::into_slot` and is released once.
    let s = unsafe { Box::from_raw(slot as *mut Slot) };
    release(s.partner);
    keep(s);
}
