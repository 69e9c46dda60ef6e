#!/usr/bin/python3
"""Decodes a Perfetto trace with the message definitions of the `perfetto`
package (perfetto.protos.perfetto.trace.perfetto_trace_pb2) and prints, as
JSON, what the tests compare with `pmtrace report`:

  slices: SLICE_BEGIN events of category "mpi" (one per MPI call)
  in_flight: SLICE_BEGIN events of category "in_flight"
  unbalanced_tracks: tracks whose BEGIN and END counts differ
  flows: distinct flow ids; flow_starts / flow_ends: ids seen in flow_ids /
      terminating_flow_ids; flows_not_once: ids not seen exactly once each way
  tracks: thread tracks (with a ThreadDescriptor), async tracks (without)
  names: interned event names used by "mpi" slices, with counts
  phases: names of "phase" slices (user phases), with counts

Usage: perfetto_check.py FILE.pftrace
"""
import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    cats, names = {}, {}
    begins, ends = collections.Counter(), collections.Counter()
    starts, terms = collections.Counter(), collections.Counter()
    slices = in_flight = 0
    used = collections.Counter()
    phases = collections.Counter()
    thread_tracks = async_tracks = 0
    for p in trace.packet:
        if p.HasField("interned_data"):
            for c in p.interned_data.event_categories:
                cats[c.iid] = c.name
            for n in p.interned_data.event_names:
                names[n.iid] = n.name
        if p.HasField("track_descriptor"):
            if p.track_descriptor.HasField("thread"):
                thread_tracks += 1
            elif not p.track_descriptor.HasField("process"):
                async_tracks += 1
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            begins[e.track_uuid] += 1
            cat = [cats.get(i) for i in e.category_iids]
            if "mpi" in cat:
                slices += 1
                used[names.get(e.name_iid, "?")] += 1
            elif "in_flight" in cat:
                in_flight += 1
            elif "phase" in cat:
                phases[e.name] += 1
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            ends[e.track_uuid] += 1
        for i in e.flow_ids:
            starts[i] += 1
        for i in e.terminating_flow_ids:
            terms[i] += 1
    flows = set(starts) | set(terms)
    print(json.dumps({
        "slices": slices,
        "in_flight": in_flight,
        "unbalanced_tracks": sum(1 for t in set(begins) | set(ends) if begins[t] != ends[t]),
        "flows": len(flows),
        "flow_starts": sum(starts.values()),
        "flow_ends": sum(terms.values()),
        "flows_not_once": sum(1 for i in flows if starts[i] != 1 or terms[i] != 1),
        "thread_tracks": thread_tracks,
        "async_tracks": async_tracks,
        "names": dict(used),
        "phases": dict(phases),
    }, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
