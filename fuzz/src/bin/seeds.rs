//! Writes the seed corpora of the targets (corpus/<target>/) from the
//! golden traces: `cargo run --release --bin seeds` in fuzz/. Not a target.

use pmtrace_fuzz::{copy_golden, golden, layout, scratch, GOLDEN};
use pmtrace_matching::Messages;
use pmtrace_sync::{sync, SyncParams};
use pmtrace_trace::Trace;
use std::path::Path;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let base = std::fs::read(golden("ring").join("rank-00000.pmt")).unwrap();
    let (header, _) = pmtrace_format::decode_file_header(&base).unwrap();
    let base = serde_json::to_value(header).unwrap();
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    let tmp = scratch("seeds");
    for (g, name) in GOLDEN.iter().enumerate() {
        // trace: the whole trace in compact form; one rank file as it is.
        let dir = golden(name);
        let mut compact = vec![1u8];
        let mut ranks: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "pmt"))
            .collect();
        ranks.sort();
        for r in &ranks {
            layout::compact(&std::fs::read(r).unwrap(), &base, &mut compact)
                .expect("a golden rank file");
        }
        put("trace", &format!("{name}.compact"), &compact);
        // The compact form stands for the same trace.
        let back = tmp.join(format!("{name}-expanded"));
        std::fs::create_dir_all(&back).unwrap();
        for (r, f) in layout::expand(&compact, &base).iter().enumerate() {
            std::fs::write(back.join(pmtrace_format::rank_file_name(r as u32)), f).unwrap();
        }
        let (a, b) = (Trace::open(&dir).unwrap(), Trace::open(&back).unwrap());
        let events = |t: &Trace| t.ranks.iter().map(|r| r.events()).collect::<Vec<_>>();
        assert_eq!(
            events(&a),
            events(&b),
            "{name}: the compact form reads the same"
        );
        assert!(a.ranks.iter().all(|r| r.events() > 0), "{name}");
        // sync: what `pmtrace sync` writes for it, without its checksum.
        let copy = tmp.join(name);
        copy_golden(name, &copy);
        let trace = Trace::open(&copy).unwrap();
        let messages = Messages::build(&trace);
        let path = sync(&trace, &messages, &SyncParams::default())
            .write(&trace)
            .unwrap();
        let file = std::fs::read(path).unwrap();
        let mut seed = vec![g as u8, 0];
        seed.extend_from_slice(&file[..file.len() - 4]);
        put("sync", &format!("{name}.pmts"), &seed);
    }
    // A world of one rank with no chunk.
    let mut one = vec![1u8];
    let patch = serde_json::json!({"world_size": 1});
    layout::section(&mut one, b'P', &serde_json::to_vec(&patch).unwrap());
    put("trace", "header-only.compact", &one);
    let options: &[&[&str]] = &[
        &["report", "t", "--json", "--memory", "800M"],
        &[
            "sync",
            "t",
            "--gamma",
            "0.5",
            "--ramp",
            "0.02",
            "--delta-ns",
            "100",
        ],
        &[
            "timeline", "t", "-o", "x.html", "--from", "1.5s", "--to", "250ms",
        ],
        &[
            "synth",
            "out",
            "--ranks",
            "16",
            "--imbalance",
            "3:2.5",
            "--imbalance-iterations",
            "2..9",
        ],
        &[
            "synth",
            "out",
            "--ranks",
            "4",
            "--compute-us",
            "10",
            "--offset-us",
            "3",
            "--drift-ppm",
            "1",
        ],
        &[
            "export", "t", "--format", "perfetto", "-o", "-", "--memory", "1.5G",
        ],
        &[
            "run", "--out", "d", "--", "mpirun", "-np", "2", "./a", ":", "-np", "1", "./b",
        ],
        &["races", "t", "--clocks", "vector"],
        &["critical-path", "t"],
    ];
    for (i, a) in options.iter().enumerate() {
        put("options", &format!("{i}"), a.join("\0").as_bytes());
    }
    let envs = [
        "PMTRACE_BUFFER_SIZE=1M\nPMTRACE_TIMER=tsc\nPMTRACE_CLOCKS=vector",
        "PMTRACE_CLOCK_SIM=seed=4,offset_us=5000,drift_ppm=50,drift_change_s=2,hosts=2",
        "PMTRACE_EXCLUDE=time,probe,test,MPI_Comm_rank,send\nPMTRACE_SHM=off",
        "PMTRACE_SYNC_REPS=25\nPMTRACE_DIR=/x\nPMTRACE_COLOUR=red\nPMTRACE_BUFFER_SIZE=64KiB",
    ];
    for (i, e) in envs.iter().enumerate() {
        put("env", &format!("{i}"), e.as_bytes());
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
