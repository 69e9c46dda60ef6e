//! Message races on random small programs: the vector-clock answer of
//! `pmtrace races` against brute force over the matches-before order.
//!
//! Each case is a random program of sends, blocking and nonblocking
//! receives (named or wildcard sources, named or any tags) and barriers on
//! 3 or 4 ranks, run by a small MPI simulator with random message arrival:
//! a message that arrives matches the first posted receive that accepts it,
//! or waits in the unexpected queue, which a receive posted later searches
//! in arrival order. The simulated run is written as a trace. Brute force
//! then builds matches-before from its definition (Vo, `003_…` §3.3: C1–C6,
//! with C4 on the message the later receive took) and lists, for every
//! wildcard receive, the sends concurrent with it that a receive posted
//! after it took from another source. The vector-clock result must equal
//! it exactly (Theorem 5.5); the Lamport result must be a subset (5.3).

// The simulator and the brute force index ranks and events by number.
#![allow(clippy::needless_range_loop)]

use std::collections::BTreeSet;

use pmtrace_fixture::{self as fixture, TraceBuilder};
use pmtrace_matching::clocks::RaceClocks;
use pmtrace_matching::Messages;
use pmtrace_report::races;
use pmtrace_trace::Trace;

use crate::util::Scratch;

const ANY: i32 = -1; // the fixture's MPI_ANY_SOURCE and MPI_ANY_TAG

/// xorshift64*: a fixed stream of cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Send {
        to: usize,
        tag: i32,
    },
    /// `wait`: the index of its Wait in the program (nonblocking), or None.
    Recv {
        src: i32,
        tag: i32,
        wait: Option<usize>,
    },
    Wait {
        recv: usize,
    },
    Barrier,
}

/// A random program: messages between random ranks, each received by a
/// receive of random kind at its destination, barriers at random places.
fn program(rng: &mut Rng) -> Vec<Vec<Op>> {
    let n = 3 + rng.below(2);
    let mut prog: Vec<Vec<Op>> = vec![Vec::new(); n];
    let barriers = rng.below(3);
    let mut left = 4 + rng.below(7);
    let mut pending: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut barrier_at: Vec<usize> = (0..barriers).map(|_| rng.below(left + 1)).collect();
    barrier_at.sort_unstable();
    let mut step = 0;
    while left > 0 || !barrier_at.is_empty() {
        while barrier_at.first() == Some(&step) {
            barrier_at.remove(0);
            for p in prog.iter_mut() {
                p.push(Op::Barrier);
            }
        }
        if left == 0 {
            step += 1;
            continue;
        }
        let from = rng.below(n);
        let to = (from + 1 + rng.below(n - 1)) % n;
        let tag = rng.below(2) as i32;
        prog[from].push(Op::Send { to, tag });
        let src = if rng.chance(60) { ANY } else { from as i32 };
        let rtag = if rng.chance(25) { ANY } else { tag };
        prog[to].push(Op::Recv {
            src,
            tag: rtag,
            wait: None,
        });
        if rng.chance(40) {
            // Nonblocking: its Wait comes later (linked below).
            pending[to].push(prog[to].len() - 1);
        }
        // Now and then, some of a rank's nonblocking receives are waited for.
        for p in 0..n {
            if !pending[p].is_empty() && rng.chance(30) {
                let k = rng.below(pending[p].len());
                let recv = pending[p].remove(k);
                prog[p].push(Op::Wait { recv });
            }
        }
        left -= 1;
        step += 1;
    }
    for p in 0..n {
        for recv in std::mem::take(&mut pending[p]) {
            prog[p].push(Op::Wait { recv });
        }
    }
    // Link each nonblocking receive to its wait.
    for ops in prog.iter_mut() {
        for i in 0..ops.len() {
            if let Op::Wait { recv } = ops[i] {
                if let Op::Recv { wait, .. } = &mut ops[recv] {
                    *wait = Some(i);
                }
            }
        }
    }
    prog
}

/// One executed operation.
#[derive(Debug, Clone)]
struct Done {
    rank: usize,
    op: Op,
    start: u64,
    end: u64,
    /// Sends: the message; receives: the message taken.
    msg: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
struct Msg {
    src: usize,
    tag: i32,
}

fn accepts(src: i32, tag: i32, m: &Msg) -> bool {
    (src == ANY || src == m.src as i32) && (tag == ANY || tag == m.tag)
}

/// Runs `prog` with random arrivals; None if it deadlocks.
fn simulate(prog: &[Vec<Op>], rng: &mut Rng) -> Option<(Vec<Done>, Vec<Msg>)> {
    let n = prog.len();
    let mut pc = vec![0usize; n];
    let mut now = 100u64;
    let mut done: Vec<Done> = Vec::new();
    // Index into `done` of each rank's op, by position in its program.
    let mut at: Vec<Vec<Option<usize>>> = prog.iter().map(|p| vec![None; p.len()]).collect();
    let mut msgs: Vec<Msg> = Vec::new();
    let mut channel: Vec<Vec<std::collections::VecDeque<usize>>> =
        vec![vec![Default::default(); n]; n];
    let mut unexpected: Vec<Vec<usize>> = vec![Vec::new(); n];
    // Posted receives not matched: (rank's op position).
    let mut posted: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut at_barrier = vec![false; n];
    loop {
        now += 10;
        // What can happen: a rank's next op, or an arrival.
        let mut choices: Vec<(bool, usize, usize)> = Vec::new();
        for r in 0..n {
            if pc[r] < prog[r].len() && !blocked(prog, &pc, r, &at, &done, &at_barrier) {
                choices.push((true, r, 0));
            }
        }
        for s in 0..n {
            for d in 0..n {
                if !channel[s][d].is_empty() {
                    choices.push((false, s, d));
                }
            }
        }
        if choices.is_empty() {
            return pc
                .iter()
                .zip(prog)
                .all(|(&k, p)| k == p.len())
                .then_some((done, msgs));
        }
        let (run, a, b) = choices[rng.below(choices.len())];
        if !run {
            let m = channel[a][b].pop_front().unwrap();
            let k = posted[b].iter().position(|&i| {
                let Op::Recv { src, tag, .. } = prog[b][i] else {
                    unreachable!()
                };
                accepts(src, tag, &msgs[m])
            });
            match k {
                Some(k) => {
                    let i = posted[b].remove(k);
                    let d = at[b][i].unwrap();
                    done[d].msg = Some(m);
                    if matches!(prog[b][i], Op::Recv { wait: None, .. }) {
                        done[d].end = now;
                        pc[b] += 1;
                    }
                }
                None => unexpected[b].push(m),
            }
            continue;
        }
        let r = a;
        let i = pc[r];
        match prog[r][i] {
            Op::Send { to, tag } => {
                msgs.push(Msg { src: r, tag });
                channel[r][to].push_back(msgs.len() - 1);
                at[r][i] = Some(done.len());
                done.push(Done {
                    rank: r,
                    op: prog[r][i],
                    start: now,
                    end: now + 1,
                    msg: Some(msgs.len() - 1),
                });
                pc[r] += 1;
            }
            Op::Recv { src, tag, wait } => {
                let k = unexpected[r]
                    .iter()
                    .position(|&m| accepts(src, tag, &msgs[m]));
                let taken = k.map(|k| unexpected[r].remove(k));
                at[r][i] = Some(done.len());
                let blocking = wait.is_none();
                done.push(Done {
                    rank: r,
                    op: prog[r][i],
                    start: now,
                    end: if blocking && taken.is_none() {
                        u64::MAX
                    } else {
                        now + 1
                    },
                    msg: taken,
                });
                if taken.is_none() {
                    posted[r].push(i);
                }
                if !blocking || taken.is_some() {
                    pc[r] += 1;
                }
            }
            Op::Wait { recv } => {
                let d = at[r][recv].unwrap();
                if done[d].msg.is_some() {
                    at[r][i] = Some(done.len());
                    done.push(Done {
                        rank: r,
                        op: prog[r][i],
                        start: now,
                        end: now + 1,
                        msg: done[d].msg,
                    });
                    pc[r] += 1;
                }
            }
            Op::Barrier => {
                at_barrier[r] = true;
                at[r][i] = Some(done.len());
                done.push(Done {
                    rank: r,
                    op: Op::Barrier,
                    start: now,
                    end: u64::MAX,
                    msg: None,
                });
                if at_barrier.iter().all(|&b| b) {
                    for q in 0..n {
                        at_barrier[q] = false;
                        let d = at[q][pc[q]].unwrap();
                        done[d].end = now + 1;
                        pc[q] += 1;
                    }
                }
            }
        }
    }
}

/// Whether rank `r` waits: in a blocking receive not yet matched (its pc
/// stays on it), at a barrier, or at a Wait whose receive has no message.
fn blocked(
    prog: &[Vec<Op>],
    pc: &[usize],
    r: usize,
    at: &[Vec<Option<usize>>],
    done: &[Done],
    at_barrier: &[bool],
) -> bool {
    match prog[r][pc[r]] {
        Op::Recv { .. } => at[r][pc[r]].is_some(),
        Op::Barrier => at_barrier[r],
        Op::Wait { recv } => at[r][recv].is_some_and(|d| done[d].msg.is_none()),
        Op::Send { .. } => false,
    }
}

/// Writes the simulated run as a trace.
fn write(prog: &[Vec<Op>], done: &[Done], msgs: &[Msg], dir: &std::path::Path) {
    let n = prog.len();
    let mut tb = TraceBuilder::new(n as u32);
    for r in 0..n {
        tb.rank(r as u32).define_world_and_self(0);
    }
    // Each rank's ops in program order are `done` filtered by rank, in order.
    let mut barriers = vec![0u64; n];
    let mut ops_of: Vec<Vec<u64>> = vec![Vec::new(); n];
    for d in done {
        let th = tb.rank(d.rank as u32).thread(0);
        let status = |m: usize| fixture::status(msgs[m].src as i32, msgs[m].tag, 4);
        match d.op {
            Op::Send { to, tag } => {
                th.call(
                    "MPI_Send",
                    d.start,
                    d.end,
                    fixture::send(to as i32, tag, 0, 4),
                );
            }
            Op::Recv {
                src,
                tag,
                wait: None,
            } => {
                th.call(
                    "MPI_Recv",
                    d.start,
                    d.end,
                    fixture::recv(src, tag, 0, 4, status(d.msg.unwrap())),
                );
            }
            Op::Recv {
                src,
                tag,
                wait: Some(_),
            } => {
                ops_of[d.rank].push(th.next_op());
                th.call("MPI_Irecv", d.start, d.end, fixture::irecv(src, tag, 0, 4));
            }
            Op::Wait { recv } => {
                // The k-th Irecv of the rank's program got the k-th op id.
                let k = prog[d.rank][..recv]
                    .iter()
                    .filter(|o| matches!(o, Op::Recv { wait: Some(_), .. }))
                    .count();
                let op = ops_of[d.rank][k];
                th.call(
                    "MPI_Wait",
                    d.start,
                    d.end,
                    fixture::complete(&[(op, status(d.msg.unwrap()))]),
                );
            }
            Op::Barrier => {
                th.call(
                    "MPI_Barrier",
                    d.start,
                    d.end,
                    fixture::coll(0, None, 0, 0, barriers[d.rank]),
                );
                barriers[d.rank] += 1;
            }
        }
    }
    tb.write(dir).unwrap();
}

/// Matches-before by its definition, as a reachability matrix over `done`.
fn matches_before(done: &[Done], msgs: &[Msg]) -> Vec<Vec<bool>> {
    let e = done.len();
    let mut mb = vec![vec![false; e]; e];
    let is_recv = |d: &Done| matches!(d.op, Op::Recv { .. });
    for (i, a) in done.iter().enumerate() {
        for (j, b) in done.iter().enumerate() {
            if i == j || a.rank != b.rank || a.start >= b.start {
                continue;
            }
            let edge = match (a.op, b.op) {
                // C1: blocking receives, waits and barriers order what follows.
                (Op::Recv { wait: None, .. } | Op::Wait { .. } | Op::Barrier, _) => true,
                // C3: sends to one destination with one tag keep their order.
                (Op::Send { to, tag }, Op::Send { to: t2, tag: g2 }) => to == t2 && tag == g2,
                // C4, C4': an earlier receive that accepts the later one's message.
                (Op::Recv { src, tag, .. }, Op::Recv { .. }) => {
                    accepts(src, tag, &msgs[b.msg.unwrap()])
                }
                _ => false,
            };
            // C2: a nonblocking receive before its wait.
            let c2 = matches!(
                (a.op, b.op),
                (Op::Recv { wait: Some(_), .. }, Op::Wait { .. })
            ) && a.msg == b.msg;
            if edge || c2 {
                mb[i][j] = true;
            }
        }
    }
    // Match-sets: a send with the receive that took its message; the
    // members of each barrier instance.
    let mut sets: Vec<(Vec<usize>, Vec<usize>)> = Vec::new(); // (non-receive members, all members)
    for (i, s) in done.iter().enumerate() {
        if let (Op::Send { .. }, Some(m)) = (s.op, s.msg) {
            if let Some(r) = done.iter().position(|d| is_recv(d) && d.msg == Some(m)) {
                sets.push((vec![i], vec![i, r]));
            }
        }
    }
    let mut k = 0;
    loop {
        let members: Vec<usize> = (0..done.len())
            .filter(|&i| matches!(done[i].op, Op::Barrier))
            .filter(|&i| {
                done[..i]
                    .iter()
                    .filter(|d| d.rank == done[i].rank && matches!(d.op, Op::Barrier))
                    .count()
                    == k
            })
            .collect();
        if members.is_empty() {
            break;
        }
        sets.push((members.clone(), members));
        k += 1;
    }
    // C5 and C6 to a fixed point.
    loop {
        let mut changed = false;
        for a in 0..e {
            for b in 0..e {
                if mb[a][b] {
                    for c in 0..e {
                        if mb[b][c] && !mb[a][c] {
                            mb[a][c] = true;
                            changed = true;
                        }
                    }
                }
            }
        }
        for (from, to) in &sets {
            for e1 in 0..e {
                if !from.iter().any(|&x| mb[e1][x]) {
                    continue;
                }
                for &y in to {
                    for e2 in 0..e {
                        if mb[y][e2] && e1 != e2 && !mb[e1][e2] {
                            mb[e1][e2] = true;
                            changed = true;
                        }
                    }
                }
            }
        }
        if !changed {
            return mb;
        }
    }
}

/// For each wildcard receive (by start time): the messages concurrent with
/// it that a later-posted receive of its rank took from another source.
fn brute_force(done: &[Done], msgs: &[Msg]) -> BTreeSet<(u64, usize)> {
    let mb = matches_before(done, msgs);
    let mut out = BTreeSet::new();
    for (i, r) in done.iter().enumerate() {
        let Op::Recv { src: ANY, tag, .. } = r.op else {
            continue;
        };
        let mine = r.msg.unwrap();
        for r0 in done {
            let Op::Recv { .. } = r0.op else { continue };
            let m = r0.msg.unwrap();
            if r0.rank != r.rank || r0.start <= r.start || msgs[m].src == msgs[mine].src {
                continue;
            }
            if !(tag == ANY || tag == msgs[m].tag) {
                continue;
            }
            let s = done
                .iter()
                .position(|d| matches!(d.op, Op::Send { .. }) && d.msg == Some(m))
                .unwrap();
            if !mb[i][s] && !mb[s][i] {
                out.insert((r.start, m));
            }
        }
    }
    out
}

#[test]
fn vector_clock_races_equal_brute_force_over_matches_before() {
    // PMTRACE_RACE_CASES=N [PMTRACE_RACE_SEED=S] runs more cases by hand.
    let var = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let total = var("PMTRACE_RACE_CASES", 300) as usize;
    let mut rng = Rng(var("PMTRACE_RACE_SEED", 0x9E37_79B9_7F4A_7C15));
    let scratch = Scratch::new("races");
    let (mut cases, mut with_races, mut lamport_missed) = (0, 0, 0);
    while cases < total {
        let prog = program(&mut rng);
        let Some((done, msgs)) = simulate(&prog, &mut rng) else {
            continue;
        };
        let dir = scratch.join(&format!("case-{cases}"));
        write(&prog, &done, &msgs, &dir);
        let trace = Trace::open(&dir).unwrap();
        let m = Messages::build(&trace);
        assert_eq!(
            m.matched.len(),
            msgs.len(),
            "case {cases}: every message matched"
        );
        let wild = races::wildcards(&trace, &m);
        let probed = races::probed_receives(&m, &wild);
        let found = |vector: bool| -> BTreeSet<(u64, usize)> {
            let clocks = RaceClocks::compute(&trace, &m, vector, &probed);
            let alts = races::alternatives(&m, &wild, &clocks, ANY);
            let mut out = BTreeSet::new();
            for (w, alts) in wild.iter().zip(alts) {
                for s in alts.expect("every message is matched") {
                    // The simulated message of send s: by its start time.
                    let send = &m.sends[s];
                    let sim = done
                        .iter()
                        .find(|d| d.rank == send.src as usize && d.start == send.time)
                        .and_then(|d| d.msg)
                        .unwrap();
                    out.insert((m.recvs[w.recv].posted_at, sim));
                }
            }
            out
        };
        let want = brute_force(&done, &msgs);
        let vector = found(true);
        assert_eq!(vector, want, "case {cases}: {prog:?}\n{done:#?}");
        let lamport = found(false);
        assert!(
            lamport.is_subset(&want),
            "case {cases}: Lamport found a false race"
        );
        with_races += usize::from(!want.is_empty());
        lamport_missed += usize::from(lamport != want);
        std::fs::remove_dir_all(&dir).unwrap();
        cases += 1;
    }
    // The cases are not all trivial.
    assert!(
        with_races >= total / 3,
        "{with_races} of {total} cases have races"
    );
    eprintln!("{with_races} of {total} cases race; Lamport clocks missed some in {lamport_missed}");
}
