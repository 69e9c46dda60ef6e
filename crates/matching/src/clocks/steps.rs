//! A stream's steps, packed. The plan holds about two steps an event for
//! the whole trace, so each is a byte or two rather than an 8-byte
//! [`Ev`]: its kind, and its index as the difference from the last index
//! of the same kind in the stream (sends, receives, instances and records
//! each count up nearly one by one along a stream).
//!
//! A step is one byte `kkk c vvvv`: the kind (3 bits), whether more bytes
//! follow, and the low 4 bits of the zigzagged difference; then the rest of
//! it 7 bits a byte, the high bit saying that more follow.

use super::plan::Ev;

/// The last index of each kind is held at the kind's number
/// (`SendNowhere`'s is unused).
const KINDS: usize = 7;

#[derive(Debug, Default)]
pub(super) struct Steps {
    bytes: Vec<u8>,
    /// The last index of each kind pushed.
    last: [u32; KINDS],
}

/// Where a reader of a stream is: the next step's byte, and the last index
/// of each kind read so far (updated in place: a copy of it per step costs
/// more than the decoding).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct At {
    pos: usize,
    last: [u32; KINDS],
}

impl Ev {
    /// The kind of a step, and its index.
    fn code(self) -> (u8, Option<u32>) {
        match self {
            Ev::Send(i) => (0, Some(i)),
            Ev::SendNowhere => (1, None),
            Ev::Post(i) => (2, Some(i)),
            Ev::Recv(i) => (3, Some(i)),
            Ev::Enter(i) => (4, Some(i)),
            Ev::Exit(i) => (5, Some(i)),
            Ev::End(i) => (6, Some(i)),
        }
    }

    fn of(kind: u8, index: u32) -> Ev {
        match kind {
            0 => Ev::Send(index),
            1 => Ev::SendNowhere,
            2 => Ev::Post(index),
            3 => Ev::Recv(index),
            4 => Ev::Enter(index),
            5 => Ev::Exit(index),
            _ => Ev::End(index),
        }
    }
}

impl Steps {
    pub(super) fn push(&mut self, ev: Ev) {
        let (kind, index) = ev.code();
        let Some(index) = index else {
            self.bytes.push(kind << 5);
            return;
        };
        let last = &mut self.last[usize::from(kind)];
        let delta = i64::from(index) - i64::from(*last);
        *last = index;
        let mut z = ((delta << 1) ^ (delta >> 63)) as u64;
        let more = z >= 16;
        self.bytes
            .push(kind << 5 | u8::from(more) << 4 | (z & 15) as u8);
        z >>= 4;
        while z > 0 {
            let b = (z & 127) as u8;
            z >>= 7;
            self.bytes.push(if z > 0 { b | 128 } else { b });
        }
    }

    /// The step at `at`, and the position of the one after it (for
    /// [`At::past`]); `None` at the end.
    #[inline]
    pub(super) fn get(&self, at: &At) -> Option<(Ev, usize)> {
        let &first = self.bytes.get(at.pos)?;
        let kind = first >> 5;
        let mut next = at.pos + 1;
        if kind == 1 {
            return Some((Ev::SendNowhere, next));
        }
        let mut z = u64::from(first & 15);
        if first & 16 != 0 {
            let mut shift = 4;
            loop {
                let b = self.bytes[next];
                next += 1;
                z |= u64::from(b & 127) << shift;
                shift += 7;
                if b < 128 {
                    break;
                }
            }
        }
        let delta = (z >> 1) as i64 ^ -((z & 1) as i64);
        let index = (i64::from(at.last[usize::from(kind)]) + delta) as u32;
        Some((Ev::of(kind, index), next))
    }

    /// The bytes pushed so far.
    pub(super) fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Whether `at` is past the last step.
    pub(super) fn done(&self, at: &At) -> bool {
        at.pos >= self.bytes.len()
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
    }

    /// These steps with each instance `i` entered or exited as
    /// `numbers[i]`.
    pub(super) fn renumbered(self, numbers: &[u32]) -> Steps {
        if numbers.iter().enumerate().all(|(i, &n)| n as usize == i) {
            return self;
        }
        let mut out = Steps::default();
        out.bytes.reserve_exact(self.bytes.len());
        let mut at = At::default();
        while let Some((ev, next)) = self.get(&at) {
            at.past(ev, next);
            out.push(match ev {
                Ev::Enter(i) => Ev::Enter(numbers[i as usize]),
                Ev::Exit(i) => Ev::Exit(numbers[i as usize]),
                ev => ev,
            });
        }
        out
    }
}

impl At {
    /// Moves past `ev`, read by [`Steps::get`] with `next`.
    #[inline]
    pub(super) fn past(&mut self, ev: Ev, next: usize) {
        self.pos = next;
        if let (kind, Some(index)) = ev.code() {
            self.last[usize::from(kind)] = index;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &Steps) -> Vec<Ev> {
        let mut at = At::default();
        let mut out = Vec::new();
        while let Some((ev, next)) = s.get(&at) {
            out.push(ev);
            at.past(ev, next);
        }
        assert!(s.done(&at));
        out
    }

    /// Renumbered steps read back as the steps pushed with the new
    /// numbers; the same numbers leave the bytes as they are.
    #[test]
    fn renumbered_steps_are_those_pushed_with_the_numbers() {
        let evs = [
            Ev::Enter(0),
            Ev::Exit(0),
            Ev::Send(4),
            Ev::Enter(1),
            Ev::End(9),
            Ev::Enter(2),
            Ev::Exit(1),
            Ev::Exit(2),
        ];
        let mut s = Steps::default();
        evs.iter().for_each(|&e| s.push(e));
        let numbers = [7, 300, 2];
        let mut want = Steps::default();
        for e in evs {
            want.push(match e {
                Ev::Enter(i) => Ev::Enter(numbers[i as usize]),
                Ev::Exit(i) => Ev::Exit(numbers[i as usize]),
                e => e,
            });
        }
        let same = s.renumbered(&[0, 1, 2]);
        let got = same.renumbered(&numbers);
        assert_eq!(got.bytes, want.bytes);
        assert_eq!(format!("{:?}", read(&got)), format!("{:?}", read(&want)));
        assert!(format!("{:?}", read(&got)).contains("Enter(300)"));
    }

    #[test]
    fn steps_read_back_as_pushed() {
        let evs = [
            Ev::End(0),
            Ev::Send(0),
            Ev::Send(1),
            Ev::SendNowhere,
            Ev::End(3),
            Ev::Post(7),
            Ev::Recv(2),
            Ev::Recv(7),
            Ev::End(2),
            Ev::Enter(u32::MAX),
            Ev::Exit(u32::MAX),
            Ev::Enter(0),
            Ev::Send(u32::MAX),
            Ev::Send(0),
            Ev::End(1 << 31),
            Ev::Post(15),
            Ev::Post(31),
            Ev::Post(8),
        ];
        let mut s = Steps::default();
        for ev in evs {
            s.push(ev);
        }
        let back = read(&s);
        assert_eq!(format!("{back:?}"), format!("{evs:?}"));
    }

    #[test]
    fn a_step_near_the_last_of_its_kind_takes_one_byte() {
        let mut s = Steps::default();
        // Differences within -8..=7 zigzag under 16.
        for ev in [
            Ev::Send(7),
            Ev::Send(0),
            Ev::Recv(7),
            Ev::End(7),
            Ev::End(14),
            Ev::SendNowhere,
        ] {
            s.push(ev);
        }
        assert_eq!(s.bytes.len(), 6);
        s.push(Ev::Exit(8));
        assert_eq!(s.bytes.len(), 8);
        s.push(Ev::Exit(8 + 1024));
        // zigzag(1024) = 2048: its low 4 bits, then 128 in two bytes.
        assert_eq!(s.bytes.len(), 11);
        assert_eq!(read(&s).len(), 8);
    }
}
