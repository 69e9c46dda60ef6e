#!/usr/bin/env python3
"""MPICH's own test suite (`test/mpi` of the MPICH sources) under pmtrace:
programs nobody here wrote. Not part of `make test` (it needs those sources).

  python3 tests/mpich_suite.py SRC MPI [DIR ...]

SRC is a `test/mpi` directory (from an MPICH source tree); MPI is `ompi`
(Debian's Open MPI: mpicc, mpirun) or `mpich` (mpicc.mpich,
mpirun.mpich); DIRs default to pt2pt coll comm datatype topo part. The
programs are built into target/mpich-suite/MPI (util and dtpools by hand,
with a minimal configuration header in place of configure's). Fortran
directories (`f77/pt2pt`, `f08/coll`, ...) are built as their Makefile.am
lists them, with mpifort (mpifort.mpich) and MPICH's `util/mtest_f77.f` or
`util/mtest_f08.f90`. Each line
of each directory's testlist runs untraced and then traced; a line is
printed for each: `ok`, or `DIFF` (`XFAIL DIFF` where MPICH expects it
to fail) with what differed:
  - exit status, standard output, and standard error beyond pmtrace's one
    summary line;
  - in the trace (`pmtrace report --json`): unmatched sends or receives,
    unresolved peers, messages received before they were sent, message
    ids against the FIFO rule, Lamport violations, piggybacks that
    disagree with the rebuilt clocks, dropped events, incomplete ranks,
    warnings.
A program that fails or hangs the same way untraced is the MPI's or the
test's; compare both runs by hand before calling a DIFF pmtrace's.
Settings: MAXNP (largest np run, 8), TMO (seconds per run, 120), ONLY (a
regular expression over DIR/name).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.environ.get("LIB", os.path.join(ROOT, "target/release/libpmtrace.so"))
CLI = os.path.join(ROOT, "target/release/pmtrace")
MPIS = {"ompi": ("mpicc", "mpirun"), "mpich": ("mpicc.mpich", "mpirun.mpich")}
FORTRAN = {"ompi": "mpifort", "mpich": "mpifort.mpich"}
# What configure would write into the Fortran directories' `*.h.in`.
FORTRAN_KINDS = {"@F77_MPI_ADDRESS@": "integer*8", "@F77_MPI_OFFSET@": "integer*8"}
CONF = {
    "include/mpitestconf.h": [
        "HAVE_STDLIB_H", "HAVE_STRING_H", "HAVE_UNISTD_H", "HAVE_SYS_TIME_H", "HAVE_STDARG_H",
        "HAVE_LONG_DOUBLE", "HAVE_LONG_LONG", "HAVE__BOOL", "HAVE_MPI_INIT_THREAD",
        "HAVE_MPI_WIN_CREATE", "HAVE_GETRUSAGE", "HAVE_SYS_RESOURCE_H", "HAVE_STDINT_H",
        "HAVE_INTTYPES_H", "HAVE_INT64_T", "HAVE_INT32_T", "HAVE_INT16_T", "HAVE_INT8_T",
        "HAVE_ATOMIC", "MTEST_THREAD_PACKAGE_POSIX", "THREAD_PACKAGE_POSIX",
        "THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX"],
    "dtpools/dtpoolsconf.h": ["HAVE_STDLIB_H", "HAVE_STRING_H", "HAVE_LONG_DOUBLE", "HAVE_LONG_LONG"],
}


def build(src, mpi, out, dirs):
    cc = MPIS[mpi][0]
    """Builds every program of `dirs` it can; returns how many."""
    for name, macros in CONF.items():
        path = os.path.join(src, name)
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write("".join(f"#define {m}\n" if " " in m else f"#define {m} 1\n" for m in macros))
    mpix = os.path.join(src, "include/mtest_mpix.h")
    if not os.path.exists(mpix):
        open(mpix, "w").close()
    inc = ["-I" + os.path.join(src, d) for d in ("include", "dtpools/include", "dtpools")]
    objs = os.path.join(out, "obj")
    os.makedirs(objs, exist_ok=True)
    util = ["util/mtest.c", "util/mtest_common.c", "util/mtest_single.c", "util/dtypes.c"]
    dtp = [os.path.join("dtpools/src", f) for f in sorted(os.listdir(os.path.join(src, "dtpools/src")))
           if f.endswith(".c")]
    lib = []
    for f in util + dtp + ["util/mtest_thread.c"]:
        o = os.path.join(objs, os.path.basename(f)[:-2] + ".o")
        subprocess.run([cc, "-O1", "-w", *inc, "-c", os.path.join(src, f), "-o", o], check=True)
        lib.append(o)
    # The threads/ programs take the thread package in place of its stubs.
    threaded = [o for o in lib if not o.endswith("mtest_single.o")]
    lib = lib[:-1]
    runner = os.path.join(objs, "run_mpitests.o")
    subprocess.run([cc, "-O1", "-w", *inc, "-c", os.path.join(src, "util/run_mpitests.c"), "-o", runner],
                   check=True)
    built = 0
    for d in dirs:
        os.makedirs(os.path.join(out, d), exist_ok=True)
        if d.split("/")[0] in ("f77", "f08"):
            built += build_fortran(src, mpi, out, d)
            continue
        for f in sorted(os.listdir(os.path.join(src, d))):
            if not f.endswith(".c"):
                continue
            exe = os.path.join(out, d, f[:-2])
            if os.path.exists(exe):
                built += 1
                continue
            # Programs with a `run` function (no main) take MPICH's runner.
            objs_d = threaded if d.startswith("threads") else lib
            for extra in ([], [runner]):
                cmd = [cc, "-O1", "-w", *inc, os.path.join(src, d, f), *objs_d, *extra, "-o", exe, "-lm",
                       "-lpthread"]
                if subprocess.run(cmd, capture_output=True).returncode == 0:
                    built += 1
                    break
    return built


def build_fortran(src, mpi, out, d):
    """Builds the programs of a Fortran directory (f77/..., f08/...) as
    its Makefile.am lists them, with MPICH's Fortran test utilities."""
    cc, fc, lang = MPIS[mpi][0], FORTRAN[mpi], d.split("/")[0]
    here = os.path.join(src, d)
    for f in os.listdir(here):
        if f.endswith(".h.in"):
            text = open(os.path.join(here, f)).read()
            for k, v in FORTRAN_KINDS.items():
                text = text.replace(k, v)
            with open(os.path.join(here, f[:-3]), "w") as h:
                h.write(text)
    objs = os.path.join(out, "obj", lang)
    os.makedirs(objs, exist_ok=True)
    util = os.path.join(objs, "mtest.o")
    if not os.path.exists(util):
        name = {"f77": "util/mtest_f77.f", "f08": "util/mtest_f08.f90"}[lang]
        subprocess.run([fc, "-O1", "-w", "-c", os.path.join(src, name), "-o", util], check=True, cwd=objs)
    am = open(os.path.join(here, "Makefile.am")).read().replace("\\\n", " ")
    m = re.search(r"noinst_PROGRAMS\s*=([^\n]*)", am)
    ext = ".f" if lang == "f77" else ".f90"
    built = 0
    for prog in (m.group(1).split() if m else []):
        srcs = re.search(rf"^{re.escape(prog)}_SOURCES\s*=([^\n]*)", am, re.M)
        files = srcs.group(1).split() if srcs else [prog + ext]
        exe = os.path.join(out, d, prog)
        if os.path.exists(exe):
            built += 1
            continue
        # C parts (mixed-language tests) are compiled apart, then linked in.
        parts = []
        for f in files:
            if f.endswith(".c"):
                o = os.path.join(objs, prog + "-" + f[:-2] + ".o")
                subprocess.run([cc, "-O1", "-w", "-I" + os.path.join(src, "include"), "-c",
                                os.path.join(here, f), "-o", o], capture_output=True)
                parts.append(o)
            else:
                parts.append(os.path.join(here, f))
        # gfortran 10 and later reject the old interface's differing
        # argument types unless told to allow them.
        loose = ["-fallow-argument-mismatch"] if lang == "f77" else []
        cmd = [fc, "-O1", "-w", *loose, "-I" + here, "-I" + objs, "-J" + os.path.join(objs, prog), *parts,
               util, "-o", exe]
        os.makedirs(os.path.join(objs, prog), exist_ok=True)
        if subprocess.run(cmd, capture_output=True, cwd=objs).returncode == 0:
            built += 1
    return built


def launch(mpi, np, prog, args, env, trace, timeout):
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
    if trace:
        env = dict(env, LD_PRELOAD=LIB, PMTRACE_DIR=trace)
    cmd = [MPIS[mpi][1], "-np", str(np)]
    for k, v in env.items():
        if mpi == "ompi":
            e[k] = v
            cmd += ["-x", k]
        else:
            cmd += ["-genv", k, v]
    # A working directory of its own: the MPI-IO tests write their files
    # (testfile, ...) where they run.
    here = tempfile.mkdtemp(prefix="pmtrace-suite-cwd-")
    try:
        p = subprocess.run(cmd + [prog] + args, env=e, capture_output=True, text=True, timeout=timeout,
                           cwd=here)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        subprocess.run(["pkill", "-9", "-f", prog])
        return "timeout", "", ""
    finally:
        shutil.rmtree(here, ignore_errors=True)


def trace_notes(trace):
    """What the trace says that it should not, or why it was not read."""
    size = sum(os.path.getsize(os.path.join(trace, f)) for f in os.listdir(trace))
    if size > 300e6:
        return [f"trace of {size / 1e6:.0f} MB, not read"]
    r = subprocess.run([CLI, "report", "--json", trace], capture_output=True, text=True)
    if r.returncode:
        return ["report failed: " + r.stderr.strip()[:200]]
    j = json.loads(r.stdout)
    m, c = j["messages"], j["clocks"]
    notes = [f"{k}={m[k]}" for k in ("unmatched_sends", "unmatched_receives", "unresolved") if m.get(k)]
    if j["violations"]["reversed"]:
        notes.append(f"reversed={j['violations']['reversed']}")
    notes += [f"{k}={c[k]}" for k in ("fifo_disagreements", "unmatched_by_id", "lamport_violations",
                                       "wire_mismatches", "decreasing") if c.get(k)]
    for k in ("dropped_events", "incomplete_ranks", "warnings"):
        if j[k]:
            notes.append(f"{k}={str(j[k])[:120]}")
    return notes


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in MPIS:
        sys.exit(__doc__)
    src, mpi = os.path.abspath(sys.argv[1]), sys.argv[2]
    dirs = sys.argv[3:] or ["pt2pt", "coll", "comm", "datatype", "topo", "part"]
    out = os.path.join(ROOT, "target/mpich-suite", mpi)
    print(f"built {build(src, mpi, out, dirs)} programs", flush=True)
    maxnp, timeout, only = int(os.environ.get("MAXNP", "8")), int(os.environ.get("TMO", "120")), os.environ.get("ONLY")
    for d in dirs:
        tl = next((p for p in (os.path.join(src, d, "testlist.in"), os.path.join(src, d, "testlist"))
                   if os.path.exists(p)), None)
        for line in open(tl) if tl else []:
            w = line.split()
            if not w or w[0].startswith("#") or "@" in line or len(w) < 2:
                continue
            name, np = w[0], int(w[1])
            args = [x[4:] for x in w[2:] if x.startswith("arg=")]
            env = dict(x[4:].split("=", 1) for x in w[2:] if x.startswith("env="))
            prog = os.path.join(out, d, name)
            if (np > maxnp or (only and not re.search(only, f"{d}/{name}")) or not os.path.exists(prog)
                    or any(k.startswith("MPIR_CVAR_CH4") for k in env)):
                continue
            plain = launch(mpi, np, prog, args, env, None, timeout)
            trace = tempfile.mkdtemp(prefix="pmtrace-suite-")
            os.rmdir(trace)
            traced = launch(mpi, np, prog, args, env, trace, timeout)
            notes = []
            if plain[0] != traced[0]:
                notes.append(f"exit {plain[0]} -> {traced[0]}")
            if plain[1] != traced[1]:
                notes.append("stdout differs")
            extra = [x for x in traced[2].splitlines() if x not in plain[2].splitlines()]
            ours = [x for x in extra if x.startswith("pmtrace:")]
            skipped = "Skipped" in plain[1]
            if len(ours) != 1 and not skipped:
                notes.append(f"{len(ours)} pmtrace lines")
            if len(ours) < len(extra):
                notes.append(f"stderr adds {[x for x in extra if x not in ours][:2]}")
            if os.path.isdir(trace):
                notes += trace_notes(trace)
                shutil.rmtree(trace, ignore_errors=True)
            elif plain[0] == 0 and not skipped:
                notes.append("no trace")
            xfail = any(x.startswith("xfail") for x in w[2:])
            tag = "ok" if not notes else ("XFAIL DIFF" if xfail else "DIFF")
            print(f"{tag} {d}/{name} np={np} {' '.join(args)} | {'; '.join(notes)}", flush=True)


if __name__ == "__main__":
    main()
