//! `pmtrace run`: start an MPI launcher with the tracer preloaded.
//!
//! ```text
//!  pmtrace run [--out DIR] [--lib PATH] -- mpirun -np 4 ./app
//!    LD_PRELOAD  = <libpmtrace.so>[:<previous LD_PRELOAD>]
//!    PMTRACE_DIR = <absolute DIR>            (created here; must not exist)
//!    Open MPI:     mpirun -x LD_PRELOAD -x PMTRACE_DIR -np 4 ./app
//! ```
//!
//! Open MPI does not forward the environment to remote ranks unless told to
//! with `-x`, so for its launchers the two variables are exported
//! explicitly. MPICH's Hydra forwards the whole environment by default.

use std::env;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;

/// Name of the preload library, looked up next to the `pmtrace` executable.
const LIBRARY: &str = "libpmtrace.so";

/// Run an MPI program with tracing enabled.
///
/// Everything after `--` is the launcher command line, run as given with
/// the tracer preloaded: LD_PRELOAD gets libpmtrace.so prepended, and
/// PMTRACE_DIR names the trace directory. For Open MPI's mpirun/mpiexec,
/// `-x LD_PRELOAD -x PMTRACE_DIR` is inserted after the launcher name so
/// that ranks on every node get both. Standard input, output and error are
/// the launcher's; pmtrace exits with the launcher's exit code and, on
/// success, prints `pmtrace: trace in DIR` on stderr.
///
/// Example: pmtrace run --out traces/ring -- mpirun -np 4 ./ring
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Trace directory to create (it must not exist yet). Default:
    /// ./pmtrace-<YYYYmmdd-HHMMSS>-<pid>, with the time in UTC.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The preload library. Default: $PMTRACE_LIB, else the libpmtrace.so
    /// installed or built beside this executable: one library for every MPI
    /// (Open MPI, the MPICH family and the MPI-5 standard ABI), which finds
    /// the program's at run time.
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,
    /// The launcher and its arguments, e.g. `mpirun -np 4 ./app`.
    #[arg(last = true, required = true, value_name = "LAUNCHER")]
    launcher: Vec<OsString>,
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let (program, rest) = args
        .launcher
        .split_first()
        .expect("clap requires a launcher");
    let lib = find_library(args.lib)?;
    let dir = match args.out {
        Some(dir) => dir,
        None => PathBuf::from(default_dir_name(SystemTime::now(), std::process::id())),
    };
    let abs_dir = create_trace_dir(&dir)?;

    let mut cmd = Command::new(program);
    cmd.args(launcher_args(program, rest))
        .env(
            "LD_PRELOAD",
            preload_value(&lib, env::var_os("LD_PRELOAD").as_deref()),
        )
        .env("PMTRACE_DIR", &abs_dir);
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;

    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    let written = std::fs::read_dir(&abs_dir)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".pmt"))
        })
        .unwrap_or(false);
    if code == 0 && !written {
        eprintln!(
            "pmtrace: no rank wrote a trace in {} (tracing was disabled, or the program never called MPI_Init)",
            dir.display()
        );
    } else if code == 0 {
        eprintln!("pmtrace: trace in {}", dir.display());
    } else {
        eprintln!(
            "pmtrace: {} exited with status {code}; the trace in {} may be incomplete",
            program.to_string_lossy(),
            dir.display()
        );
    }
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// The launcher's arguments, with `-x LD_PRELOAD -x PMTRACE_DIR` for Open
/// MPI at the front and after every `:`, since each app context of an MPMD
/// line takes its own exports.
pub fn launcher_args(program: &OsStr, rest: &[OsString]) -> Vec<OsString> {
    let exports = ["-x", "LD_PRELOAD", "-x", "PMTRACE_DIR"].map(OsString::from);
    if !is_open_mpi_launcher(program) {
        return rest.to_vec();
    }
    let mut out = exports.to_vec();
    for a in rest {
        out.push(a.clone());
        if a == ":" {
            out.extend(exports.iter().cloned());
        }
    }
    out
}

/// `--lib`, else `$PMTRACE_LIB`, else the library beside this executable
/// (built: target/release; installed: PREFIX/lib/pmtrace); made absolute,
/// since the launcher may start ranks elsewhere.
fn find_library(lib: Option<PathBuf>) -> Result<PathBuf> {
    let (path, how) = match (lib, env::var_os("PMTRACE_LIB")) {
        (Some(p), _) => (p, "--lib"),
        (None, Some(p)) if !p.is_empty() => (PathBuf::from(p), "PMTRACE_LIB"),
        _ => {
            let exe = env::current_exe().context("cannot locate the pmtrace executable")?;
            let dir = exe.parent().unwrap_or(Path::new("."));
            let up = dir.parent().unwrap_or(dir);
            let Some(p) = [dir.join(LIBRARY), up.join("lib/pmtrace").join(LIBRARY)]
                .into_iter()
                .find(|p| p.is_file())
            else {
                bail!(
                    "cannot find {LIBRARY} beside {}; build it (make) or pass --lib PATH or set PMTRACE_LIB",
                    exe.display()
                );
            };
            (p, "beside pmtrace")
        }
    };
    if !path.is_file() {
        bail!(
            "preload library {} (from {how}) does not exist",
            path.display()
        );
    }
    std::fs::canonicalize(&path).with_context(|| format!("cannot resolve {}", path.display()))
}

/// Creates the trace directory (its parents too); fails if it exists.
fn create_trace_dir(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        bail!(
            "trace directory {} already exists; choose another with --out",
            dir.display()
        );
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .with_context(|| format!("cannot create trace directory {}", dir.display()))?;
    std::fs::canonicalize(dir).with_context(|| format!("cannot resolve {}", dir.display()))
}

/// `lib`, followed by any previous LD_PRELOAD entries.
pub fn preload_value(lib: &Path, previous: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(prev) = previous.filter(|p| !p.is_empty()) {
        v.push(":");
        v.push(prev);
    }
    v
}

/// Whether `program` is Open MPI's launcher: its name says so
/// (`mpirun.openmpi`), or it is an mpirun/mpiexec whose `--version` says
/// "Open MPI" (Debian's mpirun is a link to whichever MPI is chosen).
fn is_open_mpi_launcher(program: &OsStr) -> bool {
    let name = Path::new(program)
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    if name.ends_with(".openmpi") || name == "orterun" {
        return true;
    }
    if !matches!(name.as_str(), "mpirun" | "mpiexec" | "oshrun" | "prterun") {
        return false;
    }
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map(|out| {
            let text = [out.stdout, out.stderr].concat();
            String::from_utf8_lossy(&text).contains("Open MPI")
        })
        .unwrap_or(false)
}

/// `pmtrace-YYYYmmdd-HHMMSS-<pid>`, the time in UTC.
fn default_dir_name(now: SystemTime, pid: u32) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "pmtrace-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{pid}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn default_directory_name_has_utc_timestamp_and_pid() {
        // 2024-02-29 13:45:07 UTC
        let t = UNIX_EPOCH + Duration::from_secs(1_709_214_307);
        assert_eq!(default_dir_name(t, 4242), "pmtrace-20240229-134507-4242");
        assert_eq!(default_dir_name(UNIX_EPOCH, 1), "pmtrace-19700101-000000-1");
    }

    #[test]
    fn preload_is_prepended_to_the_previous_value() {
        let lib = Path::new("/opt/libpmtrace.so");
        assert_eq!(preload_value(lib, None), "/opt/libpmtrace.so");
        assert_eq!(
            preload_value(lib, Some(OsStr::new(""))),
            "/opt/libpmtrace.so"
        );
        assert_eq!(
            preload_value(lib, Some(OsStr::new("/x/libdarshan.so"))),
            "/opt/libpmtrace.so:/x/libdarshan.so"
        );
    }

    #[test]
    fn only_open_mpi_launcher_names_are_probed() {
        assert!(is_open_mpi_launcher(OsStr::new("/usr/bin/mpirun.openmpi")));
        assert!(!is_open_mpi_launcher(OsStr::new("srun")));
        assert!(!is_open_mpi_launcher(OsStr::new("./app")));
    }

    #[test]
    fn every_app_context_of_an_open_mpi_line_gets_the_exports() {
        let args: Vec<OsString> = ["-np", "1", "./a", ":", "-np", "3", "./b"]
            .map(OsString::from)
            .to_vec();
        let got = launcher_args(OsStr::new("mpirun.openmpi"), &args);
        let x = "-x LD_PRELOAD -x PMTRACE_DIR";
        assert_eq!(
            got.join(OsStr::new(" ")),
            OsString::from(format!("{x} -np 1 ./a : {x} -np 3 ./b"))
        );
        assert_eq!(launcher_args(OsStr::new("srun"), &args), args);
    }
}
