//! The best of a collective's senders for one member: the one rule that
//! both the serial forward pass ([`crate::clc`]) and the owners of
//! `pmtrace-mpi` ask, so that an exit gets the same time either way.
//!
//! An exit must come after every sender's enter plus the minimum latency
//! between the two: 0 within a clock group, μ within a host across groups,
//! μ across hosts (and the mirror image for the latest an enter may be).
//! Over N members that is N² pairs; [`Extremes`] answers each member in
//! about constant time from the best value of each class that excludes it:
//! - its own group, but itself: the two best members of each group;
//! - its host, other groups: the two best groups of each host;
//! - other hosts and other groups: every (host, group) pair's best, in
//!   order, walked from the best until one is of neither (the pairs of
//!   the member's own host or group are all it can pass over).
//!
//! A clock group may span hosts (ranks of several hosts that read one
//! clock): its members on another host are still μ 0 away.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use rustc_hash::FxHashMap as HashMap;

/// The best two values with different keys, best first.
#[derive(Debug, Clone, Copy)]
pub struct Top2 {
    e: [Option<(u64, u64)>; 2],
}

impl Top2 {
    pub const EMPTY: Top2 = Top2 { e: [None, None] };

    /// Offers `v` for `key` (a key already held keeps the better value).
    pub fn add(&mut self, better: Ordering, v: u64, key: u64) {
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
    pub fn best_but(&self, not: u64) -> Option<u64> {
        self.e
            .iter()
            .flatten()
            .find(|(_, k)| *k != not)
            .map(|(v, _)| *v)
    }
}

/// Where a member is: its clock group and host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    pub group: u32,
    pub host: u32,
}

/// The minimum latencies between two places in different groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mu {
    /// Within a host.
    pub intra: u64,
    /// Across hosts.
    pub inter: u64,
}

impl Mu {
    /// The minimum latency from `a` to `b`.
    pub fn between(&self, a: Place, b: Place) -> u64 {
        if a.group == b.group {
            0
        } else if a.host == b.host {
            self.intra
        } else {
            self.inter
        }
    }
}

/// The best (latest with [`Ordering::Greater`], earliest with
/// [`Ordering::Less`]) values offered by members, by class (see the
/// module docs). Values can be added between questions.
#[derive(Debug, Clone)]
pub struct Extremes {
    better: Ordering,
    /// Per group: the two best members.
    groups: HashMap<u32, Top2>,
    /// Per host: the two best of its (host, group) pairs, by group.
    hosts: HashMap<u32, Top2>,
    /// Per (host, group): the best value.
    pairs: HashMap<Place, u64>,
    /// Every pair's best, as (value, host, group).
    ordered: BTreeSet<(u64, u32, u32)>,
}

impl Extremes {
    pub fn new(better: Ordering) -> Extremes {
        Extremes {
            better,
            groups: HashMap::default(),
            hosts: HashMap::default(),
            pairs: HashMap::default(),
            ordered: BTreeSet::new(),
        }
    }

    fn beats(&self, a: u64, b: u64) -> bool {
        a.cmp(&b) == self.better
    }

    /// Adds member `member`'s value `v`, at `at`.
    pub fn add(&mut self, member: u32, at: Place, v: u64) {
        let better = self.better;
        (self.groups.entry(at.group).or_insert(Top2::EMPTY)).add(better, v, u64::from(member));
        let best = match self.pairs.get(&at) {
            Some(&old) if !self.beats(v, old) => return,
            Some(&old) => {
                self.ordered.remove(&(old, at.host, at.group));
                v
            }
            None => v,
        };
        self.pairs.insert(at, best);
        self.ordered.insert((best, at.host, at.group));
        (self.hosts.entry(at.host).or_insert(Top2::EMPTY)).add(better, best, u64::from(at.group));
    }

    /// The best over every member but `member` (at `at`) of its value
    /// moved by the μ between the two (`by(v, μ)`).
    pub fn best(
        &self,
        member: u32,
        at: Place,
        mu: Mu,
        by: impl Fn(u64, u64) -> u64,
    ) -> Option<u64> {
        let same_group = (self.groups.get(&at.group))
            .and_then(|g| g.best_but(u64::from(member)))
            .map(|v| by(v, 0));
        let same_host = (self.hosts.get(&at.host))
            .and_then(|h| h.best_but(u64::from(at.group)))
            .map(|v| by(v, mu.intra));
        let mut pairs = self.ordered.iter();
        let other = |&&(_, h, g): &&(u64, u32, u32)| h != at.host && g != at.group;
        let far = match self.better {
            Ordering::Less => pairs.find(other),
            _ => pairs.rev().find(other),
        };
        let far = far.map(|&(v, _, _)| by(v, mu.inter));
        [same_group, same_host, far]
            .into_iter()
            .flatten()
            .reduce(|a, b| if self.beats(a, b) { a } else { b })
    }
}

/// The enter times of a collective's senders, sorted over the instance,
/// by host, by clock group and by both, to count in O(log N) per exit the
/// logical messages it received too early ([`Enters::late`]).
#[derive(Debug, Clone, Default)]
pub struct Enters {
    all: Vec<u64>,
    hosts: HashMap<u32, Vec<u64>>,
    groups: HashMap<u32, Vec<u64>>,
    pairs: HashMap<Place, Vec<u64>>,
}

impl Enters {
    /// The senders' (place, enter time).
    pub fn new(senders: impl IntoIterator<Item = (Place, u64)>) -> Enters {
        let mut e = Enters::default();
        for (at, te) in senders {
            e.all.push(te);
            e.hosts.entry(at.host).or_default().push(te);
            e.groups.entry(at.group).or_default().push(te);
            e.pairs.entry(at).or_default().push(te);
        }
        e.all.sort_unstable();
        for v in (e.hosts.values_mut())
            .chain(e.groups.values_mut())
            .chain(e.pairs.values_mut())
        {
            v.sort_unstable();
        }
        e
    }

    /// Of the messages from every sender to an exit at `tx` at `at`, but
    /// those of its own clock group (one clock cannot misorder them):
    /// how many are received before they were sent (the enter later than
    /// the exit), and how many before send + μ.
    pub fn late(&self, at: Place, tx: u64, mu: Mu) -> (u64, u64) {
        let none: &[u64] = &[];
        let host = self.hosts.get(&at.host).map_or(none, Vec::as_slice);
        let group = self.groups.get(&at.group).map_or(none, Vec::as_slice);
        let both = self.pairs.get(&at).map_or(none, Vec::as_slice);
        // How many te of `v` have te + μ > tx.
        let within = |v: &[u64], m: u64| match tx.checked_sub(m) {
            Some(x) => (v.len() - v.partition_point(|&e| e <= x)) as u64,
            None => v.len() as u64,
        };
        let reversed = within(&self.all, 0) - within(group, 0);
        // Other groups of this host at μ within a host; other hosts and
        // groups at μ across hosts: all, less this host, less this group,
        // plus both (taken off twice).
        let clock = within(host, mu.intra) - within(both, mu.intra)
            + within(&self.all, mu.inter)
            + within(both, mu.inter)
            - within(host, mu.inter)
            - within(group, mu.inter);
        (reversed, clock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(group: u32, host: u32) -> Place {
        Place { group, host }
    }

    const MU: Mu = Mu {
        intra: 10,
        inter: 100,
    };

    /// Group 7 spans hosts 0 and 1: its member on host 1 is μ 0 from
    /// its member on host 0, though a host apart.
    #[test]
    fn a_group_spanning_hosts_keeps_mu_zero_between_its_members() {
        let mut ex = Extremes::new(Ordering::Greater);
        ex.add(0, at(7, 0), 1_000);
        ex.add(1, at(7, 1), 500);
        ex.add(2, at(8, 1), 400);
        let plus = |v, m| v + m;
        // Member 1 (group 7, host 1): member 0 at 1,000 + 0, member 2 at
        // 400 + 10; not 1,000 + 100.
        assert_eq!(ex.best(1, at(7, 1), MU, plus), Some(1_000));
        // Member 2 (group 8, host 1): member 1 at 500 + 10, member 0 at
        // 1,000 + 100.
        assert_eq!(ex.best(2, at(8, 1), MU, plus), Some(1_100));
        // Member 0: member 1 at 500 + 0, member 2 at 400 + 100.
        assert_eq!(ex.best(0, at(7, 0), MU, plus), Some(500));
        // A member of a third group on host 2: the best pair of neither
        // its host nor its group, 1,000 + 100.
        assert_eq!(ex.best(3, at(9, 2), MU, plus), Some(1_100));
    }

    #[test]
    fn earliest_values_with_mu_taken_off() {
        let mut ex = Extremes::new(Ordering::Less);
        ex.add(0, at(1, 0), 300);
        ex.add(1, at(2, 0), 250);
        ex.add(2, at(3, 1), 260);
        let minus = |v: u64, m| v.saturating_sub(m);
        // Member 0: 250 − 10 (same host), 260 − 100 (other host).
        assert_eq!(ex.best(0, at(1, 0), MU, minus), Some(160));
        // Member 2: 250 − 100.
        assert_eq!(ex.best(2, at(3, 1), MU, minus), Some(150));
        // Alone in its class, a member gets nothing of itself.
        let mut one = Extremes::new(Ordering::Less);
        one.add(0, at(1, 0), 300);
        assert_eq!(one.best(0, at(1, 0), MU, minus), None);
    }

    /// Group 7 spans hosts 0 and 1; an exit of it on host 1 at 450.
    #[test]
    fn late_messages_are_counted_by_class_and_never_within_a_group() {
        let e = Enters::new([
            (at(7, 0), 500), // same group, other host: never counted
            (at(8, 1), 445), // same host: late only with μ 10
            (at(9, 2), 460), // other host and group: reversed
            (at(9, 2), 400), // 400 + 100 > 450: late with μ
            (at(9, 2), 300), // in time either way
        ]);
        assert_eq!(e.late(at(7, 1), 450, MU), (1, 3));
        assert_eq!(e.late(at(7, 1), 450, Mu::default()), (1, 1));
    }

    /// A better value of a pair replaces its old one in the order.
    #[test]
    fn a_pair_keeps_its_best_value_only() {
        let mut ex = Extremes::new(Ordering::Greater);
        ex.add(0, at(1, 0), 100);
        ex.add(1, at(1, 0), 300);
        ex.add(2, at(1, 0), 200);
        assert_eq!(ex.ordered.len(), 1);
        assert_eq!(ex.best(9, at(2, 1), MU, |v, m| v + m), Some(400));
    }
}
