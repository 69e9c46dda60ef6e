#!/usr/bin/env python3
"""Synthetic data for the `pmtrace timeline` HTML template (stdlib only).

Simulates R ranks in "true" time: computation gaps, MPI_Send/MPI_Recv
rings, Isend/Irecv + Waitall halo exchanges, Allreduce/Barrier collectives,
a few odd calls, and a second thread on rank 0. Raw times are true times
seen through per-rank clocks with an offset and a drift, so some messages
point backward in raw time; synced times keep only a few ns of residual
error, so none do. The data set (schema: see timeline.html) replaces the
template's `/*PMTRACE_DATA*/` line, as the Rust exporter does.

    python3 tests/support/timeline_sample.py --events 1000 --ranks 4 -o /tmp/t.html
    python3 tests/support/timeline_sample.py --events 1000000 --ranks 16 -o /tmp/big.html
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "..", "crates", "analysis", "src", "export", "timeline.html")

FUNCS = [
    ("MPI_Send", "send"), ("MPI_Isend", "send"), ("MPI_Recv", "recv"), ("MPI_Irecv", "recv"),
    ("MPI_Waitall", "wait"), ("MPI_Wait", "wait"), ("MPI_Allreduce", "coll"), ("MPI_Barrier", "coll"),
    ("MPI_Iprobe", "probe"), ("MPI_Comm_rank", "comm"), ("MPI_Init", "init"), ("MPI_Finalize", "init"),
    ("MPI_Wtime", "other"), ("MPI_Test", "wait"),
]
F = {name: i for i, (name, _) in enumerate(FUNCS)}


def generate(n_events, n_ranks, seed=1, synced=True, threads=True):
    rnd = random.Random(seed)
    uni = rnd.uniform
    # Lanes: rank 0 thread 0, [rank 0 thread 1], rank 1, ...
    lanes, lane_of = [], []
    for r in range(n_ranks):
        lane_of.append(len(lanes))
        lanes.append({"rank": r, "thread": 0, "host": "node%d" % (r // 4 + 1), "label": "rank %d" % r})
        if r == 0 and threads:
            lanes.append({"rank": 0, "thread": 1, "host": "node1", "label": "rank 0 · thread 1"})
    lane_rank = [ln["rank"] for ln in lanes]
    cols = [{k: [] for k in ("f", "s", "e", "ss", "se", "peer", "tag", "bytes", "lc")} for _ in lanes]
    # Per-rank clocks: raw = t + off + drift*t; synced = t + small residual.
    off = [0.0] + [uni(-2500.0, 2500.0) for _ in range(1, n_ranks)]
    drift = [0.0] + [uni(-1e-6, 1e-6) for _ in range(1, n_ranks)]
    resid = [0.0] + [uni(-40.0, 40.0) for _ in range(1, n_ranks)]
    msgs = {k: [] for k in ("sl", "sc", "rl", "rc", "bytes", "tag")}
    lc = [0] * n_ranks

    def add(lane, f, ts, te, peer=-1, tag=-1, nbytes=0, clock=-1):
        r = lane_rank[lane]
        c = cols[lane]
        c["f"].append(f)
        c["s"].append(int(ts + off[r] + drift[r] * ts))
        c["e"].append(int(te + off[r] + drift[r] * te))
        c["ss"].append(int(ts + resid[r]))
        c["se"].append(int(te + resid[r]))
        c["peer"].append(peer)
        c["tag"].append(tag)
        c["bytes"].append(nbytes)
        c["lc"].append(clock)
        return len(c["f"]) - 1

    def msg(sl, sc, rl, rc, nbytes, tag):
        for k, v in (("sl", sl), ("sc", sc), ("rl", rl), ("rc", rc), ("bytes", nbytes), ("tag", tag)):
            msgs[k].append(v)

    def latency(nbytes):
        return uni(800.0, 3000.0) + nbytes * 0.1  # ~10 GB/s

    t = [uni(20000.0, 30000.0) for _ in range(n_ranks)]
    total = 0
    for r in range(n_ranks):  # MPI_Init and MPI_Comm_rank
        lc[r] += 1
        add(lane_of[r], F["MPI_Init"], t[r], t[r] + uni(5e5, 6e5), clock=lc[r])
        t[r] += 6e5 + uni(100, 500)
        lc[r] += 1
        add(lane_of[r], F["MPI_Comm_rank"], t[r], t[r] + uni(50, 200), clock=lc[r])
        t[r] += 300
        total += 2
    thread_t = t[0]
    step = 0
    body = max(0, n_events - 2 * n_ranks)
    while total < body:
        step += 1
        for r in range(n_ranks):  # computation, a little imbalanced
            t[r] += uni(8000.0, 40000.0) * (1.3 if r % 3 == 1 else 1.0)
        kind = rnd.random()
        if kind < 0.35 and n_ranks > 1:  # ring: blocking Send then Recv
            nb = rnd.choice((8, 64, 4096, 65536))
            sends = []
            for r in range(n_ranks):
                dst = (r + 1) % n_ranks
                ts = t[r]
                te = ts + uni(400.0, 1500.0) + nb * 0.05
                lc[r] += 1
                sc = add(lane_of[r], F["MPI_Send"], ts, te, dst, step % 100, nb, lc[r])
                sends.append((ts, sc, lc[r]))
                t[r] = te + uni(50.0, 300.0)
            for r in range(n_ranks):
                src = (r - 1) % n_ranks
                sts, ssc, slc = sends[src]
                arrive = sts + latency(nb)
                ts = t[r]
                te = max(ts + uni(200.0, 600.0), arrive + uni(100.0, 400.0))
                lc[r] = max(lc[r], slc) + 1
                rc = add(lane_of[r], F["MPI_Recv"], ts, te, src, step % 100, nb, lc[r])
                msg(lane_of[src], ssc, lane_of[r], rc, nb, step % 100)
                t[r] = te
            total += 2 * n_ranks
        elif kind < 0.70 and n_ranks > 1:  # halo: Irecv x2, Isend x2, Waitall
            nb = rnd.choice((1024, 8192, 32768))
            posted = []
            for r in range(n_ranks):
                sl = []
                for d in (-1, 1):
                    lc[r] += 1
                    add(lane_of[r], F["MPI_Irecv"], t[r], t[r] + uni(100.0, 400.0), (r + d) % n_ranks, 7, nb, lc[r])
                    t[r] += uni(450.0, 700.0)
                for d in (-1, 1):
                    lc[r] += 1
                    te = t[r] + uni(200.0, 900.0)
                    sc = add(lane_of[r], F["MPI_Isend"], t[r], te, (r + d) % n_ranks, 7, nb, lc[r])
                    sl.append(((r + d) % n_ranks, t[r], sc, lc[r]))
                    t[r] = te + uni(50.0, 200.0)
                posted.append(sl)
            for r in range(n_ranks):
                inc = [(src, sts, ssc, slc) for src in range(n_ranks)
                       for (dst, sts, ssc, slc) in posted[src] if dst == r]
                arrive = max(sts + latency(nb) for (_, sts, _, _) in inc)
                ts = t[r]
                te = max(ts + uni(150.0, 500.0), arrive + uni(100.0, 300.0))
                lc[r] = max([lc[r]] + [slc for (_, _, _, slc) in inc]) + 1
                rc = add(lane_of[r], F["MPI_Waitall"], ts, te, -1, -1, 2 * nb, lc[r])
                for (src, _, ssc, _) in inc:
                    msg(lane_of[src], ssc, lane_of[r], rc, nb, 7)
                t[r] = te
            total += 5 * n_ranks
        elif kind < 0.92:  # collectives: everyone leaves after the last one arrives
            is_ar = rnd.random() < 0.7
            cost = (3000.0 if is_ar else 1500.0) * max(1, (n_ranks - 1).bit_length())
            last = max(t)
            clock = max(lc) + 1
            for r in range(n_ranks):
                te = last + cost + uni(0.0, 600.0)
                lc[r] = clock
                add(lane_of[r], F["MPI_Allreduce" if is_ar else "MPI_Barrier"], t[r], te, -1, -1,
                    8 if is_ar else 0, clock)
                t[r] = te
            total += n_ranks
        else:  # odd calls: probes, a clock read
            for r in range(n_ranks):
                for _ in range(rnd.randint(1, 3)):
                    f = F["MPI_Iprobe"] if rnd.random() < 0.7 else F["MPI_Wtime"]
                    lc[r] += 1
                    te = t[r] + uni(60.0, 400.0)
                    add(lane_of[r], f, t[r], te, -1 if f == F["MPI_Wtime"] else (r + 1) % n_ranks, -1, 0, lc[r])
                    t[r] = te + uni(500.0, 3000.0)
                    total += 1
        # The helper thread on rank 0 polls now and then, sometimes overlapping itself.
        if threads and step % 4 == 0:
            thread_t = max(thread_t + uni(2000.0, 9000.0), t[0] - 30000.0)
            te = thread_t + uni(2000.0, 12000.0)
            add(1, F["MPI_Test"], thread_t, te, -1, -1, 0, -1)
            total += 1
            if rnd.random() < 0.1:  # a nested call inside the one above
                add(1, F["MPI_Iprobe"], thread_t + 500.0, thread_t + 1500.0, 1, -1, 0, -1)
                total += 1
            thread_t = te
    end = max(t) + 1000.0
    for r in range(n_ranks):
        lc[r] += 1
        add(lane_of[r], F["MPI_Finalize"], end, end + uni(2e5, 3e5), clock=lc[r])
        total += 1

    reversed_raw = sum(1 for i in range(len(msgs["sl"]))
                       if cols[msgs["rl"][i]]["e"][msgs["rc"][i]] < cols[msgs["sl"][i]]["s"][msgs["sc"][i]])
    if not synced:
        for c in cols:
            del c["ss"], c["se"]
    n_calls = sum(len(c["f"]) for c in cols)
    return {
        "title": "sample · %d ranks · %d calls" % (n_ranks, n_calls),
        "synced": synced,
        "t0": 1700000000000000000,
        "funcs": [{"name": n, "cat": c} for (n, c) in FUNCS],
        "lanes": lanes,
        "calls": cols,
        "msgs": msgs,
        "stats": {"calls": n_calls, "msgs": len(msgs["sl"]), "reversed_raw": reversed_raw},
    }


def embed(data, template_path):
    with open(template_path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    hits = [i for i, ln in enumerate(lines) if ln.strip() == "/*PMTRACE_DATA*/"]
    if len(hits) != 1:
        sys.exit("template must hold exactly one /*PMTRACE_DATA*/ line, found %d" % len(hits))
    # Every "<" (only ever inside JSON strings) is escaped, so no string in the data can
    # close the <script> or start an HTML comment in it.
    blob = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    lines[hits[0]] = "const DATA = " + blob + ";"
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1000, help="approximate number of calls")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-sync", action="store_true", help="raw times only (synced: false)")
    ap.add_argument("--no-threads", action="store_true", help="no second thread lane on rank 0")
    ap.add_argument("--template", default=TEMPLATE)
    ap.add_argument("--json", help="also write the bare data set here")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    data = generate(a.events, max(1, a.ranks), a.seed, not a.no_sync, not a.no_threads)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as fh:
            json.dump(data, fh, separators=(",", ":"))
    with open(a.out, "w", encoding="utf-8") as fh:
        fh.write(embed(data, a.template))
    st = data["stats"]
    print("%s: %d lanes, %d calls, %d messages, %d reversed in raw time"
          % (a.out, len(data["lanes"]), st["calls"], st["msgs"], st["reversed_raw"]))


if __name__ == "__main__":
    main()
