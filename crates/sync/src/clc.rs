//! Step 3: the controlled logical clock (Becker et al. §3–4).
//!
//! **Forward amortization** visits every stamp after the sends it depends
//! on (see [`super::replay`]) and sets
//!
//! ```text
//!  LC'(e) = max( C(e),
//!                LC'(prev) + max(γ·(C(e) − C(prev)), min(δ, C(e) − C(prev))),
//!                LC'(send) + μ  for every send (or collective enter) e receives from )
//! ```
//!
//! Eq. 4 of the paper advances every event by at least δ; here the δ term
//! is capped at the recorded interval, so stamps recorded at the same
//! nanosecond stay together and a trace without violations is left exactly
//! as it was (the γ term is then below C(e) too). After a receive is pushed
//! forward by a jump Δ, later stamps run at γ times their recorded pace
//! until they meet their own clock again.
//!
//! **Backward amortization** then spreads each jump over the stamps before
//! the receive: a linear ramp from 0 to Δ over the amortization window L_A
//! before it, so no interval collapses into one jump. A send (or collective
//! enter) in the window may not move past its receive minus μ, so the ramp
//! is capped there, and the cap holds for everything before that send too
//! (the piecewise ramp of the paper's Fig. 2):
//!
//! ```text
//!  shift(e) = min( Δ·(LC'(e) − (b − L_A)) / L_A ,  min over sends s in [e, r) of slack(s) )
//!  b = LC'(r) − Δ, the receive's place without the jump
//! ```
//!
//! Each jump is ramped on its own and an event takes the largest shift any
//! ramp gives it; each ramp never decreases towards its receive and stays
//! below it, so the largest one keeps every location's order. Shifts only
//! move stamps later, so a receive never gets closer to its send, and the
//! slacks, computed from the forward times, stay valid.

use super::graph::{Ahead, Dep, Graph, Node, Times};
use super::replay::replay_ready;
use pmtrace_matching::collective::Readiness;
use std::cmp::Ordering;

use crate::extremes::Extremes;

/// CLC parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClcParams {
    /// Pace of the clock after a jump (Scalasca uses 0.99 to 0.99999).
    pub gamma: f64,
    /// Minimum step between two stamps recorded apart, in ns.
    pub delta_ns: u64,
    /// Amortization window before a jump, in ns; `None`: the jump divided
    /// by `ramp`.
    pub window_ns: Option<u64>,
    /// Slope of the backward ramp when the window is not fixed.
    pub ramp: f64,
}

impl Default for ClcParams {
    fn default() -> Self {
        ClcParams {
            gamma: 0.99,
            delta_ns: 1,
            window_ns: None,
            ramp: 0.01,
        }
    }
}

/// What CLC did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClcOutcome {
    /// Receives pushed forward by their send.
    pub jumps: u64,
    /// Stamps visited before a send they depend on (lost events).
    pub forced: u64,
}

/// Runs forward then backward amortization on times `c` (in node order).
pub fn run(g: &Graph, c: &impl Times, p: &ClcParams) -> (Vec<Vec<u64>>, ClcOutcome) {
    let (mut t, jumps, forced) = forward(g, c, p);
    backward(g, &mut t, &jumps, p);
    let outcome = ClcOutcome {
        jumps: jumps.iter().map(|j| j.len() as u64).sum(),
        forced,
    };
    (t, outcome)
}

/// Forward amortization: the new times, and the jumps (stamp, Δ) per location.
#[allow(clippy::type_complexity)]
pub fn forward(
    g: &Graph,
    c: &impl Times,
    p: &ClcParams,
) -> (Vec<Vec<u64>>, Vec<Vec<(u32, u64)>>, u64) {
    forward_with(g, c, p, ONE_BY_ONE)
}

/// [`forward`], asking the senders of an instance of up to `one_by_one`
/// members one by one (tests compare both ways).
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn forward_with(
    g: &Graph,
    c: &impl Times,
    p: &ClcParams,
    one_by_one: usize,
) -> (Vec<Vec<u64>>, Vec<Vec<(u32, u64)>>, u64) {
    let locs = g.locs.len();
    let mut t: Vec<Vec<u64>> = (0..locs as u32).map(|l| vec![0; g.len(l)]).collect();
    let mut jumps: Vec<Vec<(u32, u64)>> = vec![Vec::new(); locs];
    // Each location's input time at its previous node (nodes of a location
    // are visited in order), so that each input time is computed once here.
    let mut prev_c: Vec<u64> = vec![0; locs];
    let ahead = std::cell::RefCell::new(Ahead::new(g, c));
    let mut latest = Latest::new(g, one_by_one);
    let forced = replay_ready(
        g,
        |n| ahead.borrow_mut().get(n.loc, n.k),
        |n, cn, ready| {
            let (l, k) = (n.loc as usize, n.k as usize);
            let before = std::mem::replace(&mut prev_c[l], cn);
            let prev = (k > 0).then(|| (before, t[l][k - 1]));
            let need = (g.deps(n).iter())
                .map(|&d| latest.dep_time(g, &t, ready, n, d))
                .max();
            let (tn, jump) = advance(p, cn, prev, need);
            if let Some(j) = jump {
                jumps[l].push((n.k, j));
            }
            t[l][k] = tn;
        },
    );
    (t, jumps, forced)
}

/// Instances up to this size ask each exit's senders one by one.
const ONE_BY_ONE: usize = 64;

/// What a collective exit asks of its time in the forward pass, the
/// latest of its senders' enters plus μ ([`Graph::dep_time`]), in about
/// constant time for a large instance whose senders all entered: from the
/// latest enters by class ([`Extremes`], which the owners of
/// `pmtrace-mpi` ask too), taken once per instance. An exit forced
/// before its senders entered (lost events), a scan and a small instance
/// ask the senders one by one.
struct Latest {
    one_by_one: usize,
    tops: Vec<Option<Extremes>>,
}

impl Latest {
    fn new(g: &Graph, one_by_one: usize) -> Latest {
        Latest {
            one_by_one,
            tops: (0..g.insts.len()).map(|_| None).collect(),
        }
    }

    /// `ready`: how far each instance got, as the replay counts it.
    fn dep_time(
        &mut self,
        g: &Graph,
        t: &[Vec<u64>],
        ready: &[Readiness],
        recv: Node,
        dep: Dep,
    ) -> u64 {
        let Dep::Coll { inst, member } = dep else {
            return g.dep_time(t, recv, dep);
        };
        let i = inst as usize;
        let instance = &g.insts[i];
        if instance.ordered()
            || instance.members.len() <= self.one_by_one
            || !ready[i].senders_all_in()
        {
            return g.dep_time(t, recv, dep);
        }
        if !instance.may_recv(member) {
            return 0;
        }
        let Some(m) = instance.members[member as usize].as_ref() else {
            return g.dep_time(t, recv, dep);
        };
        let tops = self.tops[i].get_or_insert_with(|| {
            let mut ex = Extremes::new(Ordering::Greater);
            for (k, m) in instance.members.iter().enumerate() {
                if let Some(m) = m.as_ref().filter(|_| instance.may_send(k as u32)) {
                    ex.add(
                        k as u32,
                        g.place(m.loc),
                        t[m.loc as usize][m.enter as usize],
                    );
                }
            }
            ex
        });
        (tops.best(member, g.place(m.loc), g.mus(), |v, m| v + m)).unwrap_or(0)
    }
}

/// A stamp's forward time, the one rule of the forward pass: from its
/// input time `cn`, its location's previous input and forward times
/// (`None` at the first stamp) and the latest that its receives `need`
/// (with μ); and the jump it made, if it had to go past its paced time.
#[inline]
pub fn advance(
    p: &ClcParams,
    cn: u64,
    prev: Option<(u64, u64)>,
    need: Option<u64>,
) -> (u64, Option<u64>) {
    let base = prev.map_or(cn, |(c_prev, t_prev)| paced(p, cn, c_prev, t_prev));
    match need {
        Some(x) if x > base => (x, Some(x - base)),
        _ => (base, None),
    }
}

/// A stamp's forward time before its receives: its input time `cn`, or
/// its location's previous forward time `t_prev` plus its recorded
/// interval from `c_prev` at the paced rate, whichever is later.
#[inline]
fn paced(p: &ClcParams, cn: u64, c_prev: u64, t_prev: u64) -> u64 {
    let dc = cn.saturating_sub(c_prev);
    let paced = (dc as f64 * p.gamma) as u64;
    cn.max(t_prev + paced.max(dc.min(p.delta_ns)))
}

/// Backward amortization of the `jumps` of the forward pass, in place.
pub fn backward(g: &Graph, t: &mut [Vec<u64>], jumps: &[Vec<(u32, u64)>], p: &ClcParams) {
    backward_with(t, jumps, p, |t, n| {
        (!g.outs(n).is_empty()).then(|| g.slack(t, n))
    });
}

/// [`backward`] with the slack of each stamp given: `slack(t, n)` is
/// `None` for a stamp that nothing receives from, else how far it may
/// move later.
pub fn backward_with(
    t: &mut [Vec<u64>],
    jumps: &[Vec<(u32, u64)>],
    p: &ClcParams,
    slack: impl Fn(&[Vec<u64>], Node) -> Option<u64>,
) {
    let mut shifts: Vec<Vec<u64>> = Vec::with_capacity(t.len());
    for (l, js) in jumps.iter().enumerate() {
        let mut shift = vec![0u64; if js.is_empty() { 0 } else { t[l].len() }];
        for &(k, jump) in js {
            let window = p
                .window_ns
                .unwrap_or(((jump as f64) / p.ramp.max(1e-9)) as u64)
                .max(1);
            let base = t[l][k as usize] - jump;
            let start = base.saturating_sub(window);
            let mut cap = u64::MAX;
            for j in (0..k as usize).rev() {
                let tj = t[l][j];
                if tj < start {
                    break;
                }
                let n = Node {
                    loc: l as u32,
                    k: j as u32,
                };
                if let Some(room) = slack(t, n) {
                    cap = cap.min(room);
                }
                let ramp = (u128::from(jump) * u128::from(tj - start) / u128::from(window)) as u64;
                let s = ramp.min(cap);
                if s > shift[j] {
                    shift[j] = s;
                }
            }
        }
        shifts.push(shift);
    }
    for (ts, sh) in t.iter_mut().zip(&shifts) {
        for (v, s) in ts.iter_mut().zip(sh) {
            *v += s;
        }
    }
}
