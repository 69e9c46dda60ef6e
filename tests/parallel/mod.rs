//! `pmtrace-mpi`: the verbs run in parallel under MPI write exactly what
//! `pmtrace` writes, on the golden traces, at several process counts
//! (a count that does not divide the ranks among them), under Open MPI and
//! MPICH; and the `pmtrace` binary links no MPI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use crate::golden::{cases, json_text, pmtrace, sync_parts};
use crate::support::{make_once, release, root, scratch, Mpi};

static MPICH: Once = Once::new();

/// `pmtrace-mpi` built for `mpi`'s family.
fn binary(mpi: Mpi) -> PathBuf {
    match mpi {
        Mpi::Mpich => {
            make_once(&MPICH, "mpich");
            root().join("target/mpich/release/pmtrace-mpi")
        }
        _ => release("pmtrace-mpi"),
    }
}

/// `mpirun -np np pmtrace-mpi args...` under `mpi`.
pub(crate) fn pmtrace_mpi(mpi: Mpi, np: u32, args: &[&str]) -> Output {
    let (launcher, ompi) = mpi.launcher();
    let mut cmd = Command::new(launcher);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.arg("-np").arg(np.to_string());
    if ompi {
        // One node's transports named: Open MPI then skips probing the
        // others at each start (about 0.2 s of each of the hundreds of
        // launches here; the verbs' messages are the same).
        cmd.arg("--oversubscribe")
            .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    cmd.arg(binary(mpi)).args(args).output().expect("mpirun")
}

/// The rank files of a golden case, copied to `dir`.
fn copy_trace(case: &Path, dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(case.join("trace")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
}

/// `pmtrace sync` and `pmtrace-mpi sync` at `nps` on every golden trace:
/// the same printed report (JSON and text) and the same `sync.pmts` (but
/// the seconds each took; its checksum checked by reading it back); and
/// the same reports and critical paths, on recorded and on synchronized
/// time; the same races, on recorded and on vector clocks.
fn sync_is_the_serial_one(mpi: Mpi, nps: &[u32]) {
    let dir = scratch(&format!("parallel-sync-{}", mpi.tag()));
    for case in cases() {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let serial = dir.join(format!("{name}-serial"));
        copy_trace(&case, &serial);
        let path_recorded = critical_path(&serial);
        let report_recorded = report(&serial);
        let otf2_recorded = otf2(&serial, None);
        let perfetto_recorded = perfetto(&serial, None);
        let parquet_recorded = parquet(&serial, None);
        let races_recorded = pmtrace(&["races", serial.to_str().unwrap(), "--json"]);
        let races_vector = pmtrace(&[
            "races",
            serial.to_str().unwrap(),
            "--json",
            "--clocks",
            "vector",
        ]);
        let want = json_text(&pmtrace(&["sync", serial.to_str().unwrap(), "--json"]));
        let want_file = sync_parts(&std::fs::read(serial.join("sync.pmts")).unwrap());
        let path_synced = critical_path(&serial);
        let report_synced = report(&serial);
        let otf2_synced = otf2(&serial, None);
        let perfetto_synced = perfetto(&serial, None);
        let parquet_synced = parquet(&serial, None);
        for &np in nps {
            let par = dir.join(format!("{name}-np{np}"));
            copy_trace(&case, &par);
            let path = |what: &[u8]| {
                let out = run_ok(mpi, np, &["critical-path", par.to_str().unwrap(), "--json"]);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(what),
                    "{name} at np = {np}: the critical path"
                );
            };
            let same_report = |what: &str| {
                let out = run_ok(mpi, np, &["report", par.to_str().unwrap(), "--json"]);
                assert_eq!(json_text(&out), what, "{name} at np = {np}: the report");
            };
            path(&path_recorded);
            same_report(&report_recorded);
            assert!(
                otf2(&par, Some((mpi, np))) == otf2_recorded,
                "{name} at np = {np}: the OTF2 archive"
            );
            // Not synced: both sync in memory first.
            assert!(
                perfetto(&par, Some((mpi, np))) == perfetto_recorded,
                "{name} at np = {np}: the Perfetto trace"
            );
            assert!(
                parquet(&par, Some((mpi, np))) == parquet_recorded,
                "{name} at np = {np}: the Parquet tables"
            );
            // Races, on the recorded clocks and on vector clocks.
            for (races, clocks) in [(&races_recorded, "recorded"), (&races_vector, "vector")] {
                let mut args = vec!["races", par.to_str().unwrap(), "--json"];
                if clocks == "vector" {
                    args.extend(["--clocks", "vector"]);
                }
                let out = run_ok(mpi, np, &args);
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(races),
                    "{name} at np = {np}: the races ({clocks} clocks)"
                );
            }
            let out = run_ok(mpi, np, &["sync", par.to_str().unwrap(), "--json"]);
            assert_eq!(
                json_text(&out),
                want,
                "{name} at np = {np}: the printed report"
            );
            let got = sync_parts(&std::fs::read(par.join("sync.pmts")).unwrap());
            assert_eq!(
                got.0, want_file.0,
                "{name} at np = {np}: the report in sync.pmts"
            );
            assert!(
                got.1 == want_file.1,
                "{name} at np = {np}: the synced times"
            );
            path(&path_synced);
            same_report(&report_synced);
            assert!(
                otf2(&par, Some((mpi, np))) == otf2_synced,
                "{name} at np = {np}: the OTF2 archive on synchronized time"
            );
            assert!(
                perfetto(&par, Some((mpi, np))) == perfetto_synced,
                "{name} at np = {np}: the Perfetto trace on synchronized time"
            );
            assert!(
                parquet(&par, Some((mpi, np))) == parquet_synced,
                "{name} at np = {np}: the Parquet tables on synchronized time"
            );
            // Whole, checksum included: the serial report reads it.
            let report = pmtrace(&["report", par.to_str().unwrap(), "--json"]);
            let report: serde_json::Value = serde_json::from_slice(&report).unwrap();
            assert!(
                report["violations_after_sync"].is_object(),
                "{name} at np = {np}"
            );
        }
        // The text form too, at one count.
        let text_serial = pmtrace(&["sync", serial.to_str().unwrap()]);
        let par = dir.join(format!("{name}-np{}", nps[nps.len() - 1]));
        let out = pmtrace_mpi(mpi, nps[nps.len() - 1], &["sync", par.to_str().unwrap()]);
        // Less the seconds each took, and the directory.
        let strip = |b: &[u8], d: &Path| {
            String::from_utf8_lossy(b)
                .lines()
                .map(|l| match (l.starts_with("Timestamp sync"), l.rfind(';')) {
                    (true, Some(at)) => l[..at].to_string(),
                    _ => l.replace(d.to_str().unwrap(), "DIR"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            strip(&out.stdout, &par),
            strip(&text_serial, &serial),
            "{name}: the text"
        );
        let out = pmtrace_mpi(
            mpi,
            nps[nps.len() - 1],
            &["critical-path", par.to_str().unwrap()],
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&pmtrace(&["critical-path", serial.to_str().unwrap()])),
            "{name}: the critical path's text"
        );
        let out = pmtrace_mpi(mpi, nps[nps.len() - 1], &["report", par.to_str().unwrap()]);
        assert_eq!(
            strip(&out.stdout, &par),
            strip(&pmtrace(&["report", serial.to_str().unwrap()]), &serial),
            "{name}: the report's text"
        );
        let out = pmtrace_mpi(mpi, nps[nps.len() - 1], &["races", par.to_str().unwrap()]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&pmtrace(&["races", serial.to_str().unwrap()])),
            "{name}: the races' text"
        );
    }
}

/// The OTF2 archive `pmtrace export --format otf2` writes of the trace
/// in `dir` (`pmtrace-mpi` at `np` under `mpi` when given): what
/// `otf2-print -A -C` shows but the archive's random identifier, and the
/// bytes of every file but the anchor.
fn otf2(dir: &Path, parallel: Option<(Mpi, u32)>) -> (String, Vec<(String, Vec<u8>)>) {
    let out = dir.join("otf2");
    let args = [
        "export",
        dir.to_str().unwrap(),
        "--format",
        "otf2",
        "-o",
        out.to_str().unwrap(),
    ];
    let line = match parallel {
        None => pmtrace(&args),
        Some((mpi, np)) => run_ok(mpi, np, &args),
    };
    assert!(String::from_utf8_lossy(&line).starts_with("OTF2 archive "));
    let printed = Command::new("otf2-print")
        .args(["-A", "-C"])
        .arg(out.join("traces.otf2"))
        .output()
        .expect("otf2-print");
    assert!(printed.status.success());
    let printed: String = String::from_utf8_lossy(&printed.stdout)
        .lines()
        .filter(|l| !l.starts_with("Trace identifier"))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut files = vec![(
        "traces.def".to_string(),
        std::fs::read(out.join("traces.def")).unwrap(),
    )];
    let mut locs: Vec<_> = std::fs::read_dir(out.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    locs.sort();
    for p in locs {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        files.push((name, std::fs::read(&p).unwrap()));
    }
    std::fs::remove_dir_all(&out).unwrap();
    (printed, files)
}

/// The Perfetto trace `pmtrace export --format perfetto` writes of the
/// trace in `dir` (`pmtrace-mpi` at `np` under `mpi` when given), to a
/// file, and to standard output when in parallel at one process count.
fn perfetto(dir: &Path, parallel: Option<(Mpi, u32)>) -> Vec<u8> {
    let file = dir.join("trace.pb");
    let args = [
        "export",
        dir.to_str().unwrap(),
        "--format",
        "perfetto",
        "-o",
    ];
    let bytes = match parallel {
        None => {
            let mut a = args.to_vec();
            a.push(file.to_str().unwrap());
            pmtrace(&a);
            std::fs::read(&file).unwrap()
        }
        Some((mpi, np)) => {
            let mut a = args.to_vec();
            a.push(file.to_str().unwrap());
            run_ok(mpi, np, &a);
            let bytes = std::fs::read(&file).unwrap();
            if np == 3 {
                let mut a = args.to_vec();
                a.push("-");
                let o = pmtrace_mpi(mpi, np, &a);
                assert!(o.stdout == bytes, "standard output and file differ");
            }
            bytes
        }
    };
    std::fs::remove_file(&file).unwrap();
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".pmtrace"))
        .collect();
    assert!(left.is_empty(), "parts left behind: {left:?}");
    bytes
}

/// The tables `pmtrace export --format parquet` writes of the trace in
/// `dir` (`pmtrace-mpi` at `np` under `mpi` when given, a part per
/// process): each table's rows as text, sorted.
fn parquet(dir: &Path, parallel: Option<(Mpi, u32)>) -> Vec<(String, Vec<String>)> {
    let out = dir.join("tables");
    let args = [
        "export",
        dir.to_str().unwrap(),
        "--format",
        "parquet",
        "-o",
        out.to_str().unwrap(),
    ];
    let line = match parallel {
        None => pmtrace(&args),
        Some((mpi, np)) => run_ok(mpi, np, &args),
    };
    assert!(String::from_utf8_lossy(&line).starts_with("Parquet tables in "));
    let mut tables = Vec::new();
    // Every table: a part per process, but one of communicators and of
    // the critical path (process 0's).
    let tables_of = [
        "calls",
        "messages",
        "unmatched",
        "ranks",
        "phases",
        "communicators",
        "collectives",
        "wait_states",
        "critical_path",
        "races",
    ];
    for t in tables_of {
        let files = match parallel {
            None => vec![out.join(format!("{t}.parquet"))],
            Some((_, np)) => {
                let one = ["communicators", "critical_path", "races"].contains(&t);
                let parts = if one { 1 } else { np };
                let files: Vec<PathBuf> = (0..parts)
                    .map(|p| out.join(t).join(format!("part-{p:05}.parquet")))
                    .collect();
                let found = std::fs::read_dir(out.join(t)).unwrap().count();
                assert_eq!(found, files.len(), "{t}: its parts");
                files
            }
        };
        let mut rows = Vec::new();
        for f in files {
            rows.extend(parquet_rows(&f));
        }
        rows.sort();
        tables.push((t.to_string(), rows));
    }
    std::fs::remove_dir_all(&out).unwrap();
    tables
}

/// Each row of a Parquet file as text, its columns named.
fn parquet_rows(path: &Path) -> Vec<String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
    use arrow_array::Array;
    use arrow_schema::DataType;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let schema = batch.schema();
        for i in 0..batch.num_rows() {
            let mut row = String::new();
            for (f, col) in schema.fields().iter().zip(batch.columns()) {
                let v = if col.is_null(i) {
                    "null".to_string()
                } else {
                    match col.data_type() {
                        DataType::UInt32 => col.as_primitive::<UInt32Type>().value(i).to_string(),
                        DataType::UInt64 => col.as_primitive::<UInt64Type>().value(i).to_string(),
                        DataType::Int32 => col.as_primitive::<Int32Type>().value(i).to_string(),
                        DataType::Int64 => col.as_primitive::<Int64Type>().value(i).to_string(),
                        DataType::Boolean => col.as_boolean().value(i).to_string(),
                        DataType::Utf8 => col.as_string::<i32>().value(i).to_string(),
                        DataType::Dictionary(..) => {
                            let d = col.as_dictionary::<Int32Type>();
                            let k = d.keys().value(i) as usize;
                            d.values().as_string::<i32>().value(k).to_string()
                        }
                        DataType::List(_) => {
                            let l = col.as_list::<i32>().value(i);
                            format!("{:?}", l.as_primitive::<UInt32Type>().values())
                        }
                        t => panic!("{}: column {} of type {t}", path.display(), f.name()),
                    }
                };
                row.push_str(&format!("{}={v} ", f.name()));
            }
            rows.push(row);
        }
    }
    rows
}

/// What `pmtrace report DIR --json` prints, less the seconds sync took.
fn report(dir: &Path) -> String {
    json_text(&pmtrace(&["report", dir.to_str().unwrap(), "--json"]))
}

/// What `mpirun -np np pmtrace-mpi args...` under `mpi` prints, after it
/// succeeded.
fn run_ok(mpi: Mpi, np: u32, args: &[&str]) -> Vec<u8> {
    let out = pmtrace_mpi(mpi, np, args);
    assert!(
        out.status.success(),
        "{args:?} at np = {np}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What `pmtrace critical-path DIR --json` prints.
fn critical_path(dir: &Path) -> Vec<u8> {
    pmtrace(&["critical-path", dir.to_str().unwrap(), "--json"])
}

#[test]
fn pmtrace_mpi_verbs_write_what_pmtrace_writes_under_open_mpi() {
    sync_is_the_serial_one(Mpi::OpenMpi, &[1, 2, 3, 4]);
}

#[test]
fn pmtrace_mpi_verbs_write_what_pmtrace_writes_under_mpich() {
    sync_is_the_serial_one(Mpi::Mpich, &[1, 2, 3, 4]);
}

#[test]
fn a_parallel_verb_on_a_bad_directory_is_one_line_and_exit_status_1() {
    let dir = scratch("parallel-errors");
    let out = pmtrace_mpi(
        Mpi::OpenMpi,
        2,
        &["sync", dir.join("none").to_str().unwrap()],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pmtrace-mpi:"))
        .collect();
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(ours[0].starts_with("pmtrace-mpi: error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The libraries an ELF file asks for (`readelf -d`).
fn needed(path: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(path)
        .output()
        .expect("readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split('[').nth(1)?.trim_end_matches(']').to_string()))
        .collect()
}

#[test]
fn the_pmtrace_binary_links_no_mpi_and_pmtrace_mpi_does() {
    let cli = needed(&release("pmtrace"));
    assert!(!cli.is_empty(), "readelf read the CLI");
    assert!(cli.iter().all(|l| !l.contains("mpi")), "{cli:?}");
    let par = needed(&release("pmtrace-mpi"));
    assert!(par.iter().any(|l| l.starts_with("libmpi")), "{par:?}");
}

#[test]
fn pmtrace_mpi_critical_path_splits_by_phase_as_pmtrace_does() {
    use crate::support::{mpirun, prog, Mode};
    let dir = scratch("parallel-phases");
    // 4 ranks over 3 processes: blocks of 1, 1 and 2 ranks.
    let run = mpirun(&dir, 4, &prog("phases"), &["40"], Mode::Preload, &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let trace = run.trace.to_str().unwrap();
    for synced in [false, true] {
        if synced {
            pmtrace(&["sync", trace]);
        }
        let want = critical_path(&run.trace);
        assert!(
            String::from_utf8_lossy(&want).contains("\"by_phase\""),
            "the path has phases"
        );
        let out = pmtrace_mpi(Mpi::OpenMpi, 3, &["critical-path", trace, "--json"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&want),
            "synced: {synced}"
        );
    }
}
