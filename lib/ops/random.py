"""Random tensors: rand, randn, randint, uniform, normal; each draws from a Generator."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError
from ..eager.bind import bind
from ..random import Generator, default_generator
from . import attrs as A
from .arguments import as_bool, as_dtype, as_float, as_int, check_fits, describe
from .creation import _device, _finish, _shape
from .primitive import primitive


def _uniform_infer(*, shape, dtype, device, generator, low, high):
    return shape, dtype


def _normal_infer(*, shape, dtype, device, generator, mean, std):
    return shape, dtype


def _randint_infer(*, shape, dtype, device, generator, low, high):
    return shape, dtype


_DRAW = dict(shape=A.SHAPE, dtype=A.DTypeAttr, device=A.DeviceAttr, generator=A.GeneratorAttr)
uniform_p = primitive("uniform", _uniform_infer, device_attr=True, effect="random",
                      attrs=dict(_DRAW, low=A.FLOAT, high=A.FLOAT))
normal_p = primitive("normal", _normal_infer, device_attr=True, effect="random",
                     attrs=dict(_DRAW, mean=A.FLOAT, std=A.FLOAT))
randint_p = primitive("randint", _randint_infer, device_attr=True, effect="random",
                      attrs=dict(_DRAW, low=A.INT, high=A.INT))


def _attrs(shape, dtype, device, generator, default, op):
    dtype = as_dtype(dtype, op, default)
    if generator is not None and not isinstance(generator, Generator):
        raise ArgumentError(f"generator must be a rill.Generator, got {describe(generator)}",
                            op=op)
    return dict(shape=_shape((shape,), op), dtype=dtype, device=_device(device, op),
                generator=default_generator if generator is None else generator)


def _floating(dtype, op):
    if dtype is not None and not as_dtype(dtype, op).is_floating:
        raise DTypeError(f"{op} makes floating tensors, not {dtype}", op=op)


def uniform(low=0.0, high=1.0, shape=(), dtype=None, device=None, generator=None,
            requires_grad: bool = False):
    """Uniform samples in [low, high)."""
    return _uniform(low, high, shape, dtype, device, generator, requires_grad, "uniform")


def _uniform(low, high, shape, dtype, device, generator, requires_grad, op):
    _floating(dtype, op)
    attrs = _attrs(shape, dtype, device, generator, dt.default_float, op)
    low, high = as_float(low, "low", op), as_float(high, "high", op)
    return _finish(bind(uniform_p, low=low, high=high, **attrs),
                   as_bool(requires_grad, "requires_grad", op))


def normal(mean=0.0, std=1.0, shape=(), dtype=None, device=None, generator=None,
           requires_grad: bool = False):
    """Normal samples with the given mean and standard deviation."""
    return _normal(mean, std, shape, dtype, device, generator, requires_grad, "normal")


def _normal(mean, std, shape, dtype, device, generator, requires_grad, op):
    _floating(dtype, op)
    mean, std = as_float(mean, "mean", op), as_float(std, "std", op)
    if not std >= 0:
        raise ArgumentError(f"std must be non-negative, got {std}", op=op)
    attrs = _attrs(shape, dtype, device, generator, dt.default_float, op)
    return _finish(bind(normal_p, mean=mean, std=std, **attrs),
                   as_bool(requires_grad, "requires_grad", op))


def rand(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """rand(2, 3): uniform samples in [0, 1)."""
    return _uniform(0.0, 1.0, _shape(shape, "rand"), dtype, device, generator, requires_grad,
                    "rand")


def randn(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """randn(2, 3): standard normal samples."""
    return _normal(0.0, 1.0, _shape(shape, "randn"), dtype, device, generator, requires_grad,
                   "randn")


def randint(low: int, high: int | None = None, shape=(), dtype=None, device=None,
            generator=None):
    """Integers in [low, high) (in [0, low) when high is None)."""
    if high is None:
        low, high = 0, low
    low, high = as_int(low, "low", "randint"), as_int(high, "high", "randint")
    if high <= low:
        raise ArgumentError(f"randint needs low < high, got [{low}, {high})", op="randint")
    attrs = _attrs(shape, dtype, device, generator, dt.default_int, "randint")
    if attrs["dtype"].is_floating:
        raise DTypeError(f"randint makes integer tensors, not {attrs['dtype']}", op="randint")
    check_fits(np.array([low, high - 1], dtype=object), attrs["dtype"], "randint")
    return bind(randint_p, low=low, high=high, **attrs)
