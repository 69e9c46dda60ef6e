//! The `pmtrace` binary, run as a user runs it, on hand-built traces.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use pmtrace_fixture as fixture;
use pmtrace_format::chunk::{ChunkHeader, ChunkState, CHUNK_HEADER_LEN};
use pmtrace_format::decode_file_header;
use pmtrace_format::pending::PENDING_LEN;

/// A fresh directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("pmtrace-cli-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    /// The two-rank example trace, written to `<scratch>/trace`.
    fn example_trace(&self) -> PathBuf {
        let dir = self.join("trace");
        fixture::two_rank_example().write(&dir).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pmtrace(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pmtrace"));
    for a in args {
        cmd.arg(a);
    }
    cmd.env_remove("PMTRACE_LIB").output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Exit code 1 and exactly one line on stderr, starting `pmtrace: error:`.
fn assert_one_error_line(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("pmtrace: error: "), "{err}");
    err
}

/// Offset of the first byte of the first sealed, non-empty payload.
fn first_sealed_payload(file: &[u8]) -> usize {
    let (_, mut at) = decode_file_header(file).unwrap();
    loop {
        let h = ChunkHeader::decode(&file[at..], at, file.len()).unwrap();
        if h.state == ChunkState::Sealed && h.used > 0 {
            return at + h.records_offset() as usize;
        }
        at += h.capacity as usize;
    }
}

#[test]
fn report_json_has_the_stable_keys_with_the_expected_values() {
    let s = Scratch::new("json");
    let dir = s.example_trace();
    let o = pmtrace(&[&"report", &dir, &"--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ranks"], 2);
    assert_eq!(v["events"], 12);
    assert_eq!(v["messages"]["sent"], 4);
    assert_eq!(v["messages"]["received"], 4);
    assert_eq!(v["messages"]["matched"], 4);
    assert_eq!(v["messages"]["unmatched"], 0);
    assert_eq!(v["violations"]["reversed"], 1);
    assert_eq!(v["violations"]["clock_condition"], 1);
    assert!(v["violations_after_sync"].is_null());
    assert_eq!(v["functions"]["MPI_Isend"]["calls"], 3);
    assert_eq!(v["functions"]["MPI_Isend"]["total_ns"], 6);
    assert_eq!(v["functions"]["MPI_Waitall"]["calls"], 2);
    assert_eq!(v["clocks"]["mode"], "none");
    assert!(v["sync"].is_null());
    assert_eq!(v["incomplete_ranks"], serde_json::json!([]));
    assert_eq!(
        v["matrix"],
        serde_json::json!([{"src": 0, "dst": 1, "count": 4, "bytes": 52}])
    );
}

#[test]
fn report_mu_option_changes_the_clock_condition_count_only() {
    let s = Scratch::new("mu");
    let dir = s.example_trace();
    // The Isends at 100/110/120 ns reach the Waitall that ends at 200 ns:
    // 80 ns is the fastest of them.
    let o = pmtrace(&[&"report", &dir, &"--json", &"--mu-ns", &"85"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["violations"]["reversed"], 1);
    assert_eq!(v["violations"]["clock_condition"], 2);
}

#[test]
fn report_text_shows_summary_profile_and_messages() {
    let s = Scratch::new("text");
    let dir = s.example_trace();
    let o = pmtrace(&[&"report", &dir]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "ranks          2",
        "Profile",
        "MPI_Isend",
        "Message matrix",
        "sent 4, received 4, matched 4",
        "reversed",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    assert!(stderr(&o).is_empty());
}

#[test]
fn missing_directory_is_one_error_line() {
    let s = Scratch::new("missing");
    let err = assert_one_error_line(&pmtrace(&[&"report", &s.join("nope")]));
    assert!(
        err.contains("nope") && err.contains("No such file"),
        "{err}"
    );
}

#[test]
fn truncated_file_is_one_error_line() {
    let s = Scratch::new("truncated");
    let dir = s.example_trace();
    let path = dir.join("rank-00001.pmt");
    let file = std::fs::read(&path).unwrap();
    std::fs::write(&path, &file[..first_sealed_payload(&file) + 100]).unwrap();
    let err = assert_one_error_line(&pmtrace(&[&"report", &dir, &"--json"]));
    assert!(
        err.starts_with("pmtrace: error: truncated trace: rank-00001.pmt: "),
        "{err}"
    );
}

#[test]
fn flipped_bit_is_one_error_line() {
    let s = Scratch::new("flip");
    let dir = s.example_trace();
    let path = dir.join("rank-00000.pmt");
    let mut file = std::fs::read(&path).unwrap();
    let at = first_sealed_payload(&file);
    file[at + 5] ^= 0x20;
    std::fs::write(&path, &file).unwrap();
    let err = assert_one_error_line(&pmtrace(&[&"report", &dir]));
    let chunk = at - CHUNK_HEADER_LEN - PENDING_LEN;
    assert_eq!(err.trim_end(), format!("pmtrace: error: corrupt trace: rank-00000.pmt: chunk checksum mismatch at offset {chunk}"));
}

#[test]
fn export_text_writes_one_line_per_record() {
    let s = Scratch::new("export");
    let dir = s.example_trace();
    let out = s.join("events.txt");
    let o = pmtrace(&[&"export", &dir, &"--format", &"text", &"-o", &out]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text.lines().count(),
        18,
        "12 calls and 6 communicator definitions"
    );
    assert!(text.lines().all(|l| l.starts_with('r')));

    let o = pmtrace(&[&"export", &dir, &"--format", &"text", &"-o", &"-"]);
    assert_eq!(stdout(&o), text, "`-o -` writes the same to stdout");
}

#[test]
fn an_otf2_archive_needs_a_directory_not_stdout() {
    let s = Scratch::new("otf2");
    let dir = s.example_trace();
    let o = pmtrace(&[&"export", &dir, &"--format", &"otf2", &"-o", &"-"]);
    let err = assert_one_error_line(&o);
    assert!(err.contains("an OTF2 archive is a directory"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(pmtrace(&[&"report"]).status.code(), Some(2));
    assert_eq!(pmtrace(&[&"frobnicate"]).status.code(), Some(2));
    assert_eq!(
        pmtrace(&[&"export", &"d", &"--format", &"svg", &"-o", &"x"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn every_verb_has_help_that_stands_on_its_own() {
    for verb in ["report", "export", "run", "synth"] {
        let o = pmtrace(&[&verb, &"--help"]);
        assert!(o.status.success());
        let help = stdout(&o);
        assert!(help.contains(&format!("Usage: pmtrace {verb}")), "{help}");
        assert!(
            help.lines().count() > 8,
            "{verb} help explains itself:\n{help}"
        );
    }
    let top = stdout(&pmtrace(&[&"--help"]));
    for verb in ["report", "export", "run", "synth"] {
        assert!(top.contains(verb), "{top}");
    }
}

/// A stand-in preload library (never loaded: the launchers here are scripts
/// that do not exec anything dynamically linked with it... except `sh`,
/// which just warns that it cannot preload it).
fn fake_library(s: &Scratch) -> PathBuf {
    let lib = s.join("libpmtrace.so");
    std::fs::write(&lib, b"").unwrap();
    lib
}

fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn run_sets_preload_and_trace_dir_and_returns_the_launcher_exit_code() {
    let s = Scratch::new("run");
    let lib = fake_library(&s);
    let out = s.join("t1");
    let launcher = s.join("launcher");
    write_script(
        &launcher,
        "printf '%s\\n' \"$LD_PRELOAD\" \"$PMTRACE_DIR\" \"$*\"\nexit 3\n",
    );
    let o = pmtrace(&[
        &"run", &"--lib", &lib, &"--out", &out, &"--", &launcher, &"-np", &"2", &"./app",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
    let lib = std::fs::canonicalize(&lib).unwrap();
    assert!(
        lines[0] == lib.to_str().unwrap() || lines[0].starts_with(&format!("{}:", lib.display())),
        "{lines:?}"
    );
    assert_eq!(
        lines[1],
        std::fs::canonicalize(&out).unwrap().to_str().unwrap()
    );
    assert_eq!(
        lines[2], "-np 2 ./app",
        "no -x for a launcher that is not Open MPI"
    );
    assert!(out.is_dir());
    assert!(stderr(&o).contains("may be incomplete"), "{}", stderr(&o));
}

#[test]
fn run_exports_the_variables_through_open_mpi_and_reports_the_trace() {
    let s = Scratch::new("ompi");
    let lib = fake_library(&s);
    let out = s.join("t2");
    let mpirun = s.join("mpirun");
    write_script(
        &mpirun,
        "if [ \"$1\" = --version ]; then echo 'mpirun (Open MPI) 4.1.4'; exit 0; fi\necho \"$*\"\n: > \"$PMTRACE_DIR/rank-00000.pmt\"\n",
    );
    let o = pmtrace(&[
        &"run", &"--lib", &lib, &"--out", &out, &"--", &mpirun, &"-np", &"4", &"./app",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "-x LD_PRELOAD -x PMTRACE_DIR -np 4 ./app\n");
    assert!(
        stderr(&o).ends_with(&format!("pmtrace: trace in {}\n", out.display())),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_refuses_an_existing_trace_directory() {
    let s = Scratch::new("exists");
    let lib = fake_library(&s);
    let out = s.join("already");
    std::fs::create_dir(&out).unwrap();
    let err = assert_one_error_line(&pmtrace(&[
        &"run", &"--lib", &lib, &"--out", &out, &"--", &"true",
    ]));
    assert!(err.contains("already exists"), "{err}");
}

#[test]
fn run_without_a_library_says_where_it_looked() {
    let s = Scratch::new("nolib");
    let err = assert_one_error_line(&pmtrace(&[
        &"run",
        &"--lib",
        &s.join("absent.so"),
        &"--",
        &"true",
    ]));
    assert!(
        err.contains("absent.so") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn synth_writes_a_trace_with_its_truth_and_one_summary_line() {
    let s = Scratch::new("synth");
    let dir = s.join("trace");
    let o = pmtrace(&[
        &"synth",
        &dir,
        &"--ranks",
        &"6",
        &"--iterations",
        &"4",
        &"--imbalance",
        &"1:3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with("synth: 6 ranks (2x3 grid, 1 host), 4 iterations, "),
        "{out}"
    );
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    assert_eq!(truth["imbalance"]["rank"], 1);
    assert_eq!(truth["imbalance"]["factor"], 3.0);
    let o = pmtrace(&[&"report", &dir, &"--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ranks"], 6);
    assert_eq!(v["events"], truth["events"]);
    assert_eq!(v["messages"]["matched"], truth["messages"]);
    assert_eq!(v["messages"]["unmatched"], 0);
    assert_eq!(v["clocks"]["lamport_violations"], 0);
    // The directory holds a trace now: a second run refuses.
    let o = pmtrace(&[&"synth", &dir, &"--ranks", &"6"]);
    let err = assert_one_error_line(&o);
    assert!(err.contains("already holds a trace"), "{err}");
    let o = pmtrace(&[
        &"synth",
        &s.join("other"),
        &"--ranks",
        &"6",
        &"--imbalance",
        &"9",
    ]);
    let err = assert_one_error_line(&o);
    assert!(err.contains("imbalanced rank 9"), "{err}");
}

/// `Trace::open` kept every rank file open until all were decoded: a trace
/// of 65,536 ranks failed with "Too many open files" under a limit of
/// 20,000. Here 600 ranks under a limit of 256.
#[test]
fn report_reads_more_rank_files_than_the_process_may_open() {
    let s = Scratch::new("nofile");
    let dir = s.join("trace");
    let o = pmtrace(&[&"synth", &dir, &"--ranks", &"600", &"--iterations", &"1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" report \"$1\" --json")
        .arg(env!("CARGO_BIN_EXE_pmtrace"))
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ranks"], 600);
    assert_eq!(v["messages"]["unmatched"], 0);
}
