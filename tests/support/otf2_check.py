#!/usr/bin/python3
"""Reads an OTF2 archive with the OTF2 Python bindings (`otf2` from PyPI)
and prints what the tests compare with `pmtrace report`, as JSON:

  per_rank: {rank: {enters, leaves, sends, receives, collectives}}
  matched / unmatched_sends / unmatched_receives: point-to-point messages
      matched here by MPI's rule (sender, receiver, communicator, tag, in order)
  reversed: matched messages whose MpiRecv time is below their MpiSend time
  non_monotone: events whose time is below the previous one of their location
  lamport_attributes: Leave events carrying the `lamport` attribute
  pipit_matrix: [{src, dst, count, bytes}] of sends as pipit's
      comm_matrix() reads them: the sender is its location group's id, the
      receiver the send's `receiver` as it stands (a rank of the send's
      communicator, taken for a world rank), bytes its `msg_length`

Usage: otf2_check.py ARCHIVE/traces.otf2
"""
import collections
import json
import sys

import otf2
from otf2.events import (Enter, Leave, MpiCollectiveEnd, MpiIrecv, MpiIsend,
                         MpiRecv, MpiSend, NonBlockingCollectiveComplete)


def main(path):
    per_rank = collections.defaultdict(lambda: collections.Counter())
    sends = collections.defaultdict(list)
    recvs = collections.defaultdict(list)
    last = {}
    non_monotone = 0
    lamport = 0
    pipit = collections.defaultdict(lambda: [0, 0])
    with otf2.reader.open(path) as trace:
        rank_of = {}
        for loc in trace.definitions.locations:
            rank_of[loc] = int(loc.group.name.split()[-1])
        for loc, ev in trace.events:
            rank = rank_of[loc]
            if ev.time < last.get(loc, 0):
                non_monotone += 1
            last[loc] = ev.time
            c = per_rank[rank]
            if isinstance(ev, Enter):
                c["enters"] += 1
            elif isinstance(ev, Leave):
                c["leaves"] += 1
                if any(a.name == "lamport" for a in (ev.attributes or {})):
                    lamport += 1
            elif isinstance(ev, (MpiSend, MpiIsend)):
                c["sends"] += 1
                members = list(ev.communicator.group.members)
                dst = rank_of[members[ev.receiver]]
                key = (rank, dst, ev.communicator.name, ev.msg_tag)
                sends[key].append(ev.time)
                cell = pipit[(loc.group._ref, ev.receiver)]
                cell[0] += 1
                cell[1] += ev.msg_length
            elif isinstance(ev, (MpiRecv, MpiIrecv)):
                c["receives"] += 1
                members = list(ev.communicator.group.members)
                src = rank_of[members[ev.sender]]
                key = (src, rank, ev.communicator.name, ev.msg_tag)
                recvs[key].append(ev.time)
            elif isinstance(ev, (MpiCollectiveEnd, NonBlockingCollectiveComplete)):
                c["collectives"] += 1
    matched = unmatched_sends = unmatched_recvs = reversed_ = 0
    for key in set(sends) | set(recvs):
        ss, rs = sends.get(key, []), recvs.get(key, [])
        s, r = len(ss), len(rs)
        matched += min(s, r)
        reversed_ += sum(1 for a, b in zip(ss, rs) if b < a)
        unmatched_sends += max(0, s - r)
        unmatched_recvs += max(0, r - s)
    print(json.dumps({
        "per_rank": {str(k): dict(v) for k, v in sorted(per_rank.items())},
        "matched": matched,
        "reversed": reversed_,
        "unmatched_sends": unmatched_sends,
        "unmatched_receives": unmatched_recvs,
        "non_monotone": non_monotone,
        "lamport_attributes": lamport,
        "pipit_matrix": [{"src": s, "dst": d, "count": c, "bytes": b}
                         for (s, d), (c, b) in sorted(pipit.items())],
    }, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
