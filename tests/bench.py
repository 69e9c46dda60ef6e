#!/usr/bin/env python3
"""`make bench`: pmtrace's overhead against an untraced baseline measured in
the same run. Baseline and traced runs alternate (ABBA order), each metric
is the median of BENCH_REPS repetitions (default 7), and every figure is
printed beside its baseline. Nothing here is a pass/fail test.

Rows:
  iprobe     ns per MPI_Iprobe that finds nothing (every call traced)
  pingpong   ns per 8-byte one-way message: wrappers only (PMTRACE_CLOCKS=none),
             with the Lamport piggyback (the default), and with vector clocks at
             np = 2, 4, 8 (every pair of ranks plays at once; beyond np=2 the
             ranks outnumber this machine's two cores)
  bandwidth  MB/s of 1 MiB messages (ratio traced/baseline); then, under
             Open MPI and MPICH, 64 KiB, 1 MiB and 16 MiB messages over 16
             interleaved pairs of runs each (issue 40: median ratio >= 0.99
             at 64 KiB and 1 MiB), the worst traced run beside the slowest
             untraced one, and a control row of untraced against untraced
             runs at 64 KiB: the machine's own spread (`bench.py bandwidth`
             prints these only)
  allreduce  ns per 8-byte MPI_Allreduce
Ping-pong and Allreduce time blocks of 1000 iterations and take the median
block, so that a moment the rank was descheduled does not move the figure.
`bench.py overhead` prints these rows only, `bench.py sync`,
`bench.py export` and `bench.py scaling` those sections only.

Then trace bytes per MPI call (cheap-call loop and examples), and peak RSS
of a 10-million-event run with and without the library.

Then `pmtrace sync`: its accuracy against the true time under
PMTRACE_CLOCK_SIM (syncbench, a star of ping-pongs with rank 0 plus a ring,
for 2 s), with a constant drift and with a drift change mid-run, after each
step; and its throughput (events per second) and peak memory (bytes per
event) on the largest of those traces (over 10 million events: syncbench's
spin loop calls MPI_Wtime, and every call is traced).

Then the engine (issue 38): every verb on halo2d at 100,000 iterations
(np=4, a message every 5 calls) and on syncbench at np=8 for 8 s (all
collectives, over 70 million events): wall time, events per second and
peak bytes per event (`bench.py engine` prints this section only).

Last, parallel post-processing: `mpirun -np P pmtrace-mpi sync` on
simulated traces of 64 to 65,536 ranks (`pmtrace synth`) at P = 1, 2, 4,
8 (BENCH_SCALING_RANKS picks the ranks): wall time and the largest peak
RSS of one process, with the violations left and the error against the
true time.
"""
import filecmp
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "target/release/libpmtrace.so")
PROGS = os.path.join(ROOT, "target/examples")
REPS = int(os.environ.get("BENCH_REPS", "7"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
SUMMARY = re.compile(r"(\d+) MPI calls, (\d+) bytes")


def mpirun(np, prog, args, traced, scratch, extra_env=None):
    env = dict(ENV, **(extra_env or {}))
    cmd = ["mpirun", "-np", str(np)]
    trace = None
    if traced:
        trace = tempfile.mkdtemp(dir=scratch)
        os.rmdir(trace)
        env["PMTRACE_DIR"] = trace
        cmd += ["-x", "LD_PRELOAD=" + LIB, "-x", "PMTRACE_DIR"]
    for k in (extra_env or {}):
        cmd += ["-x", k]
    out = subprocess.run(cmd + [prog] + args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd + [prog] + args)} failed:\n{out.stderr}")
    calls = nbytes = None
    m = SUMMARY.search(out.stderr)
    if m:
        calls, nbytes = int(m.group(1)), int(m.group(2))
    if trace:
        shutil.rmtree(trace, ignore_errors=True)
    return out.stdout, calls, nbytes


def bench(mode, scratch, np=2, extra_env=None):
    """Medians of baseline and traced, and the median of the per-pair
    differences and ratios (each pair runs back to back, so a machine that
    changes speed during the bench skews pairs less than medians)."""
    base, traced, diffs, ratios, per_call = [], [], [], [], []
    prog = os.path.join(PROGS, "mpibench")
    for rep in range(REPS):
        order = [False, True] if rep % 2 == 0 else [True, False]
        pair = {}
        for t in order:
            out, calls, nbytes = mpirun(np, prog, [mode], t, scratch, extra_env)
            pair[t] = float(out.split()[1])
            if t and calls:
                per_call.append(nbytes / calls)
        base.append(pair[False])
        traced.append(pair[True])
        diffs.append(pair[True] - pair[False])
        ratios.append(pair[True] / pair[False])
    med = statistics.median
    return med(base), med(traced), med(diffs), med(ratios), min(traced) - min(base), per_call


# The binary interfaces, each with mpibench built for an MPI of it
# (instructions section): Debian's Open MPI, Debian's MPICH, and the
# standard ABI on MPICH 5's libmpi_abi.so, all traced by the one library.
# BENCH_LIB_<KEY> overrides the library (to compare another build of it on
# the same programs).
FLAVOURS = [
    ("OPENMPI", "Open MPI", "target/release", "target/examples"),
    ("MPICH", "MPICH", "target/release", "target/mpich/examples"),
    ("ABI", "standard ABI", "target/release", "target/abi/examples"),
]


# Large-message bandwidth (`bench.py bandwidth`): each MPI with its own
# launcher, library and mpibench build.
LAUNCHERS = [
    ("Open MPI 4.1", ["mpirun", "--oversubscribe"], "-x", "target/release", "target/examples"),
    ("MPICH 4.0", ["mpirun.mpich"], "-genv", "target/release", "target/mpich/examples"),
]
BW_RUNS = int(os.environ.get("BENCH_BW_RUNS", "16"))
# About 40 x 16 MiB per unit of scale: at 4, a run moves 2.5 GiB (half a
# second or more), long enough that the start of a run does not decide it.
BW_SCALE = os.environ.get("BENCH_BW_SCALE", "4")


def bandwidth_run(launcher, pass_env, lib, progs, size, traced, scratch):
    """MB/s of one run of mpibench's bandwidth mode at `size` bytes."""
    env = dict(ENV)
    cmd = list(launcher) + ["-np", "2"]
    if traced:
        trace = tempfile.mkdtemp(dir=scratch)
        os.rmdir(trace)
        if pass_env == "-x":
            cmd += ["-x", "LD_PRELOAD=" + lib, "-x", "PMTRACE_DIR=" + trace]
        else:
            cmd += ["-genv", "LD_PRELOAD", lib, "-genv", "PMTRACE_DIR", trace]
    cmd += [os.path.join(progs, "mpibench"), "bandwidth", BW_SCALE, str(size)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{out.stderr}")
    if traced:
        shutil.rmtree(trace, ignore_errors=True)
    return float(out.stdout.split()[1])


def bandwidth_section(scratch):
    """Issue 17's large-message figures: BW_RUNS interleaved runs (ABBA),
    with the worst traced run against the slowest untraced one, since the
    loss can be bimodal and a median hides it."""
    print(f"large-message bandwidth, np=2, {BW_RUNS} interleaved pairs each (MB/s; "
          "targets: median ratio >= 0.99 at 64 KiB and 1 MiB, worst traced >= 0.8x "
          "slowest untraced; the A/A row is the control):")
    print(f"  {'MPI, size':<26}{'untraced slowest':>17}{'median':>8}{'traced worst':>14}"
          f"{'median':>8}{'worst/slowest':>15}{'median ratio':>14}")
    for name, launcher, pass_env, libdir, progs in LAUNCHERS:
        lib = os.path.join(ROOT, libdir, "libpmtrace.so")
        progs = os.path.join(ROOT, progs)
        if not os.path.exists(lib) or shutil.which(launcher[0]) is None:
            print(f"  {name}: skipped (build it: make matrix)")
            continue
        # The last row is the control: untraced against untraced, the
        # same pairs and figures, so the noise floor of the machine (and
        # of the MPI) stands beside pmtrace's figures.
        rows = [(64 << 10, "64 KiB", True), (1 << 20, "1 MiB", True), (16 << 20, "16 MiB", True),
                (64 << 10, "64 KiB, A/A", False)]
        for size, label, traced_side in rows:
            base, traced, ratios = [], [], []
            for rep in range(BW_RUNS):
                pair = {}
                for side in ([0, 1] if rep % 2 == 0 else [1, 0]):
                    t = traced_side and side == 1
                    pair[side] = bandwidth_run(launcher, pass_env, lib, progs, size, t, scratch)
                base.append(pair[0])
                traced.append(pair[1])
                ratios.append(pair[1] / pair[0])
            med = statistics.median
            print(f"  {name + ', ' + label:<26}{min(base):>17.0f}{med(base):>8.0f}{min(traced):>14.0f}"
                  f"{med(traced):>8.0f}{min(traced) / min(base):>15.2f}{med(ratios):>14.2f}")


def instructions(mode, scale, traced, scratch, clocks="lamport", lib=LIB, progs=PROGS):
    """Instructions one singleton run of mpibench executes (callgrind)."""
    trace = tempfile.mkdtemp(dir=scratch)
    os.rmdir(trace)
    env = dict(ENV, PMTRACE_DIR=trace, PMTRACE_CLOCKS=clocks)
    if traced:
        env["LD_PRELOAD"] = lib
    # "selfi:2048": the mode, then the message size
    mode, _, size = mode.partition(":")
    profile = os.path.join(scratch, "callgrind.out")
    # --separate-threads: the main thread's profile alone, without the
    # writer thread, whose ticks follow the clock
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", "--separate-threads=yes",
           os.path.join(progs, "mpibench"), mode, str(scale)] + ([size] if size else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    shutil.rmtree(trace, ignore_errors=True)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not m:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    own = own_instructions(profile + "-01", os.path.basename(lib)) if traced else 0
    for f in os.listdir(scratch):
        if f.startswith("callgrind.out"):
            os.unlink(os.path.join(scratch, f))
    return int(m.group(1)), own


def own_instructions(profile, name):
    """Instructions executed inside the object called `name` (the library's
    own code, not the MPI or libc it calls): the sum of the self costs of a
    callgrind profile's functions in that object. Unlike the whole run's
    count, it does not move with the MPI's progress engine."""
    objects, ob, total, skip = {}, None, 0, False
    with open(profile) as f:
        for line in f:
            if line.startswith(("ob=", "cob=")):
                # "(id) name" defines a compressed name, "(id)" uses one
                m = re.match(r"c?ob=(?:\((\d+)\))? ?(.*)", line.rstrip("\n"))
                if m.group(2):
                    objects[m.group(1)] = m.group(2)
                if line.startswith("ob="):
                    ob = objects.get(m.group(1), m.group(2))
            elif line.startswith("calls="):
                skip = True  # the next cost line is the call's, not the function's
            elif line[:1] in "0123456789+-*":
                if skip:
                    skip = False
                elif ob is not None and os.path.basename(ob) == name:
                    total += int(line.split()[1])
    return total


# Traced instructions per call at commit 64b168d, before issue 17's work
# (docs/notes.md, "Every MPI people run today"), for the "before and after"
# the issue asks of `make bench`. The standard ABI library came later.
BEFORE_ISSUE_17 = {
    ("OPENMPI", "MPI_Iprobe that finds nothing"): 741,
    ("OPENMPI", "8 B Send+Recv to self, no piggyback"): 2010,
    ("OPENMPI", "8 B Send+Recv to self, Lamport"): 2253,
    ("OPENMPI", "8 B Irecv+Send+Wait to self, Lamport"): 3844,
    ("OPENMPI", "8 B Allreduce"): 556,
    ("MPICH", "MPI_Iprobe that finds nothing"): 378,
    ("MPICH", "8 B Irecv+Send+Wait to self, Lamport"): 3684,
    ("MPICH", "8 B Allreduce"): 773,
}


# Runs of each instruction count, of which the median is printed.
INSTRUCTION_RUNS = 3


def instructions_section(scratch):
    """Instructions per call, untraced and traced, by difference of two loop
    lengths (np=1, so no other rank's progress is counted). Unlike times,
    these do not move with the machine's speed."""
    if shutil.which("valgrind") is None:
        print("instructions per call: skipped (no valgrind)")
        return
    print(f"instructions per call (callgrind, np=1, difference of two loop lengths, median of {INSTRUCTION_RUNS} runs);")
    print("'own' counts those inside libpmtrace.so alone, which the MPI's progress does not move:")
    # mpibench runs blocks of 1000 after a warm-up of a tenth as many
    # (iprobe: calls, not blocks); scales give 1 and 11 blocks plus warm-up.
    rows = [
        ("iprobe", (0.0005, 0.0055), lambda s: int(2_000_000 * s) + int(2_000_000 * s) // 10,
         "MPI_Iprobe that finds nothing", "lamport"),
        ("self", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "8 B Send+Recv to self, no piggyback", "none"),
        ("self", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "8 B Send+Recv to self, Lamport", "lamport"),
        ("selfi", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "8 B Irecv+Send+Wait to self, Lamport", "lamport"),
        # issue 40's loop: the send nonblocking, the receive blocking
        ("selfs", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "8 B Isend+Recv+Wait to self, Lamport", "lamport"),
        # past the one-node inline limit (1 KiB): the header through a ring
        ("selfi:2048", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "2 KiB Irecv+Send+Wait to self, Lamport", "lamport"),
        ("allreduce", (0.005, 0.055), lambda s: (int(200 * s) + int(200 * s) // 10) * 1000,
         "8 B Allreduce", "lamport"),
    ]
    for key, name, libdir, progs in FLAVOURS:
        lib = os.environ.get("BENCH_LIB_" + key, os.path.join(ROOT, libdir, "libpmtrace.so"))
        progs = os.path.join(ROOT, progs)
        if not (os.path.exists(lib) and os.path.exists(os.path.join(progs, "mpibench"))):
            print(f"{name}: skipped (build it: make matrix)")
            continue
        print(f"{name + ' library':<40}{'untraced':>10}{'traced':>10}{'added':>10}"
              f"{'own':>10}{'issue 17 start':>16}")
        for mode, (s1, s2), calls, label, clocks in rows:
            if mode == "self" and key != "OPENMPI":
                # MPICH's blocking send to its own rank does not return
                # before the receive is posted (selfi measures that path).
                continue
            n = calls(s2) - calls(s1)
            per, own = {}, 0.0
            for traced in (False, True):
                # The whole process's count moves by a few instructions a
                # call from run to run (threads that follow the clock: the
                # writer's ticks, the MPI's own): the median of three.
                runs = []
                for _ in range(INSTRUCTION_RUNS):
                    (a, own_a) = instructions(mode, s1, traced, scratch, clocks, lib, progs)
                    (b, own_b) = instructions(mode, s2, traced, scratch, clocks, lib, progs)
                    runs.append(((b - a) / n, (own_b - own_a) / n))
                per[traced] = statistics.median(r[0] for r in runs)
                own = statistics.median(r[1] for r in runs)
            before = BEFORE_ISSUE_17.get((key, label))
            print(f"  {label:<38}{per[False]:>10.0f}{per[True]:>10.0f}"
                  f"{per[True] - per[False]:>+10.0f}{own:>10.1f}"
                  f"{'' if before is None else before:>16}")


def main():
    scratch = tempfile.mkdtemp(prefix="pmtrace-bench-")
    only = {"export": export_section, "sync": sync_section,
            "instructions": instructions_section, "bandwidth": bandwidth_section,
            "engine": engine_section, "scaling": scaling_section}
    if len(sys.argv) == 2 and sys.argv[1] in only:
        try:
            only[sys.argv[1]](scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    only_rows = sys.argv[1:] == ["overhead"]
    try:
        print(f"pmtrace bench: np=2, Open MPI shared memory, medians of {REPS} interleaved runs\n")
        print("'added' and 'ratio' are medians over back-to-back (baseline, traced) pairs;")
        print("'min+' is the fastest traced run minus the fastest baseline run (least disturbed by")
        print("other load on the machine). This machine's speed varies by up to 2x from run to")
        print("run; '@ref' scales 'added' to the speed at which the baseline takes its reference")
        print("time (DESIGN.md section 4: Iprobe miss 56 ns, one-way 155 ns, Allreduce 268 ns).\n")
        print(f"{'metric':<36}{'baseline':>10}{'traced':>10}{'added':>10}{'min+':>8}{'@ref':>8}{'ratio':>8}  target")
        none = {"PMTRACE_CLOCKS": "none"}
        vector = {"PMTRACE_CLOCKS": "vector"}
        rows = [
            ("iprobe", 2, "MPI_Iprobe miss, np=2 (ns/call)", "<= +60 ns", 56.0, None),
            ("iprobe", 1, "MPI_Iprobe miss, np=1 (ns/call)", "<= +60 ns", 56.0, None),
            ("pingpong", 2, "8 B one-way, no piggyback (ns)", "(wrappers only)", 155.0, none),
            ("pingpong", 2, "8 B one-way, Lamport (ns)", "<= +80 ns", 155.0, None),
            ("pingpong", 2, "8 B one-way, vector np=2 (ns)", "(report)", 155.0, vector),
            ("pingpong", 4, "8 B one-way, vector np=4 (ns)", "(report)", None, vector),
            ("pingpong", 8, "8 B one-way, vector np=8 (ns)", "(report)", None, vector),
            ("allreduce", 2, "8 B Allreduce (ns/call)", "<= +60 ns", 268.0, None),
            ("bandwidth", 2, "1 MiB bandwidth (MB/s)", ">= 0.98x", None, None),
        ]
        iprobe_bytes = []
        for mode, np, label, target, ref, env in rows:
            b, t, diff, ratio, min_diff, per_call = bench(mode, scratch, np, env)
            if mode == "iprobe" and np == 2:
                iprobe_bytes = per_call
            added = "" if mode == "bandwidth" else f"{diff:+.1f}"
            min_added = "" if mode == "bandwidth" else f"{min_diff:+.1f}"
            at_ref = "" if ref is None else f"{diff * ref / b:+.1f}"
            print(f"{label:<36}{b:>10.1f}{t:>10.1f}{added:>10}{min_added:>8}{at_ref:>8}{ratio:>8.3f}  {target}")
        print()
        bandwidth_section(scratch)
        print()
        instructions_section(scratch)
        print()
        if only_rows:
            return
        print("trace bytes per MPI call (target <= 12):")
        if iprobe_bytes:
            print(f"  {'Iprobe loop':<22}{statistics.median(iprobe_bytes):>8.2f}")
        for ex in ["ring", "pingpong", "halo2d", "master_worker", "collectives"]:
            _, calls, nbytes = mpirun(4, os.path.join(PROGS, ex), [], True, scratch)
            print(f"  {ex + ' (np=4)':<22}{nbytes / calls:>8.2f}   ({calls} calls, {nbytes} bytes)")
        print()
        rss = {}
        for traced in (False, True):
            f = os.path.join(scratch, f"rss-{traced}")
            _, calls, nbytes = mpirun(2, os.path.join(PROGS, "manycalls"), ["5000000"], traced, scratch,
                                      {"RSS_FILE": f, "EXPECT_COUNTS_DIR": ""})
            rss[traced] = max(int(line.split()[1]) for line in open(f))
            if traced:
                events, tbytes = calls, nbytes
        print(f"10-million-event run (np=2, 5M Iprobe per rank, default buffers): {events} calls, "
              f"{tbytes / 1e6:.1f} MB of trace")
        print(f"  peak RSS per rank: baseline {rss[False] / 1024:.1f} MiB, traced {rss[True] / 1024:.1f} MiB "
              f"(+{(rss[True] - rss[False]) / 1024:.1f} MiB)")
        print()
        sync_section(scratch)
        print()
        export_section(scratch)
        print()
        engine_section(scratch)
        print()
        scaling_section(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


SCALING_RANKS = [int(x) for x in os.environ.get(
    "BENCH_SCALING_RANKS", "64,1024,8192,16384,32768,65536").split(",")]
SCALING_PROCS = [1, 2, 4, 8]


def parallel_run(trace, procs, verb):
    """`mpirun -np procs pmtrace-mpi VERB trace --json`: (wall seconds, the
    largest peak RSS of one process in bytes, what it printed)."""
    import time
    binary = os.path.join(ROOT, "target/release/pmtrace-mpi")
    cmd = ["mpirun", "-np", str(procs), "--oversubscribe", "/usr/bin/time", "-f", "rss %M",
           binary, verb, trace, "--json"]
    began = time.monotonic()
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    wall = time.monotonic() - began
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed: {out.stderr[-2000:]}")
    rss = max(int(m) for m in re.findall(r"^rss (\d+)", out.stderr, re.M))
    return wall, rss * 1024, json.loads(out.stdout)


def scaling_section(scratch):
    """Parallel sync and critical path (`pmtrace-mpi sync`, then
    `pmtrace-mpi critical-path` on the synced times) on simulated traces of
    N ranks (`pmtrace synth`, 20 iterations of a 2-D halo exchange, a world
    Allreduce every 2nd, simulated clocks on N/32 hosts and an imbalanced
    rank) at P processes: wall time and the largest peak RSS of one
    process. Rows with N/P fixed show whether memory per process stays
    flat as N grows."""
    cli = os.path.join(ROOT, "target/release/pmtrace")
    print("Parallel post-processing: `mpirun -np P pmtrace-mpi sync`, then `critical-path`, on")
    print("`pmtrace synth` traces (this machine has 2 cores: P > 2 is oversubscribed, so the time")
    print("shows the cost of the replay's rounds, not a speedup; memory per process is the figure")
    print("that scales)")
    tables = {"sync": {}, "critical-path": {}}
    notes = {}
    for n in SCALING_RANKS:
        trace = os.path.join(scratch, f"synth-{n}")
        subprocess.run([cli, "synth", trace, "--ranks", str(n)], env=ENV, check=True,
                       stdout=subprocess.DEVNULL)
        truth = json.load(open(os.path.join(trace, "truth.json")))
        last = {}
        for p in SCALING_PROCS:
            for verb in tables:
                wall, rss, out = parallel_run(trace, p, verb)
                tables[verb][(n, p)] = (wall, rss)
                last[verb] = out
        steps = last["sync"]["steps"][-1]
        e = steps["error_ns"] or {}
        path = last["critical-path"]
        top = path["by_rank"][0] if path["by_rank"] else {}
        wtop = (path.get("weighted") or {}).get("by_rank", [{}])[0]
        imb = (truth.get("imbalance") or {}).get("rank")
        notes[n] = (truth["events"], sum(steps["violations"].values()), e,
                    imb, top.get("rank"), top.get("share", 0), wtop.get("rank"), wtop.get("share", 0))
        shutil.rmtree(trace, ignore_errors=True)
    for verb, table in tables.items():
        print(f"\n  {verb}")
        print(f"{'ranks':>7}{'events':>12}  " + "".join(f"{'P=' + str(p):>16}" for p in SCALING_PROCS)
              + ("   after sync (largest P): violations, error median / p99 / max" if verb == "sync"
                 else "   imbalanced rank; path's first rank (share), weighted"))
        for n in SCALING_RANKS:
            events, v, e, imb, r, share, wr, wshare = notes[n]
            cells = [f"{table[(n, p)][0]:>7.1f} s {table[(n, p)][1] / 2**20:>5.0f} M"
                     for p in SCALING_PROCS]
            tail = (f"   {v}, {e.get('median')} / {e.get('p99')} / {e.get('max')} ns" if verb == "sync"
                    else f"   {imb}; {r} ({100 * share:.1f}%), {wr} ({100 * wshare:.1f}%)")
            print(f"{n:>7}{events:>12}  " + "".join(f"{c:>16}" for c in cells) + tail)
        per = sorted({n // p for (n, p) in table if n % p == 0})
        flat = [k for k in per if sum(1 for (n, p) in table if n == k * p) >= 3]
        for k in flat[-2:]:
            row = [(p, table[(k * p, p)]) for p in SCALING_PROCS if (k * p, p) in table]
            print(f"  N/P = {k}: " + ", ".join(f"P={p} N={k * p}: {rss / 2**20:.0f} MiB, {wall:.1f} s"
                                              for p, (wall, rss) in row))


def traced_run(np, prog, args, scratch, extra_env):
    """Runs a traced job and keeps its trace; returns the directory."""
    trace = tempfile.mkdtemp(dir=scratch)
    os.rmdir(trace)
    env = dict(ENV, PMTRACE_DIR=trace, **extra_env)
    cmd = ["mpirun", "-np", str(np), "-x", "LD_PRELOAD=" + LIB, "-x", "PMTRACE_DIR"]
    for k in extra_env:
        cmd += ["-x", k]
    out = subprocess.run(cmd + [prog] + args, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd + [prog] + args)} failed:\n{out.stderr}")
    return trace


def timed_sync(trace):
    """`pmtrace sync --json`: (report, wall seconds, peak RSS in bytes)."""
    import json
    import time
    cli = os.path.join(ROOT, "target/release/pmtrace")
    began = time.monotonic()
    with subprocess.Popen([cli, "sync", "--json", trace], stdout=subprocess.PIPE, text=True) as p:
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - began
    if p.returncode != 0:
        sys.exit(f"bench: pmtrace sync {trace} failed")
    return json.loads(out), wall, usage.ru_maxrss * 1024


def sync_section(scratch):
    prog = os.path.join(PROGS, "syncbench")
    us = lambda ns: f"{ns / 1e3:.2f}"
    print("pmtrace sync accuracy: |synced - true| in us (median / p99 / max over every timestamp),")
    print("syncbench 2 s under PMTRACE_CLOCK_SIM (offsets up to +-5 ms, drift up to +-50 ppm)")
    print("targets: constant drift, after regress: median <= 1, max <= 5; drift change: median <= 2;")
    print("no violation left after clc\n")
    print(f"{'case':<40}{'recorded':>22}{'interpolate':>22}{'regress':>22}{'clc':>22}  left  int.dev")
    biggest = None
    cases = [
        ("np=4, constant drift", 4, "seed=11", "100"),
        ("np=4, drift change at 1 s", 4, "seed=11,drift_change_s=1", "100"),
        ("np=8, constant drift", 8, "seed=11", "100"),
        ("np=8, constant drift, 10 sync reps", 8, "seed=11", "10"),
        ("np=8, drift change at 1 s", 8, "seed=11,drift_change_s=1", "100"),
    ]
    for label, np, sim, reps in cases:
        trace = traced_run(np, prog, ["2"], scratch, {"PMTRACE_CLOCK_SIM": sim, "PMTRACE_SYNC_REPS": reps})
        rep, wall, rss = timed_sync(trace)
        cols = [rep["recorded"]["error_ns"]] + [s["error_ns"] for s in rep["steps"]]
        cells = [f"{us(e['median'])}/{us(e['p99'])}/{us(e['max'])}" for e in cols]
        left = sum(rep["steps"][-1]["violations"].values())
        print(f"{label:<40}" + "".join(f"{c:>22}" for c in cells) +
              f"  {left:>4}  {rep['interval_deviation'] * 100:.4f}%")
        stamps = rep["timestamps"]
        if biggest is None or stamps > biggest[0]:
            biggest = (stamps, wall, rss, rep["seconds"], label)
        shutil.rmtree(trace, ignore_errors=True)
    stamps, wall, rss, inner, label = biggest
    events = stamps // 2
    print(f"\nsync throughput ({label}): {events} events in {wall:.2f} s wall "
          f"({events / wall / 1e6:.2f} M events/s, reading included; the sync steps alone "
          f"{inner:.2f} s, {events / inner / 1e6:.2f} M events/s)")
    print(f"  peak memory {rss / 2**20:.0f} MiB = {rss / events:.0f} bytes per event")


def timed(cmd):
    """Runs `cmd`: (wall seconds, peak RSS in bytes)."""
    import time
    began = time.monotonic()
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as p:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed")
    return time.monotonic() - began, usage.ru_maxrss * 1024


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def export_section(scratch):
    """Every export of one synced trace of more than 10 million events."""
    import json
    cli = os.path.join(ROOT, "target/release/pmtrace")
    trace = traced_run(8, os.path.join(PROGS, "syncbench"), ["2"], scratch, {})
    timed([cli, "sync", trace])
    rep = json.loads(subprocess.run([cli, "report", "--json", trace], capture_output=True,
                                    text=True, check=True).stdout)
    events = rep["events"]
    print(f"exports of one synced trace: syncbench np=8, {events} calls, "
          f"{rep['messages']['matched']} messages, {rep['collectives']['logical_messages']} "
          f"collective logical messages (reading, matching, clocks and writing included)")
    print(f"{'format':<12}{'wall s':>9}{'M calls/s':>11}{'peak MiB':>10}{'B/call':>8}{'output MB':>11}")
    for fmt, out in [("otf2", "archive"), ("perfetto", "t.pftrace"), ("chrome", "t.json"),
                     ("timeline", "t.html")]:
        path = os.path.join(scratch, out)
        cmd = ([cli, "timeline", trace, "-o", path] if fmt == "timeline"
               else [cli, "export", trace, "--format", fmt, "-o", path])
        wall, rss = timed(cmd)
        size = size_of(path)
        print(f"{fmt:<12}{wall:>9.2f}{events / wall / 1e6:>11.2f}{rss / 2**20:>10.0f}"
              f"{rss / events:>8.0f}{size / 1e6:>11.1f}")
        shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    shutil.rmtree(trace, ignore_errors=True)


# Issue 18's measuring stick: every verb on one trace of BENCH_ENGINE_SECONDS
# of syncbench at np=8 (5 s: about 95 million calls), each under an
# address-space limit of ENGINE_LIMIT bytes, as a machine that must not be
# taken whole would set one.
ENGINE_SECONDS = os.environ.get("BENCH_ENGINE_SECONDS", "8")
# Issue 38's message-heavy trace: halo2d's iterations at np=4.
ENGINE_HALO_ITERATIONS = os.environ.get("BENCH_ENGINE_HALO_ITERATIONS", "100000")
ENGINE_LIMIT = int(os.environ.get("BENCH_ENGINE_LIMIT", str(20 << 30)))
# The memory the out-of-core rows may use: well below what report and sync
# need for the engine's trace in memory.
ENGINE_OUT_OF_CORE = int(os.environ.get("BENCH_ENGINE_OUT_OF_CORE", str(1 << 30)))


def memory_cgroup(name, limit):
    """A memory cgroup (v1 or v2) of `limit` bytes below this process's
    own, if one can be made here: its directory, else None."""
    try:
        own = open("/proc/self/cgroup").read()
    except OSError:
        return None
    for line in own.splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base, limit_file = f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes"
        elif controllers == "":
            base, limit_file = f"/sys/fs/cgroup{path}", "memory.max"
        else:
            continue
        d = os.path.join(base, name)
        try:
            if not os.path.isdir(d):
                os.mkdir(d)
            with open(os.path.join(d, limit_file), "w") as f:
                f.write(str(limit))
            return d
        except OSError:
            try:
                os.rmdir(d)
            except OSError:
                pass
    return None


def timed_limited(cmd, stdout=None, cgroup=None):
    """Runs `cmd` under the limit (and in `cgroup` if given), its output into
    the file `stdout` if given: (wall s, peak RSS bytes, None) or (wall s,
    peak RSS bytes, the last line it wrote on failure)."""
    import resource
    import time

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ENGINE_LIMIT, ENGINE_LIMIT))
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    began = time.monotonic()
    out = open(stdout, "w") if stdout else subprocess.DEVNULL
    with subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, preexec_fn=limit) as p:
        err = p.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(p.pid, 0)
        code = os.waitstatus_to_exitcode(status)
    if stdout:
        out.close()
    wall = time.monotonic() - began
    if code != 0:
        lines = [l for l in err.splitlines() if l.strip()]
        return wall, usage.ru_maxrss * 1024, (lines[-1] if lines else f"exit {code}")[:100]
    return wall, usage.ru_maxrss * 1024, None


def engine_section(scratch):
    """Issue 38's measuring sticks: every verb on a message-heavy trace
    (halo2d, 100,000 iterations at np=4: one message every 5 calls) and on
    syncbench (all collectives, over 70 million events)."""
    cli = os.path.join(ROOT, "target/release/pmtrace")
    halo = traced_run(4, os.path.join(PROGS, "halo2d"), [ENGINE_HALO_ITERATIONS], scratch, {})
    engine_verbs(cli, halo, f"halo2d {ENGINE_HALO_ITERATIONS} iterations at np=4", scratch)
    shutil.rmtree(halo, ignore_errors=True)
    print()
    trace = traced_run(8, os.path.join(PROGS, "syncbench"), [ENGINE_SECONDS], scratch, {})
    events, report_json = engine_verbs(cli, trace, f"syncbench {ENGINE_SECONDS} s at np=8", scratch)
    out_of_core(cli, trace, events, report_json, scratch)
    shutil.rmtree(trace, ignore_errors=True)


def engine_verbs(cli, trace, what, scratch):
    """Each verb's wall time, events per second and peak memory per event
    on `trace`: (events, the path of its report)."""
    size = size_of(trace)
    # The event count is the report's, if it can be made; else estimated
    # from the size at the 4.1 bytes per call syncbench's records take.
    report_json = os.path.join(scratch, "report.json")
    wall, rss, failed = timed_limited([cli, "report", "--json", trace], stdout=report_json)
    rep = None
    if failed is None:
        with open(report_json) as f:
            rep = json.load(f)
        events = rep["events"]
    else:
        events = int(size / 4.1)
    messages = f", {rep['messages']['matched'] / 1e6:.2f} M messages" if rep else ""
    print(f"the engine: {what}, "
          f"{'' if rep else '~'}{events / 1e6:.1f} M events{messages}, {size / 1e6:.0f} MB on disk; "
          f"address space limited to {ENGINE_LIMIT >> 30} GiB "
          f"(targets: report, sync, critical-path, races, perfetto, otf2, parquet >= 5 M events/s; "
          f"every verb <= 40 B/event)")
    print(f"{'verb':<24}{'wall s':>9}{'M events/s':>12}{'peak MiB':>10}{'B/event':>9}  result")
    # After sync, report's wait states and critical paths are on synchronized
    # time; critical-path and races are the insight verbs of issue 19.
    rows = [("report --json", None), ("sync", None), ("report --json, synced", None),
            ("critical-path --json", None), ("races --json", None), ("merge", "merge.txt"),
            ("export otf2", "archive"), ("export perfetto", "t.pftrace"),
            ("export chrome", "t.json"), ("export parquet", "tables"),
            ("timeline (1 s window)", "t.html")]
    for verb, out in rows:
        path = os.path.join(scratch, out) if out else None
        if verb.startswith("report --json"):
            cmd = [cli, "report", "--json", trace]
        elif verb in ("critical-path --json", "races --json"):
            cmd = [cli, verb.split()[0], trace, "--json"]
        elif verb == "sync":
            cmd = [cli, "sync", trace]
        elif verb == "merge":
            cmd = [cli, "merge", trace, "-o", path]
        elif verb.startswith("timeline"):
            cmd = [cli, "timeline", trace, "--from", "1s", "--to", "2s", "-o", path]
        else:
            cmd = [cli, "export", trace, "--format", verb.split()[1], "-o", path]
        if verb != "report --json":
            wall, rss, failed = timed_limited(cmd)
        if failed is None:
            print(f"{verb:<24}{wall:>9.1f}{events / wall / 1e6:>12.2f}{rss / 2**20:>10.0f}"
                  f"{rss / max(events, 1):>9.0f}  ok")
        else:
            print(f"{verb:<24}{wall:>9.1f}{'-':>12}{rss / 2**20:>10.0f}{'-':>9}  FAILED: {failed}")
        if path and os.path.exists(path):
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    return events, report_json


def out_of_core(cli, trace, events, report_json, scratch):
    """Issue 18, point 2: report and the Perfetto export with less memory
    than they need, out of core. Under a memory cgroup where one can be
    made (the kernel then holds the verb to it); else with `--memory` only."""
    cgroup = memory_cgroup("pmtrace-bench", ENGINE_OUT_OF_CORE)
    how = (f"a memory cgroup of {ENGINE_OUT_OF_CORE >> 20} MiB" if cgroup
           else f"--memory {ENGINE_OUT_OF_CORE >> 20}M (no cgroup can be made here)")
    print(f"out of core, under {how}:")
    reference = os.path.join(scratch, "in-memory.pftrace")
    rows = [("report --json", "ooc-report.json"), ("export perfetto", "ooc.pftrace")]
    for verb, out in rows:
        path = os.path.join(scratch, out)
        extra = [] if cgroup else ["--memory", f"{ENGINE_OUT_OF_CORE >> 20}M"]
        if verb == "report --json":
            # The trace is synced by now: the report to compare with is a new one.
            timed_limited([cli, "report", "--json", trace], stdout=report_json)
            wall, rss, failed = timed_limited([cli, "report", "--json", trace] + extra,
                                              stdout=path, cgroup=cgroup)
            same = failed is None and filecmp.cmp(path, report_json, shallow=False)
        else:
            timed_limited([cli, "export", trace, "--format", "perfetto", "-o", reference])
            wall, rss, failed = timed_limited(
                [cli, "export", trace, "--format", "perfetto", "-o", path] + extra, cgroup=cgroup)
            # Compared a block at a time: the two exports hold gigabytes.
            same = failed is None and filecmp.cmp(path, reference, shallow=False)
            os.remove(reference)
        if failed is None:
            print(f"{verb:<24}{wall:>9.1f}{events / wall / 1e6:>12.2f}{rss / 2**20:>10.0f}"
                  f"{rss / max(events, 1):>9.0f}  {'ok, same output as in memory' if same else 'DIFFERENT OUTPUT'}")
        else:
            print(f"{verb:<24}{wall:>9.1f}{'-':>12}{rss / 2**20:>10.0f}{'-':>9}  FAILED: {failed}")
        if os.path.exists(path):
            os.remove(path)
    if cgroup:
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


if __name__ == "__main__":
    main()
