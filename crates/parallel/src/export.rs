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

use pmtrace_analysis::clocks::{ClockReport, Clocks, PartPlan, PartVectors};
use pmtrace_analysis::export::otf2::{self, Globals, Offset, Summary, Tables};
use pmtrace_analysis::export::view::{Location, View};
use pmtrace_analysis::sync::Synced;

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
    let (lo, hi) = view.raw_span();
    let mut span = [u64::MAX - lo, hi];
    f.max(&mut span);
    view.span = View::clamp_span((u64::MAX - span[0], span[1]));
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
