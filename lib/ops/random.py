"""Random tensors: rand, randn, randint, uniform, normal; each draws from a Generator."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError
from ..eager.bind import bind
from ..random import Generator, default_generator
from ..eager.context import detached_value
from ..tensor import graph_value
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
        hint = " (rand and randn make complex ones)" if as_dtype(dtype, op).is_complex else ""
        raise DTypeError(f"{op} makes floating tensors, not {dtype}{hint}", op=op)


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


def _complex_draw(draw, scale, shape, dtype, device, generator, requires_grad, op):
    """A complex draw as PyTorch makes one: real and imaginary parts drawn independently
    from the part's real dtype (each scaled by `scale`), real part first."""
    part = dt.real_of(dtype)
    re = draw(shape, part, device, generator)
    im = draw(shape, part, device, generator)
    from .elementwise import cast
    z = cast(re * scale, dtype) + cast(im * scale, dtype) * 1j
    return _finish(z, as_bool(requires_grad, "requires_grad", op))


def _is_complex(dtype, op) -> bool:
    return dtype is not None and as_dtype(dtype, op).is_complex


def rand(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """rand(2, 3): uniform samples in [0, 1) (both parts of a complex dtype, as torch)."""
    shape = _shape(shape, "rand")
    if _is_complex(dtype, "rand"):
        return _complex_draw(lambda *a: _uniform(0.0, 1.0, *a, False, "rand"), 1.0, shape,
                             as_dtype(dtype, "rand"), device, generator, requires_grad, "rand")
    return _uniform(0.0, 1.0, shape, dtype, device, generator, requires_grad, "rand")


def randn(*shape, dtype=None, device=None, generator=None, requires_grad: bool = False):
    """randn(2, 3): standard normal samples; for a complex dtype E|z|^2 = 1 (each part has
    variance 1/2), as torch."""
    shape = _shape(shape, "randn")
    if _is_complex(dtype, "randn"):
        return _complex_draw(lambda *a: _normal(0.0, 1.0, *a, False, "randn"), 0.5 ** 0.5, shape,
                             as_dtype(dtype, "randn"), device, generator, requires_grad, "randn")
    return _normal(0.0, 1.0, shape, dtype, device, generator, requires_grad, "randn")


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


# ---- sampling from given probabilities (composites of uniform draws) -----------------------


def _concrete(t) -> bool:
    """Whether t's values exist now: eager, not a captured graph's placeholder. Checks that
    read values (negative weights, empty rows) run only then; a graph cannot raise on data."""
    return not graph_value(t._data)


def _float_tensor(input, op):
    from .arguments import as_tensor
    input = as_tensor(input, "input", op)
    if not input.dtype.is_floating:
        raise DTypeError(f"{op} needs floating probabilities, got {input.dtype}; cast with "
                         f".astype(rill.float32)", op=op)
    return input


def _check_weights(p: np.ndarray, num_samples: int, replacement: bool, op: str) -> None:
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ArgumentError("probabilities must be finite and non-negative", op=op)
    positive = (p > 0).sum(axis=-1)
    if np.any(positive == 0):
        raise ArgumentError("every row of probabilities needs a positive entry; the sum of "
                            "a row is zero", op=op)
    if not replacement and np.any(positive < num_samples):
        raise ArgumentError(f"without replacement, every row needs at least num_samples="
                            f"{num_samples} categories of positive probability, and some row "
                            f"has only {int(positive.min())}; pass replacement=True", op=op)


def multinomial(input, num_samples: int, replacement: bool = False, generator=None):
    """Category indices drawn from the rows of `input` (unnormalized non-negative weights,
    1-d or 2-d), as torch.multinomial: int64 of shape (num_samples,) or (rows, num_samples).

    With replacement each draw inverts the row's cumulative sums at a uniform point; without,
    the row's num_samples smallest exponential race times E_i / p_i (E_i ~ Exp(1)) are the
    draws in the order a one-at-a-time sampler would make them.

    >>> import rill
    >>> from rill.ops.random import multinomial
    >>> multinomial(rill.tensor([0.0, 1.0, 0.0]), 2, replacement=True)
    tensor([1, 1])
    """
    from . import elementwise as E, reduce as R, shape as S, sorting
    op = "multinomial"
    input = _float_tensor(input, op)
    if input.ndim not in (1, 2):
        raise ArgumentError(f"input must be 1-d or 2-d, got shape {input.shape}", op=op)
    num_samples = as_int(num_samples, "num_samples", op, low=1)
    replacement = as_bool(replacement, "replacement", op)
    categories = input.shape[-1]
    if categories == 0:
        raise ArgumentError("input has no categories (its last dimension is 0)", op=op)
    if not replacement and num_samples > categories:
        raise ArgumentError(f"cannot draw num_samples={num_samples} distinct categories out "
                            f"of {categories} without replacement; pass replacement=True",
                            op=op)
    if _concrete(input):
        _check_weights(input.numpy(), num_samples, replacement, op)
    p = detached_value(input)
    if p.dtype.itemsize < 4:  # half precision cumulates badly
        p = E.cast(p, dt.float32)
    rows = S.reshape(p, (-1, categories))
    n_rows = rows.shape[0]
    if replacement:
        u = _uniform(0.0, 1.0, (n_rows, num_samples, 1), p.dtype, input.device, generator,
                     False, op)
        cdf = R.cumsum(rows, axis=-1)
        point = u * cdf[:, None, categories - 1:]          # in [0, row total)
        index = R.sum(E.cast(cdf[:, None, :] <= point, dt.int64), axis=-1)
        # Rounding can put the point on the total: fall back to the last positive category.
        last = (categories - 1) - R.argmax(S.flip(E.cast(rows > 0, dt.int64), axis=-1),
                                           axis=-1)
        index = E.minimum(index, last[:, None])
    else:
        times = -E.log1p(-_uniform(0.0, 1.0, (n_rows, categories), p.dtype, input.device,
                                   generator, False, op))
        # log(E_i) - log(p_i); a zero-weight category never wins the race
        keys = E.where(rows > 0, E.log(times) - E.log(E.where(rows > 0, rows, 1.0)), np.inf)
        index = sorting.topk(keys, num_samples, axis=-1, largest=False)[1]
        index = E.cast(index, dt.int64)
    return S.reshape(index, input.shape[:-1] + (num_samples,))


def bernoulli(input, p=None, generator=None):
    """0 or 1 with probability `input` (or the number `p` for every element), in input's
    shape and dtype, as torch.bernoulli.

    >>> import rill
    >>> from rill.ops.random import bernoulli
    >>> bernoulli(rill.tensor([0.0, 1.0]))
    tensor([0., 1.])
    """
    from . import elementwise as E
    op = "bernoulli"
    input = _float_tensor(input, op)
    if p is None:
        probs = detached_value(input)
        if _concrete(probs):
            values = probs.numpy()
            if not np.all((values >= 0) & (values <= 1)):
                raise ArgumentError("probabilities must lie in [0, 1]", op=op)
    else:
        probs = as_float(p, "p", op)
        if not 0 <= probs <= 1:
            raise ArgumentError(f"p must lie in [0, 1], got {probs}", op=op)
    u = _uniform(0.0, 1.0, input.shape, input.dtype, input.device, generator, False, op)
    return E.cast(u < probs, input.dtype)
