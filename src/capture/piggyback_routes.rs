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

/// The data of `count` elements at `buf` (`bytes` of them, at most an
/// `int`'s worth: a replace sends it with the `int` count it was called
/// with), in their packed form: copied when `dense`, else packed by MPI.
pub fn copy_out(
    buf: *const c_void,
    count: i64,
    datatype: MPI_Datatype,
    bytes: u64,
    dense: bool,
) -> Option<Vec<u8>> {
    c_int::try_from(bytes).ok()?;
    let mut copy = vec![0u8; bytes as usize];
    if dense {
        // SAFETY: the user's buffer holds `bytes` dense bytes.
        unsafe { core::ptr::copy_nonoverlapping(buf as *const u8, copy.as_mut_ptr(), copy.len()) };
        return Some(copy);
    }
    Elements::of(buf as *mut c_void, count, datatype)?
        .pack(&mut copy)
        .then_some(copy)
}

/// `count` elements of `datatype` at `buf`, packed and unpacked by MPI in
/// pieces whose counts and byte sizes fit `MPI_Pack`'s `int` arguments:
/// a large-count call may pass more elements, or more bytes, than that.
#[derive(Clone, Copy)]
pub struct Elements {
    buf: *mut c_void,
    count: i64,
    datatype: MPI_Datatype,
    /// Bytes of one element, packed.
    size: u64,
    /// From one element to the next.
    extent: i64,
    /// Elements in one piece.
    per: i64,
}

impl Elements {
    /// None when MPI cannot tell the type's size and extent, or one
    /// element alone is more than an `int` of bytes.
    pub fn of(buf: *mut c_void, count: i64, datatype: MPI_Datatype) -> Option<Elements> {
        let (mut size, mut lb, mut extent): (ffi::MPI_Count, ffi::MPI_Count, ffi::MPI_Count) =
            (0, 0, 0);
        // SAFETY: queries on a type the application passed to MPI.
        let asked = unsafe {
            ffi::PMPI_Type_size_x(datatype, &mut size) == 0
                && ffi::PMPI_Type_get_extent_x(datatype, &mut lb, &mut extent) == 0
        };
        let most = ffi::MPI_Count::from(c_int::MAX);
        if !asked || size <= 0 || size > most || count < 0 {
            return None;
        }
        Some(Elements {
            buf,
            count,
            datatype,
            size: size as u64,
            extent,
            per: most / size,
        })
    }

    /// The packed bytes of the first `n` elements.
    pub fn bytes(&self, n: i64) -> usize {
        n as usize * self.size as usize
    }

    /// The packed bytes of them all.
    pub fn packed_len(&self) -> usize {
        self.bytes(self.count)
    }

    /// The first `n` of them (at most all).
    pub fn first(self, n: i64) -> Elements {
        Elements {
            count: n.min(self.count),
            ..self
        }
    }

    /// Packs the elements into `out`, which holds their packed bytes.
    pub fn pack(&self, out: &mut [u8]) -> bool {
        self.pieces(out.len(), |at, k, off| {
            let mut pos: c_int = 0;
            let len = self.bytes(k);
            // SAFETY: `k` elements from the user's buffer into `len` bytes
            // of `out`, which holds them.
            let rc = unsafe {
                ffi::PMPI_Pack(
                    at,
                    k as c_int,
                    self.datatype,
                    out.as_mut_ptr().add(off) as *mut c_void,
                    len as c_int,
                    &mut pos,
                    ffi::world(),
                )
            };
            rc == 0 && pos as usize == len
        })
    }

    /// Unpacks `from`, the packed bytes of the elements, into them.
    pub fn unpack(&self, from: &[u8]) -> bool {
        self.pieces(from.len(), |at, k, off| {
            let mut pos: c_int = 0;
            let len = self.bytes(k);
            // SAFETY: `len` bytes of `from` into `k` of the user's elements.
            let rc = unsafe {
                ffi::PMPI_Unpack(
                    from.as_ptr().add(off) as *const c_void,
                    len as c_int,
                    &mut pos,
                    at,
                    k as c_int,
                    self.datatype,
                    ffi::world(),
                )
            };
            rc == 0 && pos as usize == len
        })
    }

    /// Calls `piece(first element's address, elements, packed offset)` for
    /// each piece; false as soon as one fails, or if `len` is not the
    /// elements' packed size.
    fn pieces(&self, len: usize, mut piece: impl FnMut(*mut c_void, i64, usize) -> bool) -> bool {
        if len != self.packed_len() {
            return false;
        }
        let mut first = 0;
        while first < self.count {
            let k = self.per.min(self.count - first);
            let at = (self.buf as *mut u8).wrapping_offset((first * self.extent) as isize);
            if !piece(at as *mut c_void, k, self.bytes(first)) {
                return false;
            }
            first += k;
        }
        true
    }
}
