"""Which profiles are recording, outermost first (session.py opens and closes them).

While any is, compiled graphs run node by node, timed: session.py sets the executor's
PROFILED_RUN hook (lib/capture/executor.py checks it once per call; capture never imports
the profiler). Eager ops need no flag at all: a profile swaps the interpreter `bind`
already calls (see recorder.py), so with none active nothing is checked per op.
"""
from __future__ import annotations

# Open profiles, outermost first. A graph runs node by node, timed, while this is non-empty.
ACTIVE: list = []
