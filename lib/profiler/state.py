"""Which profilers are recording: read once per call of a compiled graph (lib/capture/executor.py).

Kept apart, importing nothing, so that the executor can read it without importing the
profiler (which imports the executor). Eager ops need no flag at all: a profile swaps the
interpreter `bind` already calls (see recorder.py), so with none active nothing is checked per op.
"""
from __future__ import annotations

# Open profiles, outermost first. A graph runs node by node, timed, while this is non-empty.
ACTIVE: list = []
