//! Perfetto's native trace format: a `Trace` protobuf of `TracePacket`s
//! carrying TrackEvents (what the Perfetto UI opens fastest, without the
//! JSON importer's size ceiling).
//!
//! ```text
//!  Trace { repeated TracePacket packet = 1 }   streamed: tag 0x0A, length, packet
//!
//!  process track  "rank N"       uuid 1 + rank·2^20           ProcessDescriptor pid N+1
//!   ├─ thread track "rank N thread T"   uuid + 1 + T          slices: one per MPI call
//!   └─ async tracks "rank N in flight k" uuid + 2^19 + k      slices: one per nonblocking
//!                                                             operation, start to completion
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

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use prost::Message;

use super::view::{CallDetail, View};
use pmtrace_trace::read::EventRef;

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
const ANN_PEER: u64 = 1;
const ANN_TAG: u64 = 2;
const ANN_BYTES: u64 = 3;
const ANN_LAMPORT: u64 = 4;
const RANK_UUID_STRIDE: u64 = 1 << 20;
const ASYNC_UUID_BASE: u64 = 1 << 19;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub packets: u64,
    pub slices: u64,
    pub in_flight_slices: u64,
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

/// Writes the Perfetto trace of `view` to `w`; `progress` is told the calls
/// done so far.
pub fn write(view: &View, w: &mut dyn Write, progress: &mut dyn FnMut(u64)) -> io::Result<Summary> {
    let mut out = Out {
        w,
        buf: Vec::with_capacity(256),
        summary: Summary::default(),
    };
    let t0 = view.span.0;
    // Interned names: the functions that were called.
    let mut name_iid: HashMap<&str, u64> = HashMap::default();
    let mut names = Vec::new();
    // Per rank (by rank number) and function index: the name's iid.
    let mut iid_of: Vec<Vec<Option<u64>>> = Vec::new();
    for r in &view.trace.ranks {
        let mut used = vec![false; r.header.functions.len()];
        for (_, c) in r.calls() {
            used[c.func as usize] = true;
        }
        let mut iids = vec![None; used.len()];
        for (k, f) in r
            .header
            .functions
            .iter()
            .enumerate()
            .filter(|&(k, _)| used[k])
        {
            let next = name_iid.len() as u64 + 1;
            let n = *name_iid.entry(&f.name).or_insert_with(|| {
                names.push(Interned {
                    iid: Some(next),
                    name: Some(f.name.clone()),
                });
                next
            });
            iids[k] = Some(n);
        }
        if iid_of.len() <= r.rank as usize {
            iid_of.resize(r.rank as usize + 1, Vec::new());
        }
        iid_of[r.rank as usize] = iids;
    }
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
            ],
            event_names: names,
            debug_annotation_names: vec![
                interned(ANN_PEER, "peer"),
                interned(ANN_TAG, "tag"),
                interned(ANN_BYTES, "bytes"),
                interned(ANN_LAMPORT, "lamport"),
            ],
        }),
        ..TracePacket::default()
    })?;

    // Flows: ids per (call, outgoing) and (call, incoming).
    let m = view.messages;
    let mut flows_out: HashMap<EventRef, Vec<u64>> = HashMap::default();
    let mut flows_in: HashMap<EventRef, Vec<u64>> = HashMap::default();
    let mut next_flow = 1u64;
    for msg in &m.matched {
        let (s, r) = (&m.sends[msg.send], &m.recvs[msg.recv]);
        flows_out.entry(s.call).or_default().push(next_flow);
        flows_in.entry(r.completion).or_default().push(next_flow);
        next_flow += 1;
        out.summary.message_flows += 1;
    }
    for (enter, exit) in view.collective_flows() {
        flows_out.entry(enter).or_default().push(next_flow);
        flows_in.entry(exit).or_default().push(next_flow);
        next_flow += 1;
        out.summary.collective_flows += 1;
    }

    // Tracks.
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

    // Calls.
    let mut done = 0u64;
    for &loc in &view.locations {
        let rank = loc.rank;
        let track = thread_uuid(loc.rank, loc.thread);
        let mut last = 0u64;
        for (i, call) in view.calls_in_order(loc) {
            let at = view.at(loc, i);
            let (a, b) = (view.time(at, false), view.time(at, true));
            let a = a.max(last);
            let b = b.max(a);
            last = b;
            let name_iid = iid_of[rank as usize]
                .get(call.func as usize)
                .copied()
                .flatten();
            // A call without payload neither sends, receives nor joins a
            // collective: no flow starts or ends there.
            let has_flows = call.payload != pmtrace_trace::Payload::None;
            out.event(
                a - t0,
                TrackEvent {
                    category_iids: vec![CAT_MPI],
                    debug_annotations: annotations(view.detail(at, &call), view.lamport(at)),
                    r#type: Some(TYPE_SLICE_BEGIN),
                    name_iid,
                    track_uuid: Some(track),
                    flow_ids: has_flows
                        .then(|| flows_out.remove(&at))
                        .flatten()
                        .unwrap_or_default(),
                    terminating_flow_ids: has_flows
                        .then(|| flows_in.remove(&at))
                        .flatten()
                        .unwrap_or_default(),
                },
            )?;
            out.event(
                b - t0,
                TrackEvent {
                    r#type: Some(TYPE_SLICE_END),
                    track_uuid: Some(track),
                    ..TrackEvent::default()
                },
            )?;
            out.summary.slices += 1;
            done += 1;
            if done.is_multiple_of(65536) {
                progress(done);
            }
        }
    }

    // Nonblocking operations in flight, per rank, on as few async tracks as
    // keep each track's slices apart.
    for r in &view.trace.ranks {
        let mut ops: Vec<(u64, u64, &str, CallDetail)> = view
            .in_flight(r.rank)
            .into_iter()
            .filter_map(|f| {
                let Some(pmtrace_trace::Record::Call(c)) = view.trace.record(f.start) else {
                    return None;
                };
                let (a, b) = (view.time(f.start, false), view.time(f.end, true));
                Some((a, b.max(a), view.function_name(r.rank, &c), f.detail))
            })
            .collect();
        ops.sort_unstable_by_key(|o| (o.0, o.1));
        let mut lanes: Vec<u64> = Vec::new(); // end of each async track's last slice
        for (a, b, name, d) in ops {
            let k = match lanes.iter().position(|&end| end <= a) {
                Some(k) => k,
                None => {
                    lanes.push(0);
                    let k = lanes.len() - 1;
                    out.track(TrackDescriptor {
                        uuid: Some(process_uuid(r.rank) + ASYNC_UUID_BASE + k as u64),
                        name: Some(format!("rank {} in flight {}", r.rank, k + 1)),
                        parent_uuid: Some(process_uuid(r.rank)),
                        ..TrackDescriptor::default()
                    })?;
                    k
                }
            };
            lanes[k] = b;
            let track = process_uuid(r.rank) + ASYNC_UUID_BASE + k as u64;
            out.event(
                a - t0,
                TrackEvent {
                    category_iids: vec![CAT_IN_FLIGHT],
                    debug_annotations: annotations(d, None),
                    r#type: Some(TYPE_SLICE_BEGIN),
                    name_iid: name_iid.get(name).copied(),
                    track_uuid: Some(track),
                    ..TrackEvent::default()
                },
            )?;
            out.event(
                b - t0,
                TrackEvent {
                    r#type: Some(TYPE_SLICE_END),
                    track_uuid: Some(track),
                    ..TrackEvent::default()
                },
            )?;
            out.summary.in_flight_slices += 1;
        }
    }
    progress(done);
    out.w.flush()?;
    Ok(out.summary)
}
