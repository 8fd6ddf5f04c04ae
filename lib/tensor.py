"""Tensor: the one user-facing value.

A Tensor holds a device buffer (a NumPy array on `cpu`), its dtype and device, and the
autodiff bookkeeping: `requires_grad`, `grad`, and the tape node that produced it. Ops and
operators are installed from `rill.ops` (see ops/methods.py), so that this file stays the
data structure alone.

Tensors have value semantics: buffers are never written after a kernel returns them, and
in-place forms (`x += 1`, `x[0] = 2`) give the tensor a new buffer. So `b = a[0]; a += 1`
leaves `b` unchanged, exactly as a captured graph would compute it. The other direction
follows NumPy and PyTorch: an in-place change of a view (`b = a[0]; b += 1`, `a[:, 0].zero_()`)
also changes its base (ops/views.py says how, for every spelling of a view).
"""
from __future__ import annotations

import sys

import numpy as np

from . import dtypes as _dt
from .devices import Device
from .errors import DTypeError, GradientError, ShapeError
from .hints import TENSOR, missing
from .layouts import strided

_new = object.__new__


class Tensor:
    """An n-dimensional array on a device, with reverse-mode autodiff.

    >>> import rill
    >>> x = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4., 6.])
    """

    __slots__ = ("_data", "shape", "dtype", "device", "requires_grad", "grad", "_node", "_index",
                 "_version", "_retains_grad", "_origin", "_alias", "__weakref__")

    # NumPy must hand mixed expressions (ndarray + Tensor) to Tensor's reflected operators.
    __array_ufunc__ = None

    # Tensor(...) (PyTorch's legacy constructor), to, astype, to_device and __dlpack__ are
    # installed by rill.ops (ops/methods.py), backward by autodiff/backward.py, to_sparse* by
    # sparse/tensors.py: the layers above this one (docs/DESIGN.md, "Layers") give Tensor the
    # methods made of their ops.

    # ---- attributes ------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> "ElementCount":
        """The number of elements (the Array API's `x.size`), which can also be called as
        PyTorch's method: `x.size()` is the shape, `x.size(d)` the extent of axis d."""
        n = 1
        for s in self.shape:
            n *= s
        return ElementCount(n, self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    # ---- leaving rill ----------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The values as a read-only NumPy array (bfloat16 comes back as float32).

        Read-only because buffers may be shared between tensors; copy it to write.
        """
        return self._host("numpy()")

    def _host_buffer(self, what: str) -> np.ndarray:
        """The value on the host, perhaps the tensor's own buffer: not to be handed out."""
        refusal = getattr(self._data, "host_refusal", None)  # a graph value, a vmap batch
        if refusal is not None:
            raise refusal(what)
        return self.device.backend.to_host(self._data)

    def _host(self, what: str) -> np.ndarray:
        view = self._host_buffer(what).view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None):
        # Read-only unless copied: the buffer may be shared with other tensors.
        if dtype is not None or copy:
            return np.array(self.numpy(), dtype=dtype, copy=True)
        return self.numpy()

    # ---- the Array API standard's protocol -------------------------------------------------

    def __array_namespace__(self, *, api_version: str | None = None):
        """The namespace of functions for this tensor: `rill` (which conforms to the Array API
        standard, version 2024.12)."""
        rill = sys.modules[__package__]  # the package this module belongs to, imported already
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            from .errors import ArgumentError
            raise ArgumentError(f"rill implements the Array API standard 2024.12 (and the "
                                f"versions before it), not {api_version!r}",
                                op="__array_namespace__")
        return rill

    def __dlpack_device__(self):
        buffer = self._data if self.device.kind != "cpu" else self._host("__dlpack_device__()")
        return buffer.__dlpack_device__()

    def item(self):
        """The single value as a Python scalar."""
        return self._scalar("item()")

    def _scalar(self, what: str):
        if self.size != 1:
            raise ShapeError(f"{what} needs a tensor with one element, got shape {self.shape}",
                             op=what.rstrip("()"))
        return self._host_buffer(what).item()  # (a scalar: no read-only view needed)

    def tolist(self):
        return self._host("tolist()").tolist()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ShapeError(f"the truth value of a tensor with {self.size} elements is ambiguous; "
                             "use .any() or .all()", op="bool")
        return bool(self._scalar("bool() (an `if` or `while` on a tensor)"))

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex()"))

    def __index__(self) -> int:
        if not (self.dtype.is_integer or self.dtype.is_bool) or self.ndim != 0:
            raise DTypeError(f"only 0-d integer tensors can be used as an index, got "
                             f"{self.dtype}{list(self.shape)}", op="index")
        return int(self._scalar("an index"))

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len() of a 0-d tensor", op="len")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise ShapeError("iteration over a 0-d tensor", op="iter")
        for i in range(self.shape[0]):
            yield self[i]

    __hash__ = object.__hash__

    def __deepcopy__(self, memo):
        """Python's copy of every slot, except that a view whose base is not part of the
        copy becomes a tensor of its own: `copy.deepcopy(model.state_dict())` copies the
        values, not each parameter (and its .grad) behind them, as PyTorch copies storage."""
        import copy
        cls = type(self)
        out = cls.__new__(cls)
        memo[id(self)] = out
        for slot in Tensor.__slots__[:-1]:
            value = getattr(self, slot)
            if slot == "_alias" and value is not None and id(value[0]) not in memo:
                value = None
            setattr(out, slot, copy.deepcopy(value, memo))
        if hasattr(self, "__dict__"):
            out.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return out

    def __repr__(self) -> str:
        describe = getattr(self._data, "describe", None)  # a graph value has no data to show
        if describe is not None:
            return f"tensor(<{describe()}>)"
        host = np.asarray(self.device.backend.to_host(self._data))
        body = np.array2string(host, separator=", ", prefix="tensor(", threshold=200,
                               max_line_width=88)
        extras = []
        default = _dt.default_float if self.dtype.is_floating else (
            _dt.default_int if self.dtype.is_integer else
            _dt.default_complex if self.dtype.is_complex else _dt.bool_)
        if self.dtype is not default or self.size == 0:
            extras.append(f"dtype={self.dtype}")
        if str(self.device) != "cpu":
            extras.append(f"device='{self.device}'")
        if self._node is not None:
            extras.append(f"grad_fn={self._node.prim.name}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # ---- autodiff --------------------------------------------------------------------------

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Mark a leaf tensor as one whose gradient `backward()` computes into `.grad`."""
        if requires_grad and not self.dtype.is_inexact:
            raise DTypeError("only floating and complex tensors can require grad, this one is "
                             f"{self.dtype}",
                             op="requires_grad_")
        if not requires_grad and self._node is not None:
            raise GradientError("requires_grad_(False) on a non-leaf tensor; use detach()",
                                op="requires_grad_")
        self.requires_grad = requires_grad
        return self

    # detach() is a view, as PyTorch's (ops/view_spellings.py installs it); rill's own code
    # takes a value cut from the tape with detached_value below.

    def retain_grad(self) -> "Tensor":
        """Keep `.grad` on this non-leaf tensor after backward()."""
        self._retains_grad = True
        return self

    def __getattr__(self, name: str):
        # Only reached for names the class lacks: say what rill writes for PyTorch's.
        if name.startswith("__"):
            raise AttributeError(name)
        raise missing("Tensor", name, TENSOR)

    # ---- layouts (sparse tensors: lib/sparse/tensors.py) --------------------------------------

    @property
    def layout(self):
        """rill.strided: a Tensor holds every element (sparse tensors are not Tensors)."""
        return strided

class ElementCount(int):
    """An int (a tensor's element count) that, called, answers PyTorch's `size()`.

    The Array API makes `x.size` the number of elements and PyTorch makes `x.size()` the
    shape; an int that can be called serves both spellings with no way to confuse them."""

    def __new__(cls, n: int, shape: tuple):
        count = int.__new__(cls, n)
        count.shape = shape
        return count

    def __call__(self, dim=None):
        if dim is None:
            return self.shape
        return self.shape[normalize_axis(dim, len(self.shape))]

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self):
        return (int, (int(self),))


def graph_value(data) -> bool:
    """Whether a tensor's buffer is a graph value: the result of an op being traced, with no
    data until its graph runs (capture/ir.py's Value). Asked of the buffer, so that the layers
    below capture need not import it; such buffers also answer `host_refusal` (the error for
    Python asking their data) and `describe` (what repr shows)."""
    return getattr(data, "is_graph_value", False)


def normalize_axis(axis: int, ndim: int) -> int:
    """A single axis in [-ndim, ndim) as a non-negative index."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % ndim if ndim else 0


def new_tensor(data, dtype: _dt.DType, device: Device) -> Tensor:
    """Wrap a device buffer the caller will never write again (the hot path of every op)."""
    t = _new(Tensor)
    t._data = data
    t.shape = data.shape
    t.dtype = dtype
    t.device = device
    t.requires_grad = False
    t.grad = None
    t._node = None
    t._index = 0
    t._version = 0
    t._retains_grad = False
    t._origin = None
    t._alias = None
    return t

