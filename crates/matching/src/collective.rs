//! Collective instances: the calls with the same communicator and
//! sequence number on each member, and who depends on whom.
//!
//! Becker et al. (`000_…` §4.1) model a collective as logical messages from
//! enters to exits. pmtrace draws one only where data flows, from a member
//! that sent data to one that received some, since only there does the
//! standard order an exit after an enter:
//!
//! | shape | a member's exit depends on the enter of |
//! |---|---|
//! | 1-to-N (Bcast, Scatter) | the root |
//! | N-to-1 (Reduce, Gather) | every member (root's exit only) |
//! | N-to-N (Allreduce, Allgather, Alltoall, ...) | every member |
//! | Scan, Exscan | every member of lower rank |
//!
//! always of members that sent data, at a member that received data: a
//! zero-count instance, or a zero-byte member, has none. Barriers
//! (`MPI_Barrier`, `MPI_Ibarrier`, `MPI_Barrier_init`) synchronize by
//! definition: every member's exit depends on every enter. Neighbourhood
//! collectives (the trace does not say who the neighbours are) and
//! `MPI_Comm_idup` (communicator management) have no logical message.
//!
//! Sync (`sync::graph`) and the viewers' exports (flows of a collective)
//! read the same instances, so they draw the same logical messages.

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use pmtrace_format::Kind;
use pmtrace_trace::{Call, Payload};

use crate::clocks::Shape;
use pmtrace_trace::read::{EventRef, Rank, Trace};

/// What a member contributes: the bytes it sent and received.
pub trait Part {
    fn sent(&self) -> u64;
    fn recvd(&self) -> u64;
}

/// Completed logical messages an instance has drawn in full (see
/// [`Instance::drawn_messages`]).
pub const DRAWN: u64 = 4096;

pub use pmtrace_format::coll::Flow;

/// Who sends to whom in a collective (Becker et al. §4: logical messages
/// from enters to exits), one rule for whoever holds the members: this
/// crate's [`Instance`], and the owner of an instance in `pmtrace-mpi`.
/// Members are taken in communicator-rank order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub shape: Shape,
    pub flow: Flow,
    /// Communicator rank of the root (rooted shapes only).
    pub root: Option<u32>,
}

impl Rule {
    /// Whether the member of communicator rank `me`, which sent `sent`
    /// bytes, sends to the members that may receive (but itself, and for
    /// a scan those before it).
    pub fn may_send(&self, me: u32, sent: u64) -> bool {
        match self.flow {
            Flow::Unordered => false,
            Flow::Barrier => true,
            Flow::Data => sent > 0 && (self.shape != Shape::OneToN || Some(me) == self.root),
        }
    }

    /// Whether the member of communicator rank `me`, which received
    /// `recvd` bytes, receives from the members that may send.
    pub fn may_recv(&self, me: u32, recvd: u64) -> bool {
        match self.flow {
            Flow::Unordered => false,
            Flow::Barrier => true,
            Flow::Data => recvd > 0 && (self.shape != Shape::NToOne || Some(me) == self.root),
        }
    }

    /// Whether a member sends only to the members after it (a scan).
    pub fn is_ordered(&self) -> bool {
        self.flow == Flow::Data && matches!(self.shape, Shape::Scan | Shape::Exscan)
    }

    /// Whether the member at position `k` sends to the one at `i`, given
    /// that the first may send and the second may receive.
    pub fn sends(&self, (k, may_send): (usize, bool), (i, may_recv): (usize, bool)) -> bool {
        k != i && may_send && may_recv && (!self.is_ordered() || k < i)
    }

    /// Per member, in linear time, from which members may send and which
    /// may receive: whether it receives a logical message and whether it
    /// sends one.
    pub fn ends(&self, may_send: &[bool], may_recv: &[bool]) -> (Vec<bool>, Vec<bool>) {
        let n = may_send.len();
        let (s, r) = (
            may_send.iter().filter(|&&x| x).count(),
            may_recv.iter().filter(|&&x| x).count(),
        );
        let first_sender = may_send.iter().position(|&x| x).unwrap_or(n);
        let last_receiver = may_recv.iter().rposition(|&x| x);
        let ordered = self.is_ordered();
        let receives = (0..n)
            .map(|i| {
                may_recv[i]
                    && if ordered {
                        first_sender < i
                    } else {
                        s > usize::from(may_send[i])
                    }
            })
            .collect();
        let sends = (0..n)
            .map(|k| {
                may_send[k]
                    && if ordered {
                        last_receiver.is_some_and(|l| l > k)
                    } else {
                        r > usize::from(may_recv[k])
                    }
            })
            .collect();
        (receives, sends)
    }
}

/// What [`Readiness`] asks of an instance, whoever holds its members: the
/// whole trace's [`Instance`], or the owner's view of one in `pmtrace-mpi`.
pub trait Members {
    /// Member slots (a member is `0..slots()`; a slot may be empty).
    fn slots(&self) -> u32;
    /// Members present.
    fn present(&self) -> u32;
    /// Whether member `k` sends to the members that may receive.
    fn may_send(&self, k: u32) -> bool;
    /// Whether member `i` receives from the members that may send.
    fn may_recv(&self, i: u32) -> bool;
    /// Whether a member sends only to the members after it (a scan).
    fn ordered(&self) -> bool;
    /// Whether every member's exit depends on every other member's enter.
    fn all_to_all(&self) -> bool;
}

impl<P: Part> Members for Instance<P> {
    fn slots(&self) -> u32 {
        self.members.len() as u32
    }
    fn present(&self) -> u32 {
        self.members.iter().flatten().count() as u32
    }
    fn may_send(&self, k: u32) -> bool {
        Instance::may_send(self, k)
    }
    fn may_recv(&self, i: u32) -> bool {
        Instance::may_recv(self, i)
    }
    fn ordered(&self) -> bool {
        Instance::ordered(self)
    }
    fn all_to_all(&self) -> bool {
        Instance::all_to_all(self)
    }
}

/// An instance known only by which members send and whether it is a
/// scan, as `pmtrace-mpi`'s owners know it: enough for [`Readiness`] to
/// count the enters that come (each exit waits for every sender but
/// itself; a scan's, for the senders before it). Where every exit waits
/// for every enter, every member of two or more sends to the others:
/// counting the senders is the same rule.
pub struct Senders<'a> {
    pub sender: &'a [bool],
    pub ordered: bool,
}

impl Members for Senders<'_> {
    fn slots(&self) -> u32 {
        self.sender.len() as u32
    }
    fn present(&self) -> u32 {
        self.sender.len() as u32
    }
    fn may_send(&self, k: u32) -> bool {
        self.sender[k as usize]
    }
    fn may_recv(&self, _: u32) -> bool {
        true
    }
    fn ordered(&self) -> bool {
        self.ordered
    }
    fn all_to_all(&self) -> bool {
        false
    }
}

/// Which exits of an instance are ready as its members' enters come in:
/// an exit once every member that sends to it has entered (for a scan,
/// every one before it), in constant time per question and O(N) per
/// instance over all its enters. The one readiness rule of the forward
/// replays.
#[derive(Debug, Clone)]
pub struct Readiness {
    entered: Vec<bool>,
    count: u32,
    /// Every exit depends on every enter ([`Instance::all_to_all`]).
    all_to_all: bool,
    present: u32,
    /// The members that may send, and how many of them entered.
    senders: u32,
    senders_in: u32,
    /// For a scan: the first member that may send and has not entered
    /// (the members' count if none), since an exit waits for the senders
    /// before it.
    open_sender: u32,
}

impl Readiness {
    pub fn new<M: Members>(inst: &M) -> Readiness {
        let n = inst.slots();
        let mut r = Readiness {
            entered: vec![false; n as usize],
            count: 0,
            all_to_all: inst.all_to_all(),
            present: inst.present(),
            senders: (0..n).filter(|&k| inst.may_send(k)).count() as u32,
            senders_in: 0,
            open_sender: 0,
        };
        r.open_sender = r.next_open(inst, 0);
        r
    }

    /// The first member from `from` on that may send and has not entered.
    fn next_open<M: Members>(&self, inst: &M, from: u32) -> u32 {
        let n = inst.slots();
        (from..n)
            .find(|&k| inst.may_send(k) && !self.entered[k as usize])
            .unwrap_or(n)
    }

    /// Whether every member that may send has entered.
    pub fn senders_all_in(&self) -> bool {
        self.senders_in >= self.senders
    }

    /// Whether every member that an exit may wait for has entered: every
    /// present one where every exit waits for every enter, else every
    /// one that may send.
    pub fn all_in(&self) -> bool {
        if self.all_to_all {
            self.count >= self.present
        } else {
            self.senders_all_in()
        }
    }

    /// Whether the exit of `member` is ready: every member that sends to
    /// it entered.
    pub fn ready<M: Members>(&self, inst: &M, member: u32) -> bool {
        if self.all_to_all {
            // Every present member, this one included (its enter came
            // first on its own location).
            self.count >= self.present
        } else if !inst.may_recv(member) {
            true
        } else if inst.ordered() {
            self.open_sender >= member
        } else {
            let own = u32::from(inst.may_send(member));
            let own_in = own & u32::from(self.entered[member as usize]);
            self.senders_in - own_in >= self.senders - own
        }
    }

    /// How many members that send to `member` (an unordered instance's
    /// exit: every sender but itself) have not entered.
    pub fn missing<M: Members>(&self, inst: &M, member: u32) -> u32 {
        let own = u32::from(inst.may_send(member));
        let own_in = own & u32::from(self.entered[member as usize]);
        (self.senders - own) - (self.senders_in - own_in)
    }

    /// `member` entered; returns the members whose exits may have become
    /// ready by it: all of them when the instance's last enters come in,
    /// for a scan those up to its next sender still out, else none.
    pub fn enter<M: Members>(&mut self, inst: &M, member: u32) -> std::ops::Range<u32> {
        let n = inst.slots();
        self.entered[member as usize] = true;
        self.count += 1;
        if self.all_to_all {
            return if self.count == self.present {
                0..n
            } else {
                0..0
            };
        }
        if !inst.may_send(member) {
            return 0..0;
        }
        self.senders_in += 1;
        if inst.ordered() {
            let open = self.open_sender;
            if member != open {
                return 0..0;
            }
            let next = self.next_open(inst, open + 1);
            self.open_sender = next;
            // Members open + 1 ..= next now have every sender before them in.
            return (open + 1).min(n)..(next + 1).min(n);
        }
        // A member that may send waits for the others (all but one in),
        // any other member for all of them.
        if self.senders_in + 1 >= self.senders {
            0..n
        } else {
            0..0
        }
    }
}

/// One collective call across its communicator.
#[derive(Debug, Clone)]
pub struct Instance<P> {
    pub shape: Shape,
    pub flow: Flow,
    /// Communicator rank of the root (rooted shapes only).
    pub root: Option<u32>,
    /// Global id of the communicator.
    pub comm: u64,
    /// By communicator rank (local group first for an intercommunicator);
    /// `None` where the rank recorded no such call.
    pub members: Vec<Option<P>>,
}

/// A member's calls: the call that entered the collective and, for a
/// nonblocking one, the call that completed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberCalls {
    pub enter: EventRef,
    /// The call whose end is the member's exit (`enter` itself for a
    /// blocking collective); `None` for a nonblocking one never completed.
    pub exit: Option<EventRef>,
    pub sent: u64,
    pub recvd: u64,
}

impl Part for MemberCalls {
    fn sent(&self) -> u64 {
        self.sent
    }
    fn recvd(&self) -> u64 {
        self.recvd
    }
}

impl<P: Part> Instance<P> {
    /// Members whose enter the exit of `i` depends on (never `i` itself).
    pub fn senders(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        (0..self.members.len() as u32).filter(move |&k| self.sends(k, i))
    }

    /// Whether the exit of member `i` depends on the enter of member `k`
    /// (one logical message `k` → `i`), in constant time.
    pub fn sends(&self, k: u32, i: u32) -> bool {
        let (k_send, i_recv) = (self.may_send(k), self.may_recv(i));
        self.rule()
            .sends((k as usize, k_send), (i as usize, i_recv))
    }

    /// The instance's rule of who sends to whom.
    pub fn rule(&self) -> Rule {
        Rule {
            shape: self.shape,
            flow: self.flow,
            root: self.root,
        }
    }

    /// Whether member `k` sends to the members that may receive (but
    /// itself, and for a scan those before it).
    pub fn may_send(&self, k: u32) -> bool {
        let m = self.members.get(k as usize).and_then(Option::as_ref);
        m.is_some_and(|m| self.rule().may_send(k, m.sent()))
    }

    /// Whether member `i` receives from the members that may send.
    pub fn may_recv(&self, i: u32) -> bool {
        let m = self.members.get(i as usize).and_then(Option::as_ref);
        m.is_some_and(|m| self.rule().may_recv(i, m.recvd()))
    }

    /// Whether a member sends only to the members after it (a scan).
    pub fn ordered(&self) -> bool {
        self.rule().is_ordered()
    }

    /// Whether every member's exit depends on every other member's enter
    /// (a barrier, or data from and to every member).
    pub fn all_to_all(&self) -> bool {
        match (self.flow, self.shape) {
            (Flow::Barrier, _) => true,
            (Flow::Data, Shape::NToN) => self
                .members
                .iter()
                .flatten()
                .all(|m| m.sent() > 0 && m.recvd() > 0),
            _ => false,
        }
    }

    /// Per member, in linear time: whether it receives a logical message
    /// (`senders` is not empty) and whether it sends one.
    pub fn ends(&self) -> (Vec<bool>, Vec<bool>) {
        let n = self.members.len() as u32;
        let may_send: Vec<bool> = (0..n).map(|k| self.may_send(k)).collect();
        let may_recv: Vec<bool> = (0..n).map(|i| self.may_recv(i)).collect();
        self.rule().ends(&may_send, &may_recv)
    }

    /// Every logical message (sender, receiver) of the instance.
    pub fn logical_messages(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..self.members.len() as u32).flat_map(move |i| self.senders(i).map(move |k| (k, i)))
    }

    /// The same instance with each member mapped (dropped where `f` says `None`).
    pub fn map<Q>(&self, mut f: impl FnMut(&P) -> Option<Q>) -> Instance<Q> {
        Instance {
            shape: self.shape,
            flow: self.flow,
            root: self.root,
            comm: self.comm,
            members: self
                .members
                .iter()
                .map(|m| m.as_ref().and_then(&mut f))
                .collect(),
        }
    }
}

impl Instance<MemberCalls> {
    /// The logical messages whose receiver completed the collective: what
    /// a viewer can draw from an enter to an exit.
    pub fn completed_messages(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.logical_messages().filter(|&(_, to)| {
            self.members[to as usize]
                .as_ref()
                .is_some_and(|m| m.exit.is_some())
        })
    }

    /// The completed logical messages a viewer draws: all of them, but for
    /// an instance where they grow with the square of its members (N to N,
    /// barriers, scans) and number more than [`DRAWN`]: then one for each
    /// exit, from the first member that sends (to that member's exit, from
    /// the next one that may send to it). N² arrows of a 16,384-rank
    /// allreduce (268 M) are neither drawable nor writable.
    pub fn drawn_messages(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let count = self.completed_count();
        let thin = count > DRAWN && count > 2 * self.members.len() as u64;
        let all = (!thin).then(|| self.completed_messages());
        let one = thin.then(|| {
            let n = self.members.len() as u32;
            let first = (0..n).find(|&k| self.may_send(k));
            (0..n).filter_map(move |i| {
                let exited = self.members[i as usize]
                    .as_ref()
                    .is_some_and(|m| m.exit.is_some());
                let from = match first {
                    Some(k) if k != i => Some(k),
                    _ => (0..n).find(|&k| k != i && self.may_send(k)),
                }?;
                (exited && self.sends(from, i)).then_some((from, i))
            })
        });
        all.into_iter().flatten().chain(one.into_iter().flatten())
    }

    /// How many of [`Instance::completed_messages`] there are, in linear
    /// time.
    pub fn completed_count(&self) -> u64 {
        let n = self.members.len() as u32;
        let senders = (0..n).filter(|&k| self.may_send(k)).count() as u64;
        let mut before = 0u64;
        let mut count = 0u64;
        for i in 0..n {
            let exited = self.members[i as usize]
                .as_ref()
                .is_some_and(|m| m.exit.is_some());
            let sends = u64::from(self.may_send(i));
            if exited && self.may_recv(i) {
                count += if self.ordered() {
                    before
                } else {
                    senders - sends
                };
            }
            before += sends;
        }
        count
    }
}

/// Every collective instance of `trace` that completed without error on
/// some member, in order of first appearance (rank by rank). The k-th
/// start of a persistent collective (`coll_init`) is an instance of its
/// own, entered at that start.
pub fn instances(trace: &Trace) -> Vec<Instance<MemberCalls>> {
    /// A member's instance key, its rank's place, and its place among the
    /// rank's members.
    type Appearance = ((u64, u64, u64), u32, u32);
    // Each rank's members side by side, in call order.
    let of_rank: Vec<Vec<MemberOf>> = trace
        .ranks
        .par_iter()
        .map(|rank| {
            let mut mine = Vec::new();
            rank_members(trace, rank, |m| mine.push(m));
            mine
        })
        .collect();
    // Every member by instance, then in order of appearance: an
    // instance's first is where it first appears, and gives its shape.
    let mut order: Vec<Appearance> = of_rank
        .iter()
        .enumerate()
        .flat_map(|(r, mine)| {
            mine.iter()
                .enumerate()
                .map(move |(k, m)| (m.key, r as u32, k as u32))
        })
        .collect();
    order.par_sort_unstable();
    let mut groups: Vec<&[Appearance]> = order.chunk_by(|a, b| a.0 == b.0).collect();
    groups.par_sort_unstable_by_key(|g| (g[0].1, g[0].2));
    let member = |&(_, r, k): &Appearance| &of_rank[r as usize][k as usize];
    groups
        .par_iter()
        .map(|g| {
            let first = member(&g[0]);
            let mut members = vec![None; first.size];
            // A later member in the same place replaces an earlier one.
            for m in g.iter().map(member) {
                if let Some(slot) = members.get_mut(m.me) {
                    *slot = Some(m.calls);
                }
            }
            Instance {
                shape: first.shape,
                flow: first.flow,
                root: first.root,
                comm: first.key.0,
                members,
            }
        })
        .collect()
}

/// One rank's part in a collective instance, as [`members`] finds it.
#[derive(Debug, Clone, Copy)]
pub struct MemberOf {
    /// The instance: communicator's global id, sequence number, and which
    /// start of a persistent collective (0 for others).
    pub key: (u64, u64, u64),
    /// The member's rank in the communicator (local group first for an
    /// intercommunicator), of `size`.
    pub me: usize,
    pub size: usize,
    /// The instance's shape, flow and root, as this member's call gives
    /// them (an instance takes its first member's).
    pub shape: Shape,
    pub flow: Flow,
    pub root: Option<u32>,
    pub calls: MemberCalls,
}

/// Every member of every collective instance of `trace` (or of a block of
/// it), rank by rank, each rank's in call order.
pub fn members(trace: &Trace, mut each: impl FnMut(MemberOf)) {
    for rank in &trace.ranks {
        rank_members(trace, rank, &mut each);
    }
}

/// The members of `rank` (of `trace`) in [`members`], in call order.
fn rank_members(trace: &Trace, rank: &Rank, mut each: impl FnMut(MemberOf)) {
    // Where each nonblocking collective completed: read the first time
    // one is met (a rank of blocking collectives has none to look up).
    let done_at = std::cell::OnceCell::new();
    let done_at = || done_at.get_or_init(|| rank.completions());
    // Persistent collectives by op id, and how often each was started.
    let mut inits: HashMap<u64, (Call, u64)> = HashMap::default();
    for (_, c) in rank.payload_calls_of(|k| k == Kind::CollInit) {
        if let (Kind::CollInit, &Payload::Coll { op: Some(op), .. }) =
            (rank.kind(c.func), &c.payload)
        {
            inits.insert(op, (c, 0));
        }
    }
    let kinds = |k| matches!(k, Kind::Coll | Kind::Icoll | Kind::Start);
    // (the collective call, which start of it, its enter, its exit)
    let mut members: Vec<(Call, u64, EventRef, Option<EventRef>)> = Vec::new();
    for (at, c) in rank.payload_calls_of(kinds) {
        match (rank.kind(c.func), &c.payload) {
            (Kind::CollInit, _) => {}
            (kind, &Payload::Coll { op, .. }) => {
                let exit = if kind == Kind::Icoll {
                    op.and_then(|op| done_at().get(&op)).copied()
                } else {
                    Some(at)
                };
                members.push((c, 0, at, exit));
            }
            (_, Payload::Start { started }) => {
                for &(init, instance) in started.iter() {
                    if let Some((made, k)) = init.and_then(|i| inits.get_mut(&i)) {
                        *k += 1;
                        members.push((*made, *k, at, done_at().get(&instance).copied()));
                    }
                }
            }
            _ => {}
        }
        for (call, start, enter, exit) in members.drain(..) {
            if let Some(m) = member_of(trace, rank, &call, start, enter, exit) {
                each(m);
            }
        }
    }
}

/// `rank`'s part in the instance of a collective call (its `start`-th
/// start for a persistent one), unless the call failed or its
/// communicator is unknown.
fn member_of(
    trace: &Trace,
    rank: &Rank,
    c: &Call,
    start: u64,
    enter: EventRef,
    exit: Option<EventRef>,
) -> Option<MemberOf> {
    let &Payload::Coll {
        comm,
        root,
        sent,
        recvd,
        seq,
        ..
    } = &c.payload
    else {
        return None;
    };
    if c.rc != 0 {
        return None;
    }
    let def = rank.comm_at(comm, c.t_start)?;
    let cm = trace.comms.get(def.global_id)?;
    let size = cm.members.len() + cm.remote_members.len();
    // The position in the groups one after the other.
    let me = match cm.rank_of(rank.rank) {
        Some(p) => p as usize,
        None => cm.members.len() + cm.remote_rank_of(rank.rank)? as usize,
    };
    let coll = rank.coll(c.func);
    let shape = coll.shape;
    let rooted = shape.rooted();
    let root = root
        .filter(|_| rooted && !cm.inter)
        .and_then(|r| u32::try_from(r).ok())
        .filter(|&r| (r as usize) < size);
    Some(MemberOf {
        key: (def.global_id, seq, start),
        me,
        size,
        shape: if rooted && root.is_none() {
            Shape::NToN
        } else {
            shape
        },
        flow: coll.flow,
        root,
        calls: MemberCalls {
            enter,
            exit,
            sent,
            recvd,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rank: u32, index: u32) -> EventRef {
        EventRef {
            rank,
            thread: 0,
            index,
        }
    }

    #[test]
    fn completed_count_counts_the_completed_messages_in_linear_time() {
        // Members: sent/received bytes, exited or not, absent (every 5th).
        let member = |k: u32| {
            (k % 5 != 4).then(|| MemberCalls {
                enter: at(k, 1),
                exit: (k % 3 != 2).then(|| at(k, 2)),
                sent: u64::from(k % 4 != 1) * 8,
                recvd: u64::from(k % 6 != 3) * 8,
            })
        };
        let mut checked = 0;
        every_instance(&member, &[0, 1, 2, 7, 30], |inst, what| {
            let want = inst.completed_messages().count() as u64;
            assert_eq!(inst.completed_count(), want, "{what}");
            checked += u64::from(want > 0);
        });
        assert!(checked > 20, "{checked} instances with messages");
    }

    /// Calls `check` on an instance of every flow, shape, size in `sizes`
    /// and root (none, the first member, the middle one) with members
    /// `member(k)`, and a description of it.
    fn every_instance(
        member: &dyn Fn(u32) -> Option<MemberCalls>,
        sizes: &[u32],
        mut check: impl FnMut(&Instance<MemberCalls>, String),
    ) {
        for flow in [Flow::Data, Flow::Barrier, Flow::Unordered] {
            for shape in Shape::ALL {
                for &n in sizes {
                    for root in [None, Some(0), Some(n / 2)] {
                        let inst = Instance {
                            shape,
                            flow,
                            root,
                            comm: 1,
                            members: (0..n).map(member).collect(),
                        };
                        check(&inst, format!("{flow:?} {shape:?} n={n} root={root:?}"));
                    }
                }
            }
        }
    }

    #[test]
    fn ends_are_those_of_the_logical_messages() {
        let member = |k: u32| {
            (k % 5 != 4).then(|| MemberCalls {
                enter: at(k, 1),
                exit: Some(at(k, 2)),
                sent: u64::from(k % 4 != 1) * 8,
                recvd: u64::from(k % 6 != 3) * 8,
            })
        };
        every_instance(&member, &[0, 1, 2, 3, 7, 30], |inst, what| {
            let n = inst.members.len();
            let mut want = (vec![false; n], vec![false; n]);
            for (k, i) in inst.logical_messages() {
                want.0[i as usize] = true;
                want.1[k as usize] = true;
            }
            assert_eq!(inst.ends(), want, "{what}");
        });
    }

    #[test]
    fn large_quadratic_instances_draw_one_message_per_exit() {
        let member = |k: u32| {
            Some(MemberCalls {
                enter: at(k, 1),
                exit: (k != 5).then(|| at(k, 2)),
                sent: 8,
                recvd: 8,
            })
        };
        let inst = |shape, n: u32| Instance {
            shape,
            flow: Flow::Data,
            root: matches!(shape, Shape::OneToN | Shape::NToOne).then_some(3),
            comm: 1,
            members: (0..n).map(member).collect(),
        };
        // 64 members: 63 exits × 63 senders = 3,969, all drawn.
        let small = inst(Shape::NToN, 64);
        assert_eq!(small.drawn_messages().count(), 63 * 63);
        assert!(small.drawn_messages().eq(small.completed_messages()));
        // 100 members: 9,801 messages; one per exit, from member 0 (to
        // member 0 from member 1); member 5 never exited.
        let big = inst(Shape::NToN, 100);
        assert_eq!(big.completed_count(), 99 * 99);
        let drawn: Vec<(u32, u32)> = big.drawn_messages().collect();
        let mut want = vec![(1, 0)];
        want.extend((1..100).filter(|&i| i != 5).map(|i| (0, i)));
        assert_eq!(drawn, want);
        // A scan: only members before send; member 0 receives nothing.
        let scan = inst(Shape::Scan, 100);
        let drawn: Vec<(u32, u32)> = scan.drawn_messages().collect();
        assert_eq!(drawn.len(), 98, "{drawn:?}");
        assert!(drawn.iter().all(|&(k, i)| k == 0 && i > 0));
        // Rooted shapes grow linearly: all drawn.
        for shape in [Shape::OneToN, Shape::NToOne] {
            let rooted = inst(shape, 10_000);
            assert!(rooted.drawn_messages().eq(rooted.completed_messages()));
        }
    }
}
