//! Fuzz target `env`: the runtime's `PMTRACE_*` settings. The input is an
//! environment, one `NAME=VALUE` per line; it is read as the runtime reads
//! its environment at `MPI_Init` (against the function table of a golden
//! trace), and a simulated clock it asks for is run for a few ranks.

use pmtrace_config::Config;
use pmtrace_format::Kind;
use pmtrace_fuzz::{golden, justify, Bounded};

#[global_allocator]
static ALLOC: Bounded = Bounded;

fn main() {
    let file = std::fs::read(golden("ring").join("rank-00000.pmt")).unwrap();
    let (header, _) = pmtrace_format::decode_file_header(&file).unwrap();
    let names: Vec<(String, Kind)> = header
        .functions
        .iter()
        .map(|f| (f.name.clone(), Kind::from_name(&f.kind).unwrap()))
        .collect();
    let functions: Vec<(&str, Kind)> = names.iter().map(|(n, k)| (n.as_str(), *k)).collect();
    afl::fuzz!(|input: &[u8]| {
        justify(input.len(), 64);
        let text = String::from_utf8_lossy(input);
        let vars = text.lines().filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        });
        let cfg = Config::from_vars(vars, &functions);
        let _ = cfg.effective("/dev/shm/trace", "tsc", &functions);
        if let Some(spec) = cfg.clock_sim {
            for rank in [0, 1, 7, 4095] {
                let _ = spec.host_name("node", rank, 4096);
                let clock = spec.for_rank(rank, 1_000_000_000);
                for t in [0, 1_000_000_000, 3_600_000_000_000, u64::MAX / 4] {
                    let _ = clock.true_time(clock.apply(t));
                }
            }
        }
        justify(usize::MAX / 2, 1);
    });
}
