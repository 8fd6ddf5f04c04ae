"""A profile as Chrome trace-event JSON (the "JSON Object Format" that chrome://tracing and
Perfetto read): a complete event ("ph": "X") per op, on one track per (thread, device), so
each device executor of a partitioned graph has its own; an arrow (flow events "s"/"f")
from each send to the recv it feeds; the live bytes as a counter ("C") with profile_memory.
Times are microseconds from the start of the profile."""
from __future__ import annotations

import json
import os

PID = 1


def trace_events(prof) -> list:
    events = prof.events()
    origin = prof.started
    tracks: dict = {}  # (thread ident, device) -> tid

    def tid_of(e):
        key = (e.thread, str(e.device))
        if key not in tracks:
            tracks[key] = len(tracks) + 1
        return tracks[key]

    out = []
    sends: dict = {}  # rendezvous key -> [send events not yet matched]
    flows = []
    for e in events:
        args = {"device": str(e.device), "kind": e.kind}
        if e.source:
            args["source"] = e.source
        if e.module:
            args["module"] = e.module
        if e.shapes is not None:
            args["input shapes"] = [list(s) for s in e.shapes]
        if e.stack:
            args["stack"] = list(e.stack)
        if e.allocated:
            args["allocated bytes"] = e.allocated
        record = {"name": e.name, "cat": e.kind, "ph": "X", "pid": PID, "tid": tid_of(e),
                  "ts": (e.start - origin) * 1e6, "dur": (e.end - e.start) * 1e6,
                  "args": args}
        out.append(record)
        if e.node is not None and e.name == "send":
            sends.setdefault(e.node.attrs.get("key"), []).append(record)
        elif e.node is not None and e.name == "recv":
            waiting = sends.get(e.node.attrs.get("key"))
            if waiting:
                flows.append((waiting.pop(0), record))
    for i, (send, recv) in enumerate(flows):
        common = {"name": "send -> recv", "cat": "transfer", "id": i, "pid": PID}
        out.append(dict(common, ph="s", ts=send["ts"], tid=send["tid"]))
        out.append(dict(common, ph="f", bp="e", ts=recv["ts"], tid=recv["tid"]))
    if prof.profile_memory:
        for when, live in prof.memory_timeline():
            out.append({"name": "memory", "ph": "C", "pid": PID, "tid": 0, "ts": when * 1e6,
                        "args": {"live bytes": live}})
    names = {ident: name for ident, name in prof._threads.items()}
    out.append({"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                "args": {"name": f"rill (pid {os.getpid()})"}})
    for (thread, device), tid in tracks.items():
        out.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid,
                    "args": {"name": f"{names.get(thread, thread)} [{device}]"}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                    "args": {"sort_index": tid}})
    return out


def write_chrome_trace(prof, path) -> None:
    data = {"traceEvents": trace_events(prof), "displayTimeUnit": "ms"}
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        json.dump(data, f)
