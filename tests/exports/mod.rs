//! Exports checked with the readers users' viewers use: OTF2 through
//! `otf2-print` and the reference Python reader, Perfetto through the
//! `perfetto` package's own protobuf definitions, Chrome JSON parsed, the
//! HTML timeline rendered in headless Chromium.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// Runs a checker script of tests/support with Debian's Python (which has
/// python3-otf2) and the packages `make pydeps` put in target/pydeps.
pub(crate) fn python_check(script: &str, arg: &Path) -> serde_json::Value {
    let out = Command::new("/usr/bin/python3")
        .arg(root().join("tests/support").join(script))
        .arg(arg)
        .env("PYTHONPATH", root().join("target/pydeps"))
        .output()
        .expect("/usr/bin/python3 (make deps installs it)");
    assert!(
        out.status.success(),
        "{script} {}: {}",
        arg.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the checker prints JSON")
}

pub(crate) fn export(trace: &Path, format: &str, out: &Path) {
    let o = pmtrace(&[
        "export",
        trace.to_str().unwrap(),
        "--format",
        format,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "export {format}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The OTF2 archive of `trace` reads without a word from `otf2-print`, and
/// the reference reader finds the report's calls and messages per rank.
pub(crate) fn check_otf2(what: &str, trace: &Path, rep: &serde_json::Value) -> serde_json::Value {
    let archive = trace.with_extension("otf2");
    export(trace, "otf2", &archive);
    let anchor = archive.join("traces.otf2");
    let printed = Command::new("otf2-print")
        .arg(&anchor)
        .output()
        .expect("otf2-print (make deps installs otf2-tools)");
    assert!(printed.status.success(), "{what}: otf2-print failed");
    assert_eq!(
        String::from_utf8_lossy(&printed.stderr),
        "",
        "{what}: otf2-print complained"
    );
    let c = python_check("otf2_check.py", &anchor);
    for r in rep["per_rank"].as_array().unwrap() {
        let got = &c["per_rank"][r["rank"].to_string()];
        assert_eq!(got["enters"], r["events"], "{what} rank {}: {c}", r["rank"]);
        assert_eq!(got["leaves"], r["events"], "{what} rank {}: {c}", r["rank"]);
        assert_eq!(
            got["sends"].as_u64().unwrap_or(0),
            r["messages_sent"].as_u64().unwrap(),
            "{what} rank {}: {c}",
            r["rank"]
        );
        assert_eq!(
            got["receives"].as_u64().unwrap_or(0),
            r["messages_received"].as_u64().unwrap(),
            "{what} rank {}: {c}",
            r["rank"]
        );
    }
    assert_eq!(c["matched"], rep["messages"]["matched"], "{what}: {c}");
    assert_eq!(
        c["unmatched_sends"], 0,
        "{what}: every send has its receive"
    );
    assert_eq!(c["unmatched_receives"], 0, "{what}: {c}");
    assert_eq!(c["non_monotone"], 0, "{what}: OTF2 times decrease");
    assert_eq!(c["lamport_attributes"], rep["events"], "{what}: {c}");
    c
}

/// Perfetto: one slice per call, one flow per message and per logical
/// message of a collective, each started once and ended once.
pub(crate) fn check_perfetto(what: &str, trace: &Path, rep: &serde_json::Value) {
    let file = trace.with_extension("pftrace");
    export(trace, "perfetto", &file);
    let c = python_check("perfetto_check.py", &file);
    assert_eq!(c["slices"], rep["events"], "{what}: {c}");
    let logical = rep["collectives"]["logical_messages"].as_u64().unwrap();
    let matched = rep["messages"]["matched"].as_u64().unwrap();
    assert_eq!(c["flows"], matched + logical, "{what}: {c}");
    assert_eq!(c["flows_not_once"], 0, "{what}: {c}");
    assert_eq!(c["unbalanced_tracks"], 0, "{what}: {c}");
    assert_eq!(c["thread_tracks"], rep["ranks"], "{what}: {c}");
    let names: u64 = c["names"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        names,
        c["slices"].as_u64().unwrap(),
        "{what}: every slice named"
    );
}

/// Chrome JSON: a complete event per call, an s/f pair per message.
pub(crate) fn check_chrome(what: &str, trace: &Path, rep: &serde_json::Value) {
    let file = trace.with_extension("json");
    export(trace, "chrome", &file);
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).expect("valid JSON");
    let evs = v["traceEvents"].as_array().unwrap();
    let count = |ph: &str, cat: &str| {
        evs.iter()
            .filter(|e| e["ph"] == ph && e["cat"] == cat)
            .count() as u64
    };
    assert_eq!(count("X", "mpi"), rep["events"].as_u64().unwrap(), "{what}");
    let matched = rep["messages"]["matched"].as_u64().unwrap();
    assert_eq!(count("s", "message"), matched, "{what}");
    assert_eq!(count("f", "message"), matched, "{what}");
    let logical = rep["collectives"]["logical_messages"].as_u64().unwrap();
    assert_eq!(count("s", "collective"), logical, "{what}");
    assert_eq!(count("f", "collective"), logical, "{what}");
}

#[test]
fn every_example_at_np_4_exports_what_the_report_counts() {
    for name in ["ring", "pingpong", "halo2d", "master_worker", "collectives"] {
        let dir = scratch(&format!("export-{name}"));
        let run = mpirun(&dir, 4, &prog(name), &[], Mode::Preload, &[]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let rep = report(&run.trace);
        assert!(rep["messages"]["matched"].as_u64().unwrap() > 0 || name == "collectives");
        check_otf2(name, &run.trace, &rep);
        check_perfetto(name, &run.trace, &rep);
        check_chrome(name, &run.trace, &rep);
    }
}

/// halo2d at np=4 under a simulated clock skew (hundreds of messages
/// reversed as recorded), and its report.
fn skewed_halo(dir: &Path) -> (Run, serde_json::Value) {
    let run = mpirun(
        dir,
        4,
        &prog("halo2d"),
        &[],
        Mode::Preload,
        &[("PMTRACE_CLOCK_SIM", "seed=5")],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rep = report(&run.trace);
    (run, rep)
}

#[test]
fn a_synced_simulated_trace_exports_corrected_time_with_no_message_backward() {
    let dir = scratch("export-clocksim");
    let (run, rep) = skewed_halo(&dir);
    let what = "halo2d under PMTRACE_CLOCK_SIM";
    // Raw times go out with each rank's measured offsets as ClockOffset
    // definitions, which OTF2's reader applies: it reads fewer reversed
    // messages than were recorded.
    let recorded = rep["violations"]["reversed"].as_u64().unwrap();
    assert!(recorded > 0, "{what}: the simulation reverses messages");
    let raw = check_otf2(what, &run.trace, &rep);
    assert!(
        raw["reversed"].as_u64().unwrap() < recorded,
        "{what}: {recorded} reversed as recorded: {raw}"
    );
    let o = pmtrace(&["sync", run.trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep = report(&run.trace);
    let synced = check_otf2(what, &run.trace, &rep);
    assert_eq!(synced["reversed"], 0, "{what}: {synced}");
    check_perfetto(what, &run.trace, &rep);
    check_chrome(what, &run.trace, &rep);
}

/// Headless Chromium on `page` (`#hash` view options allowed): the DOM
/// after the first render, or a screenshot to `png`.
fn chromium(page: &str, png: Option<&Path>) -> String {
    let mut cmd = Command::new("timeout");
    cmd.args([
        "120",
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
    ])
    .args(["--window-size=1400,800", "--virtual-time-budget=10000"]);
    match png {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd
        .arg(page)
        .output()
        .expect("chromium (make deps installs it)");
    assert!(out.status.success(), "chromium failed on {page}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The two numbers of a `data-NAME="a,b"` on the body of a DOM dump.
fn pair_attr(dom: &str, name: &str) -> (i64, i64) {
    let body = &dom[dom.find("<body").expect("a body")..];
    let key = format!("data-{name}=\"");
    let at = body.find(&key).unwrap_or_else(|| panic!("no {key}"));
    let rest = &body[at + key.len()..];
    let (a, b) = rest[..rest.find('"').unwrap()]
        .split_once(',')
        .unwrap_or_else(|| panic!("data-{name} is not a pair"));
    (a.parse().unwrap(), b.parse().unwrap())
}

/// The value of `data-NAME` on the body of a DOM dump.
fn body_attr(dom: &str, name: &str) -> u64 {
    let body = &dom[dom.find("<body").expect("a body")..];
    let key = format!("data-{name}=\"");
    let at = body
        .find(&key)
        .unwrap_or_else(|| panic!("no {key} in {}", &body[..200]));
    let rest = &body[at + key.len()..];
    rest[..rest.find('"').unwrap()]
        .parse()
        .unwrap_or_else(|_| panic!("data-{name} is not a number"))
}

#[test]
fn the_html_timeline_draws_lanes_and_arrows_and_red_backward_messages_in_raw_time() {
    let dir = scratch("timeline");
    let (run, rep) = skewed_halo(&dir);
    let html = dir.join("timeline.html");
    let o = pmtrace(&[
        "timeline",
        run.trace.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    for needle in ["http://", "https://"] {
        assert!(
            !page.contains(&format!("src=\"{needle}"))
                && !page.contains(&format!("href=\"{needle}")),
            "the page loads nothing from the network"
        );
    }
    let url = format!("file://{}", html.display());
    let raw = chromium(&format!("{url}#mode=raw&view=whole"), None);
    assert_eq!(body_attr(&raw, "lanes"), 4, "one lane per rank");
    assert_eq!(raw.matches("class=\"lane-label").count(), 4);
    let matched = rep["messages"]["matched"].as_u64().unwrap();
    assert_eq!(body_attr(&raw, "arrows"), matched, "every message drawn");
    let reversed = rep["violations"]["reversed"].as_u64().unwrap();
    assert!(reversed > 0);
    assert_eq!(
        body_attr(&raw, "reversed"),
        reversed,
        "backward arrows in raw time"
    );
    assert!(body_attr(&raw, "calls-drawn") > 0);
    // The page opens on the application's work: from the last end of
    // MPI_Init to the first start of MPI_Finalize (1% margins), which
    // holds every message.
    let synced = chromium(&format!("{url}#mode=synced"), None);
    assert_eq!(body_attr(&synced, "arrows"), matched);
    assert_eq!(
        body_attr(&synced, "reversed"),
        0,
        "none backward after sync"
    );
    let (span, work, view) = (
        pair_attr(&synced, "span"),
        pair_attr(&synced, "work"),
        pair_attr(&synced, "view"),
    );
    assert!(
        span.0 < work.0 && work.0 < work.1 && work.1 < span.1,
        "{span:?} {work:?}"
    );
    let margin = (work.1 - work.0) / 50;
    assert!(
        (view.0 - work.0).abs() <= margin && (view.1 - work.1).abs() <= margin,
        "view {view:?}, work {work:?}"
    );
    let whole = pair_attr(
        &chromium(&format!("{url}#mode=synced&view=whole"), None),
        "view",
    );
    assert!(
        whole.0 < span.0 + 1 && whole.1 > span.1 - 1,
        "{whole:?} {span:?}"
    );
    check_window(&run.trace, &dir, &rep);
    // The picture, kept as a test artifact.
    let shots = root().join("target/test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    for (mode, name) in [
        ("raw", "timeline-raw.png"),
        ("synced", "timeline-synced.png"),
    ] {
        let png = shots.join(name);
        let _ = std::fs::remove_file(&png);
        chromium(&format!("{url}#mode={mode}"), Some(&png));
        let bytes = std::fs::read(&png).expect("a screenshot");
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
            "{name}"
        );
    }
}

/// Calls, messages of a `pmtrace timeline` run, from its one stderr line.
fn timeline_counts(args: &[&str]) -> (u64, u64) {
    let o = pmtrace(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("pmtrace: wrote"))
        .unwrap_or_else(|| panic!("{err}"));
    let num = |unit: &str| -> u64 {
        let end = line.find(unit).unwrap_or_else(|| panic!("{line}"));
        line[..end]
            .trim_end()
            .rsplit([' ', '('])
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (num(" calls"), num(" messages"))
}

/// `--from/--to`: everything in a window that holds the run, a part in a
/// narrow one (drawn, with as many arrows as the line says), one-line
/// errors for an empty interval and a bad unit.
fn check_window(trace: &Path, dir: &Path, rep: &serde_json::Value) {
    let (t, out) = (trace.to_str().unwrap(), dir.join("window.html"));
    let o = out.to_str().unwrap();
    let calls = rep["events"].as_u64().unwrap();
    let matched = rep["messages"]["matched"].as_u64().unwrap();
    let all = timeline_counts(&["timeline", t, "-o", o, "--from", "0", "--to", "1000s"]);
    assert_eq!(all, (calls, matched), "a window holding the run");
    // A window over the second quarter of the messages, by their send
    // times (the Chrome export's, which counts from the same origin as
    // --from): some calls and messages fall in it, not all, however long
    // MPI_Init, the exchange or MPI_Finalize took on this run.
    let chrome = dir.join("window.json");
    export(trace, "chrome", &chrome);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let mut sends: Vec<f64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "s" && e["cat"] == "message")
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    sends.sort_by(f64::total_cmp);
    let n = sends.len();
    assert!(n >= 8, "{n} messages");
    let (from, to) = (
        format!("{:.3}us", sends[n / 4]),
        format!("{:.3}us", sends[n / 2]),
    );
    let (some, msgs) = timeline_counts(&["timeline", t, "-o", o, "--from", &from, "--to", &to]);
    assert!(
        some > 0 && some < calls,
        "{some} of {calls} calls in {from}..{to}"
    );
    assert!(msgs < matched, "{msgs} of {matched}");
    let dom = chromium(&format!("file://{o}#mode=synced"), None);
    assert_eq!(body_attr(&dom, "lanes"), 4);
    assert_eq!(
        body_attr(&dom, "arrows"),
        msgs,
        "every message of the window drawn"
    );
    for (args, code) in [
        (["--from", "2ms", "--to", "1ms"], 1),
        (["--from", "1xs", "--to", "2s"], 2),
    ] {
        let e = pmtrace(&[&["timeline", t, "-o", o][..], &args[..]].concat());
        assert_eq!(e.status.code(), Some(code), "{args:?}");
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(
            err.starts_with("pmtrace: error:") || err.starts_with("error: invalid value"),
            "{err}"
        );
    }
}

#[test]
fn the_timeline_shows_the_critical_path_phases_wait_states_and_parallelism() {
    let dir = scratch("timeline-insight");
    let run = mpirun(&dir, 4, &prog("phases"), &["40"], Mode::Preload, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let html = dir.join("timeline.html");
    let o = pmtrace(&[
        "timeline",
        run.trace.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let url = format!("file://{}", html.display());
    let dom = chromium(&format!("{url}#mode=synced"), None);
    // 6 phases (the pause included) on each of 4 ranks; the parallelism
    // profile's 100 bins; waits: at least the 3 MPI_Allreduce of "solve"
    // on the 3 ranks that wait for rank 2.
    assert_eq!(body_attr(&dom, "phases"), 24);
    assert_eq!(body_attr(&dom, "par"), 100);
    assert!(
        body_attr(&dom, "waits") >= 9,
        "{}",
        body_attr(&dom, "waits")
    );
    assert!(
        body_attr(&dom, "path-drawn") > 0,
        "the critical path is drawn"
    );
    for name in [
        "critical path",
        "waiting for a late rank",
        "phase solve",
        "parallelism",
    ] {
        assert!(dom.contains(name), "the legend names {name}");
    }
    // Raw time is not the report's base: nothing of it is drawn there.
    let raw = chromium(&format!("{url}#mode=raw"), None);
    assert_eq!(body_attr(&raw, "path-drawn"), 0);
    let png = root().join("target/test-artifacts/timeline-insight.png");
    std::fs::create_dir_all(png.parent().unwrap()).unwrap();
    chromium(&format!("{url}#mode=synced"), Some(&png));
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
}
