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

use pmtrace_matching::collective::Readiness;

use super::graph::{Dep, Graph, Node, Out};

/// Visits every node of `g` once, in a causal order, smallest `key` first
/// among the ready ones (ties by location), giving `visit` the node and
/// its key. Returns how many nodes were visited before their dependencies
/// (lost events).
pub fn replay<K: Ord + Copy>(
    g: &Graph,
    key: impl Fn(Node) -> K,
    mut visit: impl FnMut(Node, K),
) -> u64 {
    replay_ready(g, key, |n, k, _| visit(n, k))
}

/// [`replay`], `visit` seeing also how far each collective instance got
/// (its [`Readiness`], by instance) before the node.
pub fn replay_ready<K: Ord + Copy>(
    g: &Graph,
    key: impl Fn(Node) -> K,
    mut visit: impl FnMut(Node, K, &[Readiness]),
) -> u64 {
    let mut r = Replay {
        g,
        next: vec![0; g.locs.len()],
        insts: g.insts.iter().map(Readiness::new).collect(),
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
            visit(n, k, &r.insts);
            left -= 1;
            r.next[loc as usize] += 1;
            for &out in g.outs(n) {
                match out {
                    Out::Msg(to) => r.offer(to.loc, &key, &mut heap),
                    Out::Enter { inst, member } => {
                        // The members whose exits this enter may have made
                        // ready (offering one that is not ready does nothing).
                        let i = inst as usize;
                        for j in r.insts[i].enter(&g.insts[i], member) {
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
    /// Per instance: which exits its enters so far made ready.
    insts: Vec<Readiness>,
    /// The location's next node is in the heap.
    queued: Vec<bool>,
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
    /// a collective exit.
    fn ready(&self, d: Dep) -> bool {
        match d {
            Dep::Msg(s) => self.next[s.loc as usize] > s.k,
            Dep::Coll { inst, member } => {
                let i = inst as usize;
                self.insts[i].ready(&self.g.insts[i], member)
            }
        }
    }
}
