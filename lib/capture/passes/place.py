"""Placement: give every node a device (Graph -> Graph), after the paper's greedy heuristic.

What is fixed first:
- the graph's boundary keeps its devices: an `input` runs where its argument is, a `read` or
  `assign` where its variable lives (so a variable's reads, assigns and, since optimizer
  slots are variables made beside their parameter, its slots stay together), and each
  result is handed back on the device the traced code gave it;
- an op that says where its result lives (creation, random draws, `to_device`) stays there;
  a copy (`to_device`, `to_device_prefix`) starts where its input is, and a prefix copy's
  count is brought there too (the sender decides how many rows to send);
- a node recorded inside `with rill.device(...)` runs there (any device of the kind for a
  spec without an index), and one inside `rill.colocate_with(t)` beside t's producer;
- a node that holds subgraphs (cond, while_loop) runs whole on one device;
- a node whose inputs are all another task's (a distributed job's parameter server: the
  optimizer's update of a variable it holds) runs on that task; free work never goes to
  another task.
The rest go, in topological order, to the feasible device (one with a kernel for the op)
where they would finish first, counting when each device is free and what moving their
inputs there costs (passes/cost.py). Ties keep the device the trace gave.

Where a value is used on another device than its producer's, a `to_device` node is added,
one per (value, destination) however many consumers it has there. The result is an ordinary
graph (evaluate and the single-device Program run it, the copies doing the moves); partition
(passes/partition.py) turns each cross-device `to_device` into a send/recv pair.

A constant goes where it is used (a copy per device that uses it: moving it would cost a
transfer per call). Which devices exist for the rest: those the graph already names (node
devices, scopes) plus any given as `devices`. A graph that names one device is returned as
it is.

Unmeetable constraints raise PlacementError naming the node (as printed) and the user's line.
"""
from __future__ import annotations

from ...devices import Device, device as as_device
from ...errors import PlacementError
from ..ir import Graph, _Names, format_node, map_subgraphs
from .cost import DEFAULT
from .rewrite import Rewrite


def place(graph: Graph, devices=None, cost=None) -> Graph:
    """The graph with every node's device decided (see the module docstring). `devices`: more
    devices the placer may use (names or Devices); `cost`: a CostModel."""
    if graph.placed:
        return graph
    extra = [as_device(d) for d in (devices or ())]
    named = _named_devices(graph)
    candidates = list(dict.fromkeys(named + extra))
    constrained = _constrained(graph)
    if len(candidates) <= 1 and not constrained:
        return graph
    return _Placer(graph, candidates, cost or DEFAULT).run()


def _constrained(graph: Graph) -> bool:
    return any(n.constraint is not None or any(_constrained(g) for g in n.subgraphs.values())
               for n in graph.nodes)


def _named_devices(graph: Graph) -> list:
    found = []
    for node in graph.nodes:
        found.append(node.device)
        c = node.constraint
        if c is not None and c.device is not None:
            found.append(c.device)
    for v in graph.variables:
        found.append(v.device)
    return list(dict.fromkeys(found))


class _Placer:
    def __init__(self, graph, candidates, cost):
        self.old, self.cost = graph, cost
        self.candidates = candidates
        # Free work stays in this process: other tasks' devices (a distributed job's
        # parameter servers) take only what is pinned or colocated there.
        self.local = [d for d in candidates if d.task is None] or candidates
        self.rw = Rewrite(graph)
        self.rw.graph.placed = True
        self.names = _Names()
        for node in graph.nodes:  # value names as print(graph) gives them, for messages
            for v in node.outputs:
                self.names[v]
        self.free = {d: 0.0 for d in candidates}   # when each device is next idle (estimate)
        self.ready: dict = {}                      # new Value -> when it exists (estimate)
        self.moved: dict = {}                      # (new Value, Device) -> its copy there
        self.constants: dict = {}                  # (old constant Node, Device) -> new Value
        self.deferred: set = set()                 # old constants placed where used

    def run(self) -> Graph:
        rw = self.rw
        for node in self.old.nodes:
            if node.op == "constant" and not node.after:
                self.deferred.add(node)
                continue
            where = self.decide(node)
            attrs = node.attrs
            if node.op == "to_device":  # the copy now starts where its input is
                v = node.inputs[0]
                inputs = [self.on(v, v.device) if v.node in self.deferred else self.rw.get(v)]
                attrs = dict(attrs, source=inputs[0].device)
            elif node.op == "to_device_prefix":  # as to_device; the count stays beside x
                v = node.inputs[0]
                x = self.on(v, v.device) if v.node in self.deferred else self.rw.get(v)
                inputs = [x, self.on(node.inputs[1], x.device)]
                attrs = dict(attrs, source=x.device)
            else:
                inputs = [self.on(v, where) for v in node.inputs]
            if node.subgraphs and where is not node.device:
                attrs = map_subgraphs(attrs, lambda g: _moved(g, where))
            start = max([self.free[where]] + [self.ready.get(v, 0.0) for v in inputs])
            finish = start + self.cost.node_time(node, where)
            new = rw.add(node.op, inputs, attrs,
                         [(v.shape, v.dtype, where) for v in node.outputs], where,
                         node.source, rw.after(node))
            new.constraint = rw.constraint(node)
            rw._map(node, new.outputs)
            rw.nodes[node] = (new,)
            self.free[where] = finish
            self.ready.update((v, finish) for v in new.outputs)
        outputs = []
        for v in self.old.outputs:  # results go back where the traced code had them
            outputs.append(self.on(v, v.device))
        rw.graph.outputs = outputs
        return rw.graph

    # ---- values across devices -------------------------------------------------------------

    def on(self, old_value, where: Device):
        """The new value standing for old_value, on device `where` (copied there once)."""
        node = old_value.node
        if node in self.deferred:
            key = (node, where)
            found = self.constants.get(key)
            if found is None:
                new = self.rw.add("constant", (), node.attrs,
                                  [(old_value.shape, old_value.dtype, where)], where,
                                  node.source)
                found = self.constants[key] = new.outputs[0]
                self.rw.nodes.setdefault(node, (new,))
            return found
        value = self.rw.get(old_value)
        if value.device is where:
            return value
        key = (value, where)
        found = self.moved.get(key)
        if found is None:
            copy = self.rw.add("to_device", (value,), {"device": where, "source": value.device},
                               [(value.shape, value.dtype, where)], where, node.source)
            found = self.moved[key] = copy.outputs[0]
            self.ready[found] = self.ready.get(value, 0.0) + \
                self.cost.transfer_time(value, value.device, where)
        return found

    # ---- choosing --------------------------------------------------------------------------

    def fail(self, node, why: str):
        error = PlacementError(f"{format_node(node, self.names)}: {why}", op="place")
        error.node = node
        error.location = node.source or error.location
        raise error

    def decide(self, node) -> Device:
        pinned, why = self.pinned(node)
        c = node.constraint
        options = None
        if c is not None and c.device is not None:
            if c.any_index:
                options = [d for d in self.candidates if d.kind == c.device.kind] or [c.device]
            else:
                options = [c.device]
            scope = f"device scope '{c.device.kind if c.any_index else c.device}'"
            if pinned is not None and pinned not in options:
                self.fail(node, f"it is pinned to {pinned} ({why}) but was recorded inside a "
                                f"{scope}; remove the scope around it or move {why.split()[0]}")
            why = why or f"recorded inside a {scope}"
        if c is not None and c.colocate is not None:
            there = self.rw.get(c.colocate).device if c.colocate in self.rw.values else None
            there = c.colocate.device if there is None else there
            if pinned is not None and pinned is not there:
                self.fail(node, f"it is pinned to {pinned} ({why}) and colocated with a value "
                                f"on {there}; the two constraints cannot both hold")
            if options is not None and there not in options:
                self.fail(node, f"it is colocated with a value on {there} but was recorded "
                                f"inside a device scope for {options[0]}; the two constraints "
                                "cannot both hold")
            pinned, why = there, why or "colocated with a value"
        if pinned is not None:
            options = [pinned]
        if node.subgraphs and options is None:
            options = [node.device]
        if options is None and node.device.task is not None:
            # Every input of it is another task's (a variable's update on its parameter
            # server): it runs there. That task runs nothing else that is not pinned there.
            options, why = [node.device], f"its inputs are held by task {node.device.task}"
        if options is None:
            options = self.local
        feasible = [d for d in options if self.has_kernel(node, d)]
        if not feasible:
            where = options[0] if len(options) == 1 else "any of " + ", ".join(map(str, options))
            self.fail(node, f"no {options[0].kind} kernel is registered for {node.op}, and it "
                            f"must run on {where} ({why or 'no other device has one'})")
        chosen = feasible[0] if len(feasible) == 1 else \
            min(feasible, key=lambda d: (self.finish(node, d), d is not node.device))
        if node.subgraphs:
            self.check_body(node, chosen)
        return chosen

    def pinned(self, node):
        """(device, why) for nodes whose device is not the placer's to choose."""
        op = node.op
        if op == "input":
            return node.device, "the argument is there"
        if op in ("read", "assign"):
            var = self.old.variables[node.attrs["var"]]
            return var.device, f"{var.name} lives there"
        if op == "constant":
            return node.device, "a constant ordered after other nodes"
        if node.primitive.device_attr:
            return node.attrs["device"], "the op makes its result there"
        return None, ""

    def has_kernel(self, node, d) -> bool:
        if node.op in ("input", "constant", "read", "assign"):
            return True
        return d.kind in node.primitive.kernels

    def finish(self, node, d) -> float:
        start = self.free[d]
        for v in node.inputs:
            if v.node in self.deferred:
                continue  # a constant is made where it is used
            value = self.rw.get(v)
            arrive = self.ready.get(value, 0.0) + self.cost.transfer_time(value, value.device, d)
            start = max(start, arrive)
        return start + self.cost.node_time(node, d)

    def check_body(self, node, where):
        """Bodies run whole on their node's device; a scope inside one cannot be honoured."""
        for name, sub in node.subgraphs.items():
            for inner in sub.nodes:
                c = inner.constraint
                if c is not None and c.device is not None and not (
                        c.device is where or (c.any_index and c.device.kind == where.kind)):
                    self.fail(node, f"its {name} has {inner.op} (at {inner.source}) recorded "
                                    f"for {c.device}, but the {name} runs whole on {where}: "
                                    "the ops of a cond branch or loop body cannot be split "
                                    "over devices; put the device scope around the whole "
                                    "control-flow call")
                if inner.subgraphs:
                    self.check_body(inner, where)


def _moved(graph: Graph, where: Device) -> Graph:
    """A body with every node and value on `where` (its node moved there whole)."""
    rw = Rewrite(graph)
    for node in graph.nodes:
        attrs = map_subgraphs(node.attrs, lambda g: _moved(g, where)) if node.subgraphs \
            else node.attrs
        if "device" in attrs and isinstance(attrs["device"], Device):
            attrs = dict(attrs, device=where)
        new = rw.add(node.op, [rw.get(v) for v in node.inputs], attrs,
                     [(v.shape, v.dtype, where) for v in node.outputs], where, node.source,
                     rw.after(node))
        rw._map(node, new.outputs)
        rw.nodes[node] = (new,)
    return rw.finish()
