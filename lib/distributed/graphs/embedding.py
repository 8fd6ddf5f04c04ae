"""An embedding table split by rows over devices (the TF paper's sharded embedding, §4.2).

`ShardedEmbedding(num_embeddings, embedding_dim, shards)` holds rows [lo_k, hi_k) of the
table as parameter `shard{k}` on device shards[k] (by default one per parameter server,
"ps:k/cpu"). A lookup is Part -> Gather -> Stitch, in ordinary rill ops:

    part     on the ids' device, per shard: the ids that fall in it moved to the front, as
             local row numbers, their count, and where each came from (shard_select);
    gather   the local ids copied to the shard with `to_device_prefix` (only the first
             `count` cross), rows looked up there with F.embedding, copied back the same way;
    stitch   each shard's rows added at their positions of the output (the rows past the
             count go to a dummy row that is dropped).

Shapes stay static (every shard is sent a buffer as long as the whole batch) while only the
rows looked up travel: partition makes each prefix copy a send of x[:count] and a recv that
pads (lib/ops/prefix.py). Autodiff needs nothing new: a shard's gradient is the SparseRows of
F.embedding, its rows coming back by the prefix copy's own gradient, so an optimizer's sparse
path updates only those rows, where the shard lives. Under a captured step whose shards are on
parameter servers, each ps answers the lookup within the step (its serve phase,
replicas.py); such a step runs with mode="async" only: synchronous replicas average what
workers send, and a lookup's ids cannot be averaged.
"""
from __future__ import annotations

from ... import dtypes as dt
from ...devices import device as as_device
from ...errors import ArgumentError, DistributedError, DTypeError
from ...nn import functional as F
from ...nn import init
from ...nn.module import Module
from ...nn.parameter import Parameter
from ...ops.arguments import as_int, as_tensor
from ...ops.checks import check
from ...ops.creation import arange, empty, to_device, zeros
from ...ops.elementwise import logical_and, where
from ...ops.indexing import index_add, take
from ...ops.prefix import to_device_prefix
from ...ops.reduce import sum as sum_
from ...ops.shape import reshape
from ...ops.sorting import argsort

OP = "ShardedEmbedding"


def shard_select(ids, lo: int, hi: int):
    """(local, count, positions) of the flat int64 `ids` [m] that fall in rows [lo, hi):
    local[:count] are those ids minus lo and positions[:count] where they are in `ids`, both
    in the order of `ids`; count is a 0-d int64. The entries past count are 0 in `local` and
    m in `positions` (a dummy row), so that the buffers keep the static length m."""
    m = ids.shape[0]
    position = arange(m, dtype=dt.int64, device=ids.device)
    inside = logical_and(ids >= lo, ids < hi)
    count = sum_(inside, dtype=dt.int64)
    order = argsort(where(inside, 0, 1))  # stable: the ids inside first, in their order
    valid = position < count
    local = where(valid, take(ids, order) - lo, 0)
    positions = where(valid, order, m)
    return local, count, positions


def _copy(x, count, device):
    """x on `device`, of which only the first `count` rows matter (nothing moves when it is
    there already: the rows past count are never read, see shard_select)."""
    return x if device is x.device else to_device_prefix(x, count, device)


class ShardedEmbedding(Module):
    """An nn.Embedding whose table is split by rows over devices: rows [lo_k, hi_k) are
    parameter `shard{k}` on shards[k] (contiguous ranges, the first num_embeddings % P
    shards one row longer). `shards` defaults to one per parameter server of the job
    ("ps:0/cpu", ...); `dtype` is the table's (the default float dtype when None). The
    table starts as nn.Embedding's would with the same seed (one
    N(0, 1) draw of the whole table). A lookup moves only the ids that fall in a shard and
    the rows it returns; the gradient of each shard is sparse (rill.SparseRows).

    >>> import rill
    >>> from rill.distributed.graphs.embedding import ShardedEmbedding
    >>> emb = ShardedEmbedding(10, 4, shards=["cpu", "cpu:1"])
    >>> emb(rill.tensor([[0, 7], [9, 3]])).shape
    (2, 2, 4)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, shards=None, *, dtype=None):
        super().__init__()
        num_embeddings = as_int(num_embeddings, "num_embeddings", OP, 1)
        embedding_dim = as_int(embedding_dim, "embedding_dim", OP, 0)
        if shards is None:
            from ..world import world
            n = world().num_ps
            if n < 1:
                raise DistributedError("ShardedEmbedding puts its shards on the parameter "
                                       "servers by default, and this process has none: launch "
                                       "with rill-launch --ps P, or pass shards=[devices]",
                                       op=OP)
            shards = [f"ps:{k}/cpu" for k in range(n)]
        if isinstance(shards, str) or not shards:
            raise ArgumentError(f"shards must be a non-empty list of devices, got {shards!r}",
                                op=OP)
        devices = [as_device(d) for d in shards]
        if len(devices) > num_embeddings:
            raise ArgumentError(f"{len(devices)} shards for {num_embeddings} rows: each shard "
                                "needs at least one row", op=OP)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        base, extra = divmod(num_embeddings, len(devices))
        bounds, lo = [], 0
        for k in range(len(devices)):
            hi = lo + base + (k < extra)
            bounds.append((lo, hi))
            lo = hi
        self.bounds = bounds
        table = empty(num_embeddings, embedding_dim, dtype=dtype)
        init.normal_(table)  # one draw, as nn.Embedding's, then cut
        for k, ((lo, hi), d) in enumerate(zip(bounds, devices)):
            setattr(self, f"shard{k}", Parameter(table[lo:hi].clone().to(d)))

    @property
    def shards(self) -> list:
        return [getattr(self, f"shard{k}") for k in range(len(self.bounds))]

    def forward(self, input):
        ids = as_tensor(input, "input", OP)
        if ids.dtype.kind not in "iu":
            raise DTypeError(f"input must hold integer ids, got {ids.dtype}", op=OP)
        flat = reshape(ids, (-1,)).astype(dt.int64)
        flat = check(logical_and(flat >= 0, flat < self.num_embeddings), flat,
                     f"ids must be in [0, {self.num_embeddings}) (the table's rows)",
                     error="IndexingError", op=OP)
        m, here = flat.shape[0], flat.device
        weight0 = self.shards[0]
        out = zeros((m + 1, self.embedding_dim), dtype=weight0.dtype, device=here)
        for (lo, hi), weight in zip(self.bounds, self.shards):
            local, count, positions = shard_select(flat, lo, hi)
            there = weight.device
            ids_there = _copy(local, count, there)        # part: only this shard's ids go
            rows = F.embedding(ids_there, weight)          # gather, where the shard lives
            counted = count if there is here else to_device(count, there)
            rows = _copy(rows, counted, here)              # and only its rows come back
            out = index_add(out, (positions,), rows)       # stitch (past count: dummy row)
        return reshape(out[:m], tuple(ids.shape) + (self.embedding_dim,))

    def extra_repr(self) -> str:
        where = ", ".join(str(w.device) for w in self.shards)
        return f"{self.num_embeddings}, {self.embedding_dim}, shards=[{where}]"
