"""Reads a Parquet export with DuckDB, pandas and polars, and prints what
each found as JSON: rows of each table, calls per function, messages and
their bytes, bytes between each pair of ranks, and whether every message's
calls are calls of its sender and of its receiver, on its communicator.

The export is `pmtrace export --format parquet` (a file per table) or
`pmtrace-mpi export --format parquet` (a directory of parts per table)."""
import json
import os
import sys

import duckdb
import pandas as pd
import polars as pl

out = sys.argv[1]


def table(name):
    """The table's file, or the glob of its parts."""
    f = os.path.join(out, name + ".parquet")
    return f if os.path.exists(f) else os.path.join(out, name, "*.parquet")


calls_path, msgs_path, ranks_path = table("calls"), table("messages"), table("ranks")
found = {"parts": calls_path.endswith("*.parquet")}

con = duckdb.connect()
q = lambda sql: con.execute(sql).fetchall()
found["duckdb"] = {
    "calls": q(f"SELECT count(*) FROM '{calls_path}'")[0][0],
    "messages": q(f"SELECT count(*) FROM '{msgs_path}'")[0][0],
    "bytes": int(q(f"SELECT coalesce(sum(recv_bytes), 0) FROM '{msgs_path}'")[0][0]),
    "functions": dict(q(f"SELECT function, count(*) FROM '{calls_path}' GROUP BY 1")),
    "pairs": {f"{s}->{d}": [n, int(b)] for s, d, n, b in
              q(f"SELECT src, dst, count(*), sum(recv_bytes) FROM '{msgs_path}' GROUP BY 1, 2")},
    "ranks": q(f"SELECT count(*) FROM '{ranks_path}'")[0][0],
    # Each message's send is a call of its sender, its completion a call
    # of its receiver, the send on the message's communicator.
    "misplaced": q(f"""
        SELECT count(*) FROM '{msgs_path}' m
        LEFT JOIN '{calls_path}' s ON s.id = m.send_call
        LEFT JOIN '{calls_path}' r ON r.id = m.recv_call
        WHERE s.rank IS DISTINCT FROM m.src OR r.rank IS DISTINCT FROM m.dst
           OR s.comm IS DISTINCT FROM m.comm""")[0][0],
    # Ids are dense: 0 to calls - 1, each once.
    "ids": list(q(f"SELECT count(DISTINCT id), min(id), max(id) FROM '{calls_path}'")[0]),
}

# The communicators, phases and (the serial export writes them)
# collective instances.
found["duckdb"]["communicators"] = q(f"SELECT count(*) FROM '{table('communicators')}'")[0][0]
found["duckdb"]["world"] = q(
    f"SELECT size FROM '{table('communicators')}' WHERE name = 'MPI_COMM_WORLD'")[0][0]
found["duckdb"]["phases"] = q(f"SELECT count(*) FROM '{table('phases')}'")[0][0]
colls_path = os.path.join(out, "collectives.parquet")
if os.path.exists(colls_path):
    found["duckdb"]["instances"] = q(f"SELECT count(DISTINCT instance) FROM '{colls_path}'")[0][0]
    # Each member row is a call of its rank, of its function.
    found["duckdb"]["collective_calls"] = dict(q(
        f"SELECT CAST(function AS VARCHAR), count(*) FROM '{colls_path}' GROUP BY 1"))
    found["duckdb"]["members_misplaced"] = q(f"""
        SELECT count(*) FROM '{colls_path}' m LEFT JOIN '{calls_path}' c ON c.id = m.enter_call
        WHERE c.rank IS DISTINCT FROM m.rank OR c.function <> m.function""")[0][0]

# The analyses' tables (the serial export writes them): wait time by kind,
# and the critical path's length with its first and last instant.
waits_path = os.path.join(out, "wait_states.parquet")
if os.path.exists(waits_path):
    found["duckdb"]["waits"] = {k: [int(ns), n] for k, ns, n in q(
        f"SELECT CAST(kind AS VARCHAR), sum(ns), count(*) FROM '{waits_path}' GROUP BY 1")}
    # Each wait's call is a call of its rank, and so is its cause's.
    found["duckdb"]["waits_misplaced"] = q(f"""
        SELECT count(*) FROM '{waits_path}' w
        LEFT JOIN '{calls_path}' c ON c.id = w.call
        LEFT JOIN '{calls_path}' k ON k.id = w.cause_call
        WHERE c.rank IS DISTINCT FROM w.rank OR k.rank IS DISTINCT FROM w.cause_rank""")[0][0]
    found["duckdb"]["races"] = q(f"SELECT count(*) FROM '{os.path.join(out, 'races.parquet')}'")[0][0]
    # Each race's call is a receive of its rank.
    found["duckdb"]["races_misplaced"] = q(f"""
        SELECT count(*) FROM '{os.path.join(out, 'races.parquet')}' x
        LEFT JOIN '{calls_path}' c ON c.id = x.call
        WHERE c.rank IS DISTINCT FROM x.rank OR c.peer IS DISTINCT FROM x.matched_src""")[0][0]
    path = os.path.join(out, "critical_path.parquet")
    found["duckdb"]["path"] = [int(x or 0) for x in q(
        f"SELECT sum(ns), min(from_ns), max(to_ns), count(*) FROM '{path}'")[0]]
    # Segments follow each other: each ends where the next starts.
    found["duckdb"]["path_gaps"] = q(f"""
        SELECT count(*) FROM (
            SELECT to_ns, lead(from_ns) OVER (ORDER BY segment) AS next FROM '{path}')
        WHERE next IS NOT NULL AND next <> to_ns""")[0][0]

# pandas reads a directory of parts as one table.
frame = lambda p: pd.read_parquet(os.path.dirname(p) if p.endswith("*.parquet") else p)
c = frame(calls_path)
m = frame(msgs_path)
found["pandas"] = {
    "calls": len(c),
    "messages": len(m),
    "bytes": int(m["recv_bytes"].sum()),
    "functions": {str(k): int(v) for k, v in c["function"].value_counts().items() if v},
    "ranks": len(frame(ranks_path)),
}

c = pl.read_parquet(calls_path)
m = pl.read_parquet(msgs_path)
per = c.group_by("function").len()
found["polars"] = {
    "calls": c.height,
    "messages": m.height,
    "bytes": int(m["recv_bytes"].sum() or 0),
    "functions": {str(f): int(n) for f, n in per.iter_rows()},
    "ranks": pl.read_parquet(ranks_path).height,
}
json.dump(found, sys.stdout)
