//! Records between the processes of `pmtrace-mpi`: little-endian fields, written and read in
//! the same order by the same code. A short buffer is a bug of ours, not
//! of the trace, and panics.

use pmtrace_format::record::CommDef;

use crate::read::EventRef;

/// A buffer being written.
#[derive(Debug, Default, Clone)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u8(&mut self, x: u8) -> &mut Self {
        self.0.push(x);
        self
    }
    pub fn u32(&mut self, x: u32) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    pub fn i32(&mut self, x: i32) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    pub fn u64(&mut self, x: u64) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }
    pub fn f64(&mut self, x: f64) -> &mut Self {
        self.u64(x.to_bits())
    }
    pub fn bool(&mut self, x: bool) -> &mut Self {
        self.u8(u8::from(x))
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }
    pub fn u32s(&mut self, v: &[u32]) -> &mut Self {
        self.u64(v.len() as u64);
        for &x in v {
            self.u32(x);
        }
        self
    }
    /// A record's place: rank, thread, index.
    pub fn at(&mut self, at: EventRef) -> &mut Self {
        self.u32(at.rank).u32(at.thread).u32(at.index)
    }
}

/// A buffer being read.
#[derive(Debug, Clone)]
pub struct In<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    pub fn new(b: &'a [u8]) -> In<'a> {
        In { b, at: 0 }
    }
    pub fn done(&self) -> bool {
        self.at >= self.b.len()
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }
    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }
    pub fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().expect("8 bytes"))
    }
    pub fn f64(&mut self) -> f64 {
        f64::from_bits(self.u64())
    }
    pub fn bool(&mut self) -> bool {
        self.u8() != 0
    }
    pub fn bytes(&mut self) -> &'a [u8] {
        let n = self.u64() as usize;
        self.take(n)
    }
    pub fn str(&mut self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }
    pub fn u32s(&mut self) -> Vec<u32> {
        let n = self.u64() as usize;
        (0..n).map(|_| self.u32()).collect()
    }
    pub fn at(&mut self) -> EventRef {
        EventRef {
            rank: self.u32(),
            thread: self.u32(),
            index: self.u32(),
        }
    }
}

/// A type's wire form, written beside the type: [`Wire::put`] writes what
/// [`Wire::get`] reads back.
pub trait Wire: Sized {
    fn put(&self, o: &mut Out);
    fn get(i: &mut In) -> Self;
}

impl Out {
    /// Any value with a wire form.
    pub fn put<T: Wire>(&mut self, x: &T) -> &mut Self {
        x.put(self);
        self
    }

    /// A count, then the values: what a `Vec<T>` reads back.
    pub fn put_all<T: Wire>(&mut self, v: &[T]) -> &mut Self {
        self.u64(v.len() as u64);
        for x in v {
            x.put(self);
        }
        self
    }
}

impl In<'_> {
    /// Any value with a wire form.
    pub fn get<T: Wire>(&mut self) -> T {
        T::get(self)
    }
}

impl Wire for u32 {
    fn put(&self, o: &mut Out) {
        o.u32(*self);
    }
    fn get(i: &mut In) -> u32 {
        i.u32()
    }
}

impl Wire for u64 {
    fn put(&self, o: &mut Out) {
        o.u64(*self);
    }
    fn get(i: &mut In) -> u64 {
        i.u64()
    }
}

impl Wire for i32 {
    fn put(&self, o: &mut Out) {
        o.i32(*self);
    }
    fn get(i: &mut In) -> i32 {
        i.i32()
    }
}

impl Wire for f64 {
    fn put(&self, o: &mut Out) {
        o.f64(*self);
    }
    fn get(i: &mut In) -> f64 {
        i.f64()
    }
}

impl Wire for bool {
    fn put(&self, o: &mut Out) {
        o.bool(*self);
    }
    fn get(i: &mut In) -> bool {
        i.bool()
    }
}

impl Wire for String {
    fn put(&self, o: &mut Out) {
        o.str(self);
    }
    fn get(i: &mut In) -> String {
        i.str()
    }
}

/// A count, then the entries in key order.
impl<K: Wire + Ord, V: Wire> Wire for std::collections::BTreeMap<K, V> {
    fn put(&self, o: &mut Out) {
        o.u64(self.len() as u64);
        for (k, v) in self {
            k.put(o);
            v.put(o);
        }
    }
    fn get(i: &mut In) -> Self {
        let n = i.u64() as usize;
        (0..n)
            .map(|_| {
                let k = K::get(i);
                (k, V::get(i))
            })
            .collect()
    }
}

impl Wire for EventRef {
    fn put(&self, o: &mut Out) {
        o.at(*self);
    }
    fn get(i: &mut In) -> EventRef {
        i.at()
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, o: &mut Out) {
        self.0.put(o);
        self.1.put(o);
    }
    fn get(i: &mut In) -> (A, B) {
        let a = A::get(i);
        (a, B::get(i))
    }
}

impl<A: Wire, B: Wire, C: Wire> Wire for (A, B, C) {
    fn put(&self, o: &mut Out) {
        self.0.put(o);
        self.1.put(o);
        self.2.put(o);
    }
    fn get(i: &mut In) -> (A, B, C) {
        let (a, b) = (A::get(i), B::get(i));
        (a, b, C::get(i))
    }
}

/// A communicator's definition, as its rank wrote it.
impl Wire for CommDef {
    fn put(&self, o: &mut Out) {
        o.u32(self.index).u64(self.global_id).bool(self.inter);
        o.u32(self.size).u32(self.rank).u32(self.remote_size);
        o.u32s(&self.members);
    }
    fn get(i: &mut In) -> CommDef {
        CommDef {
            index: i.u32(),
            global_id: i.u64(),
            inter: i.bool(),
            size: i.u32(),
            rank: i.u32(),
            remote_size: i.u32(),
            members: i.u32s(),
        }
    }
}

/// A flag byte, then the value if there is one.
impl<T: Wire> Wire for Option<T> {
    fn put(&self, o: &mut Out) {
        match self {
            None => {
                o.u8(0);
            }
            Some(x) => x.put(o.u8(1)),
        }
    }
    fn get(i: &mut In) -> Option<T> {
        (i.u8() == 1).then(|| T::get(i))
    }
}

/// A count, then the values.
impl<T: Wire> Wire for Vec<T> {
    fn put(&self, o: &mut Out) {
        o.put_all(self);
    }
    fn get(i: &mut In) -> Vec<T> {
        let n = i.u64() as usize;
        (0..n).map(|_| T::get(i)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_back_in_order() {
        let mut o = Out::default();
        o.u8(7)
            .u32(1 << 31)
            .i32(-3)
            .u64(u64::MAX)
            .f64(1.5)
            .bool(true);
        o.str("ring").u32s(&[4, 5]);
        let mut i = In::new(&o.0);
        assert_eq!(
            (i.u8(), i.u32(), i.i32(), i.u64(), i.f64(), i.bool()),
            (7, 1 << 31, -3, u64::MAX, 1.5, true)
        );
        assert_eq!((i.str(), i.u32s()), ("ring".to_string(), vec![4, 5]));
        assert!(i.done());
    }

    #[test]
    fn wire_forms_come_back() {
        let x: (Option<(u64, u64)>, Vec<Option<u32>>) = (Some((3, 4)), vec![None, Some(9)]);
        let mut o = Out::default();
        o.put(&x).put(&None::<u64>);
        let mut i = In::new(&o.0);
        assert_eq!(i.get::<(Option<(u64, u64)>, Vec<Option<u32>>)>(), x);
        assert_eq!(i.get::<Option<u64>>(), None);
        assert!(i.done());
    }
}
