//! Exports over blocks.
//!
//! **OTF2** has one event file per location, so every block writes its
//! own locations' files, in parallel:
//!
//! 1. The Lamport clocks after each call come from the clock replay over
//!    blocks ([`crate::clocks::replay`]); the time span is the minimum
//!    and maximum over blocks.
//! 2. Regions and strings get their ids in the order the serial writer
//!    meets them, location by location: each block lists its own in that
//!    order ([`otf2::Tables::of`]); process 0 joins the lists in block
//!    order and every block gets the whole tables.
//! 3. Each block writes its locations' events with those ids into an
//!    archive of its own beside the output (`.pmtrace-part-<p>`).
//! 4. Process 0 writes the anchor, every location's clock offsets and the
//!    global definitions (ranks, hosts and locations gathered, with the
//!    events each location has).
//! 5. Each block moves its event files into the archive.
//!
//! The event files and definitions are those of `pmtrace export --format
//! otf2`.

use std::path::{Path, PathBuf};

use pmtrace_export::otf2::{self, Globals, Offset, Summary, Tables};
use pmtrace_export::view::{Location, View};
use pmtrace_export::{parquet, perfetto};
use pmtrace_matching::clocks::{ClockReport, Clocks, PartPlan, PartVectors};
use pmtrace_matching::collective::MemberCalls;
use pmtrace_report::races;
use pmtrace_report::times::Times;
use pmtrace_sync::Synced;
use pmtrace_trace::read::EventRef;

use crate::block::Block;
use crate::fabric::{agree, Fabric};
use crate::messages::BlockMessages;
use crate::wire::{In, Out};

/// Writes the OTF2 archive of the trace into `dir`; the summary on every
/// process.
pub fn otf2<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    synced: Option<&Synced>,
    dir: &Path,
) -> Result<Summary, String> {
    let view = block_view(f, b, bm, synced);
    let tables = tables(f, &view);
    // Process 0 clears the old archive before any part moves in.
    let cleared = match f.index() {
        0 => otf2::clear(dir).map_err(|e| e.to_string()),
        _ => Ok(()),
    };
    agree(f, cleared)?;
    let part = dir.join(format!(".pmtrace-part-{}", f.index()));
    let written = otf2::write_events(&view, &part, &tables).map_err(|e| e.to_string());
    let (events, summary) = agree(f, written)?;
    let (globals, offsets, summary) = gather(f, &view, &events, &summary);
    let defs = match f.index() {
        0 => otf2::write_defs(&view, dir, &tables, &offsets, &globals).map_err(|e| e.to_string()),
        _ => Ok(()),
    };
    agree(f, defs)?;
    let moved = move_events(&part, &dir.join(otf2::ARCHIVE_NAME));
    agree(f, moved)?;
    Ok(Summary {
        synced: synced.is_some(),
        ..summary
    })
}

/// The whole trace's tables, on every process.
fn tables<F: Fabric + ?Sized>(f: &F, view: &View) -> Tables {
    let mine = Tables::of(view);
    let mut o = Out::default();
    o.u64(mine.regions.len() as u64);
    for (name, role) in &mine.regions {
        o.str(name).u32(u32::from(*role));
    }
    o.u64(mine.strings.len() as u64);
    for s in &mine.strings {
        o.str(s);
    }
    let mut all = Tables::default();
    for bytes in f.all_gather(o.0) {
        let mut i = In::new(&bytes);
        let regions = (0..i.u64()).map(|_| (i.str(), i.u32() as _)).collect();
        let strings = (0..i.u64()).map(|_| i.str()).collect();
        all.extend(&Tables { regions, strings });
    }
    all
}

/// The ranks, locations with their events, and clock offsets of every
/// block, on process 0 (empty elsewhere); the summaries added up, on
/// every process.
fn gather<F: Fabric + ?Sized>(
    f: &F,
    view: &View,
    events: &[u64],
    summary: &Summary,
) -> (Globals, Vec<(u64, Vec<Offset>)>, Summary) {
    let mut o = Out::default();
    o.u64(view.trace.ranks.len() as u64);
    for r in &view.trace.ranks {
        o.u32(r.rank).str(&r.header.hostname);
    }
    o.u64(view.locations.len() as u64);
    for ((loc, n), (_, offs)) in view.locations.iter().zip(events).zip(otf2::offsets(view)) {
        o.u32(loc.rank).u32(loc.thread).u64(loc.slot as u64).u64(*n);
        o.u64(offs.len() as u64);
        for x in offs {
            o.u64(x.time).u64(x.offset as u64).f64(x.stddev);
        }
    }
    let mut g = Globals {
        ranks: Vec::new(),
        locations: Vec::new(),
        events: Vec::new(),
        span: view.span,
    };
    let mut offsets = Vec::new();
    for bytes in f.gather(o.0) {
        let mut i = In::new(&bytes);
        for _ in 0..i.u64() {
            g.ranks.push((i.u32(), i.str()));
        }
        for _ in 0..i.u64() {
            let loc = Location {
                rank: i.u32(),
                thread: i.u32(),
                slot: i.u64() as usize,
            };
            g.locations.push(loc);
            g.events.push(i.u64());
            let offs = (0..i.u64())
                .map(|_| Offset {
                    time: i.u64(),
                    offset: i.u64() as i64,
                    stddev: i.f64(),
                })
                .collect();
            offsets.push((otf2::location_id(loc), offs));
        }
    }
    let mut v = [
        view.locations.len() as u64,
        summary.events,
        summary.enters,
        summary.sends,
        summary.receives,
        summary.collectives,
        summary.phases,
        summary.unresolved,
    ];
    f.sum(&mut v);
    let summary = Summary {
        locations: v[0],
        events: v[1],
        enters: v[2],
        sends: v[3],
        receives: v[4],
        collectives: v[5],
        phases: v[6],
        unresolved: v[7],
        synced: false,
    };
    (g, offsets, summary)
}

/// Moves the event files of a part into the archive's directory of
/// location files, and removes the part.
fn move_events(part: &Path, into: &Path) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::create_dir_all(into).map_err(|e| io(into, e))?;
    let from: PathBuf = part.join(otf2::ARCHIVE_NAME);
    if from.is_dir() {
        for e in std::fs::read_dir(&from).map_err(|e| io(&from, e))? {
            let e = e.map_err(|e| io(&from, e))?;
            if e.file_name().to_string_lossy().ends_with(".evt") {
                let to = into.join(e.file_name());
                std::fs::rename(e.path(), &to).map_err(|e| io(&to, e))?;
            }
        }
    }
    std::fs::remove_dir_all(part).map_err(|e| io(part, e))
}

/// The view of a block for the viewer exports: clocks from the replay
/// over blocks, the whole trace's span, the block's collective members.
fn block_view<'a, F: Fabric + ?Sized>(
    f: &F,
    b: &'a Block,
    bm: &'a BlockMessages,
    synced: Option<&'a Synced>,
) -> View<'a> {
    let (mode, _) = crate::clocks::first_header(f, b);
    let after_call = if mode == "none" {
        Default::default()
    } else {
        let plan = PartPlan::new(&b.trace, &bm.m);
        crate::clocks::replay(f, b, bm, &plan, true, PartVectors::None, None).after_call()
    };
    let clocks = Clocks {
        report: ClockReport {
            mode,
            ..ClockReport::default()
        },
        after_call,
        recv_lc: Default::default(),
    };
    let mut view = View::of_block(&b.trace, &bm.m, synced, clocks);
    view.own_recvs = bm.own_recvs;
    let (lo, hi) = view.raw_span();
    let mut span = [u64::MAX - lo, hi];
    f.max(&mut span);
    view.span = View::clamp_span((u64::MAX - span[0], span[1]));
    view
}

/// Writes the Perfetto trace of the whole trace to `w`, given at process 0
/// only; the summary is whole there.
///
/// Every block writes each segment of its ranks ([`perfetto::Segment`])
/// to a file of its own in `parts` (a directory every process sees);
/// process 0 writes the header, then each segment of every block in
/// block order, so no process holds more than its block's output. Flow
/// ids are the serial ones: messages in the order of their sends (each
/// numbered at its sender's block and sent to its receiver's), then each
/// collective's logical messages, instance by instance in the serial
/// order, numbered at the instance's owner.
pub fn perfetto<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    synced: Option<&Synced>,
    parts: &Path,
    w: Option<&mut dyn std::io::Write>,
) -> Result<perfetto::Summary, String> {
    let is = crate::insts::gather(f, &b.trace);
    let view = block_view(f, b, bm, synced)
        .with_collectives(pmtrace_matching::collective::instances(&b.trace));
    let names = perfetto_names(f, &view);
    let (flows, message_flows, collective_flows) = flows(f, b, bm, &is, &view);
    let body = perfetto::Body::new(&view, view.span.0, &names, flows);
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let part = |p: usize, k: usize| parts.join(format!(".pmtrace-perfetto-{p}-{k}"));
    let mut mine = perfetto::Summary::default();
    let written = (|| -> Result<(), String> {
        for (k, seg) in perfetto::Segment::ALL.into_iter().enumerate() {
            let path = part(f.index(), k);
            let file = std::fs::File::create(&path).map_err(|e| io(&path, e))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            mine.add(
                &body
                    .write(seg, &mut out, &mut |_| {})
                    .map_err(|e| io(&path, e))?,
            );
            std::io::Write::flush(&mut out).map_err(|e| io(&path, e))?;
        }
        Ok(())
    })();
    agree(f, written)?;
    let mut v = [
        mine.packets,
        mine.slices,
        mine.in_flight_slices,
        mine.phase_slices,
        mine.bytes,
    ];
    f.sum(&mut v);
    let mut summary = perfetto::Summary {
        packets: v[0],
        slices: v[1],
        in_flight_slices: v[2],
        phase_slices: v[3],
        message_flows,
        collective_flows,
        bytes: v[4],
    };
    let joined = match w {
        Some(w) => (|| -> Result<(), String> {
            let head = perfetto::write_header(w, &names).map_err(|e| e.to_string())?;
            summary.add(&head);
            for k in 0..perfetto::Segment::ALL.len() {
                for p in 0..f.size() {
                    let path = part(p, k);
                    let mut file = std::fs::File::open(&path).map_err(|e| io(&path, e))?;
                    std::io::copy(&mut file, w).map_err(|e| io(&path, e))?;
                }
            }
            w.flush().map_err(|e| e.to_string())
        })(),
        None => Ok(()),
    };
    agree(f, joined)?;
    for k in 0..perfetto::Segment::ALL.len() {
        let _ = std::fs::remove_file(part(f.index(), k));
    }
    Ok(summary)
}

/// The whole trace's interned names ([`perfetto::names_of`]), on every
/// process: each block's in block order, each name once.
fn perfetto_names<F: Fabric + ?Sized>(f: &F, view: &View) -> Vec<String> {
    let mut o = Out::default();
    for n in perfetto::names_of(view) {
        o.str(&n);
    }
    let mut seen = std::collections::HashSet::new();
    let mut names = Vec::new();
    for bytes in f.all_gather(o.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let n = i.str();
            if seen.insert(n.clone()) {
                names.push(n);
            }
        }
    }
    names
}

/// The flows out of and into the block's calls, with the serial ids; and
/// how many flows of messages and of collectives the trace has.
fn flows<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    is: &crate::insts::Insts,
    view: &View,
) -> (perfetto::Flows, u64, u64) {
    let m = &bm.m;
    let procs = f.size();
    let n = view.locations.len();
    let loc_of: std::collections::HashMap<(u32, u32), usize> = (view.locations.iter())
        .enumerate()
        .map(|(k, l)| ((l.rank, l.thread), k))
        .collect();
    let mut outs: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let mut ins: Vec<Vec<(u32, u64)>> = vec![Vec::new(); n];
    let put = |lists: &mut Vec<Vec<(u32, u64)>>, at: EventRef, id: u64| {
        if let Some(&k) = loc_of.get(&(at.rank, at.thread)) {
            lists[k].push((at.index, id));
        }
    };
    // Messages, numbered in the order of their sends (`matched` is).
    let own: Vec<usize> = (0..m.matched.len())
        .filter(|&k| m.matched[k].send < bm.own_sends)
        .collect();
    let mut counts = vec![0u64; procs];
    counts[f.index()] = own.len() as u64;
    f.sum(&mut counts);
    let messages: u64 = counts.iter().sum();
    let base: u64 = counts[..f.index()].iter().sum();
    let mut id_of = vec![0u64; m.matched.len()];
    for (j, &k) in own.iter().enumerate() {
        id_of[k] = 1 + base + j as u64;
    }
    let crossing = bm.crossing(&b.blocks);
    let mut came = Vec::new();
    crossing.to_receivers(
        f,
        |k, o| {
            o.u64(id_of[k]);
        },
        |k, i| came.push((k, i.u64())),
    );
    for (k, id) in came {
        id_of[k] = id;
    }
    for (k, p) in m.matched.iter().enumerate() {
        if p.send < bm.own_sends {
            put(&mut outs, m.sends[p.send].call, id_of[k]);
        }
        if p.recv < bm.own_recvs {
            put(&mut ins, m.recvs[p.recv].completion, id_of[k]);
        }
    }
    // Collectives: each owner numbers its instances' logical messages.
    let mut o = Out::default();
    let flows_of = |inst: &pmtrace_matching::collective::Instance<_>| -> Vec<(EventRef, EventRef)> {
        inst.drawn_messages()
            .filter_map(|(from, to)| {
                let a: &MemberCalls = inst.members[from as usize].as_ref()?;
                let exit = inst.members[to as usize].as_ref()?.exit?;
                Some((a.enter, exit))
            })
            .collect()
    };
    let owned: Vec<Vec<(EventRef, EventRef)>> =
        is.owned.iter().map(|x| flows_of(&x.inst)).collect();
    for (x, fl) in is.owned.iter().zip(&owned) {
        o.u32(x.first.0).u32(x.first.1).u64(fl.len() as u64);
    }
    let mut all: Vec<((u32, u32), u64)> = Vec::new();
    for bytes in f.all_gather(o.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            all.push(((i.u32(), i.u32()), i.u64()));
        }
    }
    all.sort_unstable();
    let collectives: u64 = all.iter().map(|x| x.1).sum();
    let mut start: std::collections::HashMap<(u32, u32), u64> = Default::default();
    let mut next = messages + 1;
    for (first, count) in all {
        start.insert(first, next);
        next += count;
    }
    const OUT: u8 = 0;
    const INTO: u8 = 1;
    let mut send = vec![Out::default(); procs];
    for (x, fl) in is.owned.iter().zip(&owned) {
        let base = start[&x.first];
        for (j, (from, to)) in fl.iter().enumerate() {
            let id = base + j as u64;
            send[b.blocks.owner(from.rank)].u8(OUT).at(*from).u64(id);
            send[b.blocks.owner(to.rank)].u8(INTO).at(*to).u64(id);
        }
    }
    for bytes in f.exchange(send.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (kind, at, id) = (i.u8(), i.at(), i.u64());
            if kind == OUT {
                put(&mut outs, at, id);
            } else {
                put(&mut ins, at, id);
            }
        }
    }
    for l in outs.iter_mut().chain(ins.iter_mut()) {
        l.sort_unstable();
    }
    (perfetto::Flows::of_lists(outs, ins), messages, collectives)
}

/// Writes the Parquet tables of the trace into `dir` as a partitioned
/// dataset, a part per block ([`parquet::Layout::Part`]); the summary is
/// whole on every process.
///
/// A call's id is its serial one: each block's calls start where the
/// blocks before it end. A message is written by its receiver's block;
/// where its send lies in another block, the sender's block sends the
/// send's end there ([`parquet::SendEnd`]).
pub fn parquet<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    synced: Option<&Synced>,
    dir: &Path,
) -> Result<parquet::Summary, String> {
    let view = block_view(f, b, bm, synced);
    let prepared = match f.index() {
        0 => parquet::prepare(dir, parquet::Layout::Part(0)).map_err(|e| e.to_string()),
        _ => Ok(()),
    };
    agree(f, prepared)?;
    let mut counts = vec![0u64; f.size()];
    counts[f.index()] = parquet::CallIds::of(&view, 0).calls();
    f.sum(&mut counts);
    let ids = parquet::CallIds::of(&view, counts[..f.index()].iter().sum());
    let mut remote = rustc_hash::FxHashMap::default();
    bm.crossing(&b.blocks).to_receivers(
        f,
        |k, o| {
            let e = parquet::SendEnd::of(&view, &ids, k);
            o.u64(e.call.map_or(u64::MAX, |c| c))
                .u64(e.ns as u64)
                .u64(e.lamport.map_or(u64::MAX, |c| c));
        },
        |k, i| {
            let (call, ns, lamport) = (i.u64(), i.u64() as i64, i.u64());
            let some = |x: u64| (x != u64::MAX).then_some(x);
            let end = parquet::SendEnd {
                call: some(call),
                ns,
                lamport: some(lamport),
            };
            remote.insert(k, end);
        },
    );
    let pending = parquet::Pending::of(&b.trace);
    let share = parquet::Share {
        own_sends: bm.own_sends,
        own_recvs: bm.own_recvs,
        remote: &remote,
        pending: &pending,
    };
    let layout = parquet::Layout::Part(f.index());
    let written = parquet::write_part(&view, &ids, &share, dir, layout, &mut |_| {})
        .map_err(|e| e.to_string());
    let mine = agree(f, written)?;
    let analysed = analyses(f, b, bm, &view, &ids, synced, dir, layout)?;
    // The communicators every block knows, once each, at process 0.
    let mut o = Out::default();
    for c in b.trace.comms.iter() {
        o.put(&parquet::CommRow::of(c));
    }
    let mut comms: std::collections::BTreeMap<u64, parquet::CommRow> = Default::default();
    for bytes in f.gather(o.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let c: parquet::CommRow = i.get();
            comms.entry(c.id).or_insert(c);
        }
    }
    let comms: Vec<parquet::CommRow> = comms.into_values().collect();
    let written = match f.index() {
        0 => parquet::write_communicators(&comms, dir, parquet::Layout::Part(0))
            .map_err(|e| e.to_string()),
        _ => Ok(0),
    };
    let communicators = agree(f, written)?;
    let mut v = [
        mine.calls,
        mine.messages,
        mine.unmatched,
        mine.ranks,
        mine.phases,
        communicators,
        analysed[0],
        analysed[1],
        analysed[2],
        analysed[3],
    ];
    f.sum(&mut v);
    Ok(parquet::Summary {
        calls: v[0],
        messages: v[1],
        unmatched: v[2],
        ranks: v[3],
        phases: v[4],
        communicators: v[5],
        collectives: Some(v[6]),
        wait_states: Some(v[7]),
        path_segments: Some(v[8]),
        races: Some(v[9]),
        synced: synced.is_some(),
    })
}

/// Writes the block's parts of `collectives` and `wait_states`, and at
/// process 0 the one part of `critical_path`: the rows written here.
#[allow(clippy::too_many_arguments)]
fn analyses<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    bm: &BlockMessages,
    view: &View,
    ids: &parquet::CallIds,
    synced: Option<&Synced>,
    dir: &Path,
    layout: parquet::Layout,
) -> Result<[u64; 4], String> {
    let is = crate::insts::gather(f, &b.trace);
    let members = member_rows(f, b, &is);
    let path = layout.path(dir, "collectives");
    let written = parquet::write_collectives(view, ids, &members, &path);
    let collectives = agree(f, written.map_err(|e| e.to_string()))?;
    let times = Times {
        trace: &b.trace,
        synced,
    };
    let found = crate::waits::find(f, b, bm, &is, &times);
    let cause_ids = ids_elsewhere(f, b, ids, found.iter().map(|w| w.cause));
    let waits: Vec<parquet::WaitState> = found.iter().map(parquet::WaitState::from).collect();
    let cause_id = |e: EventRef| ids.id(e).or_else(|| cause_ids.get(&e).copied().flatten());
    let path = layout.path(dir, "wait_states");
    let written = parquet::write_waits(view, ids, &waits, &cause_id, &path);
    let wait_states = agree(f, written.map_err(|e| e.to_string()))?;
    let window = crate::metrics::window(f, b, &times);
    let path = crate::critical::stretches(f, b, &times, &found, window);
    let written = match path {
        Some(s) => {
            let name =
                |rank: u32, func: u32| s.names.get(&(rank, func)).cloned().unwrap_or_default();
            let out = parquet::Layout::Part(0).path(dir, "critical_path");
            parquet::write_path(&s.path, &name, &out).map_err(|e| e.to_string())
        }
        None => Ok(0),
    };
    let segments = agree(f, written)?;
    // Races, where some rank has a wildcard receive: at process 0.
    let own = match b.trace.ranks.is_empty() {
        true => 0,
        false => races::wildcards_of(&b.trace, &bm.m, bm.own_recvs).len() as u64,
    };
    let vector = crate::clocks::first_header(f, b).0 == "vector";
    let found = match crate::fabric::sum_of(f, own) {
        0 => None,
        _ => crate::races::find(f, b, bm, vector),
    };
    let rows = found.map_or_else(Vec::new, |x| parquet::RaceRow::of(&x.races));
    let race_ids = ids_elsewhere(f, b, ids, rows.iter().map(|r| r.at));
    let race_id = |e: EventRef| ids.id(e).or_else(|| race_ids.get(&e).copied().flatten());
    let written = match f.index() {
        0 => parquet::write_races(
            &rows,
            &race_id,
            &parquet::Layout::Part(0).path(dir, "races"),
        )
        .map_err(|e| e.to_string()),
        _ => Ok(0),
    };
    let races = agree(f, written)?;
    Ok([collectives, wait_states, segments, races])
}

/// The members of collective instances held here, each with its
/// instance's number in the serial order, communicator and root: each
/// owner numbers its instances and tells the members' processes.
fn member_rows<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    is: &crate::insts::Insts,
) -> Vec<parquet::MemberRow> {
    let mut o = Out::default();
    for x in &is.owned {
        o.u32(x.first.0).u32(x.first.1);
    }
    let mut firsts: Vec<(u32, u32)> = Vec::new();
    for bytes in f.all_gather(o.0) {
        let mut i = In::new(&bytes);
        while !i.done() {
            firsts.push((i.u32(), i.u32()));
        }
    }
    firsts.sort_unstable();
    let mut send = vec![Out::default(); f.size()];
    for x in &is.owned {
        let k = firsts.partition_point(|&y| y < x.first) as u64;
        let root = parquet::root_of(&b.trace, x.inst.comm, x.inst.root);
        for &(_, proc, slot) in &x.from {
            let o = &mut send[proc as usize];
            o.u32(slot)
                .u64(k)
                .u64(x.inst.comm)
                .u32(root.unwrap_or(u32::MAX));
        }
    }
    let mut rows = Vec::new();
    for bytes in f.exchange(send.into_iter().map(|o| o.0).collect()) {
        let mut i = In::new(&bytes);
        while !i.done() {
            let (slot, instance, comm, root) = (i.u32(), i.u64(), i.u64(), i.u32());
            let m = &is.members[slot as usize];
            rows.push(parquet::MemberRow {
                instance,
                comm,
                root: (root != u32::MAX).then_some(root),
                member: m.me,
                calls: m.calls,
            });
        }
    }
    rows
}

/// The ids of the calls `at` that other blocks hold, asked of them.
fn ids_elsewhere<F: Fabric + ?Sized>(
    f: &F,
    b: &Block,
    ids: &parquet::CallIds,
    at: impl Iterator<Item = EventRef>,
) -> std::collections::BTreeMap<EventRef, Option<u64>> {
    let me = f.index();
    let mut asked: Vec<Vec<EventRef>> = vec![Vec::new(); f.size()];
    for e in at {
        let owner = b.blocks.owner(e.rank);
        if owner != me {
            asked[owner].push(e);
        }
    }
    for a in &mut asked {
        a.sort_unstable();
        a.dedup();
    }
    let questions = (asked.iter())
        .map(|a| {
            let mut o = Out::default();
            for &e in a {
                o.at(e);
            }
            o.0
        })
        .collect();
    let answers = (f.exchange(questions).iter())
        .map(|bytes| {
            let mut i = In::new(bytes);
            let mut o = Out::default();
            while !i.done() {
                o.u64(ids.id(i.at()).unwrap_or(u64::MAX));
            }
            o.0
        })
        .collect();
    let mut found = std::collections::BTreeMap::new();
    for (a, bytes) in asked.iter().zip(f.exchange(answers)) {
        let mut i = In::new(&bytes);
        for &e in a {
            let id = i.u64();
            found.insert(e, (id != u64::MAX).then_some(id));
        }
    }
    found
}
