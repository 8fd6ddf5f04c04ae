"""Partition: cut a placed graph at its device boundaries (Graph -> Graph, then split).

`partition(graph)` returns one graph in which no edge crosses devices any more:
- each value used on another device than its producer's travels as a `send` on the
  producer's device and a `recv` on the consumer's, joined by a rendezvous key; one pair per
  (value, destination device) however many consumers it has there. The placer's
  `to_device` copies are exactly these edges, so each becomes the recv that replaces it;
- a `to_device_prefix` across devices (rows past a count are zero: lib/ops/prefix.py)
  becomes a prefix pair: a send of (x, count) with `prefix=True` that transmits x[:count],
  and a recv with `prefix=True` whose output has x's full static shape, the rows that did
  not travel zero. Shapes stay static; only the valid rows cross;
- each control edge (`after`) from a node on another device becomes a zero-byte pair (a
  send with no input ordered after the predecessor, a recv with no output the node is
  ordered after), so an ordering of state updates the graph asked for survives the cut.
`split(graph)` then gives {device: Graph}, the per-device subgraphs, each a graph of its own
that lints alone (its inputs keep their argument index; its outputs are the results made on
that device, in the order of the whole graph's).

Order, and why no step can deadlock: a send goes right after what it waits for, a recv stays
right before its first consumer, so in the graph's single order every recv comes after its
send. Each device runs its nodes in that order; the first unfinished node overall is then
always runnable (all before it are done, its send included), so every step finishes.

Nested subgraphs are not cut: placement already ran each cond or loop node whole on one
device.
"""
from __future__ import annotations

from ..ir import Graph
from .rewrite import Rewrite


def partition(graph: Graph) -> Graph:
    """The graph with every cross-device edge a send/recv pair (see the module docstring)."""
    if len(graph.devices()) <= 1:
        return graph
    rw = Rewrite(graph)
    pairs: dict = {}   # (new value or node, destination) -> the recv standing for it there
    count = [0]

    def key_for(source, dest) -> str:
        count[0] += 1
        return f"{count[0]}:{source}->{dest}"

    def received(value, dest):
        """The recv on `dest` standing for new value `value` (made with its send once)."""
        found = pairs.get((value, dest))
        if found is None:
            key = key_for(value.device, dest)
            rw.add("send", (value,), {"key": key, "to": dest}, (), value.device,
                   value.node.source)
            recv = rw.add("recv", (), {"key": key, "from": value.device},
                          [(value.shape, value.dtype, dest)], dest, value.node.source)
            found = pairs[(value, dest)] = recv.outputs[0]
        return found

    def prefixed(value, count, dest):
        """The recv on `dest` of the first `count` rows of `value` (a prefix pair, once per
        (value, count, destination))."""
        found = pairs.get((value, count, dest))
        if found is None:
            key = key_for(value.device, dest)
            rw.add("send", (value, count), {"key": key, "to": dest, "prefix": True}, (),
                   value.device, value.node.source)
            recv = rw.add("recv", (), {"key": key, "from": value.device, "prefix": True},
                          [(value.shape, value.dtype, dest)], dest, value.node.source)
            found = pairs[(value, count, dest)] = recv.outputs[0]
        return found

    def go_ahead(node, dest):
        """The output-less recv on `dest` that comes after `node` (on another device)."""
        found = pairs.get((node, dest))
        if found is None:
            key = key_for(node.device, dest)
            rw.add("send", (), {"key": key, "to": dest}, (), node.device, node.source,
                   after=(node,))
            found = pairs[(node, dest)] = rw.add("recv", (), {"key": key, "from": node.device},
                                                 (), dest, node.source)
        return found

    for node in graph.nodes:
        where = node.device
        inputs = [rw.get(v) for v in node.inputs]
        if node.op == "to_device" and inputs[0].device is not where:
            recv = received(inputs[0], where)
            rw._map(node, [recv])
            rw.nodes[node] = (recv.node,)
            continue
        if node.op == "to_device_prefix" and inputs[0].device is not where:
            recv = prefixed(inputs[0], inputs[1], where)
            rw._map(node, [recv])
            rw.nodes[node] = (recv.node,)
            continue
        inputs = [v if v.device is where else received(v, where) for v in inputs]
        after = [a if a.device is where else go_ahead(a, where) for a in rw.after(node)]
        new = rw.add(node.op, inputs, node.attrs,
                     [(v.shape, v.dtype, v.device) for v in node.outputs], where, node.source,
                     after)
        new.constraint = rw.constraint(node)
        rw._map(node, new.outputs)
        rw.nodes[node] = (new,)
    out = rw.finish()
    out.nodes = _sends_early(out.nodes)
    return out


def _sends_early(nodes: list) -> list:
    """Each send moved up to right after what it waits for (the last producer of its
    values, or the node it is ordered after), so the receiving device waits no longer than
    it must."""
    position = {n: i for i, n in enumerate(nodes)}
    anchored: dict = {}
    for n in nodes:
        if n.op == "send":
            anchor = max((v.node for v in n.inputs), key=position.__getitem__) \
                if n.inputs else n.after[0]
            anchored.setdefault(anchor, []).append(n)
    ordered = []
    for n in nodes:
        if n.op == "send":
            continue
        ordered.append(n)
        ordered.extend(anchored.get(n, ()))
    return ordered


def split(graph: Graph) -> dict:
    """{device: Graph} of a partitioned graph: each device's nodes, in order, and the
    results it makes (see `split_results` for where each result of the whole graph is)."""
    return split_results(graph)[0]


def split_results(graph: Graph):
    """({device: Graph}, [(device, position among that device's results)] per result of
    the whole graph)."""
    parts: dict = {}
    for d in graph.devices():
        sub = Graph([n for n in graph.nodes if n.device is d], variables=graph.variables,
                    name=f"{graph.name}@{d}")
        sub.placed = True
        parts[d] = sub
    where = []
    for v in graph.outputs:
        sub = parts[v.node.device]
        where.append((v.node.device, len(sub.outputs)))
        sub.outputs.append(v)
    return parts, where
