//! A collective instance as the process that owns it sees it: its
//! members' clock groups, hosts and bytes, and what sync asks of it
//! (Becker et al. §4: logical messages from enters to exits).
//!
//! Member `k` sends to member `i` (`Inst::sends`, the serial
//! [`Instance::sends`](pmtrace_matching::collective::Instance::sends))
//! when `k` may send (`in_s`), `i` may receive (`in_r`), `k ≠ i`, and for
//! a scan `k` comes before `i`. So an exit depends on every sender but
//! itself (a prefix of them for a scan), and an enter limits every
//! receiver's exit but its own.
//!
//! Over a communicator of N members that is N² pairs; the owner answers
//! in O(N) by the three values the minimum latency takes: 0 within a clock
//! group, μ_intra within a host, μ_inter across hosts. The latest enter
//! of each class, excluding the member asking, is the best of the top two
//! members of its group, of the top two groups of its host, and of the
//! top two hosts ([`Extremes`]); violations are counted by binary search
//! in the enter times sorted per class.

use std::cmp::Ordering;

use rustc_hash::FxHashMap as HashMap;

use pmtrace_matching::clocks::Shape;
use pmtrace_matching::collective::Flow;

/// A member as the owner knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Rank in the communicator.
    pub me: u32,
    pub group: u32,
    pub host: u32,
    pub sent: u64,
    pub recvd: u64,
    pub has_exit: bool,
}

/// The instance: its members sorted by communicator rank.
#[derive(Debug, Clone)]
pub struct Inst {
    pub shape: Shape,
    pub flow: Flow,
    pub root: Option<u32>,
    pub parts: Vec<Part>,
}

/// Minimum latencies: within a host across clock groups, and across hosts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mu {
    pub intra: u64,
    pub inter: u64,
}

impl Mu {
    fn between(&self, a: &Part, b: &Part) -> u64 {
        if a.group == b.group {
            0
        } else if a.host == b.host {
            self.intra
        } else {
            self.inter
        }
    }
}

impl Inst {
    fn scan(&self) -> bool {
        matches!(self.shape, Shape::Scan | Shape::Exscan)
    }

    /// Whether member `k` (an index into `parts`) may send.
    pub fn in_s(&self, k: usize) -> bool {
        let p = &self.parts[k];
        match self.flow {
            Flow::Unordered => false,
            Flow::Barrier => true,
            Flow::Data => p.sent > 0 && (self.shape != Shape::OneToN || Some(p.me) == self.root),
        }
    }

    /// Whether member `i` may receive.
    pub fn in_r(&self, i: usize) -> bool {
        let p = &self.parts[i];
        match self.flow {
            Flow::Unordered => false,
            Flow::Barrier => true,
            Flow::Data => p.recvd > 0 && (self.shape != Shape::NToOne || Some(p.me) == self.root),
        }
    }

    /// Whether `k`'s enter orders `i`'s exit.
    pub fn sends(&self, k: usize, i: usize) -> bool {
        k != i && self.in_s(k) && self.in_r(i) && (!self.scan() || k < i)
    }

    /// Whether `i`'s exit depends on some enter.
    pub fn has_deps(&self, i: usize) -> bool {
        self.in_r(i)
            && (0..self.parts.len())
                .filter(|&k| self.in_s(k) && k != i)
                .any(|k| !self.scan() || k < i)
    }

    /// Whether `k`'s enter orders some exit (of a member with an exit or not).
    pub fn is_sender(&self, k: usize) -> bool {
        self.in_s(k)
            && (0..self.parts.len())
                .filter(|&i| self.in_r(i) && i != k)
                .any(|i| !self.scan() || k < i)
    }

    /// Per member, in linear time: (its exit depends on some enter, its
    /// enter orders some exit), as [`Inst::has_deps`] and
    /// [`Inst::is_sender`] say one by one.
    pub fn roles(&self) -> Vec<(bool, bool)> {
        let n = self.parts.len();
        let s: Vec<bool> = (0..n).map(|k| self.in_s(k)).collect();
        let r: Vec<bool> = (0..n).map(|k| self.in_r(k)).collect();
        if self.scan() {
            let mut out = vec![(false, false); n];
            let mut senders_before = 0;
            for i in 0..n {
                out[i].0 = r[i] && senders_before > 0;
                senders_before += usize::from(s[i]);
            }
            let mut receivers_after = 0;
            for k in (0..n).rev() {
                out[k].1 = s[k] && receivers_after > 0;
                receivers_after += usize::from(r[k]);
            }
            return out;
        }
        let ns = s.iter().filter(|&&x| x).count();
        let nr = r.iter().filter(|&&x| x).count();
        (0..n)
            .map(|k| {
                (
                    r[k] && ns - usize::from(s[k]) > 0,
                    s[k] && nr - usize::from(r[k]) > 0,
                )
            })
            .collect()
    }

    /// What each member's exit must be at least (`None`: no sender), from
    /// the members' `enter` times; every sender must have one.
    pub fn exit_needs(&self, enter: &[Option<u64>], mu: Mu) -> Vec<Option<u64>> {
        let n = self.parts.len();
        let mut out = vec![None; n];
        // A member that may send but to no one but itself orders nothing:
        // its enter is never asked for.
        let roles = self.roles();
        let mut ex = Extremes::new(Ordering::Greater);
        let value = |ex: &Extremes, i: usize| ex.best(&self.parts[i], i, mu, |v, m| v + m);
        if self.scan() {
            for i in 0..n {
                if self.in_r(i) {
                    out[i] = value(&ex, i);
                }
                if roles[i].1 {
                    ex.add(&self.parts[i], i, enter[i].expect("a sender's enter"));
                }
            }
        } else {
            for k in (0..n).filter(|&k| roles[k].1) {
                ex.add(&self.parts[k], k, enter[k].expect("a sender's enter"));
            }
            for i in (0..n).filter(|&i| self.in_r(i)) {
                out[i] = value(&ex, i);
            }
        }
        out
    }

    /// How late each sender's enter may be, from the members' `exit`
    /// times: the earliest exit it orders less μ (`u64::MAX` where it
    /// orders no exit that was recorded; `None` for a member that sends
    /// to no one).
    pub fn enter_limits(&self, exit: &[Option<u64>], mu: Mu) -> Vec<Option<u64>> {
        let n = self.parts.len();
        let mut out = vec![None; n];
        let roles = self.roles();
        let mut ex = Extremes::new(Ordering::Less);
        let limit = |ex: &Extremes, k: usize| {
            ex.best(&self.parts[k], k, mu, |v, m| v.saturating_sub(m))
                .unwrap_or(u64::MAX)
        };
        let add = |ex: &mut Extremes, i: usize| {
            if let (true, Some(t)) = (self.in_r(i), exit[i]) {
                ex.add(&self.parts[i], i, t);
            }
        };
        if self.scan() {
            for k in (0..n).rev() {
                if roles[k].1 {
                    out[k] = Some(limit(&ex, k));
                }
                add(&mut ex, k);
            }
        } else {
            for i in 0..n {
                add(&mut ex, i);
            }
            for k in (0..n).filter(|&k| roles[k].1) {
                out[k] = Some(limit(&ex, k));
            }
        }
        out
    }

    /// The instance's violations in `enter` and `exit` times: logical
    /// messages between clock groups received before they were sent, and
    /// before send + μ; (reversed, clock condition).
    pub fn violations(&self, enter: &[u64], exit: &[Option<u64>], mu: Mu) -> (u64, u64) {
        let n = self.parts.len();
        let (mut reversed, mut cc) = (0, 0);
        if self.scan() {
            for (i, tx) in exit.iter().enumerate() {
                let Some(tx) = *tx else { continue };
                for k in (0..n).filter(|&k| self.sends(k, i)) {
                    let (a, b) = (&self.parts[k], &self.parts[i]);
                    if a.group != b.group {
                        reversed += u64::from(tx < enter[k]);
                        cc += u64::from(tx < enter[k] + mu.between(a, b));
                    }
                }
            }
            return (reversed, cc);
        }
        // Enter times of the senders, sorted, over all, per host, per group.
        let mut all: Vec<u64> = Vec::new();
        let mut hosts: HashMap<u32, Vec<u64>> = HashMap::default();
        let mut groups: HashMap<u32, Vec<u64>> = HashMap::default();
        for k in (0..n).filter(|&k| self.in_s(k)) {
            let p = &self.parts[k];
            all.push(enter[k]);
            hosts.entry(p.host).or_default().push(enter[k]);
            groups.entry(p.group).or_default().push(enter[k]);
        }
        all.sort_unstable();
        for v in hosts.values_mut().chain(groups.values_mut()) {
            v.sort_unstable();
        }
        let empty = Vec::new();
        // How many of `v` are later than `tx − μ` (all of them when tx < μ).
        let later = |v: &[u64], tx: u64, m: u64| match tx.checked_sub(m) {
            Some(x) => v.len() - v.partition_point(|&t| t <= x),
            None => v.len(),
        };
        for i in (0..n).filter(|&i| self.in_r(i)) {
            let Some(tx) = exit[i] else { continue };
            let p = &self.parts[i];
            let host = hosts.get(&p.host).unwrap_or(&empty);
            let group = groups.get(&p.group).unwrap_or(&empty);
            // The member itself is of its own group: never counted.
            reversed += (later(&all, tx, 0) - later(host, tx, 0)) as u64
                + (later(host, tx, 0) - later(group, tx, 0)) as u64;
            cc += (later(&all, tx, mu.inter) - later(host, tx, mu.inter)) as u64
                + (later(host, tx, mu.intra) - later(group, tx, mu.intra)) as u64;
        }
        (reversed, cc)
    }
}

/// How far the owner got with an instance's exits during the forward
/// replay ([`Inst::ready`]).
pub struct Progress {
    /// Senders whose enter has not come (all but a scan).
    missing: usize,
    done: bool,
    /// Per member: its enter orders some exit.
    sender: Vec<bool>,
    /// A scan: the next member, and the senders before it.
    at: usize,
    before: Extremes,
}

impl Inst {
    pub fn progress(&self) -> Progress {
        let sender: Vec<bool> = self.roles().into_iter().map(|r| r.1).collect();
        Progress {
            missing: sender.iter().filter(|&&x| x).count(),
            sender,
            done: false,
            at: 0,
            before: Extremes::new(Ordering::Greater),
        }
    }

    /// The exits whose need became known once the enters of `newly` came
    /// (their times set in `enter`): (member, need), for every member with
    /// a sender. A scan's exit needs the senders before it only; any other
    /// exit waits for every sender.
    pub fn ready(
        &self,
        p: &mut Progress,
        enter: &[Option<u64>],
        newly: &[usize],
        mu: Mu,
    ) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        if self.scan() {
            while p.at < self.parts.len() {
                let i = p.at;
                if p.sender[i] && enter[i].is_none() {
                    break;
                }
                if self.in_r(i) {
                    if let Some(v) = p.before.best(&self.parts[i], i, mu, |v, m| v + m) {
                        out.push((i, v));
                    }
                }
                if p.sender[i] {
                    p.before.add(&self.parts[i], i, enter[i].expect("entered"));
                }
                p.at += 1;
            }
            return out;
        }
        p.missing -= newly.iter().filter(|&&k| p.sender[k]).count();
        if p.missing == 0 && !p.done {
            p.done = true;
            for (i, need) in self.exit_needs(enter, mu).into_iter().enumerate() {
                if let Some(v) = need {
                    out.push((i, v));
                }
            }
        }
        out
    }
}

/// The best two entries with different keys.
#[derive(Debug, Clone, Copy)]
struct Top2 {
    /// (value, key), best first.
    e: [Option<(u64, u64)>; 2],
}

impl Top2 {
    const EMPTY: Top2 = Top2 { e: [None, None] };

    fn add(&mut self, better: Ordering, v: u64, key: u64) {
        let beats = |a: u64, b: u64| a.cmp(&b) == better;
        match self.e {
            [Some((v0, k0)), _] if k0 == key => {
                if beats(v, v0) {
                    self.e[0] = Some((v, key));
                }
            }
            [_, Some((v1, k1))] if k1 == key => {
                if beats(v, v1) {
                    self.e[1] = Some((v, key));
                    if beats(v, self.e[0].expect("first").0) {
                        self.e.swap(0, 1);
                    }
                }
            }
            [None, _] => self.e[0] = Some((v, key)),
            [Some((v0, _)), second] => {
                if beats(v, v0) {
                    self.e = [Some((v, key)), self.e[0]];
                } else if second.is_none_or(|(v1, _)| beats(v, v1)) {
                    self.e[1] = Some((v, key));
                }
            }
        }
    }

    /// The best value whose key is not `not`.
    fn best_but(&self, not: u64) -> Option<u64> {
        self.e
            .iter()
            .flatten()
            .find(|(_, k)| *k != not)
            .map(|(v, _)| *v)
    }

    fn best(&self) -> Option<u64> {
        self.e[0].map(|(v, _)| v)
    }
}

/// The latest (or earliest) values of members, by member within each
/// clock group, by group within each host, and by host.
struct Extremes {
    better: Ordering,
    groups: HashMap<u32, Top2>,
    hosts: HashMap<u32, Top2>,
    all: Top2,
}

impl Extremes {
    fn new(better: Ordering) -> Extremes {
        Extremes {
            better,
            groups: HashMap::default(),
            hosts: HashMap::default(),
            all: Top2::EMPTY,
        }
    }

    fn add(&mut self, p: &Part, member: usize, v: u64) {
        let g = self.groups.entry(p.group).or_insert(Top2::EMPTY);
        g.add(self.better, v, member as u64);
        let gv = g.best().expect("just added");
        let h = self.hosts.entry(p.host).or_insert(Top2::EMPTY);
        h.add(self.better, gv, u64::from(p.group));
        let hv = h.best().expect("just added");
        self.all.add(self.better, hv, u64::from(p.host));
    }

    /// The best over every member but `member` (of part `p`) of its value
    /// moved by the μ between the two (`by(v, μ)`).
    fn best(&self, p: &Part, member: usize, mu: Mu, by: impl Fn(u64, u64) -> u64) -> Option<u64> {
        let same_group = self
            .groups
            .get(&p.group)
            .and_then(|g| g.best_but(member as u64))
            .map(|v| by(v, 0));
        let same_host = self
            .hosts
            .get(&p.host)
            .and_then(|h| h.best_but(u64::from(p.group)))
            .map(|v| by(v, mu.intra));
        let other = self
            .all
            .best_but(u64::from(p.host))
            .map(|v| by(v, mu.inter));
        [same_group, same_host, other]
            .into_iter()
            .flatten()
            .reduce(|a, b| if a.cmp(&b) == self.better { a } else { b })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    fn random_inst(r: &mut Rng) -> Inst {
        let shapes = Shape::ALL;
        let flows = [Flow::Data, Flow::Data, Flow::Barrier, Flow::Unordered];
        let n = 1 + r.next(12) as usize;
        let shape = shapes[r.next(5) as usize];
        let root = matches!(shape, Shape::OneToN | Shape::NToOne).then(|| r.next(n as u64) as u32);
        let mut me = 0;
        let parts = (0..n)
            .map(|_| {
                me += 1 + r.next(2) as u32;
                let host = r.next(3) as u32;
                Part {
                    me: me - 1,
                    host,
                    // Groups within hosts, as clocks are.
                    group: host * 10 + r.next(3) as u32,
                    sent: r.next(3),
                    recvd: r.next(3),
                    has_exit: r.next(5) > 0,
                }
            })
            .collect::<Vec<_>>();
        // The root is a member's communicator rank.
        let root = root.map(|k| parts[k as usize].me);
        Inst {
            shape,
            flow: flows[r.next(4) as usize],
            root,
            parts,
        }
    }

    #[test]
    fn owners_answers_are_those_of_every_pair_one_by_one() {
        let mut r = Rng(7);
        let mu = Mu {
            intra: 5,
            inter: 40,
        };
        for _ in 0..3000 {
            let inst = random_inst(&mut r);
            let n = inst.parts.len();
            let enter: Vec<u64> = (0..n).map(|_| 100 + r.next(100)).collect();
            let exit: Vec<Option<u64>> = (0..n)
                .map(|k| inst.parts[k].has_exit.then(|| enter[k] + r.next(120)))
                .collect();
            let inst = &inst;
            let pairs = |i: usize| (0..n).filter(move |&k| inst.sends(k, i));
            let between = |k: usize, i: usize| mu.between(&inst.parts[k], &inst.parts[i]);
            let needs = inst.exit_needs(&enter.iter().map(|&t| Some(t)).collect::<Vec<_>>(), mu);
            let limits = inst.enter_limits(&exit, mu);
            let (mut rev, mut cc) = (0, 0);
            for i in 0..n {
                let want = pairs(i).map(|k| enter[k] + between(k, i)).max();
                assert_eq!(needs[i], want, "exit need of {i} in {inst:?}");
                assert_eq!(inst.has_deps(i), pairs(i).next().is_some());
                if let Some(tx) = exit[i] {
                    for k in pairs(i).filter(|&k| inst.parts[k].group != inst.parts[i].group) {
                        rev += u64::from(tx < enter[k]);
                        cc += u64::from(tx < enter[k] + between(k, i));
                    }
                }
            }
            #[allow(clippy::needless_range_loop)]
            for k in 0..n {
                let receivers: Vec<usize> = (0..n).filter(|&i| inst.sends(k, i)).collect();
                assert_eq!(inst.is_sender(k), !receivers.is_empty());
                assert_eq!(inst.roles()[k], (inst.has_deps(k), inst.is_sender(k)));
                let want = (!receivers.is_empty()).then(|| {
                    receivers
                        .iter()
                        .filter_map(|&i| exit[i].map(|t| t.saturating_sub(between(k, i))))
                        .min()
                        .unwrap_or(u64::MAX)
                });
                assert_eq!(limits[k], want, "enter limit of {k} in {inst:?}");
            }
            assert_eq!(inst.violations(&enter, &exit, mu), (rev, cc), "{inst:?}");
            // The replay's view: enters one at a time in a random order;
            // every need comes out once, right, and once its senders are in.
            let mut order: Vec<usize> = (0..n).collect();
            for j in (1..n).rev() {
                order.swap(j, r.next(j as u64 + 1) as usize);
            }
            let mut p = inst.progress();
            let mut seen: Vec<Option<u64>> = vec![None; n];
            let mut known = vec![None; n];
            for &k in order.iter().filter(|&&k| inst.is_sender(k)) {
                seen[k] = Some(enter[k]);
                for (i, v) in inst.ready(&mut p, &seen, &[k], mu) {
                    assert!(known[i].is_none(), "twice");
                    assert!(pairs(i).all(|s| seen[s].is_some()), "too early");
                    known[i] = Some(v);
                }
            }
            assert_eq!(known, needs, "{inst:?}");
        }
    }
}
