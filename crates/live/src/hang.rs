//! Why a hung job is hung: a wait-for graph over the ranks.
//!
//! Each rank blocked in MPI waits on a conjunction of *clauses*, each a
//! set of ranks any one of which would do: a receive from one source is a
//! clause of one rank; a wildcard receive, or a `MPI_Waitany`, one clause
//! of every rank it could take from; a `MPI_Waitall` or a send-receive, one
//! clause per operation; a collective, one clause per member that has not
//! entered it.
//!
//! A rank *can go on* when it is not blocked (computing, or in a call that
//! waits on no one), or when every clause of its holds a rank that can go
//! on. Ranks that have finished or gone cannot. The blocked ranks left over
//! at the fixpoint can never go on: if their waits close a cycle, that is a
//! **deadlock**; if they end at a rank that finished or died, the job is
//! **stalled** there. When every blocked rank can go on in principle, a
//! chain of waits that has lasted longer than the threshold and ends at a
//! computing rank is a **stall** too: the job waits on that rank.

use serde::Serialize;

use crate::site::Frame;

/// What a rank is doing, as the graph needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub state: State,
    /// The call it is in (for the report), if any.
    pub call: Option<String>,
    /// How long it has been in that call, or computing.
    pub for_ns: u64,
    /// Where the call came from (its innermost application frame), once
    /// known.
    pub site: Option<Frame>,
    /// Blocked on others: the clauses (see the module). `None`: not
    /// blocked, or not known whom it waits for.
    pub clauses: Option<Vec<Vec<u32>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Mpi,
    Compute,
    Finished,
    Gone,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Mpi => "mpi",
            State::Compute => "compute",
            State::Finished => "finished",
            State::Gone => "gone",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Deadlock,
    Stalled,
}

/// One blocked rank in a hang.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitEntry {
    pub rank: u32,
    pub call: Option<String>,
    /// The ranks it waits for that cannot go on (for a deadlock), or
    /// every rank it waits for (for a stall).
    pub waits_for: Vec<u32>,
    pub for_ns: u64,
    /// Where its call came from (the innermost application frame), once
    /// known.
    pub site: Option<Frame>,
}

/// Where a stall ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct End {
    pub rank: u32,
    pub state: State,
    pub call: Option<String>,
    pub for_ns: u64,
    pub site: Option<Frame>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hang {
    pub kind: Kind,
    /// A deadlock: its cycle, in the order of the waits. A stall: the
    /// waiting ranks, farthest first, then the rank where the waits end.
    pub ranks: Vec<u32>,
    /// Every blocked rank involved, the cycle's first.
    pub waits: Vec<WaitEntry>,
    /// A stall's last rank.
    pub end: Option<End>,
}

/// The hang among `nodes` (indexed by world rank) that has lasted at
/// least `after_ns`, if there is one.
pub fn diagnose(nodes: &[Node], after_ns: u64) -> Option<Hang> {
    let blocked: Vec<bool> = nodes
        .iter()
        .map(|n| n.state == State::Mpi && n.clauses.is_some())
        .collect();
    let free = can_go_on(nodes, &blocked);
    let stuck: Vec<u32> = (0..nodes.len() as u32)
        .filter(|&r| blocked[r as usize] && !free[r as usize])
        .collect();
    if stuck.is_empty() {
        return stall_at_a_live_rank(nodes, &blocked, after_ns);
    }
    let unmet = |r: u32| -> Vec<u32> {
        let mut out: Vec<u32> = clauses(nodes, r)
            .iter()
            .filter(|c| !c.iter().any(|&m| free[m as usize]))
            .flatten()
            .copied()
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    };
    let is_stuck = |r: u32| blocked[r as usize] && !free[r as usize];
    // A cycle among the stuck ranks, found from the longest waiter first.
    let mut order = stuck.clone();
    order.sort_by_key(|&r| (std::cmp::Reverse(nodes[r as usize].for_ns), r));
    for &start in &order {
        let mut path = vec![start];
        let mut cur = start;
        while let Some(next) = unmet(cur).into_iter().find(|&m| is_stuck(m)) {
            if let Some(at) = path.iter().position(|&p| p == next) {
                // Named from its lowest rank, in the order of the waits.
                let mut cycle = path[at..].to_vec();
                let low = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                cycle.rotate_left(low);
                let lasted = cycle
                    .iter()
                    .map(|&r| nodes[r as usize].for_ns)
                    .min()
                    .unwrap_or(0);
                if lasted < after_ns {
                    return None;
                }
                let mut involved = cycle.clone();
                involved.extend(stuck.iter().filter(|r| !cycle.contains(r)));
                let waits = entries(nodes, &involved, unmet);
                return Some(Hang {
                    kind: Kind::Deadlock,
                    ranks: cycle,
                    waits,
                    end: None,
                });
            }
            path.push(next);
            cur = next;
        }
    }
    // No cycle: the stuck ranks wait, in the end, on ranks that finished
    // or are gone. The end most of them wait on is the stall's.
    let ends = stuck_ends(nodes, &stuck, unmet, is_stuck);
    let (end, waiters) = ends
        .into_iter()
        .max_by_key(|(end, w)| (w.len(), std::cmp::Reverse(*end)))?;
    let lasted = waiters
        .iter()
        .map(|&(r, _)| nodes[r as usize].for_ns)
        .max()
        .unwrap_or(0);
    if lasted < after_ns {
        return None;
    }
    Some(stall(nodes, end, waiters, unmet))
}

/// The fixpoint: which ranks can go on.
fn can_go_on(nodes: &[Node], blocked: &[bool]) -> Vec<bool> {
    let mut free: Vec<bool> = nodes
        .iter()
        .zip(blocked)
        .map(|(n, &b)| !b && matches!(n.state, State::Mpi | State::Compute))
        .collect();
    loop {
        let mut changed = false;
        for r in 0..nodes.len() {
            if free[r] || !blocked[r] {
                continue;
            }
            let ok = clauses(nodes, r as u32).iter().all(|c| {
                c.iter()
                    .any(|&m| free.get(m as usize).copied().unwrap_or(false))
            });
            if ok {
                free[r] = true;
                changed = true;
            }
        }
        if !changed {
            return free;
        }
    }
}

fn clauses(nodes: &[Node], r: u32) -> &[Vec<u32>] {
    nodes[r as usize].clauses.as_deref().unwrap_or(&[])
}

fn entries(nodes: &[Node], ranks: &[u32], waits_for: impl Fn(u32) -> Vec<u32>) -> Vec<WaitEntry> {
    ranks
        .iter()
        .map(|&r| WaitEntry {
            rank: r,
            call: nodes[r as usize].call.clone(),
            waits_for: waits_for(r),
            for_ns: nodes[r as usize].for_ns,
            site: nodes[r as usize].site.clone(),
        })
        .collect()
}

/// For each rank where waits end (one that is not blocked), the blocked
/// ranks whose waits lead there, with their distance to it. `next` gives
/// the ranks a blocked rank waits on; `through` whether to follow a rank on.
fn stuck_ends(
    nodes: &[Node],
    from: &[u32],
    next: impl Fn(u32) -> Vec<u32>,
    through: impl Fn(u32) -> bool,
) -> std::collections::BTreeMap<u32, Vec<(u32, usize)>> {
    let mut ends: std::collections::BTreeMap<u32, Vec<(u32, usize)>> = Default::default();
    for &start in from {
        // Breadth first, so that each end gets the shortest distance.
        let mut seen = vec![false; nodes.len()];
        seen[start as usize] = true;
        let mut frontier = vec![start];
        let mut dist = 0;
        let mut found = std::collections::BTreeSet::new();
        while !frontier.is_empty() {
            dist += 1;
            let mut next_frontier = Vec::new();
            for &r in &frontier {
                for m in next(r) {
                    if (m as usize) >= nodes.len() || seen[m as usize] {
                        continue;
                    }
                    seen[m as usize] = true;
                    if through(m) {
                        next_frontier.push(m);
                    } else if found.insert(m) {
                        ends.entry(m).or_default().push((start, dist));
                    }
                }
            }
            frontier = next_frontier;
        }
    }
    ends
}

fn stall(
    nodes: &[Node],
    end: u32,
    mut waiters: Vec<(u32, usize)>,
    waits_for: impl Fn(u32) -> Vec<u32>,
) -> Hang {
    waiters.sort_by_key(|&(r, d)| (std::cmp::Reverse(d), r));
    let ranks: Vec<u32> = waiters.iter().map(|&(r, _)| r).chain([end]).collect();
    let waiting: Vec<u32> = waiters.iter().map(|&(r, _)| r).collect();
    let n = &nodes[end as usize];
    Hang {
        kind: Kind::Stalled,
        ranks,
        waits: entries(nodes, &waiting, waits_for),
        end: Some(End {
            rank: end,
            state: n.state,
            call: n.call.clone(),
            for_ns: n.for_ns,
            site: n.site.clone(),
        }),
    }
}

/// Every blocked rank can go on in principle: a wait that has lasted
/// `after_ns` and leads to a computing rank (or one in MPI but not
/// blocked) is a stall there.
fn stall_at_a_live_rank(nodes: &[Node], blocked: &[bool], after_ns: u64) -> Option<Hang> {
    let long: Vec<u32> = (0..nodes.len() as u32)
        .filter(|&r| blocked[r as usize] && nodes[r as usize].for_ns >= after_ns)
        .collect();
    if long.is_empty() {
        return None;
    }
    let all = |r: u32| -> Vec<u32> {
        let mut out: Vec<u32> = clauses(nodes, r).iter().flatten().copied().collect();
        out.sort_unstable();
        out.dedup();
        out
    };
    let ends = stuck_ends(nodes, &long, all, |r| blocked[r as usize]);
    let (end, waiters) = ends.into_iter().max_by_key(|(end, w)| {
        let longest = w.iter().map(|&(r, _)| nodes[r as usize].for_ns).max();
        (w.len(), longest, std::cmp::Reverse(*end))
    })?;
    Some(stall(nodes, end, waiters, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn blocked(call: &str, secs: u64, clauses: &[&[u32]]) -> Node {
        Node {
            state: State::Mpi,
            call: Some(call.into()),
            for_ns: secs * S,
            site: None,
            clauses: Some(clauses.iter().map(|c| c.to_vec()).collect()),
        }
    }

    fn computing(secs: u64) -> Node {
        Node {
            state: State::Compute,
            call: None,
            for_ns: secs * S,
            site: None,
            clauses: None,
        }
    }

    #[test]
    fn two_receives_from_each_other_are_a_deadlock_that_holds_the_barrier() {
        let nodes = [
            blocked("MPI_Recv", 7, &[&[1]]),
            blocked("MPI_Recv", 7, &[&[0]]),
            blocked("MPI_Barrier", 7, &[&[0], &[1]]),
            blocked("MPI_Barrier", 6, &[&[0], &[1]]),
        ];
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Deadlock);
        assert_eq!(h.ranks, vec![0, 1]);
        let w: Vec<(u32, &str, Vec<u32>)> = h
            .waits
            .iter()
            .map(|e| (e.rank, e.call.as_deref().unwrap(), e.waits_for.clone()))
            .collect();
        assert_eq!(
            w,
            vec![
                (0, "MPI_Recv", vec![1]),
                (1, "MPI_Recv", vec![0]),
                (2, "MPI_Barrier", vec![0, 1]),
                (3, "MPI_Barrier", vec![0, 1]),
            ]
        );
        assert_eq!(h.end, None);
    }

    #[test]
    fn a_cycle_younger_than_the_threshold_is_not_reported_yet() {
        let nodes = [
            blocked("MPI_Recv", 2, &[&[1]]),
            blocked("MPI_Recv", 9, &[&[0]]),
        ];
        assert_eq!(diagnose(&nodes, 5 * S), None);
        assert_eq!(diagnose(&nodes, 2 * S).unwrap().kind, Kind::Deadlock);
    }

    #[test]
    fn a_longer_cycle_is_named_in_the_order_of_its_waits() {
        // 0 -> 2 -> 3 -> 0, and 1 waits on 2 from outside the cycle.
        let nodes = [
            blocked("MPI_Recv", 9, &[&[2]]),
            blocked("MPI_Wait", 9, &[&[2]]),
            blocked("MPI_Send", 8, &[&[3]]),
            blocked("MPI_Recv", 8, &[&[0]]),
        ];
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Deadlock);
        assert_eq!(h.ranks, vec![0, 2, 3]);
        assert_eq!(
            h.waits.iter().map(|e| e.rank).collect::<Vec<_>>(),
            vec![0, 2, 3, 1]
        );
    }

    #[test]
    fn a_wildcard_receive_is_not_stuck_while_any_sender_can_go_on() {
        // 0 waits for any of 1, 2; 1 waits for 0; 2 computes.
        let mut nodes = vec![
            blocked("MPI_Recv", 9, &[&[1, 2]]),
            blocked("MPI_Recv", 9, &[&[0]]),
            computing(9),
        ];
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Stalled);
        assert_eq!(h.ranks, vec![1, 0, 2]);
        // Once 2 finished, nobody can send to 0 any more.
        nodes[2].state = State::Finished;
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Deadlock);
        assert_eq!(h.ranks, vec![0, 1]);
    }

    #[test]
    fn a_collective_waiting_on_a_computing_rank_is_a_stall_ending_there() {
        let nodes = [
            blocked("MPI_Allreduce", 8, &[&[2]]),
            blocked("MPI_Allreduce", 8, &[&[2]]),
            computing(8),
            blocked("MPI_Allreduce", 7, &[&[2]]),
        ];
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Stalled);
        assert_eq!(h.ranks, vec![0, 1, 3, 2]);
        let end = h.end.unwrap();
        assert_eq!((end.rank, end.state), (2, State::Compute));
        assert_eq!(h.waits[2].waits_for, vec![2]);
        // Not for long enough: no hang.
        assert_eq!(diagnose(&nodes, 9 * S), None);
    }

    #[test]
    fn waits_that_end_at_a_gone_rank_are_a_stall_there_with_the_chain_in_order() {
        // 0 waits on 1, 1 waits on 2, 2 is gone.
        let nodes = [
            blocked("MPI_Recv", 9, &[&[1]]),
            blocked("MPI_Recv", 9, &[&[2]]),
            Node {
                state: State::Gone,
                call: Some("MPI_Send".into()),
                for_ns: 9 * S,
                site: None,
                clauses: None,
            },
        ];
        let h = diagnose(&nodes, 5 * S).unwrap();
        assert_eq!(h.kind, Kind::Stalled);
        assert_eq!(h.ranks, vec![0, 1, 2]);
        assert_eq!(h.end.unwrap().state, State::Gone);
    }

    #[test]
    fn a_running_job_has_no_hang() {
        let nodes = [
            blocked("MPI_Recv", 0, &[&[1]]),
            computing(0),
            Node {
                state: State::Mpi,
                call: Some("MPI_Iprobe".into()),
                for_ns: 0,
                site: None,
                clauses: None,
            },
        ];
        assert_eq!(diagnose(&nodes, 5 * S), None);
        assert_eq!(diagnose(&[], 5 * S), None);
    }
}
