"""`graph.placement_report()`: per device, what runs there, its estimated time, and the bytes
it sends and receives. Plain text by `str()`, a table under rich (`rich.print(report)`).

It reads a placed graph (cross-device edges are `to_device` copies) or a partitioned one
(`send`/`recv` pairs) alike; times come from the cost model the placer used
(passes/cost.py), so they are estimates unless it was given measured times.
"""
from __future__ import annotations

from collections import Counter

from .ir import GRAPH_OPS
from .passes.cost import DEFAULT, nbytes


class DeviceLine:
    """One device's share of a graph."""

    __slots__ = ("device", "nodes", "ops", "seconds", "sent", "received")

    def __init__(self, device):
        self.device = device
        self.nodes = 0          # nodes that compute (graph ops and transfers not counted)
        self.ops: Counter = Counter()
        self.seconds = 0.0      # estimated, summed over its nodes
        self.sent = 0           # bytes leaving the device
        self.received = 0       # bytes arriving


class PlacementReport:
    def __init__(self, graph, cost=None):
        cost = cost or DEFAULT
        self.graph = graph
        self.lines = {d: DeviceLine(d) for d in graph.devices()}
        self.transfers = 0
        for node in graph.nodes:
            line = self.lines[node.device]
            if node.op == "to_device" and node.inputs[0].device is not node.device:
                moved = nbytes(node.outputs[0])
                self.lines[node.inputs[0].device].sent += moved
                line.received += moved
                self.transfers += 1
            elif node.op == "send":
                self.transfers += 1
                line.sent += nbytes(node.inputs[0]) if node.inputs else 0
            elif node.op == "recv":
                line.received += nbytes(node.outputs[0]) if node.outputs else 0
            elif node.op not in GRAPH_OPS:
                line.nodes += 1
                line.ops[node.op] += 1
                line.seconds += cost.node_time(node, node.device)

    def __str__(self) -> str:
        rows = [f"placement of {self.graph.name}: {len(self.lines)} device(s), "
                f"{self.transfers} cross-device transfer(s)",
                f"  {'device':<8} {'nodes':>6} {'est. time':>11} {'sent':>10} {'received':>10}"
                "  most common ops"]
        for line in self.lines.values():
            common = ", ".join(f"{op} x{n}" for op, n in line.ops.most_common(4))
            rows.append(f"  {str(line.device):<8} {line.nodes:>6} {_time(line.seconds):>11} "
                        f"{_bytes(line.sent):>10} {_bytes(line.received):>10}  {common}")
        return "\n".join(rows)

    __repr__ = __str__

    def __rich__(self):
        from rich.table import Table
        table = Table(title=f"placement of {self.graph.name} "
                            f"({self.transfers} cross-device transfers)")
        for name, justify in (("device", "left"), ("nodes", "right"), ("est. time", "right"),
                              ("sent", "right"), ("received", "right"),
                              ("most common ops", "left")):
            table.add_column(name, justify=justify)
        for line in self.lines.values():
            table.add_row(str(line.device), str(line.nodes), _time(line.seconds),
                          _bytes(line.sent), _bytes(line.received),
                          ", ".join(f"{op} x{n}" for op, n in line.ops.most_common(4)))
        return table

    def _repr_html_(self) -> str:
        import html
        return f"<pre>{html.escape(str(self))}</pre>"


def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
