"""Checkpoints of captured graphs across tasks (being written: see the issue's part 6)."""
from __future__ import annotations

from ...errors import DistributedError


def handler(node, graph):
    raise DistributedError(f"{node.op} nodes are not supported yet", op=node.op)


def serve(server, worker: int, kind: str, message) -> None:
    raise DistributedError(f"{kind} requests are not supported yet", op=kind)
