"""Rematerialization: compute some forward values again in the backward pass instead of
keeping them, until the step's peak memory fits a budget (`rill.capture(fn,
memory_budget=bytes)`).

A training step's peak is usually where the forward pass ends: every activation the backward
pass will read is alive at once. A value produced before the peak and read after it can
instead be computed again just before its first use after the peak, from inputs that are
alive there anyway (parameters, the step's arguments, values the backward pass keeps): it
then no longer occupies memory at the peak. The pass is greedy, one choice at a time:
- it walks the schedule (the graph's node order, as the Program runs it) with the lifetimes
  the memory plan uses (a value lives from its node to its last use; graph outputs to the
  end; arguments, parameters and constants are not counted: passes/memory.py:_peak) and
  finds the step where the most bytes are live;
- among the values alive across that step, made by a pure node (no draw, no check, no state,
  no control flow), it takes the one that frees the most bytes there per second of
  recomputation (passes/cost.py's estimate), counting against it the inputs whose lifetime
  the copy would stretch across the step. An input that is itself dead at the step is
  recomputed with it (a short chain, up to MAX_CHAIN nodes), when that frees more;
- the copy is inserted before the first use after the peak and those uses read it; the
  original keeps its earlier uses (and is dropped if it has none left).
It stops when the peak the Program will run with (the memory plan's when the plan is used,
passes/memory.py) fits the budget, or when no choice frees anything: then it warns, naming
the budget and the lowest peak it reached. A result no better than the graph it was given is
not used.

Recomputed nodes compute the same bits as the originals (same op, inputs and attrs), so the
step's results are unchanged. The pass runs after the others (after fusion: fused groups are
recomputed whole), and must run last: common-subexpression elimination would merge the
copies back. Its report is `graph.memory_plan().remat` (a RematReport).
"""
from __future__ import annotations

import math
import warnings

from ..ir import GRAPH_OPS, Graph, Node
from .cost import DEFAULT
from .dce import dce
from .rewrite import Rewrite, effect
from ...errors import is_framework_file

MAX_CHAIN = 16  # nodes recomputed for one value: itself and inputs dead at the peak
PATIENCE = 8   # choices in a row that do not lower the peak before the pass gives up


class MemoryBudgetWarning(UserWarning):
    """A captured step's peak memory could not be brought down to its memory_budget."""


class RematReport:
    """What the rematerialization pass did: `budget`, `peak_before` / `peak_after` (bytes,
    the peak the Program runs with), `recomputed` ([(op, spec, source line)] of each node
    copied into the backward pass), `fits` (peak_after <= budget)."""

    def __init__(self, budget, peak_before, peak_after, recomputed):
        self.budget, self.peak_before, self.peak_after = budget, peak_before, peak_after
        self.recomputed = recomputed
        self.fits = peak_after <= budget

    def __repr__(self) -> str:
        from .memory import _mb
        ops: dict = {}
        for op, _, _ in self.recomputed:
            ops[op] = ops.get(op, 0) + 1
        shown = ", ".join(f"{op} x{n}" for op, n in ops.items()) or "nothing"
        return (f"Remat for a budget of {_mb(self.budget)}: peak {_mb(self.peak_before)} -> "
                f"{_mb(self.peak_after)} ({'fits' if self.fits else 'does not fit'}); "
                f"{len(self.recomputed)} nodes recomputed ({shown})")


def remat_to(budget: int):
    """The pass for one budget: Graph -> Graph."""
    def remat(graph: Graph) -> Graph:
        return rematerialize(graph, budget)
    return remat


def rematerialize(graph: Graph, budget: int, cost=None) -> Graph:
    """graph, with values recomputed so that its peak fits `budget` bytes where it can."""
    cost = cost or DEFAULT
    before = running_peak(graph)
    work, decisions, peaks = _greedy(graph, budget, cost)
    best = min(peaks, default=before)
    if best >= before:
        work, best, decisions = _copy(graph), before, []
    elif peaks[-1] > best:  # later choices raised the peak elsewhere: stop at the best
        work, decisions, _ = _greedy(graph, budget, cost, limit=peaks.index(best) + 1)
    work = _keep_marks(dce(work), graph) if decisions else work
    work.remat = RematReport(budget, before, best, [c for d in decisions for c in d])
    if best > budget:
        from .memory import _mb
        warnings.warn(f"{graph.name}: memory_budget={budget} bytes ({_mb(budget)}) cannot be "
                      f"met by recomputing values: the lowest peak reached is {best} bytes "
                      f"({_mb(best)}; {before} before). Values made by draws, by state reads or "
                      "inside control flow are never recomputed; raise the budget, or use a "
                      "smaller batch", MemoryBudgetWarning, stacklevel=_user_frame())
    return work


def _greedy(graph: Graph, budget: int, cost, limit=None):
    """(a changed copy of graph, [what each choice copied], [the peak after each choice]):
    choices until the peak fits, none is left, `limit` were made, or PATIENCE choices in a
    row did not lower the peak."""
    work = _copy(graph)
    made: set = set()  # copies the pass made: never copied again (which could go on forever)
    decisions, peaks = [], []
    best = running_peak(work)
    since_best = 0
    while best > budget and since_best < PATIENCE and (limit is None or len(peaks) < limit):
        choice = _choose(work, cost, made)
        if choice is None:
            break
        decisions.append(_apply(work, *choice, made))
        peaks.append(running_peak(work))
        since_best = since_best + 1 if peaks[-1] >= best else 0
        best = min(best, peaks[-1])
    return work, decisions, peaks


def _user_frame() -> int:
    """The stacklevel of the innermost frame outside rill (the user's call that traced)."""
    import sys
    level, frame = 1, sys._getframe(1)
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    return level


def running_peak(graph: Graph) -> int:
    """The peak bytes of one call as the Program runs it: with its memory plan when the
    Program uses one (passes/memory.py), else unplanned."""
    from . import memory
    found = memory.plan(graph)
    planned = memory.ENABLED and graph.__dict__.get("plan_memory") and found.slot_of and \
        found.peak_bytes <= found.unplanned_peak_bytes and \
        all(n.device is None or n.device.kind == "cpu" for n in graph.nodes)
    return found.peak_bytes if planned else found.unplanned_peak_bytes


def _copy(graph: Graph) -> Graph:
    """A node-by-node copy the pass may change in place (its input stays as it was)."""
    rw = Rewrite(graph)
    for node in graph.nodes:
        rw.copy(node)
    return _keep_marks(rw.finish(), graph)


def _keep_marks(new: Graph, old: Graph) -> Graph:
    if old.__dict__.get("plan_memory"):
        new.plan_memory = True
    return new


def _nbytes(v) -> int:
    return math.prod(v.shape) * v.dtype.itemsize


def _counted(v) -> bool:
    """Values the peak counts: those nodes make (not arguments, state or constants)."""
    return v.node.op not in GRAPH_OPS


def _recomputable(node: Node) -> bool:
    return node.op not in GRAPH_OPS and effect(node) is None and \
        (not node.subgraphs or node.op == "fused") and "generator" not in node.attrs


def _lifetimes(graph: Graph):
    """(position of each node, last use of each value, live bytes at each step) with the
    memory plan's rule: a value is live from its node through its last use."""
    pos = {n: i for i, n in enumerate(graph.nodes)}
    end = len(graph.nodes)
    last: dict = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    for v in graph.outputs:
        last[v] = end
    delta = [0] * (end + 2)
    for i, node in enumerate(graph.nodes):
        if node.op in GRAPH_OPS:
            continue
        for v in node.outputs:
            delta[i] += _nbytes(v)
            delta[last.get(v, i) + 1] -= _nbytes(v)
    live, running = [], 0
    for i in range(end):
        running += delta[i]
        live.append(running)
    return pos, last, live


def _choose(graph: Graph, cost, made: set):
    """(nodes to copy in order, position of the first late use, the peak step) of the best
    choice at the peak, or None when no choice frees bytes there."""
    pos, last, live = _lifetimes(graph)
    if not live:
        return None
    peak = max(range(len(live)), key=lambda i: live[i])
    users = graph.users()
    returned = set(graph.outputs)

    def alive_at_peak(v) -> bool:
        return not _counted(v) or (pos[v.node] <= peak <= last.get(v, pos[v.node]))

    best, best_score = None, 0.0
    for node in graph.nodes[:peak]:
        if node in made or not _recomputable(node) or any(v in returned for v in node.outputs):
            continue
        uses = [pos[u] for v in node.outputs for u in users.get(v, ())]
        if not uses or peak in uses or max(uses) < peak:
            continue
        freed = sum(_nbytes(v) for v in node.outputs
                    if any(pos[u] > peak for u in users.get(v, ())))
        chain = _chain(node, alive_at_peak, pos, made)
        stretched = {v for n in chain for v in n.inputs
                     if v.node not in chain and not alive_at_peak(v)}
        gain = freed - sum(_nbytes(v) for v in stretched)
        if gain <= 0:
            continue
        seconds = sum(cost.node_time(n, n.device) if n.device is not None else 1e-6
                      for n in chain)
        score = gain / (seconds + 1e-9)
        if score > best_score:
            first_late = min(p for p in uses if p > peak)
            best, best_score = (chain, first_late, peak), score
    return best


def _chain(node: Node, alive_at_peak, pos, made: set) -> list:
    """node and the producers of its inputs that are dead at the peak and recomputable
    (breadth first, at most MAX_CHAIN nodes), in schedule order."""
    chain = [node]
    frontier = [node]
    while frontier and len(chain) < MAX_CHAIN:
        n = frontier.pop(0)
        for v in n.inputs:
            p = v.node
            if alive_at_peak(v) or p in chain or p in made or not _recomputable(p) or \
                    len(chain) >= MAX_CHAIN:
                continue
            chain.append(p)
            frontier.append(p)
    return sorted(chain, key=pos.__getitem__)


def _apply(graph: Graph, chain, first_late: int, peak: int, made: set) -> list:
    """Copy `chain` before the node at `first_late`; uses after the peak of the last node's
    outputs read the copies. [(op, spec, source)] of what was copied."""
    from ..ir import _spec
    copies: dict = {}  # old value -> its copy
    new_nodes = []
    for node in chain:
        clone = Node(node.op, [copies.get(v, v) for v in node.inputs], node.attrs,
                     node.device, node.source, node.after, node.constraint)
        for v in node.outputs:
            copies[v] = clone.add_output(v.shape, v.dtype, v.device)
        new_nodes.append(clone)
    target = chain[-1]
    for later in graph.nodes[peak + 1:]:
        later.inputs = [copies[v] if v.node is target else v for v in later.inputs]
    graph.nodes[first_late:first_late] = new_nodes
    made.update(new_nodes)
    return [(n.op, ", ".join(_spec(v) for v in n.outputs), n.source) for n in new_nodes]
