//! A collective instance as the process that owns it sees it: its
//! members' clock groups, hosts and bytes, and what sync asks of it
//! (Becker et al. §4: logical messages from enters to exits).
//!
//! Who sends to whom is the serial [`Rule`]: member `k` sends to member
//! `i` when `k` may send (`in_s`), `i` may receive (`in_r`), `k ≠ i`,
//! and for a scan `k` comes before `i`. So an exit depends on every
//! sender but itself (a prefix of them for a scan), and an enter limits
//! every receiver's exit but its own.
//!
//! Over a communicator of N members that is N² pairs; the owner answers
//! in about O(N) with the serial sync's own types: the best enter (or
//! exit) of each μ class but the member asking ([`Extremes`]), and the
//! violations by binary search in the enter times sorted per class
//! ([`Enters`]), exact also where a clock group spans hosts.

use std::cmp::Ordering;

use pmtrace_format::coll::{Flow, Shape};
use pmtrace_matching::collective::{Readiness, Rule, Senders};
pub use pmtrace_sync::extremes::Mu;
use pmtrace_sync::extremes::{Enters, Extremes, Place};

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

impl Part {
    pub fn place(&self) -> Place {
        Place {
            group: self.group,
            host: self.host,
        }
    }
}

impl Inst {
    fn rule(&self) -> Rule {
        Rule {
            shape: self.shape,
            flow: self.flow,
            root: self.root,
        }
    }

    fn scan(&self) -> bool {
        self.rule().is_ordered()
    }

    /// What `ex` says for member `i`: the best of the others' values,
    /// moved by μ (`by`).
    fn best(&self, ex: &Extremes, i: usize, mu: Mu, by: impl Fn(u64, u64) -> u64) -> Option<u64> {
        ex.best(i as u32, self.parts[i].place(), mu, by)
    }

    /// Whether member `k` (an index into `parts`) may send.
    pub fn in_s(&self, k: usize) -> bool {
        let p = &self.parts[k];
        self.rule().may_send(p.me, p.sent)
    }

    /// Whether member `i` may receive.
    pub fn in_r(&self, i: usize) -> bool {
        let p = &self.parts[i];
        self.rule().may_recv(p.me, p.recvd)
    }

    /// Whether `k`'s enter orders `i`'s exit.
    pub fn sends(&self, k: usize, i: usize) -> bool {
        (self.rule()).sends((k, self.in_s(k)), (i, self.in_r(i)))
    }

    /// Per member, in linear time: (its exit depends on some enter, its
    /// enter orders some exit).
    pub fn roles(&self) -> Vec<(bool, bool)> {
        let n = self.parts.len();
        let s: Vec<bool> = (0..n).map(|k| self.in_s(k)).collect();
        let r: Vec<bool> = (0..n).map(|k| self.in_r(k)).collect();
        let (receives, sends) = self.rule().ends(&s, &r);
        receives.into_iter().zip(sends).collect()
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
        let value = |ex: &Extremes, i: usize| self.best(ex, i, mu, |v, m| v + m);
        if self.scan() {
            for i in 0..n {
                if self.in_r(i) {
                    out[i] = value(&ex, i);
                }
                if roles[i].1 {
                    ex.add(
                        i as u32,
                        self.parts[i].place(),
                        enter[i].expect("a sender's enter"),
                    );
                }
            }
        } else {
            for k in (0..n).filter(|&k| roles[k].1) {
                ex.add(
                    k as u32,
                    self.parts[k].place(),
                    enter[k].expect("a sender's enter"),
                );
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
            self.best(ex, k, mu, |v, m| v.saturating_sub(m))
                .unwrap_or(u64::MAX)
        };
        let add = |ex: &mut Extremes, i: usize| {
            if let (true, Some(t)) = (self.in_r(i), exit[i]) {
                ex.add(i as u32, self.parts[i].place(), t);
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
                        cc += u64::from(tx < enter[k] + mu.between(a.place(), b.place()));
                    }
                }
            }
            return (reversed, cc);
        }
        let enters = Enters::new(
            (0..n)
                .filter(|&k| self.in_s(k))
                .map(|k| (self.parts[k].place(), enter[k])),
        );
        for i in (0..n).filter(|&i| self.in_r(i)) {
            let Some(tx) = exit[i] else { continue };
            let (r, c) = enters.late(self.parts[i].place(), tx, mu);
            reversed += r;
            cc += c;
        }
        (reversed, cc)
    }
}

/// How far the owner got with an instance's exits during the forward
/// replay ([`Inst::ready`]): which enters came ([`Readiness`], the serial
/// replay's rule, over the senders whose enters come to the owner: those
/// that order some exit, [`Inst::roles`]),
/// whether an unordered instance's needs went out, and for a scan the next
/// member whose need did not and the senders before it.
pub struct Progress {
    sender: Vec<bool>,
    r: Readiness,
    done: bool,
    at: usize,
    before: Extremes,
}

impl Inst {
    pub fn progress(&self) -> Progress {
        let sender: Vec<bool> = self.roles().into_iter().map(|r| r.1).collect();
        let r = Readiness::new(&Senders {
            sender: &sender,
            ordered: self.scan(),
        });
        Progress {
            sender,
            r,
            done: false,
            at: 0,
            before: Extremes::new(Ordering::Greater),
        }
    }

    /// The enters of members `newly` came (their times in `enter`): the
    /// exits whose needs are now known, with those needs. An unordered
    /// instance's needs go out together once every sender entered; a
    /// scan's, member by member, once the senders before it entered and,
    /// if it sends, its own enter (which the members after it wait for).
    pub fn ready(
        &self,
        p: &mut Progress,
        enter: &[Option<u64>],
        newly: &[usize],
        mu: Mu,
    ) -> Vec<(usize, u64)> {
        let view = Senders {
            sender: &p.sender,
            ordered: self.scan(),
        };
        for &k in newly.iter().filter(|&&k| p.sender[k]) {
            p.r.enter(&view, k as u32);
        }
        let mut out = Vec::new();
        if self.scan() {
            while p.at < self.parts.len() && p.r.ready(&view, p.at as u32) {
                let i = p.at;
                if p.sender[i] && enter[i].is_none() {
                    break;
                }
                if self.in_r(i) {
                    if let Some(v) = self.best(&p.before, i, mu, |v, m| v + m) {
                        out.push((i, v));
                    }
                }
                if p.sender[i] {
                    (p.before).add(i as u32, self.parts[i].place(), enter[i].expect("entered"));
                }
                p.at += 1;
            }
        } else if p.r.all_in() && !p.done {
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
                    // Groups within hosts, as clocks mostly are, but
                    // some (group 99) span hosts.
                    group: match r.next(4) {
                        0 => 99,
                        g => host * 10 + g as u32,
                    },
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
            let between =
                |k: usize, i: usize| mu.between(inst.parts[k].place(), inst.parts[i].place());
            let needs = inst.exit_needs(&enter.iter().map(|&t| Some(t)).collect::<Vec<_>>(), mu);
            let limits = inst.enter_limits(&exit, mu);
            let (mut rev, mut cc) = (0, 0);
            for i in 0..n {
                let want = pairs(i).map(|k| enter[k] + between(k, i)).max();
                assert_eq!(needs[i], want, "exit need of {i} in {inst:?}");
                assert_eq!(inst.roles()[i].0, pairs(i).next().is_some());
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
                assert_eq!(inst.roles()[k].1, !receivers.is_empty());
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
            for &k in order.iter().filter(|&&k| inst.roles()[k].1) {
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
