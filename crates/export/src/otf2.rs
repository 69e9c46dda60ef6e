//! OTF2 archives, for Vampir and Scalasca, through the system OTF2 library.
//!
//! ```text
//!  ARCHIVE_DIR/traces.otf2        anchor file
//!  ARCHIVE_DIR/traces.def         global definitions
//!  ARCHIVE_DIR/traces/<loc>.evt   events of one location (rank, thread)
//!  ARCHIVE_DIR/traces/<loc>.def   its ClockOffset definitions (raw times only)
//! ```
//!
//! **Definitions.** System tree machine → host → rank (location group) →
//! thread (location, id `rank << 32 | thread`); one region per MPI
//! function, with its role; communicators as OTF2 wants them for MPI: one
//! `COMM_LOCATIONS` group of every rank's first thread, then each
//! communicator's group as indices into it; `ClockProperties` at 1 ns.
//!
//! **Events per call** (the times of [`View::time`], made monotone per
//! location as OTF2 requires):
//!
//! | call | between Enter (start) and Leave (end) |
//! |---|---|
//! | send, sendrecv | MpiSend at the start (sendrecv: MpiRecv at the end) |
//! | isend, start of a persistent send | MpiIsend (request id) |
//! | recv, mrecv | MpiRecv at the end |
//! | irecv, imrecv, start of a persistent receive | MpiIrecvRequest |
//! | wait/test family | MpiIrecv, MpiIsendComplete, NonBlockingCollectiveComplete, MpiRequestCancelled per completed request (and at `MPI_Request_free` of a request whose cancellation succeeded) |
//! | collective | MpiCollectiveBegin, MpiCollectiveEnd (op, root, bytes) |
//! | nonblocking collective | NonBlockingCollectiveRequest |
//!
//! A buffer wait of the runtime's writer is a BufferFlush event. Attributes:
//! `lamport` (the Lamport clock after the call, on Leave), `message_id` (the
//! piggybacked id, on receives) and `vector_clock` (a string, on receives, in
//! vector mode). A send whose receiver could not be resolved writes no
//! MpiSend (it is counted in the summary).

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use pmtrace_format::Kind;
use pmtrace_otf2::ffi;
use pmtrace_otf2::{
    Archive, AttrValue, ClockOffset, CollectiveOp, EventWriter, UNDEFINED_U32, UNDEFINED_U64,
};
use pmtrace_trace::{Call, Payload, Record};

use super::view::{Location, View};
use super::ExportError;
use pmtrace_format::coll::{Coll, Flow, Shape};
use pmtrace_matching::ends::{Cursor, End};
use pmtrace_matching::matching::RecvHow;
use pmtrace_sync::interp;
use pmtrace_trace::ops::OpTable;
use pmtrace_trace::read::EventRef;

pub use pmtrace_otf2::ClockOffset as Offset;

/// The archive's name inside its directory.
pub const ARCHIVE_NAME: &str = "traces";

/// What was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub locations: u64,
    pub events: u64,
    pub enters: u64,
    pub sends: u64,
    pub receives: u64,
    pub collectives: u64,
    /// User phases written as regions (`pmtrace_phase_begin`/`_end`).
    pub phases: u64,
    /// Sends or receives left out: their peer was not resolved.
    pub unresolved: u64,
    pub synced: bool,
}

impl Summary {
    /// Adds the counts of a part written apart.
    fn add(&mut self, o: &Summary) {
        self.events += o.events;
        self.enters += o.enters;
        self.sends += o.sends;
        self.receives += o.receives;
        self.collectives += o.collectives;
        self.phases += o.phases;
        self.unresolved += o.unresolved;
    }
}

const ATTR_LAMPORT: u32 = 0;
const ATTR_MSG_ID: u32 = 1;
const ATTR_VC: u32 = 2;

/// Interned strings of the global definitions.
#[derive(Default, Clone)]
struct Strings {
    ids: HashMap<String, u32>,
    list: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.ids.insert(s.to_owned(), i);
        self.list.push(s.to_owned());
        i
    }
}

/// What a request id stands for on a rank: a collective's end is in
/// [`Ops::colls`], as a table of every request of a rank holds 8 bytes
/// each, not 40.
#[derive(Debug, Clone, Copy)]
enum Op {
    Send,
    Recv,
    Coll(u32),
}

/// A rank's requests, and the ends of its nonblocking collectives.
struct Ops {
    table: OpTable<Op>,
    colls: Vec<CollEnd>,
}

impl Ops {
    fn get(&self, op: u64) -> Option<Op> {
        self.table.get(&op).copied()
    }

    fn coll(&mut self, e: CollEnd) -> Op {
        self.colls.push(e);
        Op::Coll(self.colls.len() as u32 - 1)
    }
}

/// The MpiCollectiveEnd fields of a collective call.
#[derive(Debug, Clone, Copy)]
struct CollEnd {
    op: CollectiveOp,
    comm: u32,
    root: u32,
    sent: u64,
    recvd: u64,
}

/// OTF2's collective operation for an MPI function name, from its shape
/// where OTF2 has no operation of that name.
fn collective_op(name: &str, shape: Shape) -> CollectiveOp {
    let n = name.trim_start_matches("MPI_").to_ascii_lowercase();
    let n = n.strip_suffix("_init").unwrap_or(&n);
    let base = n.strip_prefix('i').filter(|r| {
        [
            "barrier",
            "bcast",
            "gather",
            "scatter",
            "allgather",
            "alltoall",
            "allreduce",
            "reduce",
            "scan",
            "exscan",
            "neighbor",
        ]
        .iter()
        .any(|p| r.starts_with(p))
    });
    let n = base.unwrap_or(n);
    (match n {
        "barrier" => ffi::OTF2_COLLECTIVE_OP_BARRIER,
        "bcast" => ffi::OTF2_COLLECTIVE_OP_BCAST,
        "gather" => ffi::OTF2_COLLECTIVE_OP_GATHER,
        "gatherv" => ffi::OTF2_COLLECTIVE_OP_GATHERV,
        "scatter" => ffi::OTF2_COLLECTIVE_OP_SCATTER,
        "scatterv" => ffi::OTF2_COLLECTIVE_OP_SCATTERV,
        "allgather" | "neighbor_allgather" => ffi::OTF2_COLLECTIVE_OP_ALLGATHER,
        "allgatherv" | "neighbor_allgatherv" => ffi::OTF2_COLLECTIVE_OP_ALLGATHERV,
        "alltoall" | "neighbor_alltoall" => ffi::OTF2_COLLECTIVE_OP_ALLTOALL,
        "alltoallv" | "neighbor_alltoallv" => ffi::OTF2_COLLECTIVE_OP_ALLTOALLV,
        "alltoallw" | "neighbor_alltoallw" => ffi::OTF2_COLLECTIVE_OP_ALLTOALLW,
        "allreduce" => ffi::OTF2_COLLECTIVE_OP_ALLREDUCE,
        "reduce" => ffi::OTF2_COLLECTIVE_OP_REDUCE,
        "reduce_scatter" => ffi::OTF2_COLLECTIVE_OP_REDUCE_SCATTER,
        "reduce_scatter_block" => ffi::OTF2_COLLECTIVE_OP_REDUCE_SCATTER_BLOCK,
        "scan" => ffi::OTF2_COLLECTIVE_OP_SCAN,
        "exscan" => ffi::OTF2_COLLECTIVE_OP_EXSCAN,
        _ => match shape {
            Shape::OneToN => ffi::OTF2_COLLECTIVE_OP_BCAST,
            Shape::NToOne => ffi::OTF2_COLLECTIVE_OP_REDUCE,
            Shape::Scan | Shape::Exscan => ffi::OTF2_COLLECTIVE_OP_SCAN,
            Shape::NToN => ffi::OTF2_COLLECTIVE_OP_ALLTOALL,
        },
    }) as CollectiveOp
}

fn region_role(kind: Kind, name: &str, coll: Option<Coll>) -> ffi::OTF2_RegionRole {
    (match kind {
        Kind::Send
        | Kind::Isend
        | Kind::Recv
        | Kind::Irecv
        | Kind::Sendrecv
        | Kind::Mrecv
        | Kind::Imrecv
        | Kind::SendInit
        | Kind::RecvInit
        | Kind::Isendrecv
        | Kind::PsendInit
        | Kind::PrecvInit => ffi::OTF2_REGION_ROLE_POINT2POINT,
        Kind::Coll | Kind::Icoll | Kind::CollInit => match coll {
            Some(c) if c.flow == Flow::Barrier => ffi::OTF2_REGION_ROLE_BARRIER,
            Some(Coll {
                shape: Shape::OneToN,
                ..
            }) => ffi::OTF2_REGION_ROLE_COLL_ONE2ALL,
            Some(Coll {
                shape: Shape::NToOne,
                ..
            }) => ffi::OTF2_REGION_ROLE_COLL_ALL2ONE,
            _ => ffi::OTF2_REGION_ROLE_COLL_ALL2ALL,
        },
        // A user phase (the pseudo-calls that mark one are functions).
        Kind::Phase if !name.starts_with("pmtrace_phase_") => ffi::OTF2_REGION_ROLE_CODE,
        _ => ffi::OTF2_REGION_ROLE_FUNCTION,
    }) as ffi::OTF2_RegionRole
}

/// The OTF2 location id of a location.
pub fn location_id(loc: Location) -> u64 {
    (u64::from(loc.rank) << 32) | u64::from(loc.thread)
}

/// Writes the OTF2 archive of `view` into `dir` (created; an archive
/// already there is replaced). `progress` is told the calls done so far.
pub fn write(
    view: &View,
    dir: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, ExportError> {
    write_windowed(view, dir, progress, WINDOW, true)
}

fn write_windowed(
    view: &View,
    dir: &Path,
    progress: &mut dyn FnMut(u64),
    window: usize,
    side_by_side: bool,
) -> Result<Summary, ExportError> {
    clear(dir)?;
    let mut archive = Archive::create(dir, ARCHIVE_NAME)?;
    describe(&mut archive, view.trace.world_size, view.synced.is_some())?;
    let mut w = Writer::new(view);
    w.window = window;
    let events = if w.vector || !side_by_side {
        // Vector clocks are strings, numbered as written: one location
        // after the other.
        let mut done = 0;
        let mut events = Vec::with_capacity(view.locations.len());
        for &loc in &view.locations {
            let mut ev = archive.events(location_id(loc))?;
            let n = w.location(&mut ev, loc, &mut |k| progress(done + k))?;
            ev.close()?;
            done += view.records(loc).len() as u64;
            events.push(n);
        }
        events
    } else {
        w.side_by_side(&mut archive, progress)?
    };
    archive.local_defs(&offsets(view))?;
    let g = Globals {
        ranks: (view.trace.ranks.iter())
            .map(|r| (r.rank, r.header.hostname.clone()))
            .collect(),
        locations: view.locations.clone(),
        events,
        span: view.span,
    };
    w.global_defs(&mut archive, &g)?;
    archive.close()?;
    w.summary.locations = view.locations.len() as u64;
    w.summary.synced = view.synced.is_some();
    Ok(w.summary)
}

/// Removes an archive from `dir`, if one is there (created if missing).
pub fn clear(dir: &Path) -> Result<(), ExportError> {
    let io = |source| ExportError::Io {
        path: dir.to_path_buf(),
        source,
    };
    fs::create_dir_all(dir).map_err(io)?;
    for old in [
        format!("{ARCHIVE_NAME}.otf2"),
        format!("{ARCHIVE_NAME}.def"),
        ARCHIVE_NAME.to_owned(),
    ] {
        let p = dir.join(old);
        if p.is_dir() {
            fs::remove_dir_all(&p).map_err(io)?;
        } else if p.exists() {
            fs::remove_file(&p).map_err(io)?;
        }
    }
    Ok(())
}

fn describe(archive: &mut Archive, ranks: u32, synced: bool) -> Result<(), ExportError> {
    archive.describe(&format!(
        "pmtrace trace of {ranks} ranks, {} time",
        if synced { "synchronized" } else { "recorded" }
    ))?;
    Ok(())
}

/// Each location's clock offsets to rank 0, as measured (raw times only).
pub fn offsets(view: &View) -> Vec<(u64, Vec<ClockOffset>)> {
    let lines = interp::lines(view.trace);
    view.locations
        .iter()
        .map(|&loc| {
            let mut v = Vec::new();
            if view.synced.is_none() {
                let l = lines[(loc.rank - view.trace.first) as usize];
                for s in [l.init, l.fin].into_iter().flatten() {
                    v.push(ClockOffset {
                        time: s.local_ns,
                        offset: s.offset_ns,
                        stddev: s.error_ns as f64,
                    });
                }
            }
            (location_id(loc), v)
        })
        .collect()
}

/// What the global definitions say of the whole trace beside its
/// communicators: (rank, host) of every rank, every location with its
/// events, the time span.
pub struct Globals {
    pub ranks: Vec<(u32, String)>,
    pub locations: Vec<Location>,
    pub events: Vec<u64>,
    pub span: (u64, u64),
}

/// The regions (name, role) and strings an archive's events use, in the
/// order the serial writer gives them ids (first use, location by
/// location).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tables {
    pub regions: Vec<(String, ffi::OTF2_RegionRole)>,
    pub strings: Vec<String>,
}

impl Tables {
    /// The tables of `view`'s locations.
    pub fn of(view: &View) -> Tables {
        let mut w = Writer::new(view);
        for &loc in &view.locations {
            w.name_location(loc);
        }
        w.tables()
    }

    /// `later`'s entries not in `self`, added in their order: the tables
    /// of two runs of locations one after the other.
    pub fn extend(&mut self, later: &Tables) {
        let known: std::collections::HashSet<String> =
            self.regions.iter().map(|r| r.0.clone()).collect();
        self.regions.extend(
            later
                .regions
                .iter()
                .filter(|r| !known.contains(&r.0))
                .cloned(),
        );
        let known: std::collections::HashSet<String> = self.strings.iter().cloned().collect();
        self.strings.extend(
            later
                .strings
                .iter()
                .filter(|s| !known.contains(*s))
                .cloned(),
        );
    }
}

/// Writes the events of `view`'s locations, with the ids of `tables` (the
/// whole trace's), into an archive of their own in `dir`: one part of an
/// archive written in parallel. Returns the events per location.
pub fn write_events(
    view: &View,
    dir: &Path,
    tables: &Tables,
) -> Result<(Vec<u64>, Summary), ExportError> {
    clear(dir)?;
    let mut archive = Archive::create(dir, ARCHIVE_NAME)?;
    let mut w = Writer::with_tables(view, tables);
    let mut events = Vec::with_capacity(view.locations.len());
    for &loc in &view.locations {
        let mut ev = archive.events(location_id(loc))?;
        events.push(w.location(&mut ev, loc, &mut |_| {})?);
        ev.close()?;
    }
    archive.close()?;
    Ok((events, w.summary))
}

/// Writes the archive's anchor and definitions into `dir` (cleared
/// first): every location's clock offsets (`offsets`), and the global
/// definitions with the ids of `tables`. Its events come from
/// [`write_events`].
pub fn write_defs(
    view: &View,
    dir: &Path,
    tables: &Tables,
    offsets: &[(u64, Vec<ClockOffset>)],
    g: &Globals,
) -> Result<(), ExportError> {
    clear(dir)?;
    let mut archive = Archive::create(dir, ARCHIVE_NAME)?;
    describe(&mut archive, view.trace.world_size, view.synced.is_some())?;
    archive.local_defs(offsets)?;
    let mut w = Writer::with_tables(view, tables);
    w.global_defs(&mut archive, g)?;
    archive.close()?;
    Ok(())
}

struct Writer<'v, 'a> {
    view: &'v View<'a>,
    strings: Strings,
    /// Region id and role by function name.
    regions: BTreeMap<String, (u32, ffi::OTF2_RegionRole)>,
    /// OTF2 communicator id by global id, in order.
    comm_ids: BTreeMap<u64, u32>,
    summary: Summary,
    vector: bool,
    /// Records sorted together ([`WINDOW`]; tests make it small).
    window: usize,
}

/// One event of a location before sorting: time, then the order within a
/// call (Enter 0, at-start events 1, at-end events 2, Leave 3).
type Pending = (u64, u8, usize, Ev);

/// Where [`Writer::events_of`] puts each run of a location's events.
type Sink<'s, 'v, 'a> = dyn FnMut(&mut Writer<'v, 'a>, &[Pending]) -> Result<(), ExportError> + 's;

/// Records of a location whose events are sorted together (see
/// `Writer::events_of`).
const WINDOW: usize = 4096;

/// What writing a location's events carries from one run to the next.
#[derive(Default)]
struct Emitted {
    /// The last time written (times go out monotone).
    last: u64,
    /// Events written.
    n: u64,
    vc_text: String,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Enter(u32),
    Leave(u32, Option<u64>),
    Send {
        to: u32,
        comm: u32,
        tag: u32,
        bytes: u64,
        request: Option<u64>,
    },
    Recv {
        from: u32,
        comm: u32,
        tag: u32,
        bytes: u64,
        request: Option<u64>,
        id: Option<u64>,
        vc: Option<u32>,
    },
    IrecvRequest(u64),
    IsendComplete(u64),
    Cancelled(u64),
    CollBegin,
    CollEnd(CollEnd),
    NbcRequest(u64),
    NbcComplete(CollEnd, u64),
    Flush(u64),
}

impl<'v, 'a> Writer<'v, 'a> {
    fn new(view: &'v View<'a>) -> Self {
        let comm_ids = view
            .trace
            .comms
            .iter()
            .enumerate()
            .map(|(i, c)| (c.global_id, i as u32))
            .collect();
        let mut strings = Strings::default();
        strings.id("");
        Writer {
            view,
            strings,
            regions: BTreeMap::new(),
            comm_ids,
            summary: Summary::default(),
            vector: view.clocks.report.mode == "vector",
            window: WINDOW,
        }
    }

    fn region(&mut self, name: &str, kind: Kind, coll: Option<Coll>) -> u32 {
        let n = self.regions.len() as u32;
        match self.regions.get(name) {
            Some(&(id, _)) => id,
            None => {
                let role = region_role(kind, name, coll);
                self.regions.insert(name.to_owned(), (n, role));
                n
            }
        }
    }

    /// A writer whose regions and strings are `tables`'s.
    fn with_tables(view: &'v View<'a>, tables: &Tables) -> Self {
        let mut w = Writer::new(view);
        for (id, (name, role)) in tables.regions.iter().enumerate() {
            w.regions.insert(name.clone(), (id as u32, *role));
        }
        for s in &tables.strings {
            w.strings.id(s);
        }
        w
    }

    /// The regions and strings made so far, in id order.
    fn tables(&self) -> Tables {
        let mut regions: Vec<(u32, String, ffi::OTF2_RegionRole)> = (self.regions.iter())
            .map(|(name, &(id, role))| (id, name.clone(), role))
            .collect();
        regions.sort_unstable_by_key(|r| r.0);
        Tables {
            regions: regions.into_iter().map(|(_, n, r)| (n, r)).collect(),
            strings: self.strings.list.clone(),
        }
    }

    fn coll_end(&self, at: EventRef, func: u32, p: &Payload) -> Option<CollEnd> {
        let &Payload::Coll {
            comm,
            root,
            sent,
            recvd,
            ..
        } = p
        else {
            return None;
        };
        let rank = &self.view.trace.held(at.rank);
        let name = rank.function_name(func);
        let gid = rank.comm_at(comm, u64::MAX)?.global_id;
        let k = self.view.trace.constants();
        let root = match root {
            None => UNDEFINED_U32,
            Some(r) if r == k.root => ffi::OTF2_COLLECTIVE_ROOT_SELF,
            Some(r) if r == k.proc_null => ffi::OTF2_COLLECTIVE_ROOT_THIS_GROUP,
            Some(r) => u32::try_from(r).unwrap_or(UNDEFINED_U32),
        };
        Some(CollEnd {
            op: collective_op(name, rank.coll(func).shape),
            comm: *self.comm_ids.get(&gid)?,
            root,
            sent,
            recvd,
        })
    }

    /// The Ev of a matched or unmatched receive.
    fn recv_ev(&mut self, r: usize, request: Option<u64>) -> Option<Ev> {
        let m = self.view.messages;
        let rv = &m.recvs[r];
        let (Some(src), Some(&comm_id)) = (rv.src, self.comm_ids.get(&rv.comm)) else {
            self.summary.unresolved += 1;
            return None;
        };
        let comm = self.view.trace.comms.get(rv.comm)?;
        let Some(from) = comm.rank_seen_by(rv.dst, src) else {
            self.summary.unresolved += 1;
            return None;
        };
        Some(Ev::Recv {
            from,
            comm: comm_id,
            tag: rv.tag as u32,
            bytes: rv.bytes,
            request,
            id: rv.pb.map(|p| p.id),
            vc: rv.pb.and_then(|p| p.vc),
        })
    }

    fn send_ev(&mut self, s: usize, request: Option<u64>) -> Option<Ev> {
        let sv = &self.view.messages.sends[s];
        let (Some(dst), Some(&comm_id)) = (sv.dst, self.comm_ids.get(&sv.comm)) else {
            self.summary.unresolved += 1;
            return None;
        };
        let comm = self.view.trace.comms.get(sv.comm)?;
        let Some(to) = comm.rank_seen_by(sv.src, dst) else {
            self.summary.unresolved += 1;
            return None;
        };
        Some(Ev::Send {
            to,
            comm: comm_id,
            tag: sv.tag as u32,
            bytes: sv.bytes,
            request,
        })
    }

    /// Request ids of the rank's nonblocking operations.
    fn ops(&self, rank: u32) -> Ops {
        let r = &self.view.trace.held(rank);
        let mut ops = Ops {
            table: OpTable::new(r.events() as usize),
            colls: Vec::new(),
        };
        let mut persistent: HashMap<u64, Op> = HashMap::default();
        for (at, c) in r.payload_calls() {
            match (&c.payload, r.kind(c.func)) {
                // A send to MPI_PROC_NULL moved no message: no MpiIsend,
                // so no completion either.
                (Payload::Send { op: Some(op), .. }, Kind::Isend)
                    if self.view.sends_at(at).next().is_some() =>
                {
                    ops.table.insert(*op, Op::Send);
                }
                (Payload::Send { op: Some(op), .. }, Kind::SendInit | Kind::PsendInit) => {
                    persistent.insert(*op, Op::Send);
                }
                (Payload::Recv { op: Some(op), .. }, Kind::Irecv)
                | (Payload::Mrecv { op: Some(op), .. }, _)
                | (Payload::Isendrecv { op: Some(op), .. }, _) => {
                    ops.table.insert(*op, Op::Recv);
                }
                (Payload::Recv { op: Some(op), .. }, Kind::RecvInit | Kind::PrecvInit) => {
                    persistent.insert(*op, Op::Recv);
                }
                (p @ Payload::Coll { op: Some(op), .. }, kind) => {
                    if let Some(e) = self.coll_end(at, c.func, p) {
                        let e = ops.coll(e);
                        if kind == Kind::CollInit {
                            persistent.insert(*op, e);
                        } else {
                            ops.table.insert(*op, e);
                        }
                    }
                }
                (Payload::Start { started }, _) => {
                    let sent = self.view.sends_at(at).count();
                    for &(init, inst) in started.iter() {
                        if let Some(&k) = init.and_then(|i| persistent.get(&i)) {
                            if matches!(k, Op::Send) && sent == 0 {
                                continue;
                            }
                            ops.table.insert(inst, k);
                        }
                    }
                }
                _ => {}
            }
        }
        ops
    }

    /// Writes every location's events, locations side by side on the
    /// threads there are; returns the events of each. Region ids are given
    /// first, location by location, as writing one after the other would.
    fn side_by_side(
        &mut self,
        archive: &mut Archive,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Vec<u64>, ExportError> {
        let locations = &self.view.locations;
        for &loc in locations {
            self.name_regions(loc);
        }
        let ids: Vec<u64> = locations.iter().map(|&l| location_id(l)).collect();
        let writers = archive.event_writers(&ids)?;
        let this: &Self = self;
        let done: Vec<Result<(u64, Summary), ExportError>> = (locations.par_iter())
            .zip(writers)
            .map(|(&loc, mut ev)| {
                let mut w = this.fork();
                let n = w.location(&mut ev, loc, &mut |_| {})?;
                ev.close()?;
                Ok((n, w.summary))
            })
            .collect();
        let mut events = Vec::with_capacity(locations.len());
        for part in done {
            let (n, s) = part?;
            events.push(n);
            self.summary.add(&s);
        }
        progress(self.view.calls());
        Ok(events)
    }

    /// A writer with this one's ids, to write other locations with.
    fn fork(&self) -> Writer<'v, 'a> {
        Writer {
            view: self.view,
            strings: self.strings.clone(),
            regions: self.regions.clone(),
            comm_ids: self.comm_ids.clone(),
            summary: Summary::default(),
            vector: self.vector,
            window: self.window,
        }
    }

    /// Gives ids to the regions of one location's calls and phases, in the
    /// order writing it would.
    fn name_regions(&mut self, loc: Location) {
        self.windows_of(loc);
        let phases = self.summary.phases;
        self.phase_events(loc);
        self.summary.phases = phases;
    }

    /// Writes the events of one location; returns how many.
    fn location(
        &mut self,
        out: &mut EventWriter,
        loc: Location,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, ExportError> {
        let mut st = Emitted::default();
        self.events_of(loc, progress, &mut |w, evs| w.emit(out, loc, evs, &mut st))?;
        self.summary.events += st.n;
        Ok(st.n)
    }

    /// The vector clock a receive carried, as a string id.
    fn vc_string(&mut self, loc: Location, vc: u32, text: &mut String) -> Option<u32> {
        let th = &self.view.trace.held(loc.rank).threads[loc.slot];
        let len = self.view.trace.world_size as usize;
        let v = th.vcs.get(vc as usize * len..(vc as usize + 1) * len)?;
        text.clear();
        for (k, x) in v.iter().enumerate() {
            if k > 0 {
                text.push(',');
            }
            text.push_str(&x.to_string());
        }
        Some(self.strings.id(text))
    }

    /// Gives ids to the regions and strings of one location's events, as
    /// writing them would.
    fn name_location(&mut self, loc: Location) {
        let mut text = String::new();
        let named = self.events_of(loc, &mut |_| {}, &mut |w, evs| {
            for &(_, _, _, e) in evs {
                if let (true, Ev::Recv { vc: Some(vc), .. }) = (w.vector, e) {
                    w.vc_string(loc, vc, &mut text);
                }
            }
            Ok(())
        });
        named.expect("naming writes nothing, so it cannot fail");
    }

    /// One location's events, in the order they are written, given to
    /// `sink` a run at a time: a window of records at a time ([`WINDOW`])
    /// is sorted, and what no later record can come before goes out, so
    /// that a location's events are never all held at once.
    fn events_of(
        &mut self,
        loc: Location,
        progress: &mut dyn FnMut(u64),
        sink: &mut Sink<'_, 'v, 'a>,
    ) -> Result<(), ExportError> {
        let view = self.view;
        let ops = self.ops(loc.rank);
        let rank = &view.trace.held(loc.rank);
        let times = view.times(loc);
        let records = view.records(loc);
        let window = self.window;
        let (region_of, from) = self.windows_of(loc);
        let mut evs: Vec<Pending> = self.phase_events(loc);
        let key = |&(t, order, i, _): &Pending| (t, i, order);
        let mut flush = |w: &mut Self, evs: &mut Vec<Pending>, bound: u64| {
            evs.sort_by_key(key);
            let ready = evs.partition_point(|e| e.0 < bound);
            sink(w, &evs[..ready])?;
            evs.drain(..ready);
            Ok::<(), ExportError>(())
        };
        // The location's message ends and clocks, walked in record order.
        let ends = view.messages.ends.thread(loc.rank, loc.slot);
        let mut sends_of = Cursor::new(&ends.sends);
        let mut posted_of = Cursor::new(&ends.posted);
        let mut done_of = Cursor::new(&ends.done);
        let mut clocks = view.clocks.after_call.thread(loc.rank, loc.thread);
        let lamport = view.clocks.report.mode != "none";
        for (i, rec) in records.iter().enumerate() {
            if i.is_multiple_of(65536) {
                progress(i as u64);
            }
            if i > 0 && i.is_multiple_of(window) {
                flush(self, &mut evs, from[i / window])?;
            }
            let at = view.at(loc, i);
            let (t0, t1) = times.get(i);
            let c = match rec {
                Record::Call(c) => c,
                Record::BufferWait { .. } => {
                    evs.push((t0, 1, i, Ev::Flush(t1)));
                    continue;
                }
                _ => continue,
            };
            let name = rank.function_name(c.func);
            let kind = rank.kind(c.func);
            let region = match region_of.get(c.func as usize) {
                Some(&Some(r)) => r,
                _ => self.region(name, kind, Some(rank.coll(c.func))),
            };
            evs.push((t0, 0, i, Ev::Enter(region)));
            evs.push((
                t1,
                3,
                i,
                Ev::Leave(region, clocks.get(i).filter(|_| lamport)),
            ));
            self.call_events(
                &mut evs,
                (i, at),
                (t0, t1),
                &c,
                kind,
                &ops,
                [
                    sends_of.at(at.index),
                    posted_of.at(at.index),
                    done_of.at(at.index),
                ],
            );
        }
        // What is left can come before nothing: it all goes.
        flush(self, &mut evs, u64::MAX)?;
        sink(self, &evs)
    }

    /// The events of call `c` (record `i` of its location, at `at`) besides
    /// its enter and leave: the messages and requests it posted (`ends`:
    /// its sends, posted receives and completed receives), the collective
    /// it took part in, and what it completed.
    #[allow(clippy::too_many_arguments)]
    fn call_events(
        &mut self,
        evs: &mut Vec<Pending>,
        (i, at): (usize, EventRef),
        (t0, t1): (u64, u64),
        c: &Call,
        kind: Kind,
        ops: &Ops,
        ends: [&'v [End]; 3],
    ) {
        let view = self.view;
        let msgs = |run: &'v [End]| run.iter().map(|e| e.msg as usize);
        let [sends, posted, completed] = ends.map(msgs);
        // Sends posted by this call.
        for (item, s) in sends.enumerate() {
            let request = match (&c.payload, kind) {
                (Payload::Send { op, .. }, Kind::Isend) => *op,
                (Payload::Start { started }, _) => started
                    .get(view.messages.sends[s].item as usize)
                    .or(started.get(item))
                    .map(|x| x.1),
                _ => None,
            };
            if let Some(e) = self.send_ev(s, request) {
                evs.push((t0, 1, i, e));
            }
        }
        // Nonblocking receives posted by this call.
        for r in posted {
            let rv = &view.messages.recvs[r];
            if rv.completion == at && rv.how != RecvHow::Nonblocking {
                continue;
            }
            let request = match &c.payload {
                Payload::Recv { op, .. }
                | Payload::Mrecv { op, .. }
                | Payload::Isendrecv { op, .. } => *op,
                Payload::Start { started } => started.get(rv.post_item as usize).map(|x| x.1),
                _ => None,
            };
            if let Some(req) = request {
                evs.push((t0, 1, i, Ev::IrecvRequest(req)));
            }
        }
        match &c.payload {
            // A persistent collective's instances begin at its starts.
            Payload::Coll { .. } if kind == Kind::CollInit => {}
            Payload::Start { started } => {
                for &(_, inst) in started.iter() {
                    if let Some(Op::Coll(_)) = ops.get(inst) {
                        self.summary.collectives += 1;
                        evs.push((t0, 1, i, Ev::NbcRequest(inst)));
                    }
                }
            }
            p @ Payload::Coll { op, .. } if c.rc == 0 => {
                if let Some(e) = self.coll_end(at, c.func, p) {
                    self.summary.collectives += 1;
                    match (kind, op) {
                        (Kind::Icoll, Some(op)) => evs.push((t0, 1, i, Ev::NbcRequest(*op))),
                        _ => {
                            evs.push((t0, 1, i, Ev::CollBegin));
                            evs.push((t1, 2, i, Ev::CollEnd(e)));
                        }
                    }
                }
            }
            Payload::Complete { done } => {
                for (item, d) in done.iter().enumerate() {
                    let r = completed
                        .clone()
                        .find(|&r| view.messages.recvs[r].completion_item == item as u32);
                    if let Some(r) = r {
                        if let Some(e) = self.recv_ev(r, d.op) {
                            evs.push((t1, 2, i, e));
                        }
                        continue;
                    }
                    let Some(op) = d.op else { continue };
                    if d.status.cancelled {
                        evs.push((t1, 2, i, Ev::Cancelled(op)));
                        continue;
                    }
                    match ops.get(op) {
                        Some(Op::Send) => evs.push((t1, 2, i, Ev::IsendComplete(op))),
                        Some(Op::Coll(k)) => {
                            evs.push((t1, 2, i, Ev::NbcComplete(ops.colls[k as usize], op)))
                        }
                        _ => {}
                    }
                }
            }
            // Freed once its cancellation succeeded.
            Payload::OpRef {
                op: Some(op),
                cancelled: true,
            } => evs.push((t1, 2, i, Ev::Cancelled(*op))),
            _ => {}
        }
        // Blocking receives completed by this call itself.
        for r in completed {
            let rv = &view.messages.recvs[r];
            if matches!(c.payload, Payload::Complete { .. }) {
                continue;
            }
            if rv.post == at || rv.how == RecvHow::Probed {
                if let Some(e) = self.recv_ev(r, None) {
                    evs.push((t1, 2, i, e));
                }
            }
        }
    }

    /// Each function's region in one location, its id given in the order
    /// of first use (the location's calls in record order, then its
    /// phases); and for each window of records, the earliest time of an
    /// event of it or a later one.
    fn windows_of(&mut self, loc: Location) -> (Vec<Option<u32>>, Vec<u64>) {
        let rank = self.view.trace.held(loc.rank);
        let (records, times) = (self.view.records(loc), self.view.times(loc));
        let mut region_of: Vec<Option<u32>> = vec![None; rank.header.functions.len()];
        let window = self.window;
        let windows = records.len().div_ceil(window);
        let mut from = vec![u64::MAX; windows + 1];
        for i in 0..records.len() {
            if let Some(f) = records.func(i) {
                if let Some(r @ None) = region_of.get_mut(f as usize) {
                    let kind = rank.kind(f);
                    *r = Some(self.region(rank.function_name(f), kind, Some(rank.coll(f))));
                }
            } else if !records.is_buffer_wait(i) {
                continue;
            }
            let (t0, t1) = times.get(i);
            from[i / window] = from[i / window].min(t0.min(t1));
        }
        for w in (0..windows).rev() {
            from[w] = from[w].min(from[w + 1]);
        }
        (region_of, from)
    }

    /// The Enter and Leave events of a location's phases (ids for their
    /// regions made in the order they are written here).
    fn phase_events(&mut self, loc: Location) -> Vec<Pending> {
        let view = self.view;
        let mut evs = Vec::new();
        // Phases: a region entered after the call that began it and left
        // after the call that ended it. User phases nest by construction;
        // a Pcontrol phase or a pause is written only where it crosses no
        // other phase (OTF2 regions must nest).
        let all = self.view.phases_of(loc);
        let crosses = |a: &pmtrace_trace::phases::PhaseSpan,
                       b: &pmtrace_trace::phases::PhaseSpan| {
            let (a0, a1, b0, b1) = (a.from_index, a.to_index, b.from_index, b.to_index);
            (a0 < b0 && b0 < a1 && a1 < b1) || (b0 < a0 && a0 < b1 && b1 < a1)
        };
        let checkable = all.len() <= 10_000;
        let mut phases: Vec<&pmtrace_trace::phases::PhaseSpan> = all
            .iter()
            .filter(|p| {
                p.user || (checkable && !all.iter().any(|o| !std::ptr::eq(*p, o) && crosses(p, o)))
            })
            .collect();
        // Leaves first (inner ones first), then enters (outer ones first):
        // at one record a phase ends before the next begins.
        phases.sort_by_key(|p| std::cmp::Reverse(p.depth));
        for p in &phases {
            let region = self.region(&p.name, Kind::Phase, None);
            // After the end of the call that closed it.
            let closed = view
                .time(view.at(loc, p.to_index as usize), true)
                .max(p.to_ns);
            evs.push((closed, 4, p.to_index as usize, Ev::Leave(region, None)));
        }
        for p in phases.iter().rev() {
            let region = self.region(&p.name, Kind::Phase, None);
            evs.push((p.from_ns, 4, p.from_index as usize, Ev::Enter(region)));
            self.summary.phases += 1;
        }
        evs
    }

    /// Writes one location's events; returns how many.
    fn emit(
        &mut self,
        out: &mut EventWriter,
        loc: Location,
        evs: &[Pending],
        st: &mut Emitted,
    ) -> Result<(), ExportError> {
        // Calls on one thread do not overlap, but a Leave recorded a few ns
        // after the next Enter (clock granularity) must still come first:
        // order by record within equal starts, and keep times monotone.
        for &(t, _, _, e) in evs {
            let t = t.max(st.last);
            st.last = t;
            st.n += 1;
            match e {
                Ev::Enter(r) => {
                    self.summary.enters += 1;
                    out.enter(&[], t, r)?
                }
                Ev::Leave(r, lc) => match lc {
                    Some(lc) => out.leave(&[(ATTR_LAMPORT, AttrValue::U64(lc))], t, r)?,
                    None => out.leave(&[], t, r)?,
                },
                Ev::Send {
                    to,
                    comm,
                    tag,
                    bytes,
                    request,
                } => {
                    self.summary.sends += 1;
                    match request {
                        Some(q) => out.mpi_isend(&[], t, to, comm, tag, bytes, q)?,
                        None => out.mpi_send(&[], t, to, comm, tag, bytes)?,
                    }
                }
                Ev::Recv {
                    from,
                    comm,
                    tag,
                    bytes,
                    request,
                    id,
                    vc,
                } => {
                    self.summary.receives += 1;
                    let mut attrs = Vec::with_capacity(2);
                    if let Some(id) = id {
                        attrs.push((ATTR_MSG_ID, AttrValue::U64(id)));
                    }
                    if let (true, Some(vc)) = (self.vector, vc) {
                        if let Some(s) = self.vc_string(loc, vc, &mut st.vc_text) {
                            attrs.push((ATTR_VC, AttrValue::Str(s)));
                        }
                    }
                    match request {
                        Some(q) => out.mpi_irecv(&attrs, t, from, comm, tag, bytes, q)?,
                        None => out.mpi_recv(&attrs, t, from, comm, tag, bytes)?,
                    }
                }
                Ev::IrecvRequest(q) => out.mpi_irecv_request(&[], t, q)?,
                Ev::IsendComplete(q) => out.mpi_isend_complete(&[], t, q)?,
                Ev::Cancelled(q) => out.mpi_request_cancelled(&[], t, q)?,
                Ev::CollBegin => out.mpi_collective_begin(&[], t)?,
                Ev::CollEnd(e) => {
                    out.mpi_collective_end(&[], t, e.op, e.comm, e.root, e.sent, e.recvd)?
                }
                Ev::NbcRequest(q) => out.nonblocking_collective_request(&[], t, q)?,
                Ev::NbcComplete(e, q) => out.nonblocking_collective_complete(
                    &[],
                    t,
                    e.op,
                    e.comm,
                    e.root,
                    e.sent,
                    e.recvd,
                    q,
                )?,
                Ev::Flush(stop) => out.buffer_flush(&[], t, stop.max(t))?,
            }
        }
        Ok(())
    }

    fn global_defs(&mut self, archive: &mut Archive, g: &Globals) -> Result<(), ExportError> {
        let trace = self.view.trace;
        let s = &mut self.strings;
        // Ids of everything, strings first (they must be defined before use).
        let machine = s.id("machine");
        let node_class = s.id("node");
        let mut hosts: BTreeMap<String, u32> = BTreeMap::new();
        for (_, host) in &g.ranks {
            let n = hosts.len() as u32 + 1;
            hosts.entry(host.clone()).or_insert(n);
        }
        let host_names: Vec<(u32, u32)> = hosts.iter().map(|(h, &id)| (id, s.id(h))).collect();
        let rank_names: Vec<u32> = (g.ranks.iter())
            .map(|(rank, _)| s.id(&format!("MPI Rank {rank}")))
            .collect();
        let loc_names: Vec<u32> = g
            .locations
            .iter()
            .map(|l| {
                s.id(&if l.thread == 0 {
                    "Master thread".to_owned()
                } else {
                    format!("Thread {}", l.thread)
                })
            })
            .collect();
        let mut regions: Vec<(u32, u32, ffi::OTF2_RegionRole)> = self
            .regions
            .iter()
            .map(|(name, &(id, role))| (id, s.id(name), role))
            .collect();
        regions.sort_unstable_by_key(|r| r.0);
        let mpi = s.id("MPI");
        let attr_names = [
            (
                ATTR_LAMPORT,
                s.id("lamport"),
                s.id("Lamport clock after the call"),
                ffi::OTF2_TYPE_UINT64,
            ),
            (
                ATTR_MSG_ID,
                s.id("message_id"),
                s.id("piggybacked message id"),
                ffi::OTF2_TYPE_UINT64,
            ),
            (
                ATTR_VC,
                s.id("vector_clock"),
                s.id("piggybacked vector clock, one entry per rank"),
                ffi::OTF2_TYPE_STRING,
            ),
        ];
        let comm_names: Vec<(u64, u32)> = trace
            .comms
            .iter()
            .map(|c| (c.global_id, s.id(&super::view::comm_name(c))))
            .collect();
        let group_name = s.id("MPI group");

        let mut d = archive.global_defs()?;
        let (lo, hi) = g.span;
        d.clock_properties(1_000_000_000, lo, hi - lo, UNDEFINED_U64)?;
        for (i, text) in self.strings.list.iter().enumerate() {
            d.string(i as u32, text)?;
        }
        d.paradigm(
            ffi::OTF2_PARADIGM_MPI as _,
            mpi,
            ffi::OTF2_PARADIGM_CLASS_PROCESS as _,
        )?;
        d.system_tree_node(0, machine, machine, UNDEFINED_U32)?;
        for &(id, name) in &host_names {
            d.system_tree_node(id, name, node_class, 0)?;
        }
        for ((rank, host), &name) in g.ranks.iter().zip(&rank_names) {
            d.location_group(
                *rank,
                name,
                ffi::OTF2_LOCATION_GROUP_TYPE_PROCESS as _,
                hosts[host],
                UNDEFINED_U32,
            )?;
        }
        for ((l, &name), &n) in g.locations.iter().zip(&loc_names).zip(&g.events) {
            d.location(
                location_id(*l),
                name,
                ffi::OTF2_LOCATION_TYPE_CPU_THREAD as _,
                n,
                l.rank,
            )?;
        }
        for &(id, name, role) in &regions {
            d.region(
                id,
                name,
                name,
                0,
                role,
                ffi::OTF2_PARADIGM_MPI as _,
                ffi::OTF2_REGION_FLAG_NONE as _,
                0,
                0,
                0,
            )?;
        }
        for (id, name, desc, ty) in attr_names {
            d.attribute(id, name, desc, ty as _)?;
        }
        self.comm_defs(&mut d, g, group_name, &comm_names)?;
        Ok(())
    }

    /// The groups and communicators: the COMM_LOCATIONS group (each
    /// rank's first location, by rank), then each communicator's members.
    fn comm_defs(
        &self,
        d: &mut pmtrace_otf2::GlobalDefs,
        g: &Globals,
        group_name: u32,
        comm_names: &[(u64, u32)],
    ) -> Result<(), ExportError> {
        let trace = self.view.trace;
        // The COMM_LOCATIONS group: each rank's first location, by rank.
        let mut firsts = vec![UNDEFINED_U64; g.ranks.len()];
        for l in g.locations.iter().rev() {
            firsts[l.rank as usize] = location_id(*l);
        }
        d.group(
            0,
            group_name,
            ffi::OTF2_GROUP_TYPE_COMM_LOCATIONS as _,
            &firsts,
        )?;
        let mut next_group = 1u32;
        let mut group = |d: &mut pmtrace_otf2::GlobalDefs, members: &[u32]| {
            let id = next_group;
            next_group += 1;
            let m: Vec<u64> = members.iter().map(|&x| u64::from(x)).collect();
            d.group(id, group_name, ffi::OTF2_GROUP_TYPE_COMM_GROUP as _, &m)
                .map(|()| id)
        };
        for (c, &(_, name)) in trace.comms.iter().zip(comm_names) {
            let id = self.comm_ids[&c.global_id];
            if c.inter {
                let a = group(d, &c.members)?;
                let b = group(d, &c.remote_members)?;
                d.inter_comm(id, name, a, b, UNDEFINED_U32, ffi::OTF2_COMM_FLAG_NONE as _)?;
            } else {
                let g = group(d, &c.members)?;
                d.comm(id, name, g, UNDEFINED_U32, ffi::OTF2_COMM_FLAG_NONE as _)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtrace_fixture::{self as fixture, ThreadBuilder, TraceBuilder};
    use pmtrace_format::record::Payload as P;
    use pmtrace_matching::matching::Messages;
    use pmtrace_trace::Trace;
    use std::path::PathBuf;

    fn golden(case: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/golden")
            .join(case)
            .join("trace")
    }

    /// Every file of an archive but its anchor (which holds the time it
    /// was made), by name.
    fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|x| x != "otf2") {
                    let name = p.strip_prefix(dir).unwrap().to_path_buf();
                    out.push((name, fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    /// Two ranks whose calls touch (a Leave at the next Enter's time), with
    /// nested user phases, Pcontrol phases crossing them, a pause and
    /// buffer waits: phase events go out between the records' events.
    fn phased(dir: &Path) {
        let mut tb = TraceBuilder::new(2);
        for r in 0..2 {
            tb.rank(r).define_world_and_self(0);
        }
        for r in 0..2u32 {
            let peer = 1 - r as i32;
            let t = tb.rank(r).thread(0);
            let phase = |name: Option<&str>| P::Phase {
                name: name.map(str::to_owned),
            };
            let mut at = 1_000;
            // Each call ends where the next one starts.
            let call = |t: &mut ThreadBuilder, at: &mut u64, f: &str, p: P| {
                t.call(f, *at, *at + 10, p);
                *at += 10;
            };
            for k in 0..40u64 {
                // Pcontrol 2 spans 1..3 and Pcontrol 3 spans 3..6: both
                // cross the user phase "inner" (2..4) and are not written;
                // "outer", "inner" and the pause (5..6) are.
                match k % 10 {
                    0 => call(t, &mut at, "pmtrace_phase_begin", phase(Some("outer"))),
                    1 => call(t, &mut at, "MPI_Pcontrol", P::Pcontrol { level: 2 }),
                    2 => call(t, &mut at, "pmtrace_phase_begin", phase(Some("inner"))),
                    3 => call(t, &mut at, "MPI_Pcontrol", P::Pcontrol { level: 3 }),
                    4 => call(t, &mut at, "pmtrace_phase_end", phase(None)),
                    5 => call(t, &mut at, "MPI_Pcontrol", P::Pcontrol { level: 0 }),
                    6 => call(t, &mut at, "MPI_Pcontrol", P::Pcontrol { level: 1 }),
                    7 => {
                        t.buffer_wait(at, at + 2);
                        at += 5;
                    }
                    8 => call(t, &mut at, "pmtrace_phase_end", phase(None)),
                    _ if r == 0 => {
                        call(t, &mut at, "MPI_Send", fixture::send(peer, k as i32, 0, 8));
                    }
                    _ => {
                        let st = fixture::status(peer, k as i32, 8);
                        let p = fixture::recv(peer, k as i32, 0, at, st);
                        call(t, &mut at, "MPI_Recv", p);
                    }
                }
            }
        }
        tb.write(dir).unwrap();
    }

    #[test]
    fn a_location_written_a_window_at_a_time_and_beside_others_is_the_location_written_whole() {
        let scratch =
            std::env::temp_dir().join(format!("pmtrace-otf2-window-{}", std::process::id()));
        let made = scratch.join("phased-trace");
        phased(&made);
        let recorded = [
            "halo2d_skewed",
            "master_worker_skewed",
            "halo2d_np4",
            "threads",
            "master_worker",
            "coverage",
            "mpi4_ompi5",
            "halo2d_vector",
        ];
        for case in recorded.into_iter().chain(["phased"]) {
            let path = match case {
                "phased" => made.clone(),
                _ => golden(case),
            };
            let trace = Trace::open(path).unwrap();
            let messages = Messages::build(&trace);
            let synced = pmtrace_sync::sync(&trace, &messages, &Default::default());
            for (times, synced) in [("recorded", None), ("synced", Some(&synced))] {
                let view = View::new(&trace, &messages, synced);
                let case = format!("{case}-{times}");
                same_in_windows(&view, &scratch.join(&case), &case);
            }
        }
        fs::remove_dir_all(&scratch).unwrap();
    }

    /// Writes `view` whole, one location after the other, then in windows
    /// of a few records, locations side by side (but for windows of one
    /// record), and checks that every file but the anchor is the same.
    fn same_in_windows(view: &View, scratch: &Path, case: &str) {
        let whole = scratch.join("whole");
        let sum = write_windowed(view, &whole, &mut |_| {}, usize::MAX, false).unwrap();
        assert!(sum.events > 200, "{case}: {} events", sum.events);
        if case.starts_with("phased") {
            assert_eq!(sum.phases, 2 * 4 * 3, "{case}: phases written");
        }
        let want = files(&whole);
        let evt = |(p, _): &(PathBuf, Vec<u8>)| p.extension().is_some_and(|x| x == "evt");
        assert!(want.iter().any(evt), "{case}: no event files");
        for window in [1, 2, 7, 64] {
            let dir = scratch.join(format!("w{window}"));
            let got = write_windowed(view, &dir, &mut |_| {}, window, window != 1).unwrap();
            assert_eq!(got.events, sum.events, "{case}, window {window}");
            assert!(
                files(&dir) == want,
                "{case}, window {window}: the archives differ"
            );
        }
    }
}
