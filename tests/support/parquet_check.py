"""Reads a Parquet export (`pmtrace export --format parquet`) with DuckDB,
pandas and polars, and prints what each found as JSON: rows of each table,
calls per function, messages and their bytes, bytes between each pair of
ranks, and whether every message's rows name a call of its sender and of
its receiver."""
import json
import os
import sys

import duckdb
import pandas as pd
import polars as pl

out = sys.argv[1]
calls_path = os.path.join(out, "calls.parquet")
msgs_path = os.path.join(out, "messages.parquet")
ranks_path = os.path.join(out, "ranks.parquet")
found = {}

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
    # Each message's send row is a call of its sender, its completion's a
    # call of its receiver.
    "misplaced": q(f"""
        WITH c AS (SELECT row_number() OVER () - 1 AS row, rank FROM '{calls_path}')
        SELECT count(*) FROM '{msgs_path}' m
        LEFT JOIN c s ON s.row = m.send_call
        LEFT JOIN c r ON r.row = m.recv_call
        WHERE s.rank IS DISTINCT FROM m.src OR r.rank IS DISTINCT FROM m.dst""")[0][0],
}

c = pd.read_parquet(calls_path)
m = pd.read_parquet(msgs_path)
found["pandas"] = {
    "calls": len(c),
    "messages": len(m),
    "bytes": int(m["recv_bytes"].sum()),
    "functions": {str(k): int(v) for k, v in c["function"].value_counts().items() if v},
    "ranks": len(pd.read_parquet(ranks_path)),
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
