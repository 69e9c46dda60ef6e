//! Start and end times of calls on the report's time base: the times
//! `pmtrace sync` wrote when it ran, else the recorded ones.

use pmtrace_sync::store::ThreadTimes;
use pmtrace_sync::Synced;
use pmtrace_trace::read::{EventRef, Trace};
use pmtrace_trace::Events;

pub struct Times<'a> {
    pub trace: &'a Trace,
    pub synced: Option<&'a Synced>,
}

impl<'a> Times<'a> {
    /// "synchronized" or "recorded".
    pub fn base(&self) -> &'static str {
        if self.synced.is_some() {
            "synchronized"
        } else {
            "recorded"
        }
    }

    /// Start and end of the record at `at`.
    pub fn of(&self, at: EventRef) -> Option<(u64, u64)> {
        let rank = self.trace.rank(at.rank)?;
        let slot = rank
            .threads
            .binary_search_by_key(&at.thread, |t| t.index)
            .ok()?;
        let records = &rank.threads[slot].records;
        let p = at.pos();
        if p >= records.len() {
            return None;
        }
        let raw = records.stamps(p);
        Some(
            match self.synced.and_then(|s| s.thread_times(at.rank, slot)) {
                Some(t) => (
                    t.get(records, 2 * p).unwrap_or(raw.0),
                    t.get(records, 2 * p + 1).unwrap_or(raw.1),
                ),
                None => raw,
            },
        )
    }

    /// The function of the record at `at`, if it is a call.
    pub fn func(&self, at: EventRef) -> Option<u32> {
        let rank = self.trace.rank(at.rank)?;
        rank.thread(at.thread)?.records.func(at.pos())
    }

    /// The name of the function of the call at `at` ("" if it is none).
    pub fn name(&self, at: EventRef) -> &'a str {
        self.name_of(at.rank, self.func(at))
    }

    /// The name of rank `rank`'s function `func` ("" if it is none).
    pub fn name_of(&self, rank: u32, func: Option<u32>) -> &'a str {
        func.and_then(|f| self.trace.held(rank).header.functions.get(f as usize))
            .map_or("", |f| f.name.as_str())
    }

    /// The calls of rank `rank`'s thread at `slot`, in record order:
    /// (position among the thread's records, function, start, end).
    pub fn calls_at(&self, rank: u32, slot: usize) -> CallsAt<'a> {
        let thread = self.trace.held(rank).threads.get(slot);
        CallsAt {
            records: thread.map(|t| &t.records),
            synced: self.synced.and_then(|s| s.thread_times(rank, slot)),
            next: 0,
        }
    }

    /// The calls of rank `rank`'s thread at `slot`, in record order: (function, start, end).
    pub fn calls(&self, rank: u32, slot: usize) -> impl Iterator<Item = (u32, u64, u64)> + 'a {
        self.calls_at(rank, slot).map(|(_, f, a, b)| (f, a, b))
    }
}

/// The calls of one thread, as [`Times::calls_at`] gives them: a type of
/// its own, so that a loop over them (the weighted path's sweep) calls no
/// function through a pointer.
pub struct CallsAt<'a> {
    records: Option<&'a Events>,
    synced: Option<&'a ThreadTimes>,
    /// The next record to look at.
    next: usize,
}

impl Iterator for CallsAt<'_> {
    /// (position among the thread's records, function, start, end).
    type Item = (u32, u32, u64, u64);

    #[inline]
    fn next(&mut self) -> Option<(u32, u32, u64, u64)> {
        let records = self.records?;
        while self.next < records.len() {
            let p = self.next;
            self.next += 1;
            let Some(func) = records.func(p) else {
                continue;
            };
            let (a, b) = match self.synced {
                Some(t) => match (t.get(records, 2 * p), t.get(records, 2 * p + 1)) {
                    (Some(a), Some(b)) => (a, b),
                    _ => continue,
                },
                None => records.stamps(p),
            };
            return Some((p as u32, func, a, b));
        }
        None
    }
}
