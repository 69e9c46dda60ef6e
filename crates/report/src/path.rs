//! A path through the trace as the critical-path walks build it: stretches
//! of one activity on one rank, added up per rank and activity as they
//! end ([`Walk`]), and the call before another in its thread.

use pmtrace_trace::read::{EventRef, Trace};
use rustc_hash::FxHashMap as HashMap;

/// How many stretches (segments) a path lists.
pub const SEGMENTS_SHOWN: usize = 10;

/// Activity code of computation (else a function id of the rank).
pub const COMPUTING: u32 = u32::MAX;

/// A stretch of one activity on one rank, as the walk goes, with its weight
/// (its length, on the plain path).
#[derive(Debug, Clone, Copy)]
pub struct Stretch {
    pub rank: u32,
    pub activity: u32,
    pub from: u64,
    pub to: u64,
    pub weight: f64,
}

impl Stretch {
    pub fn new(rank: u32, activity: u32, from: u64, to: u64) -> Stretch {
        Stretch {
            rank,
            activity,
            from,
            to,
            weight: (to - from) as f64,
        }
    }
}

/// What the walk adds up: time and weight per rank and per (rank,
/// activity), and the heaviest stretches.
pub struct Walk {
    from: u64,
    to: u64,
    current: Option<Stretch>,
    /// Every stretch, when kept (to split by phase).
    pub all: Option<Vec<Stretch>>,
    pub by_rank: HashMap<u32, (u64, f64)>,
    pub by_activity: HashMap<(u32, u32), (u64, f64)>,
    pub longest: Vec<Stretch>,
}

impl Walk {
    pub fn new(from: u64, to: u64) -> Walk {
        Walk {
            from,
            to,
            current: None,
            all: None,
            by_rank: HashMap::default(),
            by_activity: HashMap::default(),
            longest: Vec::new(),
        }
    }

    /// The same, keeping every stretch.
    pub fn keeping(from: u64, to: u64) -> Walk {
        Walk {
            all: Some(Vec::new()),
            ..Walk::new(from, to)
        }
    }

    /// Time `a..b` on `rank` doing `activity`, before everything pushed so far.
    pub fn push(&mut self, rank: u32, activity: u32, a: u64, b: u64) {
        let (a, b) = (a.max(self.from), b.min(self.to));
        if b > a {
            self.push_weighted(rank, activity, a, b, (b - a) as f64);
        }
    }

    /// The same with a weight of its own (`a..b` within the window).
    pub fn push_weighted(&mut self, rank: u32, activity: u32, a: u64, b: u64, weight: f64) {
        if b <= a {
            return;
        }
        if let Some(c) = &mut self.current {
            if c.rank == rank && c.activity == activity && c.from == b {
                c.from = a;
                c.weight += weight;
                return;
            }
        }
        self.flush();
        self.current = Some(Stretch {
            rank,
            activity,
            from: a,
            to: b,
            weight,
        });
    }

    pub fn flush(&mut self) {
        let Some(c) = self.current.take() else { return };
        if let Some(all) = &mut self.all {
            all.push(c);
        }
        let ns = c.to - c.from;
        let r = self.by_rank.entry(c.rank).or_default();
        r.0 += ns;
        r.1 += c.weight;
        let r = self.by_activity.entry((c.rank, c.activity)).or_default();
        r.0 += ns;
        r.1 += c.weight;
        if self.longest.len() < SEGMENTS_SHOWN {
            self.longest.push(c);
        } else if let Some(min) = self
            .longest
            .iter_mut()
            .min_by(|x, y| x.weight.total_cmp(&y.weight).then(y.from.cmp(&x.from)))
        {
            if c.weight > min.weight {
                *min = c;
            }
        }
    }
}

/// The call before `at` in its thread.
pub fn previous_call(trace: &Trace, at: EventRef) -> Option<EventRef> {
    let records = &trace.held(at.rank).thread(at.thread)?.records;
    (0..at.pos())
        .rev()
        .find(|&p| records.is_call(p))
        .map(|p| EventRef {
            index: p as u32,
            ..at
        })
}
