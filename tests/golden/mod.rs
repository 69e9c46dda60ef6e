//! Golden outputs: what every verb of the CLI makes of a fixed set of
//! recorded traces (`tests/golden/<case>/trace`), kept from the code as it
//! stood before issue 18 changed the trace model, so that a refactor shows
//! its outputs unchanged (`tests/golden/README.md`).
//!
//! Kept whole: `report --json` before and after `pmtrace sync`, and the
//! sync file's report. Kept as length and hash (they are large): the
//! synced times in `sync.pmts`, the text, Chrome and Perfetto exports,
//! `otf2-print` of the OTF2 archive, the merged log and the HTML timeline.
//! The time `pmtrace sync` took (`seconds`) is the one value left out.
//!
//! `PMTRACE_BLESS=1` writes the expected files instead of comparing (only
//! when an output is meant to change; say why in the commit).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{cli, root, scratch};

pub(crate) fn cases() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("tests/golden"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("trace").is_dir())
        .collect();
    v.sort();
    v
}

pub(crate) fn pmtrace(args: &[&str]) -> Vec<u8> {
    let out = Command::new(cli()).args(args).output().expect("pmtrace");
    assert!(
        out.status.success(),
        "pmtrace {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A JSON document without the keys named `seconds` (run times).
fn without_seconds(mut v: serde_json::Value) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.remove("seconds");
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

pub(crate) fn json_text(bytes: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(bytes).expect("JSON");
    serde_json::to_string_pretty(&without_seconds(v)).unwrap() + "\n"
}

/// `sync.pmts` split into its report (JSON) and its times (the rest but
/// the CRC, which covers the report's run time too).
pub(crate) fn sync_parts(bytes: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&bytes[..8], b"PMTSYNC1");
    let n = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let json = json_text(&bytes[12..12 + n]);
    (json, bytes[12 + n..bytes.len() - 4].to_vec())
}

fn digest(bytes: &[u8]) -> String {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write(bytes);
    format!("{} {:016x}", bytes.len(), h.finish())
}

/// (output name, content or digest) pairs.
type Named = Vec<(String, String)>;

/// Runs every verb on a copy of `case`'s trace; returns (file name,
/// content) for the kept-whole outputs and (name, digest) for the others.
fn outputs(case: &Path, work: &Path) -> (Named, Named) {
    let trace = work.join("trace");
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(&trace).unwrap();
    for f in std::fs::read_dir(case.join("trace")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, trace.join(f.file_name().unwrap())).unwrap();
    }
    let t = trace.to_str().unwrap();
    let out = |name: &str| work.join(name).to_str().unwrap().to_string();
    let mut whole = vec![(
        "report.json".to_string(),
        json_text(&pmtrace(&["report", t, "--json"])),
    )];
    let mut hashed = Vec::new();
    for (name, format) in [
        ("text.txt", "text"),
        ("chrome.json", "chrome"),
        ("perfetto.pb", "perfetto"),
    ] {
        // Unsynced: Perfetto and Chrome sync in memory first.
        pmtrace(&["export", t, "--format", format, "-o", &out(name)]);
        hashed.push((name.to_string(), digest(&std::fs::read(out(name)).unwrap())));
    }
    pmtrace(&["sync", t]);
    let (sync_json, times) = sync_parts(&std::fs::read(trace.join("sync.pmts")).unwrap());
    whole.push(("sync.json".to_string(), sync_json));
    hashed.push(("sync.pmts times".to_string(), digest(&times)));
    whole.push((
        "report-synced.json".to_string(),
        json_text(&pmtrace(&["report", t, "--json"])),
    ));
    // The insight verbs (added with issue 19), on synchronized time.
    for (name, verb) in [
        ("critical-path.json", "critical-path"),
        ("races.json", "races"),
    ] {
        whole.push((name.to_string(), json_text(&pmtrace(&[verb, t, "--json"]))));
    }
    pmtrace(&["export", t, "--format", "otf2", "-o", &out("otf2")]);
    let printed = Command::new("otf2-print")
        .arg(work.join("otf2/traces.otf2"))
        .output()
        .expect("otf2-print (make deps installs otf2-tools)");
    assert!(printed.status.success(), "otf2-print: {:?}", printed);
    hashed.push(("otf2-print.txt".to_string(), digest(&printed.stdout)));
    for (name, verb) in [("merge.txt", "merge"), ("timeline.html", "timeline")] {
        pmtrace(&[verb, t, "-o", &out(name)]);
        hashed.push((name.to_string(), digest(&std::fs::read(out(name)).unwrap())));
    }
    (whole, hashed)
}

#[test]
fn every_verb_gives_the_golden_outputs_on_the_recorded_traces() {
    let bless = std::env::var_os("PMTRACE_BLESS").is_some();
    let cases = cases();
    assert!(cases.len() >= 10, "{} golden cases", cases.len());
    let mut differ = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let work = scratch(&format!("golden-{name}"));
        let (whole, hashed) = outputs(case, &work);
        let expect = case.join("expect");
        let hashes: String = hashed.iter().map(|(f, d)| format!("{f}: {d}\n")).collect();
        if bless {
            std::fs::create_dir_all(&expect).unwrap();
            for (f, text) in &whole {
                std::fs::write(expect.join(f), text).unwrap();
            }
            std::fs::write(expect.join("hashes.txt"), &hashes).unwrap();
            continue;
        }
        for (f, text) in &whole {
            let want = std::fs::read_to_string(expect.join(f))
                .unwrap_or_else(|e| panic!("{name}/expect/{f}: {e} (PMTRACE_BLESS=1 writes it)"));
            if &want != text {
                std::fs::write(work.join(format!("actual-{f}")), text).unwrap();
                differ.push(format!("{name}/{f} (actual in {})", work.display()));
            }
        }
        let want = std::fs::read_to_string(expect.join("hashes.txt")).unwrap();
        for (line, got) in want.lines().zip(hashes.lines()) {
            if line != got {
                differ.push(format!(
                    "{name}: {got}, golden {line} (outputs in {})",
                    work.display()
                ));
            }
        }
        assert_eq!(
            want.lines().count(),
            hashes.lines().count(),
            "{name}/expect/hashes.txt"
        );
    }
    assert!(
        differ.is_empty(),
        "outputs differ from the golden ones:\n{}",
        differ.join("\n")
    );
}
