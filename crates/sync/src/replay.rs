//! Visiting every node of the graph after everything it depends on.
//!
//! Each location is walked in its own order; a location's next node is
//! *ready* once the sends (and collective enters) it depends on were
//! visited. Among ready nodes the one with the smallest key goes first, so
//! a key of corrected time gives a merged order that is both time-ordered
//! and causal. A real run has no causal cycle; a trace with lost events can
//! leave a node waiting for a send that never comes, and then the blocked
//! node with the smallest key is visited anyway (counted as forced).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::graph::{Dep, Graph, Inst, Node, Out};

/// Visits every node of `g` once, in a causal order, smallest `key` first
/// among the ready ones (ties by location), giving `visit` the node and
/// its key. Returns how many nodes were visited before their dependencies
/// (lost events).
pub fn replay<K: Ord + Copy>(
    g: &Graph,
    key: impl Fn(Node) -> K,
    mut visit: impl FnMut(Node, K),
) -> u64 {
    let mut r = Replay {
        g,
        next: vec![0; g.locs.len()],
        entered: g
            .insts
            .iter()
            .map(|i| vec![false; i.members.len()])
            .collect(),
        count: vec![0; g.insts.len()],
        all_to_all: g.insts.iter().map(|i| i.all_to_all()).collect(),
        present: g
            .insts
            .iter()
            .map(|i| i.members.iter().flatten().count() as u32)
            .collect(),
        senders: g.insts.iter().map(Inst::sender_count).collect(),
        senders_in: vec![0; g.insts.len()],
        open_sender: g.insts.iter().map(|i| next_open(i, &[], 0)).collect(),
        queued: vec![false; g.locs.len()],
    };
    let mut heap: BinaryHeap<Reverse<(K, u32)>> = BinaryHeap::new();
    let mut left = g.stamps();
    for loc in 0..g.locs.len() as u32 {
        r.offer(loc, &key, &mut heap);
    }
    let mut forced = 0;
    while left > 0 {
        let (loc, mut k) = match heap.pop() {
            Some(Reverse((k, loc))) => {
                r.queued[loc as usize] = false;
                (loc, k)
            }
            None => {
                forced += 1;
                let loc = (0..g.locs.len() as u32)
                    .filter(|&l| (r.next[l as usize] as usize) < g.len(l))
                    .min_by_key(|&l| key(r.head(l)))
                    .expect("nodes left");
                (loc, key(r.head(loc)))
            }
        };
        // Visit the location's nodes while each is ready and comes before
        // everything queued: what the heap would give, without it.
        loop {
            let n = r.head(loc);
            visit(n, k);
            left -= 1;
            r.next[loc as usize] += 1;
            for &out in g.outs(n) {
                match out {
                    Out::Msg(to) => r.offer(to.loc, &key, &mut heap),
                    Out::Enter { inst, member } => {
                        // The members whose exits this enter may have made
                        // ready (offering one that is not ready does nothing).
                        let i = inst as usize;
                        for j in r.enter(inst, member) {
                            if let Some(m) = &g.insts[i].members[j as usize] {
                                if m.loc != loc {
                                    r.offer(m.loc, &key, &mut heap);
                                }
                            }
                        }
                    }
                }
            }
            let Some(next) = r.ready_head(loc) else {
                break;
            };
            let kn = key(next);
            if heap.peek().is_none_or(|Reverse(top)| (kn, loc) < *top) {
                k = kn;
                continue;
            }
            r.queued[loc as usize] = true;
            heap.push(Reverse((kn, loc)));
            break;
        }
    }
    forced
}

struct Replay<'g, 't> {
    g: &'g Graph<'t>,
    /// Per location: the next node to visit.
    next: Vec<u32>,
    /// Per instance and member: its enter was visited.
    entered: Vec<Vec<bool>>,
    count: Vec<u32>,
    /// Per instance: every exit depends on every enter (`Instance::all_to_all`).
    all_to_all: Vec<bool>,
    present: Vec<u32>,
    /// Per instance: its members that may send, and how many of them
    /// entered; for a scan, the first member that may send and did not
    /// enter yet (the members' count if none), since a member's exit
    /// waits for the senders before it.
    senders: Vec<u32>,
    senders_in: Vec<u32>,
    open_sender: Vec<u32>,
    /// The location's next node is in the heap.
    queued: Vec<bool>,
}

/// The first member from `from` on that may send and has not entered.
fn next_open(inst: &Inst, entered: &[bool], from: u32) -> u32 {
    let n = inst.members.len() as u32;
    (from..n)
        .find(|&k| inst.may_send(k) && !entered.get(k as usize).copied().unwrap_or(false))
        .unwrap_or(n)
}

impl Replay<'_, '_> {
    fn head(&self, loc: u32) -> Node {
        Node {
            loc,
            k: self.next[loc as usize],
        }
    }

    /// The next node of `loc`, if there is one, it is ready, and it is not queued.
    fn ready_head(&self, loc: u32) -> Option<Node> {
        let l = loc as usize;
        if self.queued[l] || self.next[l] as usize >= self.g.len(loc) {
            return None;
        }
        let n = self.head(loc);
        self.g.deps(n).iter().all(|&d| self.ready(d)).then_some(n)
    }

    /// Queues the next node of `loc` if it is ready and not queued yet.
    fn offer<K: Ord + Copy>(
        &mut self,
        loc: u32,
        key: &impl Fn(Node) -> K,
        heap: &mut BinaryHeap<Reverse<(K, u32)>>,
    ) {
        if let Some(n) = self.ready_head(loc) {
            self.queued[loc as usize] = true;
            heap.push(Reverse((key(n), loc)));
        }
    }

    /// Whether what `d` waits for was visited: in constant time, also for
    /// a collective exit (whether every sender but itself entered).
    fn ready(&self, d: Dep) -> bool {
        match d {
            Dep::Msg(s) => self.next[s.loc as usize] > s.k,
            Dep::Coll { inst, member } => {
                let i = inst as usize;
                let inst = &self.g.insts[i];
                if self.all_to_all[i] {
                    // Every present member, this one included (its enter
                    // came first on its own location).
                    self.count[i] >= self.present[i]
                } else if !inst.may_recv(member) {
                    true
                } else if inst.ordered() {
                    self.open_sender[i] >= member
                } else {
                    let own = u32::from(inst.may_send(member));
                    let own_in = own & u32::from(self.entered[i][member as usize]);
                    self.senders_in[i] - own_in >= self.senders[i] - own
                }
            }
        }
    }

    /// Visits the enter of `member`; returns the members whose exits may
    /// have become ready by it: all of them when the instance's last
    /// enters come in, for a scan those up to its next sender still out,
    /// else none (O(N) per instance in all, not per enter).
    fn enter(&mut self, inst: u32, member: u32) -> std::ops::Range<u32> {
        let i = inst as usize;
        let g = self.g;
        let instance = &g.insts[i];
        let n = instance.members.len() as u32;
        self.entered[i][member as usize] = true;
        self.count[i] += 1;
        if self.all_to_all[i] {
            return if self.count[i] == self.present[i] {
                0..n
            } else {
                0..0
            };
        }
        if !instance.may_send(member) {
            return 0..0;
        }
        self.senders_in[i] += 1;
        if instance.ordered() {
            let open = self.open_sender[i];
            if member != open {
                return 0..0;
            }
            let next = next_open(instance, &self.entered[i], open + 1);
            self.open_sender[i] = next;
            // Members open + 1 ..= next now have every sender before them in.
            return (open + 1).min(n)..(next + 1).min(n);
        }
        // A member that may send waits for the others (all but one in),
        // any other member for all of them.
        if self.senders_in[i] + 1 >= self.senders[i] {
            0..n
        } else {
            0..0
        }
    }
}
