//! `pmtrace timeline`: one self-contained HTML file that draws the trace.
//!
//! The viewer (`timeline.html`, plain JS on a canvas, no network) is
//! compiled into the binary; this module fills its one data line with the
//! trace as column arrays, so a million calls load with one `JSON.parse`:
//!
//! ```text
//!  DATA = { title, synced, t0,                       times: ns after t0
//!           funcs: [{name, cat}],                    cat: send recv wait coll probe comm init other
//!           lanes: [{rank, thread, host, label}],    one per location, by rank then thread
//!           calls: [{f, s, e, ss, se, peer, tag, bytes, lc}],   columns, one object per lane;
//!                                                    s/e recorded, ss/se synchronized
//!           msgs:  {sl, sc, rl, rc, bytes, tag},     send lane and call, completing lane and call
//!           stats: {calls, msgs, reversed_raw},
//!           insight: {path: {l, s, e, c},            critical path stretches (c: computing)
//!                     waits: {l, s, e},              the waiting part of calls
//!                     phases: {l, s, e, d, n}, names,  user phases (n: index of names)
//!                     par: {s, w, n, v}} }           parallelism: bins of w ns from s,
//!                                                    v mean ranks computing (of n)
//! ```
//!
//! Every `<` in the JSON is written `\u003c`, so no string can close the
//! script element it sits in.

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use pmtrace_format::Kind;

use super::view::{CallDetail, View};
use pmtrace_trace::read::EventRef;

const TEMPLATE: &str = include_str!("timeline.html");
/// The line of the template the data replaces (alone on its line).
const DATA_LINE: &str = "\n/*PMTRACE_DATA*/\n";

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub lanes: u64,
    pub calls: u64,
    pub messages: u64,
    pub reversed_raw: u64,
    pub bytes: u64,
}

/// The viewer's colour class of a function.
pub fn category(kind: Kind) -> &'static str {
    match kind {
        Kind::Send
        | Kind::Isend
        | Kind::SendInit
        | Kind::PsendInit
        | Kind::Sendrecv
        | Kind::Isendrecv
        | Kind::Start => "send",
        Kind::Recv
        | Kind::Irecv
        | Kind::RecvInit
        | Kind::PrecvInit
        | Kind::Mrecv
        | Kind::Imrecv => "recv",
        Kind::Complete | Kind::Cancel | Kind::RequestFree | Kind::Freed => "wait",
        Kind::Coll | Kind::Icoll | Kind::CollInit => "coll",
        Kind::Probe | Kind::Iprobe | Kind::Mprobe | Kind::Improbe => "probe",
        Kind::CommNew | Kind::CommFree => "comm",
        Kind::Init | Kind::InitThread | Kind::Finalize => "init",
        Kind::Plain | Kind::Abort | Kind::Pcontrol | Kind::Phase => "other",
    }
}

/// A message as the page draws it: (lane, call) at both ends.
struct DrawnMessage {
    from: (u32, u32),
    to: (u32, u32),
    bytes: u64,
    tag: i32,
    reversed: bool,
}

/// A JSON string with `<` escaped.
fn js(s: &str) -> String {
    serde_json::to_string(s)
        .expect("strings serialize")
        .replace('<', "\\u003c")
}

struct Counter<'w> {
    w: &'w mut dyn Write,
    n: u64,
}

impl Write for Counter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.w.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

fn column(w: &mut dyn Write, name: &str, vals: impl Iterator<Item = i64>) -> io::Result<()> {
    write!(w, "\"{name}\":[")?;
    for (i, v) in vals.enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(w, "{v}")?;
    }
    w.write_all(b"]")
}

/// What the page draws beside the calls (from the report, on the view's
/// time base): the critical path, the waiting part of calls, the phases
/// and the parallelism profile.
pub struct Overlay<'a> {
    /// (rank, from, to, computing) on the rank's main thread.
    pub path: &'a [(u32, u64, u64, bool)],
    /// (rank, thread, from, to).
    pub waits: &'a [(u32, u32, u64, u64)],
    pub phases: &'a [pmtrace_trace::phases::PhaseSpan],
    /// (start, ns per bin, mean ranks computing per bin).
    pub parallelism: Option<(u64, f64, &'a [f64])>,
}

/// Writes the timeline page of `view` (raw times beside synchronized ones
/// when `view.synced` is set) to `w`. With `window` (start, end), in the
/// view's times, only the calls that overlap it are drawn, and the
/// messages between two of them. With `reload` (seconds), the page tells
/// the browser to load it again that often (`timeline --follow`).
pub fn write(
    view: &View,
    title: &str,
    window: Option<(u64, u64)>,
    overlay: Option<&Overlay>,
    reload: Option<u64>,
    w: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> io::Result<Summary> {
    let (head, tail) = TEMPLATE
        .split_once(DATA_LINE)
        .expect("the template has its data line");
    let mut out = Counter { w, n: 0 };
    let w = &mut out;
    match reload {
        Some(secs) => {
            let (before, after) = head
                .split_once("<head>\n")
                .expect("the template has its head");
            write!(
                w,
                "{before}<head>\n<meta http-equiv=\"refresh\" content=\"{secs}\">\n{after}"
            )?;
        }
        None => w.write_all(head.as_bytes())?,
    }
    w.write_all(b"\n")?;
    let synced = view.synced.is_some();
    let mut s = Summary::default();
    let funcs = Functions::of(view);
    let lanes = Lanes::of(view, window);
    let mut t0 = view.span.0;
    for (loc, idx) in view.locations.iter().zip(&lanes.calls) {
        let records = view.records(*loc);
        for &i in idx {
            t0 = t0.min(records.stamps(i as usize).0);
        }
    }
    write!(
        w,
        "const DATA = {{\"title\":{},\"synced\":{synced},\"t0\":{t0},\"funcs\":[",
        js(title)
    )?;
    for (i, (name, cat)) in funcs.list.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(w, "{{\"name\":{},\"cat\":\"{cat}\"}}", js(name))?;
    }
    w.write_all(b"],\"lanes\":[")?;
    for (i, loc) in view.locations.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        let host = &view.trace.held(loc.rank).header.hostname;
        let label = if loc.thread == 0 {
            format!("rank {}", loc.rank)
        } else {
            format!("rank {} · thread {}", loc.rank, loc.thread)
        };
        write!(
            w,
            "{{\"rank\":{},\"thread\":{},\"host\":{},\"label\":{}}}",
            loc.rank,
            loc.thread,
            js(host),
            js(&label)
        )?;
    }
    w.write_all(b"],\"calls\":[")?;
    s.calls = write_calls(w, view, &lanes, &funcs, t0, progress)?;
    w.write_all(b"],\"msgs\":{")?;
    (s.messages, s.reversed_raw) = write_messages(w, view, &lanes)?;
    s.lanes = view.locations.len() as u64;
    write!(
        w,
        "}},\"stats\":{{\"calls\":{},\"msgs\":{},\"reversed_raw\":{}}}",
        s.calls, s.messages, s.reversed_raw
    )?;
    if let Some(o) = overlay {
        w.write_all(b",\"insight\":{")?;
        write_insight(w, view, &lanes, o, window, t0)?;
        w.write_all(b"}")?;
    }
    w.write_all(b"};")?;
    w.write_all(b"\n")?;
    w.write_all(tail.as_bytes())?;
    w.flush()?;
    s.bytes = out.n;
    Ok(s)
}

/// The functions of every rank, one entry per name.
struct Functions {
    /// (name, category).
    list: Vec<(String, &'static str)>,
    /// (rank, function id) → index in `list`.
    index: HashMap<(u32, u32), usize>,
}

impl Functions {
    fn of(view: &View) -> Functions {
        let mut list = Vec::new();
        let mut index: HashMap<(u32, u32), usize> = HashMap::default();
        let mut by_name: HashMap<String, usize> = HashMap::default();
        for r in &view.trace.ranks {
            for (id, f) in r.header.functions.iter().enumerate() {
                let k = *by_name.entry(f.name.clone()).or_insert_with(|| {
                    list.push((f.name.clone(), category(r.kinds[id])));
                    list.len() - 1
                });
                index.insert((r.rank, id as u32), k);
            }
        }
        Functions { list, index }
    }
}

/// The drawn calls: a lane per location, and where each call sits in it.
struct Lanes {
    /// Calls per lane in start order (record indices).
    calls: Vec<Vec<u32>>,
    /// Per lane, (record, position in the lane) by record.
    places: Vec<Vec<(u32, u32)>>,
    /// The first lane of each rank, by rank (and one past the last).
    first: Vec<usize>,
}

impl Lanes {
    fn of(view: &View, window: Option<(u64, u64)>) -> Lanes {
        let calls: Vec<Vec<u32>> = (view.locations.iter())
            .map(|&loc| {
                let times = view.times(loc);
                let mut lane: Vec<u32> = (view.order(loc).into_iter())
                    .filter(|&i| {
                        let (a, b) = times.get(i as usize);
                        window.is_none_or(|(from, to)| b >= from && a <= to)
                    })
                    .collect();
                // The filter kept the whole order's room.
                lane.shrink_to_fit();
                lane
            })
            .collect();
        let places = (calls.iter())
            .map(|idx| {
                let mut p: Vec<(u32, u32)> = (0u32..).zip(idx).map(|(k, &i)| (i, k)).collect();
                if !p.is_sorted() {
                    p.sort_unstable();
                }
                p
            })
            .collect();
        let mut first = vec![0usize; view.trace.ranks.len() + 1];
        for loc in &view.locations {
            first[loc.rank as usize + 1] += 1;
        }
        for r in 0..view.trace.ranks.len() {
            first[r + 1] += first[r];
        }
        Lanes {
            calls,
            places,
            first,
        }
    }

    /// The lane of a rank's thread.
    fn lane(&self, view: &View, rank: u32, thread: u32) -> Option<usize> {
        let r = view.trace.rank(rank)?;
        let slot = r.threads.binary_search_by_key(&thread, |t| t.index).ok()?;
        Some(self.first[rank as usize] + slot)
    }

    /// The lane of a call, and its position there, if it is drawn.
    fn place(&self, view: &View, at: EventRef) -> Option<(u32, u32)> {
        let li = self.lane(view, at.rank, at.thread)?;
        let p = &self.places[li];
        let k = p.binary_search_by_key(&at.index, |x| x.0).ok()?;
        Some((li as u32, p[k].1))
    }
}

/// The calls, a set of columns per lane; how many.
fn write_calls(
    w: &mut dyn Write,
    view: &View,
    lanes: &Lanes,
    funcs: &Functions,
    t0: u64,
    progress: &mut dyn FnMut(u64),
) -> io::Result<u64> {
    let rel = |t: u64| t as i64 - t0 as i64;
    let mut done = 0u64;
    for (li, (loc, idx)) in view.locations.iter().zip(&lanes.calls).enumerate() {
        if li > 0 {
            w.write_all(b",")?;
        }
        let rank = &view.trace.held(loc.rank);
        let records = view.records(*loc);
        let times = view.times(*loc);
        let ats = || idx.iter().map(|&i| view.at(*loc, i as usize));
        // A call without a payload has no detail: it is not decoded.
        let details: Vec<_> = ats()
            .map(|at| match records.has_payload(at.pos()) {
                true => view.detail(at, &records.call(at.pos()).expect("a call")),
                false => CallDetail::default(),
            })
            .collect();
        w.write_all(b"{")?;
        column(
            w,
            "f",
            idx.iter().map(|&i| {
                let func = records.func(i as usize).expect("a call");
                funcs.index[&(rank.rank, func)] as i64
            }),
        )?;
        w.write_all(b",")?;
        let raw = |i: u32| records.stamps(i as usize);
        column(w, "s", idx.iter().map(|&i| rel(raw(i).0)))?;
        w.write_all(b",")?;
        column(w, "e", idx.iter().map(|&i| rel(raw(i).1)))?;
        if view.synced.is_some() {
            w.write_all(b",")?;
            column(w, "ss", idx.iter().map(|&i| rel(times.get(i as usize).0)))?;
            w.write_all(b",")?;
            column(w, "se", idx.iter().map(|&i| rel(times.get(i as usize).1)))?;
        }
        w.write_all(b",")?;
        column(
            w,
            "peer",
            details.iter().map(|d| d.peer.map_or(-1, i64::from)),
        )?;
        w.write_all(b",")?;
        column(
            w,
            "tag",
            details.iter().map(|d| d.tag.map_or(-1, i64::from)),
        )?;
        w.write_all(b",")?;
        column(w, "bytes", details.iter().map(|d| d.bytes as i64))?;
        w.write_all(b",")?;
        column(
            w,
            "lc",
            ats().map(|at| view.lamport(at).map_or(-1, |l| l as i64)),
        )?;
        w.write_all(b"}")?;
        done += idx.len() as u64;
        progress(done);
    }
    Ok(done)
}

/// The matched messages whose both calls are drawn, as columns; how many,
/// and how many of them point backward in raw time.
fn write_messages(w: &mut dyn Write, view: &View, lanes: &Lanes) -> io::Result<(u64, u64)> {
    let m = view.messages;
    let msgs: Vec<DrawnMessage> = (m.matched.iter())
        .filter_map(|msg| {
            let (sv, rv) = (&m.sends[msg.send], &m.recvs[msg.recv]);
            let a = lanes.place(view, sv.call)?;
            let b = lanes.place(view, rv.completion)?;
            let reversed = view.raw(rv.completion, true) < view.raw(sv.call, false);
            Some(DrawnMessage {
                from: a,
                to: b,
                bytes: sv.bytes,
                tag: sv.tag,
                reversed,
            })
        })
        .collect();
    column(w, "sl", msgs.iter().map(|x| i64::from(x.from.0)))?;
    w.write_all(b",")?;
    column(w, "sc", msgs.iter().map(|x| i64::from(x.from.1)))?;
    w.write_all(b",")?;
    column(w, "rl", msgs.iter().map(|x| i64::from(x.to.0)))?;
    w.write_all(b",")?;
    column(w, "rc", msgs.iter().map(|x| i64::from(x.to.1)))?;
    w.write_all(b",")?;
    column(w, "bytes", msgs.iter().map(|x| x.bytes as i64))?;
    w.write_all(b",")?;
    column(w, "tag", msgs.iter().map(|x| i64::from(x.tag)))?;
    let reversed = msgs.iter().filter(|x| x.reversed).count() as u64;
    Ok((msgs.len() as u64, reversed))
}

/// The overlay's path, waits, phases and parallelism, inside the window.
fn write_insight(
    w: &mut dyn Write,
    view: &View,
    lanes: &Lanes,
    o: &Overlay,
    window: Option<(u64, u64)>,
    t0: u64,
) -> io::Result<()> {
    let rel = |t: u64| t as i64 - t0 as i64;
    let lane = |rank: u32, thread: u32| lanes.lane(view, rank, thread).map(|l| l as i64);
    let main = |rank: u32| {
        view.trace
            .ranks
            .get(rank as usize)?
            .threads
            .first()
            .map(|t| t.index)
    };
    let inside = |a: u64, b: u64| window.is_none_or(|(from, to)| b >= from && a <= to);
    let path: Vec<(i64, u64, u64, bool)> = (o.path.iter())
        .filter(|p| inside(p.1, p.2))
        .filter_map(|&(r, a, b, c)| Some((lane(r, main(r)?)?, a, b, c)))
        .collect();
    let waits: Vec<(i64, u64, u64)> = (o.waits.iter())
        .filter(|x| inside(x.2, x.3) && x.3 > x.2)
        .filter_map(|&(r, t, a, b)| Some((lane(r, t)?, a, b)))
        .collect();
    let mut names: Vec<&str> = Vec::new();
    let phases: Vec<(i64, u64, u64, u32, usize)> = (o.phases.iter())
        .filter(|p| inside(p.from_ns, p.to_ns))
        .filter_map(|p| {
            let n = match names.iter().position(|x| *x == p.name) {
                Some(n) => n,
                None => {
                    names.push(&p.name);
                    names.len() - 1
                }
            };
            Some((lane(p.rank, p.thread)?, p.from_ns, p.to_ns, p.depth, n))
        })
        .collect();
    w.write_all(b"\"path\":{")?;
    column(w, "l", path.iter().map(|p| p.0))?;
    w.write_all(b",")?;
    column(w, "s", path.iter().map(|p| rel(p.1)))?;
    w.write_all(b",")?;
    column(w, "e", path.iter().map(|p| rel(p.2)))?;
    w.write_all(b",")?;
    column(w, "c", path.iter().map(|p| i64::from(p.3)))?;
    w.write_all(b"},\"waits\":{")?;
    column(w, "l", waits.iter().map(|x| x.0))?;
    w.write_all(b",")?;
    column(w, "s", waits.iter().map(|x| rel(x.1)))?;
    w.write_all(b",")?;
    column(w, "e", waits.iter().map(|x| rel(x.2)))?;
    w.write_all(b"},\"phases\":{")?;
    column(w, "l", phases.iter().map(|x| x.0))?;
    w.write_all(b",")?;
    column(w, "s", phases.iter().map(|x| rel(x.1)))?;
    w.write_all(b",")?;
    column(w, "e", phases.iter().map(|x| rel(x.2)))?;
    w.write_all(b",")?;
    column(w, "d", phases.iter().map(|x| i64::from(x.3)))?;
    w.write_all(b",")?;
    column(w, "n", phases.iter().map(|x| x.4 as i64))?;
    w.write_all(b"},\"names\":[")?;
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        w.write_all(js(n).as_bytes())?;
    }
    w.write_all(b"]")?;
    if let Some((from, bin, v)) = o.parallelism {
        write!(
            w,
            ",\"par\":{{\"s\":{},\"w\":{bin},\"n\":{},\"v\":[",
            rel(from),
            view.trace.ranks.len()
        )?;
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            write!(w, "{:.3}", x)?;
        }
        w.write_all(b"]}")?;
    }
    Ok(())
}
