"""PyTorch's legacy constructors with PyTorch's meanings: `rill.Tensor(*sizes)`,
`rill.Tensor(data)`, `rill.Tensor(tensor)`, and the typed ones (`rill.FloatTensor`,
`rill.LongTensor`, ...).

- `Tensor(2, 5)` (ints, NumPy integers) is a float32 tensor of that shape whose values are
  not set (rill.empty: whatever the memory held, as in PyTorch); `Tensor()` is empty (0,).
- `Tensor(data)` (a list, nested lists, a NumPy array) holds the data as float32, whatever
  its kind (`Tensor([1, 2])` is float, unlike rill.tensor).
- `Tensor(t)` of a rill tensor is a view of t, dtype kept (in-place writes reach t).
- A single tuple of ints is refused: PyTorch reads `torch.Tensor(x.size())` (a torch.Size)
  as a shape and `torch.Tensor((2, 3))` as data, and rill's shapes are plain tuples, so
  either reading could be the wrong one.
- The typed constructors do the same in their dtype, and refuse a tensor of another dtype;
  `isinstance(x, rill.FloatTensor)` asks for a float32 tensor on the cpu, as PyTorch's.
rill.Tensor stays the class of every tensor: its __init__ calls `construct` below.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError
from ..tensor import Tensor
from .arguments import describe


def _is_size(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def construct(args: tuple, dtype=None, device=None, typed: str | None = None) -> Tensor:
    """The tensor `Tensor(*args)` (or the typed constructor named `typed`) makes."""
    from . import creation
    from . import views as V
    what = typed or "Tensor"
    if typed is None and dtype is not None and len(args) == 1 and not _is_size(args[0]):
        return creation.tensor(args[0], dtype=dtype, device=device)  # rill's own form
    dtype = dt.float32 if dtype is None else dt.as_dtype(dtype, what)
    if all(_is_size(a) for a in args):  # sizes (none: an empty tensor)
        sizes = tuple(int(a) for a in args) if args else (0,)
        return creation.empty(sizes, dtype=dtype, device=device)
    if len(args) != 1:
        raise ArgumentError(f"rill.{what} takes sizes (ints) or one sequence of data, got "
                            f"{', '.join(describe(a) for a in args)}", op=what)
    data = args[0]
    if isinstance(data, Tensor):
        if typed is not None and data.dtype is not dtype:
            raise DTypeError(f"rill.{what} of a {data.dtype} tensor: PyTorch refuses it too; "
                             f"convert with x.to(rill.{dtype.name})", op=what)
        out = V.same_values(data, detached=False)
        return out if device is None else creation.to_device(out, device)
    if isinstance(data, tuple) and data and all(_is_size(a) for a in data):
        raise ArgumentError(
            f"rill.{what}({data}) could mean a tensor of shape {data} (PyTorch's reading of a "
            f"torch.Size) or one holding those values (its reading of a tuple); write "
            f"rill.{what}(*{data}) or rill.empty({data}) for the shape, rill.{what}({list(data)})"
            " for the values", op=what)
    if not isinstance(data, (list, tuple, np.ndarray)) and not hasattr(data, "__array__"):
        raise ArgumentError(f"rill.{what} takes sizes (ints) or a sequence of data, got "
                            f"{describe(data)} (for a 0-d tensor: rill.tensor(value))", op=what)
    return creation.tensor(data, dtype=dtype, device=device)


class _TypedTensor(type):
    """The class of rill.FloatTensor and its kin: calling one constructs a rill.Tensor of its
    dtype; isinstance asks for a cpu tensor of that dtype."""

    def __call__(cls, *args, device=None):
        return construct(args, cls.dtype, device, typed=cls.__name__)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj.device.kind == "cpu"

    def __repr__(cls) -> str:
        return f"<class 'rill.{cls.__name__}' ({cls.dtype} tensors)>"


def _typed(name: str, dtype) -> type:
    return _TypedTensor(name, (), {"dtype": dtype, "__doc__": f"PyTorch's legacy {name}: "
                                   f"rill.Tensor's meanings, in {dtype}.", "__module__": "rill"})


FloatTensor = _typed("FloatTensor", dt.float32)
DoubleTensor = _typed("DoubleTensor", dt.float64)
HalfTensor = _typed("HalfTensor", dt.float16)
BFloat16Tensor = _typed("BFloat16Tensor", dt.bfloat16)
LongTensor = _typed("LongTensor", dt.int64)
IntTensor = _typed("IntTensor", dt.int32)
ShortTensor = _typed("ShortTensor", dt.int16)
CharTensor = _typed("CharTensor", dt.int8)
ByteTensor = _typed("ByteTensor", dt.uint8)
BoolTensor = _typed("BoolTensor", dt.bool_)

TYPED = (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor,
         ShortTensor, CharTensor, ByteTensor, BoolTensor)
