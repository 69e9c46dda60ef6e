//! The walk: the rules applied once per step, in an order in which every
//! step comes after everything it depends on.

use super::*;

/// Per-rank clock state of the rules.
#[derive(Clone)]
pub(super) struct State {
    pub(super) lc: u64,
    pub(super) vc: Vec<u64>,
    /// Pending nonblocking wildcard receives: (recv index, comm, posted tag, post order).
    pub(super) pending: Vec<(usize, u64, i32, usize)>,
    pub(super) posts: usize,
}

/// The result of one pass.
pub(super) struct Pass {
    pub(super) send_lc: SendClocks,
    /// Vector clocks, in vector mode only.
    pub(super) send_vc: Vec<Option<Vec<u64>>>,
    pub(super) recv_lc: RecvClocks,
    pub(super) recv_vc: Vec<Option<Vec<u64>>>,
    /// Lazy vectors only: each send's entry for its destination, and each
    /// receive's own entry when it matched (`NO_CLOCK`: none).
    pub(super) send_own: Vec<u64>,
    pub(super) recv_own: Vec<u64>,
    pub(super) after_call: CallClocks,
    pub(super) forced: u64,
    /// Events in evaluation order (a topological order), for the HB check:
    /// (rank, vector clock, node kind) with sources of incoming edges.
    pub(super) nodes: Vec<Node>,
}

#[derive(Clone)]
pub(super) struct Node {
    pub(super) vc: Vec<u64>,
    /// Nodes this one directly depends on besides its rank predecessor.
    pub(super) from: Vec<usize>,
}

/// Runs the rules over the whole trace. `collectives`: merge at collective
/// exits (the full clocks, kept per call) or not (what the runtime did,
/// for checking the piggybacks only).
pub(super) fn pass(
    trace: &Trace,
    m: &Messages,
    p: &Plan,
    collectives: bool,
    vectors: Vectors,
    keep_nodes: bool,
    races: Option<&[bool]>,
) -> Pass {
    let mut run = Part {
        w: walker(trace, m, p, collectives, vectors, keep_nodes, races),
        cur: vec![At::default(); p.events.len()],
    };
    loop {
        let stepped = run.advance();
        let Some(r) = run.blocked() else { break };
        if stepped == 0 {
            // A dependency that never comes (lost events): go on without it.
            run.force(r, None);
        }
    }
    run.w.out
}

/// A walker at the start of the trace.
pub(super) fn walker<'a>(
    trace: &'a Trace,
    m: &'a Messages,
    p: &'a Plan,
    collectives: bool,
    vectors: Vectors,
    keep_nodes: bool,
    races: Option<&'a [bool]>,
) -> Walker<'a> {
    let n = p.events.len();
    let world = trace.world_size as usize;
    let vector = vectors != Vectors::None;
    let lazy = vectors == Vectors::Lazy;
    Walker {
        trace,
        m,
        p,
        collectives,
        vector,
        lazy,
        keep_nodes,
        races,
        matched_send: if races.is_some() {
            let mut v = vec![usize::MAX; m.recvs.len()];
            for pair in &m.matched {
                v[pair.recv] = pair.send;
            }
            v
        } else {
            Vec::new()
        },
        // A block may hold no rank (more processes than ranks).
        any_tag: trace
            .ranks
            .first()
            .map_or(-1, |r| r.header.constants.any_tag),
        st: (0..n)
            .map(|_| State {
                lc: 0,
                vc: if vector { vec![0; world] } else { Vec::new() },
                pending: Vec::new(),
                posts: 0,
            })
            .collect(),
        out: Pass {
            send_lc: SendClocks::new(m.sends.len()),
            send_vc: if vector {
                vec![None; m.sends.len()]
            } else {
                Vec::new()
            },
            recv_lc: RecvClocks::new(m.recvs.len()),
            recv_vc: if vector && !lazy {
                vec![None; m.recvs.len()]
            } else {
                Vec::new()
            },
            send_own: if lazy {
                vec![NO_CLOCK; m.sends.len()]
            } else {
                Vec::new()
            },
            recv_own: if lazy {
                vec![NO_CLOCK; m.recvs.len()]
            } else {
                Vec::new()
            },
            after_call: if collectives {
                CallClocks::new(trace, &p.dense)
            } else {
                CallClocks::default()
            },
            forced: 0,
            nodes: Vec::new(),
        },
        send_node: if keep_nodes {
            vec![None; m.sends.len()]
        } else {
            Vec::new()
        },
        post_order: vec![NO_POST; m.recvs.len()],
        enter_node: vec![Vec::new(); p.instances.len()],
        last_node: vec![None; n],
        live: HashMap::default(),
        part: None,
    }
}

/// The state of one pass over the streams.
pub(super) struct Walker<'a> {
    pub(super) trace: &'a Trace,
    pub(super) m: &'a Messages,
    pub(super) p: &'a Plan,
    pub(super) collectives: bool,
    pub(super) vector: bool,
    /// The vectors are LVCP's (`Vectors::Lazy`).
    pub(super) lazy: bool,
    pub(super) keep_nodes: bool,
    /// DAMPI's rules, for races: a receive merges `max(LC, m.LC)` (not
    /// `m.LC + 1`), and the receives marked here tick as wildcard ones
    /// (a wildcard probe chose their message).
    pub(super) races: Option<&'a [bool]>,
    /// For races, each receive's send as matched (by id, else by the FIFO
    /// rule); else receives merge the send their id names only.
    pub(super) matched_send: Vec<usize>,
    pub(super) any_tag: i32,
    pub(super) st: Vec<State>,
    pub(super) out: Pass,
    /// The node of each send (when keeping nodes).
    pub(super) send_node: Vec<Option<usize>>,
    /// The post order of each receive posted (`NO_POST`: none).
    pub(super) post_order: Vec<u32>,
    pub(super) enter_node: Vec<Vec<(u32, usize)>>,
    pub(super) last_node: Vec<Option<usize>>,
    /// The instances entered and not yet left by every member, by index.
    pub(super) live: HashMap<u32, Live>,
    /// Over a block of ranks ([`Part`]): what crosses blocks.
    pub(super) part: Option<PartIo>,
}

/// What a [`Part`]'s walker exchanges with the other blocks.
#[derive(Default)]
pub(super) struct PartIo {
    /// What each member's exit merges, from the instance's owner:
    /// (instance, member) to (clock, vector clock).
    pub(super) answers: HashMap<(u32, u32), (u64, Vec<u64>)>,
    /// Enters stepped since they were last taken: (instance, member,
    /// clock, vector clock).
    pub(super) enters: Vec<(u32, u32, u64, Vec<u64>)>,
    /// Sends stepped since they were last taken.
    pub(super) sends: Vec<u32>,
}

impl Walker<'_> {
    /// Stream `r`'s rank in instance `i`'s communicator.
    pub(super) fn member(&self, r: usize, i: usize) -> u32 {
        let me = self.trace.ranks[self.p.stream_rank[r]].rank;
        self.p.comm_rank.get(i, me).unwrap_or(0)
    }

    /// The send whose clock receive `ri` merges.
    pub(super) fn send_for(&self, ri: usize) -> Option<usize> {
        if self.races.is_some() {
            Some(self.matched_send[ri]).filter(|&s| s != usize::MAX)
        } else {
            self.m.send_by_id(ri)
        }
    }

    /// Whether everything `ev` of stream `r` depends on has happened.
    pub(super) fn ready(&self, r: usize, ev: Ev) -> bool {
        let sent = |ri: usize| {
            self.send_for(ri)
                .is_none_or(|s| self.out.send_lc.get(s).is_some())
        };
        match ev {
            Ev::Recv(ri) if self.races.is_some() => {
                // The receives that matched before it merge here too.
                let ri = ri as usize;
                let my_post = match self.post_order[ri] {
                    NO_POST => usize::MAX,
                    k => k as usize,
                };
                sent(ri)
                    && complete_now(&self.st[r], self.m, ri, my_post, self.any_tag, true)
                        .iter()
                        .all(|&(e, ..)| sent(e))
            }
            Ev::Recv(ri) => sent(ri as usize),
            Ev::Exit(i) => {
                let i = i as usize;
                !self.collectives
                    || match &self.part {
                        Some(io) => io.answers.contains_key(&(i as u32, self.member(r, i))),
                        None => {
                            let entered = self.live.get(&(i as u32)).map_or(0, |l| l.enters.len());
                            entered >= self.p.instances[i].size
                        }
                    }
            }
            _ => true,
        }
    }

    /// Applies the rules to event `ev` of stream `r`; `matched`: a receive
    /// merges its send's clock (false when forced past a missing send).
    pub(super) fn step(&mut self, r: usize, ev: Ev, matched: bool) {
        let me = self.trace.ranks[self.p.stream_rank[r]].rank as usize;
        match ev {
            Ev::Send(si) => self.send(r, me, si as usize),
            Ev::SendNowhere => {
                // Happens-before vectors tick at every event; lazy ones
                // with the clock.
                if self.vector && !self.lazy {
                    self.st[r].vc[me] += 1;
                }
            }
            Ev::Post(ri) => self.post(r, ri as usize),
            Ev::Recv(ri) => self.recv(r, me, ri as usize, matched),
            Ev::Enter(i) if self.collectives => self.enter(r, me, i as usize),
            Ev::Exit(i) if self.collectives => self.exit(r, me, i as usize),
            Ev::Enter(_) | Ev::Exit(_) => {}
            Ev::End(index) => {
                let (rank, thread) = self.p.stream_at[r];
                self.out.after_call.set(rank, thread, index, self.st[r].lc);
            }
        }
    }

    /// A send: its clocks, as the receive will merge them.
    fn send(&mut self, r: usize, me: usize, si: usize) {
        let eager = self.vector && !self.lazy;
        let s = &mut self.st[r];
        let out = &mut self.out;
        if eager {
            s.vc[me] += 1;
        }
        out.send_lc.set(si, s.lc);
        if self.vector {
            out.send_vc[si] = Some(s.vc.clone());
        }
        if let Some(io) = &mut self.part {
            io.sends.push(si as u32);
        }
        if self.lazy {
            if let Some(d) = self.m.sends[si].dst {
                out.send_own[si] = s.vc.get(d as usize).copied().unwrap_or(NO_CLOCK);
            }
        }
        if self.keep_nodes {
            self.send_node[si] = node(true, &mut self.last_node[r], out, &s.vc, Vec::new());
        }
    }

    /// A nonblocking receive posted: its place in the post order, and the
    /// receives CompleteNow must look at.
    fn post(&mut self, r: usize, ri: usize) {
        let s = &mut self.st[r];
        s.posts += 1;
        self.post_order[ri] = u32::try_from(s.posts).unwrap_or(NO_POST);
        let rv = &self.m.recvs[ri];
        // For races every nonblocking receive is followed: one that
        // names its source also matches before a later receive
        // that takes a message it would take.
        if rv.wildcard || self.races.is_some() {
            s.pending.push((ri, rv.comm, rv.posted_tag, s.posts));
        }
    }

    /// A receive completed: the receives that must have matched before it,
    /// its match clock, and its merge of the send's clocks.
    fn recv(&mut self, r: usize, me: usize, ri: usize, matched: bool) {
        let Walker {
            m,
            vector,
            lazy,
            keep_nodes,
            races,
            matched_send,
            any_tag,
            st,
            out,
            send_node,
            post_order,
            last_node,
            ..
        } = self;
        let (m, vector, lazy, any_tag, races) = (*m, *vector, *lazy, *any_tag, *races);
        let matched_send = &*matched_send;
        let send_of = |ri: usize| {
            if !matched {
                None
            } else if races.is_some() {
                Some(matched_send[ri]).filter(|&s| s != usize::MAX)
            } else {
                m.send_by_id(ri)
            }
        };
        let s = &mut st[r];
        let rv = &m.recvs[ri];
        let my_post = match post_order[ri] {
            NO_POST => usize::MAX,
            k => k as usize,
        };
        // CompleteNow: pending receives that must have matched before this one.
        let now = complete_now(s, m, ri, my_post, any_tag, races.is_some());
        s.pending.retain(|e| !now.iter().any(|x| x.0 == e.0));
        for &(e, ..) in &now {
            // Its match clock; its merge comes at its own completion
            // (for races: now, as matches-before has it).
            let after = out.recv_lc.get(e).map_or(0, |x| x.1);
            out.recv_lc.set(e, (s.lc, after));
            if lazy {
                out.recv_own[e] = s.vc[me];
            }
            if m.recvs[e].wildcard {
                s.lc += 1;
                if lazy {
                    s.vc[me] += 1;
                }
            }
            if races.is_some() {
                if let Some(si) = send_of(e) {
                    if let Some(mlc) = out.send_lc.get(si) {
                        s.lc = s.lc.max(mlc);
                    }
                    if let Some(v) = out.send_vc.get_mut(si).and_then(Option::take) {
                        for (a, b) in s.vc.iter_mut().zip(&v) {
                            *a = (*a).max(*b);
                        }
                    }
                }
            }
        }
        let was_pending = s
            .pending
            .iter()
            .position(|e| e.0 == ri)
            .map(|i| s.pending.swap_remove(i))
            .is_some();
        let tracked = rv.wildcard || races.is_some() && my_post != usize::MAX;
        let match_lc = if rv.how == RecvHow::Nonblocking && tracked && !was_pending {
            // Matched earlier, by a later receive's completion.
            out.recv_lc.get(ri).map_or(s.lc, |x| x.0)
        } else {
            let lc = s.lc;
            if lazy {
                out.recv_own[ri] = s.vc[me];
            }
            let probed = races.is_some_and(|w| w.get(ri).copied().unwrap_or(false));
            if rv.wildcard && (rv.how == RecvHow::Blocking || was_pending) || probed {
                s.lc += 1;
                if lazy {
                    s.vc[me] += 1;
                }
            }
            lc
        };
        let sent = send_of(ri).and_then(|si| out.send_lc.get(si));
        if let Some(mlc) = sent {
            s.lc = s.lc.max(if races.is_some() { mlc } else { mlc + 1 });
        }
        out.recv_lc.set(ri, (match_lc, s.lc));
        let mut from = Vec::new();
        if lazy {
            // The send's vector is needed by this receive alone.
            if let Some(v) = send_of(ri).and_then(|si| out.send_vc[si].take()) {
                for (a, b) in s.vc.iter_mut().zip(&v) {
                    *a = (*a).max(*b);
                }
            }
        } else if vector {
            if let Some(v) = send_of(ri).and_then(|si| out.send_vc[si].as_ref()) {
                for (a, b) in s.vc.iter_mut().zip(v) {
                    *a = (*a).max(*b);
                }
            }
            s.vc[me] += 1;
            out.recv_vc[ri] = Some(s.vc.clone());
        }
        if let Some(n) = send_of(ri).and_then(|si| send_node.get(si).copied().flatten()) {
            from.push(n);
        }
        node(*keep_nodes, &mut last_node[r], out, &s.vc, from);
    }

    /// A collective entered: this member's clocks, for the exits that
    /// depend on it.
    fn enter(&mut self, r: usize, me: usize, i: usize) {
        let s = &mut self.st[r];
        if self.vector && !self.lazy {
            s.vc[me] += 1;
        }
        let cr = self.p.comm_rank.get(i, me as u32).unwrap_or(0);
        match &mut self.part {
            Some(io) => io.enters.push((i as u32, cr, s.lc, s.vc.clone())),
            None => {
                let live = self.live.entry(i as u32).or_default();
                live.enters.push((cr, s.lc, s.vc.clone()))
            }
        }
        let made = node(
            self.keep_nodes,
            &mut self.last_node[r],
            &mut self.out,
            &s.vc,
            Vec::new(),
        );
        if let Some(nid) = made {
            self.enter_node[i].push((cr, nid));
        }
    }

    /// A collective left: the merge of the members this one depends on.
    fn exit(&mut self, r: usize, me: usize, i: usize) {
        let Walker {
            p,
            vector,
            lazy,
            keep_nodes,
            st,
            out,
            enter_node,
            last_node,
            live,
            part,
            ..
        } = self;
        let p = *p;
        let s = &mut st[r];
        let inst = p.instances[i];
        let mine = p.comm_rank.get(i, me as u32).unwrap_or(0);
        let root_cr = inst.root.and_then(|w| p.comm_rank.get(i, w));
        let (lc, vc) = match part {
            Some(io) => io
                .answers
                .get(&(i as u32, mine))
                .cloned()
                .unwrap_or_default(),
            None => {
                let l = live.entry(i as u32).or_default();
                // All in: every member's merge at once, in linear
                // time (one by one is N² per instance).
                let n = l.enters.len();
                if n >= inst.size && l.merged.as_ref().is_none_or(|m| m.0 != n) {
                    let all = merges(inst.shape, root_cr, &l.enters);
                    let all = all.into_iter().map(|(k, lc, vc)| (k, (lc, vc)));
                    l.merged = Some((n, all.collect()));
                }
                match l.merged.as_ref().filter(|m| m.0 == n) {
                    Some((_, all)) if all.contains_key(&mine) => all[&mine].clone(),
                    _ => merge_for(inst.shape, root_cr, &l.enters, mine),
                }
            }
        };
        s.lc = s.lc.max(lc);
        for (a, b) in s.vc.iter_mut().zip(&vc) {
            *a = (*a).max(*b);
        }
        let from = enter_node[i]
            .iter()
            .filter(|&&(k, _)| k != mine && depends(inst.shape, root_cr, mine, k))
            .map(|&(_, nid)| nid)
            .collect();
        if *vector && !*lazy {
            s.vc[me] += 1;
        }
        node(*keep_nodes, &mut last_node[r], out, &s.vc, from);
        // Once every member is out, nothing reads the instance's
        // enters again: keep only the in-flight instances'.
        if let (None, Some(l)) = (&part, live.get_mut(&(i as u32))) {
            l.exits += 1;
            if l.exits >= inst.size && l.enters.len() >= inst.size {
                live.remove(&(i as u32));
                enter_node[i] = Vec::new();
            }
        }
    }
}

/// A node of the happens-before graph (when `keep`) after its stream's
/// `last`, and from the nodes `from`; its index.
fn node(
    keep: bool,
    last: &mut Option<usize>,
    out: &mut Pass,
    vc: &[u64],
    mut from: Vec<usize>,
) -> Option<usize> {
    if !keep {
        return None;
    }
    if let Some(prev) = *last {
        from.push(prev);
    }
    out.nodes.push(Node {
        vc: vc.to_vec(),
        from,
    });
    let id = out.nodes.len() - 1;
    *last = Some(id);
    Some(id)
}

/// CompleteNow of LLCP's rule R4 (`003_…` §5.1.2): the pending receives of
/// `s` that matched before receive `ri` (posted `my_post`), in post order:
/// those posted earlier that would take its message. With `closure`, also
/// those that would take the message of one already in the set (the trace
/// knows every message; the runtime knows only `ri`'s).
pub(super) fn complete_now(
    s: &State,
    m: &Messages,
    ri: usize,
    my_post: usize,
    any_tag: i32,
    closure: bool,
) -> Vec<(usize, u64, i32, usize)> {
    let takes = |e: (usize, u64, i32, usize), x: usize, post: usize| {
        let (r, xr) = (&m.recvs[e.0], &m.recvs[x]);
        e.0 != x
            && e.1 == xr.comm
            && (e.2 == any_tag || e.2 == xr.tag)
            && (r.wildcard || r.src == xr.src)
            && e.3 < post
    };
    let mut now: Vec<(usize, u64, i32, usize)> = s
        .pending
        .iter()
        .copied()
        .filter(|&e| e.0 != ri && takes(e, ri, my_post))
        .collect();
    if closure {
        loop {
            let more: Vec<_> = s
                .pending
                .iter()
                .copied()
                .filter(|e| e.0 != ri && !now.iter().any(|x| x.0 == e.0))
                .filter(|&e| now.iter().any(|x| takes(e, x.0, x.3)))
                .collect();
            if more.is_empty() {
                break;
            }
            now.extend(more);
        }
    }
    now.sort_by_key(|&(_, _, _, post)| post);
    now
}

/// `a < b` for vector clocks: every entry ≤ and one <.
pub(super) fn vc_less(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x <= y) && a != b
}

/// Whether a member's exit (`mine`) depends on member `k`'s enter.
pub(super) fn depends(shape: Shape, root: Option<u32>, mine: u32, k: u32) -> bool {
    match shape {
        Shape::NToN => true,
        Shape::OneToN => Some(k) == root,
        Shape::NToOne => Some(mine) == root,
        Shape::Scan => k <= mine,
        Shape::Exscan => k < mine,
    }
}

/// What member `mine`'s exit merges from the enters that came, (member,
/// clock, vector clock): the largest clock and the entrywise largest vector
/// of the enters it depends on but its own.
pub fn merge_for(
    shape: Shape,
    root: Option<u32>,
    enters: &[(u32, u64, Vec<u64>)],
    mine: u32,
) -> (u64, Vec<u64>) {
    let mut lc = 0;
    let mut vc: Vec<u64> = Vec::new();
    for (k, c, v) in enters {
        if *k == mine || !depends(shape, root, mine, *k) {
            continue;
        }
        lc = lc.max(*c);
        if vc.len() < v.len() {
            vc.resize(v.len(), 0);
        }
        for (a, b) in vc.iter_mut().zip(v) {
            *a = (*a).max(*b);
        }
    }
    (lc, vc)
}

/// [`merge_for`] of every member that entered, in member order: the
/// clocks in linear time (the largest two of distinct members, or a
/// scan's prefix); vectors, which only small runs have, one by one.
pub fn merges(
    shape: Shape,
    root: Option<u32>,
    enters: &[(u32, u64, Vec<u64>)],
) -> Vec<(u32, u64, Vec<u64>)> {
    let mut members: Vec<u32> = enters.iter().map(|e| e.0).collect();
    members.sort_unstable();
    members.dedup();
    if enters.iter().any(|e| !e.2.is_empty()) {
        return members
            .into_iter()
            .map(|k| {
                let (lc, vc) = merge_for(shape, root, enters, k);
                (k, lc, vc)
            })
            .collect();
    }
    // The largest clock of members that `mine`'s exit depends on.
    let of = |keep: &dyn Fn(u32) -> bool| {
        enters
            .iter()
            .filter(|e| keep(e.0))
            .map(|e| e.1)
            .max()
            .unwrap_or(0)
    };
    let lcs: Vec<u64> = match shape {
        Shape::OneToN => {
            let at_root = of(&|k| Some(k) == root);
            members
                .iter()
                .map(|&k| if Some(k) == root { 0 } else { at_root })
                .collect()
        }
        Shape::NToOne => {
            let but_root = of(&|k| Some(k) != root);
            members
                .iter()
                .map(|&k| if Some(k) == root { but_root } else { 0 })
                .collect()
        }
        Shape::NToN => {
            // The largest clock, and the largest of the other members.
            let best = enters.iter().max_by_key(|e| e.1).map(|e| (e.0, e.1));
            let second = best.map(|(b, _)| of(&|k| k != b));
            members
                .iter()
                .map(|&k| match best {
                    Some((b, c)) if b != k => c,
                    _ => second.unwrap_or(0),
                })
                .collect()
        }
        Shape::Scan | Shape::Exscan => {
            // Members before each one, by member order.
            let mut by: Vec<(u32, u64)> = enters.iter().map(|e| (e.0, e.1)).collect();
            by.sort_unstable();
            let mut at = 0;
            let mut before = 0;
            members
                .iter()
                .map(|&k| {
                    while at < by.len() && by[at].0 < k {
                        before = before.max(by[at].1);
                        at += 1;
                    }
                    before
                })
                .collect()
        }
    };
    members
        .into_iter()
        .zip(lcs)
        .map(|(k, lc)| (k, lc, Vec::new()))
        .collect()
}
