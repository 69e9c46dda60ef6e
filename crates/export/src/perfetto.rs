//! Perfetto's native trace format: a `Trace` protobuf of `TracePacket`s
//! carrying TrackEvents (what the Perfetto UI opens fastest, without the
//! JSON importer's size ceiling).
//!
//! ```text
//!  Trace { repeated TracePacket packet = 1 }   streamed: tag 0x0A, length, packet
//!
//!  process track  "rank N"       uuid 1 + rank·2^20           ProcessDescriptor pid N+1
//!   ├─ thread track "rank N thread T"   uuid + 1 + T          slices: one per MPI call
//!   ├─ async tracks "rank N in flight k" uuid + 2^19 + k      slices: one per nonblocking
//!   │                                                         operation, start to completion
//!   └─ phase tracks "rank N thread T phases" uuid + 2^18 + T  slices: user phases, nested
//!
//!  packet 1: interned data (event names = MPI functions, categories,
//!            annotation names), sequence flags "incremental state cleared"
//!  then:     track descriptors, then every location's events
//! ```
//!
//! Slices are SLICE_BEGIN / SLICE_END pairs with debug annotations (peer,
//! tag, bytes, lamport). A point-to-point message is a flow from the slice
//! of the call that sent it to the slice of the call that completed its
//! receive; a collective is one flow per logical message (Becker et al.
//! §4; a flow cannot fork), from the enter of a member to the exit of
//! one that depends on it. Operations in flight at once go to different
//! async tracks (first free track), since slices of one track must nest.
//!
//! The message definitions below are the subset of Perfetto's protos
//! (`protos/perfetto/trace/...`) this writer fills, with the same field
//! numbers; Perfetto's own `perfetto_trace_pb2` decodes the file.

use core::ops::Range;
use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use prost::Message;

use super::view::{CallDetail, Location, View};
use pmtrace_matching::ends::Cursor;
use pmtrace_trace::read::EventRef;
use rayon::prelude::*;

/// `TracePacket` (trace_packet.proto). The `data` oneof is spelled as
/// optional fields: on the wire they are the same.
#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `TracePacket.SequenceFlags`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `TrackEvent` (track_event/track_event.proto).
#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    #[prost(uint64, repeated, packed = "false", tag = "3")]
    pub category_iids: Vec<u64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// A name not interned (user phases).
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `TrackEvent.Type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;

#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct InternedData {
    #[prost(message, repeated, tag = "1")]
    pub event_categories: Vec<Interned>,
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<Interned>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<Interned>,
}

/// `EventCategory`, `EventName` and `DebugAnnotationName` share this shape.
#[derive(Clone, PartialEq, Message)]
pub struct Interned {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

const SEQ: u32 = 1;
/// Category iids.
pub const CAT_MPI: u64 = 1;
pub const CAT_IN_FLIGHT: u64 = 2;
pub const CAT_PHASE: u64 = 3;
const ANN_PEER: u64 = 1;
const ANN_TAG: u64 = 2;
const ANN_BYTES: u64 = 3;
const ANN_LAMPORT: u64 = 4;
const RANK_UUID_STRIDE: u64 = 1 << 20;
const ASYNC_UUID_BASE: u64 = 1 << 19;
/// A thread's user phases: a track of their own beside the thread's.
const PHASE_UUID_BASE: u64 = 1 << 18;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub packets: u64,
    pub slices: u64,
    pub in_flight_slices: u64,
    pub phase_slices: u64,
    pub message_flows: u64,
    pub collective_flows: u64,
    pub bytes: u64,
}

fn process_uuid(rank: u32) -> u64 {
    1 + u64::from(rank) * RANK_UUID_STRIDE
}

/// The uuid of a location's thread track.
pub fn thread_uuid(rank: u32, thread: u32) -> u64 {
    process_uuid(rank) + 1 + u64::from(thread)
}

struct Out<'w> {
    w: &'w mut dyn Write,
    buf: Vec<u8>,
    summary: Summary,
}

impl Out<'_> {
    fn packet(&mut self, p: &TracePacket) -> io::Result<()> {
        self.buf.clear();
        self.buf.push(0x0A); // Trace.packet, field 1, length-delimited
        p.encode_length_delimited(&mut self.buf)
            .expect("a Vec grows as needed");
        self.w.write_all(&self.buf)?;
        self.summary.packets += 1;
        self.summary.bytes += self.buf.len() as u64;
        Ok(())
    }

    fn event(&mut self, t: u64, e: TrackEvent) -> io::Result<()> {
        self.packet(&TracePacket {
            timestamp: Some(t),
            trusted_packet_sequence_id: Some(SEQ),
            track_event: Some(e),
            sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
            ..TracePacket::default()
        })
    }

    fn track(&mut self, d: TrackDescriptor) -> io::Result<()> {
        self.packet(&TracePacket {
            trusted_packet_sequence_id: Some(SEQ),
            track_descriptor: Some(d),
            ..TracePacket::default()
        })
    }
}

fn annotations(d: CallDetail, lamport: Option<u64>) -> Vec<DebugAnnotation> {
    let mut v = Vec::with_capacity(4);
    let ann = |iid| DebugAnnotation {
        name_iid: Some(iid),
        ..DebugAnnotation::default()
    };
    if let Some(p) = d.peer {
        v.push(DebugAnnotation {
            uint_value: Some(u64::from(p)),
            ..ann(ANN_PEER)
        });
    }
    if let Some(t) = d.tag {
        v.push(DebugAnnotation {
            int_value: Some(i64::from(t)),
            ..ann(ANN_TAG)
        });
    }
    if d.bytes > 0 {
        v.push(DebugAnnotation {
            uint_value: Some(d.bytes),
            ..ann(ANN_BYTES)
        });
    }
    if let Some(l) = lamport {
        v.push(DebugAnnotation {
            uint_value: Some(l),
            ..ann(ANN_LAMPORT)
        });
    }
    v
}

/// The packets of a call's slice, encoded directly: the bytes prost gives
/// for the same `TracePacket` (fields in tag order, unpacked repeated
/// fields), without building the messages (a fifth of the export went to
/// their allocations and sizing). `slice_packets_are_what_prost_encodes`
/// checks it against prost.
#[derive(Default)]
struct SliceEncoder {
    event: Vec<u8>,
}

/// What a slice's begin event says.
struct SliceBegin<'a> {
    name_iid: Option<u64>,
    track: u64,
    detail: CallDetail,
    lamport: Option<u64>,
    flows: &'a [u64],
    terminating: &'a [u64],
}

/// Bytes of `v` as a varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

impl SliceEncoder {
    /// Appends the framed begin packet at `t` to `out`; returns its bytes.
    fn begin(&mut self, out: &mut Vec<u8>, t: u64, b: &SliceBegin) -> usize {
        let e = &mut self.event;
        e.clear();
        // category_iids (3)
        e.push(3 << 3);
        put_varint(e, CAT_MPI);
        // debug_annotations (4): (name iid, field, value) each
        let ann = |e: &mut Vec<u8>, iid: u64, field: u8, v: u64| {
            e.push((4 << 3) | 2);
            put_varint(e, (2 + varint_len(iid) + varint_len(v)) as u64);
            e.push(1 << 3);
            put_varint(e, iid);
            e.push(field << 3);
            put_varint(e, v);
        };
        if let Some(p) = b.detail.peer {
            ann(e, ANN_PEER, 3, u64::from(p));
        }
        if let Some(tag) = b.detail.tag {
            ann(e, ANN_TAG, 4, i64::from(tag) as u64);
        }
        if b.detail.bytes > 0 {
            ann(e, ANN_BYTES, 3, b.detail.bytes);
        }
        if let Some(l) = b.lamport {
            ann(e, ANN_LAMPORT, 3, l);
        }
        self.tail(
            t,
            TYPE_SLICE_BEGIN,
            b.name_iid,
            b.track,
            b.flows,
            b.terminating,
            out,
        )
    }

    /// Appends the framed end packet at `t` to `out`; returns its bytes.
    fn end(&mut self, out: &mut Vec<u8>, t: u64, track: u64) -> usize {
        self.event.clear();
        self.tail(t, TYPE_SLICE_END, None, track, &[], &[], out)
    }

    /// The rest of the event after its annotations, then the packet.
    #[allow(clippy::too_many_arguments)]
    fn tail(
        &mut self,
        t: u64,
        kind: i32,
        name_iid: Option<u64>,
        track: u64,
        flows: &[u64],
        terminating: &[u64],
        out: &mut Vec<u8>,
    ) -> usize {
        let e = &mut self.event;
        e.push(9 << 3);
        put_varint(e, kind as u64);
        if let Some(iid) = name_iid {
            e.push(10 << 3);
            put_varint(e, iid);
        }
        e.push(11 << 3);
        put_varint(e, track);
        for (key, ids) in [(47u64, flows), (48, terminating)] {
            for &id in ids {
                put_varint(e, (key << 3) | 1);
                e.extend_from_slice(&id.to_le_bytes());
            }
        }
        // The packet: timestamp (8), sequence id (10), the event (11),
        // flags (13), framed as Trace.packet (1).
        let len = 1
            + varint_len(t)
            + 1
            + varint_len(u64::from(SEQ))
            + 1
            + varint_len(e.len() as u64)
            + e.len()
            + 1
            + varint_len(u64::from(SEQ_NEEDS_INCREMENTAL_STATE));
        let start = out.len();
        out.reserve(len + 12);
        out.push(0x0A);
        put_varint(out, len as u64);
        out.push(8 << 3);
        put_varint(out, t);
        out.push(10 << 3);
        put_varint(out, u64::from(SEQ));
        out.push((11 << 3) | 2);
        put_varint(out, e.len() as u64);
        out.extend_from_slice(e);
        out.push(13 << 3);
        put_varint(out, u64::from(SEQ_NEEDS_INCREMENTAL_STATE));
        out.len() - start
    }
}

/// Calls encoded per block, and blocks encoded at once, in parallel: a
/// group of blocks waits for the writer while the next is encoded, so
/// about three groups (a megabyte or two a block) are held at a time.
const CALLS_PER_BLOCK: usize = 1 << 14;
const BLOCKS_AT_ONCE: usize = 4;

/// What encoding a location's call slices needs.
struct CallSlices<'v, 'a> {
    view: &'v View<'a>,
    loc: Location,
    t0: u64,
    /// The rank's interned name of each function.
    iid_of: &'v [Option<u64>],
    /// The location's flows out of and into its calls.
    flows_out: &'v FlowList,
    flows_in: &'v FlowList,
}

/// The flows of one location's calls: record indices in increasing order,
/// beside the flow ids (increasing within a record).
#[derive(Default)]
struct FlowList {
    index: Vec<u32>,
    flow: Vec<u64>,
}

impl FlowList {
    /// Reads the flows record by record (see `ends::Cursor`).
    fn cursor(&self) -> FlowCursor<'_> {
        FlowCursor {
            index: Cursor::new(&self.index),
            flow: &self.flow,
        }
    }
}

struct FlowCursor<'a> {
    index: Cursor<'a, u32>,
    flow: &'a [u64],
}

impl<'a> FlowCursor<'a> {
    /// The flows at record `index`.
    fn at(&mut self, index: u32) -> &'a [u64] {
        &self.flow[self.index.run(index)]
    }
}

/// Every flow of a trace, per location (as in `View::locations`), out of
/// and into calls.
pub struct Flows {
    out: Vec<FlowList>,
    into: Vec<FlowList>,
}

impl Flows {
    /// `pairs`: (from, to) in flow order, the first flow being `1`.
    fn new(view: &View, pairs: impl Iterator<Item = (EventRef, EventRef)>) -> Flows {
        let mut first = vec![0usize; view.trace.ranks.len() + 1];
        for loc in &view.locations {
            first[loc.rank as usize + 1] += 1;
        }
        for r in 0..view.trace.ranks.len() {
            first[r + 1] += first[r];
        }
        let loc_of = |at: EventRef| -> Option<usize> {
            let rank = view.trace.rank(at.rank)?;
            let slot = rank
                .threads
                .binary_search_by_key(&at.thread, |t| t.index)
                .ok()?;
            Some(first[at.rank as usize] + slot)
        };
        let n = view.locations.len();
        let mut out: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
        let mut into: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
        for (flow, (from, to)) in (1u64..).zip(pairs) {
            if let Some(l) = loc_of(from) {
                out[l].push((from.index, flow));
            }
            if let Some(l) = loc_of(to) {
                into[l].push((to.index, flow));
            }
        }
        Flows::of_lists(out, into)
    }

    /// Per location (as in `View::locations`), (record, flow id) of the
    /// flows out of and into its calls, each list in flow order.
    pub fn of_lists(out: Vec<Vec<(u32, u64)>>, into: Vec<Vec<(u32, u64)>>) -> Flows {
        let lists = |v: Vec<Vec<(u32, u64)>>| -> Vec<FlowList> {
            v.into_par_iter()
                .map(|mut l| {
                    // Stable: a record's flows stay in flow order.
                    l.sort_by_key(|&(i, _)| i);
                    FlowList {
                        index: l.iter().map(|x| x.0).collect(),
                        flow: l.iter().map(|x| x.1).collect(),
                    }
                })
                .collect()
        };
        Flows {
            out: lists(out),
            into: lists(into),
        }
    }
}

impl<'v> CallSlices<'v, '_> {
    /// The packets of the calls `block` (record indices in time order),
    /// the one before having ended at `last`.
    fn encode(&self, block: &[u32], mut last: u64) -> (Vec<u8>, Summary) {
        let (view, loc) = (self.view, self.loc);
        let mut bytes = Vec::with_capacity(block.len() * 64);
        let mut summary = Summary::default();
        let mut enc = SliceEncoder::default();
        let track = thread_uuid(loc.rank, loc.thread);
        let records = view.records(loc);
        let times = view.times(loc);
        let mut clocks = view.clocks.after_call.thread(loc.rank, loc.thread);
        let lamport = view.clocks.report.mode != "none";
        let ends = view.messages.ends.thread(loc.rank, loc.slot);
        let (mut sends, mut done) = (Cursor::new(&ends.sends), Cursor::new(&ends.done));
        let (mut out, mut into) = (self.flows_out.cursor(), self.flows_in.cursor());
        for &i in block {
            let i = i as usize;
            let at = view.at(loc, i);
            let (a, b) = times.get(i);
            let a = a.max(last);
            let b = b.max(a);
            last = b;
            // A call without payload neither sends, receives nor joins a
            // collective: no flow starts or ends there, and it has no detail.
            let func = records.func(i).expect("a call");
            let has_flows = records.has_payload(i);
            let (flows, terminating) = if has_flows {
                (out.at(i as u32), into.at(i as u32))
            } else {
                (&[][..], &[][..])
            };
            let detail = if has_flows {
                let call = records.call(i).expect("a call");
                let (sends, done) = (sends.at(i as u32), done.at(i as u32));
                view.detail_of(at, &call, sends, done)
            } else {
                CallDetail::default()
            };
            let begin = SliceBegin {
                name_iid: self.iid_of.get(func as usize).copied().flatten(),
                track,
                detail,
                lamport: if lamport { clocks.get(i) } else { None },
                flows,
                terminating,
            };
            summary.bytes += enc.begin(&mut bytes, a - self.t0, &begin) as u64;
            summary.bytes += enc.end(&mut bytes, b - self.t0, track) as u64;
            summary.packets += 2;
            summary.slices += 1;
        }
        (bytes, summary)
    }
}

/// Writes the Perfetto trace of `view` to `w`; `progress` is told the calls
/// done so far.
pub fn write(view: &View, w: &mut dyn Write, progress: &mut dyn FnMut(u64)) -> io::Result<Summary> {
    let names = names_of(view);
    let mut summary = write_header(w, &names)?;
    // Flows: ids per (call, outgoing) and (call, incoming).
    let m = view.messages;
    let messages = m.matched.iter().map(|msg| {
        let (s, r) = (&m.sends[msg.send], &m.recvs[msg.recv]);
        (s.call, r.completion)
    });
    let flows = Flows::new(view, messages.chain(view.collective_flows()));
    let body = Body::new(view, view.span.0, &names, flows);
    for seg in Segment::ALL {
        summary.add(&body.write(seg, w, progress)?);
    }
    summary.message_flows = m.matched.len() as u64;
    summary.collective_flows = view.collective_flows().count() as u64;
    w.flush()?;
    Ok(summary)
}

impl Summary {
    /// Adds what `other` wrote.
    pub fn add(&mut self, other: &Summary) {
        self.packets += other.packets;
        self.slices += other.slices;
        self.in_flight_slices += other.in_flight_slices;
        self.phase_slices += other.phase_slices;
        self.message_flows += other.message_flows;
        self.collective_flows += other.collective_flows;
        self.bytes += other.bytes;
    }
}

/// The functions called on `view`'s ranks, each once, in the order of
/// first use: rank by rank, each rank's in its header's order. Their
/// interned ids are their places, from 1.
pub fn names_of(view: &View) -> Vec<String> {
    let mut seen: HashMap<&str, ()> = HashMap::default();
    let mut names = Vec::new();
    for r in &view.trace.ranks {
        let used = used_functions(r);
        for (k, f) in r.header.functions.iter().enumerate() {
            if used[k] && seen.insert(&f.name, ()).is_none() {
                names.push(f.name.clone());
            }
        }
    }
    names
}

/// Which of a rank's functions it called.
fn used_functions(r: &pmtrace_trace::read::Rank) -> Vec<bool> {
    let mut used = vec![false; r.header.functions.len()];
    for th in &r.threads {
        for i in 0..th.records.len() {
            if let Some(func) = th.records.func(i) {
                used[func as usize] = true;
            }
        }
    }
    used
}

/// The first packet: the interned names (`names`: the functions, see
/// [`names_of`]), categories and annotation names.
pub fn write_header(w: &mut dyn Write, names: &[String]) -> io::Result<Summary> {
    let mut out = Out {
        w,
        buf: Vec::with_capacity(256),
        summary: Summary::default(),
    };
    let interned = |iid: u64, name: &str| Interned {
        iid: Some(iid),
        name: Some(name.to_owned()),
    };
    out.packet(&TracePacket {
        trusted_packet_sequence_id: Some(SEQ),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        interned_data: Some(InternedData {
            event_categories: vec![
                interned(CAT_MPI, "mpi"),
                interned(CAT_IN_FLIGHT, "in_flight"),
                interned(CAT_PHASE, "phase"),
            ],
            event_names: (1u64..).zip(names).map(|(i, n)| interned(i, n)).collect(),
            debug_annotation_names: vec![
                interned(ANN_PEER, "peer"),
                interned(ANN_TAG, "tag"),
                interned(ANN_BYTES, "bytes"),
                interned(ANN_LAMPORT, "lamport"),
            ],
        }),
        ..TracePacket::default()
    })?;
    Ok(out.summary)
}

/// The parts of a trace after its header, in the order they are written;
/// each part is its ranks' (or locations') in order, so the parts of
/// blocks of ranks, each part joined in block order, are the whole
/// trace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    ProcessTracks,
    ThreadTracks,
    Calls,
    InFlight,
    Phases,
}

impl Segment {
    pub const ALL: [Segment; 5] = [
        Segment::ProcessTracks,
        Segment::ThreadTracks,
        Segment::Calls,
        Segment::InFlight,
        Segment::Phases,
    ];
}

/// What writing the segments of a view needs.
pub struct Body<'v, 'a> {
    view: &'v View<'a>,
    /// The time every packet's timestamp is taken from.
    t0: u64,
    name_iid: HashMap<String, u64>,
    /// Per rank of the view (by rank number) and function index: the
    /// name's iid.
    iid_of: Vec<Vec<Option<u64>>>,
    flows: Flows,
}

impl<'v, 'a> Body<'v, 'a> {
    /// `names`: the whole trace's ([`names_of`]); `t0`: its start.
    pub fn new(view: &'v View<'a>, t0: u64, names: &[String], flows: Flows) -> Body<'v, 'a> {
        let name_iid: HashMap<String, u64> =
            (1u64..).zip(names).map(|(i, n)| (n.clone(), i)).collect();
        let mut iid_of: Vec<Vec<Option<u64>>> = Vec::new();
        for r in &view.trace.ranks {
            let used = used_functions(r);
            let iids = (r.header.functions.iter().enumerate())
                .map(|(k, f)| name_iid.get(&f.name).copied().filter(|_| used[k]))
                .collect();
            if iid_of.len() <= r.rank as usize {
                iid_of.resize(r.rank as usize + 1, Vec::new());
            }
            iid_of[r.rank as usize] = iids;
        }
        Body {
            view,
            t0,
            name_iid,
            iid_of,
            flows,
        }
    }

    /// Writes one segment to `w`.
    pub fn write(
        &self,
        seg: Segment,
        w: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> io::Result<Summary> {
        let mut out = Out {
            w,
            buf: Vec::with_capacity(256),
            summary: Summary::default(),
        };
        let view = self.view;
        match seg {
            Segment::ProcessTracks => {
                for r in &view.trace.ranks {
                    out.track(TrackDescriptor {
                        uuid: Some(process_uuid(r.rank)),
                        name: Some(format!("rank {}", r.rank)),
                        process: Some(ProcessDescriptor {
                            pid: Some(r.rank as i32 + 1),
                            process_name: Some(format!("rank {} ({})", r.rank, r.header.hostname)),
                        }),
                        ..TrackDescriptor::default()
                    })?;
                }
            }
            Segment::ThreadTracks => {
                for loc in &view.locations {
                    out.track(TrackDescriptor {
                        uuid: Some(thread_uuid(loc.rank, loc.thread)),
                        name: Some(format!("rank {} thread {}", loc.rank, loc.thread)),
                        thread: Some(ThreadDescriptor {
                            pid: Some(loc.rank as i32 + 1),
                            tid: Some(((loc.rank as i32 + 1) << 10) + loc.thread as i32),
                            thread_name: Some(if loc.thread == 0 {
                                format!("rank {}", loc.rank)
                            } else {
                                format!("rank {} thread {}", loc.rank, loc.thread)
                            }),
                        }),
                        parent_uuid: Some(process_uuid(loc.rank)),
                        process: None,
                    })?;
                }
            }
            Segment::Calls => self.calls(&mut out, progress)?,
            Segment::InFlight => self.in_flight(&mut out)?,
            Segment::Phases => self.phases(&mut out)?,
        }
        Ok(out.summary)
    }

    fn calls(&self, out: &mut Out, progress: &mut dyn FnMut(u64)) -> io::Result<()> {
        // Calls: each location's in blocks, encoded side by side on one
        // thread while this one writes what is done, in order (the bytes are
        // those of one pass).
        let mut done = 0u64;
        let (iid_of, flows) = (&self.iid_of, &self.flows);
        let (view, t0) = (self.view, self.t0);
        std::thread::scope(|scope| -> io::Result<()> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(Vec<u8>, Summary, usize)>>(1);
            scope.spawn(move || {
                for (l, &loc) in view.locations.iter().enumerate() {
                    let order = view.order(loc);
                    let blocks: Vec<&[u32]> = order.chunks(CALLS_PER_BLOCK).collect();
                    // A slice starts no earlier than the previous one ended:
                    // the end of everything before each block.
                    let times = view.times(loc);
                    let ends: Vec<u64> = blocks
                        .par_iter()
                        .map(|block| {
                            block
                                .iter()
                                .map(|&i| {
                                    let (a, b) = times.get(i as usize);
                                    a.max(b)
                                })
                                .max()
                                .unwrap_or(0)
                        })
                        .collect();
                    let lasts: Vec<u64> = ends
                        .iter()
                        .scan(0u64, |last, &end| {
                            let before = *last;
                            *last = before.max(end);
                            Some(before)
                        })
                        .collect();
                    let calls = CallSlices {
                        view,
                        loc,
                        t0,
                        iid_of: &iid_of[loc.rank as usize],
                        flows_out: &flows.out[l],
                        flows_in: &flows.into[l],
                    };
                    for group in blocks
                        .iter()
                        .zip(&lasts)
                        .collect::<Vec<_>>()
                        .chunks(BLOCKS_AT_ONCE)
                    {
                        let encoded: Vec<(Vec<u8>, Summary, usize)> = group
                            .par_iter()
                            .map(|&(block, &last)| {
                                let (bytes, summary) = calls.encode(block, last);
                                (bytes, summary, block.len())
                            })
                            .collect();
                        // The writer stopped (it failed): stop too.
                        if tx.send(encoded).is_err() {
                            return;
                        }
                    }
                }
            });
            for encoded in rx {
                for (bytes, summary, calls) in encoded {
                    out.w.write_all(&bytes)?;
                    out.summary.packets += summary.packets;
                    out.summary.bytes += summary.bytes;
                    out.summary.slices += summary.slices;
                    done += calls as u64;
                }
                progress(done);
            }
            Ok(())
        })?;
        progress(done);
        Ok(())
    }

    fn in_flight(&self, out: &mut Out) -> io::Result<()> {
        let (view, t0, name_iid) = (self.view, self.t0, &self.name_iid);
        // Nonblocking operations in flight, per rank, on as few async tracks as
        // keep each track's slices apart: the tracks chosen in time order,
        // then the slices encoded in blocks side by side and written in
        // order (the bytes are those of one pass).
        for r in &view.trace.ranks {
            let mut ops: Vec<(u64, u64, &str, CallDetail)> = view
                .in_flight(r.rank)
                .into_par_iter()
                .filter_map(|f| {
                    let Some(pmtrace_trace::Record::Call(c)) = view.trace.record(f.start) else {
                        return None;
                    };
                    let (a, b) = (view.time(f.start, false), view.time(f.end, true));
                    Some((a, b.max(a), view.function_name(r.rank, &c), f.detail))
                })
                .collect();
            ops.sort_unstable_by_key(|o| (o.0, o.1));
            // Each slice's track, and whether the track starts there.
            let mut lanes: Vec<u64> = Vec::new(); // end of each async track's last slice
            let tracks: Vec<(u32, bool)> = ops
                .iter()
                .map(|&(a, b, ..)| {
                    let (k, new) = match lanes.iter().position(|&end| end <= a) {
                        Some(k) => (k, false),
                        None => {
                            lanes.push(0);
                            (lanes.len() - 1, true)
                        }
                    };
                    lanes[k] = b;
                    (k as u32, new)
                })
                .collect();
            let encode = |range: Range<usize>| -> (Vec<u8>, Summary) {
                let mut bytes = Vec::with_capacity(range.len() * 48);
                let mut o = Out {
                    w: &mut bytes,
                    buf: Vec::new(),
                    summary: Summary::default(),
                };
                for ((a, b, name, d), &(k, new)) in ops[range.clone()].iter().zip(&tracks[range]) {
                    let track = process_uuid(r.rank) + ASYNC_UUID_BASE + u64::from(k);
                    if new {
                        o.track(TrackDescriptor {
                            uuid: Some(track),
                            name: Some(format!("rank {} in flight {}", r.rank, k + 1)),
                            parent_uuid: Some(process_uuid(r.rank)),
                            ..TrackDescriptor::default()
                        })
                        .expect("a Vec takes every write");
                    }
                    let begin = TrackEvent {
                        category_iids: vec![CAT_IN_FLIGHT],
                        debug_annotations: annotations(*d, None),
                        r#type: Some(TYPE_SLICE_BEGIN),
                        name_iid: name_iid.get(*name).copied(),
                        track_uuid: Some(track),
                        ..TrackEvent::default()
                    };
                    let end = TrackEvent {
                        r#type: Some(TYPE_SLICE_END),
                        track_uuid: Some(track),
                        ..TrackEvent::default()
                    };
                    o.event(a - t0, begin).expect("a Vec takes every write");
                    o.event(b - t0, end).expect("a Vec takes every write");
                    o.summary.in_flight_slices += 1;
                }
                let summary = o.summary;
                (bytes, summary)
            };
            let blocks: Vec<Range<usize>> = (0..ops.len())
                .step_by(CALLS_PER_BLOCK)
                .map(|a| a..(a + CALLS_PER_BLOCK).min(ops.len()))
                .collect();
            for group in blocks.chunks(BLOCKS_AT_ONCE) {
                let encoded: Vec<(Vec<u8>, Summary)> =
                    group.par_iter().map(|b| encode(b.clone())).collect();
                for (bytes, summary) in encoded {
                    out.w.write_all(&bytes)?;
                    out.summary.add(&summary);
                }
            }
        }
        Ok(())
    }

    fn phases(&self, out: &mut Out) -> io::Result<()> {
        let (view, t0) = (self.view, self.t0);
        // User phases, each location's on a track of its own (nested slices).
        let phases = view.phases();
        let mut k = 0;
        while k < phases.len() {
            let (rank, thread) = (phases[k].rank, phases[k].thread);
            let n = phases[k..]
                .iter()
                .take_while(|p| p.rank == rank && p.thread == thread)
                .count();
            let track = process_uuid(rank) + PHASE_UUID_BASE + u64::from(thread);
            out.track(TrackDescriptor {
                uuid: Some(track),
                name: Some(format!("rank {rank} thread {thread} phases")),
                parent_uuid: Some(process_uuid(rank)),
                ..TrackDescriptor::default()
            })?;
            // Begins and ends in time order: an end before a begin at a tie,
            // outer phases begun first and ended last.
            let mut ev: Vec<(u64, bool, i64, usize)> = Vec::with_capacity(2 * n);
            for (i, p) in phases[k..k + n].iter().enumerate() {
                ev.push((p.from_ns, true, i64::from(p.depth), i));
                ev.push((p.to_ns, false, -i64::from(p.depth), i));
            }
            ev.sort_unstable_by_key(|&(t, begin, d, i)| (t, begin, d, i));
            for (t, begin, _, i) in ev {
                let p = &phases[k + i];
                out.event(
                    t.saturating_sub(t0),
                    TrackEvent {
                        category_iids: if begin { vec![CAT_PHASE] } else { Vec::new() },
                        r#type: Some(if begin {
                            TYPE_SLICE_BEGIN
                        } else {
                            TYPE_SLICE_END
                        }),
                        name: begin.then(|| p.name.clone()),
                        track_uuid: Some(track),
                        ..TrackEvent::default()
                    },
                )?;
            }
            out.summary.phase_slices += n as u64;
            k += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Out::event` writes for the same slice, through prost.
    fn by_prost(t: u64, b: Option<&SliceBegin>, track: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut out = Out {
            w: &mut bytes,
            buf: Vec::new(),
            summary: Summary::default(),
        };
        let e = match b {
            Some(b) => TrackEvent {
                category_iids: vec![CAT_MPI],
                debug_annotations: annotations(b.detail, b.lamport),
                r#type: Some(TYPE_SLICE_BEGIN),
                name_iid: b.name_iid,
                track_uuid: Some(track),
                flow_ids: b.flows.to_vec(),
                terminating_flow_ids: b.terminating.to_vec(),
                name: None,
            },
            None => TrackEvent {
                r#type: Some(TYPE_SLICE_END),
                track_uuid: Some(track),
                ..TrackEvent::default()
            },
        };
        out.event(t, e).unwrap();
        bytes
    }

    #[test]
    fn slice_packets_are_what_prost_encodes() {
        let mut enc = SliceEncoder::default();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for k in 0..5000 {
            // Values of every varint length, and the edge cases.
            let mut v = |bits: u64| next() >> (next() % bits.max(1));
            let flows: Vec<u64> = (0..k % 3).map(|_| v(64)).collect();
            let terminating: Vec<u64> = (0..(k / 3) % 3).map(|_| v(64)).collect();
            let b = SliceBegin {
                name_iid: (k % 5 != 0).then(|| v(64)),
                track: v(64),
                detail: CallDetail {
                    peer: (k % 2 == 0).then(|| v(64) as u32),
                    tag: (k % 3 == 0).then(|| [-1, 0, i32::MIN, i32::MAX, v(64) as i32][k % 5]),
                    bytes: if k % 4 == 0 { 0 } else { v(64) },
                    comm: None,
                },
                lamport: (k % 7 != 0).then(|| v(64)),
                flows: &flows,
                terminating: &terminating,
            };
            let t = [0, 1, 127, 128, u64::MAX, v(64)][k % 6];
            let mut mine = Vec::new();
            let n = enc.begin(&mut mine, t, &b);
            assert_eq!(n, mine.len());
            assert_eq!(mine, by_prost(t, Some(&b), b.track), "begin {k}");
            let mut mine = Vec::new();
            enc.end(&mut mine, t, b.track);
            assert_eq!(mine, by_prost(t, None, b.track), "end {k}");
        }
    }
}
