#!/usr/bin/env python3
"""Lists the C prototypes of every PMPI_ function an mpi.h declares, in the
one-line form of wrappers/mpi.wrap (kind `plain`, no roles).

Used to seed and to audit mpi.wrap against an MPI library:
    python3 wrappers/import-prototypes.py /usr/include/.../mpi.h > /tmp/all.wrap
The roles of the functions pmtrace records in detail are added by hand.
"""
import re
import sys


def normalise_type(t):
    t = re.sub(r"\bOMPI_DECLSPEC\b|\b__mpi_interface_deprecated__\([^)]*\)", "", t)
    t = re.sub(r"\s+", " ", t).strip()
    t = re.sub(r"\s*\*\s*", "*", t)
    return t


def split_param(p):
    p = p.strip()
    if p in ("void", "..."):
        return None if p == "void" else ("...", "...")
    # int ranges[][3] -> pointer; char *argv[] -> char**
    arr = p.count("[")
    p = re.sub(r"\[[^\]]*\]", "", p)
    m = re.match(r"(.*?)([A-Za-z_][A-Za-z0-9_]*)$", p.strip())
    if not m:
        return (normalise_type(p) + "*" * arr, "arg")
    return (normalise_type(m.group(1)) + "*" * arr, m.group(2))


def main(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    seen = set()
    for m in re.finditer(r"OMPI_DECLSPEC\s+([A-Za-z_][A-Za-z0-9_ *]*?)\s*\bPMPI_([A-Za-z0-9_]+)\s*\(([^;]*?)\)\s*[^;]*;", text):
        ret, name, params = normalise_type(m.group(1)), m.group(2), m.group(3)
        if name in seen:
            continue
        seen.add(name)
        ps = []
        for p in params.split(","):
            sp = split_param(p)
            if sp is None:
                continue
            ps.append(f"{sp[0]} {sp[1]}")
        print(f"plain {ret} MPI_{name}({', '.join(ps)})")


if __name__ == "__main__":
    main(sys.argv[1])
