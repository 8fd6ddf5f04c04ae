"""rill.profiler: what ran, where, for how long, and what it allocated.

    with rill.profiler.profile(record_shapes=True, profile_memory=True) as prof:
        step(x, y)
    print(prof.table(sort_by="self_time", group_by="op"))   # or "source", "module"
    prof.export_chrome_trace("trace.json")                  # ui.perfetto.dev
    prof.memory_timeline()                                  # [(seconds, bytes live)]

Eager ops and the nodes of captured functions are both recorded; with no profile open the
cost is nil (see recorder.py).
"""
from .events import Event
from .session import profile
from .table import Average, KeyAverages, ProfileTable

__all__ = ["profile", "Event", "Average", "KeyAverages", "ProfileTable"]
