//! Parquet tables of a trace, for pandas, polars, DuckDB and Spark.
//!
//! ```text
//!  OUT/calls.parquet      a row per MPI call: its id, rank, thread, record
//!                         index, function, enter and exit (export time base
//!                         and as recorded), bytes, peer, tag, communicator,
//!                         Lamport clock, innermost user phase
//!  OUT/messages.parquet   a row per matched message: its send call, the call
//!                         that posted its receive and the one that completed
//!                         it (row numbers into calls), world ranks, tag,
//!                         communicator, bytes, times and Lamport clocks
//!  OUT/unmatched.parquet  a row per send or receive left without its other
//!                         end, with the reason
//!  OUT/ranks.parquet      a row per rank: host, threads, calls, completeness
//! ```
//!
//! Times are integers in ns: `enter_ns` and `exit_ns` are synchronized when
//! the trace was synced (`pmtrace sync`), else as recorded, and
//! `enter_raw_ns` and `exit_raw_ns` are as recorded either way. A call's
//! `id` counts from 0 location by location (rank, then thread), calls in
//! record order, which is also the order of `calls`' rows; `messages` and
//! `unmatched` name calls by it. Function names are dictionary-encoded.
//! Rows go out in batches, row groups of [`ROW_GROUP`] rows: beside the
//! view, the writer holds one row group of one table.
//!
//! `pmtrace-mpi` writes the same rows as a partitioned dataset
//! ([`Layout::Part`]): `OUT/calls/part-00000.parquet`, one part per block
//! of ranks, which DuckDB, Spark, Dask, pandas and polars read as one
//! table. Each block writes its ranks' calls and ranks, the messages its
//! ranks received (with the send's end from the sender's block,
//! [`SendEnd`]), and its ranks' unmatched sends and receives.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow_array::builder::ArrayBuilder;
use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    StringDictionaryBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use pmtrace_matching::collective::MemberCalls;
use pmtrace_matching::ends::Cursor;
use pmtrace_trace::read::EventRef;
use rustc_hash::FxHashMap;

use super::view::{CallDetail, Location, View};
use super::ExportError;

/// Rows a row group holds.
pub const ROW_GROUP: usize = 1 << 20;
/// Rows built before they go to the writer.
const BATCH: usize = 1 << 16;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub calls: u64,
    pub messages: u64,
    pub unmatched: u64,
    pub ranks: u64,
    pub phases: u64,
    pub communicators: u64,
    /// Rows of `collectives`, `wait_states` and `critical_path`, when
    /// written.
    pub collectives: Option<u64>,
    pub wait_states: Option<u64>,
    pub path_segments: Option<u64>,
    pub races: Option<u64>,
    /// Whether `enter_ns` and `exit_ns` are synchronized times.
    pub synced: bool,
}

impl Summary {
    /// The rows of each table written, in words.
    pub fn counts(&self) -> String {
        let mut s = format!(
            "{} calls, {} messages, {} unmatched, {} ranks, {} phases, {} communicators",
            self.calls, self.messages, self.unmatched, self.ranks, self.phases, self.communicators
        );
        for (n, what) in [
            (self.collectives, "collective members"),
            (self.wait_states, "wait states"),
            (self.path_segments, "critical-path segments"),
            (self.races, "race alternatives"),
        ] {
            if let Some(n) = n {
                s.push_str(&format!(", {n} {what}"));
            }
        }
        s
    }
}

/// The tables, by file name.
pub const TABLES: [&str; 10] = [
    "calls",
    "messages",
    "unmatched",
    "ranks",
    "phases",
    "communicators",
    "collectives",
    "wait_states",
    "critical_path",
    "races",
];

/// A wildcard receive that could have taken another message (the
/// report's `races::Race`), one row per other message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaceRow {
    /// The call where the receive chose its source.
    pub at: EventRef,
    pub comm: u64,
    pub tag: i32,
    /// The message it took and one it could have taken: (sender's world
    /// rank, the id the message carried).
    pub matched: (u32, u64),
    pub other: (u32, u64),
}

impl RaceRow {
    /// The rows of `races`: one per receive and message it could have
    /// taken instead.
    pub fn of(races: &[pmtrace_report::races::Race]) -> Vec<RaceRow> {
        let rows = races.iter().flat_map(|r| {
            (r.alternatives.iter()).map(move |o| RaceRow {
                at: r.at(),
                comm: r.comm,
                tag: r.tag,
                matched: (r.matched.source, r.matched.message_id),
                other: (o.source, o.message_id),
            })
        });
        rows.collect()
    }
}

/// A communicator as `communicators` holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommRow {
    pub id: u64,
    pub name: String,
    pub inter: bool,
    /// World ranks of the group, by communicator rank (empty where no
    /// member wrote the list).
    pub members: Vec<u32>,
    /// An intercommunicator's other group.
    pub remote: Vec<u32>,
}

impl pmtrace_trace::wire::Wire for CommRow {
    fn put(&self, o: &mut pmtrace_trace::wire::Out) {
        o.u64(self.id).str(&self.name).bool(self.inter);
        o.u32s(&self.members).u32s(&self.remote);
    }
    fn get(i: &mut pmtrace_trace::wire::In) -> CommRow {
        CommRow {
            id: i.u64(),
            name: i.str(),
            inter: i.bool(),
            members: i.u32s(),
            remote: i.u32s(),
        }
    }
}

impl CommRow {
    pub fn of(c: &pmtrace_trace::comm::Comm) -> CommRow {
        CommRow {
            id: c.global_id,
            name: super::view::comm_name(c),
            inter: c.inter,
            members: c.members.clone(),
            remote: c.remote_members.clone(),
        }
    }
}

/// A wait state (the report's `waits::Wait`): the call that waited,
/// how long, and the late call it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitState {
    pub kind: &'static str,
    pub at: EventRef,
    pub comm: u64,
    pub ns: u64,
    pub cause: EventRef,
}

impl From<&pmtrace_report::waits::Wait> for WaitState {
    fn from(w: &pmtrace_report::waits::Wait) -> WaitState {
        WaitState {
            kind: w.kind,
            at: w.at,
            comm: w.comm,
            ns: w.ns,
            cause: w.cause,
        }
    }
}

/// A request never completed nor freed (the report's `PendingRequest`):
/// the call that made it, and what it named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub at: EventRef,
    /// "send", "receive" or "collective".
    pub kind: &'static str,
    /// The peer's world rank, where it is one and known.
    pub peer: Option<u32>,
    pub tag: Option<i32>,
    pub comm: Option<u64>,
}

impl Pending {
    /// The requests of `trace`'s ranks never completed nor freed.
    pub fn of(trace: &pmtrace_trace::Trace) -> Vec<Pending> {
        let all = pmtrace_report::requests::pending_all(trace);
        (all.iter())
            .map(|p| Pending {
                at: p.at(),
                kind: p.kind,
                peer: p.peer_world,
                tag: p.tag,
                comm: p.comm,
            })
            .collect()
    }
}

/// A stretch of the critical path: (rank, from, to, activity), where the
/// activity is a function id of the rank or [`COMPUTING`].
pub type PathStretch = (u32, u64, u64, u32);

/// What the analyses found, on the view's time base: the wait states, and
/// the critical path's stretches, last first.
pub struct Analyses<'a> {
    pub waits: &'a [WaitState],
    pub path: &'a [PathStretch],
    pub races: &'a [RaceRow],
}

/// The activity of time outside MPI on the critical path.
pub const COMPUTING: u32 = u32::MAX;

/// Where a table's rows go in the output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// A file per table: `OUT/calls.parquet`.
    Files,
    /// Part `p` of a partitioned dataset: `OUT/calls/part-0000p.parquet`.
    Part(usize),
}

impl Layout {
    /// The file of `table`'s rows.
    pub fn path(self, out: &Path, table: &str) -> PathBuf {
        match self {
            Layout::Files => out.join(format!("{table}.parquet")),
            Layout::Part(p) => out.join(table).join(format!("part-{p:05}.parquet")),
        }
    }
}

/// Removes the tables of an earlier export from `out` (in either layout)
/// and makes the directories `layout` writes into.
pub fn prepare(out: &Path, layout: Layout) -> Result<(), ExportError> {
    fs::create_dir_all(out).map_err(io_err(out))?;
    for t in TABLES {
        let (file, dir) = (Layout::Files.path(out, t), out.join(t));
        if file.is_file() {
            fs::remove_file(&file).map_err(io_err(&file))?;
        }
        if dir.is_dir() {
            fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
        }
        if let Layout::Part(_) = layout {
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
    }
    Ok(())
}

/// The send end of a message that another block holds, as its block wrote
/// it: the call's id, time and Lamport clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendEnd {
    pub call: Option<u64>,
    pub ns: i64,
    pub lamport: Option<u64>,
}

impl SendEnd {
    /// The end of the send of `matched[k]`, which `view` holds.
    pub fn of(view: &View, ids: &CallIds, k: usize) -> SendEnd {
        let sv = &view.messages.sends[view.messages.matched[k].send];
        SendEnd {
            call: ids.id(sv.call),
            ns: ns(view.time(sv.call, false)),
            lamport: lamport_of(view, sv.call),
        }
    }
}

/// What rows a block of ranks writes: all of them for a whole trace.
pub struct Share<'a> {
    /// `messages.sends[..own_sends]` are the block's: the others are the
    /// ends of its ranks' receives that other blocks sent.
    pub own_sends: usize,
    /// `messages.recvs[..own_recvs]` are the block's.
    pub own_recvs: usize,
    /// The send ends of `matched[k]` held by other blocks, by `k`.
    pub remote: &'a FxHashMap<usize, SendEnd>,
    /// The block's ranks' requests never completed.
    pub pending: &'a [Pending],
}

/// Writes the tables of `view` into the directory `out` (made if missing),
/// a file each.
pub fn write(
    view: &View,
    pending: &[Pending],
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, ExportError> {
    prepare(out, Layout::Files)?;
    write_prepared(view, pending, out, progress)
}

/// [`write`] into a directory [`prepare`] made ready: the analyses'
/// tables ([`write_analyses`]) can be written beside it.
pub fn write_prepared(
    view: &View,
    pending: &[Pending],
    out: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, ExportError> {
    let ids = CallIds::of(view, 0);
    let remote = FxHashMap::default();
    let share = Share {
        own_sends: view.messages.sends.len(),
        own_recvs: view.messages.recvs.len(),
        remote: &remote,
        pending,
    };
    let mut s = write_part(view, &ids, &share, out, Layout::Files, progress)?;
    let comms: Vec<CommRow> = view.trace.comms.iter().map(CommRow::of).collect();
    s.communicators = write_communicators(&comms, out, Layout::Files)?;
    let members = MemberRow::of_instances(view);
    let path = Layout::Files.path(out, "collectives");
    s.collectives = Some(write_collectives(view, &ids, &members, &path)?);
    Ok(s)
}

/// Writes the tables of the analyses into `out`, where [`write`] wrote
/// the others: (wait states, critical-path segments).
pub fn write_analyses(
    view: &View,
    a: &Analyses,
    out: &Path,
) -> Result<(u64, u64, u64), ExportError> {
    let ids = CallIds::of(view, 0);
    let at = |t| Layout::Files.path(out, t);
    let waits = write_waits(view, &ids, a.waits, &|e| ids.id(e), &at("wait_states"))?;
    let name = |rank: u32, f: u32| match view.trace.rank(rank) {
        Some(held) => held.function_name(f).to_string(),
        None => "?".to_string(),
    };
    let path = write_path(a.path, &name, &at("critical_path"))?;
    let races = write_races(a.races, &|e| ids.id(e), &at("races"))?;
    Ok((waits, path, races))
}

/// Writes the rows of `share` with call ids `ids` into `out` as `layout`
/// says; `prepare` made its directories.
pub fn write_part(
    view: &View,
    ids: &CallIds,
    share: &Share,
    out: &Path,
    layout: Layout,
    progress: &mut dyn FnMut(u64),
) -> Result<Summary, ExportError> {
    let at = |t: &str| layout.path(out, t);
    let mut s = Summary {
        synced: view.synced.is_some(),
        ..Summary::default()
    };
    s.calls = write_calls(view, ids, &at("calls"), progress)?;
    s.messages = write_messages(view, ids, share, &at("messages"))?;
    s.unmatched = write_unmatched(view, ids, share, &at("unmatched"))?;
    s.ranks = write_ranks(view, ids, &at("ranks"))?;
    s.phases = write_phases(view, ids, &at("phases"))?;
    Ok(s)
}

/// Writes `communicators`: a row per communicator, by id.
pub fn write_communicators(
    comms: &[CommRow],
    out: &Path,
    layout: Layout,
) -> Result<u64, ExportError> {
    let list = |name: &str| {
        let item = Arc::new(Field::new("item", DataType::UInt32, false));
        Field::new(name, DataType::List(item), false)
    };
    let mut table = Table::create(
        &layout.path(out, "communicators"),
        vec![
            field("comm", DataType::UInt64, false),
            field("name", DataType::Utf8, false),
            field("inter", DataType::Boolean, false),
            field("size", DataType::UInt32, false),
            list("members"),
            list("remote_members"),
        ],
    )?;
    let mut sorted: Vec<&CommRow> = comms.iter().collect();
    sorted.sort_by_key(|c| c.id);
    let mut id = UInt64Builder::new();
    let mut name = StringBuilder::new();
    let mut inter = BooleanBuilder::new();
    let mut size = UInt32Builder::new();
    let item = || Field::new("item", DataType::UInt32, false);
    let mut members = ListBuilder::new(UInt32Builder::new()).with_field(item());
    let mut remote = ListBuilder::new(UInt32Builder::new()).with_field(item());
    for c in &sorted {
        id.append_value(c.id);
        name.append_value(&c.name);
        inter.append_value(c.inter);
        size.append_value(c.members.len() as u32);
        members.values().append_slice(&c.members);
        members.append(true);
        remote.values().append_slice(&c.remote);
        remote.append(true);
    }
    table.put(vec![
        Arc::new(id.finish()),
        Arc::new(name.finish()),
        Arc::new(inter.finish()),
        Arc::new(size.finish()),
        Arc::new(members.finish()),
        Arc::new(remote.finish()),
    ])?;
    table.close()?;
    Ok(sorted.len() as u64)
}

/// A row per phase of each location (user phases, `MPI_Pcontrol` levels,
/// pauses), with the calls that opened and closed it.
fn write_phases(view: &View, ids: &CallIds, path: &Path) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            field("rank", DataType::UInt32, false),
            field("thread", DataType::UInt32, false),
            field("name", DataType::Utf8, false),
            field("user", DataType::Boolean, false),
            field("depth", DataType::UInt32, false),
            field("from_call", DataType::UInt64, true),
            field("to_call", DataType::UInt64, true),
            field("from_ns", DataType::Int64, false),
            field("to_ns", DataType::Int64, false),
        ],
    )?;
    let mut rank = UInt32Builder::new();
    let mut thread = UInt32Builder::new();
    let mut name = StringBuilder::new();
    let mut user = BooleanBuilder::new();
    let mut depth = UInt32Builder::new();
    let mut from_call = UInt64Builder::new();
    let mut to_call = UInt64Builder::new();
    let mut from = Int64Builder::new();
    let mut to = Int64Builder::new();
    let mut n = 0u64;
    for &loc in &view.locations {
        for p in view.phases_of(loc) {
            let at = |index| EventRef {
                rank: p.rank,
                thread: p.thread,
                index,
            };
            rank.append_value(p.rank);
            thread.append_value(p.thread);
            name.append_value(&p.name);
            user.append_value(p.user);
            depth.append_value(p.depth);
            from_call.append_option(ids.id(at(p.from_index)));
            to_call.append_option(ids.id(at(p.to_index)));
            from.append_value(ns(p.from_ns));
            to.append_value(ns(p.to_ns));
            n += 1;
        }
    }
    table.put(vec![
        Arc::new(rank.finish()),
        Arc::new(thread.finish()),
        Arc::new(name.finish()),
        Arc::new(user.finish()),
        Arc::new(depth.finish()),
        Arc::new(from_call.finish()),
        Arc::new(to_call.finish()),
        Arc::new(from.finish()),
        Arc::new(to.finish()),
    ])?;
    table.close()?;
    Ok(n)
}

/// A member of a collective instance, as `collectives` holds it: the
/// instance's number (instances in the trace's order), communicator and
/// root (a world rank), the member's index in the instance (its
/// communicator rank) and its calls.
#[derive(Debug, Clone, Copy)]
pub struct MemberRow {
    pub instance: u64,
    pub comm: u64,
    pub root: Option<u32>,
    pub member: u32,
    pub calls: MemberCalls,
}

impl MemberRow {
    /// The members of the view's instances (a whole trace's).
    fn of_instances(view: &View) -> Vec<MemberRow> {
        let mut rows = Vec::new();
        for (k, inst) in view.collectives.iter().enumerate() {
            let root = root_of(view.trace, inst.comm, inst.root);
            for (member, m) in inst.members.iter().enumerate() {
                if let Some(m) = m {
                    rows.push(MemberRow {
                        instance: k as u64,
                        comm: inst.comm,
                        root,
                        member: member as u32,
                        calls: *m,
                    });
                }
            }
        }
        rows
    }
}

/// The world rank of an instance's root (a rank of communicator `comm`).
pub fn root_of(trace: &pmtrace_trace::Trace, comm: u64, root: Option<u32>) -> Option<u32> {
    let comm = trace.comms.get(comm)?;
    comm.members.get(root? as usize).copied()
}

/// A row per member of a collective instance: the instance, its function,
/// communicator and root, the member (its communicator rank and world
/// rank), the calls that entered and completed it (the same for a
/// blocking one), its enter and exit, and its bytes. The members' calls
/// are the view's.
pub fn write_collectives(
    view: &View,
    ids: &CallIds,
    members: &[MemberRow],
    path: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            field("instance", DataType::UInt64, false),
            dictionary("function"),
            field("comm", DataType::UInt64, false),
            field("root", DataType::UInt32, true),
            field("member", DataType::UInt32, false),
            field("rank", DataType::UInt32, false),
            field("enter_call", DataType::UInt64, true),
            field("exit_call", DataType::UInt64, true),
            field("enter_ns", DataType::Int64, false),
            field("exit_ns", DataType::Int64, true),
            field("sent_bytes", DataType::UInt64, false),
            field("recv_bytes", DataType::UInt64, false),
        ],
    )?;
    let mut c = CollColumns::default();
    for row in members {
        let m = &row.calls;
        c.instance.append_value(row.instance);
        let held = view.trace.rank(m.enter.rank);
        let func = held
            .and_then(|r| r.thread(m.enter.thread))
            .and_then(|t| t.records.func(m.enter.pos()));
        c.function.append_value(match (held, func) {
            (Some(held), Some(f)) => held.function_name(f),
            _ => "?",
        });
        c.comm.append_value(row.comm);
        c.root.append_option(row.root);
        c.member.append_value(row.member);
        c.rank.append_value(m.enter.rank);
        c.enter_call.append_option(ids.id(m.enter));
        c.exit_call.append_option(m.exit.and_then(|e| ids.id(e)));
        c.enter.append_value(ns(view.time(m.enter, false)));
        c.exit.append_option(m.exit.map(|e| ns(view.time(e, true))));
        c.sent.append_value(m.sent);
        c.recvd.append_value(m.recvd);
        if c.instance.len() == BATCH {
            table.put(c.take())?;
        }
    }
    if c.instance.len() > 0 {
        table.put(c.take())?;
    }
    table.close()?;
    Ok(members.len() as u64)
}

#[derive(Default)]
struct CollColumns {
    instance: UInt64Builder,
    function: StringDictionaryBuilder<Int32Type>,
    comm: UInt64Builder,
    root: UInt32Builder,
    member: UInt32Builder,
    rank: UInt32Builder,
    enter_call: UInt64Builder,
    exit_call: UInt64Builder,
    enter: Int64Builder,
    exit: Int64Builder,
    sent: UInt64Builder,
    recvd: UInt64Builder,
}

impl CollColumns {
    fn take(&mut self) -> Vec<ArrayRef> {
        let mut c = core::mem::take(self);
        vec![
            Arc::new(c.instance.finish()),
            Arc::new(c.function.finish()),
            Arc::new(c.comm.finish()),
            Arc::new(c.root.finish()),
            Arc::new(c.member.finish()),
            Arc::new(c.rank.finish()),
            Arc::new(c.enter_call.finish()),
            Arc::new(c.exit_call.finish()),
            Arc::new(c.enter.finish()),
            Arc::new(c.exit.finish()),
            Arc::new(c.sent.finish()),
            Arc::new(c.recvd.finish()),
        ]
    }
}

/// The ids of a view's calls: where each location's calls start, and which
/// records are calls where some are not.
pub struct CallIds {
    /// Location index by (rank, thread).
    at: FxHashMap<(u32, u32), usize>,
    /// Per location: its first row, and the record indices of its calls
    /// (`None`: every record is a call, so a call's row is its index).
    first: Vec<(u64, Option<Vec<u32>>)>,
    /// Per location, how many calls.
    count: Vec<u64>,
}

impl CallIds {
    /// The ids of `view`'s calls, from `first` on.
    pub fn of(view: &View, first_id: u64) -> CallIds {
        let mut at = FxHashMap::default();
        let mut first = Vec::with_capacity(view.locations.len());
        let mut counts = Vec::with_capacity(view.locations.len());
        let mut row = first_id;
        for (k, &loc) in view.locations.iter().enumerate() {
            at.insert((loc.rank, loc.thread), k);
            let records = view.records(loc);
            let n = records.len();
            let calls: Vec<u32> = (0..n as u32)
                .filter(|&i| records.is_call(i as usize))
                .collect();
            let count = calls.len() as u64;
            first.push((row, (calls.len() != n).then_some(calls)));
            counts.push(count);
            row += count;
        }
        CallIds {
            at,
            first,
            count: counts,
        }
    }

    /// How many calls.
    pub fn calls(&self) -> u64 {
        self.count.iter().sum()
    }

    /// The id of the call at `e`, if it is one of the view's calls.
    pub fn id(&self, e: EventRef) -> Option<u64> {
        let &k = self.at.get(&(e.rank, e.thread))?;
        let (first, calls) = &self.first[k];
        match calls {
            None => Some(first + u64::from(e.index)),
            Some(c) => c.binary_search(&e.index).ok().map(|p| first + p as u64),
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn parquet_err(path: &Path) -> impl FnOnce(parquet::errors::ParquetError) -> ExportError + '_ {
    move |e| ExportError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    }
}

/// A table's file, written a batch at a time. A thread of its own encodes
/// and compresses the batches while the next ones are built.
struct Table {
    path: PathBuf,
    schema: SchemaRef,
    batches: Option<SyncSender<RecordBatch>>,
    writer: Option<JoinHandle<Result<(), parquet::errors::ParquetError>>>,
}

impl Table {
    fn create(path: &Path, fields: Vec<Field>) -> Result<Table, ExportError> {
        let path = path.to_path_buf();
        let schema: SchemaRef = Arc::new(Schema::new(fields));
        let file = File::create(&path).map_err(io_err(&path))?;
        // Names are few: a dictionary each. Numbers are not: times and
        // indices rise along a thread, so their differences pack into a
        // few bits (delta encoding), with no dictionary tried first.
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP))
            .set_dictionary_enabled(false)
            .set_created_by(format!("pmtrace {}", env!("CARGO_PKG_VERSION")));
        for f in schema.fields() {
            let col = ColumnPath::from(f.name().as_str());
            props = match f.data_type() {
                DataType::Dictionary(..) | DataType::Utf8 => {
                    props.set_column_dictionary_enabled(col, true)
                }
                DataType::Int64 | DataType::UInt64 | DataType::Int32 | DataType::UInt32 => {
                    props.set_column_encoding(col, Encoding::DELTA_BINARY_PACKED)
                }
                _ => props,
            };
        }
        let props = props.build();
        let mut w =
            ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(parquet_err(&path))?;
        // Two batches in flight: while one is encoded, the next is built.
        let (batches, from) = sync_channel::<RecordBatch>(1);
        let writer = std::thread::Builder::new()
            .name("pmtrace-parquet".into())
            .spawn(move || {
                for b in from {
                    w.write(&b)?;
                }
                w.close().map(|_| ())
            })
            .map_err(io_err(&path))?;
        Ok(Table {
            path,
            schema,
            batches: Some(batches),
            writer: Some(writer),
        })
    }

    fn put(&mut self, columns: Vec<ArrayRef>) -> Result<(), ExportError> {
        let batch =
            RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| ExportError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?;
        let sent = self.batches.as_ref().map(|b| b.send(batch));
        match sent {
            Some(Ok(())) => Ok(()),
            // The writer stopped: its error says why.
            _ => self.finish(),
        }
    }

    /// Waits for the writer to write what it was given and close the file.
    fn finish(&mut self) -> Result<(), ExportError> {
        self.batches = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r.map_err(parquet_err(&self.path)),
            Some(Err(_)) => Err(ExportError::Io {
                path: self.path.clone(),
                source: std::io::Error::other("the Parquet writer panicked"),
            }),
            None => Err(ExportError::Io {
                path: self.path.clone(),
                source: std::io::Error::other("the Parquet writer stopped"),
            }),
        }
    }

    fn close(mut self) -> Result<(), ExportError> {
        self.finish()
    }
}

fn field(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

fn dictionary(name: &str) -> Field {
    Field::new(
        name,
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
        false,
    )
}

/// The function names of every rank as one dictionary: its values, and
/// each rank's function ids as keys into it.
struct Names {
    values: ArrayRef,
    keys: Vec<Vec<i32>>,
    /// The user phases' names, and each one's key.
    phase_values: ArrayRef,
    phase_keys: FxHashMap<String, i32>,
}

impl Names {
    fn of(view: &View) -> Names {
        let mut index: FxHashMap<&str, i32> = FxHashMap::default();
        let mut values: Vec<&str> = Vec::new();
        let mut keys = Vec::new();
        for r in &view.trace.ranks {
            let held = view.trace.held(r.rank);
            let n = held.header.functions.len();
            let of_rank: Vec<i32> = (0..n as u32)
                .map(|f| {
                    let name = held.function_name(f);
                    *index.entry(name).or_insert_with(|| {
                        values.push(name);
                        values.len() as i32 - 1
                    })
                })
                .collect();
            if keys.len() <= r.rank as usize {
                keys.resize(r.rank as usize + 1, Vec::new());
            }
            keys[r.rank as usize] = of_rank;
        }
        let unknown = values.len() as i32;
        values.push("?");
        let values: ArrayRef = Arc::new(StringArray::from(values));
        // A function id outside a rank's header is "?", as `function_name`
        // says.
        for k in &mut keys {
            k.push(unknown);
        }
        let mut phase_keys = FxHashMap::default();
        let mut phase_names = Vec::new();
        for p in view.phases().into_iter().filter(|p| p.user) {
            if !phase_keys.contains_key(&p.name) {
                phase_keys.insert(p.name.clone(), phase_names.len() as i32);
                phase_names.push(p.name);
            }
        }
        Names {
            values,
            keys,
            phase_values: Arc::new(StringArray::from(phase_names)),
            phase_keys,
        }
    }

    #[inline]
    fn key(&self, rank: u32, func: u32) -> i32 {
        let k = &self.keys[rank as usize];
        k[(func as usize).min(k.len() - 1)]
    }
}

/// Columns of `calls`, as they are built.
struct CallColumns {
    id: UInt64Builder,
    rank: UInt32Builder,
    thread: UInt32Builder,
    index: UInt32Builder,
    function: Int32Builder,
    enter: Int64Builder,
    exit: Int64Builder,
    enter_raw: Int64Builder,
    exit_raw: Int64Builder,
    bytes: UInt64Builder,
    peer: UInt32Builder,
    tag: Int32Builder,
    comm: UInt64Builder,
    lamport: UInt64Builder,
    phase: Int32Builder,
}

impl CallColumns {
    fn new() -> CallColumns {
        CallColumns {
            id: UInt64Builder::with_capacity(BATCH),
            rank: UInt32Builder::with_capacity(BATCH),
            thread: UInt32Builder::with_capacity(BATCH),
            index: UInt32Builder::with_capacity(BATCH),
            function: Int32Builder::with_capacity(BATCH),
            enter: Int64Builder::with_capacity(BATCH),
            exit: Int64Builder::with_capacity(BATCH),
            enter_raw: Int64Builder::with_capacity(BATCH),
            exit_raw: Int64Builder::with_capacity(BATCH),
            bytes: UInt64Builder::with_capacity(BATCH),
            peer: UInt32Builder::with_capacity(BATCH),
            tag: Int32Builder::with_capacity(BATCH),
            comm: UInt64Builder::with_capacity(BATCH),
            lamport: UInt64Builder::with_capacity(BATCH),
            phase: Int32Builder::with_capacity(BATCH),
        }
    }

    fn fields() -> Vec<Field> {
        vec![
            field("id", DataType::UInt64, false),
            field("rank", DataType::UInt32, false),
            field("thread", DataType::UInt32, false),
            field("index", DataType::UInt32, false),
            dictionary("function"),
            field("enter_ns", DataType::Int64, false),
            field("exit_ns", DataType::Int64, false),
            field("enter_raw_ns", DataType::Int64, false),
            field("exit_raw_ns", DataType::Int64, false),
            field("bytes", DataType::UInt64, false),
            field("peer", DataType::UInt32, true),
            field("tag", DataType::Int32, true),
            field("comm", DataType::UInt64, true),
            field("lamport", DataType::UInt64, true),
            Field::new(
                "phase",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
        ]
    }

    fn len(&self) -> usize {
        self.rank.len()
    }

    /// The columns built so far, with the builders made anew.
    fn take(&mut self, names: &Names) -> Vec<ArrayRef> {
        let mut c = core::mem::replace(self, CallColumns::new());
        let keys = c.function.finish();
        let function = DictionaryArray::<Int32Type>::try_new(keys, names.values.clone())
            .expect("keys within the names");
        let phase =
            DictionaryArray::<Int32Type>::try_new(c.phase.finish(), names.phase_values.clone())
                .expect("keys within the phases");
        vec![
            Arc::new(c.id.finish()),
            Arc::new(c.rank.finish()),
            Arc::new(c.thread.finish()),
            Arc::new(c.index.finish()),
            Arc::new(function),
            Arc::new(c.enter.finish()),
            Arc::new(c.exit.finish()),
            Arc::new(c.enter_raw.finish()),
            Arc::new(c.exit_raw.finish()),
            Arc::new(c.bytes.finish()),
            Arc::new(c.peer.finish()),
            Arc::new(c.tag.finish()),
            Arc::new(c.comm.finish()),
            Arc::new(c.lamport.finish()),
            Arc::new(phase),
        ]
    }
}

fn ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// The Lamport clock after the call at `e`, where the trace has clocks.
fn lamport_of(view: &View, e: EventRef) -> Option<u64> {
    (view.clocks.report.mode != "none")
        .then(|| view.clocks.after_call.get(e))
        .flatten()
}

fn write_calls(
    view: &View,
    ids: &CallIds,
    path: &Path,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, ExportError> {
    let mut table = Table::create(path, CallColumns::fields())?;
    let names = Names::of(view);
    let mut c = CallColumns::new();
    let lamport = view.clocks.report.mode != "none";
    let mut done = 0u64;
    for (k, &loc) in view.locations.iter().enumerate() {
        let at = (&mut c, &mut table, &names);
        write_location(view, loc, ids.first[k].0, lamport, at, &mut done, progress)?;
    }
    if c.len() > 0 {
        table.put(c.take(&names))?;
    }
    table.close()?;
    progress(done);
    Ok(done)
}

fn write_location(
    view: &View,
    loc: Location,
    first_id: u64,
    lamport: bool,
    (c, table, names): (&mut CallColumns, &mut Table, &Names),
    done: &mut u64,
    progress: &mut dyn FnMut(u64),
) -> Result<(), ExportError> {
    let times = view.times(loc);
    let records = view.records(loc);
    let ends = view.messages.ends.thread(loc.rank, loc.slot);
    let (mut sends, mut recvs) = (Cursor::new(&ends.sends), Cursor::new(&ends.done));
    let mut clocks = view.clocks.after_call.thread(loc.rank, loc.thread);
    // The user phases of the location by their records: a stack of those
    // open at record i, innermost on top (they nest properly).
    let mut spans: Vec<(u32, u32, i32)> = view
        .phases_of(loc)
        .into_iter()
        .filter(|p| p.user)
        .filter_map(|p| Some((p.from_index, p.to_index, *names.phase_keys.get(&p.name)?)))
        .collect();
    spans.sort_by_key(|&(from, to, _)| (from, core::cmp::Reverse(to)));
    let (mut next, mut open): (usize, Vec<(u32, u32, i32)>) = (0, Vec::new());
    let mut id = first_id;
    for i in 0..records.len() {
        let Some(func) = records.func(i) else {
            continue;
        };
        while next < spans.len() && spans[next].0 as usize <= i {
            open.push(spans[next]);
            next += 1;
        }
        while open.last().is_some_and(|&(_, to, _)| (to as usize) < i) {
            open.pop();
        }
        let at = view.at(loc, i);
        let d = if records.has_payload(i) {
            let call = records.call(i).expect("a call");
            view.detail_of(at, &call, sends.at(at.index), recvs.at(at.index))
        } else {
            CallDetail::default()
        };
        let (a, b) = times.get(i);
        let (ra, rb) = records.stamps(i);
        c.id.append_value(id);
        id += 1;
        c.rank.append_value(loc.rank);
        c.thread.append_value(loc.thread);
        c.index.append_value(i as u32);
        c.function.append_value(names.key(loc.rank, func));
        c.enter.append_value(ns(a));
        c.exit.append_value(ns(b));
        c.enter_raw.append_value(ns(ra));
        c.exit_raw.append_value(ns(rb));
        c.bytes.append_value(d.bytes);
        c.peer.append_option(d.peer);
        c.tag.append_option(d.tag);
        c.comm.append_option(d.comm);
        c.lamport.append_option(clocks.get(i).filter(|_| lamport));
        c.phase.append_option(open.last().map(|&(_, _, k)| k));
        *done += 1;
        if c.len() == BATCH {
            table.put(c.take(names))?;
            progress(*done);
        }
    }
    Ok(())
}

/// The matched messages whose receives are the block's.
fn write_messages(
    view: &View,
    ids: &CallIds,
    share: &Share,
    path: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            field("send_call", DataType::UInt64, true),
            field("recv_post_call", DataType::UInt64, true),
            field("recv_call", DataType::UInt64, true),
            field("src", DataType::UInt32, false),
            field("dst", DataType::UInt32, false),
            field("tag", DataType::Int32, false),
            field("comm", DataType::UInt64, false),
            field("send_bytes", DataType::UInt64, false),
            field("recv_bytes", DataType::UInt64, false),
            field("send_ns", DataType::Int64, false),
            field("recv_ns", DataType::Int64, false),
            field("send_lamport", DataType::UInt64, true),
            field("recv_lamport", DataType::UInt64, true),
            field("wildcard", DataType::Boolean, false),
        ],
    )?;
    let m = view.messages;
    let written: Vec<usize> = if share.own_recvs == m.recvs.len() {
        (0..m.matched.len()).collect()
    } else {
        (0..m.matched.len())
            .filter(|&k| m.matched[k].recv < share.own_recvs)
            .collect()
    };
    let mut n = 0u64;
    for chunk in written.chunks(BATCH) {
        let mut send_call = UInt64Builder::with_capacity(chunk.len());
        let mut post_call = UInt64Builder::with_capacity(chunk.len());
        let mut recv_call = UInt64Builder::with_capacity(chunk.len());
        let mut src = UInt32Builder::with_capacity(chunk.len());
        let mut dst = UInt32Builder::with_capacity(chunk.len());
        let mut tag = Int32Builder::with_capacity(chunk.len());
        let mut comm = UInt64Builder::with_capacity(chunk.len());
        let mut send_bytes = UInt64Builder::with_capacity(chunk.len());
        let mut recv_bytes = UInt64Builder::with_capacity(chunk.len());
        let mut send_ns = Int64Builder::with_capacity(chunk.len());
        let mut recv_ns = Int64Builder::with_capacity(chunk.len());
        let mut send_lc = UInt64Builder::with_capacity(chunk.len());
        let mut recv_lc = UInt64Builder::with_capacity(chunk.len());
        let mut wildcard = BooleanBuilder::with_capacity(chunk.len());
        for &k in chunk {
            let msg = &m.matched[k];
            let (sv, rv) = (&m.sends[msg.send], &m.recvs[msg.recv]);
            let send = match share.remote.get(&k) {
                Some(&end) if msg.send >= share.own_sends => end,
                _ => SendEnd::of(view, ids, k),
            };
            send_call.append_option(send.call);
            post_call.append_option(ids.id(rv.post));
            recv_call.append_option(ids.id(rv.completion));
            src.append_value(sv.src);
            dst.append_value(rv.dst);
            tag.append_value(sv.tag);
            comm.append_value(sv.comm);
            send_bytes.append_value(sv.bytes);
            recv_bytes.append_value(rv.bytes);
            send_ns.append_value(send.ns);
            recv_ns.append_value(ns(view.time(rv.completion, true)));
            send_lc.append_option(send.lamport);
            recv_lc.append_option(lamport_of(view, rv.completion));
            wildcard.append_value(rv.wildcard);
        }
        table.put(vec![
            Arc::new(send_call.finish()),
            Arc::new(post_call.finish()),
            Arc::new(recv_call.finish()),
            Arc::new(src.finish()),
            Arc::new(dst.finish()),
            Arc::new(tag.finish()),
            Arc::new(comm.finish()),
            Arc::new(send_bytes.finish()),
            Arc::new(recv_bytes.finish()),
            Arc::new(send_ns.finish()),
            Arc::new(recv_ns.finish()),
            Arc::new(send_lc.finish()),
            Arc::new(recv_lc.finish()),
            Arc::new(wildcard.finish()),
        ])?;
        n += chunk.len() as u64;
    }
    table.close()?;
    Ok(n)
}

/// Sends and receives without their other end: a row each, with the
/// reason.
fn write_unmatched(
    view: &View,
    ids: &CallIds,
    share: &Share,
    path: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            dictionary("reason"),
            field("call", DataType::UInt64, true),
            field("rank", DataType::UInt32, false),
            field("peer", DataType::UInt32, true),
            field("tag", DataType::Int32, true),
            field("comm", DataType::UInt64, true),
            field("bytes", DataType::UInt64, true),
        ],
    )?;
    let m = view.messages;
    let mut reason = StringDictionaryBuilder::<Int32Type>::new();
    let mut call = UInt64Builder::new();
    let mut rank = UInt32Builder::new();
    let mut peer = UInt32Builder::new();
    let mut tag = Int32Builder::new();
    let mut comm = UInt64Builder::new();
    let mut bytes = UInt64Builder::new();
    let mut n = 0u64;
    for &s in m.unmatched_sends.iter().filter(|&&s| s < share.own_sends) {
        let sv = &m.sends[s];
        n += 1;
        reason.append_value("send without its receive");
        call.append_option(ids.id(sv.call));
        rank.append_value(sv.src);
        peer.append_option(sv.dst);
        tag.append_value(sv.tag);
        comm.append_value(sv.comm);
        bytes.append_value(sv.bytes);
    }
    for &r in m.unmatched_recvs.iter().filter(|&&r| r < share.own_recvs) {
        let rv = &m.recvs[r];
        n += 1;
        reason.append_value("receive without its send");
        call.append_option(ids.id(rv.completion));
        rank.append_value(rv.dst);
        peer.append_option(rv.src);
        tag.append_value(rv.tag);
        comm.append_value(rv.comm);
        bytes.append_value(rv.bytes);
    }
    for p in share.pending {
        n += 1;
        reason.append_value(match p.kind {
            "send" => "send request never completed",
            "receive" => "receive request never completed",
            _ => "collective request never completed",
        });
        call.append_option(ids.id(p.at));
        rank.append_value(p.at.rank);
        peer.append_option(p.peer);
        tag.append_option(p.tag);
        comm.append_option(p.comm);
        bytes.append_null();
    }
    if n > 0 {
        table.put(vec![
            Arc::new(reason.finish()),
            Arc::new(call.finish()),
            Arc::new(rank.finish()),
            Arc::new(peer.finish()),
            Arc::new(tag.finish()),
            Arc::new(comm.finish()),
            Arc::new(bytes.finish()),
        ])?;
    }
    table.close()?;
    Ok(n)
}

fn write_ranks(view: &View, ids: &CallIds, path: &Path) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            field("rank", DataType::UInt32, false),
            field("host", DataType::Utf8, false),
            field("threads", DataType::UInt32, false),
            field("calls", DataType::UInt64, false),
            field("complete", DataType::Boolean, false),
        ],
    )?;
    let incomplete = view.trace.incomplete_ranks();
    let mut rank = UInt32Builder::new();
    let mut host = StringBuilder::new();
    let mut threads = UInt32Builder::new();
    let mut calls = UInt64Builder::new();
    let mut complete = BooleanBuilder::new();
    for r in &view.trace.ranks {
        rank.append_value(r.rank);
        host.append_value(&r.header.hostname);
        threads.append_value(r.threads.len() as u32);
        let n: u64 = view
            .locations
            .iter()
            .zip(&ids.count)
            .filter(|(l, _)| l.rank == r.rank)
            .map(|(_, &c)| c)
            .sum();
        calls.append_value(n);
        complete.append_value(!incomplete.contains(&r.rank));
    }
    let n = view.trace.ranks.len() as u64;
    table.put(vec![
        Arc::new(rank.finish()),
        Arc::new(host.finish()),
        Arc::new(threads.finish()),
        Arc::new(calls.finish()),
        Arc::new(complete.finish()),
    ])?;
    table.close()?;
    Ok(n)
}

/// A row per wait state: its kind, the call that waited (rank, thread),
/// the communicator, how long, and the late call it waited for.
/// The waits are calls of the view; `cause_id` gives the id of a late
/// call, which may be another block's.
pub fn write_waits(
    view: &View,
    ids: &CallIds,
    waits: &[WaitState],
    cause_id: &dyn Fn(EventRef) -> Option<u64>,
    path: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            dictionary("kind"),
            field("call", DataType::UInt64, true),
            field("rank", DataType::UInt32, false),
            field("thread", DataType::UInt32, false),
            field("comm", DataType::UInt64, false),
            field("enter_ns", DataType::Int64, false),
            field("ns", DataType::UInt64, false),
            field("cause_call", DataType::UInt64, true),
            field("cause_rank", DataType::UInt32, false),
        ],
    )?;
    for chunk in waits.chunks(BATCH) {
        let mut kind = StringDictionaryBuilder::<Int32Type>::new();
        let mut call = UInt64Builder::with_capacity(chunk.len());
        let mut rank = UInt32Builder::with_capacity(chunk.len());
        let mut thread = UInt32Builder::with_capacity(chunk.len());
        let mut comm = UInt64Builder::with_capacity(chunk.len());
        let mut enter = Int64Builder::with_capacity(chunk.len());
        let mut ns_col = UInt64Builder::with_capacity(chunk.len());
        let mut cause_call = UInt64Builder::with_capacity(chunk.len());
        let mut cause_rank = UInt32Builder::with_capacity(chunk.len());
        for w in chunk {
            kind.append_value(w.kind);
            call.append_option(ids.id(w.at));
            rank.append_value(w.at.rank);
            thread.append_value(w.at.thread);
            comm.append_value(w.comm);
            enter.append_value(ns(view.time(w.at, false)));
            ns_col.append_value(w.ns);
            cause_call.append_option(cause_id(w.cause));
            cause_rank.append_value(w.cause.rank);
        }
        table.put(vec![
            Arc::new(kind.finish()),
            Arc::new(call.finish()),
            Arc::new(rank.finish()),
            Arc::new(thread.finish()),
            Arc::new(comm.finish()),
            Arc::new(enter.finish()),
            Arc::new(ns_col.finish()),
            Arc::new(cause_call.finish()),
            Arc::new(cause_rank.finish()),
        ])?;
    }
    table.close()?;
    Ok(waits.len() as u64)
}

/// A row per stretch of the critical path, in time order: the rank, what
/// it did (an MPI function, or "computation"), from and to.
/// `name` gives the name of a function id of a rank.
pub fn write_path(
    path: &[PathStretch],
    name: &dyn Fn(u32, u32) -> String,
    out: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        out,
        vec![
            field("segment", DataType::UInt64, false),
            field("rank", DataType::UInt32, false),
            dictionary("activity"),
            field("from_ns", DataType::Int64, false),
            field("to_ns", DataType::Int64, false),
            field("ns", DataType::UInt64, false),
        ],
    )?;
    let mut k = 0u64;
    let in_order: Vec<&PathStretch> = path.iter().rev().collect();
    for chunk in in_order.chunks(BATCH) {
        let mut segment = UInt64Builder::with_capacity(chunk.len());
        let mut rank = UInt32Builder::with_capacity(chunk.len());
        let mut activity = StringDictionaryBuilder::<Int32Type>::new();
        let mut from = Int64Builder::with_capacity(chunk.len());
        let mut to = Int64Builder::with_capacity(chunk.len());
        let mut len = UInt64Builder::with_capacity(chunk.len());
        for &&(r, a, b, what) in chunk {
            segment.append_value(k);
            k += 1;
            rank.append_value(r);
            match what {
                COMPUTING => activity.append_value("computation"),
                f => activity.append_value(name(r, f)),
            }
            from.append_value(ns(a));
            to.append_value(ns(b));
            len.append_value(b.saturating_sub(a));
        }
        table.put(vec![
            Arc::new(segment.finish()),
            Arc::new(rank.finish()),
            Arc::new(activity.finish()),
            Arc::new(from.finish()),
            Arc::new(to.finish()),
            Arc::new(len.finish()),
        ])?;
    }
    table.close()?;
    Ok(k)
}

/// A row per racy wildcard receive and message it could have taken
/// instead: the receive's call (its id from `id`), rank, thread,
/// communicator and tag, the message it took and the other one.
pub fn write_races(
    races: &[RaceRow],
    id: &dyn Fn(EventRef) -> Option<u64>,
    path: &Path,
) -> Result<u64, ExportError> {
    let mut table = Table::create(
        path,
        vec![
            field("call", DataType::UInt64, true),
            field("rank", DataType::UInt32, false),
            field("thread", DataType::UInt32, false),
            field("comm", DataType::UInt64, false),
            field("tag", DataType::Int32, false),
            field("matched_src", DataType::UInt32, false),
            field("matched_message_id", DataType::UInt64, false),
            field("other_src", DataType::UInt32, false),
            field("other_message_id", DataType::UInt64, false),
        ],
    )?;
    let mut call = UInt64Builder::new();
    let mut rank = UInt32Builder::new();
    let mut thread = UInt32Builder::new();
    let mut comm = UInt64Builder::new();
    let mut tag = Int32Builder::new();
    let mut matched_src = UInt32Builder::new();
    let mut matched_id = UInt64Builder::new();
    let mut other_src = UInt32Builder::new();
    let mut other_id = UInt64Builder::new();
    for r in races {
        call.append_option(id(r.at));
        rank.append_value(r.at.rank);
        thread.append_value(r.at.thread);
        comm.append_value(r.comm);
        tag.append_value(r.tag);
        matched_src.append_value(r.matched.0);
        matched_id.append_value(r.matched.1);
        other_src.append_value(r.other.0);
        other_id.append_value(r.other.1);
    }
    table.put(vec![
        Arc::new(call.finish()),
        Arc::new(rank.finish()),
        Arc::new(thread.finish()),
        Arc::new(comm.finish()),
        Arc::new(tag.finish()),
        Arc::new(matched_src.finish()),
        Arc::new(matched_id.finish()),
        Arc::new(other_src.finish()),
        Arc::new(other_id.finish()),
    ])?;
    table.close()?;
    Ok(races.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use pmtrace_matching::matching::Messages;
    use pmtrace_trace::Trace;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    fn golden(case: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/golden")
            .join(case)
            .join("trace")
    }

    fn read(path: &Path) -> Vec<RecordBatch> {
        let file = File::open(path).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap())
            .collect()
    }

    fn u64s(batches: &[RecordBatch], name: &str) -> Vec<Option<u64>> {
        let mut v = Vec::new();
        for b in batches {
            let c = b.column_by_name(name).unwrap().as_primitive::<UInt64Type>();
            v.extend((0..c.len()).map(|i| c.is_valid(i).then(|| c.value(i))));
        }
        v
    }

    fn u32s(batches: &[RecordBatch], name: &str) -> Vec<u32> {
        let mut v = Vec::new();
        for b in batches {
            let c = b.column_by_name(name).unwrap().as_primitive::<UInt32Type>();
            v.extend(c.values().iter().copied());
        }
        v
    }

    fn functions(batches: &[RecordBatch]) -> Vec<String> {
        let mut v = Vec::new();
        for b in batches {
            let c = b.column_by_name("function").unwrap();
            let d = c.as_dictionary::<Int32Type>();
            let names = d.values().as_string::<i32>();
            v.extend(
                d.keys()
                    .values()
                    .iter()
                    .map(|&k| names.value(k as usize).to_owned()),
            );
        }
        v
    }

    /// On recorded traces, synced and not: a row per call with the
    /// trace's function counts, a row per matched message whose rows name
    /// its calls (the send's call is a send, the receive's completion the
    /// call that completed it) and whose bytes add up, and a row per rank.
    fn phases(batches: &[RecordBatch]) -> Vec<Option<String>> {
        let mut v = Vec::new();
        for b in batches {
            let d = b
                .column_by_name("phase")
                .unwrap()
                .as_dictionary::<Int32Type>();
            let names = d.values().as_string::<i32>();
            let keys = d.keys();
            v.extend((0..keys.len()).map(|i| {
                keys.is_valid(i)
                    .then(|| names.value(keys.value(i) as usize).to_owned())
            }));
        }
        v
    }

    /// A call's phase is the innermost user phase open at it, the calls
    /// that open and close a phase included.
    #[test]
    fn each_call_names_its_innermost_user_phase() {
        use pmtrace_fixture::TraceBuilder;
        use pmtrace_format::record::Payload as P;
        let dir =
            std::env::temp_dir().join(format!("pmtrace-parquet-phases-{}", std::process::id()));
        let mut tb = TraceBuilder::new(2);
        for r in 0..2 {
            tb.rank(r).define_world_and_self(0);
        }
        let begin = |name: &str| P::Phase {
            name: Some(name.to_owned()),
        };
        let end = || P::Phase { name: None };
        for r in 0..2 {
            let t = tb.rank(r).thread(0);
            let calls = [
                ("MPI_Comm_rank", P::None),
                ("pmtrace_phase_begin", begin("outer")),
                ("MPI_Comm_rank", P::None),
                ("pmtrace_phase_begin", begin("inner")),
                ("MPI_Comm_rank", P::None),
                ("pmtrace_phase_end", end()),
                ("MPI_Comm_rank", P::None),
                ("pmtrace_phase_end", end()),
                ("MPI_Comm_rank", P::None),
            ];
            for (k, (f, p)) in calls.into_iter().enumerate() {
                let at = 1_000 + 100 * k as u64;
                t.call(f, at, at + 10, p);
            }
        }
        tb.write(&dir.join("trace")).unwrap();
        let trace = Trace::open(dir.join("trace")).unwrap();
        let messages = Messages::build(&trace);
        let view = View::new(&trace, &messages, None);
        write(&view, &[], &dir.join("out"), &mut |_| {}).unwrap();
        let got = phases(&read(&dir.join("out/calls.parquet")));
        let (o, i) = (Some("outer".to_owned()), Some("inner".to_owned()));
        let one = vec![
            None,
            o.clone(),
            o.clone(),
            i.clone(),
            i.clone(),
            i,
            o.clone(),
            o,
            None,
        ];
        let want: Vec<_> = one.iter().chain(one.iter()).cloned().collect();
        assert_eq!(got, want);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Requests never completed are rows of `unmatched`, at their calls.
    #[test]
    fn pending_requests_are_unmatched_rows_at_their_calls() {
        let scratch = std::env::temp_dir().join(format!("pmtrace-pending-{}", std::process::id()));
        let trace = Trace::open(golden("halo2d_np4")).unwrap();
        let messages = Messages::build(&trace);
        let view = View::new(&trace, &messages, None);
        let at = |rank, index| EventRef {
            rank,
            thread: 0,
            index,
        };
        let pending = [
            Pending {
                at: at(1, 5),
                kind: "receive",
                peer: Some(2),
                tag: Some(7),
                comm: Some(0),
            },
            Pending {
                at: at(3, 9),
                kind: "collective",
                peer: None,
                tag: None,
                comm: None,
            },
        ];
        let s = write(&view, &pending, &scratch, &mut |_| {}).unwrap();
        assert_eq!(s.unmatched, 2);
        let rows = read(&scratch.join("unmatched.parquet"));
        let ids = CallIds::of(&view, 0);
        let want: Vec<Option<u64>> = pending.iter().map(|p| ids.id(p.at)).collect();
        assert!(want.iter().all(Option::is_some));
        assert_eq!(u64s(&rows, "call"), want);
        assert_eq!(u32s(&rows, "rank"), vec![1, 3]);
        let reasons: Vec<String> = {
            let col = rows[0].column_by_name("reason").unwrap();
            let d = col.as_dictionary::<Int32Type>();
            let values = d.values().as_string::<i32>();
            (0..d.len())
                .map(|i| values.value(d.keys().value(i) as usize).to_string())
                .collect()
        };
        assert_eq!(
            reasons,
            [
                "receive request never completed",
                "collective request never completed"
            ]
        );
        assert_eq!(u64s(&rows, "bytes"), vec![None, None]);
        fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn the_tables_hold_every_call_and_message_and_their_rows_point_at_their_calls() {
        let scratch = std::env::temp_dir().join(format!("pmtrace-parquet-{}", std::process::id()));
        for case in [
            "halo2d_np4",
            "collectives",
            "threads",
            "master_worker",
            "halo2d_vector",
        ] {
            let trace = Trace::open(golden(case)).unwrap();
            let messages = Messages::build(&trace);
            let synced = pmtrace_sync::sync(&trace, &messages, &Default::default());
            for (times, synced) in [("recorded", None), ("synced", Some(&synced))] {
                let what = format!("{case}, {times}");
                let view = View::new(&trace, &messages, synced);
                let out = scratch.join(&what);
                let s = write(&view, &[], &out, &mut |_| {}).unwrap();
                assert_eq!(s.synced, synced.is_some(), "{what}");
                let calls = read(&out.join("calls.parquet"));
                let names = functions(&calls);
                assert_eq!(names.len() as u64, s.calls, "{what}");
                assert_eq!(s.calls, trace.events(), "{what}: a row per call");
                let mut per: BTreeMap<&str, u64> = BTreeMap::new();
                for n in &names {
                    *per.entry(n.as_str()).or_default() += 1;
                }
                let mut want: BTreeMap<&str, u64> = BTreeMap::new();
                for &loc in &view.locations {
                    let records = view.records(loc);
                    for i in 0..records.len() {
                        if let Some(f) = records.func(i) {
                            *want
                                .entry(trace.held(loc.rank).function_name(f))
                                .or_default() += 1;
                        }
                    }
                }
                assert_eq!(per, want, "{what}: calls per function");
                let ranks = u32s(&calls, "rank");
                let index = u32s(&calls, "index");
                let ids: Vec<u64> = u64s(&calls, "id").into_iter().flatten().collect();
                assert!(
                    ids.iter().copied().eq(0..s.calls),
                    "{what}: ids are row numbers"
                );
                let comms = u64s(&calls, "comm");

                let msgs = read(&out.join("messages.parquet"));
                let sends = u64s(&msgs, "send_call");
                let recvs = u64s(&msgs, "recv_call");
                assert_eq!(sends.len(), messages.matched.len(), "{what}");
                assert_eq!(s.messages, messages.matched.len() as u64, "{what}");
                let bytes: u64 = u64s(&msgs, "recv_bytes").iter().map(|b| b.unwrap()).sum();
                let want_bytes: u64 = messages
                    .matched
                    .iter()
                    .map(|m| messages.recvs[m.recv].bytes)
                    .sum();
                assert_eq!(bytes, want_bytes, "{what}: bytes");
                for (k, m) in messages.matched.iter().enumerate() {
                    let (sv, rv) = (&messages.sends[m.send], &messages.recvs[m.recv]);
                    let s = sends[k].expect("the send's row") as usize;
                    assert_eq!(
                        (ranks[s], index[s]),
                        (sv.call.rank, sv.call.index),
                        "{what}"
                    );
                    assert_eq!(comms[s], Some(sv.comm), "{what}: the send's communicator");
                    let r = recvs[k].expect("the completion's row") as usize;
                    assert_eq!(
                        (ranks[r], index[r]),
                        (rv.completion.rank, rv.completion.index),
                        "{what}"
                    );
                }
                let rank_rows = read(&out.join("ranks.parquet"));
                let per_rank = u64s(&rank_rows, "calls");
                assert_eq!(per_rank.len(), trace.ranks.len(), "{what}");
                let total: u64 = per_rank.iter().map(|c| c.unwrap()).sum();
                assert_eq!(total, s.calls, "{what}: calls by rank");
            }
        }
        fs::remove_dir_all(&scratch).unwrap();
    }
}
