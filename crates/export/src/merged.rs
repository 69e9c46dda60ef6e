//! `pmtrace merge`: one log of every rank's events on the synchronized
//! time base.
//!
//! ```text
//! # pmtrace merged log: 4 ranks, 812 records; time = synchronized ns on rank 0's clock
//! <time> enter r<rank> t<thread> <the record, as `export --format text` prints it>
//! <time> exit r<rank> t<thread> <function>
//! <time> at r<rank> t<thread> <a runtime record with one time (DefComm, DefThread)>
//!
//! 1000350 enter r0 t0 1000350 +40 MPI_Send peer=1 tag=0 comm=0 bytes=8
//! 1000390 exit r0 t0 MPI_Send
//! 1000620 exit r1 t0 MPI_Recv
//! ```
//!
//! A call gives two lines: its start (`enter`, with the record: raw start,
//! duration and arguments) and its end (`exit`). Lines are in
//! synchronized-time order, and the order is also causal: a line comes
//! after everything it depends on (the send of a receive, the enters of a
//! collective exit), so a receive never precedes its send even where both
//! have the same time. Each thread's lines keep their order.

use std::io::{self, Write};

use pmtrace_trace::Record;

use crate::text::format_record;
use pmtrace_matching::matching::Messages;
use pmtrace_sync::replay::replay;
use pmtrace_sync::{Graph, Synced, Times};
use pmtrace_trace::read::Trace;

/// Writes the merged log of `trace` with the times of `synced`; returns the
/// number of lines.
pub fn write(trace: &Trace, m: &Messages, synced: &Synced, out: &mut dyn Write) -> io::Result<u64> {
    let p = synced.report.params;
    let g = Graph::build(trace, m, p.mu_intra_ns, p.mu_inter_ns);
    let t = synced.node_times(trace, &g);
    writeln!(
        out,
        "# pmtrace merged log: {} ranks, {} records; time = synchronized ns on rank 0's clock",
        trace.world_size,
        g.stamps() / 2
    )?;
    let mut line = String::new();
    let mut lines = 0u64;
    let mut failed: Option<io::Error> = None;
    replay(
        &g,
        |n| t.at(n.loc, n.k),
        |n, time| {
            if failed.is_some() {
                return;
            }
            let loc = &g.locs[n.loc as usize];
            let rank = &trace.held(loc.rank);
            let pos = g.pos(n.loc, n.k) as usize;
            let records = &rank.threads[loc.slot].records;
            let i = pos / 2;
            line.clear();
            if pos.is_multiple_of(2) {
                let rec = &records.get(i);
                let single = matches!(rec, Record::DefComm { .. } | Record::DefThread { .. });
                line.push_str(&format!("{time} {} ", if single { "at" } else { "enter" }));
                format_record(&mut line, rank, loc.thread, rec);
            } else {
                // An exit: only its name, read without decoding the record.
                let name = match records.func(i) {
                    Some(func) => rank.function_name(func),
                    None if records.is_buffer_wait(i) => "BufferWait",
                    // Definitions are one line, at their start.
                    None => return,
                };
                line.push_str(&format!(
                    "{time} exit r{} t{} {name}",
                    rank.rank, loc.thread
                ));
            }
            line.push('\n');
            match out.write_all(line.as_bytes()) {
                Ok(()) => lines += 1,
                Err(e) => failed = Some(e),
            }
        },
    );
    match failed {
        Some(e) => Err(e),
        None => Ok(lines + 1),
    }
}
