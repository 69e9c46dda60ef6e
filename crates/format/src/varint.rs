//! LEB128 varints and zigzag signed integers.
//!
//! The writer side works on a byte slice and a position, and relies on the
//! caller having reserved enough room (see [`MAX_VARINT`]); it never fails.

/// Most bytes one u64 varint takes.
pub const MAX_VARINT: usize = 10;

/// Where records are written: a checked slice here, the runtime's mapped
/// buffer there. The record layout functions are generic over it, so the
/// encoding exists once.
pub trait Sink {
    fn put_u(&mut self, v: u64);

    #[inline(always)]
    fn put_i(&mut self, v: i64) {
        self.put_u(zigzag(v))
    }
}

/// A byte slice and a write position.
pub struct SliceSink<'a> {
    pub buf: &'a mut [u8],
    pub pos: usize,
}

impl Sink for SliceSink<'_> {
    #[inline(always)]
    fn put_u(&mut self, v: u64) {
        put_u(self.buf, &mut self.pos, v)
    }
}

/// Appends `v` at `buf[*pos..]`. The caller guarantees room for [`MAX_VARINT`].
#[inline(always)]
pub fn put_u(buf: &mut [u8], pos: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*pos] = (v as u8) | 0x80;
        *pos += 1;
        v >>= 7;
    }
    buf[*pos] = v as u8;
    *pos += 1;
}

/// The varint of `v` as the low bytes of a u64 (little-endian) and their
/// count: for a value whose varint takes at most 8 bytes (below 2^56).
pub const fn packed(mut v: u64) -> (u64, usize) {
    let mut bytes = 0u64;
    let mut n = 0;
    while v >= 0x80 {
        bytes |= ((v & 0x7f) | 0x80) << (8 * n);
        n += 1;
        v >>= 7;
    }
    (bytes | (v << (8 * n)), n + 1)
}

/// A sink that gathers varints in the low bytes of a u64, as `packed`
/// does; `len` counts every byte, so more than 8 means they did not fit.
#[derive(Default)]
pub struct Packed {
    pub bytes: u64,
    pub len: usize,
}

impl Sink for Packed {
    fn put_u(&mut self, v: u64) {
        let mut b = [0u8; MAX_VARINT];
        let mut n = 0;
        put_u(&mut b, &mut n, v);
        for &byte in &b[..n] {
            if self.len < 8 {
                self.bytes |= u64::from(byte) << (8 * self.len);
            }
            self.len += 1;
        }
    }
}

#[inline(always)]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline(always)]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline(always)]
pub fn put_i(buf: &mut [u8], pos: &mut usize, v: i64) {
    put_u(buf, pos, zigzag(v))
}

/// Reads a varint; `None` if the input ends first or it overflows 64 bits.
#[inline]
pub fn get_u(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

#[inline]
pub fn get_i(buf: &[u8], pos: &mut usize) -> Option<i64> {
    get_u(buf, pos).map(unzigzag)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `packed` and `Packed` give the bytes `put_u` writes.
    #[test]
    fn packed_varints_are_the_written_bytes() {
        for v in [
            0u64,
            1,
            0x7f,
            0x80,
            300,
            0x3fff,
            0x4000,
            1 << 35,
            (1 << 56) - 1,
        ] {
            let mut buf = [0u8; 16];
            let mut n = 0;
            put_u(&mut buf, &mut n, v);
            let mut low = [0u8; 8];
            low[..n].copy_from_slice(&buf[..n]);
            assert_eq!(packed(v), (u64::from_le_bytes(low), n), "{v}");
        }
        let mut p = Packed::default();
        p.put_i(-3);
        p.put_u(300);
        p.put_u(16);
        assert_eq!((p.bytes, p.len), (0x1002_ac05, 4));
        p.put_u(1 << 40);
        assert_eq!(p.len, 10);
    }

    #[test]
    fn small_values_take_one_byte() {
        let mut buf = [0u8; 16];
        let mut pos = 0;
        put_u(&mut buf, &mut pos, 127);
        assert_eq!(pos, 1);
        put_i(&mut buf, &mut pos, -1);
        assert_eq!(pos, 2);
        assert_eq!(buf[1], 1);
    }

    #[test]
    fn round_trip_extremes() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = [0u8; 16];
            let mut pos = 0;
            put_u(&mut buf, &mut pos, v);
            let mut rd = 0;
            assert_eq!(get_u(&buf, &mut rd), Some(v));
            assert_eq!(rd, pos);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -64, 64] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn truncated_and_overlong_varints_are_rejected() {
        assert_eq!(get_u(&[0x80, 0x80], &mut 0), None);
        assert_eq!(get_u(&[0xff; 11], &mut 0), None);
    }
}
