//! The walk over a block of ranks, for the parallel engine.

use super::*;

/// Which vector clocks a [`Part`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartVectors {
    None,
    /// The runtime's vector mode.
    HappensBefore,
    /// LVCP's, for races.
    Lazy,
}

/// The walk's plan for a block of ranks ([`Part`]).
pub struct PartPlan(pub(super) Plan);

impl PartPlan {
    pub fn new(trace: &Trace, m: &Messages) -> PartPlan {
        PartPlan(plan(trace, m))
    }

    /// Instance `i` of the block's collective calls: (its key
    /// (communicator, sequence number, start), its shape, the root's rank
    /// in the communicator, its size).
    pub fn instance(&self, i: usize) -> ((u64, u64, u64), Shape, Option<u32>, usize) {
        let (p, inst) = (&self.0, &self.0.instances[i]);
        let root = inst.root.and_then(|w| p.comm_rank.get(i, w));
        (p.keys[i], inst.shape, root, inst.size)
    }

    /// The block's instances by key.
    pub fn instances(&self) -> HashMap<(u64, u64, u64), u32> {
        (self.0.keys.iter().enumerate())
            .map(|(i, &k)| (k, i as u32))
            .collect()
    }

    /// The block's ranks with more than one thread.
    pub fn multi_threaded(&self) -> &[u32] {
        &self.0.multi
    }
}

/// The clock rules over the streams of some ranks, the whole trace's
/// (`pass`) or a block's (`pmtrace-mpi`): each stream steps while what its
/// next event depends on is known. In a block, the clocks of other blocks'
/// sends and what each collective exit merges come in from outside
/// ([`Part::set_send`], [`Part::answer`]), and the block's sends and
/// enters go out ([`Part::take_sends`], [`Part::take_enters`]).
pub struct Part<'a> {
    pub(super) w: Walker<'a>,
    /// Each stream's next event.
    pub(super) cur: Vec<At>,
}

impl<'a> Part<'a> {
    /// The rules over a block: `collectives` merged at exits or not,
    /// `races` as in [`RaceClocks::compute`].
    pub fn new(
        trace: &'a Trace,
        m: &'a Messages,
        plan: &'a PartPlan,
        collectives: bool,
        vectors: PartVectors,
        races: Option<&'a [bool]>,
    ) -> Part<'a> {
        let vectors = match vectors {
            PartVectors::None => Vectors::None,
            PartVectors::HappensBefore => Vectors::Eager,
            PartVectors::Lazy => Vectors::Lazy,
        };
        let mut w = walker(trace, m, &plan.0, collectives, vectors, false, races);
        w.part = Some(PartIo::default());
        Part {
            w,
            cur: vec![At::default(); plan.0.events.len()],
        }
    }

    /// Steps every stream as far as it can, once round; the events stepped.
    pub fn advance(&mut self) -> u64 {
        let mut stepped = 0;
        let p = self.w.p;
        let w = &mut self.w;
        for (r, at) in self.cur.iter_mut().enumerate() {
            while let Some((ev, next)) = p.events[r].get(at) {
                if !w.ready(r, ev) {
                    break;
                }
                w.step(r, ev, true);
                at.past(ev, next);
                stepped += 1;
            }
        }
        stepped
    }

    /// The first stream not at its end.
    pub fn blocked(&self) -> Option<usize> {
        (0..self.cur.len()).find(|&r| !self.w.p.events[r].done(&self.cur[r]))
    }

    /// The collective exit stream `r` waits at: (instance, member).
    pub fn waiting_exit(&self, r: usize) -> Option<(usize, u32)> {
        match self.w.p.events[r].get(&self.cur[r]) {
            Some((Ev::Exit(i), _)) if self.w.collectives => {
                Some((i as usize, self.w.member(r, i as usize)))
            }
            _ => None,
        }
    }

    /// Steps stream `r` past what never came; an exit merges `partial`,
    /// what its owner had (the whole trace's walk has the enters itself).
    pub fn force(&mut self, r: usize, partial: Option<(u64, Vec<u64>)>) {
        let (ev, next) = self.w.p.events[r]
            .get(&self.cur[r])
            .expect("a stream not at its end");
        let waits = self.waiting_exit(r);
        if let (Some(io), Some((i, mine)), Some(x)) = (&mut self.w.part, waits, partial) {
            io.answers.insert((i as u32, mine), x);
        }
        self.w.out.forced += 1;
        self.w.step(r, ev, false);
        self.cur[r].past(ev, next);
    }

    /// The sends stepped since the last call.
    pub fn take_sends(&mut self) -> Vec<u32> {
        self.w
            .part
            .as_mut()
            .map(|io| std::mem::take(&mut io.sends))
            .unwrap_or_default()
    }

    /// Send `i`'s clock and vector clock.
    pub fn send(&self, i: usize) -> (Option<u64>, Option<&[u64]>) {
        let vc = self.w.out.send_vc.get(i).and_then(|v| v.as_deref());
        (self.w.out.send_lc.get(i), vc)
    }

    /// The clock (and vector) of send `i`, made in another block.
    pub fn set_send(&mut self, i: usize, lc: u64, vc: Option<Vec<u64>>) {
        let out = &mut self.w.out;
        out.send_lc.set(i, lc);
        if let Some(v) = vc {
            if self.w.lazy {
                if let Some(d) = self.w.m.sends[i].dst {
                    out.send_own[i] = v.get(d as usize).copied().unwrap_or(NO_CLOCK);
                }
            }
            if let Some(slot) = out.send_vc.get_mut(i) {
                *slot = Some(v);
            }
        }
    }

    /// The enters stepped since the last call: (instance, member, clock,
    /// vector clock).
    pub fn take_enters(&mut self) -> Vec<(u32, u32, u64, Vec<u64>)> {
        self.w
            .part
            .as_mut()
            .map(|io| std::mem::take(&mut io.enters))
            .unwrap_or_default()
    }

    /// What member `member`'s exit of instance `i` merges.
    pub fn answer(&mut self, i: u32, member: u32, lc: u64, vc: Vec<u64>) {
        if let Some(io) = &mut self.w.part {
            io.answers.insert((i, member), (lc, vc));
        }
    }

    /// The clocks computed, for the checks.
    pub fn finish(self) -> PartClocks {
        PartClocks(self.w.out)
    }
}

/// What a [`Part`] computed.
pub struct PartClocks(pub(super) Pass);

impl PartClocks {
    /// Events stepped past what they depend on.
    pub fn forced(&self) -> u64 {
        self.0.forced
    }

    /// The clocks after each call.
    pub fn after_call(self) -> CallClocks {
        self.0.after_call
    }

    /// The piggybacks of `recvs` checked against the clocks of a walk
    /// without collectives, when both ends are single-threaded (`multi`:
    /// the ranks that are not).
    pub fn wire(
        &self,
        trace: &Trace,
        m: &Messages,
        multi: &[u32],
        recvs: std::ops::Range<usize>,
    ) -> WireCheck {
        wire_check(trace, m, &self.0, multi, recvs)
    }

    /// Matched pairs of `recvs` whose clocks are not ordered: (Lamport,
    /// vector, in vector mode).
    pub fn violations(&self, m: &Messages, recvs: std::ops::Range<usize>) -> (u64, u64) {
        violations(m, &self.0, recvs)
    }

    /// Places where a thread's clock decreased, call by call.
    pub fn decreasing(&self) -> u64 {
        self.0.after_call.decreasing()
    }

    /// What the race rules compare ([`RaceClocks`]).
    pub fn races(self, vector: bool) -> RaceClocks {
        race_clocks(self.0, vector)
    }
}

/// What [`wire_check`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireCheck {
    pub checked: u64,
    pub mismatches: u64,
    /// Matched piggybacks not checked: an end's rank has several threads
    /// that call MPI, whose shared clock the replay cannot order.
    pub unchecked: u64,
}

/// Piggybacks checked against the walk without collectives (see
/// [`PartClocks::wire`]).
pub(super) fn wire_check(
    trace: &Trace,
    m: &Messages,
    wire: &Pass,
    multi: &[u32],
    recvs: std::ops::Range<usize>,
) -> WireCheck {
    let single = |rank: u32| multi.binary_search(&rank).is_err();
    let vector = !wire.send_vc.is_empty();
    let (mut checked, mut mismatches, mut unchecked) = (0, 0, 0);
    for ri in recvs {
        let r = &m.recvs[ri];
        let (Some(pb), Some(si)) = (r.pb, m.send_by_id(ri)) else {
            continue;
        };
        let s = &m.sends[si];
        if !(single(s.src) && single(r.dst)) {
            unchecked += 1;
            continue;
        }
        checked += 1;
        let mut bad = wire.send_lc.get(si) != Some(pb.lc) || s.time != pb.sent;
        if vector {
            let got = pb.vc.and_then(|at| {
                let th = trace.held(r.dst).thread(r.completion.thread)?;
                let w = trace.world_size as usize;
                th.vcs
                    .get(at as usize * w..(at as usize + 1) * w)
                    .map(|v| v.to_vec())
            });
            bad |= got.as_deref() != wire.send_vc[si].as_deref();
        }
        if bad {
            mismatches += 1;
        }
    }
    WireCheck {
        checked,
        mismatches,
        unchecked,
    }
}
