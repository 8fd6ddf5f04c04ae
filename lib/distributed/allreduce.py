"""Synchronous data parallelism: every worker computes gradients on its share of the batch,
and the gradients are averaged over the workers before each optimizer step.

>>> import rill, rill.distributed as dist
>>> model = rill.nn.Linear(3, 1)
>>> ddp = dist.AllReduce(model)            # a world of one: averaging is the identity
>>> loss = ddp(rill.ones(4, 3)).sum()      # ddp(x) is model(x)
>>> loss.backward()                        # the gradients averaged over the ranks
>>> model.weight.grad.shape
(1, 3)

At the start the chief's parameters are broadcast to every worker, after checking that all
of them have the same parameter names and shapes (naming any that differ). From then on,
as with PyTorch's DistributedDataParallel, every `backward()` that reaches the model's
parameters averages their gradients: `loss.backward()` and `ddp.backward(loss)` are the
same. The parameters are hooked into rill's backward (autodiff/backward.py's GRAD_REDUCERS)
and grouped in buckets, in reverse order of definition, roughly the order backward
finishes them; a bucket's averaging is posted as soon as backward has produced all its
gradients, while backward goes on with the rest, and buckets are posted in a fixed order so
that every rank posts the same collectives in the same order. Backward waits for them at
its end, and .grad receives the mean (added to what .grad held, as backward adds).

The averaged gradient is a value: `backward(create_graph=True)` and backward inside a
captured function are refused (DistributedError, with the fix). `rill.grad` and
`value_and_grad` return this rank's own gradients, unaveraged: they accumulate nothing.
The newest AllReduce of a parameter is the one that averages it.
"""
from __future__ import annotations

import json

import numpy as np

from ..autodiff.backward import GRAD_REDUCERS
from ..eager.context import current, no_grad
from ..errors import DistributedError
from ..ops.creation import tensor, zeros
from ..ops.sparse_rows import SparseRows
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
        self._ready: dict = {}     # id(parameter) -> its cotangent in this backward
        self._launched: list = []  # the handles of the buckets posted in this backward
        for _, p in self.params:   # a parameter another AllReduce averaged is now ours
            previous = GRAD_REDUCERS.get(id(p))
            if previous is not None and previous is not self:
                previous.remove()
        for _, p in self.params:
            GRAD_REDUCERS[id(p)] = self

    def __call__(self, *args, **kwargs):
        """The model's forward (as DistributedDataParallel's module call)."""
        return self.model(*args, **kwargs)

    def backward(self, loss, grad=None) -> None:
        """loss.backward(grad): each gradient added to .grad averaged over the ranks."""
        loss.backward(grad)

    def remove(self) -> None:
        """Stop averaging: backward leaves this model's gradients local again."""
        for _, p in self.params:
            if GRAD_REDUCERS.get(id(p)) is self:
                del GRAD_REDUCERS[id(p)]

    # ---- called by backward (autodiff/backward.py) ----------------------------------------

    def begin(self) -> None:
        self._ready, self._launched = {}, []

    def ready(self, p, ct) -> None:
        """p's final cotangent: post every bucket, in order, whose gradients are all in."""
        if current().interpreter.capturing:
            raise DistributedError(
                "backward inside a captured function reaches parameters that AllReduce "
                "averages, and a captured step cannot average them across ranks: call "
                "backward outside the captured function (capture the forward only), or "
                "capture the step over parameter servers (dist.place_on_ps, dist.replicate)",
                op="AllReduce")
        if ct.requires_grad:
            raise DistributedError(
                "backward(create_graph=True) on parameters that AllReduce averages: the "
                "average is a value, not differentiable; take higher-order gradients with "
                "rill.grad on this rank, or call ddp.remove() first", op="AllReduce")
        self._ready[id(p)] = ct.to_dense() if isinstance(ct, SparseRows) else ct
        while len(self._launched) < len(self.buckets) and \
                all(id(q) in self._ready for q in self.buckets[len(self._launched)]):
            self._launched.append(self._launch(self.buckets[len(self._launched)]))

    def finish(self, found: dict) -> None:
        """Wait for every bucket and put the means in `found` (backward adds them to .grad).
        A parameter this backward did not reach takes part with zeros (another rank's loss
        may have reached it)."""
        try:
            for _, p in self.params:  # a root, or a leaf no node counted down
                if id(p) not in self._ready and id(p) in found:
                    ct = found[id(p)][1]
                    self._ready[id(p)] = ct.to_dense() if isinstance(ct, SparseRows) else ct
            while len(self._launched) < len(self.buckets):
                self._launched.append(self._launch(self.buckets[len(self._launched)]))
            for bucket, handle in zip(self.buckets, self._launched):
                flat = handle.wait().numpy()
                start = 0
                for p in bucket:
                    part = flat[start:start + p.size].reshape(p.shape)
                    start += p.size
                    found[id(p)] = [p, tensor(part, dtype=p.dtype, device=p.device)]
        finally:
            self._ready, self._launched = {}, []

    def _launch(self, bucket):
        parts = [(self._ready[id(p)] if id(p) in self._ready else
                  zeros(*p.shape, dtype=p.dtype)).numpy()
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
