//! `pmtrace top`: a running job, live (see `pmtrace_live`). On a terminal
//! a full-screen view redrawn every interval; otherwise text, or with
//! `--json` one JSON object a line.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pmtrace_cli::command::TopArgs;
use pmtrace_live::hang::Kind;
use pmtrace_live::{ReadError, Reader, Snapshot, State, When};

pub fn run(args: TopArgs) -> Result<ExitCode> {
    let mut reader = Reader::new(&args.dir).map_err(anyhow::Error::msg)?;
    let hang_after = (args.hang_after * 1e9) as u64;
    let interval = Duration::from_secs_f64(args.interval);
    if args.once {
        // Two looks one interval apart, so that the rates mean something.
        take(&mut reader, hang_after)?;
        std::thread::sleep(interval);
        let s = take(&mut reader, hang_after)?;
        print(&s, args.json)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json && std::io::stdout().is_terminal() {
        return screen(reader, hang_after, interval);
    }
    let mut waited = false;
    loop {
        let next = Instant::now() + interval;
        match reader.snapshot(When::Now, hang_after, unix_now()) {
            Ok(s) => {
                print(&s, args.json)?;
                if s.job == "ended" {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Err(ReadError::NotYet(m)) => {
                if !waited {
                    eprintln!("pmtrace: {m}; waiting");
                    waited = true;
                }
            }
            Err(e @ ReadError::Bad(_)) => bail!(e),
        }
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

fn take(reader: &mut Reader, hang_after: u64) -> Result<Snapshot> {
    Ok(reader.snapshot(When::Now, hang_after, unix_now())?)
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn print(s: &Snapshot, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, s)?;
        writeln!(out)?;
    } else {
        for l in lines(s) {
            writeln!(out, "{l}")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

fn secs(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s < 10.0 {
        format!("{s:.2}s")
    } else if s < 600.0 {
        format!("{s:.1}s")
    } else {
        format!("{:.0}m", s / 60.0)
    }
}

fn per_s(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.1}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn list(ranks: &[u32]) -> String {
    const SHOWN: usize = 12;
    let mut s: Vec<String> = ranks.iter().take(SHOWN).map(|r| r.to_string()).collect();
    if ranks.len() > SHOWN {
        s.push(format!("... ({} in all)", ranks.len()));
    }
    s.join(",")
}

/// The snapshot as text: a line per rank (and per further thread), then
/// the summary and the hang.
pub fn lines(s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let sum = &s.summary;
    out.push(format!(
        "{} ranks, job {}: {} in MPI, {} computing, {} finished, {} gone",
        s.world_size, s.job, sum.mpi, sum.compute, sum.finished, sum.gone
    ));
    out.push(format!(
        "{:>5}  {:<8} {:<22} {:>8}  {:<12} {:>9} {:>9} {:>9}  {}",
        "rank", "state", "call", "for", "waits for", "calls/s", "msgs/s", "bytes/s", "phase"
    ));
    for v in &s.ranks {
        let (c, m, b) = v.rates.map_or(("-".into(), "-".into(), "-".into()), |r| {
            (
                per_s(r.calls_per_s),
                per_s(r.messages_per_s),
                per_s(r.bytes_per_s),
            )
        });
        let call = match v.state {
            State::Mpi => v.call.clone().unwrap_or_default(),
            State::Compute => "(computing)".into(),
            State::Finished => "(finished)".into(),
            State::Gone => match &v.call {
                Some(c) => format!("(gone in {c})"),
                None => "(gone)".into(),
            },
        };
        out.push(format!(
            "{:>5}  {:<8} {:<22} {:>8}  {:<12} {:>9} {:>9} {:>9}  {}",
            v.rank,
            v.state.name(),
            call,
            secs(v.for_ns),
            list(&v.waits_for),
            c,
            m,
            b,
            v.phase.as_deref().unwrap_or("")
        ));
        for t in v.threads.iter().skip(1) {
            out.push(format!(
                "{:>5}  {:<8} {:<22} {:>8}  {:<12} thread {} (tid {})",
                "",
                t.state.name(),
                t.call.as_deref().unwrap_or("(computing)"),
                secs(t.for_ns),
                list(&t.waits_for),
                t.thread,
                t.tid
            ));
        }
    }
    if !sum.slowest.is_empty() {
        let slow: Vec<String> = sum
            .slowest
            .iter()
            .map(|x| {
                format!(
                    "{} ({}, waited for by {})",
                    x.rank,
                    x.state.name(),
                    x.waited_for_by
                )
            })
            .collect();
        out.push(format!("waited for most: {}", slow.join("; ")));
    }
    for c in &sum.collectives {
        out.push(format!(
            "{} #{} on communicator {:#x}: {} waiting, missing {}",
            c.call.as_deref().unwrap_or("collective"),
            c.seq,
            c.comm,
            c.waiting.len(),
            list(&c.missing)
        ));
    }
    if !sum.unreceived.is_empty() {
        let sends: Vec<String> = sum
            .unreceived
            .iter()
            .take(8)
            .map(|u| {
                let to = match (u.to, u.comm_rank) {
                    (Some(w), _) => w.to_string(),
                    (None, Some(c)) => format!("rank {c} of {:#x}", u.comm),
                    (None, None) => "?".into(),
                };
                format!("{} -> {} ({}, {})", u.rank, to, u.call, secs(u.for_ns))
            })
            .collect();
        let more = sum.unreceived.len().saturating_sub(8);
        out.push(format!(
            "sent, not yet received: {}{}",
            sends.join("; "),
            if more > 0 {
                format!("; {more} more")
            } else {
                String::new()
            }
        ));
    }
    match &s.hang {
        None => out.push(format!(
            "hang: none (waits of {} or more would be named)",
            secs(s.hang_after_ns)
        )),
        Some(h) => {
            let chain: Vec<String> = h.ranks.iter().map(|r| r.to_string()).collect();
            out.push(match h.kind {
                Kind::Deadlock => format!(
                    "DEADLOCK: ranks {} wait for each other in a cycle",
                    chain.join(" -> ")
                ),
                Kind::Stalled => {
                    let end = h.end.as_ref();
                    format!(
                        "STALLED: the waits of ranks {} end at rank {}, which {}",
                        chain[..chain.len().saturating_sub(1)].join(", "),
                        end.map_or(0, |e| e.rank),
                        end.map_or("", |e| match e.state {
                            State::Compute => "is computing",
                            State::Mpi => "is in MPI, blocked on no one",
                            State::Finished => "has finished",
                            State::Gone => "is gone",
                        })
                    )
                }
            });
            for w in &h.waits {
                out.push(format!(
                    "  rank {} in {} for {} waits for {}{}",
                    w.rank,
                    w.call.as_deref().unwrap_or("?"),
                    secs(w.for_ns),
                    list(&w.waits_for),
                    w.site
                        .as_ref()
                        .map_or(String::new(), |f| format!(", called from {}", f.short()))
                ));
            }
        }
    }
    out
}

/// The full-screen view: the text of `lines`, redrawn every interval,
/// the hang in red; q or Esc quits, and it ends with the job.
fn screen(mut reader: Reader, hang_after: u64, interval: Duration) -> Result<ExitCode> {
    use ratatui::crossterm::event::{self, Event, KeyCode};
    use ratatui::style::{Color, Style};
    use ratatui::text::{Line, Span};
    use ratatui::widgets::{Block, Paragraph};

    let mut term = ratatui::init();
    let result = (|| -> Result<ExitCode> {
        let mut text: Vec<String> = vec!["reading the live files ...".into()];
        let mut ended = false;
        loop {
            let next = Instant::now() + interval;
            if !ended {
                match reader.snapshot(When::Now, hang_after, unix_now()) {
                    Ok(s) => {
                        text = lines(&s);
                        if s.job == "ended" {
                            ended = true;
                            text.push("the job has ended".into());
                        }
                    }
                    Err(ReadError::NotYet(m)) => text = vec![format!("{m}; waiting")],
                    Err(e @ ReadError::Bad(_)) => bail!(e),
                }
            }
            let title = format!(" pmtrace top {} ", reader_dir_label(&reader));
            term.draw(|f| {
                let body: Vec<Line> = text
                    .iter()
                    .map(|l| {
                        let style = if l.starts_with("DEADLOCK") || l.starts_with("STALLED") {
                            Style::default().fg(Color::Red)
                        } else if l.starts_with("  rank") {
                            Style::default().fg(Color::Yellow)
                        } else {
                            Style::default()
                        };
                        Line::from(Span::styled(l.clone(), style))
                    })
                    .collect();
                f.render_widget(
                    Paragraph::new(body).block(Block::bordered().title(title.clone())),
                    f.area(),
                );
            })?;
            if ended {
                std::thread::sleep(interval);
                return Ok(ExitCode::SUCCESS);
            }
            while Instant::now() < next {
                let wait = next.saturating_duration_since(Instant::now());
                if event::poll(wait)? {
                    if let Event::Key(k) = event::read()? {
                        if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}

fn reader_dir_label(r: &Reader) -> String {
    r.dir().display().to_string()
}
