//! How a message and its header travel together, and the copies and
//! datatypes that put them in place.
//!
//! **Two routes, one wire format.** A dense message (contiguous type, no
//! gaps) of at most [`COPY_MAX`] bytes is copied with its header into a
//! staging buffer and sent as bytes; anything else goes as a struct datatype
//! {header, user buffer} at `MPI_BOTTOM`, built per call (about 124 ns, and
//! Open MPI's noncontiguous path) but with no copy. The bytes on the wire
//! are the same either way, so each side chooses its route alone (measured
//! crossover: about 4 KiB, see docs/notes.md). A dense receive large
//! enough for any inline message may also take it untouched, in the
//! user's buffer, and move the header off afterwards
//! (`piggyback_deliver`).

use crate::ffi::{self, MPI_Datatype};
use crate::piggyback_header::header_len;
use core::ffi::{c_int, c_void};

pub use crate::large_headers::COPY_MAX;

/// How a receive takes its message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Route {
    /// Into a staging area of header and data, copied to the user's
    /// buffer (dense and small).
    Staged,
    /// A struct type {header area, user's buffer}.
    Struct,
    /// The user's arguments untouched (dense and large); the area keeps
    /// the buffer's first bytes as they were, for an inline message.
    Untouched,
}

/// Copies `n` bytes between buffers that do not overlap. The short messages
/// whose latency the piggyback adds to go without a call into libc.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes, not overlapping.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
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
pub fn struct_type(
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

/// Frees a struct type made by `struct_type`, if any.
pub fn free_type(t: &mut Option<MPI_Datatype>) {
    if let Some(mut t) = t.take() {
        // SAFETY: a type this module created and nobody else holds.
        unsafe { ffi::PMPI_Type_free(&mut t) };
    }
}

/// `MPI_BOTTOM`, where struct types are sent from.
pub fn bottom() -> *const c_void {
    ffi::consts().bottom as *const c_void
}

/// The data of `count` elements at `buf` (`bytes` of them), in their
/// packed form: copied when `dense`, else packed by MPI.
pub fn copy_out(
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
