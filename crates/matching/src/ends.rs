//! Where each message starts and ends in the records: per thread, the
//! sends each call posted, the receives each call completed and those it
//! posted, as lists sorted by record, then message.
//!
//! ```text
//!  thread's records   0   1   2   3   4   5 ...
//!  sends              (1,0,s7) (3,0,s8) (3,1,s9)       (record, item, send)
//!  done               (4,0,r2) (4,1,r3)                (record, item, receive)
//!  posted             (2,0,r3)
//! ```
//!
//! This is what consumers walk beside the records, in place of maps keyed
//! by event: a walk in record order takes each call's run with a
//! [`Cursor`] in constant time, a single lookup is a binary search. The
//! lists hold 12 bytes per message end.

use core::ops::Range;
use rayon::prelude::*;

use pmtrace_trace::read::{EventRef, Trace};

/// One end of a message: the item of record `index` that is message `msg`
/// (an index into `Messages::sends` or `Messages::recvs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct End {
    pub index: u32,
    pub msg: u32,
    pub item: u32,
}

/// The message ends of one thread, each list sorted by record, then by
/// message (the order in which `Messages::build` made them).
#[derive(Debug, Clone, Default)]
pub struct ThreadEnds {
    /// Sends, by the call that posted them.
    pub sends: Vec<End>,
    /// Receives, by the call that completed them.
    pub done: Vec<End>,
    /// Receives, by the call that posted them.
    pub posted: Vec<End>,
}

/// The message ends of every thread (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Ends {
    /// World rank of `ranks[0]` (a block of a trace starts past 0).
    first: u32,
    /// By world rank less `first`, then thread slot (position in `Rank::threads`).
    ranks: Vec<Vec<ThreadEnds>>,
}

static NO_ENDS: ThreadEnds = ThreadEnds {
    sends: Vec::new(),
    done: Vec::new(),
    posted: Vec::new(),
};

/// A message index as stored: fewer than 2^32 sends and receives.
fn msg(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 messages")
}

impl Ends {
    /// The ends of `sends` and `recvs`, whose events each rank holds as
    /// one contiguous run, in rank order (as `Messages::build` makes them).
    /// A send gives its rank and (call, item); a receive its rank, its
    /// (completing call, item) and its (posting call, item).
    pub fn build<S: Sync, R: Sync>(
        trace: &Trace,
        sends: &[S],
        send: impl Fn(&S) -> (u32, (EventRef, u32)) + Sync,
        recvs: &[R],
        recv: impl Fn(&R) -> (u32, (EventRef, u32), (EventRef, u32)) + Sync,
    ) -> Ends {
        let runs = |rank_of: &dyn Fn(usize) -> u32, n: usize| {
            let mut at = vec![0usize; trace.ranks.len() + 1];
            for i in 0..n {
                at[(rank_of(i) - trace.first) as usize + 1] += 1;
            }
            for r in 0..trace.ranks.len() {
                at[r + 1] += at[r];
            }
            at
        };
        let send_runs = runs(&|i| send(&sends[i]).0, sends.len());
        let recv_runs = runs(&|i| recv(&recvs[i]).0, recvs.len());
        let ranks = trace
            .ranks
            .par_iter()
            .enumerate()
            .map(|(r, rank)| {
                let mut threads = vec![ThreadEnds::default(); rank.threads.len()];
                let slot = |at: EventRef| rank.thread_slot(at.thread);
                let end = |i: usize, (at, item): (EventRef, u32)| End {
                    index: at.index,
                    msg: msg(i),
                    item,
                };
                let (a, b) = (send_runs[r], send_runs[r + 1]);
                for (i, s) in (a..b).zip(&sends[a..b]) {
                    let (_, call) = send(s);
                    threads[slot(call.0)].sends.push(end(i, call));
                }
                let (a, b) = (recv_runs[r], recv_runs[r + 1]);
                for (i, v) in (a..b).zip(&recvs[a..b]) {
                    let (_, done, post) = recv(v);
                    threads[slot(done.0)].done.push(end(i, done));
                    threads[slot(post.0)].posted.push(end(i, post));
                }
                for t in &mut threads {
                    for list in [&mut t.sends, &mut t.done, &mut t.posted] {
                        if !list.is_sorted() {
                            list.sort_unstable();
                        }
                        list.shrink_to_fit();
                    }
                }
                threads
            })
            .collect();
        Ends {
            first: trace.first,
            ranks,
        }
    }

    /// The ends of `rank`'s thread at `slot` (none for a thread unknown).
    pub fn thread(&self, rank: u32, slot: usize) -> &ThreadEnds {
        rank.checked_sub(self.first)
            .and_then(|r| self.ranks.get(r as usize))
            .and_then(|t| t.get(slot))
            .unwrap_or(&NO_ENDS)
    }
}

/// An entry of a list sorted by record: the record it belongs to.
pub trait Keyed {
    fn key(&self) -> u32;
}

impl Keyed for End {
    #[inline]
    fn key(&self) -> u32 {
        self.index
    }
}

impl Keyed for u32 {
    #[inline]
    fn key(&self) -> u32 {
        *self
    }
}

/// The run of `list` (sorted by record) that belongs to record `index`.
pub fn at<T: Keyed>(list: &[T], index: u32) -> &[T] {
    &list[run(list, index)]
}

/// Where `at` finds the run.
fn run<T: Keyed>(list: &[T], index: u32) -> Range<usize> {
    let a = list.partition_point(|e| e.key() < index);
    let b = a + list[a..].partition_point(|e| e.key() == index);
    a..b
}

/// Reads one list record by record in increasing order: a run a few
/// entries on in constant time, one far on by galloping (a block that
/// starts mid-thread costs a logarithm, not a scan); a record before the
/// last one asked falls back to a binary search.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a, T = End> {
    list: &'a [T],
    /// Entries before this one are for records before the last asked.
    next: usize,
}

impl<'a, T: Keyed> Cursor<'a, T> {
    pub fn new(list: &'a [T]) -> Cursor<'a, T> {
        Cursor { list, next: 0 }
    }

    /// The entries at record `index`.
    pub fn at(&mut self, index: u32) -> &'a [T] {
        &self.list[self.run(index)]
    }

    /// Where the entries at record `index` lie in the list.
    pub fn run(&mut self, index: u32) -> Range<usize> {
        let list = self.list;
        if self.next > 0 && list[self.next - 1].key() >= index {
            return run(list, index);
        }
        let mut a = self.next;
        if a < list.len() && list[a].key() < index {
            // Gallop: `lo` is before the run, `hi` past its start.
            let (mut lo, mut step) = (a, 1);
            let mut hi = a + 1;
            while hi < list.len() && list[hi].key() < index {
                lo = hi;
                step *= 2;
                hi = lo + step;
            }
            let hi = hi.min(list.len());
            a = lo + 1 + list[lo + 1..hi].partition_point(|e| e.key() < index);
        }
        let b = a + list[a..].iter().take_while(|e| e.key() == index).count();
        self.next = b;
        a..b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u32, item: u32, msg: u32) -> End {
        End { index, msg, item }
    }

    #[test]
    fn runs_are_found_by_search_and_by_cursor() {
        let list = [e(1, 0, 7), e(3, 0, 8), e(3, 1, 9), e(6, 0, 2)];
        assert_eq!(at(&list, 0), &[]);
        assert_eq!(at(&list, 3), &[e(3, 0, 8), e(3, 1, 9)]);
        assert_eq!(at(&list, 6), &[e(6, 0, 2)]);
        assert_eq!(at(&list, 7), &[]);
        let mut c = Cursor::new(&list);
        assert_eq!(c.at(0), &[]);
        assert_eq!(c.at(1), &[e(1, 0, 7)]);
        assert_eq!(c.at(2), &[]);
        assert_eq!(c.at(3), &[e(3, 0, 8), e(3, 1, 9)]);
        // Asked again, or backwards: the same answers.
        assert_eq!(c.at(3), &[e(3, 0, 8), e(3, 1, 9)]);
        assert_eq!(c.at(1), &[e(1, 0, 7)]);
        assert_eq!(c.at(6), &[e(6, 0, 2)]);
        assert_eq!(c.at(9), &[]);
        assert_eq!(c.at(6), &[e(6, 0, 2)]);
    }

    #[test]
    fn a_cursor_finds_every_run_from_any_start() {
        // Records 0..300 with 0, 1 or 2 ends each.
        let list: Vec<End> = (0..300u32)
            .flat_map(|i| (0..i % 3).map(move |k| e(i, k, i * 10 + k)))
            .collect();
        for start in [0u32, 1, 7, 150, 299, 400] {
            let mut c = Cursor::new(&list);
            for i in (start..320).step_by(1 + start as usize % 5) {
                assert_eq!(c.at(i), at(&list, i), "from {start}, record {i}");
            }
        }
        // A list of bare record numbers: the same runs, as ranges.
        let keys: Vec<u32> = list.iter().map(|e| e.index).collect();
        let mut c = Cursor::new(&keys);
        assert_eq!(c.run(2), 1..3);
        assert_eq!(c.run(3), 3..3);
        assert_eq!(c.run(5), 4..6);
        assert_eq!(c.run(1), 0..1);
        for i in 0..310u32 {
            let r = c.run(i);
            assert_eq!(&list[r], at(&list, i), "record {i}");
        }
    }
}
