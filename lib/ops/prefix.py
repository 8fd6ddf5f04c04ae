"""to_device_prefix: a copy between devices of which only the first `count` rows matter.

A graph's shapes are static, but how many rows of a buffer hold data can depend on the data
(the ids of a batch that fall in one shard of a sharded embedding). This copy keeps the
static shape at both ends and says how much of it is valid: the result is x on `device` with
every row at index >= count zero. Partition turns a copy across devices into a send of
x[:count] and a recv that pads with zeros back to the full shape
(lib/capture/passes/partition.py, lib/capture/graph_ops.py), so only the prefix travels.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..eager.bind import bind
from ..errors import DeviceError, DTypeError, ShapeError
from ..tensor import Tensor
from . import attrs as A
from .arguments import as_tensor
from .creation import _device, to_device
from .primitive import primitive

OP = "to_device_prefix"


def _infer(x, count, *, device, source):
    if len(x.shape) == 0:
        raise ShapeError("x must have at least one dimension (its rows are axis 0), got a "
                         "0-d tensor", op=OP)
    if count.shape != () or count.dtype is not dt.int64:
        raise DTypeError(f"count must be a 0-d int64 tensor, got {count.dtype}"
                         f"{list(count.shape)}; make it with .to(rill.int64) or rill.tensor(n)",
                         op=OP)
    if count.device is not x.device:
        raise DeviceError(f"count must be on x's device ({x.device}), got {count.device}: "
                          "the sending side decides how many rows to send", op=OP)
    return x.shape, x.dtype


def _vjp(g, out, x, count, device, source):
    # Only the rows that were sent carry a gradient back: the same prefix, the other way.
    return (to_device_prefix(g, to_device(count, device), source), None)


to_device_prefix_p = primitive(OP, _infer, _vjp, device_attr=True,
                               attrs=dict(device=A.DeviceAttr, source=A.DeviceAttr))


def to_device_prefix(x, count, device) -> Tensor:
    """x copied to `device`, of which only the first `count` rows (along axis 0) are valid:
    rows at index >= count are zero in the result. `count` is a 0-d int64 tensor on x's
    device (or a Python int). Across devices of a partitioned graph only x[:count] moves.

    >>> from rill.ops.prefix import to_device_prefix
    >>> x = rill.arange(6.0).reshape(3, 2)
    >>> to_device_prefix(x, rill.tensor(2), "cpu")
    tensor([[0., 1.],
            [2., 3.],
            [0., 0.]])
    """
    x = as_tensor(x, "x", OP)
    if isinstance(count, int) and not isinstance(count, bool):
        from .creation import tensor
        count = tensor(count, dtype=dt.int64, device=x.device)
    count = as_tensor(count, "count", OP)
    return bind(to_device_prefix_p, x, count, device=_device(device, OP), source=x.device)
