"""Memory planning: which intermediate values share buffers, within a call and across calls.

Unplanned, every kernel allocates its result and the straight-line program drops it after
its last use; a large NumPy result is fresh pages from the OS on every call. The plan walks
the schedule (the graph's node order, as the Program runs it) and gives each planned value a
*slot*: the start of a block of bytes that the Program keeps from one call to the next, viewed
with the value's shape and dtype (C order). A block is free again once its value is dead,
for any later value it holds (best fit; a block grows while planning where none is big
enough); an elementwise ufunc may take the block of an input of its spec that dies at that
node (in place: NumPy
computes `add(a, b, out=a)` element by element, the same bits). Planned values are computed
with `out=`: ufunc nodes call their ufunc, fused nodes (passes/fuse.py) take the buffers of
their outputs.

The invariant, which the plan must never break: **a buffer that has been handed to the user
(a graph output), that a variable holds (the input of an `assign`: parameters, optimizer
state, `.grad`), or that backs a Tensor outside the graph (a graph input, a `read`, a
constant) is never written.** Only buffers the graph itself allocated for an intermediate
value are slots. So a value gets a slot only if
- its node is a planned CPU node (a ufunc or `fused`), whose result is a buffer it made;
- it is not a graph output and no `assign` takes it;
- every node that takes it computes a new buffer from it and never returns it or a view of
  it (elementwise ops, fused, GEMMs, reductions): a reshape or transpose of a slot could
  otherwise be returned or assigned, and the next call would overwrite what the user holds.
Outputs of earlier calls therefore stay as they were after later calls
(tests/capture/test_capture_memory.py checks it). A Program that runs on several threads at once
gives each running call its own set of slots.

The pass (`memory`) marks a graph for planning; the plan itself is made by the Program from
the graph it runs (`plan(graph)`), because placement and partition copy nodes. A graph over
several devices, or run on the thread-pool scheduler, runs unplanned; so do gpu nodes (their
allocator already pools device memory). `graph.memory_plan()` reports peak bytes with and
without the plan.
"""
from __future__ import annotations

import os

import numpy as np

from ..ir import GRAPH_OPS, Graph

# Off with RILL_MEMORY_PLAN=0 (the Program then ignores the mark).
ENABLED = os.environ.get("RILL_MEMORY_PLAN", "1") != "0"
# Consumers whose CPU kernel always returns a new buffer (a NumPy reduction or GEMM result),
# besides the elementwise ops (kernels/numpy/fused.py:ELEMENTWISE).
_NEVER_ALIAS = frozenset({"fused", "matmul", "linear", "linear_weight_grad", "sum", "mean",
                          "max", "min", "logsumexp", "var"})
# Smaller values are not planned: NumPy and malloc recycle small buffers at no cost, and a
# ufunc called with out= costs ~0.5 us more than one that allocates (a captured chain of 50
# ops on (64,) float32 took 0.033 ms planned, 0.020 unplanned).
MIN_BYTES = 1 << 16


def memory(graph: Graph) -> Graph:
    """The graph, marked to run with a memory plan (its nodes are shared, not copied)."""
    out = Graph(graph.nodes, graph.outputs, graph.variables, graph.name)
    out.placed = graph.placed
    out.plan_memory = True
    return out


class MemoryPlan:
    """blocks: [bytes] of the buffers recycled; values: [(block, shape, numpy dtype)], one
    per planned value, which lives in (the start of) that block; slot_of: {node position:
    (index into values, or None, per output)}; in_place: values that took the block of an
    input dying at their node; peak_bytes / unplanned_peak_bytes: the most bytes live at
    once during a call, with and without the plan (blocks count for the whole call, as they
    stay allocated)."""

    def __init__(self, blocks, values, slot_of, in_place):
        self.blocks, self.values, self.slot_of, self.in_place = blocks, values, slot_of, in_place
        self.peak_bytes = self.unplanned_peak_bytes = 0

    slots = property(lambda self: self.blocks)

    @property
    def slot_bytes(self) -> int:
        return sum(self.blocks)

    def new_arena(self) -> list:
        """The blocks one running call writes into, as a C-ordered view per planned value."""
        blocks = [np.empty(n, np.uint8) for n in self.blocks]
        return [blocks[b][:_bytes(shape, dtype)].view(dtype).reshape(shape)
                for b, shape, dtype in self.values]

    def __repr__(self) -> str:
        return (f"MemoryPlan: peak {_mb(self.peak_bytes)} planned, "
                f"{_mb(self.unplanned_peak_bytes)} unplanned; {len(self.values)} values in "
                f"{len(self.blocks)} recycled buffers ({_mb(self.slot_bytes)}), "
                f"{self.in_place} in place")


def plan(graph: Graph) -> MemoryPlan:
    """Blocks by best fit along the schedule: a value takes the smallest free block that
    holds it, else the largest free block grown to its size, else a new block."""
    from rill.kernels.numpy.fused import fusible_dtype
    nodes = graph.nodes
    last_use: dict = {}
    users: dict = {}
    for i, node in enumerate(nodes):
        for v in node.inputs:
            last_use[v] = i
            users.setdefault(v, []).append(node)
    returned = set(graph.outputs)

    def eligible(v) -> bool:
        return v not in returned and v.shape != () and fusible_dtype(v.dtype) and \
            _bytes(v.shape, np.dtype(v.dtype.storage)) >= MIN_BYTES and \
            all(_never_aliases(u) for u in users.get(v, ()))

    blocks: list = []    # bytes per block (grown while planning)
    free: set = set()    # blocks holding no live value
    holding: dict = {}   # value -> its block
    values: list = []
    slot_of: dict = {}
    in_place = 0

    def release(dead):
        for v in dead:
            b = holding.pop(v, None)
            if b is not None:
                free.add(b)

    def take(nbytes: int) -> int:
        fits = [b for b in free if blocks[b] >= nbytes]
        if fits:
            b = min(fits, key=lambda b: (blocks[b], b))
        elif free:
            b = max(free, key=lambda b: (blocks[b], -b))
            blocks[b] = nbytes
        else:
            blocks.append(nbytes)
            return len(blocks) - 1
        free.discard(b)
        return b

    for i, node in enumerate(nodes):
        kind = _planned_kind(node)
        dying = [v for v in dict.fromkeys(node.inputs) if last_use.get(v) == i]
        if kind is None:
            release(dying)
            continue
        freed: set = set()
        if kind == "ufunc":  # element by element: the result may overwrite a dying input
            same = [v for v in dying if v in holding and v.shape == node.outputs[0].shape and
                    v.dtype.storage == node.outputs[0].dtype.storage]
            freed = {holding[v] for v in same}
            release(same)
        outs = []
        for v in node.outputs:
            if not eligible(v):
                outs.append(None)
                continue
            shape, dtype = tuple(v.shape), np.dtype(v.dtype.storage)
            b = next(iter(freed & free), None) if freed else None
            if b is not None and blocks[b] >= _bytes(shape, dtype):
                free.discard(b)
                in_place += 1
            else:
                b = take(_bytes(shape, dtype))
            holding[v] = b
            outs.append(len(values))
            values.append((b, shape, dtype))
        release(dying)
        release(v for v in node.outputs if v not in last_use)  # no one reads it
        if any(s is not None for s in outs):
            slot_of[i] = tuple(outs)
    planned = MemoryPlan(blocks, values, slot_of, in_place)
    planned.unplanned_peak_bytes = _peak(graph, {}, 0, last_use)
    planned.peak_bytes = _peak(graph, slot_of, planned.slot_bytes, last_use)
    return planned


def _planned_kind(node) -> str | None:
    """"ufunc" or "fused" for a node the plan may give buffers to, else None."""
    if node.op in GRAPH_OPS or node.device is None or node.device.kind != "cpu":
        return None
    if node.op == "fused":
        return "fused"
    from rill.kernels.numpy.fused import _ufunc_of
    return "ufunc" if _ufunc_of(node) is not None else None


def _never_aliases(node) -> bool:
    """node's outputs are new buffers, never one of its inputs or a view of one."""
    from rill.kernels.numpy.fused import ELEMENTWISE
    if node.device is None or node.device.kind != "cpu":
        return False
    if node.op == "cast":
        return node.inputs[0].dtype.storage != node.outputs[0].dtype.storage
    return node.op in ELEMENTWISE or node.op in _NEVER_ALIAS


def _peak(graph, slot_of: dict, resident: int, last_use: dict) -> int:
    """The most bytes live at once: values the nodes allocate (from their production to
    their last use; graph outputs to the end), scratch inside fused nodes while they run,
    plus `resident` bytes held for the whole call."""
    from rill.kernels.numpy.fused import scratch_bytes
    returned = set(graph.outputs)
    live = peak = 0
    owned: dict = {}
    for i, node in enumerate(graph.nodes):
        if node.op in GRAPH_OPS:
            continue
        slots = slot_of.get(i, (None,) * len(node.outputs))
        for v, s in zip(node.outputs, slots):
            if s is None:
                owned[v] = _bytes(v.shape, np.dtype(v.dtype.storage))
                live += owned[v]
        transient = 0
        if node.op == "fused" and node.device is not None and node.device.kind == "cpu":
            transient = scratch_bytes(node.attrs["body"])
        peak = max(peak, live + transient)
        for v in list(dict.fromkeys(node.inputs)) + node.outputs:
            if last_use.get(v, -1) <= i and v not in returned:
                live -= owned.pop(v, 0)
    return peak + resident


def _bytes(shape, dtype) -> int:
    n = np.dtype(dtype).itemsize
    for s in shape:
        n *= s
    return n


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"
