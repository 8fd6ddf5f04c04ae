"""The pass pipeline: each pass is Graph -> Graph; the graph is linted after each.

The order matters:
- fold first, so that the arithmetic on lifted numbers is constants before the others look;
- simplify next: its rules recognize constants (x * 1.0 where the 1.0 was folded);
- cse after the rewrites, which can make two nodes identical (and it merges equal constants);
- dce last, to drop what the others left without users.
Every pass returns a new graph and leaves its input as it was (see rewrite.py).
"""
from __future__ import annotations

from .cse import cse
from .dce import dce
from .fold import fold
from .simplify import simplify

PASSES: list = [fold, simplify, cse, dce]


def optimize(graph, passes=None):
    for p in (PASSES if passes is None else passes):
        graph = p(graph).lint()
    return graph
