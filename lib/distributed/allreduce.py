"""Synchronous data parallelism: every worker computes gradients on its share of the batch,
and the gradients are averaged over the workers before each optimizer step.

>>> import rill, rill.distributed as dist
>>> model = rill.nn.Linear(3, 1)
>>> ddp = dist.AllReduce(model)            # a world of one: averaging is the identity
>>> loss = model(rill.ones(4, 3)).sum()
>>> ddp.backward(loss)
>>> model.weight.grad.shape
(1, 3)

At the start the chief's parameters are broadcast to every worker, after checking that all
of them have the same parameter names and shapes (naming any that differ). In `backward`,
the parameters are grouped in buckets (in reverse order of definition, roughly the order
backward finishes them); a bucket's averaging is launched as soon as backward has produced
all its gradients, while backward goes on with the rest, and buckets launch in a fixed order
so that every rank posts the same collectives in the same order.
"""
from __future__ import annotations

import json

import numpy as np

from ..eager.backward import GRAD_READY_HOOKS
from ..eager.context import no_grad
from ..errors import DistributedError
from ..ops.creation import tensor, zeros
from ..sparse import SparseRows
from .collectives import all_gather, all_reduce, broadcast
from .world import world


class AllReduce:
    """Average gradients over all ranks of the job (every rank is a worker here)."""

    def __init__(self, model, bucket_mb: float = 4.0):
        self.world = w = world()
        if w.num_ps:
            raise DistributedError("AllReduce runs on workers only; launch without --ps (or "
                                   "use ParameterServer)", op="AllReduce")
        self.model = model
        self.params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        check_same_parameters(self.params)
        with no_grad():
            for _, p in self.params:  # everyone starts from the chief's values
                from ..ops.methods import assign
                assign(p, broadcast(p, root=w.worker_ranks[0]))
        self.buckets = _buckets([p for _, p in reversed(self.params)], bucket_mb * 2 ** 20)

    def backward(self, loss, grad=None) -> None:
        """loss.backward(), with each gradient added to .grad averaged over the ranks."""
        before = {id(p): p.grad for _, p in self.params}
        ready: dict = {}
        launched: list = []

        def arrived(p, ct):
            ready[id(p)] = ct.to_dense() if isinstance(ct, SparseRows) else ct
            while len(launched) < len(self.buckets) and \
                    all(id(q) in ready for q in self.buckets[len(launched)]):
                launched.append(self._launch(self.buckets[len(launched)], ready))

        for _, p in self.params:
            GRAD_READY_HOOKS[id(p)] = arrived
        try:
            loss.backward(grad)
        finally:
            for _, p in self.params:
                GRAD_READY_HOOKS.pop(id(p), None)
        while len(launched) < len(self.buckets):  # parameters this loss did not reach
            launched.append(self._launch(self.buckets[len(launched)], ready))
        for bucket, handle in zip(self.buckets, launched):
            flat = handle.wait().numpy()
            start = 0
            for p in bucket:
                part = flat[start:start + p.size].reshape(p.shape)
                start += p.size
                mean = tensor(part, dtype=p.dtype, device=p.device)
                old = before[id(p)]
                p.grad = mean if old is None else old + mean

    def _launch(self, bucket, ready):
        parts = [(ready[id(p)] if id(p) in ready else zeros(*p.shape, dtype=p.dtype)).numpy()
                 .astype(np.float32 if p.dtype.itemsize < 4 else p.dtype.storage, copy=False)
                 .reshape(-1) for p in bucket]
        flat = tensor(np.concatenate(parts))
        return all_reduce(flat, "mean", async_op=True)


def _buckets(params, limit_bytes: float) -> list:
    buckets, current, size = [], [], 0
    for p in params:
        if current and size + p.size * 4 > limit_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(p)
        size += p.size * 4
    if current:
        buckets.append(current)
    return buckets


def check_same_parameters(named) -> None:
    """Raise DistributedError on every rank unless all ranks have the same parameter names,
    shapes and dtypes; the message names what differs and on which rank."""
    mine = json.dumps([[n, list(p.shape), p.dtype.name] for n, p in named]).encode()
    length = all_gather(tensor([len(mine)])).numpy().reshape(-1)
    padded = np.zeros(int(length.max()), np.uint8)
    padded[:len(mine)] = np.frombuffer(mine, np.uint8)
    everyone = all_gather(tensor(padded)).numpy()
    tables = []
    for rank, (row, k) in enumerate(zip(everyone, length)):
        try:  # JSON of plain types, from a peer: data, never code
            tables.append({n: (list(s), str(d)) for n, s, d in
                           json.loads(bytes(row[:k]).decode("utf-8"))})
        except (ValueError, TypeError):  # bad JSON or UTF-8, not [name, shape, dtype] rows
            raise DistributedError(f"malformed parameter list from rank {rank}: not JSON "
                                   "[name, shape, dtype] rows", op="AllReduce") from None
    reference = tables[0]
    problems = []
    for rank, table in enumerate(tables[1:], 1):
        for name in sorted(set(reference) | set(table)):
            a, b = reference.get(name), table.get(name)
            if a != b:
                show = lambda s: "missing" if s is None else f"{s[1]}{s[0]}"  # noqa: E731
                problems.append(f"{name}: {show(a)} on rank 0, {show(b)} on rank {rank}")
    if problems:
        raise DistributedError("the ranks' models differ: " + "; ".join(problems[:10]) +
                               (f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""),
                               op="AllReduce")
