"""Control flow that a capture keeps: rill.cond, switch, while_loop, fori_loop and scan.

Eagerly they are Python. Inside @rill.capture each records one node holding its branches or
body as subgraphs (subtrace.py), run by the kernels in run.py, differentiated by the rules
in autodiff.py — a loop is never unrolled into the graph.
"""
from . import primitives  # noqa: F401  (declares switch, scan and while)
from .cond import cond, switch
from .loops import fori_loop, scan, while_loop

__all__ = ["cond", "switch", "while_loop", "fori_loop", "scan"]
