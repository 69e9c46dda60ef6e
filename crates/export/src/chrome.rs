//! Trace Event Format JSON, for chrome://tracing and older viewers.
//!
//! ```text
//!  {"displayTimeUnit":"ns","traceEvents":[
//!    {"ph":"M","name":"process_name","pid":R,...}      one per rank (pid = rank)
//!    {"ph":"M","name":"thread_name","pid":R,"tid":T,...} one per thread
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

use super::view::View;
use pmtrace_trace::read::EventRef;

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub slices: u64,
    pub message_flows: u64,
    pub collective_flows: u64,
}

fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
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
    let mut done = 0u64;
    for &loc in &view.locations {
        let times = view.times(loc);
        for (i, call) in view.calls_in_order(loc) {
            let at = view.at(loc, i);
            let (a, b) = times.get(i);
            let d = view.detail(at, &call);
            sep(w)?;
            write!(
                w,
                "{{\"ph\":\"X\",\"cat\":\"mpi\",\"name\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"args\":{{",
                view.function_name(loc.rank, &call),
                loc.rank,
                loc.thread,
                us(a - t0),
                us(b.saturating_sub(a))
            )?;
            let mut args = Vec::with_capacity(4);
            if let Some(p) = d.peer {
                args.push(format!("\"peer\":{p}"));
            }
            if let Some(t) = d.tag {
                args.push(format!("\"tag\":{t}"));
            }
            if d.bytes > 0 {
                args.push(format!("\"bytes\":{}", d.bytes));
            }
            if let Some(l) = view.lamport(at) {
                args.push(format!("\"lamport\":{l}"));
            }
            write!(w, "{}}}}}", args.join(","))?;
            s.slices += 1;
            done += 1;
            if done.is_multiple_of(65536) {
                progress(done);
            }
        }
    }
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
