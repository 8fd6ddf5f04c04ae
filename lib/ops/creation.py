"""Creating tensors: from data, filled, ranges, identity; and copies between devices."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..devices import Device, device as as_device
from ..errors import ArgumentError, DTypeError, ShapeError
from ..eager.bind import bind
from ..eager.context import current
from ..tensor import Tensor, new_tensor
from .primitive import primitive


def _shape(shape) -> tuple:
    """zeros(2, 3), zeros((2, 3)) and zeros([2, 3]) all mean shape (2, 3)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    shape = tuple(shape)
    for s in shape:
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0:
            raise ShapeError(f"a shape holds non-negative ints, got {shape}")
    return tuple(int(s) for s in shape)


def _device(device) -> Device:
    return as_device("cpu" if device is None else device)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_() if requires_grad else t


# ---- from data -----------------------------------------------------------------------------


def _host_array(data, dtype):
    """data as a NumPy array of the rill dtype it should become."""
    if isinstance(data, Tensor):
        return np.asarray(data.device.backend.to_host(data._data)), dtype or data.dtype
    strong = isinstance(data, (np.ndarray, np.generic))
    try:
        array = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise ArgumentError(f"cannot make a tensor from {type(data).__name__}: {e}") from None
    if dtype is not None:
        return array, dtype
    if array.dtype == object:
        raise DTypeError(f"cannot make a tensor from {type(data).__name__} of mixed or "
                         "non-numeric items")
    if strong:
        found = dt.from_numpy(array.dtype)
        if found is None:
            raise DTypeError(f"NumPy dtype {array.dtype} has no rill counterpart")
        return array, found
    kind = array.dtype.kind
    if kind == "b":
        return array, dt.bool_
    if kind in "iu":
        return array, dt.default_int
    if kind == "f":
        return array, dt.default_float
    raise DTypeError(f"cannot make a tensor from values of NumPy kind {array.dtype}")


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, scalars, arrays, tensors).

    Python floats become float32 and ints int64; NumPy arrays keep their dtype.

    >>> rill.tensor([[1, 2], [3, 4]]).dtype
    rill.int64
    """
    dtype = None if dtype is None else dt.as_dtype(dtype)
    array, dtype = _host_array(data, dtype)
    stored = dt.to_storage(array, dtype)
    array = stored.copy() if stored is array else stored  # never share the caller's memory
    dev = _device(device if device is not None else
                  (data.device if isinstance(data, Tensor) else None))
    return _finish(_made(new_tensor(dev.backend.from_host(array, dev), dtype, dev)),
                   requires_grad)


def _made(t: Tensor) -> Tensor:
    """A tensor built from host data; a capture in progress bakes it in as a constant."""
    interpreter = current().interpreter
    if interpreter.capturing:
        interpreter.note_constant(t)
    return t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """`data` as a tensor, sharing memory when no conversion is needed.

    Do not write to a shared NumPy array afterwards: rill treats buffers as immutable.
    """
    if isinstance(data, Tensor):
        out = data if dtype is None else data.astype(dtype)
        return out if device is None else out.to(device)
    dtype = None if dtype is None else dt.as_dtype(dtype)
    array, dtype = _host_array(data, dtype)
    dev = _device(device)
    return _made(new_tensor(dev.backend.from_host(dt.to_storage(array, dtype), dev), dtype, dev))


# ---- filled and ranges ---------------------------------------------------------------------


def _no_inputs(shape, dtype, device, **_):
    return shape, dtype


full_p = primitive("full", _no_inputs, device_attr=True)
empty_p = primitive("empty", _no_inputs, device_attr=True)


def _fill_dtype(value, dtype):
    if dtype is not None:
        return dt.as_dtype(dtype)
    kind = dt.scalar_kind(value)
    if kind is None:
        raise ArgumentError(f"fill value must be a Python bool, int or float, got {value!r}")
    return dt.result_type((), (kind,))


def full(shape, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (dtype from the value if not given)."""
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    dtype = _fill_dtype(fill_value, dtype)
    t = bind(full_p, shape=_shape((shape,) if isinstance(shape, int) else (shape,)), dtype=dtype,
             device=_device(device), value=fill_value)
    return _finish(t, requires_grad)


def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """zeros(2, 3) or zeros((2, 3)): a float32 tensor of zeros unless `dtype` says."""
    return full(_shape(shape), 0, dtype or dt.default_float, device, requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(_shape(shape), 1, dtype or dt.default_float, device, requires_grad)


def empty(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uninitialized values (whatever the allocator returns)."""
    t = bind(empty_p, shape=_shape(shape), dtype=dt.as_dtype(dtype or dt.default_float),
             device=_device(device))
    return _finish(t, requires_grad)


def _like(x, dtype, device):
    return dict(dtype=dtype or x.dtype, device=device or x.device)


def zeros_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(x.shape, 0, **_like(x, dtype, device), requires_grad=requires_grad)


def ones_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(x.shape, 1, **_like(x, dtype, device), requires_grad=requires_grad)


def full_like(x, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return full(x.shape, fill_value, **_like(x, dtype, device), requires_grad=requires_grad)


def empty_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return empty(x.shape, **_like(x, dtype, device), requires_grad=requires_grad)


def _arange_infer(start, stop, step, dtype, device):
    if step == 0:
        raise ArgumentError("step must not be zero")
    n = int(max(0, np.ceil((stop - start) / step)))
    return (n,), dtype


arange_p = primitive("arange", _arange_infer, device_attr=True)


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    """start, start+step, ... below stop: int64 for ints, float32 otherwise.

    >>> rill.arange(3)
    tensor([0, 1, 2])
    """
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) for v in (start, stop, step))
        dtype = dt.default_int if ints else dt.default_float
    return bind(arange_p, start=start, stop=stop, step=step, dtype=dt.as_dtype(dtype),
                device=_device(device))


def _linspace_infer(start, stop, num, endpoint, dtype, device):
    if num < 0:
        raise ArgumentError(f"num must be non-negative, got {num}")
    return (num,), dtype


linspace_p = primitive("linspace", _linspace_infer, device_attr=True)


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, device=None) -> Tensor:
    """`num` evenly spaced values from start to stop."""
    return bind(linspace_p, start=float(start), stop=float(stop), num=int(num),
                endpoint=bool(endpoint), dtype=dt.as_dtype(dtype or dt.default_float),
                device=_device(device))


def _eye_infer(n, m, k, dtype, device):
    if n < 0 or m < 0:
        raise ShapeError(f"eye needs non-negative sizes, got {n} x {m}")
    return (n, m), dtype


eye_p = primitive("eye", _eye_infer, device_attr=True)


def eye(n: int, m: int | None = None, k: int = 0, dtype=None, device=None) -> Tensor:
    """Ones on the k-th diagonal of an n x m matrix."""
    return bind(eye_p, n=int(n), m=int(n if m is None else m), k=int(k),
                dtype=dt.as_dtype(dtype or dt.default_float), device=_device(device))


# ---- between devices -----------------------------------------------------------------------


def _to_device_infer(x, device, source):
    return x.shape, x.dtype


def _to_device_vjp(g, out, x, device, source):
    return (to_device(g, source),)


to_device_p = primitive("to_device", _to_device_infer, _to_device_vjp, device_attr=True)


def to_device(x, device) -> Tensor:
    """x copied to `device` (the only way values move between devices)."""
    target = as_device(device)
    if target is x.device:
        return x
    return bind(to_device_p, x, device=target, source=x.device)
