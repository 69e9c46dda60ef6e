//! Exports checked with the readers users' viewers use: OTF2 through
//! `otf2-print` and the reference Python reader, Perfetto through the
//! `perfetto` package's own protobuf definitions, Chrome JSON parsed, the
//! HTML timeline rendered in headless Chromium.

use std::path::Path;
use std::process::Command;

use crate::support::*;

/// Runs a checker script of tests/support with Debian's Python and the
/// packages `make pydeps` put in target/pydeps.
pub(crate) fn python_check(script: &str, arg: &Path) -> serde_json::Value {
    python_check_with(script, arg, "target/pydeps")
}

/// `python_check` with the packages of `packages` (a folder of target/).
fn python_check_with(script: &str, arg: &Path, packages: &str) -> serde_json::Value {
    let out = Command::new("/usr/bin/python3")
        .arg(root().join("tests/support").join(script))
        .arg(arg)
        .env("PYTHONPATH", root().join(packages))
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
/// the OTF2 bindings users install from PyPI (`otf2`, a wheel with its own
/// libotf2, which `make tables` puts in target/tables) find the report's
/// calls and messages per rank.
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
    let c = python_check_with("otf2_check.py", &anchor, "target/tables");
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
        let c = check_otf2(name, &run.trace, &rep);
        // pipit (hpcgroup's pandas reader, installed from its repository)
        // takes a location group's id for the rank and a send's receiver
        // for a world rank: these examples' communicators keep the world's
        // order, so its comm_matrix() must be the report's.
        assert_eq!(c["pipit_matrix"], rep["matrix"], "{name}");
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
    written(&run.trace, "timeline", &html);
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
    let html = dir.join("timeline.html");
    // Check 3 below needs a moment of "setup" when all four ranks compute.
    // With four ranks on this machine's two cores, one rank can be
    // descheduled until the others have finished their setups and wait in
    // the barrier: then the trace (rightly) has no such moment, and the
    // job is run again, up to three times.
    let mut attempts = 0;
    let (calls, (setup_start, setup_end)) = loop {
        attempts += 1;
        let run = mpirun(&dir, 4, &prog("phases"), &["40"], Mode::Preload, &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        written(&run.trace, "timeline", &html);
        // What the trace says, on the synchronized time base the page
        // draws insight on: `pmtrace merge` writes it.
        let log = dir.join("merged.log");
        written(&run.trace, "merge", &log);
        let calls = merged_calls(&std::fs::read_to_string(&log).unwrap());
        let window = all_in_setup(&calls);
        if window.0 < window.1 || attempts == 3 {
            break (calls, window);
        }
    };
    assert!(
        setup_start < setup_end,
        "in {attempts} runs, the four ranks never computed their setups at once"
    );
    let url = format!("file://{}", html.display());
    let dom = chromium(&format!("{url}#mode=synced"), None);
    assert_eq!(body_attr(&dom, "phases"), 24, "6 phases on each of 4 ranks");
    assert!(
        body_attr(&dom, "path-drawn") > 0,
        "the critical path is drawn"
    );
    // The legend, as rendered (not the page's script): its swatches give
    // the colours the test looks for.
    let legend = legend_of(&dom);
    let swatch = |name: &str| {
        legend
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("the legend names {name}: {legend:?}"))
            .1
    };
    let collective = swatch("collective");
    let wait = swatch("waiting for a late rank");
    let path = swatch("critical path");
    let par = swatch("parallelism (strip above the axis)");
    let png = root().join("target/test-artifacts/timeline-insight.png");
    std::fs::create_dir_all(png.parent().unwrap()).unwrap();
    chromium(&format!("{url}#mode=synced"), Some(&png));
    let shot = Screenshot::read(&png);
    let at = Geometry::of(&dom);
    // 1. Each rank's top-level phases: a band of the phase's colour at
    //    35% over white, in the strip above the lane's calls.
    let mut checked = 0;
    for (rank, phases) in top_level_phases(&calls) {
        for (name, s, e) in phases {
            let c = swatch(&format!("phase {name}"));
            let want = over(c, [255.0, 255.0, 255.0, 1.0], 0.35);
            // The page opens on the last end of MPI_Init to the first start
            // of MPI_Finalize: a rank that left MPI_Init early (another one
            // descheduled in it) begins its setup before that view.
            let (x, y) = (at.x(at.middle_in_view(s, e)), at.lane_y(rank) + 1.0);
            shot.expect(x, y, want, 8, &format!("phase {name} on rank {rank}"));
            checked += 1;
        }
    }
    assert_eq!(checked, 12, "setup, solve and output on 4 ranks");
    // 2. In each round of "solve", ranks 0, 1 and 3 reach MPI_Allreduce
    //    long before rank 2: the part of their call until rank 2 enters is
    //    shaded as waiting; rank 2 computes then, on the critical path,
    //    and the parallelism strip shows one rank of four computing.
    let rounds: Vec<Vec<(u64, u64)>> = (0..4)
        .map(|r| {
            let (s, e) = calls[&r]
                .iter()
                .find(|c| c.name == "pmtrace_phase_begin" && c.arg == "solve")
                .map(|b| {
                    let end = calls[&r]
                        .iter()
                        .find(|c| c.name == "pmtrace_phase_end" && c.enter > b.enter)
                        .expect("solve ends");
                    (b.enter, end.enter)
                })
                .expect("solve begins");
            calls[&r]
                .iter()
                .filter(|c| c.name == "MPI_Allreduce" && c.enter > s && c.exit < e)
                .map(|c| (c.enter, c.exit))
                .collect()
        })
        .collect();
    assert!(rounds.iter().all(|r| r.len() == 3), "{rounds:?}");
    let yc = |rank: u32| at.lane_y(rank) + at.lane_h - at.pad / 2.0 - 1.0;
    for (round, rank2) in rounds[2].iter().enumerate() {
        let late = rank2.0;
        let first_waiting = [0, 1, 3].map(|r| rounds[r][round].0);
        let last_other = *first_waiting.iter().max().unwrap();
        assert!(late > last_other, "rank 2 is late in round {round}");
        for r in [0u32, 1, 3] {
            let enter = rounds[r as usize][round].0;
            let x = at.x((enter + late) / 2);
            let want = over(wait, collective, wait[3]);
            let what = format!("rank {r} waiting in round {round}");
            shot.expect(x, at.lane_y(r) + at.pad + 3.0, want, 10, &what);
        }
        // Where only rank 2 computes.
        let x = at.x((last_other + late) / 2);
        let what = format!("round {round}: rank 2 computing, the others waiting");
        assert!(
            !shot.near(
                x,
                at.lane_y(2) + at.pad + 3.0,
                over(wait, collective, wait[3]),
                40
            ),
            "{what}: rank 2 is not waiting"
        );
        let on_path = |r: u32| (-1..=1).any(|d| shot.near(x, yc(r) + d as f64, path, 30));
        assert!(on_path(2), "{what}: the critical path runs on rank 2");
        for r in [0, 1, 3] {
            assert!(!on_path(r), "{what}: the critical path is not on rank {r}");
        }
        // One of four computing: a quarter of the strip's height.
        let strip = |f: f64| at.top + 3.0 + at.par_h * (1.0 - f);
        let empty = [0xe9 as f64, 0xed as f64, 0xf2 as f64, 1.0];
        shot.expect(x, strip(0.1), par, 30, &format!("{what}: the strip's foot"));
        shot.expect(
            x,
            strip(0.6),
            empty,
            10,
            &format!("{what}: above a quarter"),
        );
    }
    // In "setup" every rank computes (its calls come at its end): the
    // strip is full.
    let x = at.x(setup_start + (setup_end - setup_start) / 4);
    shot.expect(
        x,
        at.top + 3.0 + 2.0,
        par,
        30,
        "setup: every rank computing",
    );
    // Raw time is not the report's base: nothing of it is drawn there.
    let raw = chromium(&format!("{url}#mode=raw"), None);
    assert_eq!(body_attr(&raw, "path-drawn"), 0);
}

/// When all four ranks compute in "setup": from the last one's start of
/// it to the first MPI call any rank makes after its own start (an empty
/// span when a rank began its setup only after another had finished).
fn all_in_setup(calls: &std::collections::BTreeMap<u32, Vec<Merged>>) -> (u64, u64) {
    let begins: Vec<u64> = (0..4)
        .map(|r| {
            calls[&r]
                .iter()
                .find(|c| c.name == "pmtrace_phase_begin" && c.arg == "setup")
                .expect("setup begins")
                .enter
        })
        .collect();
    let start = *begins.iter().max().unwrap();
    let end = (0..4)
        .filter_map(|r| {
            calls[&r]
                .iter()
                .find(|c| c.name.starts_with("MPI_") && c.enter > begins[r as usize])
                .map(|c| c.enter)
        })
        .min()
        .unwrap_or(0);
    (start, end)
}

/// `pmtrace VERB TRACE -o OUT`, which must succeed.
fn written(trace: &Path, verb: &str, out: &Path) {
    let o = pmtrace(&[verb, trace.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "{verb}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One call of a merged log, on the synchronized time base.
#[derive(Debug)]
struct Merged {
    name: String,
    /// The first argument's value (a phase's name), or "".
    arg: String,
    enter: u64,
    exit: u64,
}

/// The calls of `pmtrace merge`'s log per rank (main threads), in order.
fn merged_calls(log: &str) -> std::collections::BTreeMap<u32, Vec<Merged>> {
    let mut out: std::collections::BTreeMap<u32, Vec<Merged>> = Default::default();
    let mut open: std::collections::BTreeMap<u32, Vec<Merged>> = Default::default();
    for line in log.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        let (time, what, rank) = (f[0].parse::<u64>().unwrap(), f[1], &f[2][1..]);
        let rank: u32 = rank.parse().unwrap();
        match what {
            "enter" => open.entry(rank).or_default().push(Merged {
                name: f[6].to_string(),
                arg: f
                    .get(7)
                    .and_then(|a| a.split_once('='))
                    .map_or(String::new(), |(_, v)| v.trim_matches('"').to_string()),
                enter: time,
                exit: 0,
            }),
            "exit" => {
                let mut c = open
                    .get_mut(&rank)
                    .and_then(Vec::pop)
                    .unwrap_or_else(|| panic!("an exit without its enter: {line}"));
                assert_eq!(c.name, f[4], "{line}");
                c.exit = time;
                out.entry(rank).or_default().push(c);
            }
            _ => {}
        }
    }
    for calls in out.values_mut() {
        calls.sort_by_key(|c| c.enter);
    }
    out
}

/// A phase: (name, begin, end).
type Phase = (String, u64, u64);

/// Per rank, its phases at depth 0.
fn top_level_phases(
    calls: &std::collections::BTreeMap<u32, Vec<Merged>>,
) -> Vec<(u32, Vec<Phase>)> {
    calls
        .iter()
        .map(|(&rank, calls)| {
            let mut stack: Vec<(String, u64)> = Vec::new();
            let mut phases = Vec::new();
            for c in calls {
                match c.name.as_str() {
                    "pmtrace_phase_begin" => stack.push((c.arg.clone(), c.enter)),
                    "pmtrace_phase_end" => {
                        let (name, s) = stack.pop().expect("a phase to end");
                        if stack.is_empty() {
                            phases.push((name, s, c.enter));
                        }
                    }
                    _ => {}
                }
            }
            (rank, phases)
        })
        .collect()
}

/// The legend's entries as rendered: (text, swatch colour as RGBA).
fn legend_of(dom: &str) -> Vec<(String, [f64; 4])> {
    let at = dom.find("id=\"legend\"").expect("a legend");
    let legend = &dom[at..at + dom[at..].find("</div>").expect("the legend ends")];
    let mut out = Vec::new();
    for item in legend.split("<span class=\"lg\"").skip(1) {
        // `><span class="sw" style="background:…"></span>TEXT</span>`
        let text = item.split("</span>").nth(1).unwrap_or("").trim();
        if let Some(c) = item
            .find("background:")
            .map(|i| item[i + 11..].trim_start())
            .and_then(css_color)
        {
            out.push((text.to_string(), c));
        }
    }
    out
}

/// A CSS colour at the start of `s`: `#rrggbb`, `rgb(…)` or `rgba(…)`.
fn css_color(s: &str) -> Option<[f64; 4]> {
    if let Some(h) = s.strip_prefix('#') {
        let v = |i: usize| u8::from_str_radix(h.get(i..i + 2)?, 16).ok().map(f64::from);
        return Some([v(0)?, v(2)?, v(4)?, 1.0]);
    }
    let inner = s.strip_prefix("rgba(").or_else(|| s.strip_prefix("rgb("))?;
    let parts: Vec<f64> = inner[..inner.find(')')?]
        .split(',')
        .map(|p| p.trim().parse().ok())
        .collect::<Option<_>>()?;
    Some([parts[0], parts[1], parts[2], *parts.get(3).unwrap_or(&1.0)])
}

/// `top` at opacity `alpha` over `under`.
fn over(top: [f64; 4], under: [f64; 4], alpha: f64) -> [f64; 4] {
    let m = |i: usize| top[i] * alpha + under[i] * (1.0 - alpha);
    [m(0), m(1), m(2), 1.0]
}

/// Where the page draws: from the `data-geom`, `data-view` and `data-t0`
/// of its body.
struct Geometry {
    left: f64,
    top: f64,
    plot_x0: f64,
    plot_w: f64,
    axis_h: f64,
    lane_h: f64,
    pad: f64,
    scroll: f64,
    par_h: f64,
    v0: f64,
    v1: f64,
    t0: u64,
}

impl Geometry {
    fn of(dom: &str) -> Geometry {
        let body = &dom[dom.find("<body").expect("a body")..];
        let attr = |name: &str| {
            let key = format!("data-{name}=\"");
            let at = body.find(&key).unwrap_or_else(|| panic!("no {key}")) + key.len();
            body[at..at + body[at..].find('"').unwrap()].to_string()
        };
        let g: Vec<f64> = attr("geom")
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        let view: Vec<f64> = attr("view")
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        Geometry {
            left: g[0],
            top: g[1],
            plot_x0: g[2],
            plot_w: g[3],
            axis_h: g[4],
            lane_h: g[5],
            pad: g[6],
            scroll: g[7],
            par_h: g[8],
            v0: view[0],
            v1: view[1],
            t0: attr("t0").parse().unwrap(),
        }
    }

    /// The middle of the part of `s..e` the view shows (it must show some).
    fn middle_in_view(&self, s: u64, e: u64) -> u64 {
        let (v0, v1) = (self.t0 as f64 + self.v0, self.t0 as f64 + self.v1);
        let (a, b) = ((s as f64).max(v0), (e as f64).min(v1));
        assert!(a < b, "{s}..{e} is out of view");
        ((a + b) / 2.0) as u64
    }

    /// The page's x of synchronized time `t`.
    fn x(&self, t: u64) -> f64 {
        let rel = t as f64 - self.t0 as f64;
        let x = self.left + self.plot_x0 + (rel - self.v0) * self.plot_w / (self.v1 - self.v0);
        assert!(
            x > self.left + self.plot_x0 && x < self.left + self.plot_x0 + self.plot_w,
            "time {t} is out of view"
        );
        x
    }

    /// The top of lane `i` (one lane per rank here).
    fn lane_y(&self, i: u32) -> f64 {
        self.top + self.axis_h + f64::from(i) * self.lane_h - self.scroll
    }
}

/// A screenshot's pixels.
struct Screenshot {
    width: usize,
    height: usize,
    channels: usize,
    data: Vec<u8>,
}

impl Screenshot {
    fn read(path: &Path) -> Screenshot {
        let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
        let mut data = vec![0; reader.output_buffer_size().expect("a PNG's size")];
        let info = reader.next_frame(&mut data).expect("a frame");
        data.truncate(info.buffer_size());
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        Screenshot {
            width: info.width as usize,
            height: info.height as usize,
            channels: info.color_type.samples(),
            data,
        }
    }

    /// The colour at (x, y): per channel, the median of the 7 pixels
    /// from x − 3 to x + 3 (a grid line, one pixel wide, is not the
    /// colour of what is drawn there).
    fn at(&self, x: f64, y: f64) -> [f64; 4] {
        let (x, y) = (x.floor() as usize, y.floor() as usize);
        assert!(
            x >= 3 && x + 3 < self.width && y < self.height,
            "({x}, {y}) is off the page"
        );
        let mut out = [0.0, 0.0, 0.0, 1.0];
        for (c, o) in out.iter_mut().take(3).enumerate() {
            let mut v: Vec<u8> = (x - 3..=x + 3)
                .map(|x| self.data[(y * self.width + x) * self.channels + c])
                .collect();
            v.sort_unstable();
            *o = f64::from(v[3]);
        }
        out
    }

    fn near(&self, x: f64, y: f64, want: [f64; 4], tolerance: u8) -> bool {
        let got = self.at(x, y);
        (0..3).all(|c| (got[c] - want[c]).abs() <= f64::from(tolerance))
    }

    fn expect(&self, x: f64, y: f64, want: [f64; 4], tolerance: u8, what: &str) {
        let got = self.at(x, y);
        assert!(
            self.near(x, y, want, tolerance),
            "{what}: at ({x:.0}, {y:.0}) the screenshot has {got:?}, not {want:?}"
        );
    }
}

/// A Parquet export read by DuckDB, pandas and polars (the packages
/// `make tables` put in target/tables): each finds the report's calls per
/// function, messages and bytes, the bytes between each pair of ranks, and
/// every message's rows at its sender's and receiver's calls. On halo2d,
/// the collectives example, halo2d under vector clocks and master_worker
/// (wildcard receives, races) at np=4; and
/// halo2d's from `pmtrace-mpi` at np=3, a partitioned dataset.
#[test]
fn parquet_tables_read_in_duckdb_pandas_and_polars_hold_what_the_report_counts() {
    let cases: [(&str, &[(&str, &str)]); 4] = [
        ("halo2d", &[]),
        ("collectives", &[]),
        ("halo2d", &[("PMTRACE_CLOCKS", "vector")]),
        ("master_worker", &[]),
    ];
    for (k, (name, env)) in cases.into_iter().enumerate() {
        let what = format!("{name} {env:?}");
        let dir = scratch(&format!("parquet-{k}-{name}"));
        let run = mpirun(&dir, 4, &prog(name), &[], Mode::Preload, env);
        assert_eq!(run.code, 0, "{what}: {}", run.stderr);
        let rep = report(&run.trace);
        let out = dir.join("tables");
        export(&run.trace, "parquet", &out);
        let matched = rep["messages"]["matched"].as_u64().unwrap();
        assert!(name == "collectives" || matched > 0, "{what}");
        let found = python_check_with("parquet_check.py", &out, "target/tables");
        assert_eq!(found["parts"], false);
        check_tables(&what, &found, &rep);
        check_analyses(&what, &found["duckdb"], &rep);
        // The races: a row per racy receive and message it could have
        // taken, as `pmtrace races` counts them (master_worker's workers
        // answer a wildcard receive).
        let races = pmtrace(&["races", run.trace.to_str().unwrap(), "--json"]);
        let races: serde_json::Value = serde_json::from_slice(&races.stdout).unwrap();
        let d = &found["duckdb"];
        assert_eq!(d["races"], races["alternatives"], "{what}");
        assert_eq!(d["races_misplaced"], 0, "{what}");
        assert!(name != "master_worker" || races["alternatives"].as_u64().unwrap() > 0);
        if k == 0 {
            analysis_example(&run.trace, &dir.join("analysis.png"), &rep);
            // The same from pmtrace-mpi at np=3, a part per process, over
            // the serial export.
            let trace = run.trace.to_str().unwrap();
            let args = [
                "export",
                trace,
                "--format",
                "parquet",
                "-o",
                out.to_str().unwrap(),
            ];
            let o = crate::parallel::pmtrace_mpi(Mpi::OpenMpi, 3, &args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            for t in ["calls", "messages", "unmatched", "ranks"] {
                assert!(
                    !out.join(format!("{t}.parquet")).exists(),
                    "{t}: the old file"
                );
                for p in 0..3 {
                    let part = out.join(t).join(format!("part-0000{p}.parquet"));
                    assert!(part.is_file(), "{}", part.display());
                }
            }
            let parts = python_check_with("parquet_check.py", &out, "target/tables");
            assert_eq!(parts["parts"], true);
            check_tables(&format!("{what} (pmtrace-mpi)"), &parts, &rep);
        }
    }
}

/// The wait states and the critical path of a serial export are the
/// report's: wait time and waits by kind, the path's length and window.
fn check_analyses(what: &str, d: &serde_json::Value, rep: &serde_json::Value) {
    let by_kind = rep["wait_states"]["by_kind"].as_array().unwrap();
    let waits = d["waits"].as_object().unwrap();
    assert_eq!(waits.len(), by_kind.len(), "{what}: {d}");
    for k in by_kind {
        let got = &waits[k["kind"].as_str().unwrap()];
        assert_eq!(
            got,
            &serde_json::json!([k["ns"], k["count"]]),
            "{what}: {k}"
        );
    }
    assert_eq!(d["waits_misplaced"], 0, "{what}");
    // A row per collective instance's member: each a call of its function.
    assert_eq!(d["instances"], rep["collectives"]["instances"], "{what}");
    assert_eq!(d["members_misplaced"], 0, "{what}");
    for (f, n) in d["collective_calls"].as_object().unwrap() {
        assert_eq!(n, &rep["functions"][f]["calls"], "{what}: {f}");
    }
    let cp = &rep["critical_path"];
    let p = d["path"].as_array().unwrap();
    assert_eq!(p[0], cp["length_ns"], "{what}: the path's length");
    assert_eq!(p[1], cp["from_ns"], "{what}: where the path starts");
    assert_eq!(p[2], cp["to_ns"], "{what}: where the path ends");
    // A row per stretch: one at least, and a new one at each hop between
    // ranks. (How many there are beyond that depends on the run: a rank
    // descheduled past another rank's MPI_Finalize computes all the window
    // long, a path of one row.)
    let hops = cp["hops"].as_u64().unwrap();
    assert!(p[3].as_u64().unwrap() > hops, "{what}: {hops} hops, {d}");
    assert_eq!(d["path_gaps"], 0, "{what}: the path has no gaps");
}

/// What `parquet_check.py` found is what the report counts.
fn check_tables(what: &str, found: &serde_json::Value, rep: &serde_json::Value) {
    let functions = rep["functions"].as_object().unwrap();
    let matched = &rep["messages"]["matched"];
    for reader in ["duckdb", "pandas", "polars"] {
        let f = &found[reader];
        let w = format!("{what}, {reader}: {f}");
        assert_eq!(f["calls"], rep["events"], "{w}");
        assert_eq!(&f["messages"], matched, "{w}");
        assert_eq!(f["bytes"], rep["messages"]["bytes"], "{w}");
        assert_eq!(f["ranks"], rep["ranks"], "{w}");
        let got = f["functions"].as_object().unwrap();
        assert_eq!(got.len(), functions.len(), "{w}");
        for (name, stats) in functions {
            assert_eq!(got[name], stats["calls"], "{w}: {name}");
        }
    }
    let d = &found["duckdb"];
    assert_eq!(d["misplaced"], 0, "{what}: {d}");
    assert_eq!(d["world"], rep["ranks"], "{what}: {d}");
    assert!(d["communicators"].as_u64().unwrap() > rep["ranks"].as_u64().unwrap());
    let calls = rep["events"].as_u64().unwrap();
    assert_eq!(d["ids"], serde_json::json!([calls, 0, calls - 1]), "{what}");
    // The matrix: messages and bytes between each pair, as the report
    // counts them.
    let matrix = rep["matrix"].as_array().unwrap();
    let pairs = d["pairs"].as_object().unwrap();
    assert_eq!(pairs.len(), matrix.len(), "{what}: {d}");
    for cell in matrix {
        let key = format!("{}->{}", cell["src"], cell["dst"]);
        let want = serde_json::json!([cell["count"], cell["bytes"]]);
        assert_eq!(pairs[&key], want, "{what}: {key}");
    }
}

/// examples/analysis.py on a trace: it exports the tables itself, prints
/// the matrix (a row per pair of the report's) and writes its plot.
fn analysis_example(trace: &Path, png: &Path, rep: &serde_json::Value) {
    let o = Command::new("/usr/bin/python3")
        .arg(root().join("examples/analysis.py"))
        .arg(trace)
        .arg(png)
        .env("PYTHONPATH", root().join("target/tables"))
        .output()
        .expect("/usr/bin/python3");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "analysis.py: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for cell in rep["matrix"].as_array().unwrap() {
        let row = format!(
            "{} {} {} {}",
            cell["src"], cell["dst"], cell["count"], cell["bytes"]
        );
        let found = stdout
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row);
        assert!(found, "analysis.py does not show {row}:\n{stdout}");
    }
    assert!(stdout.contains("the 10 slowest messages"), "{stdout}");
    let bytes = std::fs::read(png).expect("the plot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "{} bytes of plot",
        bytes.len()
    );
}
