"""The pass pipeline: each pass is Graph -> Graph; the graph is linted after each.

The order matters:
- fold first, so that the arithmetic on lifted numbers is constants before the others look;
- simplify next: its rules recognize constants (x * 1.0 where the 1.0 was folded). Issue 18
  wrote simplify -> cse -> fold -> dce; that order leaves `x / (2.0 - 1.0)` a divide by a
  folded 1.0 that no later pass removes (tests/capture/test_capture_passes.py,
  test_optimize_shrinks_a_captured_expression, fails with it), so fold stays first;
- cse after the rewrites, which can make two nodes identical (and it merges equal constants);
- dce last, to drop what the others left without users;
then, on the optimized graph, the two passes that spread it over devices:
- place gives every node a device (scopes, colocation, a cost model for the rest) and adds a
  `to_device` copy per (value, destination device);
- partition turns each cross-device edge into a send/recv pair (the graph the per-device
  executors run; `split` cuts it into one graph per device).
- fuse after dce (issue 20): it sees the whole step, backward included, as the others left
  it, and groups elementwise chains into `fused` nodes (passes/fuse.py);
- memory last: it marks the graph for a memory plan, which the Program makes from the final
  schedule (passes/memory.py);
- remat (passes/remat.py), only for `capture(..., memory_budget=)`, after all of them:
  it copies forward values into the backward pass, which cse would merge back;
So: fold -> simplify -> cse -> dce -> fuse -> memory [-> remat] -> place -> partition (`lower`
runs the last two). RILL_FUSE=0 / RILL_MEMORY_PLAN=0 leave out fuse / memory.
Every pass returns a new graph and leaves its input as it was (see rewrite.py). The branches
and loop bodies a node holds go through the same pipeline first, each as a graph of its own
(they are placed whole, with their node).
"""
from __future__ import annotations

import os

from ..ir import map_subgraphs
from .cse import cse
from .dce import dce
from .fold import fold
from .fuse import fuse_where_it_pays
from .memory import memory
from .partition import partition
from .place import place
from .remat import remat_to
from .rewrite import Rewrite
from .simplify import simplify

PASSES: list = [fold, simplify, cse, dce]
# Passes that shape how the optimized graph runs (kernels, buffers), after the rewrites.
EXECUTION_PASSES: list = []
if os.environ.get("RILL_FUSE", "1") != "0":
    EXECUTION_PASSES.append(fuse_where_it_pays)
if os.environ.get("RILL_MEMORY_PLAN", "1") != "0":
    EXECUTION_PASSES.append(memory)
DEVICE_PASSES: list = [place, partition]


def optimize(graph, passes=None, memory_budget=None):
    graph = _optimize_subgraphs(graph, passes)
    for p in (PASSES + EXECUTION_PASSES if passes is None else passes):
        graph = p(graph).lint()
    if memory_budget is not None:  # the whole step's peak, not its bodies'
        graph = remat_to(memory_budget)(graph).lint()
    return graph


def _optimize_subgraphs(graph, passes):
    if not any(node.subgraphs for node in graph.nodes):
        return graph
    rw = Rewrite(graph)
    for node in graph.nodes:
        if node.subgraphs and node.op != "fused":  # a fused body is final
            rw.copy(node, attrs=map_subgraphs(node.attrs, lambda g: optimize(g, passes)))
        else:
            rw.copy(node)
    return rw.finish()


def lower(graph, devices=None, cost=None):
    """(placed graph, partitioned graph): place then partition, linted after each."""
    placed = place(graph, devices, cost)
    if placed is not graph:
        placed.lint()
    parted = partition(placed)
    if parted is not placed:
        parted.lint()
    return placed, parted
