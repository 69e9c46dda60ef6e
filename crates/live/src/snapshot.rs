//! One look at a job's live files: what each rank does, whom the blocked
//! ones wait for, and the hang if there is one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use pmtrace_format::live::{self as fmt, LiveKind, LiveRank, LiveThread, Peer, Wait};
use serde::Serialize;

use crate::hang::{self, Hang, Node, State};
use crate::site::{Frame, Resolver};

/// A rank whose writer has not beaten for this long is taken for gone.
pub const GONE_AFTER_NS: u64 = 3_000_000_000;

/// How a snapshot tells time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Now, by the wall clock: a running job.
    Now,
    /// At each rank's last heartbeat: where a job that was killed stood.
    LastBeat,
}

#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub time_unix_ns: u64,
    pub world_size: u32,
    /// `running`, or `ended` once every rank finished or is gone.
    pub job: &'static str,
    pub hang_after_ns: u64,
    pub ranks: Vec<RankView>,
    pub summary: Summary,
    pub hang: Option<Hang>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RankView {
    pub rank: u32,
    pub state: State,
    /// The MPI function its first thread is in, if any.
    pub call: Option<String>,
    /// How long it has been in that call, or computing.
    pub for_ns: u64,
    /// The one rank the call waits for, when there is one.
    pub peer: Option<u32>,
    /// Every rank the call waits for (resolved once it has blocked 0.2 s).
    pub waits_for: Vec<u32>,
    /// Where the call came from, the innermost application frame first
    /// (found once it has blocked a second; empty until then).
    pub site: Vec<Frame>,
    pub calls: u64,
    pub messages_sent: u64,
    pub bytes_sent: u64,
    /// Since the previous snapshot; null in the first.
    pub rates: Option<Rates>,
    pub phase: Option<String>,
    pub lamport: u64,
    pub host: String,
    pub pid: u32,
    pub threads: Vec<ThreadView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThreadView {
    pub thread: u32,
    pub tid: u64,
    pub state: State,
    pub call: Option<String>,
    pub for_ns: u64,
    pub waits_for: Vec<u32>,
    pub site: Vec<Frame>,
    pub calls: u64,
    pub phase: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rates {
    pub calls_per_s: f64,
    pub messages_per_s: f64,
    pub bytes_per_s: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub mpi: u32,
    pub compute: u32,
    pub finished: u32,
    pub gone: u32,
    /// Ranks others wait for, most waited for first.
    pub slowest: Vec<Slow>,
    /// Collectives some members wait in, with the members not in them yet.
    pub collectives: Vec<CollWait>,
    /// Messages sent and not yet received, as the senders' calls show
    /// them: a blocking send, or a wait on a send's request, blocked for
    /// its message to be taken. (A send that completed before its message
    /// was received, as small messages do, shows nowhere.)
    pub unreceived: Vec<Unreceived>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Unreceived {
    /// The sender, and its thread.
    pub rank: u32,
    pub thread: u32,
    /// The receiver, a world rank; null when only its rank on the
    /// communicator is known (`comm_rank`).
    pub to: Option<u32>,
    pub comm_rank: Option<u32>,
    /// The communicator's global id (0: `MPI_COMM_WORLD`).
    pub comm: u64,
    /// The sender's call, and how long it has been in it.
    pub call: String,
    pub for_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Slow {
    pub rank: u32,
    pub state: State,
    /// Ranks whose calls wait for it.
    pub waited_for_by: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct CollWait {
    /// The communicator's global id (0: `MPI_COMM_WORLD`).
    pub comm: u64,
    /// The collective's number on it.
    pub seq: u64,
    pub call: Option<String>,
    pub waiting: Vec<u32>,
    pub missing: Vec<u32>,
}

/// Why a directory gave no snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// No live file yet: the job may not have started.
    NotYet(String),
    /// Not a directory, not readable, or a trace without live files.
    Bad(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ReadError::NotYet(m) | ReadError::Bad(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads a trace directory's live files, again and again.
pub struct Reader {
    dir: PathBuf,
    names: HashMap<u32, Vec<String>>,
    prev: HashMap<u32, (u64, u64, u64, u64)>,
    sites: Resolver,
}

impl Reader {
    pub fn new(dir: &Path) -> Result<Reader, String> {
        if !dir.is_dir() {
            return Err(format!("{}: not a directory", dir.display()));
        }
        Ok(Reader {
            dir: dir.to_path_buf(),
            names: HashMap::new(),
            prev: HashMap::new(),
            sites: Resolver::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The live files' ranks, read now; an error when there are none (or
    /// none readable).
    pub fn read(&self) -> Result<(u32, BTreeMap<u32, LiveRank>), ReadError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| ReadError::Bad(format!("{}: {e}", self.dir.display())))?;
        let mut ranks = BTreeMap::new();
        let mut traces = 0u32;
        let mut errors = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("rank-") && name.ends_with(".pmt") {
                traces += 1;
            }
            if !(name.starts_with("rank-") && name.ends_with(".live")) {
                continue;
            }
            let path = e.path();
            let read = || std::fs::read(&path);
            match read()
                .map_err(|e| e.to_string())
                .and_then(|b| LiveRank::parse(b, read).map_err(|e| e.to_string()))
            {
                Ok(r) => {
                    ranks.insert(r.rank, r);
                }
                Err(e) => errors.push(format!("{name}: {e}")),
            }
        }
        if ranks.is_empty() {
            return Err(match errors.first() {
                Some(e) => ReadError::Bad(format!("{}: {e}", self.dir.display())),
                None if traces > 0 => ReadError::Bad(format!(
                    "{}: a trace without live status files (rank-*.live): its job ran under an older pmtrace",
                    self.dir.display()
                )),
                None => ReadError::NotYet(format!(
                    "{}: no live status files (rank-*.live) yet: not a pmtrace trace directory, or its job has not reached MPI_Init",
                    self.dir.display()
                )),
            });
        }
        let size = ranks
            .values()
            .map(|r| r.size)
            .max()
            .unwrap_or(0)
            .max(traces);
        Ok((size, ranks))
    }

    /// One snapshot; `unix_now_ns` is the wall clock now.
    pub fn snapshot(
        &mut self,
        when: When,
        hang_after_ns: u64,
        unix_now_ns: u64,
    ) -> Result<Snapshot, ReadError> {
        let (size, ranks) = self.read()?;
        for &r in ranks.keys() {
            if !self.names.contains_key(&r) {
                let names = function_names(&self.dir.join(pmtrace_format::rank_file_name(r)));
                if let Some(n) = names {
                    self.names.insert(r, n);
                }
            }
        }
        let mut snap = build(&ranks, size, &self.names, when, hang_after_ns, unix_now_ns);
        let views = snap.ranks.iter_mut().flat_map(|v| {
            v.site
                .iter_mut()
                .chain(v.threads.iter_mut().flat_map(|t| t.site.iter_mut()))
        });
        let hang = snap.hang.iter_mut().flat_map(|h| {
            h.waits
                .iter_mut()
                .filter_map(|w| w.site.as_mut())
                .chain(h.end.iter_mut().filter_map(|e| e.site.as_mut()))
        });
        self.sites.resolve(views.chain(hang));
        for v in &mut snap.ranks {
            let now = (unix_now_ns, v.calls, v.messages_sent, v.bytes_sent);
            if let Some(&(t, c, m, b)) = self.prev.get(&v.rank) {
                let dt = now.0.saturating_sub(t) as f64 / 1e9;
                if dt > 0.05 {
                    v.rates = Some(Rates {
                        calls_per_s: now.1.saturating_sub(c) as f64 / dt,
                        messages_per_s: now.2.saturating_sub(m) as f64 / dt,
                        bytes_per_s: now.3.saturating_sub(b) as f64 / dt,
                    });
                }
            }
            self.prev.insert(v.rank, now);
        }
        Ok(snap)
    }
}

/// The function names of a rank's trace header, by id.
fn function_names(path: &Path) -> Option<Vec<String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut prefix = [0u8; pmtrace_format::FILE_PREFIX_LEN];
    f.read_exact(&mut prefix).ok()?;
    let len = u32::from_le_bytes(prefix[12..16].try_into().ok()?) as usize;
    let mut all = prefix.to_vec();
    all.resize(pmtrace_format::FILE_PREFIX_LEN + len.min(64 << 20), 0);
    f.read_exact(&mut all[pmtrace_format::FILE_PREFIX_LEN..])
        .ok()?;
    let (h, _) = pmtrace_format::decode_file_header(&all).ok()?;
    Some(h.functions.into_iter().map(|f| f.name).collect())
}

/// Who is in which communicator, from every rank's table.
struct Members {
    /// gid -> (world rank, rank in it) of its intra members.
    of: HashMap<u64, Vec<(u32, u32)>>,
    /// (world rank, gid) -> collectives started.
    seq: HashMap<(u32, u64), u64>,
    size: u32,
}

impl Members {
    fn new(ranks: &BTreeMap<u32, LiveRank>, size: u32) -> Members {
        let mut of: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
        let mut seq = HashMap::new();
        for r in ranks.values() {
            for c in &r.comms {
                seq.insert((r.rank, c.gid), c.seq);
                if !c.inter {
                    of.entry(c.gid).or_default().push((r.rank, c.rank));
                }
            }
        }
        Members { of, seq, size }
    }

    /// The world ranks of `gid`'s members.
    fn of(&self, gid: u64) -> Vec<u32> {
        if gid == 0 {
            return (0..self.size).collect();
        }
        let mut m: Vec<u32> = self
            .of
            .get(&gid)
            .map_or(Vec::new(), |v| v.iter().map(|&(w, _)| w).collect());
        m.sort_unstable();
        m
    }

    fn world(&self, gid: u64, peer: Peer) -> Option<u32> {
        match peer {
            Peer::World(r) => Some(r),
            Peer::Comm(cr) => self
                .of
                .get(&gid)?
                .iter()
                .find(|&&(_, c)| c == cr)
                .map(|&(w, _)| w),
            Peer::Any => None,
        }
    }
}

/// What each thread of each rank is in, with names and clauses.
struct Look<'a> {
    ranks: &'a BTreeMap<u32, LiveRank>,
    names: &'a HashMap<u32, Vec<String>>,
    members: Members,
}

impl Look<'_> {
    fn name(&self, rank: u32, func: u32) -> String {
        self.names
            .get(&rank)
            .and_then(|n| n.get(func as usize))
            .cloned()
            .unwrap_or_else(|| format!("function {func}"))
    }

    /// Whether `m` has entered collective `seq` of `gid`.
    fn entered(&self, m: u32, gid: u64, seq: u64) -> bool {
        if self.members.seq.get(&(m, gid)).is_some_and(|&s| s > seq) {
            return true;
        }
        let Some(r) = self.ranks.get(&m) else {
            return false;
        };
        r.threads.iter().any(|t| {
            t.in_call
                && t.waits
                    .as_ref()
                    .is_some_and(|(w, _)| w.contains(&Wait::Coll { gid, seq }))
        })
    }

    /// A blocked thread's clauses (see `hang`); `None` when it is not in a
    /// call that waits on others, or whom it waits for is not known yet.
    fn clauses(&self, me: u32, t: &LiveThread) -> Option<Vec<Vec<u32>>> {
        if !t.in_call || t.kind == LiveKind::Other {
            return None;
        }
        let (waits, _) = t.waits.as_ref()?;
        let mut out: Vec<Vec<u32>> = Vec::new();
        for wt in waits {
            match *wt {
                Wait::From { gid, peer } | Wait::To { gid, peer } => match peer {
                    Peer::Any => {
                        let all: Vec<u32> = self
                            .members
                            .of(gid)
                            .into_iter()
                            .filter(|&m| m != me)
                            .collect();
                        if !all.is_empty() {
                            out.push(all);
                        }
                    }
                    p => {
                        // A peer not mapped to the world: not known, so no
                        // constraint (never a false deadlock).
                        if let Some(w) = self.members.world(gid, p) {
                            out.push(vec![w]);
                        }
                    }
                },
                Wait::Coll { gid, seq } => {
                    for m in self.members.of(gid) {
                        if m != me && !self.entered(m, gid, seq) {
                            out.push(vec![m]);
                        }
                    }
                }
            }
        }
        if t.kind.any_of() {
            let mut all: Vec<u32> = out.into_iter().flatten().collect();
            all.sort_unstable();
            all.dedup();
            out = if all.is_empty() {
                Vec::new()
            } else {
                vec![all]
            };
        }
        Some(out)
    }
}

fn flat(clauses: &Option<Vec<Vec<u32>>>) -> Vec<u32> {
    let mut v: Vec<u32> = clauses.iter().flatten().flatten().copied().collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The snapshot of `ranks` (by world rank) in a world of `size`.
pub fn build(
    ranks: &BTreeMap<u32, LiveRank>,
    size: u32,
    names: &HashMap<u32, Vec<String>>,
    when: When,
    hang_after_ns: u64,
    unix_now_ns: u64,
) -> Snapshot {
    let look = Look {
        ranks,
        names,
        members: Members::new(ranks, size),
    };
    let mut views = Vec::with_capacity(size as usize);
    let mut nodes = Vec::with_capacity(size as usize);
    for rank in 0..size {
        let Some(r) = ranks.get(&rank) else {
            views.push(missing(rank));
            nodes.push(Node {
                state: State::Gone,
                call: None,
                for_ns: 0,
                site: None,
                clauses: None,
            });
            continue;
        };
        let now = match when {
            When::Now => r.now_ns(unix_now_ns),
            When::LastBeat => r.beat_ns,
        };
        let gone = match r.state {
            fmt::STATE_FINISHED => Some(State::Finished),
            fmt::STATE_ABORTED => Some(State::Gone),
            _ if when == When::Now
                && unix_now_ns.saturating_sub(r.beat_unix_ns)
                    > GONE_AFTER_NS.max(4 * u64::from(r.tick_ms) * 1_000_000) =>
            {
                Some(State::Gone)
            }
            _ => None,
        };
        let threads: Vec<(ThreadView, Option<Vec<Vec<u32>>>)> = r
            .threads
            .iter()
            .map(|t| {
                let clauses = look.clauses(rank, t);
                // In a call: since it began. Out of one: since the writer
                // saw it out, which is at most a tick late.
                let since = match (t.in_call, t.t) {
                    (_, 0) => r.start_ns,
                    (true, t0) => t0,
                    (false, t0) => t0.max(t.out_t),
                };
                let v = ThreadView {
                    thread: t.index,
                    tid: t.tid,
                    state: gone.unwrap_or(if t.in_call {
                        State::Mpi
                    } else {
                        State::Compute
                    }),
                    call: t.in_call.then(|| look.name(rank, t.func)),
                    for_ns: now.saturating_sub(since),
                    waits_for: flat(&clauses),
                    site: t.site.iter().map(Frame::of).collect(),
                    calls: t.events,
                    phase: t.phase.clone(),
                };
                (v, clauses)
            })
            .collect();
        // A rank is judged by its first thread, the one that started MPI.
        let first = threads.first();
        let state = gone.unwrap_or(first.map_or(State::Compute, |(v, _)| v.state));
        let clauses = first
            .and_then(|(_, c)| c.clone())
            .filter(|_| gone.is_none());
        // The one rank every wait of the call is on, if there is one.
        let peer = match r.threads.first().and_then(|t| t.waits.as_ref()) {
            Some((w, total)) if w.len() == *total as usize => {
                let mut peers = w.iter().map(|wt| match *wt {
                    Wait::From { gid, peer } | Wait::To { gid, peer } => {
                        look.members.world(gid, peer)
                    }
                    Wait::Coll { .. } => None,
                });
                let first = peers.next().flatten();
                first.filter(|&p| peers.all(|q| q == Some(p)))
            }
            _ => None,
        };
        let call = first.and_then(|(v, _)| v.call.clone());
        let for_ns = first.map_or(0, |(v, _)| v.for_ns);
        let site = first.map_or(Vec::new(), |(v, _)| v.site.clone());
        nodes.push(Node {
            state,
            call: call.clone(),
            for_ns,
            site: site.first().cloned(),
            clauses: clauses.clone(),
        });
        views.push(RankView {
            rank,
            state,
            call,
            for_ns,
            peer: peer.filter(|_| gone.is_none()),
            waits_for: flat(&clauses),
            site,
            calls: r.threads.iter().map(|t| t.events).sum(),
            messages_sent: r.threads.iter().map(|t| t.messages_sent).sum(),
            bytes_sent: r.threads.iter().map(|t| t.bytes_sent).sum(),
            rates: None,
            phase: r.threads.first().and_then(|t| t.phase.clone()),
            lamport: r.lamport,
            host: r.host.clone(),
            pid: r.pid,
            threads: threads.into_iter().map(|(v, _)| v).collect(),
        });
    }
    let summary = summarize(&views, &nodes, ranks, &look);
    let hang = hang::diagnose(&nodes, hang_after_ns);
    let ended = views
        .iter()
        .all(|v| matches!(v.state, State::Finished | State::Gone));
    Snapshot {
        time_unix_ns: unix_now_ns,
        world_size: size,
        job: if ended { "ended" } else { "running" },
        hang_after_ns,
        ranks: views,
        summary,
        hang,
    }
}

fn missing(rank: u32) -> RankView {
    RankView {
        rank,
        state: State::Gone,
        call: None,
        for_ns: 0,
        peer: None,
        waits_for: Vec::new(),
        site: Vec::new(),
        calls: 0,
        messages_sent: 0,
        bytes_sent: 0,
        rates: None,
        phase: None,
        lamport: 0,
        host: String::new(),
        pid: 0,
        threads: Vec::new(),
    }
}

fn summarize(
    views: &[RankView],
    nodes: &[Node],
    ranks: &BTreeMap<u32, LiveRank>,
    look: &Look,
) -> Summary {
    let mut s = Summary::default();
    for v in views {
        match v.state {
            State::Mpi => s.mpi += 1,
            State::Compute => s.compute += 1,
            State::Finished => s.finished += 1,
            State::Gone => s.gone += 1,
        }
    }
    let mut waited = vec![0u32; views.len()];
    for n in nodes {
        let mut targets: Vec<u32> = n.clauses.iter().flatten().flatten().copied().collect();
        targets.sort_unstable();
        targets.dedup();
        for t in targets {
            if let Some(w) = waited.get_mut(t as usize) {
                *w += 1;
            }
        }
    }
    let mut slow: Vec<Slow> = waited
        .iter()
        .enumerate()
        .filter(|&(_, &n)| n > 0)
        .map(|(r, &n)| Slow {
            rank: r as u32,
            state: views[r].state,
            waited_for_by: n,
        })
        .collect();
    slow.sort_by_key(|x| (std::cmp::Reverse(x.waited_for_by), x.rank));
    slow.truncate(5);
    s.slowest = slow;
    let mut colls: BTreeMap<(u64, u64), CollWait> = BTreeMap::new();
    for r in ranks.values() {
        let Some(t) = r.threads.first() else { continue };
        let Some((waits, _)) = t.waits.as_ref().filter(|_| t.in_call) else {
            continue;
        };
        for wt in waits {
            if let Wait::Coll { gid, seq } = *wt {
                let c = colls.entry((gid, seq)).or_insert_with(|| CollWait {
                    comm: gid,
                    seq,
                    call: Some(look.name(r.rank, t.func)),
                    waiting: Vec::new(),
                    missing: look
                        .members
                        .of(gid)
                        .into_iter()
                        .filter(|&m| !look.entered(m, gid, seq))
                        .collect(),
                });
                c.waiting.push(r.rank);
            }
        }
    }
    s.collectives = colls.into_values().collect();
    for r in ranks.values() {
        let view = views.get(r.rank as usize);
        for (i, t) in r.threads.iter().enumerate() {
            let Some((waits, _)) = t.waits.as_ref().filter(|_| t.in_call) else {
                continue;
            };
            let for_ns = view
                .and_then(|v| v.threads.get(i))
                .map_or(0, |tv| tv.for_ns);
            for wt in waits {
                if let Wait::To { gid, peer } = *wt {
                    s.unreceived.push(Unreceived {
                        rank: r.rank,
                        thread: t.index,
                        to: match peer {
                            Peer::World(w) => Some(w),
                            _ => None,
                        },
                        comm_rank: match peer {
                            Peer::Comm(c) => Some(c),
                            _ => None,
                        },
                        comm: gid,
                        call: look.name(r.rank, t.func),
                        for_ns,
                    });
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtrace_format::live::{LiveComm, LiveRank, LiveThread, SiteFrame};

    const S: u64 = 1_000_000_000;

    fn rank(r: u32, thread: LiveThread) -> LiveRank {
        LiveRank {
            rank: r,
            size: 4,
            pid: 100 + r,
            state: fmt::STATE_RUNNING,
            lost_threads: 0,
            beat: 40,
            beat_ns: 100 * S,
            beat_unix_ns: 1_000 * S,
            start_ns: 10 * S,
            lamport: 7,
            tick_ms: 250,
            host: "node".into(),
            comms: vec![LiveComm {
                gid: 0,
                seq: 3,
                rank: r,
                size: 4,
                inter: false,
            }],
            comms_truncated: false,
            threads: vec![thread],
        }
    }

    fn in_call(func: u32, kind: LiveKind, t: u64, waits: Vec<Wait>) -> LiveThread {
        let n = waits.len() as u32;
        LiveThread {
            index: 0,
            tid: 1,
            func,
            kind,
            in_call: true,
            t,
            out_t: 0,
            a: 0,
            b: 0,
            events: 50,
            messages_sent: 5,
            bytes_sent: 500,
            phase: None,
            waits: Some((waits, n)),
            site: Vec::new(),
        }
    }

    fn names() -> HashMap<u32, Vec<String>> {
        let n: Vec<String> = ["MPI_Send", "MPI_Recv", "MPI_Barrier", "MPI_Allreduce"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        (0..4).map(|r| (r, n.clone())).collect()
    }

    #[test]
    fn receives_from_each_other_and_a_barrier_give_the_deadlock_and_its_waiters() {
        let from = |p| Wait::From {
            gid: 0,
            peer: Peer::World(p),
        };
        let barrier = Wait::Coll { gid: 0, seq: 3 };
        let mut zero = in_call(1, LiveKind::Recv, 92 * S, vec![from(1)]);
        zero.site = vec![
            SiteFrame {
                address: 0x1189,
                symbol: None,
                object: "/apps/solver".into(),
            },
            SiteFrame {
                address: 0x1300,
                symbol: Some("main+0x20".into()),
                object: "/apps/solver".into(),
            },
        ];
        let ranks: BTreeMap<u32, LiveRank> = [
            rank(0, zero),
            rank(1, in_call(1, LiveKind::Recv, 92 * S, vec![from(0)])),
            rank(2, in_call(2, LiveKind::Coll, 93 * S, vec![barrier])),
            rank(3, in_call(2, LiveKind::Coll, 93 * S, vec![barrier])),
        ]
        .into_iter()
        .map(|r| (r.rank, r))
        .collect();
        // The wall clock is 1 s past the last beat: 9 s into the receives.
        let s = build(&ranks, 4, &names(), When::Now, 5 * S, 1_001 * S);
        assert_eq!(s.job, "running");
        let v = &s.ranks[0];
        assert_eq!(
            (v.state, v.call.as_deref(), v.for_ns, v.peer),
            (State::Mpi, Some("MPI_Recv"), 9 * S, Some(1))
        );
        assert_eq!(s.ranks[2].waits_for, vec![0, 1]);
        let h = s.hang.unwrap();
        assert_eq!(h.kind, hang::Kind::Deadlock);
        assert_eq!(h.ranks, vec![0, 1]);
        assert_eq!(h.waits.len(), 4);
        assert_eq!(h.waits[2].call.as_deref(), Some("MPI_Barrier"));
        // Where rank 0's receive came from: its frames, the innermost in
        // the hang's entry.
        let site: Vec<String> = v.site.iter().map(Frame::short).collect();
        assert_eq!(site, vec!["solver+0x1189", "main"]);
        assert_eq!(
            h.waits[0].site.as_ref().map(Frame::short).as_deref(),
            Some("solver+0x1189")
        );
        assert_eq!(h.waits[1].site, None);
        let c = &s.summary.collectives[0];
        assert_eq!(
            (c.comm, c.seq, c.waiting.clone(), c.missing.clone()),
            (0, 3, vec![2, 3], vec![0, 1])
        );
        assert_eq!(
            s.summary.slowest.iter().map(|x| x.rank).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert!(s.summary.unreceived.is_empty(), "receives only");
    }

    /// Ranks 0 and 1 both block in MPI_Send to each other (messages too
    /// large to go eagerly), the other rank's on a communicator the
    /// writer could not map: both messages are sent and not received.
    #[test]
    fn blocked_sends_are_messages_sent_and_not_yet_received() {
        let ranks: BTreeMap<u32, LiveRank> = [
            rank(
                0,
                in_call(
                    0,
                    LiveKind::Send,
                    97 * S,
                    vec![Wait::To {
                        gid: 0,
                        peer: Peer::World(1),
                    }],
                ),
            ),
            rank(
                1,
                in_call(
                    0,
                    LiveKind::Send,
                    98 * S,
                    vec![Wait::To {
                        gid: 7,
                        peer: Peer::Comm(0),
                    }],
                ),
            ),
            rank(
                2,
                in_call(
                    2,
                    LiveKind::Coll,
                    93 * S,
                    vec![Wait::Coll { gid: 0, seq: 3 }],
                ),
            ),
            rank(
                3,
                in_call(
                    2,
                    LiveKind::Coll,
                    93 * S,
                    vec![Wait::Coll { gid: 0, seq: 3 }],
                ),
            ),
        ]
        .into_iter()
        .map(|r| (r.rank, r))
        .collect();
        let s = build(&ranks, 4, &names(), When::Now, 5 * S, 1_001 * S);
        let u: Vec<_> = s
            .summary
            .unreceived
            .iter()
            .map(|u| (u.rank, u.to, u.comm_rank, u.comm, u.call.as_str(), u.for_ns))
            .collect();
        assert_eq!(
            u,
            vec![
                (0, Some(1), None, 0, "MPI_Send", 4 * S),
                (1, None, Some(0), 7, "MPI_Send", 3 * S),
            ]
        );
    }

    #[test]
    fn a_member_past_the_collective_has_entered_it() {
        let allreduce = Wait::Coll { gid: 0, seq: 3 };
        let mut ranks: BTreeMap<u32, LiveRank> = (0..4)
            .map(|r| {
                (
                    r,
                    rank(r, in_call(3, LiveKind::Coll, 90 * S, vec![allreduce])),
                )
            })
            .collect();
        // Rank 2 computes; rank 3 is one collective further on.
        ranks.get_mut(&2).unwrap().threads[0].in_call = false;
        ranks.get_mut(&2).unwrap().threads[0].waits = None;
        ranks.get_mut(&3).unwrap().comms[0].seq = 4;
        ranks.get_mut(&3).unwrap().threads[0].waits =
            Some((vec![Wait::Coll { gid: 0, seq: 4 }], 1));
        let s = build(&ranks, 4, &names(), When::Now, 5 * S, 1_000 * S);
        assert_eq!(s.ranks[0].waits_for, vec![2]);
        assert_eq!(s.ranks[2].state, State::Compute);
        let h = s.hang.unwrap();
        assert_eq!(h.kind, hang::Kind::Stalled);
        // Rank 3 waits on 0, 1 and 2 for the next collective.
        assert_eq!(h.ranks.last(), Some(&2));
        assert!(h.ranks.starts_with(&[0, 1]));
    }

    #[test]
    fn a_silent_writer_is_gone_and_a_missing_file_too() {
        let mut ranks: BTreeMap<u32, LiveRank> = BTreeMap::new();
        ranks.insert(0, rank(0, in_call(1, LiveKind::Recv, 99 * S, vec![])));
        let s = build(&ranks, 2, &names(), When::Now, 5 * S, 1_010 * S);
        assert_eq!(s.ranks[0].state, State::Gone);
        assert_eq!(s.ranks[1].state, State::Gone);
        assert_eq!(s.job, "ended");
        // Where it stood at its last heartbeat, after the job was killed.
        let s = build(&ranks, 2, &names(), When::LastBeat, 5 * S, 1_010 * S);
        assert_eq!((s.ranks[0].state, s.ranks[0].for_ns), (State::Mpi, S));
    }
}
