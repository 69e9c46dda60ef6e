//! Collective instances whose members span blocks, each assembled whole
//! at one process, its owner (by a hash of its key), as the serial
//! [`collective::instances`] assembles it: the report's analyses of an
//! instance then run there unchanged.

use rustc_hash::FxHashMap as HashMap;

use pmtrace_matching::clocks::Shape;
use pmtrace_matching::collective::{self, Flow, Instance, MemberCalls, MemberOf};
use pmtrace_trace::Trace;

use crate::fabric::Fabric;
use crate::wire::{In, Out, Wire};

/// A member held here.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    pub owner: u32,
    pub calls: MemberCalls,
    /// Its rank in the communicator.
    pub me: u32,
}

/// An instance owned here.
#[derive(Debug, Clone)]
pub struct Owned {
    pub inst: Instance<MemberCalls>,
    /// Where it first appears, rank by rank: (world rank, the member's
    /// place among that rank's members); the serial order of instances.
    pub first: (u32, u32),
    /// Per member: (communicator rank, process, slot there), by process.
    pub from: Vec<(u32, u32, u32)>,
}

/// The members held here and the instances owned here.
pub struct Insts {
    pub members: Vec<Member>,
    /// In the serial order of instances.
    pub owned: Vec<Owned>,
}

/// The owner of the instance `key` among `procs` processes.
pub fn owner_of(key: (u64, u64, u64), procs: usize) -> usize {
    let mut h = key.0 ^ key.1.rotate_left(21) ^ key.2.rotate_left(42);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    (h % procs as u64) as usize
}

/// What a member's record to its instance's owner begins with: the
/// instance's key, the member's communicator rank and the communicator's
/// size, the instance's shape, flow and root.
pub struct Head {
    pub key: (u64, u64, u64),
    pub me: u32,
    pub size: u32,
    pub shape: Shape,
    pub flow: Flow,
    pub root: Option<u32>,
}

impl Head {
    pub fn of(m: &MemberOf) -> Head {
        Head {
            key: m.key,
            me: m.me as u32,
            size: m.size as u32,
            shape: m.shape,
            flow: m.flow,
            root: m.root,
        }
    }
}

impl Wire for Head {
    fn put(&self, o: &mut Out) {
        o.u64(self.key.0).u64(self.key.1).u64(self.key.2);
        o.u32(self.me).u32(self.size);
        o.u8(self.shape.code()).u8(self.flow.code());
        o.u32(self.root.unwrap_or(u32::MAX));
    }
    fn get(i: &mut In) -> Head {
        Head {
            key: (i.u64(), i.u64(), i.u64()),
            me: i.u32(),
            size: i.u32(),
            shape: Shape::from_code(i.u8()).expect("a shape code"),
            flow: Flow::from_code(i.u8()).expect("a flow code"),
            root: Some(i.u32()).filter(|&r| r != u32::MAX),
        }
    }
}

/// Sends every member of the block to its instance's owner.
pub fn gather<F: Fabric + ?Sized>(f: &F, trace: &Trace) -> Insts {
    let procs = f.size();
    let mut members = Vec::new();
    let mut out = vec![Out::default(); procs];
    let mut seen: HashMap<u32, u32> = HashMap::default();
    collective::members(trace, |m| {
        let owner = owner_of(m.key, procs);
        let rank = m.calls.enter.rank;
        let place = seen.entry(rank).or_insert(0);
        let o = &mut out[owner];
        o.put(&Head::of(&m)).at(m.calls.enter);
        match m.calls.exit {
            Some(x) => {
                o.u8(1);
                o.at(x);
            }
            None => {
                o.u8(0);
            }
        }
        o.u64(m.calls.sent).u64(m.calls.recvd);
        o.u32(rank).u32(*place).u32(members.len() as u32);
        *place += 1;
        members.push(Member {
            owner: owner as u32,
            calls: m.calls,
            me: m.me as u32,
        });
    });
    let got = f.exchange(out.into_iter().map(|o| o.0).collect());
    let mut index: HashMap<(u64, u64, u64), usize> = HashMap::default();
    let mut owned: Vec<Owned> = Vec::new();
    for (proc, bytes) in got.iter().enumerate() {
        let mut i = In::new(bytes);
        while !i.done() {
            let Head {
                key,
                me,
                size,
                shape,
                flow,
                root,
            } = i.get();
            let enter = i.at();
            let exit = (i.u8() == 1).then(|| i.at());
            let (sent, recvd) = (i.u64(), i.u64());
            let (rank, place, slot) = (i.u32(), i.u32(), i.u32());
            let ii = *index.entry(key).or_insert_with(|| {
                owned.push(Owned {
                    inst: Instance {
                        shape,
                        flow,
                        root,
                        comm: key.0,
                        members: vec![None; size as usize],
                    },
                    first: (rank, place),
                    from: Vec::new(),
                });
                owned.len() - 1
            });
            let o = &mut owned[ii];
            // Members come by process, each's in rank order: the first
            // seen here is the first in the whole trace.
            o.first = o.first.min((rank, place));
            o.inst.members[me as usize] = Some(MemberCalls {
                enter,
                exit,
                sent,
                recvd,
            });
            o.from.push((me, proc as u32, slot));
        }
    }
    owned.sort_by_key(|o| o.first);
    Insts { members, owned }
}

impl Insts {
    /// Something of each member held here, to its instance's owner: `put`
    /// writes it (given the member's slot), `get` reads it (given the
    /// owned instance and the communicator rank).
    pub fn to_owners<F: Fabric + ?Sized>(
        &self,
        f: &F,
        put: impl Fn(usize, &mut Out),
        mut get: impl FnMut(usize, u32, &mut In),
    ) {
        let mut out = vec![Out::default(); f.size()];
        for (slot, m) in self.members.iter().enumerate() {
            put(slot, &mut out[m.owner as usize]);
        }
        let got = f.exchange(out.into_iter().map(|o| o.0).collect());
        let mut readers: Vec<In> = got.iter().map(|b| In::new(b)).collect();
        // Each process's members came in its slot order; the owned
        // instances list them by process in that order too.
        let mut order: Vec<(u32, u32, usize, u32)> = Vec::new();
        for (ii, o) in self.owned.iter().enumerate() {
            for &(me, proc, slot) in &o.from {
                order.push((proc, slot, ii, me));
            }
        }
        order.sort_unstable();
        for (proc, _, ii, me) in order {
            get(ii, me, &mut readers[proc as usize]);
        }
    }
}
