"""Random tensors: rand, randn, randint, uniform, normal; each draws from a Generator."""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError
from ..eager.bind import bind
from ..random import Generator, default_generator
from .creation import _device, _finish, _shape
from .primitive import primitive


def _random_infer(shape, dtype, device, generator, **_):
    return shape, dtype


uniform_p = primitive("uniform", _random_infer, device_attr=True, effect="random")
normal_p = primitive("normal", _random_infer, device_attr=True, effect="random")
randint_p = primitive("randint", _random_infer, device_attr=True, effect="random")


def _attrs(shape, dtype, device, generator, default):
    dtype = dt.as_dtype(dtype or default)
    if generator is not None and not isinstance(generator, Generator):
        raise ArgumentError(f"generator must be a rill.Generator, got {generator!r}")
    return dict(shape=_shape((shape,) if isinstance(shape, int) else (tuple(shape),)),
                dtype=dtype, device=_device(device), generator=generator or default_generator)


def _floating(dtype, op):
    if dtype is not None and not dt.as_dtype(dtype).is_floating:
        raise DTypeError(f"{op} makes floating tensors, not {dtype}", op=op)


def uniform(low=0.0, high=1.0, shape=(), dtype=None, device=None, generator=None,
            requires_grad: bool = False):
    """Uniform samples in [low, high)."""
    _floating(dtype, "uniform")
    attrs = _attrs(shape, dtype, device, generator, dt.default_float)
    return _finish(bind(uniform_p, low=float(low), high=float(high), **attrs), requires_grad)


def normal(mean=0.0, std=1.0, shape=(), dtype=None, device=None, generator=None,
           requires_grad: bool = False):
    """Normal samples with the given mean and standard deviation."""
    _floating(dtype, "normal")
    if std < 0:
        raise ArgumentError(f"std must be non-negative, got {std}", op="normal")
    attrs = _attrs(shape, dtype, device, generator, dt.default_float)
    return _finish(bind(normal_p, mean=float(mean), std=float(std), **attrs), requires_grad)


def rand(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """rand(2, 3): uniform samples in [0, 1)."""
    return uniform(0.0, 1.0, _shape(shape), dtype, device, generator, requires_grad)


def randn(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """randn(2, 3): standard normal samples."""
    return normal(0.0, 1.0, _shape(shape), dtype, device, generator, requires_grad)


def randint(low: int, high: int | None = None, shape=(), dtype=None, device=None,
            generator=None):
    """Integers in [low, high) (in [0, low) when high is None)."""
    if high is None:
        low, high = 0, low
    if high <= low:
        raise ArgumentError(f"randint needs low < high, got [{low}, {high})", op="randint")
    attrs = _attrs(shape, dtype, device, generator, dt.default_int)
    if attrs["dtype"].is_floating:
        raise DTypeError(f"randint makes integer tensors, not {attrs['dtype']}", op="randint")
    return bind(randint_p, low=int(low), high=int(high), **attrs)
