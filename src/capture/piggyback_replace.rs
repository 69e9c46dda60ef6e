//! `MPI_Sendrecv_replace`: one buffer both sent from and received into.
//! Inline, the header (and staged data) go out from the area the reply
//! comes back into; a message that goes apart is sent from a copy of the
//! data, and the call becomes an `MPI_Sendrecv`.

use crate::ffi::{MPI_Datatype, MPI_Status};
use crate::large_headers;
use crate::piggyback_deliver::{In, Rx};
use crate::piggyback_header::{header_len, write_header, Got};
use crate::piggyback_lamport::on;
use crate::piggyback_routes::{copy_bytes, copy_out, Route};
use crate::piggyback_send::{apart_header, To};
use crate::thread::Thread;
use core::ffi::{c_int, c_void};

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
    /// The arguments of the receive `inp` (and of the send, inline), with
    /// the data of a message that goes apart (`copy`, empty: inline).
    #[inline(always)]
    fn with(inp: In, copy: Vec<u8>) -> Replace {
        Replace {
            buf: inp.buf,
            count: inp.count,
            datatype: inp.datatype,
            inp,
            copy,
        }
    }

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
        thread: &mut Thread,
        t0: u64,
        buf: *mut c_void,
        count: i64,
        datatype: MPI_Datatype,
        to: To,
        rx: Rx,
    ) -> Replace {
        if let Some(copy) = replace_apart(thread, t0, buf, count, datatype, to) {
            return Replace::with(In::new(thread, buf, count, datatype, rx), copy);
        }
        let inp = In::new_with(thread, buf, count, datatype, rx, false);
        if !inp.land.area.is_null() {
            write_header(inp.land.area, thread, t0);
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
        Replace::with(inp, Vec::new())
    }
}

/// The send half of a replace whose message goes apart: its copy.
#[inline(always)]
pub fn apart_send(copy: &[u8]) -> Option<(*const c_void, i64)> {
    (!copy.is_empty()).then_some((copy.as_ptr() as *const c_void, copy.len() as i64))
}

/// A replace's message that goes apart: its data copied out (packed, for
/// a non-contiguous type) and its header sent. None: inline.
pub fn replace_apart(
    thread: &mut Thread,
    t0: u64,
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    to: To,
) -> Option<Vec<u8>> {
    if !on() {
        return None;
    }
    let (bytes, dense) = thread.state.types.layout(count, datatype)?;
    large_headers::destination(to.comm, to.dest, to.tag, bytes)?;
    let copy = copy_out(buf, count, datatype, bytes, dense)?;
    apart_header(thread, t0, to, bytes);
    Some(copy)
}
