"""A trace as tables: three questions about a pmtrace trace, answered with
DuckDB over its Parquet export, and one plot.

    python3 examples/analysis.py TRACE_DIR [PNG]

TRACE_DIR is a trace (`pmtrace export --format parquet` is run on it, into
TRACE_DIR/tables, unless that is there already) or a Parquet export
itself. The plot goes to PNG (default: analysis.png). Needs duckdb,
pandas and matplotlib (`make tables` puts them in target/tables: run with
PYTHONPATH=target/tables).
"""
import os
import shutil
import subprocess
import sys

import duckdb
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def tables_of(path):
    """The Parquet export of `path`, made if needed."""
    if os.path.exists(os.path.join(path, "calls.parquet")):
        return path
    out = os.path.join(path, "tables")
    if not os.path.exists(os.path.join(out, "calls.parquet")):
        here = os.path.dirname(os.path.abspath(__file__))
        cli = os.path.join(here, "..", "target", "release", "pmtrace")
        if not os.path.exists(cli):
            cli = shutil.which("pmtrace") or "pmtrace"
        subprocess.run([cli, "export", path, "--format", "parquet", "-o", out],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = tables_of(sys.argv[1])
    png = sys.argv[2] if len(sys.argv) > 2 else "analysis.png"
    db = duckdb.connect()
    for t in ("calls", "messages", "ranks"):
        # A file per table (pmtrace), or a directory of parts (pmtrace-mpi).
        f = os.path.join(out, t + ".parquet")
        if not os.path.exists(f):
            f = os.path.join(out, t, "*.parquet")
        db.execute(f"CREATE VIEW {t} AS SELECT * FROM '{f}'")

    # 1. Who sends how much to whom: the communication matrix.
    matrix = db.execute("""
        SELECT src, dst, count(*) AS messages, CAST(sum(recv_bytes) AS BIGINT) AS bytes
        FROM messages GROUP BY ALL ORDER BY src, dst""").df()
    print("bytes between ranks (sender, receiver):")
    print(matrix.to_string(index=False))

    # 2. The slowest messages: from the start of the send to the end of the
    # call that completed the receive, with the functions at both ends.
    slow = db.execute("""
        SELECT m.src, m.dst, m.tag, m.recv_bytes AS bytes,
               (m.recv_ns - m.send_ns) / 1000.0 AS us,
               s.function AS sent_by, r.function AS completed_by
        FROM messages m JOIN calls s ON s.id = m.send_call JOIN calls r ON r.id = m.recv_call
        ORDER BY us DESC LIMIT 10""").df()
    print("\nthe 10 slowest messages (send start to receive completion):")
    print(slow.to_string(index=False))

    # 3. Where each rank spends its time in MPI, by function, between
    # MPI_Init and MPI_Finalize (which start and end the job).
    per_rank = db.execute("""
        SELECT rank, CAST(function AS VARCHAR) AS function,
               sum(exit_ns - enter_ns) / 1e6 AS ms
        FROM calls WHERE function NOT IN ('MPI_Init', 'MPI_Init_thread', 'MPI_Finalize')
        GROUP BY ALL ORDER BY rank, ms DESC""").df()
    print("\ntime in MPI per rank and function, Init and Finalize aside (ms):")
    print(per_rank.groupby("rank").head(3).to_string(index=False))

    # The plot: time in MPI per rank, stacked by function (the five
    # heaviest overall, the rest together).
    top = per_rank.groupby("function")["ms"].sum().nlargest(5).index
    per_rank["function"] = per_rank["function"].where(per_rank["function"].isin(top), "other")
    wide = per_rank.pivot_table(index="rank", columns="function", values="ms",
                                aggfunc="sum", fill_value=0.0)
    ax = wide.plot(kind="bar", stacked=True, figsize=(8, 4.5), width=0.8, rot=0)
    ax.set_xlabel("rank")
    ax.set_ylabel("time in MPI (ms)")
    ax.set_title("Time in MPI per rank, by function")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    plt.tight_layout()
    plt.savefig(png, dpi=100)
    print(f"\nplot: {png}")


if __name__ == "__main__":
    main()
