"""What a parameter server runs of a worker's step: pull, serve, contribute, apply.

A worker's captured training step, placed and partitioned, leaves on each ps a part that
reads variables and sends them to the worker, receives what the worker computed (the
gradients), and updates the variables from it. The ps cuts that part in three graphs:

    pull        everything the part's sends need (reads, and anything computed from them
                alone): run when the worker starts a step;
    serve       sends that answer what the worker sent within the step (a sharded
                embedding's rows for its ids), with what they need; cut again into
                independent rounds (`rounds`), each run once its own values are here;
    contribute  each value received from the worker, handed to an `accumulate` node: the
                worker's contribution to the step;
    apply       everything the part's assigns need, with each received value replaced by a
                `take` node (the mean of the contributions accumulated for the step) and
                every read done again (so an update starts from the variable's value when
                it is applied, not when the worker pulled it).

How many contributions a step takes is the replicas' mode, after the paper (§4.4):
asynchronous replicas apply each contribution as it arrives (a step of one); synchronous
replicas with b backup workers apply once the first n - b contributions of the current step
have arrived, as their mean, and drop (and count) contributions that arrive for a step
already applied. A worker's next pull waits until the step it contributed to was applied
or it was dropped: the queue of tokens the paper uses as a barrier.
"""
from __future__ import annotations

import threading

import numpy as np

from ...capture.ir import Graph, Node
from ...errors import DistributedError
from ...ops.indexing import ARRAY


def split(part: Graph, mode: str = "async"):
    """(pull, serve, contribute, apply) graphs of a ps's part of a worker's step."""
    received = [n for n in part.nodes if n.op == "recv"]
    tainted = set(received)  # nodes that depend on something the worker sent
    for node in part.nodes:
        if any(v.node in tainted for v in node.inputs) or any(a in tainted for a in node.after):
            tainted.add(node)
    sends = [n for n in part.nodes if n.op == "send"]
    late = [n for n in sends if n in tainted]
    assigns = [n for n in part.nodes if n.op == "assign"]
    for node in late:  # what it sends must not come from this step's update
        if _needs(node, lambda n: n.op == "assign"):
            raise DistributedError(
                f"this step sends a value from a parameter server back to the worker that "
                f"the ps computes from the step's own update ({node.attrs['key']}); a ps "
                "applies updates after the step, so it sends only what it held before. "
                "Compute that value on the worker", op="replicate")
    pull = _closure(part, [n for n in sends if n not in tainted], {})
    serve = _closure(part, late, {})
    served = {n for n in serve.nodes if n.op == "recv"}
    take_from = {n for n in received if n.outputs and _feeds(part, n, assigns)}
    if mode == "sync":
        # Only values whose mean is meaningful can be averaged: floating-point values at fixed
        # positions; not ids, nor the looked-up rows of a sharded table (prefix moves).
        odd = [n for n in take_from if not n.outputs[0].dtype.is_floating or
               n.attrs.get("prefix")]
        if odd:
            raise DistributedError(
                f"synchronous replicas average what workers send, but the step sends the ps "
                f"{odd[0].outputs[0].dtype} values by {odd[0].attrs['key']} (a sharded "
                "table's ids or rows): averaging them over workers has no meaning. Use "
                "mode='async' for this step", op="replicate")
        both = [n for n in take_from if any(n.attrs["key"] == r.attrs["key"] for r in served)]
        if both:
            raise DistributedError(
                f"synchronous replicas average what workers send, but "
                f"{both[0].attrs['key']} is also used to answer the worker within the step "
                "(a lookup's ids): use mode='async' for this step", op="replicate")
    # A value the serve phase received that the update needs too is kept for it there.
    for node in serve.nodes:
        if node.op == "recv" and node.outputs and any(
                node.attrs["key"] == n.attrs["key"] for n in take_from):
            serve.nodes.insert(serve.nodes.index(node) + 1, _accumulate(node))
    served_keys = {n.attrs["key"] for n in served}
    contribute = Graph(variables=part.variables, name=f"{part.name}.contribute")
    for node in take_from:
        if node.attrs["key"] in served_keys:
            continue
        recv = contribute.add("recv", (), node.attrs, [(v.shape, v.dtype) for v in
                                                       node.outputs], node.device, node.source)
        recv.outputs[0].device = node.device
        contribute.nodes.append(_accumulate(recv))
    contribute.nodes.sort(key=lambda n: n.op != "recv")  # every recv first
    takes = {n: ("take", {"name": n.attrs["key"]}) for n in take_from}
    apply = _closure(part, assigns, takes)
    apply = _rows_in_place(apply)
    for graph, kind in ((pull, "pull"), (serve, "serve"), (apply, "apply")):
        graph.name = f"{part.name}.{kind}"
    return pull, serve, contribute, apply


def rounds(serve: Graph) -> list:
    """The serve graph cut into independent graphs, one per group of sends (and the
    accumulates kept for the update) that share work other than reads and constants.

    A step may look up several tables held by one ps (an input embedding and a sampled
    softmax's rows): the worker sends the second lookup's ids only once the first one's
    rows have come back, so the ps answers each lookup as soon as its own ids arrive
    rather than waiting for every value the serve phase receives (which deadlocks)."""
    roots = [n for n in serve.nodes if n.op in ("send", "accumulate")]
    if len(roots) <= 1:
        return [serve] if serve.nodes else []
    group = list(range(len(roots)))

    def find(i):
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i
    owner: dict = {}  # a node two roots need joins them (reads and constants are copied)
    for i, root in enumerate(roots):
        for node in _needed(root):
            if node.op in ("read", "constant"):
                continue
            j = owner.setdefault(node, i)
            group[find(i)] = find(j)
    members: dict = {}
    for i, root in enumerate(roots):
        members.setdefault(find(i), []).append(root)
    out = []
    for k, grouped in enumerate(members.values()):
        g = _closure(serve, grouped, {})
        g.name = f"{serve.name}.{k}" if len(members) > 1 else serve.name
        out.append(g)
    return out


def _needed(root) -> set:
    """`root` and every node it needs (inputs and `after` edges)."""
    needed, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(v.node for v in node.inputs)
            stack.extend(node.after)
    return needed


def _rows_in_place(apply: Graph) -> Graph:
    """`assign(v, index_add(read(v), rows, ids))`, the read used by nothing else, becomes
    `add_rows(rows, ids, var=v)`: the update of a sharded table's looked-up rows writes them
    where they are (a ps's variables are its own) instead of copying the whole table."""
    uses: dict = {}
    for node in apply.nodes:
        for v in node.inputs:
            uses.setdefault(v, []).append(node)
    fused: dict = {}  # assign -> (index_add, read)
    for node in apply.nodes:
        if node.op != "assign":
            continue
        update = node.inputs[0].node
        if update.op != "index_add" or ARRAY not in update.attrs.get("key", ()):
            continue
        read = update.inputs[0].node
        if read.op == "read" and read.attrs["var"] == node.attrs["var"] and \
                uses[read.outputs[0]] == [update] and uses[update.outputs[0]] == [node] and \
                not any(read in n.after for n in apply.nodes if n is not node):
            fused[node] = (update, read)
    if not fused:
        return apply
    gone = {n for pair in fused.values() for n in pair}
    nodes = []
    for node in apply.nodes:
        if node in gone:
            continue
        if node in fused:
            update, read = fused[node]
            node = type(node)("add_rows", update.inputs[1:], {"var": node.attrs["var"],
                                                              "key": update.attrs["key"]},
                              node.device, node.source, [a for a in node.after if a is not read])
        nodes.append(node)
    apply.nodes = nodes
    return apply


def _accumulate(recv):
    return Node("accumulate", recv.outputs, {"name": recv.attrs["key"]}, recv.device,
                recv.source)


def _needs(node, predicate) -> bool:
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n is not node and predicate(n):
            return True
        stack.extend(v.node for v in n.inputs)
        stack.extend(n.after)
    return False


def _feeds(part: Graph, source, targets) -> bool:
    """Whether anything in `targets` needs `source`."""
    return any(t is source or _needs(t, lambda n: n is source) for t in targets)


def _closure(part: Graph, roots, replaced: dict) -> Graph:
    """A graph of `roots` and everything they need (inputs and `after` edges), in the part's
    order; nodes in `replaced` become (op, attrs) nodes with no inputs, and output-less
    recvs (go-aheads from the worker) are left out: a step's contribution has arrived
    before anything that waited for them runs."""
    needed: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        if node in replaced:
            continue
        stack.extend(v.node for v in node.inputs)
        stack.extend(node.after)
    out = Graph(variables=part.variables, name=part.name)
    new: dict = {}   # old Value -> new Value
    made: dict = {}  # old Node -> new Node
    for node in part.nodes:
        if node not in needed or (node.op == "recv" and not node.outputs):
            continue
        op, attrs = replaced.get(node, (node.op, node.attrs))
        inputs = [] if node in replaced else [new[v] for v in node.inputs]
        after = [] if node in replaced else [made[a] for a in node.after if a in made]
        copy = out.add(op, inputs, attrs, [(v.shape, v.dtype) for v in node.outputs],
                       node.device, node.source, after)
        for old, v in zip(node.outputs, copy.outputs):
            v.device = old.device
            new[old] = v
        made[node] = copy
    return out


class Contribution:
    """One worker's values for one step, gathered by `accumulate` nodes."""

    def __init__(self, worker: int, step: int):
        self.worker, self.step, self.values = worker, step, {}

    def add(self, name: str, buffer) -> None:
        self.values[name] = buffer


class Replicas:
    """The shared state of every worker's registration of one step function on this ps:
    the global step (steps applied), the accumulators, and the counts."""

    def __init__(self, mode: str, workers: int, backup_workers: int, names):
        self.name = "step"  # the captured function's name (for the counts serve() returns)
        self.mode, self.workers, self.backup = mode, workers, backup_workers
        self.required = 1 if mode == "async" else workers - backup_workers
        self.names = frozenset(names)
        self.global_step = 0
        self.accumulators: dict = {name: [] for name in names}
        self.contributors = 0
        self.last: dict = {}     # worker -> the step it last contributed to
        self.closed: set = set()  # workers that will not contribute again
        self.stats = {"applied": 0, "contributions": 0, "dropped": 0}
        # One thread serves every worker (server.py), so nothing waits on this; it keeps a
        # step's apply and a checkpoint's reads of the store from ever interleaving.
        self.lock = threading.Lock()

    def ready(self, worker: int) -> bool:
        """Whether a pull of this worker may run now: in sync mode, once its last
        contribution was applied (or dropped), the barrier of the paper's token queue. The
        server's event loop holds the worker's request until then."""
        last = self.last.get(worker)
        return self.mode != "sync" or last is None or self.global_step > last or \
            self._starved()

    def commit(self, contribution: Contribution, apply) -> None:
        """Count a contribution; when it completes its step, apply(self) runs (under the
        lock, so that steps apply one at a time and no contribution lands in between)."""
        with self.lock:
            self.stats["contributions"] += 1
            self.last[contribution.worker] = contribution.step
            if self.mode == "sync" and (contribution.step < self.global_step or
                                        self._starved()):
                self.stats["dropped"] += 1   # a backup worker's late contribution
                return
            for name, buffer in contribution.values.items():
                self.accumulators[name].append(buffer)
            self.contributors += 1
            if self.contributors < self.required:
                return
            apply(self)
            for name in self.accumulators:
                self.accumulators[name] = []
            self.contributors = 0
            self.global_step += 1
            self.stats["applied"] += 1

    def close(self, worker: int) -> None:
        """A worker is done. Once too few are left to complete a step, the contributions
        waiting for it are dropped (counted), and nobody waits for that step any more."""
        with self.lock:
            self.closed.add(worker)
            if self._starved() and self.contributors:
                self.stats["dropped"] += self.contributors
                for name in self.accumulators:
                    self.accumulators[name] = []
                self.contributors = 0

    def _starved(self) -> bool:
        return self.workers - len(self.closed) < self.required

    def mean(self, name: str):
        """What a `take` node gives: the mean of this step's contributions, in the order
        they arrived (as the eager ParameterServer averages pushes)."""
        parts = self.accumulators[name]
        if len(parts) == 1:
            return parts[0]
        return np.mean(parts, axis=0)  # NumPy's rule for the dtype, as the eager strategy
