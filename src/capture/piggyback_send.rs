//! The send side of the piggyback: what a blocking send passes to MPI
//! instead of the user's arguments, and the choice, per message, between
//! a header in front (inline, on one of the routes of `piggyback_routes`)
//! and a header sent apart (`large_headers`).

use crate::ffi::{self, MPI_Comm, MPI_Datatype};
use crate::large_headers;
use crate::piggyback_header::{header_len, write_header};
use crate::piggyback_lamport::on;
use crate::piggyback_routes::{bottom, copy_bytes, free_type, struct_type, COPY_MAX};
use crate::thread::Thread;
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

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
pub fn skip_header(thread: &mut Thread, t0: u64) {
    let scratch = thread.state.stage_out(header_len());
    write_header(scratch, thread, t0);
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

pub fn isendrecv_stage_max() -> u64 {
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
pub fn send_apart(thread: &mut Thread, t0: u64, to: To, bytes: u64) -> bool {
    if !large_headers::beyond(bytes) {
        return false;
    }
    apart_header(thread, t0, to, bytes)
}

#[inline(never)]
pub fn apart_header(thread: &mut Thread, t0: u64, to: To, bytes: u64) -> bool {
    let Some((world, gid)) = large_headers::destination(to.comm, to.dest, to.tag, bytes) else {
        return false;
    };
    large_headers::send(world, gid, to.tag, bytes, header_len(), |dst| {
        write_header(dst, thread, t0)
    });
    true
}

impl Out {
    /// Packs a message for a blocking send; the staging buffer is the
    /// thread's own, valid until its next call.
    #[inline(always)]
    pub fn new(
        thread: &mut Thread,
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
        let Some((bytes, dense)) = thread.state.types.layout(count, datatype) else {
            skip_header(thread, t0);
            return out;
        };
        if send_apart(thread, t0, to, bytes) {
            return out;
        }
        let h = header_len();
        if dense && bytes <= COPY_MAX {
            let n = bytes;
            let stage = thread.state.stage_out(h + n as usize);
            write_header(stage, thread, t0);
            // SAFETY: the user's buffer holds `n` dense bytes; the
            // staging buffer has room for header and data.
            unsafe { copy_bytes(buf as *const u8, stage.add(h), n as usize) };
            out.buf = stage as *const c_void;
            out.count = (h + n as usize) as i64;
            out.datatype = ffi::consts().byte;
        } else {
            let hdr = thread.state.stage_out(h);
            write_header(hdr, thread, t0);
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
