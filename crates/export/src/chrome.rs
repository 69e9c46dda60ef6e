//! Trace Event Format JSON, for chrome://tracing and older viewers.
//!
//! ```text
//!  {"displayTimeUnit":"ns","traceEvents":[
//!    {"ph":"M","name":"process_name","pid":R,...}      one per rank (pid = rank)
//!    {"ph":"M","name":"thread_name","pid":R,"tid":T,...} one per thread
//!    {"ph":"X","cat":"phase","name":"solve",...}       one per user phase
//!    {"ph":"X","cat":"mpi","name":"MPI_Send","ts":µs,"dur":µs,"args":{peer,tag,bytes,lamport}}
//!    {"ph":"s","cat":"message","id":N,...}   at the start of the sending call
//!    {"ph":"f","bp":"e","cat":"message",...} at the end of the completing call
//!  ]}
//! ```
//!
//! Times are microseconds with nanosecond decimals, from the start of the
//! trace. Collectives get one flow per logical message (category
//! `collective`), as in the Perfetto export.

use std::io::{self, Write};

use super::view::{CallDetail, View};
use pmtrace_matching::ends::Cursor;
use pmtrace_trace::read::EventRef;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub slices: u64,
    /// User phases (category `phase`), enclosing the calls made in them.
    pub phase_slices: u64,
    pub message_flows: u64,
    pub collective_flows: u64,
}

fn us(ns: u64) -> String {
    let mut b = Vec::new();
    put_us(&mut b, ns);
    String::from_utf8(b).expect("digits")
}

/// Appends `v` in decimal.
fn put_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend(digits[..n].iter().rev());
}

fn put_i64(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    put_u64(buf, v.unsigned_abs());
}

/// Appends `ns` as microseconds with three decimals.
fn put_us(buf: &mut Vec<u8>, ns: u64) {
    put_u64(buf, ns / 1000);
    let frac = ns % 1000;
    buf.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Writes the Chrome JSON of `view` to `w`.
pub fn write(view: &View, w: &mut dyn Write, progress: &mut dyn FnMut(u64)) -> io::Result<Summary> {
    let t0 = view.span.0;
    let mut s = Summary::default();
    let mut first = true;
    let mut sep = |w: &mut dyn Write| -> io::Result<()> {
        if first {
            first = false;
            w.write_all(b"\n")
        } else {
            w.write_all(b",\n")
        }
    };
    w.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    for r in &view.trace.ranks {
        sep(w)?;
        let name = serde_json::to_string(&format!("rank {} ({})", r.rank, r.header.hostname))?;
        write!(w, "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{name}}}}}", r.rank)?;
        sep(w)?;
        write!(w, "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{0},\"tid\":0,\"args\":{{\"sort_index\":{0}}}}}", r.rank)?;
    }
    for loc in &view.locations {
        sep(w)?;
        write!(
            w,
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"thread {}\"}}}}",
            loc.rank, loc.thread, loc.thread
        )?;
    }
    let flow = |w: &mut dyn Write, ph: &str, cat: &str, id: u64, at: EventRef, t: u64| {
        let bp = if ph == "f" { ",\"bp\":\"e\"" } else { "" };
        write!(
            w,
            "{{\"ph\":\"{ph}\"{bp},\"cat\":\"{cat}\",\"name\":\"{cat}\",\"id\":{id},\"pid\":{},\"tid\":{},\"ts\":{}}}",
            at.rank,
            at.thread,
            us(t - t0)
        )
    };
    for p in view.phases() {
        sep(w)?;
        let name = serde_json::to_string(&p.name)?;
        write!(
            w,
            "{{\"ph\":\"X\",\"cat\":\"phase\",\"name\":{name},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{\"depth\":{}}}}}",
            p.rank,
            p.thread,
            us(p.from_ns.saturating_sub(t0)),
            us(p.to_ns - p.from_ns),
            p.depth
        )?;
        s.phase_slices += 1;
    }
    let mut done = 0u64;
    let lamport = view.clocks.report.mode != "none";
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    for &loc in &view.locations {
        let times = view.times(loc);
        let records = view.records(loc);
        let ends = view.messages.ends.thread(loc.rank, loc.slot);
        let (mut sends, mut recvs) = (Cursor::new(&ends.sends), Cursor::new(&ends.done));
        let mut clocks = view.clocks.after_call.thread(loc.rank, loc.thread);
        for i in view.order(loc) {
            let i = i as usize;
            let at = view.at(loc, i);
            let (a, b) = times.get(i);
            let func = records.func(i).expect("a call");
            let d = if records.has_payload(i) {
                let call = records.call(i).expect("a call");
                view.detail_of(at, &call, sends.at(at.index), recvs.at(at.index))
            } else {
                CallDetail::default()
            };
            sep(&mut buf)?;
            let name = view.trace.held(loc.rank).function_name(func);
            let lamport = clocks.get(i).filter(|_| lamport);
            slice(
                &mut buf,
                name,
                (loc.rank, loc.thread),
                (a - t0, b.saturating_sub(a)),
                &d,
                lamport,
            );
            if buf.len() >= 1 << 16 {
                w.write_all(&buf)?;
                buf.clear();
            }
            s.slices += 1;
            done += 1;
            if done.is_multiple_of(65536) {
                progress(done);
            }
        }
    }
    w.write_all(&buf)?;
    let m = view.messages;
    let mut id = 1u64;
    for msg in &m.matched {
        let (sv, rv) = (&m.sends[msg.send], &m.recvs[msg.recv]);
        sep(w)?;
        flow(w, "s", "message", id, sv.call, view.time(sv.call, false))?;
        sep(w)?;
        flow(
            w,
            "f",
            "message",
            id,
            rv.completion,
            view.time(rv.completion, true),
        )?;
        id += 1;
        s.message_flows += 1;
    }
    for (enter, exit) in view.collective_flows() {
        sep(w)?;
        flow(w, "s", "collective", id, enter, view.time(enter, false))?;
        sep(w)?;
        flow(w, "f", "collective", id, exit, view.time(exit, true))?;
        id += 1;
        s.collective_flows += 1;
    }
    w.write_all(b"\n]}\n")?;
    progress(done);
    w.flush()?;
    Ok(s)
}

/// One call's slice ("X" event): its function `name`, (rank, thread),
/// (start from the trace's start, duration), what it sent or received,
/// and its Lamport clock after it.
fn slice(
    buf: &mut Vec<u8>,
    name: &str,
    (rank, thread): (u32, u32),
    (ts, dur): (u64, u64),
    d: &CallDetail,
    lamport: Option<u64>,
) {
    buf.extend_from_slice(b"{\"ph\":\"X\",\"cat\":\"mpi\",\"name\":\"");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\",\"pid\":");
    put_u64(buf, rank.into());
    buf.extend_from_slice(b",\"tid\":");
    put_u64(buf, thread.into());
    buf.extend_from_slice(b",\"ts\":");
    put_us(buf, ts);
    buf.extend_from_slice(b",\"dur\":");
    put_us(buf, dur);
    buf.extend_from_slice(b",\"args\":{");
    let mut comma = false;
    let mut arg = |buf: &mut Vec<u8>, key: &[u8]| {
        if std::mem::replace(&mut comma, true) {
            buf.push(b',');
        }
        buf.extend_from_slice(key);
    };
    if let Some(p) = d.peer {
        arg(buf, b"\"peer\":");
        put_u64(buf, p.into());
    }
    if let Some(t) = d.tag {
        arg(buf, b"\"tag\":");
        put_i64(buf, t.into());
    }
    if d.bytes > 0 {
        arg(buf, b"\"bytes\":");
        put_u64(buf, d.bytes);
    }
    if let Some(l) = lamport {
        arg(buf, b"\"lamport\":");
        put_u64(buf, l);
    }
    buf.extend_from_slice(b"}}");
}
