//! The capture runtime's `PMTRACE_*` settings. A bad value or an unknown
//! variable gets one warning (printed by rank 0) and the default;
//! configuration never breaks the application.
//!
//! Pure: the runtime hands over its environment and its function table,
//! so that the parsing is tested and fuzzed (fuzz/, target `env`) without
//! MPI.

use std::collections::BTreeMap;

pub const DEFAULT_BUFFER: usize = 4 << 20;
pub const MIN_BUFFER: usize = 64 << 10;
pub const MAX_BUFFER: usize = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerChoice {
    /// TSC where invariant, else monotonic.
    Auto,
    Tsc,
    Monotonic,
}

/// Which logical clocks messages carry (`PMTRACE_CLOCKS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    None = 0,
    Lamport = 1,
    Vector = 2,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Lamport => "lamport",
            Mode::Vector => "vector",
        }
    }

    pub fn from_name(s: &str) -> Option<Mode> {
        match s {
            "none" => Some(Mode::None),
            "lamport" => Some(Mode::Lamport),
            "vector" => Some(Mode::Vector),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub dir: Option<String>,
    pub buffer_size: usize,
    pub timer: TimerChoice,
    /// `PMTRACE_CLOCKS`: what every message carries (rank 0's choice wins).
    pub clocks: Mode,
    /// `PMTRACE_CLOCK_SIM`: simulated clock skew, for testing sync.
    pub clock_sim: Option<pmtrace_format::sim::SimSpec>,
    clock_sim_text: Option<String>,
    /// `PMTRACE_SYNC_REPS`: ping-pongs per clock offset measurement.
    pub sync_reps: u32,
    /// `PMTRACE_EXCLUDE`: the function ids whose calls are left out.
    pub exclude: Vec<u32>,
    /// `PMTRACE_SHM`: headers to processes of the node through shared
    /// memory (rank 0's choice wins).
    pub shm: bool,
    /// `PMTRACE_LIVE_SYNC`: ms between syncs of the live status file to
    /// the file system, for `pmtrace top` on another node.
    pub live_sync_ms: u32,
    /// `PMTRACE_LIVE_SITE`: find where a call blocked for a second came
    /// from, by a signal to its thread.
    pub live_site: bool,
    pub warnings: Vec<String>,
}

/// Default of `PMTRACE_LIVE_SYNC`: once a second.
pub const DEFAULT_LIVE_SYNC_MS: u32 = 1000;

/// The groups `PMTRACE_EXCLUDE` names, by what their functions' names
/// start with.
const GROUPS: &[(&str, &[&str])] = &[
    ("time", &["MPI_Wtime", "MPI_Wtick"]),
    (
        "probe",
        &["MPI_Probe", "MPI_Iprobe", "MPI_Mprobe", "MPI_Improbe"],
    ),
    ("test", &["MPI_Test", "MPI_Request_get_status"]),
];

/// Whether calls of a function of this kind can be left out of a trace
/// and the rest still read right: those that move no message and create no
/// operation. A probe that matches a message (`MPI_Mprobe`) and a test
/// that completes an operation are recorded all the same (see `hooks`).
fn can_leave_out(kind: pmtrace_format::Kind) -> bool {
    use pmtrace_format::Kind;
    matches!(
        kind,
        Kind::Plain | Kind::Probe | Kind::Iprobe | Kind::Mprobe | Kind::Improbe | Kind::Complete
    )
}

/// The runtime's function table: each traced function's name and kind,
/// indexed by function id.
pub type Functions<'a> = &'a [(&'a str, pmtrace_format::Kind)];

/// `PMTRACE_EXCLUDE=<group or function>,...` against `functions` (the
/// function table): the ids, and one warning per name it cannot take.
pub fn parse_exclude(
    v: &str,
    functions: &[(&str, pmtrace_format::Kind)],
) -> (Vec<u32>, Vec<String>) {
    let (mut ids, mut warnings) = (Vec::new(), Vec::new());
    for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let prefixes: Vec<String> = match GROUPS.iter().find(|(g, _)| *g == lower) {
            Some((_, names)) => names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            None => vec![],
        };
        let name = if lower.starts_with("mpi_") {
            lower.clone()
        } else {
            format!("mpi_{lower}")
        };
        let matching: Vec<u32> = functions
            .iter()
            .enumerate()
            .filter(|(_, (f, _))| {
                let f = f.to_ascii_lowercase();
                if prefixes.is_empty() {
                    f == name
                } else {
                    prefixes.iter().any(|p| f.starts_with(p.as_str()))
                }
            })
            .map(|(i, _)| i as u32)
            .collect();
        if matching.is_empty() {
            warnings.push(format!(
                "PMTRACE_EXCLUDE: {item} is neither an MPI function nor a group (time, probe, test); ignored"
            ));
        }
        for id in matching {
            let (f, kind) = functions[id as usize];
            if can_leave_out(kind) {
                ids.push(id);
            } else {
                warnings.push(format!(
                    "PMTRACE_EXCLUDE: {f} cannot be left out (the trace's messages and operations depend on it); recorded"
                ));
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    (ids, warnings)
}

/// 100 round trips per tree level: a few ms of `MPI_Init` at most (measured:
/// within the noise of a 380 ms init at np=8). At np=8 on two cores, the
/// maximum synced error over a run was 4.7 µs in the middle run of nine
/// with 100 reps, against 7.2 µs in the middle run of six with 10 (both
/// vary from 2 to 38 µs).
pub const DEFAULT_SYNC_REPS: u32 = 100;

/// Variables the runtime reads, and the ones other parts of pmtrace set in
/// the same environment (so they are not "unknown").
const KNOWN: &[&str] = &[
    "PMTRACE_DIR",
    "PMTRACE_BUFFER_SIZE",
    "PMTRACE_TIMER",
    "PMTRACE_LIB",
    // The CLI's (a shell set up to read traces may trace a job too).
    "PMTRACE_MEMORY_CHECK",
    "PMTRACE_SPILL",
    "PMTRACE_SPILL_DIR",
    "PMTRACE_TIMES",
];

pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (s, 1usize),
        Some((i, _)) => {
            let unit = s[i..].trim().to_ascii_lowercase();
            let m = match unit.as_str() {
                "k" | "kb" | "kib" => 1 << 10,
                "m" | "mb" | "mib" => 1 << 20,
                "g" | "gb" | "gib" => 1 << 30,
                "b" => 1,
                _ => return None,
            };
            (&s[..i], m)
        }
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

impl Config {
    /// The settings among `vars`, `PMTRACE_EXCLUDE` taken against
    /// `functions`.
    pub fn from_vars<I: IntoIterator<Item = (String, String)>>(
        vars: I,
        functions: Functions,
    ) -> Config {
        let mut c = Config {
            dir: None,
            buffer_size: DEFAULT_BUFFER,
            timer: TimerChoice::Auto,
            clocks: Mode::Lamport,
            clock_sim: None,
            clock_sim_text: None,
            sync_reps: DEFAULT_SYNC_REPS,
            exclude: Vec::new(),
            shm: true,
            live_sync_ms: DEFAULT_LIVE_SYNC_MS,
            live_site: true,
            warnings: Vec::new(),
        };
        for (k, v) in vars {
            if !k.starts_with("PMTRACE_") {
                continue;
            }
            match k.as_str() {
                "PMTRACE_DIR" => {
                    if v.is_empty() {
                        c.warnings
                            .push("PMTRACE_DIR is empty; using the default directory".into());
                    } else {
                        c.dir = Some(v);
                    }
                }
                "PMTRACE_BUFFER_SIZE" => match parse_size(&v) {
                    Some(n) if (MIN_BUFFER..=MAX_BUFFER).contains(&n) => c.buffer_size = n,
                    _ => c.warnings.push(format!(
                        "PMTRACE_BUFFER_SIZE={v} is not a size between 64K and 1G; using {}M",
                        DEFAULT_BUFFER >> 20
                    )),
                },
                "PMTRACE_TIMER" => match v.as_str() {
                    "tsc" => c.timer = TimerChoice::Tsc,
                    "monotonic" => c.timer = TimerChoice::Monotonic,
                    "auto" => c.timer = TimerChoice::Auto,
                    _ => c.warnings.push(format!(
                        "PMTRACE_TIMER={v} is not tsc, monotonic or auto; using auto"
                    )),
                },
                "PMTRACE_CLOCKS" => match Mode::from_name(&v) {
                    Some(m) => c.clocks = m,
                    None => c.warnings.push(format!(
                        "PMTRACE_CLOCKS={v} is not lamport, vector or none; using lamport"
                    )),
                },
                "PMTRACE_CLOCK_SIM" => match pmtrace_format::sim::SimSpec::parse(&v) {
                    Ok(spec) => {
                        c.clock_sim = Some(spec);
                        c.clock_sim_text = Some(v);
                    }
                    Err(e) => c.warnings.push(format!(
                        "PMTRACE_CLOCK_SIM={v}: {e} (seed=N[,offset_us=X][,drift_ppm=Y][,drift_change_s=S][,hosts=H]); clocks not simulated"
                    )),
                },
                "PMTRACE_SYNC_REPS" => match v.trim().parse::<u32>() {
                    Ok(n) if (1..=1000).contains(&n) => c.sync_reps = n,
                    _ => c.warnings.push(format!(
                        "PMTRACE_SYNC_REPS={v} is not a count between 1 and 1000; using {DEFAULT_SYNC_REPS}"
                    )),
                },
                "PMTRACE_SHM" => match v.as_str() {
                    "on" => c.shm = true,
                    "off" => c.shm = false,
                    _ => c.warnings.push(format!("PMTRACE_SHM={v} is not on or off; using on")),
                },
                "PMTRACE_LIVE_SITE" => match v.as_str() {
                    "on" => c.live_site = true,
                    "off" => c.live_site = false,
                    _ => c
                        .warnings
                        .push(format!("PMTRACE_LIVE_SITE={v} is not on or off; using on")),
                },
                "PMTRACE_LIVE_SYNC" => match v.trim().parse::<f64>() {
                    Ok(x) if (0.25..=3600.0).contains(&x) => {
                        c.live_sync_ms = (x * 1000.0).round() as u32
                    }
                    _ => c.warnings.push(format!(
                        "PMTRACE_LIVE_SYNC={v} is not a number of seconds between 0.25 and 3600; using 1"
                    )),
                },
                "PMTRACE_EXCLUDE" => {
                    let (ids, warnings) = parse_exclude(&v, functions);
                    c.exclude = ids;
                    c.warnings.extend(warnings);
                }
                k if KNOWN.contains(&k) => {}
                _ => c.warnings.push(format!("unknown setting {k} ignored")),
            }
        }
        c
    }

    /// The settings of this process's environment.
    pub fn from_env(functions: Functions) -> Config {
        // vars_os: `vars` panics on any variable that is not UTF-8.
        let vars = std::env::vars_os().filter_map(|(k, v)| {
            let k = k.to_string_lossy().into_owned();
            k.starts_with("PMTRACE_")
                .then(|| (k, v.to_string_lossy().into_owned()))
        });
        Config::from_vars(vars, functions)
    }

    /// The effective configuration, for the trace's run record.
    pub fn effective(
        &self,
        dir: &str,
        timer: &str,
        functions: Functions,
    ) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("PMTRACE_DIR".into(), dir.into());
        m.insert("PMTRACE_BUFFER_SIZE".into(), self.buffer_size.to_string());
        m.insert("PMTRACE_TIMER".into(), timer.into());
        m.insert("PMTRACE_CLOCKS".into(), self.clocks.name().into());
        m.insert("PMTRACE_SYNC_REPS".into(), self.sync_reps.to_string());
        if self.live_sync_ms != DEFAULT_LIVE_SYNC_MS {
            m.insert(
                "PMTRACE_LIVE_SYNC".into(),
                format!("{}", f64::from(self.live_sync_ms) / 1000.0),
            );
        }
        if !self.shm {
            m.insert("PMTRACE_SHM".into(), "off".into());
        }
        if !self.live_site {
            m.insert("PMTRACE_LIVE_SITE".into(), "off".into());
        }
        if let Some(t) = &self.clock_sim_text {
            m.insert("PMTRACE_CLOCK_SIM".into(), t.clone());
        }
        if !self.exclude.is_empty() {
            let names: Vec<&str> = self
                .exclude
                .iter()
                .map(|&i| functions[i as usize].0)
                .collect();
            m.insert("PMTRACE_EXCLUDE".into(), names.join(","));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Config {
        let functions = [("MPI_Send", pmtrace_format::Kind::Send)];
        Config::from_vars(
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            &functions,
        )
    }

    #[test]
    fn exclusions_take_groups_and_names_and_refuse_what_moves_messages() {
        use pmtrace_format::Kind;
        let table = [
            ("MPI_Send", Kind::Send),
            ("MPI_Wtime", Kind::Plain),
            ("MPI_Wtick", Kind::Plain),
            ("MPI_Iprobe", Kind::Iprobe),
            ("MPI_Improbe", Kind::Improbe),
            ("MPI_Test", Kind::Complete),
            ("MPI_Testall", Kind::Complete),
            ("MPI_Test_cancelled", Kind::Plain),
            ("MPI_Comm_rank", Kind::Plain),
            ("MPI_Wait", Kind::Complete),
        ];
        let (ids, w) = parse_exclude("time, probe,TEST,comm_rank", &table);
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(w.is_empty(), "{w:?}");
        let (ids, w) = parse_exclude("MPI_Send,MPI_Wait,sundial,", &table);
        assert_eq!(ids, vec![9]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("MPI_Send cannot be left out"), "{w:?}");
        assert!(w[1].contains("sundial is neither"), "{w:?}");
    }

    #[test]
    fn the_live_site_is_on_unless_turned_off() {
        assert!(cfg(&[]).live_site);
        let c = cfg(&[("PMTRACE_LIVE_SITE", "off")]);
        assert!(!c.live_site && c.warnings.is_empty());
        let c = cfg(&[("PMTRACE_LIVE_SITE", "0")]);
        assert!(c.live_site);
        assert_eq!(
            c.warnings,
            vec!["PMTRACE_LIVE_SITE=0 is not on or off; using on".to_string()]
        );
    }

    #[test]
    fn the_live_sync_period_is_seconds_within_bounds() {
        assert_eq!(cfg(&[]).live_sync_ms, 1000);
        let c = cfg(&[("PMTRACE_LIVE_SYNC", "0.25")]);
        assert_eq!((c.live_sync_ms, c.warnings.len()), (250, 0));
        assert_eq!(cfg(&[("PMTRACE_LIVE_SYNC", " 5 ")]).live_sync_ms, 5000);
        for bad in ["0", "0.1", "-1", "soon", "1e9", "NaN"] {
            let c = cfg(&[("PMTRACE_LIVE_SYNC", bad)]);
            assert_eq!(c.live_sync_ms, 1000, "{bad}");
            assert_eq!(c.warnings.len(), 1, "{bad}");
            assert!(c.warnings[0].starts_with("PMTRACE_LIVE_SYNC="), "{bad}");
        }
    }

    #[test]
    fn sizes_accept_suffixes() {
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("12x"), None);
        assert_eq!(parse_size(""), None);
    }

    #[test]
    fn bad_values_warn_once_and_keep_defaults() {
        let c = cfg(&[
            ("PMTRACE_BUFFER_SIZE", "lots"),
            ("PMTRACE_TIMER", "sundial"),
            ("PMTRACE_COLOUR", "red"),
        ]);
        assert_eq!(c.buffer_size, DEFAULT_BUFFER);
        assert_eq!(c.timer, TimerChoice::Auto);
        assert_eq!(c.warnings.len(), 3);
        assert!(c.warnings[2].contains("PMTRACE_COLOUR"));
    }

    #[test]
    fn good_values_are_taken_without_warning() {
        let c = cfg(&[
            ("PMTRACE_BUFFER_SIZE", "1M"),
            ("PMTRACE_TIMER", "monotonic"),
            ("PMTRACE_DIR", "/tmp/t"),
            ("PMTRACE_CLOCKS", "vector"),
            ("HOME", "/root"),
            // The CLI's own, set in a shell that also traces jobs.
            ("PMTRACE_SPILL", "off"),
            ("PMTRACE_SPILL_DIR", "/tmp"),
            ("PMTRACE_TIMES", "1"),
            ("PMTRACE_MEMORY_CHECK", "1"),
        ]);
        assert_eq!(c.clocks, Mode::Vector);
        assert_eq!(c.buffer_size, 1 << 20);
        assert_eq!(c.timer, TimerChoice::Monotonic);
        assert_eq!(c.dir.as_deref(), Some("/tmp/t"));
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn clock_simulation_is_parsed_or_warned_about() {
        let c = cfg(&[("PMTRACE_CLOCK_SIM", "seed=4,drift_ppm=10")]);
        let spec = c.clock_sim.unwrap();
        assert_eq!(
            (spec.seed, spec.drift_ppm, spec.offset_us),
            (4, 10.0, 5000.0)
        );
        assert!(c.warnings.is_empty());
        let c = cfg(&[("PMTRACE_CLOCK_SIM", "drift_ppm=10")]);
        assert!(c.clock_sim.is_none());
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("seed=N is required"),
            "{}",
            c.warnings[0]
        );
    }

    #[test]
    fn sync_repetitions_are_bounded() {
        assert_eq!(cfg(&[("PMTRACE_SYNC_REPS", "25")]).sync_reps, 25);
        for bad in ["0", "1001", "many"] {
            let c = cfg(&[("PMTRACE_SYNC_REPS", bad)]);
            assert_eq!(c.sync_reps, DEFAULT_SYNC_REPS);
            assert_eq!(c.warnings.len(), 1, "{bad}");
        }
    }

    #[test]
    fn buffer_below_minimum_is_refused() {
        assert_eq!(
            cfg(&[("PMTRACE_BUFFER_SIZE", "4K")]).buffer_size,
            DEFAULT_BUFFER
        );
    }
}
