//! Piggybacking: a hidden header in front of every point-to-point message.
//!
//! **Layout.** Every message carries, before the user's data, a header of
//! 24 bytes (the sender's Lamport clock, the message id, the sender's timer
//! value at the send), followed in vector mode by the sender's vector clock
//! (one u64 per world rank). Header first, so that a receive posted larger
//! than the message still works.
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

use crate::ffi::{self, MPI_Comm, MPI_Datatype, MPI_Status};
use crate::recorder::Recorder;
use core::ffi::{c_int, c_void};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    None = 0,
    Lamport = 1,
    Vector = 2,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Lamport => "lamport",
            Mode::Vector => "vector",
        }
    }

    pub fn from_name(s: &str) -> Option<Mode> {
        match s {
            "none" => Some(Mode::None),
            "lamport" => Some(Mode::Lamport),
            "vector" => Some(Mode::Vector),
            _ => None,
        }
    }
}

/// Header bytes before the vector clock.
pub const BASE: usize = 24;
/// Largest dense message sent through a staging copy.
pub const COPY_MAX: u64 = 4096;

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

/// What a received message's header said.
#[derive(Debug, Clone, Default)]
pub struct Got {
    pub id: u64,
    pub lc: u64,
    pub sent: u64,
    /// Vector mode only.
    pub vc: Vec<u64>,
}

/// Fills a header at `dst` for the next message of this thread.
#[inline(always)]
fn write_header(dst: *mut u8, rec: &mut Recorder, t0: u64) {
    let id = rec.next_msg_id();
    let lc = LC.load(Relaxed);
    // SAFETY: `dst` has room for a whole header (callers size it so).
    unsafe {
        core::ptr::write_unaligned(dst as *mut u64, lc);
        core::ptr::write_unaligned(dst.add(8) as *mut u64, id);
        core::ptr::write_unaligned(dst.add(16) as *mut u64, t0);
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
            lc: core::ptr::read_unaligned(src as *const u64),
            id: core::ptr::read_unaligned(src.add(8) as *const u64),
            sent: core::ptr::read_unaligned(src.add(16) as *const u64),
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

/// A send that goes to MPI untouched (see `packing`) still takes its
/// message id and clock tick, as a failing send with a header does: the
/// analysis replays the ids over every send call (`send_ids`).
#[cold]
fn skip_header(rec: &mut Recorder, t0: u64) {
    let scratch = rec.stage_out(header_len());
    write_header(scratch, rec, t0);
}

/// How a message of these arguments travels with its header: through a
/// staging copy of `n` bytes (`Some(Some(n))`: dense and small), or a
/// struct type around the user's buffer (`Some(None)`). None when MPI
/// rejects it (a negative count, an invalid datatype): that rejection
/// must be the application's own, so the call goes to MPI untouched and
/// fails there as it would untraced, under the application's handler.
#[inline(always)]
fn packing(rec: &mut Recorder, count: i64, datatype: MPI_Datatype) -> Option<Option<u64>> {
    packing_up_to(rec, count, datatype, COPY_MAX)
}

/// `packing`, staging dense messages of up to `stage_max` bytes.
#[inline(always)]
fn packing_up_to(
    rec: &mut Recorder,
    count: i64,
    datatype: MPI_Datatype,
    stage_max: u64,
) -> Option<Option<u64>> {
    rec.types
        .dense_bytes(count, datatype)
        .map(|dense| dense.filter(|&n| n <= stage_max))
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
        let Some(staged) = packing(rec, count, datatype) else {
            skip_header(rec, t0);
            return out;
        };
        let h = header_len();
        match staged {
            Some(n) => {
                let stage = rec.stage_out(h + n as usize);
                write_header(stage, rec, t0);
                // SAFETY: the user's buffer holds `n` dense bytes; the
                // staging buffer has room for header and data.
                unsafe { copy_bytes(buf as *const u8, stage.add(h), n as usize) };
                out.buf = stage as *const c_void;
                out.count = (h + n as usize) as i64;
                out.datatype = ffi::consts().byte;
            }
            _ => {
                let hdr = rec.stage_out(h);
                write_header(hdr, rec, t0);
                if let Some(t) = struct_type(hdr, buf, count, datatype) {
                    out.buf = bottom();
                    out.count = 1;
                    out.datatype = t;
                    out.temp = Some(t);
                }
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

/// What a receive expects: for the clock rules.
#[derive(Clone, Copy)]
pub struct Rx {
    pub wildcard: bool,
    pub comm: u64,
}

impl Rx {
    #[inline(always)]
    pub fn new(source: c_int, comm: MPI_Comm) -> Rx {
        Rx {
            wildcard: source == ffi::consts().any_source,
            comm: ffi::handle_key(comm),
        }
    }

    /// A matched-probe receive (its message was matched at the probe), or
    /// no receive at all (a send's slot).
    #[inline(always)]
    pub fn matched() -> Rx {
        Rx {
            wildcard: false,
            comm: 0,
        }
    }
}

/// The arguments a receive passes to MPI instead of the user's.
pub struct In {
    pub buf: *mut c_void,
    pub count: i64,
    pub datatype: MPI_Datatype,
    temp: Option<MPI_Datatype>,
    user: *mut c_void,
    posted: u64,
    /// Header (and staged data when `staged`).
    area: *mut u8,
    staged: bool,
}

impl In {
    #[inline(always)]
    pub fn new(rec: &mut Recorder, buf: *mut c_void, count: i64, datatype: MPI_Datatype) -> In {
        let mut inp = In {
            buf,
            count,
            datatype,
            temp: None,
            user: buf,
            posted: 0,
            area: core::ptr::null_mut(),
            staged: false,
        };
        if !on() {
            return inp;
        }
        let Some(staged) = packing(rec, count, datatype) else {
            return inp;
        };
        let h = header_len();
        match staged {
            Some(n) => {
                inp.area = rec.stage_in(h + n as usize);
                inp.staged = true;
                inp.posted = n;
                inp.buf = inp.area as *mut c_void;
                inp.count = (h + n as usize) as i64;
                inp.datatype = ffi::consts().byte;
            }
            _ => {
                inp.area = rec.stage_in(h);
                if let Some(t) = struct_type(inp.area, buf, count, datatype) {
                    inp.buf = bottom() as *mut c_void;
                    inp.count = 1;
                    inp.datatype = t;
                    inp.temp = Some(t);
                } else {
                    inp.area = core::ptr::null_mut();
                }
            }
        }
        inp
    }

    /// After the real call: unpacks, fixes the status, runs the clock rules.
    #[inline(always)]
    pub fn finish(mut self, rc: c_int, status: *mut MPI_Status, rx: Rx) -> Option<Got> {
        free_type(&mut self.temp);
        if self.area.is_null() || !completed_ok(rc, status) {
            return None;
        }
        unpack(
            self.area,
            self.staged,
            self.user,
            self.posted,
            status,
            rx,
            None,
            false,
        )
    }
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

/// Takes the header off a received message at `area`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn unpack(
    area: *mut u8,
    staged: bool,
    user: *mut c_void,
    posted: u64,
    status: *mut MPI_Status,
    rx: Rx,
    own: Option<(usize, u64, i32)>,
    blind: bool,
) -> Option<Got> {
    let h = header_len() as u64;
    if blind {
        // A status MPI does not fill (see `ISENDRECV_BLIND`): the
        // header is there (every rank is traced). Staged data is the whole
        // area back: `MPI_Isendrecv_replace`'s, whose area went out with
        // the user's data, so what no reply overwrote is the user's again.
        if staged {
            // SAFETY: the area holds the header and `posted` bytes.
            unsafe { copy_bytes(area.add(h as usize), user as *mut u8, posted as usize) };
        }
        let got = read_header(area);
        receive_clock(rx, own.map_or(i32::MIN, |o| o.2), own, &got);
        return Some(got);
    }
    let bytes = ffi::status_bytes(status);
    if bytes < h {
        // No header: the sender is not traced. Deliver what came (the
        // report counts the receive as one without an id).
        if staged {
            let n = bytes.min(posted) as usize;
            // SAFETY: the staging area holds `bytes` received bytes; the
            // user's buffer was posted with `posted` dense bytes.
            unsafe { copy_bytes(area, user as *mut u8, n) };
        }
        return None;
    }
    let data = bytes - h;
    if staged {
        let n = data.min(posted) as usize;
        // SAFETY: as above, the data follows the header.
        unsafe { copy_bytes(area.add(h as usize), user as *mut u8, n) };
    }
    ffi::set_status_bytes(status, data);
    let got = read_header(area);
    // SAFETY: MPI filled the status.
    let tag = unsafe { (*status).MPI_TAG };
    receive_clock(rx, tag, own, &got);
    Some(got)
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

/// Fixes the status of a probe that found a message: the header is not the
/// user's.
#[inline(always)]
pub fn fix_probe_status(status: *mut MPI_Status) {
    if !on() {
        return;
    }
    let h = header_len() as u64;
    let bytes = ffi::status_bytes(status);
    if bytes >= h {
        ffi::set_status_bytes(status, bytes - h);
    }
}

// ---- Sendrecv_replace ----

impl In {
    /// One buffer both sent from and received into: the header (and staged
    /// data) go out from the area the reply comes back into.
    pub fn replace(
        rec: &mut Recorder,
        t0: u64,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
    ) -> In {
        let inp = In::new(rec, buf, count, datatype);
        if !inp.area.is_null() {
            write_header(inp.area, rec, t0);
            if inp.staged {
                // SAFETY: dense user data of `posted` bytes into the staging area.
                unsafe {
                    copy_bytes(
                        buf as *const u8,
                        inp.area.add(header_len()),
                        inp.posted as usize,
                    )
                };
            }
        }
        inp
    }
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
    area: Vec<u8>,
    staged: bool,
    send: bool,
    temp: Option<MPI_Datatype>,
    user: *mut c_void,
    posted: u64,
    rx: Rx,
    tag: i32,
    post: u64,
    /// A receive already unpacked (by `MPI_Request_get_status`).
    got: Option<Got>,
    data_len: u64,
    /// Between the post (or `MPI_Start`) and the completion.
    active: bool,
    /// The send half of an `MPI_Isendrecv`, released with this slot.
    partner: usize,
    /// Completed with a status MPI does not fill (see `unpack`).
    blind: bool,
}

// SAFETY: a slot is owned by one request; the raw pointers are the
// application's buffers, which MPI lets any thread complete.
unsafe impl Send for Slot {}

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
}

fn new_slot(
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    dense: Option<u64>,
    send: bool,
    rx: Rx,
    tag: i32,
) -> Option<Box<Slot>> {
    let h = header_len();
    let mut slot = Box::new(Slot {
        area: vec![0u8; h + dense.unwrap_or(0) as usize],
        staged: dense.is_some(),
        send,
        temp: None,
        user: buf,
        posted: dense.unwrap_or(0),
        rx,
        tag,
        post: 0,
        got: None,
        data_len: 0,
        active: false,
        partner: 0,
        blind: false,
    });
    if dense.is_none() {
        slot.temp = Some(struct_type(slot.area.as_ptr(), buf, count, datatype)?);
    }
    Some(slot)
}

fn slot_args(
    slot: &Slot,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
) -> (*mut c_void, i64, MPI_Datatype) {
    if slot.staged {
        (
            slot.area.as_ptr() as *mut c_void,
            slot.area.len() as i64,
            ffi::consts().byte,
        )
    } else if let Some(t) = slot.temp {
        (bottom() as *mut c_void, 1, t)
    } else {
        (buf, count, datatype)
    }
}

/// Refills a send slot's header (and staged data) for the message about to go.
fn load_send(slot: &mut Slot, rec: &mut Recorder, t0: u64) {
    write_header(slot.area.as_mut_ptr(), rec, t0);
    if slot.staged {
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
    persistent: bool,
) -> Posted {
    post_send_up_to(rec, t0, buf, count, datatype, persistent, COPY_MAX)
}

/// The send half of `MPI_Isendrecv`.
#[cfg_attr(not(mpi4), allow(dead_code))]
pub fn post_isendrecv_send(
    rec: &mut Recorder,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
) -> Posted {
    post_send_up_to(rec, t0, buf, count, datatype, false, isendrecv_stage_max())
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
        return post_recv_up_to(rec, buf, count, datatype, rx, tag, false, COPY_MAX);
    }
    // No status to size a staged message by: the data goes in place.
    let mut p = post_recv_up_to(rec, buf, count, datatype, rx, tag, false, 0);
    if let Some(slot) = p.slot.as_mut() {
        slot.blind = true;
    }
    p
}

fn post_send_up_to(
    rec: &mut Recorder,
    t0: u64,
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    persistent: bool,
    stage_max: u64,
) -> Posted {
    let buf = buf as *mut c_void;
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some(staged) = packing_up_to(rec, count, datatype, stage_max) else {
        if !persistent {
            skip_header(rec, t0);
        }
        return Posted::passthrough(buf, count, datatype);
    };
    let rx = Rx::matched();
    let Some(mut slot) = new_slot(buf, count, datatype, staged, true, rx, 0) else {
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
    post_recv_up_to(rec, buf, count, datatype, rx, tag, persistent, COPY_MAX)
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
) -> Posted {
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let Some(staged) = packing_up_to(rec, count, datatype, stage_max) else {
        return Posted::passthrough(buf, count, datatype);
    };
    let Some(mut slot) = new_slot(buf, count, datatype, staged, false, rx, tag) else {
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
/// the header (and the staged data) of the send half.
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
) -> Posted {
    if !on() {
        return Posted::passthrough(buf, count, datatype);
    }
    let stage_max = if isendrecv_blind() {
        u64::MAX
    } else {
        COPY_MAX
    };
    let mut p = post_recv_up_to(rec, buf, count, datatype, rx, tag, false, stage_max);
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
            got = unpack(
                s.area.as_mut_ptr(),
                s.staged,
                s.user,
                s.posted,
                status,
                s.rx,
                Some((slot, s.post, s.tag)),
                s.blind,
            );
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
        s.got = unpack(
            s.area.as_mut_ptr(),
            s.staged,
            s.user,
            s.posted,
            status,
            s.rx,
            Some((slot, s.post, s.tag)),
            s.blind,
        );
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

/// Frees a slot (request freed or nonpersistent request complete).
/// Whether the operation of `slot` (0: none) is in flight.
pub fn in_flight(slot: usize) -> bool {
    // SAFETY: a live slot of this module.
    slot != 0 && unsafe { (*(slot as *const Slot)).active }
}

/// Whether completing the operation of `slot` copies data to the user's
/// buffer (a staged receive not yet unpacked).
pub fn delivers(slot: usize) -> bool {
    // SAFETY: a live slot of this module.
    let s = unsafe { &*(slot as *const Slot) };
    !s.send && s.staged && s.got.is_none()
}

/// Completes the operation of a freed request (see `orphans`): a staged
/// receive's data goes to the user's buffer, with no clock rule (the trace
/// has no event for it); the slot is released.
pub fn finish_orphan(slot: usize, status: *mut MPI_Status) {
    // SAFETY: a live slot of this module, owned by the orphan.
    let s = unsafe { &mut *(slot as *mut Slot) };
    // SAFETY: Testsome filled the status (zeroed before, so MPI_ERROR is 0
    // unless MPI reported an error for this request).
    let ok = unsafe { (*status).MPI_ERROR == 0 } && completed_ok(0, status);
    if s.active && !s.send && s.staged && s.got.is_none() && ok {
        let h = header_len() as u64;
        let bytes = ffi::status_bytes(status);
        // A message without a header came from an untraced sender.
        let (from, n) = if bytes < h {
            (0, bytes)
        } else {
            (h, bytes - h)
        };
        // SAFETY: the staging area holds the received bytes; the user's
        // buffer was posted with `posted` dense bytes.
        unsafe {
            copy_bytes(
                s.area.as_ptr().add(from as usize),
                s.user as *mut u8,
                n.min(s.posted) as usize,
            )
        };
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
    let mut s = unsafe { Box::from_raw(slot as *mut Slot) };
    free_type(&mut s.temp);
    release(s.partner);
}
