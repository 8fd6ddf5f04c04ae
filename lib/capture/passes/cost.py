"""What the placer believes a node costs on a device, and a value costs to move.

A small model, as the paper's placer starts from: a node's time is the larger of its
arithmetic (FLOPs from its shapes over the device kind's rate) and its memory traffic (bytes
read and written over the kind's bandwidth), plus a fixed launch cost. A transfer costs a
fixed hand-over plus its bytes over the link's bandwidth (none between two cpu devices of
one process: the buffer is handed over, not copied).

Measured times replace the estimates where a profile has them: `CostModel.from_timeline`
takes the record of an executed step (`f.last_timeline()`), keyed by op, input shapes and
device kind, so a second placement can use what the first one measured.
"""
from __future__ import annotations

import math
import os

from ..ir import GRAPH_OPS

# (FLOP/s, bytes/s, seconds per launch) per device kind. Rough, and only their ratios
# matter: they decide which device finishes a node first.
RATES = {
    "cpu": (2e10, 1e10, 2e-6),
    "gpu": (1e13, 5e11, 1e-5),
}
# Triton's interpreter runs a gpu kernel in Python on the host, far slower than NumPy.
INTERPRETED_GPU = (2e8, 2e8, 5e-4)
# Handing a buffer to another device: fixed cost, bytes/s (None: no copy) per pair of kinds.
# The fixed cost is a send/recv pair between two executor threads as bench/devices.py
# measures it (12-36 us on the 2-core test machine: a thread wake-up, not the copy); a lower
# guess made the placer scatter cheap unpinned nodes and pay a pair for each.
LINKS = {
    ("cpu", "cpu"): (2.5e-5, None),
    ("cpu", "gpu"): (3e-5, 1.2e10),
    ("gpu", "cpu"): (3e-5, 1.2e10),
    ("gpu", "gpu"): (3e-5, 1e11),
}


def _interpreted() -> bool:
    return os.environ.get("RILL_TRITON_INTERPRET", "") not in ("", "0")


def _elements(v) -> int:
    return math.prod(v.shape)


def nbytes(v) -> int:
    """Bytes of one value of this spec."""
    return _elements(v) * v.dtype.itemsize


def flops(node) -> float:
    """Arithmetic of one node, from its shapes: a contraction counts 2 per multiply-add,
    anything else one per element it reads or writes (whichever is more)."""
    if node.op in ("matmul", "dot", "tensordot", "einsum") and node.inputs and node.outputs:
        k = node.inputs[0].shape[-1] if node.inputs[0].shape else 1
        return 2.0 * _elements(node.outputs[0]) * k
    if node.op.startswith("conv") and len(node.inputs) >= 2 and node.outputs:
        return 2.0 * _elements(node.outputs[0]) * math.prod(node.inputs[1].shape[1:])
    read = sum(_elements(v) for v in node.inputs)
    written = sum(_elements(v) for v in node.outputs)
    return float(max(read, written))


def traffic(node) -> int:
    return sum(nbytes(v) for v in node.inputs) + sum(nbytes(v) for v in node.outputs)


class CostModel:
    """`node_time(node, device)` and `transfer_time(value, source, dest)`, in seconds."""

    def __init__(self, measured: dict | None = None):
        # (op, input shapes, device kind) -> seconds, from a profile
        self.measured = dict(measured or {})

    @staticmethod
    def key(node, kind: str) -> tuple:
        return node.op, tuple(tuple(v.shape) for v in node.inputs), kind

    def node_time(self, node, device) -> float:
        if node.op in GRAPH_OPS:
            return 0.0
        found = self.measured.get(self.key(node, device.kind))
        if found is not None:
            return found
        rate, bandwidth, launch = RATES.get(device.kind, RATES["cpu"])
        if device.kind == "gpu" and _interpreted():
            rate, bandwidth, launch = INTERPRETED_GPU
        return launch + max(flops(node) / rate, traffic(node) / bandwidth)

    def transfer_time(self, value, source, dest) -> float:
        if source is dest:
            return 0.0
        fixed, bandwidth = LINKS.get((source.kind, dest.kind), (1e-5, 1e10))
        return fixed + (nbytes(value) / bandwidth if bandwidth else 0.0)

    @classmethod
    def from_timeline(cls, timeline) -> "CostModel":
        """A model that uses the times a step measured (the fastest of repeats)."""
        measured: dict = {}
        for entry in timeline:
            node = entry.node
            if node.op in GRAPH_OPS:
                continue
            key = cls.key(node, entry.device.kind)
            took = entry.end - entry.start
            measured[key] = min(took, measured.get(key, took))
        return cls(measured)


DEFAULT = CostModel()
