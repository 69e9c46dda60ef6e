//! The clock checks over blocks ([`pmtrace_matching::clocks`]), the parts
//! that need no replay: how receives matched by their piggybacked ids
//! (counted where each receive is), and whether the clocks one sender's
//! thread piggybacked ever decreased with its message ids (its receives
//! sorted at the sender's block).

use rustc_hash::FxHashMap as HashMap;

use pmtrace_matching::clocks::{
    self, ClockReport, HbCheck, Part, PartClocks, PartPlan, PartVectors, Shape,
};
use pmtrace_matching::{IdChecks, Messages};
use pmtrace_trace::Trace;

use crate::block::Block;
use crate::fabric::Fabric;
use crate::insts::owner_of;
use crate::messages::BlockMessages;
use crate::rounds::{self, Round};
use crate::wire::{In, Out};

/// The receives' checks by id, and the decreases along senders. On every
/// process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ids {
    pub checks: IdChecks,
    pub decreasing_by_sender: u64,
}

pub fn ids<F: Fabric + ?Sized>(f: &F, b: &Block, bm: &BlockMessages) -> Ids {
    let m = &bm.m;
    // Each sender's receives, at its block.
    let mut out = vec![Out::default(); f.size()];
    for (src, id, lc) in clocks::by_sender(m.recvs[..bm.own_recvs].iter()) {
        out[b.blocks.owner(src)].u32(src).u64(id).u64(lc);
    }
    let mut mine = Vec::new();
    for bytes in f.exchange(out.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            mine.push((i.u32(), i.u64(), i.u64()));
        }
    }
    let [a, b, c, d] = m.id_checks(0..bm.own_recvs).to_array();
    let mut v = [a, b, c, d, clocks::decreasing_by_sender(mine)];
    f.sum(&mut v);
    Ids {
        checks: IdChecks::from_array([v[0], v[1], v[2], v[3]]),
        decreasing_by_sender: v[4],
    }
}

/// A collective instance's enters, gathered at its owner.
struct Gathering {
    shape: Shape,
    root: Option<u32>,
    size: usize,
    /// (member, clock, vector clock) as they came.
    enters: Vec<(u32, u64, Vec<u64>)>,
    /// The process each enter came from.
    from: Vec<u32>,
    answered: bool,
}

const SEND: u8 = 0;
const ENTER: u8 = 1;
const ANSWER: u8 = 2;

type Key = (u64, u64, u64);

/// The clock rules over blocks ([`clocks::Part`]), in rounds: every block
/// steps its streams as far as it can; then one all-to-all carries the
/// clocks of sends received in another block (to the receiver's process),
/// the clocks at collective enters (to the instance's owner), and the
/// owners' answers (what each member's exit merges, once every member
/// entered). Stuck everywhere (lost events), the first stream not at its
/// end over all blocks steps on without what it waits for, an exit with
/// what its owner had, as the whole trace's walk does. Any order that
/// steps an event after what it depends on gives the same clocks, so
/// these are the serial ones.
pub fn replay<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    plan: &PartPlan,
    collectives: bool,
    vectors: PartVectors,
    races: Option<&[bool]>,
) -> PartClocks {
    let m = &bm.m;
    let mut r = Rules {
        me: f.index(),
        b,
        bm,
        plan,
        part: Part::new(&b.trace, m, plan, collectives, vectors, races),
        foreign: (bm.own_sends..m.sends.len())
            .map(|i| (bm.send_key(i), i))
            .collect(),
        local: plan.instances(),
        owned: HashMap::default(),
        answers: vec![Out::default(); f.size()],
        received: 0,
    };
    rounds::run(f, &mut r);
    r.part.finish()
}

/// The clock rules over blocks, as [`rounds::run`] drives them.
struct Rules<'x> {
    me: usize,
    b: &'x Block,
    bm: &'x BlockMessages,
    plan: &'x PartPlan,
    part: Part<'x>,
    /// The sends of other blocks that this block's receives took, by
    /// (process, index there).
    foreign: HashMap<(usize, u32), usize>,
    /// This block's instances, by key.
    local: HashMap<Key, u32>,
    /// The instances owned here, as their enters come.
    owned: HashMap<Key, Gathering>,
    /// The owners' answers, for the next round.
    answers: Vec<Out>,
    received: u64,
}

impl Round for Rules<'_> {
    fn advance(&mut self) -> u64 {
        self.part.advance()
    }

    fn outgoing(&mut self) -> Vec<Out> {
        let (m, procs) = (&self.bm.m, self.answers.len());
        let mut out = std::mem::replace(&mut self.answers, vec![Out::default(); procs]);
        for si in self.part.take_sends() {
            let si = si as usize;
            let to = match m.sends[si].dst {
                Some(d) if si < self.bm.own_sends && d < self.b.blocks.ranks => {
                    self.b.blocks.owner(d)
                }
                _ => continue,
            };
            if let (true, (Some(lc), vc)) = (to != self.me, self.part.send(si)) {
                out[to].u8(SEND).u32(si as u32).u64(lc);
                out[to].put_all(vc.unwrap_or_default());
            }
        }
        for (i, member, lc, vc) in self.part.take_enters() {
            let (key, shape, root, size) = self.plan.instance(i as usize);
            let o = &mut out[owner_of(key, procs)];
            o.u8(ENTER);
            o.put(&key);
            o.u8(shape.code())
                .u32(root.unwrap_or(u32::MAX))
                .u64(size as u64)
                .u32(member)
                .u64(lc);
            o.put(&vc);
        }
        out
    }

    fn take(&mut self, from: usize, bytes: &[u8]) {
        let mut i = In::new(bytes);
        while !i.done() {
            self.received += 1;
            match i.u8() {
                SEND => {
                    let (index, lc) = (i.u32(), i.u64());
                    let vc = i.get::<Vec<u64>>();
                    let si = self.foreign[&(from, index)];
                    self.part.set_send(si, lc, (!vc.is_empty()).then_some(vc));
                }
                ENTER => {
                    let key = i.get::<Key>();
                    let shape = Shape::from_code(i.u8()).expect("a shape code");
                    let root = Some(i.u32()).filter(|&r| r != u32::MAX);
                    let size = i.u64() as usize;
                    let (member, lc) = (i.u32(), i.u64());
                    let vc = i.get::<Vec<u64>>();
                    let g = self.owned.entry(key).or_insert_with(|| Gathering {
                        shape,
                        root,
                        size,
                        enters: Vec::new(),
                        from: Vec::new(),
                        answered: false,
                    });
                    g.enters.push((member, lc, vc));
                    g.from.push(from as u32);
                    if !g.answered && g.enters.len() >= g.size {
                        g.answered = true;
                        answer(g, key, &mut self.answers);
                    }
                }
                _ => {
                    let key = i.get::<Key>();
                    let (member, lc) = (i.u32(), i.u64());
                    let vc = i.get::<Vec<u64>>();
                    self.part.answer(self.local[&key], member, lc, vc);
                }
            }
        }
    }

    /// Work is left while some stream is blocked.
    fn left(&self) -> u64 {
        u64::from(self.part.blocked().is_some())
    }

    /// The records taken (an owner's answers come of enters taken).
    fn moved(&mut self) -> u64 {
        std::mem::take(&mut self.received)
    }

    fn force<F: Fabric + ?Sized>(&mut self, f: &F) {
        force(f, self.plan, &mut self.part, &self.owned);
    }
}

/// What every member of a gathered instance merges, to each process that
/// holds one of its enters.
fn answer(g: &Gathering, key: Key, out: &mut [Out]) {
    let mut to: Vec<(u32, u32)> = g
        .enters
        .iter()
        .map(|e| e.0)
        .zip(g.from.iter().copied())
        .collect();
    to.sort_unstable();
    to.dedup();
    let merged = clocks::merges(g.shape, g.root, &g.enters);
    let mut at = 0;
    for (member, lc, vc) in merged {
        while at < to.len() && to[at].0 == member {
            let o = &mut out[to[at].1 as usize];
            o.u8(ANSWER);
            o.put(&key);
            o.u32(member).u64(lc);
            o.put(&vc);
            at += 1;
        }
    }
}

/// Steps the first stream not at its end over all blocks past what it
/// waits for; an exit merges what its instance's owner gathered.
fn force<F: Fabric + ?Sized>(
    f: &F,
    plan: &PartPlan,
    part: &mut Part,
    owned: &HashMap<Key, Gathering>,
) {
    let procs = f.size();
    let mut stuck = vec![0u64; procs];
    stuck[f.index()] = u64::from(part.blocked().is_some());
    f.sum(&mut stuck);
    let first = stuck.iter().position(|&x| x > 0);
    let r = part.blocked().filter(|_| first == Some(f.index()));
    let waits = r.and_then(|r| part.waiting_exit(r));
    let mut query = vec![Out::default(); procs];
    if let Some((i, member)) = waits {
        let key = plan.instance(i).0;
        let o = &mut query[owner_of(key, procs)];
        o.put(&key);
        o.u32(member);
    }
    let got = f.exchange(query.into_iter().map(|o| o.0).collect());
    let mut back = vec![Out::default(); procs];
    for (from, bytes) in got.iter().enumerate() {
        let mut i = In::new(bytes);
        while !i.done() {
            let (key, member) = (i.get::<Key>(), i.u32());
            let (lc, vc) = owned
                .get(&key)
                .map(|g| clocks::merge_for(g.shape, g.root, &g.enters, member))
                .unwrap_or_default();
            back[from].u64(lc);
            back[from].put_all(&vc);
        }
    }
    let got = f.exchange(back.into_iter().map(|o| o.0).collect());
    let partial = waits.map(|(i, _)| {
        let mut i = In::new(&got[owner_of(plan.instance(i).0, procs)]);
        (i.u64(), i.get::<Vec<u64>>())
    });
    if let Some(r) = r {
        part.force(r, partial);
    }
}

/// The report's `clocks` object, as [`clocks::compute`] makes it, on every
/// process. The happens-before check, which only small runs get, runs at
/// process 0 on the whole trace.
pub fn report<F: Fabric + ?Sized>(f: &F, b: &Block, bm: &BlockMessages) -> ClockReport {
    let ids = ids(f, b, bm);
    let (mode, _) = first_header(f, b);
    let mut report = ClockReport {
        mode: mode.clone(),
        ..ClockReport::default()
    };
    if mode == "none" {
        return report;
    }
    report.set_ids(ids.checks);
    let vector = mode == "vector";
    let m = &bm.m;
    let plan = PartPlan::new(&b.trace, m);
    let mut multi = Out::default();
    multi.u32s(plan.multi_threaded());
    let mut multi: Vec<u32> = f
        .all_gather(multi.0)
        .iter()
        .flat_map(|b| In::new(b).u32s())
        .collect();
    multi.sort_unstable();
    let vectors = if vector {
        PartVectors::HappensBefore
    } else {
        PartVectors::None
    };
    let own = 0..bm.own_recvs;
    // The runtime's view: no collectives; every piggyback must equal it.
    let wire = replay(f, b, bm, &plan, false, vectors, None);
    let w = wire.wire(&b.trace, m, &multi, own.clone());
    drop(wire);
    let full = replay(f, b, bm, &plan, true, vectors, None);
    let (lamport, vector_bad) = full.violations(m, own);
    let mut v = [
        w.checked,
        w.mismatches,
        lamport,
        vector_bad,
        full.decreasing(),
        full.forced(),
        (bm.own_sends + bm.own_recvs) as u64,
        w.unchecked,
    ];
    f.sum(&mut v);
    report.wire_checked = v[0];
    report.wire_mismatches = v[1];
    report.wire_unchecked = v[7];
    report.lamport_violations = v[2];
    report.decreasing = ids.decreasing_by_sender + v[4];
    report.forced = v[5];
    if vector {
        report.vector_violations = Some(v[3]);
        let small = v[6] <= clocks::HB_MAX_EVENTS as u64 && multi.is_empty();
        if small {
            report.happens_before = happens_before(f, b);
        }
    }
    report
}

/// The clock mode and `MPI_ANY_TAG` of the trace's first rank, as the
/// serial code reads them, on every process.
pub fn first_header<F: Fabric + ?Sized>(f: &F, b: &Block) -> (String, i32) {
    let mut o = Out::default();
    if let Some(r) = b.trace.ranks.first() {
        o.u32(r.rank)
            .str(&r.header.clocks)
            .i32(r.header.constants.any_tag);
    }
    f.all_gather(o.0)
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| {
            let mut i = In::new(b);
            (i.u32(), i.str(), i.i32())
        })
        .min()
        .map_or_else(|| ("none".to_string(), -1), |(_, mode, tag)| (mode, tag))
}

/// The happens-before check of a small vector-mode trace, on every
/// process: process 0 reads the whole trace.
fn happens_before<F: Fabric + ?Sized>(f: &F, b: &Block) -> Option<HbCheck> {
    let mut o = Out::default();
    if f.index() == 0 {
        let hb = Trace::open(&b.trace.dir).ok().and_then(|t| {
            let m = Messages::build(&t);
            clocks::compute(&t, &m).report.happens_before
        });
        if let Some(hb) = hb {
            o.u64(hb.events).u64(hb.pairs).u64(hb.disagreements);
        }
    }
    let got = f.all_gather(o.0).swap_remove(0);
    let mut i = In::new(&got);
    (!i.done()).then(|| HbCheck {
        events: i.u64(),
        pairs: i.u64(),
        disagreements: i.u64(),
    })
}
