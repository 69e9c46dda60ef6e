//! One line per record, all ranks and threads merged in time order.
//!
//! ```text
//! r<rank> t<thread> <start ns> +<duration ns> <name> [key=value ...] [rc=<code>]
//!
//! r0 t0 1234567 +850 MPI_Send peer=1 tag=0 comm=0 bytes=8
//! r1 t0 1234100 +1400 MPI_Irecv src=-1 tag=0 comm=0 posted=64 op=0.3
//! r1 t0 1236000 +90 MPI_Waitall done=0.3:[src=0,bytes=8],0.4:[none]
//! r0 t0 1240000 +2100 MPI_Allreduce comm=0 sent=8 recvd=8 seq=4
//! r0 t0 0 +0 DefComm index=2 global=0x100000002 inter=0 size=2 rank=1 remote_size=0 members=1,0
//! ```
//!
//! Times are the rank's raw timer in ns. Values are as recorded: `peer`,
//! `src` and statuses use ranks of the call's communicator, `comm` is the
//! rank-local communicator index (see the `DefComm` lines for its global id
//! and members). An operation id prints as `<thread>.<n>` (`-` when a
//! reference names no traced operation), a started persistent request as
//! `<request>-><instance>`. A status `[...]` lists only the fields the
//! record holds (absent ones equal the posted values) and the flags
//! `cancelled`, `empty` (a probe or test that found nothing) and `none` (a
//! completed operation with no receive status). Runtime records are
//! `DefComm`, `DefThread` and `BufferWait` (the thread waited for a free
//! trace buffer).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use pmtrace_format::record::OP_THREAD_SHIFT;
use pmtrace_format::Status;
use pmtrace_trace::{Call, Events, Payload, Record};

use crate::ExportError;
use pmtrace_trace::read::{Rank, Trace};

/// Writes the export to the file `path` (created or truncated); returns the
/// number of lines.
pub fn write_file(trace: &Trace, path: &Path) -> Result<u64, ExportError> {
    let io = |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::create(path).map_err(io)?;
    write(trace, &mut BufWriter::new(file)).map_err(io)
}

/// Writes every record of `trace` to `out`, one line each; returns the
/// number of lines.
pub fn write(trace: &Trace, out: &mut dyn Write) -> io::Result<u64> {
    // k-way merge of the threads' streams, each already in time order.
    let streams: Vec<(&Rank, u32, &Events)> = trace
        .ranks
        .iter()
        .flat_map(|r| r.threads.iter().map(move |t| (r, t.index, &t.records)))
        .collect();
    let mut heap = BinaryHeap::new();
    for (s, (_, _, records)) in streams.iter().enumerate() {
        if !records.is_empty() {
            heap.push(Reverse((records.stamps(0).0, s, 0usize)));
        }
    }
    let mut line = String::new();
    let mut lines = 0;
    while let Some(Reverse((_, s, i))) = heap.pop() {
        let (rank, thread, records) = streams[s];
        line.clear();
        format_record(&mut line, rank, thread, &records.get(i));
        line.push('\n');
        out.write_all(line.as_bytes())?;
        lines += 1;
        if i + 1 < records.len() {
            heap.push(Reverse((records.stamps(i + 1).0, s, i + 1)));
        }
    }
    out.flush()?;
    Ok(lines)
}

/// Appends the line for one record (without the newline).
pub fn format_record(out: &mut String, rank: &Rank, thread: u32, record: &Record) {
    let _ = write!(out, "r{} t{thread} ", rank.rank);
    let _ = match record {
        Record::Call(c) => format_call(out, rank, c),
        Record::BufferWait { t_start, t_end } => {
            write!(out, "{t_start} +{} BufferWait", t_end - t_start)
        }
        Record::DefThread { t, tid } => write!(out, "{t} +0 DefThread tid={tid}"),
        Record::DefComm { t, def } => {
            let _ = write!(
                out,
                "{t} +0 DefComm index={} global={:#x} inter={} size={} rank={} remote_size={}",
                def.index, def.global_id, def.inter as u8, def.size, def.rank, def.remote_size
            );
            if !def.members.is_empty() {
                let members: Vec<String> = def.members.iter().map(u32::to_string).collect();
                let _ = write!(out, " members={}", members.join(","));
            }
            Ok(())
        }
    };
}

fn format_call(out: &mut String, rank: &Rank, c: &Call) -> std::fmt::Result {
    write!(
        out,
        "{} +{} {}",
        c.t_start,
        c.t_end - c.t_start,
        rank.function_name(c.func)
    )?;
    match &c.payload {
        Payload::None => {}
        Payload::InitThread { required, provided } => write!(out, " required={required} provided={provided}")?,
        Payload::Abort { comm, code } => write!(out, " comm={comm} code={code}")?,
        Payload::Pcontrol { level } => write!(out, " level={level}")?,
        Payload::Phase { name: Some(name) } => write!(out, " name={name:?}")?,
        Payload::Phase { name: None } => {}
        Payload::Send { peer, tag, comm, bytes, op } => {
            write!(out, " peer={peer} tag={tag} comm={comm} bytes={bytes}")?;
            if let Some(op) = op {
                write!(out, " op={}", op_str(Some(*op)))?;
            }
        }
        Payload::Recv { src, tag, comm, posted, status, op } => {
            write!(out, " src={src} tag={tag} comm={comm} posted={posted}")?;
            if let Some(s) = status {
                write!(out, " status={}", status_str(s))?;
            }
            if let Some(op) = op {
                write!(out, " op={}", op_str(Some(*op)))?;
            }
        }
        Payload::Sendrecv { peer, stag, bytes, src, rtag, posted, comm, status } => write!(
            out,
            " peer={peer} stag={stag} bytes={bytes} src={src} rtag={rtag} posted={posted} comm={comm} status={}",
            status_str(status)
        )?,
        Payload::Isendrecv { peer, stag, bytes, src, rtag, posted, comm, op } => write!(
            out,
            " peer={peer} stag={stag} bytes={bytes} src={src} rtag={rtag} posted={posted} comm={comm} op={}",
            op_str(*op)
        )?,
        Payload::Probe { src, tag, comm, status, op } => {
            write!(out, " src={src} tag={tag} comm={comm} status={}", status_str(status))?;
            if let Some(op) = op {
                write!(out, " op={}", op_str(Some(*op)))?;
            }
        }
        Payload::Mrecv { msg, posted, status, op } => {
            write!(out, " msg={} posted={posted}", op_str(*msg))?;
            if let Some(s) = status {
                write!(out, " status={}", status_str(s))?;
            }
            if let Some(op) = op {
                write!(out, " op={}", op_str(Some(*op)))?;
            }
        }
        Payload::Start { started } => {
            let items: Vec<String> = started.iter().map(|(init, id)| format!("{}->{}", op_str(*init), op_str(Some(*id)))).collect();
            write!(out, " started={}", items.join(","))?;
        }
        Payload::Complete { done } => {
            let items: Vec<String> = done.iter().map(|d| format!("{}:{}", op_str(d.op), status_str(&d.status))).collect();
            write!(out, " done={}", items.join(","))?;
        }
        Payload::OpRef { op, cancelled } => {
            write!(out, " op={}", op_str(*op))?;
            if *cancelled {
                out.push_str(" cancelled");
            }
        }
        Payload::Coll { comm, root, sent, recvd, seq, op } => {
            write!(out, " comm={comm}")?;
            if let Some(root) = root {
                write!(out, " root={root}")?;
            }
            write!(out, " sent={sent} recvd={recvd} seq={seq}")?;
            if let Some(op) = op {
                write!(out, " op={}", op_str(Some(*op)))?;
            }
        }
        Payload::CommNew { parent, comm } => {
            let idx = |c: &Option<u32>| c.map_or_else(|| "null".to_owned(), |c| c.to_string());
            write!(out, " parent={} new={}", idx(parent), idx(comm))?;
        }
        Payload::CommFree { comm } => write!(out, " comm={comm}")?,
    }
    if c.rc != 0 {
        write!(out, " rc={}", c.rc)?;
    }
    Ok(())
}

/// `<thread>.<n>`, or `-` for no traced operation.
fn op_str(op: Option<u64>) -> String {
    match op {
        Some(id) => format!(
            "{}.{}",
            id >> OP_THREAD_SHIFT,
            id & ((1 << OP_THREAD_SHIFT) - 1)
        ),
        None => "-".to_owned(),
    }
}

fn status_str(s: &Status) -> String {
    let mut parts = Vec::new();
    if let Some(v) = s.source {
        parts.push(format!("src={v}"));
    }
    if let Some(v) = s.tag {
        parts.push(format!("tag={v}"));
    }
    if let Some(v) = s.bytes {
        parts.push(format!("bytes={v}"));
    }
    for (flag, name) in [
        (s.cancelled, "cancelled"),
        (s.empty, "empty"),
        (s.none, "none"),
    ] {
        if flag {
            parts.push(name.to_owned());
        }
    }
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_print_as_thread_dot_number() {
        assert_eq!(op_str(Some((3 << OP_THREAD_SHIFT) | 17)), "3.17");
        assert_eq!(op_str(None), "-");
    }

    #[test]
    fn statuses_list_present_fields_and_flags() {
        let s = Status {
            source: Some(2),
            bytes: Some(8),
            ..Status::default()
        };
        assert_eq!(status_str(&s), "[src=2,bytes=8]");
        assert_eq!(
            status_str(&Status {
                none: true,
                ..Status::default()
            }),
            "[none]"
        );
    }
}
