"""Creating tensors: from data, filled, ranges, identity; and copies between devices."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .. import devices as _devices
from ..devices import Device, device as as_device
from ..errors import ArgumentError, DTypeError, Error
from ..eager.bind import bind
from ..eager.context import current, detached_value
from ..tensor import Tensor, graph_value, new_tensor
from . import attrs as A
from .attrs import INT64_MAX
from .arguments import (as_bool, as_dtype, as_float, as_int, as_number, as_shape, check_fits,
                        describe)
from .primitive import primitive


def _shape(shape, op: str, keyword=None) -> tuple:
    """zeros(2, 3), zeros((2, 3)), zeros([2, 3]) and zeros(shape=(2, 3)) (the standard's
    keyword; PyTorch's is size=) all mean shape (2, 3)."""
    if keyword is not None:
        if shape:
            raise ArgumentError("give the shape once: positionally or as shape=", op=op)
        shape = (keyword,)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return as_shape(tuple(shape), op)


def _device(device, op: str | None = None) -> Device:
    if device is None:  # cpu, or the device of a `with rill.device(...)` scope
        return _devices.default_device()
    try:
        return as_device(device)
    except Error as e:
        e.op = e.op or op
        raise


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_() if requires_grad else t


# ---- from data -----------------------------------------------------------------------------


def _host_array(data, dtype, op: str):
    """data as a NumPy array, and the rill dtype it should become."""
    if isinstance(data, Tensor):
        return np.asarray(data.device.backend.to_host(data._data)), \
            data.dtype if dtype is None else dtype
    strong = isinstance(data, (np.ndarray, np.generic))
    try:
        array = np.asarray(data)
    except Exception as e:  # noqa: BLE001 - ragged lists, objects whose __array__ fails
        raise ArgumentError(f"cannot make a tensor from {type(data).__name__}: {e}",
                            op=op) from None
    if array.dtype.kind in "OUSVMm" and not _python_ints(array):
        raise DTypeError(f"a tensor holds numbers, got {_items(data, array)}", op=op)
    if array.dtype.kind == "c" and dtype is not None and not dtype.is_complex \
            and np.any(array.imag != 0):
        raise DTypeError(f"complex data does not fit {dtype} (its imaginary parts would be "
                         "dropped); keep a complex dtype and take rill.real() or rill.abs()",
                         op=op)
    if array.dtype.kind == "c" and dtype is not None and not dtype.is_complex:
        array = array.real  # all imaginary parts are 0
    if dtype is not None:
        return array, dtype
    if array.dtype == object:  # ints beyond int64: refused by the fit check that follows
        return array, dt.default_int
    if strong:
        found = dt.from_numpy(array.dtype)
        if found is None:
            raise DTypeError(f"NumPy dtype {array.dtype} has no rill counterpart", op=op)
        return array, found
    kind = array.dtype.kind
    if kind == "b":
        return array, dt.bool_
    if kind in "iu":
        return array, dt.default_int
    if kind == "c":  # Python complex numbers: complex64, as floats are float32
        return array, dt.default_complex
    return array, dt.default_float


def _python_ints(array) -> bool:
    """An object array NumPy made from Python ints too large for int64 (or uint64)."""
    return array.dtype == object and array.size > 0 and all(
        isinstance(v, (int, float)) for v in array.flat)


def _items(data, array) -> str:
    if array.ndim == 0:
        return describe(data)
    if array.dtype == object and array.size:
        return f"{type(data).__name__} of {describe(next(iter(array.flat)))}"
    return f"{type(data).__name__} of {array.dtype.name}"


def _stored(data, dtype, op: str) -> tuple:
    """(host buffer of data in dtype, dtype): ints that do not fit are refused, not wrapped."""
    dtype = None if dtype is None else as_dtype(dtype, op)
    array, dtype = _host_array(data, dtype, op)
    check_fits(array, dtype, op)
    try:
        return dt.to_storage(array, dtype), array, dtype
    except (OverflowError, ValueError, TypeError) as e:  # e.g. 10**400 as float32
        raise ArgumentError(f"cannot convert the data to {dtype}: {e}", op=op) from None


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, scalars, arrays, tensors).

    Python floats become the default dtype (float32 unless rill.set_default_dtype says) and
    ints int64; NumPy arrays keep their dtype. Values that
    do not fit an integer dtype are an error, not a wrap.

    >>> rill.tensor([[1, 2], [3, 4]]).dtype
    rill.int64
    """
    if isinstance(data, Tensor) and graph_value(data._data):
        # A value being traced has no data yet: its copy is the same graph value, detached
        # (buffers are never written, so sharing it is a copy), as eagerly.
        out = detached_value(data)
        if dtype is not None:
            out = out.astype(as_dtype(dtype, "tensor"))
        out = out if device is None else out.to(_device(device, "tensor"))
        return _finish(out, as_bool(requires_grad, "requires_grad", "tensor"))
    stored, array, dtype = _stored(data, dtype, "tensor")
    array = stored.copy() if stored is array else stored  # never share the caller's memory
    dev = _device(device if device is not None else
                  (data.device if isinstance(data, Tensor) else None), "tensor")
    return _finish(_made(new_tensor(dev.backend.from_host(array, dev), dtype, dev)),
                   as_bool(requires_grad, "requires_grad", "tensor"))


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
        out = data if dtype is None else data.astype(as_dtype(dtype, "as_tensor"))
        return out if device is None else out.to(device)
    stored, _, dtype = _stored(data, dtype, "as_tensor")
    dev = _device(device, "as_tensor")
    return _made(new_tensor(dev.backend.from_host(stored, dev), dtype, dev))


# ---- filled and ranges ---------------------------------------------------------------------


def _full_infer(*, shape, dtype, device, value):
    return shape, dtype


def _empty_infer(*, shape, dtype, device):
    return shape, dtype


_PLACED = dict(shape=A.SHAPE, dtype=A.DTypeAttr, device=A.DeviceAttr)
full_p = primitive("full", _full_infer, device_attr=True, attrs=dict(_PLACED, value=A.Scalar()),
                   cache_rule="compiled")
empty_p = primitive("empty", _empty_infer, device_attr=True, attrs=_PLACED, cache_rule="compiled")


def _fill(value, dtype, op: str):
    """(fill value as a Python scalar, its dtype): a value the dtype cannot hold is an error."""
    if isinstance(value, (Tensor, np.generic)) or (isinstance(value, np.ndarray) and
                                                    value.ndim == 0):
        value = value.item()
    kind = dt.scalar_kind(value)
    if kind is None:
        raise ArgumentError(f"fill value must be a bool, int or float, got {describe(value)}",
                            op=op)
    dtype = dt.result_type((), (kind,)) if dtype is None else as_dtype(dtype, op)
    if dtype.is_integer:
        check_fits(np.array([value], dtype=object), dtype, op, "fill value")
    elif kind == "i" and abs(value) >= 2**63:  # too long for an int attr: as the float it is
        try:
            value = float(value)
        except OverflowError:
            raise ArgumentError(f"fill value {A.show_int(value)} is too large for {dtype}",
                                op=op) from None
    return value, dtype


def _filled(shape, value, dtype, device, requires_grad, op: str) -> Tensor:
    value, dtype = _fill(value, dtype, op)
    t = bind(full_p, shape=shape, dtype=dtype, device=_device(device, op), value=value)
    return _finish(t, as_bool(requires_grad, "requires_grad", op))


def full(shape, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (dtype from the value if not given)."""
    if isinstance(fill_value, complex):
        return _complex_from_parts(full, (shape,), fill_value.real, fill_value.imag, dtype,
                                   device, requires_grad)
    return _filled(_shape((shape,), "full"), fill_value, dtype, device, requires_grad, "full")


def _complex_from_parts(make, args, real, imag, dtype, device, requires_grad) -> Tensor:
    """make(*args, real) + 1j * make(*args, imag): a complex value built from the real
    creation op (whose attrs are real numbers)."""
    from .elementwise import add, multiply
    dtype = dt.complex64 if dtype is None else as_dtype(dtype, make.__name__)
    if not dtype.is_complex:
        raise DTypeError(f"a complex value does not fit {dtype}", op=make.__name__)
    part = dt.float64 if dtype is dt.complex128 else dt.float32
    re = make(*args, real, dtype=part, device=device)
    im = make(*args, imag, dtype=part, device=device)
    out = add(re, multiply(im, 1j))
    out = out if out.dtype is dtype else out.astype(dtype)
    return _finish(out, as_bool(requires_grad, "requires_grad", make.__name__))


def zeros(*shape_args, shape=None, dtype=None, device=None,
          requires_grad: bool = False) -> Tensor:
    """zeros(2, 3) or zeros((2, 3)): zeros of the default dtype (rill.get_default_dtype(),
    float32 unless set) unless `dtype` says."""
    return _filled(_shape(shape_args, "zeros", shape), 0, as_dtype(dtype, "zeros", dt.default_float),
                   device, requires_grad, "zeros")


def ones(*shape_args, shape=None, dtype=None, device=None,
          requires_grad: bool = False) -> Tensor:
    return _filled(_shape(shape_args, "ones", shape), 1, as_dtype(dtype, "ones", dt.default_float),
                   device, requires_grad, "ones")


def _empty(shape, dtype, device, requires_grad, op: str) -> Tensor:
    t = bind(empty_p, shape=shape, dtype=as_dtype(dtype, op, dt.default_float),
             device=_device(device, op))
    return _finish(t, as_bool(requires_grad, "requires_grad", op))


def empty(*shape_args, shape=None, dtype=None, device=None,
          requires_grad: bool = False) -> Tensor:
    """Uninitialized values (whatever the allocator returns)."""
    return _empty(_shape(shape_args, "empty", shape), dtype, device, requires_grad, "empty")


def _like(x, dtype, device, op: str):
    from .arguments import as_tensor
    x = as_tensor(x, "x", op)
    return (x.shape, x.dtype if dtype is None else dtype,
            x.device if device is None else device)


def zeros_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None and device is None and requires_grad is False and isinstance(x, Tensor):
        # x's own shape, dtype and device, which 0 fits: what the general path binds, without
        # its checks (gradient rules make zeros this way at every step)
        return bind(full_p, shape=x.shape, dtype=x.dtype, device=x.device, value=0)
    shape, dtype, device = _like(x, dtype, device, "zeros_like")
    return _filled(shape, 0, dtype, device, requires_grad, "zeros_like")


def ones_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None and device is None and requires_grad is False and isinstance(x, Tensor):
        return bind(full_p, shape=x.shape, dtype=x.dtype, device=x.device, value=1)
    shape, dtype, device = _like(x, dtype, device, "ones_like")
    return _filled(shape, 1, dtype, device, requires_grad, "ones_like")


def full_like(x, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    shape, dtype, device = _like(x, dtype, device, "full_like")
    return _filled(shape, fill_value, dtype, device, requires_grad, "full_like")


def empty_like(x, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    shape, dtype, device = _like(x, dtype, device, "empty_like")
    return _empty(shape, dtype, device, requires_grad, "empty_like")


def _arange_infer(*, start, stop, step, dtype, device):
    if step == 0:
        raise ArgumentError("step must not be zero")
    n = _arange_length(start, stop, step)
    if n * dtype.itemsize > INT64_MAX:  # NumPy would fail, or (past 2**63) quietly give none
        raise ArgumentError(f"arange({start}, {stop}, {step}) is too long for a {dtype} "
                            f"tensor: {A.show_int(n)} values")
    return (n,), dtype


def _arange_length(start, stop, step) -> int:
    if all(isinstance(v, int) for v in (start, stop, step)):
        return max(0, -(-(stop - start) // step))  # exact, however long the ints
    return int(max(0, np.ceil((stop - start) / step)))


_RANGE = dict(dtype=A.DTypeAttr, device=A.DeviceAttr)
arange_p = primitive("arange", _arange_infer, device_attr=True,
                     attrs=dict(_RANGE, start=A.Float(True), stop=A.Float(True),
                                step=A.Float(True)))


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    """start, start+step, ... below stop: int64 for ints, float32 otherwise.

    >>> rill.arange(3)
    tensor([0, 1, 2])
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (as_number(v, what, "arange", finite=True) for v, what in
                         ((start, "start"), (stop, "stop"), (step, "step")))
    if dtype is None:
        ints = all(isinstance(v, int) for v in (start, stop, step))
        dtype = dt.default_int if ints else dt.default_float
    dtype = as_dtype(dtype, "arange")
    if step != 0 and dtype.is_integer:
        # The first and last values must fit: refuse rather than wrap around.
        n = _arange_length(start, stop, step)
        if n:
            check_fits(np.array([start, start + (n - 1) * step], dtype=object), dtype,
                       "arange")
    return bind(arange_p, start=start, stop=stop, step=step, dtype=dtype,
                device=_device(device, "arange"))


def _linspace_infer(*, start, stop, num, endpoint, dtype, device):
    return (num,), dtype


linspace_p = primitive("linspace", _linspace_infer, device_attr=True,
                       attrs=dict(_RANGE, start=A.FLOAT, stop=A.FLOAT, num=A.NonNegInt,
                                  endpoint=A.BOOL))


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, device=None) -> Tensor:
    """`num` evenly spaced values from start to stop (complex ends give complex values)."""
    op = "linspace"
    if isinstance(start, complex) or isinstance(stop, complex):
        start, stop = complex(start), complex(stop)
        return _complex_from_parts(
            lambda n, part, dtype, device: linspace(part[0], part[1], n, endpoint, dtype,
                                                    device),
            (num,), (start.real, stop.real), (start.imag, stop.imag), dtype, device, False)
    return bind(linspace_p, start=as_float(start, "start", op),
                stop=as_float(stop, "stop", op), num=as_int(num, "num", op, 0),
                endpoint=as_bool(endpoint, "endpoint", op),
                dtype=as_dtype(dtype, op, dt.default_float), device=_device(device, op))


def _eye_infer(*, n, m, k, dtype, device):
    return (n, m), dtype


eye_p = primitive("eye", _eye_infer, device_attr=True,
                  attrs=dict(_RANGE, n=A.NonNegInt, m=A.NonNegInt, k=A.INT))


def eye(n: int, m: int | None = None, k: int = 0, dtype=None, device=None) -> Tensor:
    """Ones on the k-th diagonal of an n x m matrix."""
    op = "eye"
    n = as_int(n, "n", op, 0)
    return bind(eye_p, n=n, m=n if m is None else as_int(m, "m", op, 0), k=as_int(k, "k", op),
                dtype=as_dtype(dtype, op, dt.default_float), device=_device(device, op))


# ---- between devices -----------------------------------------------------------------------


def _to_device_infer(x, *, device, source):
    return x.shape, x.dtype


def _to_device_vjp(g, out, x, device, source):
    return (to_device(g, source),)


to_device_p = primitive("to_device", _to_device_infer, _to_device_vjp, device_attr=True,
                        attrs=dict(device=A.DeviceAttr, source=A.DeviceAttr))


def to_device(x, device) -> Tensor:
    """x copied to `device` (the only way values move between devices)."""
    from .arguments import as_tensor
    x = as_tensor(x, "x", "to_device")
    target = _device(device, "to_device")
    if target is x.device:
        return x
    return bind(to_device_p, x, device=target, source=x.device)
