"""The pass pipeline: each pass is Graph -> Graph; the graph is linted after each."""
from __future__ import annotations

PASSES: list = []


def optimize(graph, passes=None):
    for p in (PASSES if passes is None else passes):
        graph = p(graph).lint()
    return graph
