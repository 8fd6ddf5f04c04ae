"""The op test table: one row per primitive (and public composite).

Each row gives the rill call, a NumPy float64 reference, a PyTorch reference, the input
shapes (broadcasting, 0-d and empty cases included), the input domain, and which inputs are
differentiated. tests/ops/test_ops.py runs every row through every check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

import rill

try:
    from math import erf as _erf1
except ImportError:  # pragma: no cover
    _erf1 = None
_np_erf = np.vectorize(_erf1, otypes=[np.float64])


@dataclass
class Op:
    name: str
    fn: Callable                 # rill: (*tensors) -> tensor or tuple
    ref: Callable                # NumPy float64: (*arrays) -> array or tuple
    torch_fn: Callable | None    # PyTorch: (*tensors) -> tensor or tuple; None skips it
    shapes: list                 # input sets; an entry is a shape or a callable(rng) -> array
    domain: tuple = (-2.0, 2.0)
    grad: bool = True            # differentiate the float inputs
    dtypes: tuple = ("float32", "float16", "bfloat16")  # forward also checked in these
    rtol: float = 1e-10
    fd_rtol: float = 1e-5
    nondiff_inputs: tuple = field(default_factory=tuple)  # float inputs not differentiated

    def __str__(self):
        return self.name


UNARY_SHAPES = [(3, 4), (), (0, 3), (2, 1, 3)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((4,), (3, 4)),
                 ((0, 3), (1, 3))]


def ints(shape, low, high):
    """An integer input (indices), drawn from [low, high)."""
    return lambda rng: rng.integers(low, high, size=shape).astype(np.int64)


def bools(shape):
    return lambda rng: rng.random(shape) > 0.5


def distinct(shape):
    """Floats with no ties (sort, max, topk are then differentiable everywhere)."""
    return lambda rng: rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 1.0


def unique_ints(shape, n, axis):
    """Indices in [0, n), distinct along `axis` (a scatter with no two writes to one place)."""
    def make(rng):
        moved = np.moveaxis(np.empty(shape, dtype=np.int64), axis, -1)
        for idx in np.ndindex(moved.shape[:-1]):
            moved[idx] = rng.permutation(n)[:moved.shape[-1]]
        return np.moveaxis(moved, -1, axis).copy()
    return make


def distinct_offset(shape, offset):
    """Like `distinct`, shifted by `offset` (0 < offset < 0.1): no value equals one of
    distinct()'s, so amax/amin over the two together have no ties."""
    return lambda rng: distinct(shape)(rng) + offset


def _orthogonal(rng, n):
    q, r = np.linalg.qr(rng.normal(size=(n, n)))
    return q * np.sign(np.diag(r))


def with_spectrum(shape, values):
    """(..., M, N) matrices U diag(values) V^T, U and V random orthogonal: the singular values
    are exactly `values` (distinct ones keep svd differentiable; a zero makes x singular)."""
    def make(rng):
        *batch, m, n = shape
        k = min(m, n)
        out = np.empty(shape)
        for i in np.ndindex(*batch):
            out[i] = (_orthogonal(rng, m)[:, :k] * values) @ _orthogonal(rng, n)[:, :k].T
        return out
    return make


def symmetric_with(shape, values):
    """Symmetric (..., N, N) matrices Q diag(values) Q^T: the eigenvalues are `values`."""
    def make(rng):
        out = np.empty(shape)
        for i in np.ndindex(*shape[:-2]):
            q = _orthogonal(rng, shape[-1])
            out[i] = (q * values) @ q.T
        return out
    return make


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1 + _np_erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _np_logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


NUMPY_REDUCE = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max,
                "min": np.min, "logsumexp": _np_logsumexp}

F = torch.nn.functional
POS = (0.5, 2.0)


def unary(name, ref, tref, domain=(-2.0, 2.0), **kw):
    return Op(name, getattr(rill, name), ref, tref, [(s,) for s in UNARY_SHAPES], domain, **kw)


def binary(name, ref, tref, domain=(-2.0, 2.0), **kw):
    return Op(name, getattr(rill, name), ref, tref, list(BINARY_SHAPES), domain, **kw)


def _ew(name):
    """rill.ops.elementwise.<name>, looked up at call time."""
    def call(*xs):
        from rill.ops import elementwise
        return getattr(elementwise, name)(*xs)
    return call


def _cplx(a, b):
    return a + b * 1j


def _parts(z):
    return _ew("real")(z), _ew("imag")(z)


def _np_parts(z):
    return np.real(z), np.imag(z)


def _torch_parts(z):
    return z.real, z.imag


def _np_shift(x, y, left):
    """Python integers: no width, so wrap x << y to int64 (0 past the width); x >> y is
    arithmetic (past the width: -1 for negatives, 0 otherwise)."""
    def one(a, s):
        v = (int(a) << int(s)) if left else (int(a) >> int(s))
        return (v + 2 ** 63) % 2 ** 64 - 2 ** 63
    return np.vectorize(one, otypes=[np.int64])(x, y).reshape(np.broadcast_shapes(x.shape,
                                                                                   y.shape))


def _fft_fn(name):
    """rill.fft.<name>, looked up at call time."""
    def call(*xs, **kw):
        import rill.fft
        return getattr(rill.fft, name)(*xs, **kw)
    return call


def _torch_cplx(a, b):
    """torch.complex(a, b), its gradients materialized: torch's fft backward can hand back a
    lazily negated view, which .numpy() refuses."""
    return torch.complex(a * 1.0, b * 1.0)


def _torch_kw(kw):
    """The standard's keywords as torch.fft's (axis -> dim, axes -> dim)."""
    return {{"axis": "dim", "axes": "dim"}.get(k, k): v for k, v in kw.items()}


def _np_resize(z, axis, n):
    """z cropped or zero-padded to length n along axis."""
    if n is None or n == z.shape[axis]:
        return z
    if n < z.shape[axis]:
        return np.take(z, np.arange(n), axis=axis)
    widths = [(0, 0)] * z.ndim
    widths[axis] = (0, n - z.shape[axis])
    return np.pad(z, widths)


def _np_dft(z, axis, inverse=False, norm="backward"):
    """sum_j z[j] exp(-+2 pi i j k / n) along axis, scaled as `norm` says."""
    n = z.shape[axis]
    k = np.arange(n)
    m = np.exp((1 if inverse else -1) * 2j * np.pi * np.outer(k, k) / n)
    scale = {"backward": 1 / n if inverse else 1.0, "ortho": 1 / math.sqrt(n),
             "forward": 1.0 if inverse else 1 / n}[norm]
    return np.moveaxis(np.tensordot(z, m, axes=([axis], [0])), -1, axis) * scale


def _np_fft_1d(inverse):
    def run(z, n=None, axis=-1, norm="backward"):
        return _np_dft(_np_resize(z, axis, n), axis, inverse, norm)
    return run


def _np_fft_nd(inverse):
    def run(z, s=None, axes=None, norm="backward"):
        axes = tuple(range(z.ndim)) if axes is None else axes
        for i, a in enumerate(axes):
            z = _np_dft(_np_resize(z, a, None if s is None else s[i]), a, inverse, norm)
        return z
    return run


def _np_rfft(x, n=None, axis=-1, norm="backward"):
    full = _np_dft(_np_resize(x.astype(complex), axis, n), axis, False, norm)
    return np.take(full, np.arange(full.shape[axis] // 2 + 1), axis=axis)


def _np_hermitian(z, axis, n):
    """The full length-n spectrum whose first n//2 + 1 bins are z's (cropped or padded)."""
    half = np.moveaxis(_np_resize(z, axis, n // 2 + 1), axis, -1)
    tail = np.conj(half[..., 1:n - n // 2][..., ::-1])
    return np.moveaxis(np.concatenate([half, tail], axis=-1), -1, axis)


def _np_irfft(z, n=None, axis=-1, norm="backward"):
    n = 2 * (z.shape[axis] - 1) if n is None else n
    return np.real(_np_dft(_np_hermitian(z, axis, n), axis, True, norm))


def _np_rfftn(x, s, axes):
    z = _np_rfft(x, s[-1], axes[-1])
    for size, a in zip(s[:-1], axes[:-1]):
        z = _np_dft(_np_resize(z, a, size), a)
    return z


def _np_irfftn(z, s, axes):
    for size, a in zip(s[:-1], axes[:-1]):
        z = _np_dft(_np_resize(z, a, size), a, inverse=True)
    return _np_irfft(z, s[-1], axes[-1])


def _np_hfft(z, n=None, axis=-1, norm="backward"):
    n = 2 * (z.shape[axis] - 1) if n is None else n
    return np.real(_np_dft(_np_hermitian(z, axis, n), axis, False, norm))


def _np_ihfft(x, n=None, axis=-1, norm="backward"):
    full = _np_dft(_np_resize(x.astype(complex), axis, n), axis, True, norm)
    return np.take(full, np.arange(full.shape[axis] // 2 + 1), axis=axis)


def _np_fftshift(x, axes=None, inverse=False):
    """Roll each axis by half its length (zero frequency to the middle), or back."""
    for a in (range(x.ndim) if axes is None else axes):
        n = x.shape[a]
        x = np.roll(x, -(n // 2) if inverse else n // 2, axis=a)
    return x


_SORTED = lambda r: np.array([-1.0, 0.0, 0.0, 0.5, 1.5])  # noqa: E731 (a repeated entry)
_PROBES = lambda r: np.array([[-2.0, 0.0, 0.5], [0.25, 1.5, 3.0]])  # noqa: E731 (hits and misses)


def _np_searchsorted(a, v, side):
    """For each probe, how many entries lie before it: < for 'left', <= for 'right'."""
    below = (lambda e, p: e < p) if side == "left" else (lambda e, p: e <= p)
    return np.array([sum(below(e, p) for e in a) for p in np.ravel(v)],
                    dtype=np.int64).reshape(np.shape(v))


def _np_diff1(x):
    return x[..., 1:] - x[..., :-1]


def _np_meshgrid(xs, indexing):
    """Output k varies along axis k of the grid (axes 0 and 1 swapped for 'xy')."""
    shape = [len(x) for x in xs]
    if indexing == "xy" and len(xs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    outs = []
    for k, x in enumerate(xs):
        axis = {0: 1, 1: 0}.get(k, k) if indexing == "xy" and len(xs) > 1 else k
        view = [1] * len(xs)
        view[axis] = len(x)
        outs.append(np.broadcast_to(x.reshape(view), shape))
    return tuple(outs)


def uniform_in(shape, low, high):
    return lambda rng: rng.uniform(low, high, size=shape)


def _gamma_grad_fn():
    from rill.distributions.implicit import standard_gamma_grad
    return standard_gamma_grad


def _np_standard_gamma_grad(x, a):
    """-(dP/da)(a, x) / f(x; a), P the regularized lower incomplete gamma, f the density:
    P = sum_n exp((a + n) ln x - x - lgamma(a + n + 1)), differentiated term by term
    (d/da lgamma = digamma), summed until the terms vanish."""
    from scipy.special import digamma
    out = np.zeros(np.shape(x))
    for i in np.ndindex(out.shape):
        xi, ai = float(x[i]), float(a[i])
        lx, total, n = math.log(xi), 0.0, 0
        while True:
            term = math.exp((ai + n) * lx - xi - math.lgamma(ai + n + 1))
            total += term * (lx - digamma(ai + n + 1))
            n += 1
            if n > xi and term < 1e-18 * max(abs(total), 1e-300):
                break
        density = math.exp((ai - 1) * lx - xi - math.lgamma(ai))
        out[i] = -total / density
    return out


def _fusable_chain(lib):
    def chain(x, y):
        return lib.tanh(x * y + 0.5) * lib.exp(-y) - y * y
    return chain


def _run_fused(x, y):
    from rill.capture.evaluate import evaluate
    from rill.capture.passes.fuse import fuse
    graph = fuse(rill.capture(_fusable_chain(rill)).graph_for(x, y, optimized=False))
    assert any(n.op == "fused" for n in graph.nodes), "the fuse pass grouped nothing"
    out = evaluate(graph, [x, y])
    return out[0] if isinstance(out, (list, tuple)) else out


LA = rill.linalg
TL = torch.linalg


# ---- control flow rows ---------------------------------------------------------------------

def _captured(fn):
    """A fresh capture per call: the table calls with many shapes (no retrace warnings)."""
    return rill.capture(fn)


def _scan_rnn(xs, w, reverse=False):
    step = lambda h, x: (rill.tanh(h * w + x), h * x)  # noqa: E731
    h, ys = rill.scan(step, rill.zeros_like(xs[0]), xs, reverse=reverse)
    return h, ys


def _scan_rnn_reverse(xs, w):
    return _scan_rnn(xs, w, reverse=True)


def _loop_rnn(lib, reverse=False):
    def run(xs, w):
        h, ys = xs[0] * 0, [None] * len(xs)
        for t in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
            h, ys[t] = lib.tanh(h * w + xs[t]), h * xs[t]
        return h, lib.stack(ys)
    return run


def _while_poly(x, w):
    # Four iterations (the count is data: it depends on nothing differentiated).
    out = rill.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * w + rill.sin(c[1])),
                          (rill.tensor(0, device=x.device), x), max_iterations=10)
    return out[1]


def _while_ref(lib):
    def run(x, w):
        for _ in range(4):
            x = x * w + lib.sin(x)
        return x
    return run


def _cond_mix(p, x, y):
    return rill.cond(p, lambda a, b: a * b, lambda a, b: rill.sin(a) - b, x, y)


def _np_coalesce_rows(indices, rows):
    unique, inverse = np.unique(indices, return_inverse=True)
    n, k = len(indices), len(unique)
    summed = np.zeros_like(rows)
    np.add.at(summed, inverse.reshape(-1), rows)
    padded = np.concatenate([unique, np.full(n - k, unique[0] if k else 0)]).astype(np.int64)
    return padded, summed, np.arange(n) < k


OPS = [
    # ---- unary -----------------------------------------------------------------------------
    unary("neg", np.negative, torch.neg),
    unary("abs", np.abs, torch.abs),
    unary("sign", np.sign, torch.sign),
    unary("exp", np.exp, torch.exp),
    unary("exp2", np.exp2, torch.exp2),
    unary("log", np.log, torch.log, POS),
    unary("log2", np.log2, torch.log2, POS),
    unary("log1p", np.log1p, torch.log1p, (-0.5, 2.0)),
    unary("expm1", np.expm1, torch.expm1),
    unary("sqrt", np.sqrt, torch.sqrt, POS),
    unary("rsqrt", lambda x: 1 / np.sqrt(x), torch.rsqrt, POS),
    unary("square", np.square, torch.square),
    unary("reciprocal", np.reciprocal, torch.reciprocal, POS),
    unary("sin", np.sin, torch.sin),
    unary("cos", np.cos, torch.cos),
    unary("tan", np.tan, torch.tan, (-1.2, 1.2)),
    unary("tanh", np.tanh, torch.tanh),
    unary("sinh", np.sinh, torch.sinh),
    unary("cosh", np.cosh, torch.cosh),
    unary("arcsin", np.arcsin, torch.asin, (-0.9, 0.9)),
    unary("arccos", np.arccos, torch.acos, (-0.9, 0.9)),
    unary("arctan", np.arctan, torch.atan),
    unary("sigmoid", _sigmoid, torch.sigmoid, (-6.0, 6.0)),
    unary("relu", lambda x: np.maximum(x, 0), torch.relu),
    Op("leaky_relu", lambda x: rill.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
       lambda x: F.leaky_relu(x, 0.2), [(s,) for s in UNARY_SHAPES]),
    Op("elu", lambda x: rill.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)),
       lambda x: F.elu(x, 1.5), [(s,) for s in UNARY_SHAPES]),
    unary("gelu", _gelu, F.gelu, (-3.0, 3.0)),
    Op("gelu_tanh", lambda x: rill.gelu(x, approximate="tanh"), _gelu_tanh,
       lambda x: F.gelu(x, approximate="tanh"), [(s,) for s in UNARY_SHAPES], (-3.0, 3.0)),
    unary("silu", lambda x: x * _sigmoid(x), F.silu, (-4.0, 4.0)),
    unary("softplus", lambda x: np.logaddexp(0, x), F.softplus, (-4.0, 4.0)),
    unary("erf", _np_erf, torch.erf),
    unary("floor", np.floor, torch.floor, (-3.0, 3.0)),
    unary("ceil", np.ceil, torch.ceil, (-3.0, 3.0)),
    unary("round", np.round, torch.round, (-3.0, 3.0)),
    unary("trunc", np.trunc, torch.trunc, (-3.0, 3.0)),
    unary("isnan", np.isnan, torch.isnan, grad=False),
    unary("isinf", np.isinf, torch.isinf, grad=False),
    unary("isfinite", np.isfinite, torch.isfinite, grad=False),
    unary("logical_not", np.logical_not, torch.logical_not, grad=False),
    # ---- binary ----------------------------------------------------------------------------
    binary("add", np.add, torch.add),
    Op("scaled_add", lambda x, y: rill.scaled_add(x, y, 0.5, -2.0), lambda x, y: 0.5 * x - 2 * y,
       lambda x, y: 0.5 * x - 2 * y, list(BINARY_SHAPES)),
    Op("scaled_add_alpha1", lambda x, y: rill.scaled_add(x, y, 1.0, -0.25),
       lambda x, y: x - 0.25 * y, lambda x, y: x - 0.25 * y, [((3, 4), (3, 4)), ((3, 4), (4,))]),
    binary("subtract", np.subtract, torch.sub),
    binary("multiply", np.multiply, torch.mul),
    binary("divide", np.divide, torch.div, POS),
    # torch has no floor_divide gradient; floor(x / y) has the same values and a zero one.
    binary("floor_divide", np.floor_divide, lambda x, y: torch.floor(x / y), POS),
    binary("remainder", np.remainder, torch.remainder, POS),
    binary("power", np.power, torch.pow, POS),
    binary("maximum", np.maximum, torch.maximum),
    binary("minimum", np.minimum, torch.minimum),
    binary("arctan2", np.arctan2, torch.atan2),
    binary("equal", np.equal, torch.eq, grad=False),
    binary("not_equal", np.not_equal, torch.ne, grad=False),
    binary("less", np.less, torch.lt, grad=False),
    binary("less_equal", np.less_equal, torch.le, grad=False),
    binary("greater", np.greater, torch.gt, grad=False),
    binary("greater_equal", np.greater_equal, torch.ge, grad=False),
    binary("logical_and", np.logical_and, torch.logical_and, grad=False),
    binary("logical_or", np.logical_or, torch.logical_or, grad=False),
    binary("logical_xor", np.logical_xor, torch.logical_xor, grad=False),
    Op("bitwise_and", rill.bitwise_and, np.bitwise_and, torch.bitwise_and,
       [(ints((3, 4), 0, 16), ints((3, 4), 0, 16)), (ints((3, 1), 0, 16), ints((4,), 0, 16))],
       grad=False, dtypes=()),
    Op("bitwise_or", rill.bitwise_or, np.bitwise_or, torch.bitwise_or,
       [(ints((3, 4), 0, 16), ints((3, 4), 0, 16)), (bools((2, 3)), bools((2, 3)))],
       grad=False, dtypes=()),
    Op("bitwise_xor", rill.bitwise_xor, np.bitwise_xor, torch.bitwise_xor,
       [(ints((3, 4), 0, 16), ints((3, 4), 0, 16))], grad=False, dtypes=()),
    Op("check", lambda ok, x: rill.ops.checks.check(ok, x, "bad"), lambda ok, x: x,
       lambda ok, x: x, [(lambda r: np.ones((3, 4), bool), (3, 4))]),
    Op("where", rill.where, np.where, torch.where,
       [(bools((3, 4)), (3, 4), (3, 4)), (bools((3, 1)), (1, 4), ()), (bools(()), (2,), (2,))]),
    Op("clip", rill.clip, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
       lambda x, lo, hi: torch.clamp(x, lo, hi),
       [((3, 4), lambda r: np.full((1, 4), -0.5), lambda r: np.full((3, 1), 0.7)),
        ((5,), lambda r: np.array(-1.0), lambda r: np.array(1.0))]),
    Op("clip_scalars", lambda x: rill.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
       lambda x: torch.clamp(x, -0.5, 0.5), [((3, 4),), ((),)]),
    Op("cast", lambda x: rill.cast(x, rill.float32).astype(rill.float64),
       lambda x: x.astype(np.float32).astype(np.float64),
       lambda x: x.float().double(), [((3, 4),), ((),)], dtypes=(), rtol=0,
       fd_rtol=0.1),  # the round trip is a float32 staircase: steps of ~1e-7 vs eps 1e-6
    # ---- reductions ------------------------------------------------------------------------
    *[Op(f"{name}{suffix}", (lambda n, a, k: lambda x: getattr(rill, n)(x, axis=a, keepdims=k))(
        name, axis, keep),
         (lambda n, a, k: lambda x: NUMPY_REDUCE[n](x, axis=a, keepdims=k))(name, axis, keep),
         (lambda t, a, k: lambda x: _torch_reduce(t, x, a, k))(tfn, axis, keep),
         shapes, dtypes=("float32",), rtol=1e-9)
      for name, tfn in (("sum", torch.sum), ("mean", torch.mean), ("prod", torch.prod),
                        ("max", torch.amax), ("min", torch.amin),
                        ("logsumexp", torch.logsumexp))
      for suffix, axis, keep, shapes in (
          ("", None, False, [(distinct((3, 4)),), (distinct(()),)]),
          ("_axis1", 1, False, [(distinct((3, 4)),), (distinct((2, 3, 4)),)]),
          ("_axes_keep", (0, -1), True, [(distinct((2, 3, 4)),)]))
      if not (name == "logsumexp" and axis is None) and not (
          name in ("max", "min") and axis is None)],
    Op("max_all", lambda x: rill.max(x), np.max, torch.amax, [(distinct((3, 4)),)]),
    Op("logsumexp_all", lambda x: rill.logsumexp(x), lambda x: np.log(np.sum(np.exp(x))),
       lambda x: torch.logsumexp(x.reshape(-1), 0), [((3, 4),), ((),)]),
    Op("sum_empty", lambda x: rill.sum(x, axis=0), lambda x: np.sum(x, axis=0),
       lambda x: torch.sum(x, 0), [((0, 3),)]),
    Op("prod_with_zero", lambda x: rill.prod(x * rill.tensor([1.0, 0.0, 1.0, 1.0],
                                                              dtype=x.dtype, device=x.device),
                                                  axis=1),
       lambda x: np.prod(x * np.array([1.0, 0.0, 1.0, 1.0]), axis=1),
       lambda x: torch.prod(x * torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=x.dtype), 1),
       [((3, 4),)], dtypes=()),
    Op("argmax", lambda x: rill.argmax(x, axis=1), lambda x: np.argmax(x, axis=1),
       lambda x: torch.argmax(x, 1), [(distinct((3, 4)),)], grad=False),
    Op("argmin", lambda x: rill.argmin(x), lambda x: np.argmin(x), lambda x: torch.argmin(x),
       [(distinct((3, 4)),)], grad=False),
    Op("argmax_keep", lambda x: rill.argmax(x, axis=-1, keepdims=True),
       lambda x: np.argmax(x, axis=-1, keepdims=True), lambda x: torch.argmax(x, -1, True),
       [(distinct((2, 3, 4)),)], grad=False),
    *[Op(f"var_c{c}_{i}", (lambda c, a: lambda x: rill.var(x, axis=a, correction=c))(c, a),
         (lambda c, a: lambda x: np.var(x, axis=a, ddof=c))(c, a),
         (lambda c, a: lambda x: torch.var(x, dim=a, correction=c))(c, a), [((3, 4),)],
         dtypes=("float32",), rtol=1e-9)
      for c in (0, 1) for i, a in enumerate((None, 1))],
    Op("std", lambda x: rill.std(x, axis=0, correction=1), lambda x: np.std(x, axis=0, ddof=1),
       lambda x: torch.std(x, 0, correction=1), [((4, 3),)], dtypes=("float32",)),
    Op("all", lambda x: rill.all(x, axis=0), lambda x: np.all(x, axis=0),
       lambda x: torch.all(x, 0), [(bools((3, 4)),)], grad=False),
    Op("any", lambda x: rill.any(x), np.any, torch.any, [(bools((3, 4)),), (bools((0,)),)],
       grad=False),
    Op("cumsum", lambda x: rill.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1),
       lambda x: torch.cumsum(x, 1), [((3, 4),)], dtypes=("float32",)),
    Op("cumsum_flat", lambda x: rill.cumsum(x), np.cumsum,
       lambda x: torch.cumsum(x.reshape(-1), 0), [((3, 4),)]),
    Op("cumprod", lambda x: rill.cumprod(x, axis=1), lambda x: np.cumprod(x, axis=1),
       lambda x: torch.cumprod(x, 1), [((3, 4),)], dtypes=("float32",)),
    Op("cumprod_zeros", lambda x: rill.cumprod(x * rill.tensor([1.0, 0.0, 1.0, 0.0, 1.0],
                                                                dtype=x.dtype,
                                                                device=x.device), axis=-1),
       lambda x: np.cumprod(x * np.array([1.0, 0.0, 1.0, 0.0, 1.0]), axis=-1),
       lambda x: torch.cumprod(x * torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0], dtype=x.dtype), -1),
       [((2, 5),)], dtypes=()),
    *[Op(f"norm_{o}", (lambda o: lambda x: rill.norm(x, ord=o, axis=1))(o),
         (lambda o: lambda x: np.linalg.norm(x, ord=o, axis=1))(o),
         (lambda o: lambda x: torch.linalg.vector_norm(x, ord=o, dim=1))(o),
         [(distinct((3, 4)),)], dtypes=("float32",))
      for o in (2, 1, 3, math.inf, -math.inf)],
    Op("norm_all", lambda x: rill.norm(x), lambda x: np.linalg.norm(x.reshape(-1)),
       lambda x: torch.linalg.vector_norm(x), [((3, 4),)]),
    # ---- shape -----------------------------------------------------------------------------
    Op("reshape", lambda x: rill.reshape(x, (4, -1)), lambda x: x.reshape(4, -1),
       lambda x: x.reshape(4, -1), [((2, 3, 2),), ((0, 4),)]),
    Op("transpose", lambda x: rill.transpose(x, (2, 0, 1)), lambda x: np.transpose(x, (2, 0, 1)),
       lambda x: x.permute(2, 0, 1), [((2, 3, 4),)]),
    Op("transpose_default", rill.transpose, np.transpose, lambda x: x.permute(1, 0),
       [((2, 3),)]),
    Op("permute_dims", lambda x: rill.permute_dims(x, (1, 0, 2)),
       lambda x: np.transpose(x, (1, 0, 2)), lambda x: x.permute(1, 0, 2), [((2, 3, 4),)]),
    Op("swapaxes", lambda x: rill.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1),
       lambda x: x.transpose(0, -1), [((2, 3, 4),)]),
    Op("moveaxis", lambda x: rill.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1),
       lambda x: torch.movedim(x, 0, -1), [((2, 3, 4),)]),
    Op("squeeze", lambda x: rill.squeeze(x, 1), lambda x: np.squeeze(x, 1),
       lambda x: x.squeeze(1), [((3, 1, 2),)]),
    Op("squeeze_all", rill.squeeze, np.squeeze, torch.squeeze, [((1, 3, 1),), ((1,),)]),
    Op("expand_dims", lambda x: rill.expand_dims(x, (0, -1)),
       lambda x: np.expand_dims(x, (0, -1)), lambda x: x[None, ..., None], [((2, 3),), ((),)]),
    Op("broadcast_to", lambda x: rill.broadcast_to(x, (2, 3, 4)),
       lambda x: np.broadcast_to(x, (2, 3, 4)), lambda x: x.expand(2, 3, 4),
       [((3, 1),), ((),), ((4,),)]),
    Op("concat", lambda *xs: rill.concat(xs, axis=1), lambda *xs: np.concatenate(xs, axis=1),
       lambda *xs: torch.cat(xs, 1), [((2, 1), (2, 3), (2, 0))]),
    Op("stack", lambda *xs: rill.stack(xs, axis=-1), lambda *xs: np.stack(xs, axis=-1),
       lambda *xs: torch.stack(xs, -1), [((2, 3), (2, 3)), ((), ())]),
    Op("split_sizes", lambda x: tuple(rill.split(x, [1, 3], axis=1)),
       lambda x: tuple(np.split(x, [1], axis=1)), lambda x: torch.split(x, [1, 3], 1),
       [((2, 4),)]),
    Op("split_sections", lambda x: tuple(rill.split(x, 2)), lambda x: tuple(np.split(x, 2)),
       lambda x: torch.chunk(x, 2), [((4, 3),)]),
    Op("flatten", lambda x: rill.flatten(x, 1), lambda x: x.reshape(x.shape[0], -1),
       lambda x: torch.flatten(x, 1), [((2, 3, 4),)]),
    *[Op(f"pad_{mode}", (lambda m: lambda x: rill.pad(x, ((1, 2), (2, 1)), mode=m))(mode),
         (lambda m: lambda x: np.pad(x, ((1, 2), (2, 1)), mode=m))(mode),
         (lambda m: lambda x: F.pad(x[None], (2, 1, 1, 2), mode=m)[0])(tm), [((3, 4),)])
      for mode, tm in (("constant", "constant"), ("reflect", "reflect"), ("edge", "replicate"))],
    Op("pad_value", lambda x: rill.pad(x, 1, value=2.5),
       lambda x: np.pad(x, 1, constant_values=2.5), lambda x: F.pad(x, (1, 1, 1, 1), value=2.5),
       [((2, 3),)]),
    Op("flip", lambda x: rill.flip(x, 1), lambda x: np.flip(x, 1), lambda x: torch.flip(x, (1,)),
       [((3, 4),)]),
    Op("flip_all", rill.flip, np.flip, lambda x: torch.flip(x, tuple(range(x.ndim))),
       [((2, 3),)]),
    Op("roll", lambda x: rill.roll(x, 2, axis=1), lambda x: np.roll(x, 2, axis=1),
       lambda x: torch.roll(x, 2, 1), [((3, 4),)]),
    Op("roll_flat", lambda x: rill.roll(x, -1), lambda x: np.roll(x, -1),
       lambda x: torch.roll(x, -1), [((3, 4),)]),
    Op("tile", lambda x: rill.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)),
       lambda x: torch.tile(x, (2, 1, 3)), [((2, 3),)]),
    Op("repeat", lambda x: rill.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, axis=1),
       lambda x: torch.repeat_interleave(x, 2, 1), [((2, 3),)]),
    Op("repeat_counts", lambda x: rill.repeat(x, [1, 0, 2], axis=0),
       lambda x: np.repeat(x, [1, 0, 2], axis=0),
       lambda x: torch.repeat_interleave(x, torch.tensor([1, 0, 2]), 0), [((3, 2),)]),
    Op("take", lambda x, i: rill.take(x, i, axis=1), lambda x, i: np.take(x, i, axis=1),
       lambda x, i: torch.index_select(x, 1, i), [((3, 4), ints((5,), 0, 4))]),
    Op("take_rows", lambda x, i: rill.take(x, i, axis=0), lambda x, i: np.take(x, i, axis=0),
       lambda x, i: x[i], [((4, 3), ints((2, 3), 0, 4))]),
    Op("take_along_axis", lambda x, i: rill.take_along_axis(x, i, axis=1),
       lambda x, i: np.take_along_axis(x, i, axis=1), lambda x, i: torch.gather(x, 1, i),
       [((3, 4), ints((3, 6), 0, 4))]),
    Op("scatter_add", lambda x, i, u: rill.scatter_add(x, i, u, axis=1),
       lambda x, i, u: _np_scatter_add(x, i, u, 1),
       lambda x, i, u: torch.scatter_add(x, 1, i, u), [((3, 4), ints((3, 5), 0, 4), (3, 5))]),
    Op("one_hot", lambda i: rill.one_hot(i, 5, dtype=rill.float64),
       lambda i: np.eye(5)[i], lambda i: F.one_hot(i, 5).double(), [(ints((2, 3), 0, 5),)],
       grad=False, dtypes=()),
    Op("tril", lambda x: rill.tril(x, -1), lambda x: np.tril(x, -1), lambda x: torch.tril(x, -1),
       [((3, 4),), ((2, 3, 3),)]),
    Op("triu", lambda x: rill.triu(x, 1), lambda x: np.triu(x, 1), lambda x: torch.triu(x, 1),
       [((4, 3),)]),
    Op("sort", lambda x: rill.sort(x, axis=1), lambda x: np.sort(x, axis=1),
       lambda x: torch.sort(x, 1).values, [(distinct((3, 4)),)]),
    Op("sort_desc", lambda x: rill.sort(x, axis=0, descending=True),
       lambda x: -np.sort(-x, axis=0), lambda x: torch.sort(x, 0, descending=True).values,
       [(distinct((3, 4)),)]),
    Op("argsort", lambda x: rill.argsort(x), lambda x: np.argsort(x, kind="stable"),
       lambda x: torch.argsort(x, stable=True), [(distinct((3, 4)),)], grad=False),
    Op("topk", lambda x: rill.topk(x, 2, axis=1), lambda x: _np_topk(x, 2),
       lambda x: tuple(torch.topk(x, 2, 1)), [(distinct((3, 4)),)]),
    Op("topk_smallest", lambda x: rill.topk(x, 3, largest=False)[0],
       lambda x: np.sort(x, axis=-1)[..., :3], lambda x: torch.topk(x, 3, largest=False).values,
       [(distinct((2, 5)),)]),
    Op("getitem_mixed", lambda x, i: x[1:, i, None, ::-1],
       lambda x, i: x[1:, i, None, ::-1], lambda x, i: _torch_getitem_mixed(x, i),
       [((3, 4, 5), ints((2,), 0, 4))]),
    Op("getitem_rows", lambda x, i: x[i], lambda x, i: x[i], lambda x, i: x[i],
       [((4, 3), ints((5,), -4, 4))]),
    Op("index_set", lambda x, v: rill.index_set(x, (slice(None), 1), v),
       lambda x, v: _np_set(x, (slice(None), 1), v),
       lambda x, v: torch.index_put(x, (torch.arange(3), torch.tensor([1])), v.reshape(3)),
       [((3, 4), (3,))]),
    Op("index_add", lambda x, v, i: rill.index_add(x, (i,), v), lambda x, v, i: _np_add(x, i, v),
       lambda x, v, i: torch.index_put(x, (i,), v, accumulate=True),
       [((4, 3), (5, 3), ints((5,), 0, 4))]),
    # ---- linear algebra --------------------------------------------------------------------
    Op("matmul", rill.matmul, np.matmul, torch.matmul,
       [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
        ((2, 1, 3, 4), (3, 4, 2)), ((0, 4), (4, 2))]),
    Op("dot", rill.dot, np.dot, lambda x, y: torch.dot(x, y) if x.ndim == 1 and y.ndim == 1
       else x @ y, [((4,), (4,)), ((2, 3), (3, 2))]),
    Op("outer", rill.outer, np.outer, torch.outer, [((3,), (4,))]),
    Op("tensordot", lambda x, y: rill.tensordot(x, y, axes=([1, 2], [0, 1])),
       lambda x, y: np.tensordot(x, y, axes=([1, 2], [0, 1])),
       lambda x, y: torch.tensordot(x, y, dims=([1, 2], [0, 1])), [((2, 3, 4), (3, 4, 5))]),
    Op("einsum_mm", lambda x, y: rill.einsum("ij,jk->ik", x, y),
       lambda x, y: np.einsum("ij,jk->ik", x, y), lambda x, y: torch.einsum("ij,jk->ik", x, y),
       [((2, 3), (3, 4))]),
    Op("einsum_three", lambda x, y, z: rill.einsum("bi,bij,j->b", x, y, z),
       lambda x, y, z: np.einsum("bi,bij,j->b", x, y, z),
       lambda x, y, z: torch.einsum("bi,bij,j->b", x, y, z), [((2, 3), (2, 3, 4), (4,))]),
    Op("einsum_ellipsis", lambda x, y: rill.einsum("...ij,...jk", x, y),
       lambda x, y: np.einsum("...ij,...jk", x, y), lambda x, y: torch.einsum("...ij,...jk", x, y),
       [((2, 2, 3), (2, 3, 4))]),
    Op("einsum_trace_sum", lambda x, y: rill.einsum("ii,jk->j", x, y),
       lambda x, y: np.einsum("ii,jk->j", x, y), lambda x, y: torch.einsum("ii,jk->j", x, y),
       [((3, 3), (2, 4))]),
    # Control flow: run through a capture, so that the primitives (switch, scan, while) run
    # eagerly when the graph is evaluated with gradients, and their vjp rules are checked.
    Op("scan", lambda xs, w: _captured(_scan_rnn)(xs, w), _loop_rnn(np), _loop_rnn(torch),
       [((4, 3), (3,)), ((1, 2), ()), ((5, 2, 3), (3,))], dtypes=(), rtol=1e-12),
    Op("scan_reverse", lambda xs, w: _captured(_scan_rnn_reverse)(xs, w),
       _loop_rnn(np, reverse=True), _loop_rnn(torch, reverse=True), [((4, 3), (3,))],
       dtypes=(), rtol=1e-12),
    Op("while", lambda x, w: _captured(_while_poly)(x, w), _while_ref(np), _while_ref(torch),
       [((3,), (3,)), ((), ())], dtypes=(), domain=(0.5, 1.5), rtol=1e-12),
    Op("switch", lambda p, x, y: _captured(_cond_mix)(p, x, y),
       lambda p, x, y: x * y if p else np.sin(x) - y,
       lambda p, x, y: x * y if bool(p) else torch.sin(x) - y,
       [(lambda r: np.array(True), (3, 4), (3, 4)), (lambda r: np.array(False), (3, 4), (4,))],
       dtypes=(), rtol=1e-12),
    # ---- scatter, scatter_reduce ----------------------------------------------------------
    # Distinct indices along dim: with duplicates scatter keeps one write, which finite
    # differences and PyTorch's gradient (every write gets its cotangent) would disagree on.
    Op("scatter", lambda x, i, s: rill.scatter(x, 1, i, s),
       lambda x, i, s: _np_scatter_reduce(x, i, s, 1, "assign"),
       lambda x, i, s: torch.scatter(x, 1, i, s),
       [((3, 5), unique_ints((2, 3), 5, 1), (2, 3)),  # index smaller than input
        ((4, 2, 3), unique_ints((4, 2, 3), 2, 1), (4, 2, 3))]),
    # src larger than index (only its leading block is read): PyTorch's backward refuses
    # that shape, so these are checked against NumPy and finite differences only.
    Op("scatter_src_larger", lambda x, i, s: rill.scatter(x, 1, i, s),
       lambda x, i, s: _np_scatter_reduce(x, i, s, 1, "assign"), None,
       [((3, 5), unique_ints((2, 3), 5, 1), (3, 4))]),
    Op("scatter_reduce_src_larger", lambda x, i, s: rill.scatter_reduce(x, 1, i, s, "amax"),
       lambda x, i, s: _np_scatter_reduce(x, i, s, 1, "amax"), None,
       [(distinct((2, 5, 2)), ints((2, 6, 2), 0, 5), distinct_offset((2, 7, 2), 0.05))]),
    Op("scatter_dim0", lambda x, i, s: rill.scatter(x, 0, i, s),
       lambda x, i, s: _np_scatter_reduce(x, i, s, 0, "assign"),
       lambda x, i, s: torch.scatter(x, 0, i, s),
       [((4, 2, 3), unique_ints((2, 2, 3), 4, 0), (2, 2, 3))]),
    Op("scatter_value", lambda x, i: rill.scatter(x, -1, i, value=2.5),
       lambda x, i: _np_scatter_reduce(x, i, np.full(i.shape, 2.5), -1, "assign"),
       lambda x, i: torch.scatter(x, -1, i, value=2.5),
       [((3, 5), unique_ints((3, 2), 5, 1))]),
    # Duplicate indices (ints), some positions never hit; input and src never tie.
    *[Op(f"scatter_reduce_{red}{'' if inc else '_exclude_self'}",
         (lambda r, c: lambda x, i, s: rill.scatter_reduce(x, 1, i, s, r, include_self=c))(
             red, inc),
         (lambda r, c: lambda x, i, s: _np_scatter_reduce(x, i, s, 1, r, c))(red, inc),
         (lambda r, c: lambda x, i, s: torch.scatter_reduce(x, 1, i, s, r, include_self=c))(
             red, inc),
         [(distinct((3, 4)), ints((3, 5), 0, 4), distinct_offset((3, 5), 0.05)),
          (distinct((2, 5, 2)), ints((2, 6, 2), 0, 5), distinct_offset((2, 6, 2), 0.05))],
         dtypes=("float32",))
      for red in ("prod", "amax", "amin", "sum", "mean") for inc in (True, False)],
    # Exact zeros among the contributors: prod's gradient is the product of the others.
    *[Op(f"scatter_reduce_prod_zeros{'' if inc else '_exclude_self'}",
         (lambda c: lambda x, i, s: rill.scatter_reduce(
             x, 0, i, s * rill.tensor(_ZERO_MASK, dtype=s.dtype, device=s.device), "prod",
             include_self=c))(inc),
         (lambda c: lambda x, i, s: _np_scatter_reduce(x, i, s * _ZERO_MASK, 0, "prod", c))(inc),
         (lambda c: lambda x, i, s: torch.scatter_reduce(
             x, 0, i, s * torch.tensor(_ZERO_MASK, dtype=s.dtype), "prod", include_self=c))(inc),
         [((3, 2), lambda r: np.array([[0, 1], [0, 0], [2, 1], [0, 1]]), (4, 2))],
         dtypes=())
      for inc in (True, False)],
    Op("scatter_reduce_int", lambda x, i, s: rill.scatter_reduce(x, 0, i, s, "mean"),
       lambda x, i, s: _np_scatter_reduce(x, i, s, 0, "mean_floor"),
       lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "mean"),
       [(ints((3, 2), -9, 10), ints((4, 2), 0, 3), ints((4, 2), -9, 10))], grad=False,
       dtypes=()),
    # ---- decompositions (rill.linalg) -----------------------------------------------------
    # Factors fixed only up to a sign per column are compared after the same normalization in
    # every library (_signed: the first row of each column made positive; the sign is locally
    # constant, so gradients pass through unchanged). Inputs are built with known, distinct
    # spectra. cholesky and eigh read one triangle, so the rows feed them sym(x), whose
    # finite differences are then well defined.
    Op("cholesky", lambda x: LA.cholesky(_sym(rill, x)), lambda x: np_cholesky(_sym(np, x)),
       lambda x: TL.cholesky(_sym(torch, x)),
       [(symmetric_with((3, 3), [0.5, 1.4, 2.5]),), (symmetric_with((2, 4, 4), [0.4, 1, 2, 3]),),
        (lambda r: np.array([[4.0]]),)], dtypes=("float32",)),
    Op("cholesky_upper", lambda x: LA.cholesky(_sym(rill, x), upper=True),
       lambda x: np.swapaxes(np_cholesky(_sym(np, x)), -1, -2),
       lambda x: TL.cholesky(_sym(torch, x), upper=True),
       [(symmetric_with((3, 3), [0.5, 1.4, 2.5]),)], dtypes=("float32",)),
    Op("eigh", lambda x: _eigh_signed(rill, LA.eigh, x), lambda x: _eigh_signed(np, np_eigh, x),
       lambda x: _eigh_signed(torch, TL.eigh, x),
       [(symmetric_with((3, 3), [-1.5, 0.4, 2.0]),),
        (symmetric_with((2, 4, 4), [-2.0, -0.5, 1.0, 2.5]),)], dtypes=("float32",)),
    # A repeated eigenvalue: the projector onto its eigenspace does not depend on the basis
    # LAPACK picks inside it, so it is differentiable, and rill's rule (ties dropped) is exact.
    # PyTorch's eigh gradient is not finite there; finite differences only.
    Op("eigh_repeated_eigenspace_projector",
       lambda x: _top_projector(rill, LA.eigh(_sym(rill, x))[1], 2),
       lambda x: _top_projector(np, np_eigh(_sym(np, x))[1], 2), None,
       [(symmetric_with((3, 3), [-1.0, 2.0, 2.0]),), (symmetric_with((2, 4, 4), [-1, 0.5, 2, 2]),)],
       dtypes=("float32",)),
    Op("eigvalsh", lambda x: LA.eigvalsh(_sym(rill, x)), lambda x: np_eigh(_sym(np, x))[0],
       lambda x: TL.eigvalsh(_sym(torch, x)),
       [(symmetric_with((3, 3), [-1.5, 0.4, 2.0]),), (lambda r: np.array([[-0.7]]),)],
       dtypes=("float32",)),
    Op("qr", lambda x: _signed(rill, *LA.qr(x)), lambda x: _signed(np, *np_qr(x)),
       lambda x: _signed(torch, *TL.qr(x)),
       [(with_spectrum((4, 3), [2.5, 1.5, 0.7]),), (with_spectrum((3, 3), [2.0, 1.0, 0.5]),),
        (with_spectrum((2, 5, 2), [1.8, 0.6]),)], dtypes=("float32",)),
    # Wide, and complete on a tall matrix: no gradient (rill refuses it, as PyTorch does);
    # the complement of Q's leading columns is compared as its projector.
    Op("qr_wide", lambda x: _signed(rill, *LA.qr(x)), lambda x: _signed(np, *np_qr(x)),
       lambda x: _signed(torch, *TL.qr(x)), [(with_spectrum((2, 4), [1.5, 0.6]),)],
       grad=False, dtypes=("float32",)),
    Op("qr_complete", lambda x: _qr_complete(rill, *LA.qr(x, mode="complete")),
       lambda x: _np_qr_complete(x), lambda x: _qr_complete(torch, *TL.qr(x, mode="complete")),
       [(with_spectrum((4, 2), [1.5, 0.6]),), (with_spectrum((2, 3, 3), [2.0, 1.0, 0.5]),)],
       grad=False, dtypes=("float32",)),
    Op("svd", lambda x: _svd_signed(rill, *LA.svd(x, full_matrices=False)),
       lambda x: _svd_signed(np, *np_svd(x)),
       lambda x: _svd_signed(torch, *TL.svd(x, full_matrices=False)),
       [(with_spectrum((4, 3), [2.5, 1.5, 0.7]),), (with_spectrum((3, 4), [2.2, 1.1, 0.4]),),
        (with_spectrum((3, 3), [2.0, 1.0, 0.5]),), (with_spectrum((2, 3, 2), [1.6, 0.5]),)],
       dtypes=("float32",)),
    Op("svd_full_square", lambda x: _svd_signed(rill, *LA.svd(x)),
       lambda x: _svd_signed(np, *np_svd(x)), lambda x: _svd_signed(torch, *TL.svd(x)),
       [(with_spectrum((3, 3), [2.0, 1.0, 0.5]),)], dtypes=("float32",)),
    Op("svd_full_rect", lambda x: _svd_full(rill, *LA.svd(x)), lambda x: _np_svd_full(x),
       lambda x: _svd_full(torch, *TL.svd(x)),
       [(with_spectrum((4, 2), [1.5, 0.6]),), (with_spectrum((2, 2, 3), [1.2, 0.3]),)],
       grad=False, dtypes=("float32",)),
    Op("svdvals", LA.svdvals, lambda x: np_svd(x)[1], TL.svdvals,
       [(with_spectrum((4, 3), [2.5, 1.5, 0.7]),), (with_spectrum((2, 2, 3), [1.2, 0.3]),)],
       dtypes=("float32",)),
    Op("inv", LA.inv, lambda x: np_inv(x), TL.inv,
       [(with_spectrum((3, 3), [2.5, 1.2, 0.6]),), (with_spectrum((2, 4, 4), [2, 1.5, 1, .5]),),
        (lambda r: np.array([[-0.8]]),)], dtypes=("float32",)),
    Op("solve", LA.solve, lambda a, b: _np_solve_any(a, b), TL.solve,
       [(with_spectrum((3, 3), [2.5, 1.2, 0.6]), (3, 2)),
        (with_spectrum((2, 3, 3), [2.0, 1.0, 0.5]), (3, 2)),  # b's batch broadcast
        (with_spectrum((1, 3, 3), [2.0, 1.0, 0.5]), (2, 3, 1)),  # a's batch broadcast
        (with_spectrum((3, 3), [2.5, 1.2, 0.6]), (3,))], dtypes=("float32",)),  # b a vector
    # A singular matrix too: det's gradient (the adjugate) is finite there.
    Op("det", LA.det, lambda x: np_det(x), TL.det,
       [(with_spectrum((3, 3), [2.0, 1.0, 0.5]),), (with_spectrum((2, 4, 4), [2, 1.5, 1, .5]),),
        (with_spectrum((3, 3), [2.0, 1.0, 0.0]),), ((1, 1),)], dtypes=("float32",)),
    Op("det_empty", LA.det, lambda x: np_det(x), TL.det, [((0, 0),), ((2, 0, 0),)], dtypes=()),
    Op("slogdet", lambda x: tuple(LA.slogdet(x)), lambda x: _np_slogdet(x),
       lambda x: tuple(TL.slogdet(x)),
       [(with_spectrum((3, 3), [2.0, 1.0, 0.5]),), (with_spectrum((2, 4, 4), [2, 1.5, 1, .5]),),
        (with_spectrum((2, 2), [0.05, 0.01]),)], dtypes=("float32",)),
    Op("slogdet_singular", lambda x: tuple(LA.slogdet(x)), lambda x: _np_slogdet(x),
       lambda x: tuple(TL.slogdet(x)),
       [(lambda r: np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),)],
       grad=False, dtypes=()),
    # ---- elementwise functions added with the Array API ----------------------------------
    # (looked up on rill.ops.elementwise when called: the table does not depend on where the
    # public names are exported)
    Op("arcsinh", _ew("arcsinh"), np.arcsinh, torch.asinh, [(s,) for s in UNARY_SHAPES]),
    Op("arccosh", _ew("arccosh"), np.arccosh, torch.acosh, [(s,) for s in UNARY_SHAPES],
       (1.2, 3.0)),
    Op("arctanh", _ew("arctanh"), np.arctanh, torch.atanh, [(s,) for s in UNARY_SHAPES],
       (-0.9, 0.9)),
    Op("log10", _ew("log10"), np.log10, torch.log10, [(s,) for s in UNARY_SHAPES], POS),
    Op("signbit", _ew("signbit"), np.signbit, torch.signbit,
       [(lambda r: np.array([-0.0, 0.0, -1.5, 2.0, -np.inf, np.inf, np.nan, -np.nan]),),
        ((3, 4),), ((),)], grad=False),
    Op("bitwise_invert", _ew("bitwise_invert"), np.invert, torch.bitwise_not,
       [(ints((3, 4), -20, 20),), (bools((2, 3)),),
        (lambda r: r.integers(0, 256, size=(5,)).astype(np.uint8),)], grad=False, dtypes=()),
    *[Op(name, _ew(name), (lambda left: lambda x, y: _np_shift(x, y, left))(left), tfn,
         [(ints((3, 4), -50, 50), ints((3, 4), 0, 10)), (ints((3, 1), -50, 50), ints((4,), 0, 8)),
          (ints((2, 3), -5, 5), ints((2, 3), 60, 70))],  # past the width (int64)
         grad=False, dtypes=())
      for name, left, tfn in (("bitwise_left_shift", True, torch.bitwise_left_shift),
                              ("bitwise_right_shift", False, torch.bitwise_right_shift))],
    Op("logaddexp", _ew("logaddexp"), np.logaddexp, torch.logaddexp, list(BINARY_SHAPES)),
    Op("logaddexp_large", _ew("logaddexp"), np.logaddexp, torch.logaddexp,
       [(lambda r: r.uniform(999, 1001, (3, 4)), lambda r: r.uniform(-1001, 1001, (3, 4)))],
       dtypes=("float32",)),
    Op("hypot", _ew("hypot"), np.hypot, torch.hypot, list(BINARY_SHAPES)),
    Op("copysign", _ew("copysign"), np.copysign, torch.copysign, list(BINARY_SHAPES)),
    # nextafter moves by one unit in the last place: forward only (its gradient is declared
    # zero; PyTorch has none). The float32 row checks the exact neighbour in that precision.
    Op("nextafter", _ew("nextafter"), np.nextafter, torch.nextafter, list(BINARY_SHAPES),
       grad=False, dtypes=("float32", "float16")),
    Op("nextafter_float32",
       lambda x, y: _ew("nextafter")(x.astype(rill.float32), y.astype(rill.float32)).astype(
           rill.float64),
       lambda x, y: np.nextafter(x.astype(np.float32), y.astype(np.float32)).astype(np.float64),
       None, [((3, 4), (3, 4)), (lambda r: np.zeros(3), lambda r: np.array([1.0, -1.0, 0.0]))],
       grad=False, dtypes=(), rtol=0),
    # ---- complex: real, imag, conj ---------------------------------------------------------
    # The table's inputs and compared outputs are real, so each row builds z = a + 1j*b from
    # two real inputs (gradients flow to both parts) and returns real results.
    Op("real_imag", lambda a, b: (_ew("real")(_cplx(a, b)), _ew("imag")(_cplx(a, b))),
       lambda a, b: (np.real(a + 1j * b), np.imag(a + 1j * b)),
       lambda a, b: (torch.complex(a, b).real, torch.complex(a, b).imag),
       [((3, 4), (3, 4)), ((), ()), ((3, 1), (4,))], dtypes=("float32",)),
    Op("conj", lambda a, b: _parts(_ew("conj")(_cplx(a, b)) * _cplx(b, a)),
       lambda a, b: _np_parts(np.conj(a + 1j * b) * (b + 1j * a)),
       lambda a, b: _torch_parts(torch.conj(torch.complex(a, b)) * torch.complex(b, a)),
       [((3, 4), (3, 4)), ((), ())], dtypes=("float32",)),
    Op("abs_complex", lambda a, b: _ew("abs")(_cplx(a, b)), lambda a, b: np.abs(a + 1j * b),
       lambda a, b: torch.abs(torch.complex(a, b)), [((3, 4), (3, 4))], dtypes=("float32",)),
    # On a real tensor: real is the tensor itself, imag zeros (with a zero gradient).
    Op("imag_of_real", _ew("imag"), np.imag, lambda x: x * 0,
       [(s,) for s in UNARY_SHAPES]),
    Op("real_of_real", _ew("real"), np.real, lambda x: x, [((3, 4),)]),
    # ---- rill.linalg composites -----------------------------------------------------------
    *[Op(f"matrix_power_{n}".replace("-", "neg"), (lambda k: lambda x: LA.matrix_power(x, k))(n),
         (lambda k: lambda x: _np_matrix_power(x, k))(n),
         (lambda k: lambda x: TL.matrix_power(x, k))(n),
         [(with_spectrum((3, 3), [1.5, 1.0, 0.7]),), (with_spectrum((2, 2, 2), [1.3, 0.8]),)],
         dtypes=("float32",))
      for n in (0, 1, 3, -2)],
    Op("pinv", LA.pinv, lambda x: _np_pinv(x), TL.pinv,
       [(with_spectrum((4, 3), [2.5, 1.5, 0.7]),), (with_spectrum((2, 2, 3), [1.2, 0.4]),)],
       dtypes=("float32",)),
    Op("matrix_rank", LA.matrix_rank, lambda x: _np_matrix_rank(x), TL.matrix_rank,
       [(with_spectrum((4, 3), [2.0, 1.0, 0.0]),), (with_spectrum((2, 3, 3), [2.0, 1.0, 0.5]),),
        (lambda r: np.zeros((2, 3)),)], grad=False, dtypes=()),
    *[Op(f"matrix_norm_{o}", (lambda o: lambda x: LA.matrix_norm(x, ord=o))(o),
         (lambda o: lambda x: _np_matrix_norm(x, o))(o),
         (lambda o: lambda x: TL.matrix_norm(x, ord=o))(o),
         [(with_spectrum((3, 4), [2.2, 1.1, 0.4]),), (with_spectrum((2, 3, 3), [2.0, 1.0, 0.5]),)],
         dtypes=("float32",))
      for o in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)],
    # Repeated singular values: the nuclear norm's gradient U V^T does not depend on the basis
    # inside the repeated pair (torch's svd gradient is not finite there: FD only).
    Op("matrix_norm_nuc_repeated", lambda x: LA.matrix_norm(x, ord="nuc"),
       lambda x: _np_matrix_norm(x, "nuc"), None,
       [(with_spectrum((3, 3), [2.0, 1.0, 1.0]),), (with_spectrum((4, 3), [1.5, 1.5, 0.5]),)],
       dtypes=("float32",)),
    Op("matrix_norm_keepdims", lambda x: LA.matrix_norm(x, keepdims=True),
       lambda x: np.sqrt(np.sum(x * x, axis=(-2, -1), keepdims=True)),
       lambda x: TL.matrix_norm(x, keepdim=True), [((2, 3, 4),)]),
    *[Op(f"trace_{k}".replace("-", "neg"), (lambda k: lambda x: LA.trace(x, offset=k))(k),
         (lambda k: lambda x: _np_trace(x, k))(k),
         (lambda k: lambda x: torch.diagonal(x, k, -2, -1).sum(-1))(k),
         [((3, 4),), ((2, 3, 3),), ((0, 2),)])
      for k in (0, 1, -1)],
    *[Op(f"diagonal_{k}".replace("-", "neg"), (lambda k: lambda x: LA.diagonal(x, offset=k))(k),
         (lambda k: lambda x: _np_diagonal(x, k))(k),
         (lambda k: lambda x: torch.diagonal(x, k, -2, -1))(k), [((3, 4),), ((2, 4, 3),)])
      for k in (0, 2, -1)],
    Op("cross", LA.cross, lambda x, y: _np_cross(x, y),
       lambda x, y: TL.cross(*torch.broadcast_tensors(x, y)),  # torch wants equal ranks
       [((4, 3), (4, 3)), ((2, 1, 3), (4, 3)), ((3,), (3,))]),
    Op("cross_axis0", lambda x, y: LA.cross(x, y, axis=0),
       lambda x, y: np.moveaxis(_np_cross(np.moveaxis(x, 0, -1), np.moveaxis(y, 0, -1)), -1, 0),
       lambda x, y: TL.cross(x, y, dim=0), [((3, 2), (3, 2))]),
    Op("vecdot", LA.vecdot, lambda x, y: np.sum(x * y, axis=-1), TL.vecdot,
       [((3, 4), (3, 4)), ((2, 1, 4), (3, 4)), ((4,), (4,))]),
    Op("vecdot_axis0", lambda x, y: LA.vecdot(x, y, axis=0), lambda x, y: np.sum(x * y, axis=0),
       lambda x, y: TL.vecdot(x, y, dim=0), [((3, 4), (3, 4))]),
    # ---- torch-style indexing and cumulative composites -----------------------------------
    Op("gather", lambda x, i: rill.gather(x, 1, i), lambda x, i: _np_gather(x, i, 1),
       lambda x, i: torch.gather(x, 1, i),
       [((3, 5), ints((2, 7), 0, 5)),  # index smaller off dim, longer along it; repeats
        ((2, 3, 4), ints((2, 3, 4), 0, 3))]),
    Op("gather_dim0", lambda x, i: rill.gather(x, 0, i), lambda x, i: _np_gather(x, i, 0),
       lambda x, i: torch.gather(x, 0, i), [((4, 3), ints((6, 2), 0, 4))]),
    Op("index_select", lambda x, i: rill.index_select(x, 1, i),
       lambda x, i: np.take(x, i.reshape(-1), axis=1),  # a 0-d index selects one, keeps dim
       lambda x, i: torch.index_select(x, 1, i),
       [((3, 4), ints((6,), 0, 4)), ((2, 3, 2), ints((), 0, 3))]),
    Op("masked_fill", lambda x, m: rill.masked_fill(x, m, 2.5),
       lambda x, m: np.where(m, 2.5, x), lambda x, m: torch.masked_fill(x, m, 2.5),
       [((3, 4), bools((3, 4))), ((3, 4), bools((4,))), ((), bools(()))]),
    *[Op(name, (lambda n: lambda x: tuple(getattr(rill, n)(x, 1)))(name),
         (lambda n: lambda x: _np_cum_extreme(x, 1, n == "cummax"))(name),
         (lambda n: lambda x: tuple(getattr(torch, n)(x, 1)))(name),
         [(distinct((3, 5)),), (distinct((2, 4, 3)),)])
      for name in ("cummax", "cummin")],
    Op("logcumsumexp", lambda x: rill.logcumsumexp(x, -1), lambda x: _np_logcumsumexp(x, -1),
       lambda x: torch.logcumsumexp(x, -1), [((3, 5),), ((4,),), ((2, 0),)],
       dtypes=("float32",)),
    Op("logcumsumexp_large", lambda x: rill.logcumsumexp(x, 0),
       lambda x: _np_logcumsumexp(x, 0), lambda x: torch.logcumsumexp(x, 0),
       [(lambda r: r.uniform(-2, 2, (4, 3)) + 1000.0,)], dtypes=()),
    *[Op(f"cumulative_{kind}{'_initial' if init else ''}",
         (lambda k, i: lambda x: getattr(rill, f"cumulative_{k}")(x, axis=1, include_initial=i))(
             kind, init),
         (lambda k, i: lambda x: _np_cumulative(x, 1, k, i))(kind, init),
         (lambda k, i: lambda x: _torch_cumulative(x, 1, k, i))(kind, init),
         [((3, 4),), ((2, 0),)], dtypes=("float32",))
      for kind in ("sum", "prod") for init in (False, True)],
    # ---- rill.fft --------------------------------------------------------------------------
    # Complex signals are built as a + 1j*b from two real inputs and complex results returned
    # as (real, imag), so every check (finite differences included) sees real numbers only.
    # References: the DFT as an explicit sum (_np_dft), Hermitian spectra completed by hand.
    *[Op(f"{name}{suffix}", (lambda f, kw: lambda a, b: _parts(f(_cplx(a, b), **kw)))(
        _fft_fn(name), kw),
         (lambda r, kw: lambda a, b: _np_parts(r(a + 1j * b, **kw)))(ref, kw),
         (lambda t, kw: lambda a, b: _torch_parts(t(_torch_cplx(a, b), **_torch_kw(kw))))(
             getattr(torch.fft, name), kw),
         shapes, dtypes=("float32",))
      for name, ref in (("fft", _np_fft_1d(False)), ("ifft", _np_fft_1d(True)))
      for suffix, kw, shapes in (
          ("", {}, [((3, 5), (3, 5)), ((4,), (4,))]),
          ("_pad_axis0_ortho", dict(n=5, axis=0, norm="ortho"), [((3, 4), (3, 4))]),
          ("_crop_forward", dict(n=3, norm="forward"), [((2, 5), (2, 5))]))],
    *[Op(f"{name}{suffix}", (lambda f, kw: lambda a, b: _parts(f(_cplx(a, b), **kw)))(
        _fft_fn(name), kw),
         (lambda r, kw: lambda a, b: _np_parts(r(a + 1j * b, **kw)))(ref, kw),
         (lambda t, kw: lambda a, b: _torch_parts(t(_torch_cplx(a, b), **_torch_kw(kw))))(
             getattr(torch.fft, name), kw),
         shapes, dtypes=("float32",))
      for name, ref in (("fftn", _np_fft_nd(False)), ("ifftn", _np_fft_nd(True)))
      for suffix, kw, shapes in (
          ("", {}, [((3, 4), (3, 4)), ((2, 2, 3), (2, 2, 3))]),
          ("_s_axes_ortho", dict(s=(4, 3), axes=(0, 1), norm="ortho"), [((3, 5), (3, 5))]))],
    *[Op(f"rfft{suffix}", (lambda kw: lambda x: _parts(_fft_fn("rfft")(x, **kw)))(kw),
         (lambda kw: lambda x: _np_parts(_np_rfft(x, **kw)))(kw),
         (lambda kw: lambda x: _torch_parts(torch.fft.rfft(x, **_torch_kw(kw))))(kw), shapes,
         dtypes=("float32",))
      for suffix, kw, shapes in (("", {}, [((3, 6),), ((5,),)]),
                                 ("_n_axis0_ortho", dict(n=4, axis=0, norm="ortho"),
                                  [((3, 2),)]),
                                 ("_forward", dict(norm="forward"), [((2, 5),)]))],
    *[Op(f"irfft{suffix}", (lambda kw: lambda a, b: _fft_fn("irfft")(_cplx(a, b), **kw))(kw),
         (lambda kw: lambda a, b: _np_irfft(a + 1j * b, **kw))(kw),
         (lambda kw: lambda a, b: torch.fft.irfft(_torch_cplx(a, b), **_torch_kw(kw)))(kw),
         shapes, dtypes=("float32",))
      for suffix, kw, shapes in (("", {}, [((3, 4), (3, 4)), ((2,), (2,))]),
                                 ("_odd_n", dict(n=7), [((2, 4), (2, 4))]),
                                 ("_crop_ortho", dict(n=4, norm="ortho"), [((2, 5), (2, 5))]),
                                 ("_axis0_forward", dict(n=5, axis=0, norm="forward"),
                                  [((3, 2), (3, 2))]))],
    Op("rfftn", lambda x: _parts(_fft_fn("rfftn")(x, s=(3, 4), axes=(0, 1))),
       lambda x: _np_parts(_np_rfftn(x, (3, 4), (0, 1))),
       lambda x: _torch_parts(torch.fft.rfftn(x, s=(3, 4), dim=(0, 1))), [((3, 5),), ((2, 4),)],
       dtypes=("float32",)),
    Op("irfftn", lambda a, b: _fft_fn("irfftn")(_cplx(a, b), s=(3, 4), axes=(0, 1)),
       lambda a, b: _np_irfftn(a + 1j * b, (3, 4), (0, 1)),
       lambda a, b: torch.fft.irfftn(_torch_cplx(a, b), s=(3, 4), dim=(0, 1)),
       [((3, 3), (3, 3)), ((2, 2, 3), (2, 2, 3))], dtypes=("float32",)),
    *[Op(f"hfft{suffix}", (lambda kw: lambda a, b: _fft_fn("hfft")(_cplx(a, b), **kw))(kw),
         (lambda kw: lambda a, b: _np_hfft(a + 1j * b, **kw))(kw),
         (lambda kw: lambda a, b: torch.fft.hfft(_torch_cplx(a, b), **_torch_kw(kw)))(kw),
         shapes, dtypes=("float32",))
      for suffix, kw, shapes in (("", {}, [((2, 4), (2, 4))]),
                                 ("_odd_ortho", dict(n=5, norm="ortho"), [((3,), (3,))]))],
    *[Op(f"ihfft{suffix}", (lambda kw: lambda x: _parts(_fft_fn("ihfft")(x, **kw)))(kw),
         (lambda kw: lambda x: _np_parts(_np_ihfft(x, **kw)))(kw),
         (lambda kw: lambda x: _torch_parts(torch.fft.ihfft(x, **_torch_kw(kw))))(kw),
         shapes, dtypes=("float32",))
      for suffix, kw, shapes in (("", {}, [((2, 6),), ((5,),)]),
                                 ("_n_forward", dict(n=4, norm="forward"), [((2, 5),)]))],
    *[Op(f"{name}{suffix}", (lambda f, kw: lambda x: _fft_fn(f)(x, **kw))(name, kw),
         (lambda f, kw: lambda x: _np_fftshift(x, inverse=f == "ifftshift", **kw))(name, kw),
         (lambda f, kw: lambda x: getattr(torch.fft, f)(x, **_torch_kw(kw)))(name, kw), shapes)
      for name in ("fftshift", "ifftshift")
      for suffix, kw, shapes in (("", {}, [((3, 4),), ((5,),)]),
                                 ("_axes1", dict(axes=(1,)), [((2, 5),)]))],
    # ---- search, set and manipulation functions of the Array API (static shapes; nonzero
    # and the unique_* family have data-dependent shapes, which capture refuses) -------------
    *[Op(f"searchsorted_{side}", (lambda s: lambda a, v: rill.searchsorted(a, v, side=s))(side),
         (lambda s: lambda a, v: _np_searchsorted(a, v, s))(side),
         (lambda s: lambda a, v: torch.searchsorted(a, v, side=s))(side),
         [(_SORTED, _PROBES), (_SORTED, lambda r: np.array(0.5)), (_SORTED, (0,))],
         grad=False)
      for side in ("left", "right")],
    Op("searchsorted_sorter", lambda a, v, s: rill.searchsorted(a, v, side="right", sorter=s),
       lambda a, v, s: _np_searchsorted(a[s], v, "right"),
       lambda a, v, s: torch.searchsorted(a, v, side="right", sorter=s),
       [(lambda r: np.array([1.5, -1.0, 0.5, 0.0, 0.0]), _PROBES,
         lambda r: np.array([1, 3, 4, 2, 0]))], grad=False),
    *[Op(f"isin{'_invert' if inv else ''}", (lambda i: lambda a, b: rill.isin(a, b, invert=i))(inv),
         (lambda i: lambda a, b: np.array([[(v in set(b.tolist())) != i for v in row]
                                           for row in a.reshape(-1, a.shape[-1])]
                                          ).reshape(a.shape))(inv),
         (lambda i: lambda a, b: torch.isin(a, b, invert=i))(inv),
         [(ints((3, 4), 0, 8), ints((5,), 0, 8)), (ints((2, 3), 0, 4), ints((0,), 0, 4))],
         grad=False, dtypes=())
      for inv in (False, True)],
    Op("count_nonzero", lambda x: rill.count_nonzero(x, axis=1),
       lambda x: np.sum(x != 0, axis=1), lambda x: torch.count_nonzero(x, 1),
       [(ints((3, 4), 0, 3),), (ints((2, 0), 0, 3),)], grad=False, dtypes=()),
    Op("count_nonzero_all_keepdims", lambda x: rill.count_nonzero(x, keepdims=True),
       lambda x: np.full((1, 1), np.sum(x != 0)),
       lambda x: torch.count_nonzero(x).reshape(1, 1), [(ints((3, 4), 0, 3),)], grad=False,
       dtypes=()),
    Op("diff", lambda x: rill.diff(x), lambda x: x[..., 1:] - x[..., :-1],
       lambda x: torch.diff(x), [((3, 5),), ((4,),), ((2, 1),)]),
    Op("diff_n2_axis0", lambda x: rill.diff(x, axis=0, n=2), lambda x: x[2:] - 2 * x[1:-1] + x[:-2],
       lambda x: torch.diff(x, 2, 0), [((5, 3),)]),
    Op("diff_prepend_append", lambda x, p, a: rill.diff(x, prepend=p, append=a),
       lambda x, p, a: _np_diff1(np.concatenate([p, x, a], axis=-1)),
       lambda x, p, a: torch.diff(x, prepend=p, append=a), [((3, 4), (3, 2), (3, 1))]),
    *[Op(f"meshgrid_{ix}", (lambda i: lambda *xs: tuple(rill.meshgrid(*xs, indexing=i)))(ix),
         (lambda i: lambda *xs: _np_meshgrid(xs, i))(ix),
         (lambda i: lambda *xs: torch.meshgrid(*xs, indexing=i))(ix),
         [((3,), (4,)), ((2,), (3,), (4,))])
      for ix in ("xy", "ij")],
    Op("unstack", lambda x: rill.unstack(x, axis=1), lambda x: tuple(np.moveaxis(x, 1, 0)),
       lambda x: torch.unbind(x, 1), [((3, 4),), ((2, 3, 2),)]),
    Op("broadcast_arrays", lambda *xs: tuple(rill.broadcast_arrays(*xs)),
       lambda *xs: tuple(np.broadcast_to(x, np.broadcast_shapes(*(y.shape for y in xs)))
                         for x in xs),
       lambda *xs: torch.broadcast_tensors(*xs), [((3, 1), (4,)), ((), (2, 3), (1, 3))]),
    # ---- PyTorch-named composites ---------------------------------------------------------
    Op("bmm", rill.bmm, lambda x, y: np.stack([a @ b for a, b in zip(x, y)]), torch.bmm,
       [((2, 3, 4), (2, 4, 5)), ((1, 2, 0), (1, 0, 3))]),
    Op("mm", rill.mm, lambda x, y: np.einsum("ij,jk->ik", x, y), torch.mm, [((3, 4), (4, 2))]),
    Op("mv", rill.mv, lambda x, v: np.einsum("ij,j->i", x, v), torch.mv, [((3, 4), (4,))]),
    Op("narrow", lambda x: rill.narrow(x, 1, 1, 2), lambda x: x[:, 1:3],
       lambda x: torch.narrow(x, 1, 1, 2), [((3, 4),), ((2, 5, 2),)]),
    Op("chunk", lambda x: tuple(rill.chunk(x, 3, 0)), lambda x: (x[:2], x[2:4], x[4:]),
       lambda x: torch.chunk(x, 3, 0), [((5, 2),)]),
    Op("unsqueeze", lambda x: rill.unsqueeze(x, -1), lambda x: x[..., None],
       lambda x: torch.unsqueeze(x, -1), [((3, 4),), ((),)]),
    Op("repeat_interleave_flat", lambda x: rill.repeat_interleave(x, 2),
       lambda x: np.array([v for v in x.reshape(-1) for _ in range(2)]),
       lambda x: torch.repeat_interleave(x, 2), [((2, 3),)]),
    # Counts as a list: a tensor of counts fixes the output's length by data, which capture
    # cannot (a CaptureError naming the fix).
    Op("repeat_interleave_counts", lambda x: rill.repeat_interleave(x, [2, 0, 3], dim=0),
       lambda x: np.concatenate([np.repeat(x[i:i + 1], n, axis=0)
                                 for i, n in enumerate((2, 0, 3))]),
       lambda x: torch.repeat_interleave(x, torch.tensor([2, 0, 3]), dim=0), [((3, 2),)]),
    Op("clamp_tensors", rill.clamp, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi),
       torch.clamp, [((3, 4), lambda r: np.full((4,), -0.5), lambda r: np.full((3, 1), 0.8))]),
    Op("clamp_min_only", lambda x: rill.clamp(x, min=0.25), lambda x: np.maximum(x, 0.25),
       lambda x: torch.clamp(x, min=0.25), [((3, 4),)]),
    *[Op(f"isclose{'_equal_nan' if en else ''}",
         (lambda e: lambda x, y: rill.isclose(x, y, rtol=1e-3, atol=1e-6, equal_nan=e))(en),
         (lambda e: lambda x, y: _np_isclose(x, y, 1e-3, 1e-6, e))(en),
         (lambda e: lambda x, y: torch.isclose(x, y, rtol=1e-3, atol=1e-6, equal_nan=e))(en),
         [(lambda r: np.array([1.0, 1.0, 0.0, np.nan, np.inf, -np.inf, 100.0, 5e-7]),
           lambda r: np.array([1.0005, 1.002, 2e-6, np.nan, np.inf, np.inf, 100.09, 0.0]))],
         grad=False, dtypes=())
      for en in (False, True)],
    # ---- complex inputs to the elementwise, reduction and matmul primitives ----------------
    # z = a + 1j*b with a, b in (0.3, 1.5): off every branch cut and pole. Gradients in
    # PyTorch's convention are checked through the real wrappers (finite differences too).
    *[Op(f"{name}_complex", (lambda n: lambda a, b: _parts(_ew(n)(_cplx(a, b))))(name),
         (lambda f: lambda a, b: _np_parts(f(a + 1j * b)))(ref),
         (lambda t: lambda a, b: _torch_parts(t(_torch_cplx(a, b))))(tfn),
         [((3, 4), (3, 4)), ((2, 1, 3), (2, 1, 3))], (0.3, 1.5), dtypes=("float32",))
      for name, ref, tfn in (
          ("exp", np.exp, torch.exp), ("expm1", np.expm1, torch.expm1),
          ("exp2", np.exp2, torch.exp2), ("log", np.log, torch.log),
          ("log1p", np.log1p, torch.log1p), ("log2", np.log2, torch.log2),
          ("log10", np.log10, torch.log10), ("sqrt", np.sqrt, torch.sqrt),
          ("rsqrt", lambda z: 1 / np.sqrt(z), torch.rsqrt), ("square", np.square, torch.square),
          ("reciprocal", np.reciprocal, torch.reciprocal), ("neg", np.negative, torch.neg),
          ("sin", np.sin, torch.sin), ("cos", np.cos, torch.cos), ("tan", np.tan, torch.tan),
          ("sinh", np.sinh, torch.sinh), ("cosh", np.cosh, torch.cosh),
          ("tanh", np.tanh, torch.tanh), ("arcsin", np.arcsin, torch.asin),
          ("arccos", np.arccos, torch.acos), ("arctan", np.arctan, torch.atan),
          ("arcsinh", np.arcsinh, torch.asinh), ("arccosh", np.arccosh, torch.acosh),
          ("arctanh", np.arctanh, torch.atanh), ("sign", lambda z: z / np.abs(z), torch.sgn))],
    *[Op(f"{name}_complex", (lambda n: lambda a, b, c, d: _parts(_ew(n)(_cplx(a, b),
                                                                    _cplx(c, d))))(name),
         (lambda f: lambda a, b, c, d: _np_parts(f(a + 1j * b, c + 1j * d)))(ref),
         (lambda t: lambda a, b, c, d: _torch_parts(t(_torch_cplx(a, b), _torch_cplx(c, d))))(
             tfn),
         [((3, 4), (3, 4), (3, 4), (3, 4)), ((3, 1), (3, 1), (1, 4), (1, 4))], (0.3, 1.5),
         dtypes=("float32",))
      for name, ref, tfn in (("add", np.add, torch.add), ("subtract", np.subtract, torch.sub),
                             ("multiply", np.multiply, torch.mul),
                             ("divide", np.divide, torch.div), ("power", np.power, torch.pow))],
    Op("matmul_complex", lambda a, b, c, d: _parts(rill.matmul(_cplx(a, b), _cplx(c, d))),
       lambda a, b, c, d: _np_parts(np.einsum("...ij,...jk->...ik", a + 1j * b, c + 1j * d)),
       lambda a, b, c, d: _torch_parts(_torch_cplx(a, b) @ _torch_cplx(c, d)),
       [((3, 4), (3, 4), (4, 2), (4, 2)), ((2, 2, 3), (2, 2, 3), (3, 2), (3, 2))],
       dtypes=("float32",)),
    *[Op(f"{name}_complex", (lambda n: lambda a, b: _parts(getattr(rill, n)(_cplx(a, b),
                                                                          axis=1)))(name),
         (lambda f: lambda a, b: _np_parts(f(a + 1j * b, axis=1)))(ref),
         (lambda t: lambda a, b: _torch_parts(t(_torch_cplx(a, b), 1)))(tfn),
         [((3, 4), (3, 4)), ((2, 3, 2), (2, 3, 2))], (0.3, 1.5), dtypes=("float32",))
      for name, ref, tfn in (("sum", np.sum, torch.sum), ("mean", np.mean, torch.mean),
                             ("prod", np.prod, torch.prod))],
    # ---- distributions ---------------------------------------------------------------------
    # standard_gamma_grad is dx/dalpha of a Gamma(alpha, 1) draw at fixed CDF value, the
    # gradient behind Gamma/Beta/Dirichlet rsample; it has no derivative of its own (as in
    # PyTorch), so the row is forward only. torch's _standard_gamma_grad is an approximation
    # (off in the 4th digit at x=9), so the reference is the series below.
    Op("standard_gamma_grad", lambda x, a: _gamma_grad_fn()(x, a),
       lambda x, a: _np_standard_gamma_grad(x, a), None,
       [(uniform_in((3, 4), 0.05, 6.0), uniform_in((3, 4), 0.3, 4.0)),
        (lambda r: np.array([0.3, 1.5, 4.0, 9.0, 20.0, 1e-3]),
         lambda r: np.array([0.7, 2.0, 3.5, 1.2, 15.0, 0.5]))],
       grad=False, dtypes=("float32",), rtol=1e-8),
    # ---- graph-level primitives ------------------------------------------------------------
    # `fused` exists only in graphs the fuse pass rewrote: the row traces an elementwise
    # chain, fuses it, and evaluates the graph with bind, so the fused primitive runs (and is
    # differentiated through its body) as the table's other primitives do.
    Op("fused", lambda x, y: _run_fused(x, y), _fusable_chain(np), _fusable_chain(torch),
       [((3, 4), (4,)), ((2, 3), (2, 3)), ((), ())],
       dtypes=("float32", "float16")),  # bfloat16 is never fused (by design)
    # An optimizer's coalescing of a sparse gradient (no gradient of its own; no torch op).
    Op("coalesce_rows", lambda i, r: rill.ops.rows.coalesce_rows(i, r), _np_coalesce_rows,
       None, [(ints((6,), 0, 4), (6, 3)), (ints((1,), 0, 9), (1, 2)), (ints((0,), 0, 3), (0, 2)),
              (ints((5,), 0, 2), (5,))], grad=False, dtypes=("float32",)),
]



def _torch_reduce(fn, x, axis, keepdim):
    """torch reductions one axis at a time (torch.prod takes no tuple of dims)."""
    if axis is None:
        return fn(x.reshape(-1), 0)
    for a in sorted((a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis)),
                    reverse=True):
        x = fn(x, a, keepdim=keepdim)
    return x


def _np_scatter_add(x, i, u, axis):
    """Element by element, independent of the kernel's vectorized form."""
    out = x.copy()
    for idx in np.ndindex(i.shape):
        target = list(idx)
        target[axis] = i[idx]
        out[tuple(target)] += u[idx]
    return out


def _np_topk(x, k):
    idx = np.argsort(-x, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(x, idx, 1), idx


def _np_set(x, key, v):
    out = x.copy()
    out[key] = v
    return out


def _np_add(x, i, v):
    out = x.copy()
    np.add.at(out, i, v)
    return out


def _torch_getitem_mixed(x, i):
    return torch.flip(x[1:, i, None, :], (-1,))




_ZERO_MASK = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])


def _np_scatter_reduce(x, i, s, axis, reduce, include_self=True):
    """Element by element: collect what lands on each position, then combine it (with
    input's own value when include_self). 'assign' keeps the (single) write."""
    out = x.copy()
    landed = {}
    for idx in np.ndindex(i.shape):
        target = list(idx)
        target[axis] = i[idx]
        landed.setdefault(tuple(target), []).append(s[idx])
    for target, values in landed.items():
        pool = ([x[target]] if include_self else []) + values
        if reduce == "assign":
            out[target] = values[-1]
        elif reduce == "mean_floor":  # integers: floor of the mean, as PyTorch
            out[target] = sum(pool) // len(pool)
        else:
            out[target] = {"sum": sum, "prod": math.prod, "amax": max, "amin": min,
                           "mean": lambda v: sum(v) / len(v)}[reduce](pool)
    return out


# ---- naive NumPy references for the decompositions -----------------------------------------
# Textbook algorithms one matrix at a time (Cholesky-Banachiewicz, Gauss-Jordan with partial
# pivoting, cofactor expansion, cyclic Jacobi, one-sided Jacobi, modified Gram-Schmidt),
# sharing nothing with the LAPACK routines behind rill's kernels.

def _per_matrix(fn):
    """Apply fn to each matrix of a batch (batches of several inputs broadcast); stack."""
    def run(*xs):
        batch = np.broadcast_shapes(*(x.shape[:-2] for x in xs))
        if not batch:
            return fn(*xs)
        xs = [np.broadcast_to(x, batch + x.shape[-2:]) for x in xs]
        outs = [fn(*(x[i] for x in xs)) for i in np.ndindex(batch)]
        if isinstance(outs[0], tuple):
            return tuple(np.stack([o[k] for o in outs]).reshape(batch + np.shape(outs[0][k]))
                         for k in range(len(outs[0])))
        return np.stack(outs).reshape(batch + np.shape(outs[0]))
    return run


def _np_sym(x):
    return (x + np.swapaxes(x, -1, -2)) / 2


def _np_cholesky1(a):
    n = len(a)
    low = np.zeros_like(a)
    for i in range(n):
        for j in range(i + 1):
            s = a[i, j] - low[i, :j] @ low[j, :j]
            low[i, j] = math.sqrt(s) if i == j else s / low[j, j]
    return low


def _np_gauss_jordan(a, b):
    """A^-1 B by Gauss-Jordan elimination with partial pivoting."""
    a, b = a.astype(np.float64).copy(), b.astype(np.float64).copy()
    n = len(a)
    for c in range(n):
        p = c + int(np.argmax(np.abs(a[c:, c])))
        a[[c, p]], b[[c, p]] = a[[p, c]], b[[p, c]]
        b[c] /= a[c, c]
        a[c] /= a[c, c]
        for r in range(n):
            if r != c:
                b[r] -= a[r, c] * b[c]
                a[r] -= a[r, c] * a[c]
    return b


def _np_det1(a):
    """Cofactor expansion along the first row (exact zero for a singular integer pattern)."""
    n = len(a)
    if n == 0:
        return 1.0
    if n == 1:
        return a[0, 0]
    return sum((-1) ** j * a[0, j] * _np_det1(np.delete(a[1:], j, axis=1)) for j in range(n))


def _np_jacobi_eigh1(a, sweeps=60):
    """Cyclic Jacobi rotations: (ascending eigenvalues, eigenvectors as columns)."""
    a = a.astype(np.float64).copy()
    n = len(a)
    v = np.eye(n)
    for _ in range(sweeps):
        if np.sum(np.tril(a, -1) ** 2) < 1e-32 * np.sum(a ** 2):
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                if a[p, q] == 0:
                    continue
                theta = (a[q, q] - a[p, p]) / (2 * a[p, q])
                t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + math.sqrt(theta ** 2 + 1))
                c = 1 / math.sqrt(t * t + 1)
                rot = np.eye(n)
                rot[p, p] = rot[q, q] = c
                rot[p, q], rot[q, p] = t * c, -t * c
                a = rot.T @ a @ rot
                v = v @ rot
    order = np.argsort(np.diag(a))
    return np.diag(a)[order], v[:, order]


def _np_jacobi_svd1(a, sweeps=60):
    """One-sided (Hestenes) Jacobi: rotate column pairs until orthogonal; (U, S, Vh) reduced,
    S descending."""
    if a.shape[0] < a.shape[1]:
        u, s, vh = _np_jacobi_svd1(a.T, sweeps)
        return vh.T, s, u.T
    u, n = a.astype(np.float64).copy(), a.shape[1]
    v = np.eye(n)
    for _ in range(sweeps):
        rotated = False
        for p in range(n - 1):
            for q in range(p + 1, n):
                alpha, beta, gamma = u[:, p] @ u[:, p], u[:, q] @ u[:, q], u[:, p] @ u[:, q]
                if abs(gamma) <= 1e-17 * math.sqrt(alpha * beta):
                    continue
                rotated = True
                zeta = (beta - alpha) / (2 * gamma)
                t = (1.0 if zeta >= 0 else -1.0) / (abs(zeta) + math.sqrt(1 + zeta ** 2))
                c = 1 / math.sqrt(1 + t * t)
                for m in (u, v):
                    mp, mq = m[:, p].copy(), m[:, q].copy()
                    m[:, p], m[:, q] = c * mp - c * t * mq, c * t * mp + c * mq
        if not rotated:
            break
    s = np.sqrt(np.sum(u * u, axis=0))
    order = np.argsort(-s)
    return (u / s)[:, order], s[order], v[:, order].T


def _np_mgs_qr1(a):
    """Modified Gram-Schmidt on the first min(M, N) columns (R with a positive diagonal);
    R = Q^T A."""
    k = min(a.shape)
    q = a[:, :k].astype(np.float64).copy()
    for j in range(k):
        for i in range(j):
            q[:, j] -= (q[:, i] @ q[:, j]) * q[:, i]
        q[:, j] /= math.sqrt(q[:, j] @ q[:, j])
    return q, np.triu(q.T @ a)


np_cholesky = _per_matrix(_np_cholesky1)
np_inv = _per_matrix(lambda a: _np_gauss_jordan(a, np.eye(len(a))))
np_solve = _per_matrix(_np_gauss_jordan)
np_det = _per_matrix(lambda a: np.array(_np_det1(a)))
np_eigh = _per_matrix(_np_jacobi_eigh1)
np_svd = _per_matrix(_np_jacobi_svd1)
np_qr = _per_matrix(_np_mgs_qr1)


def _np_solve_any(a, b):
    return np_solve(a, b[:, None])[..., 0] if b.ndim == 1 else np_solve(a, b)


def _np_slogdet(x):
    d = np_det(x)
    with np.errstate(divide="ignore"):
        return np.sign(d), np.log(np.abs(d))


# ---- sign normalization (the same code for rill, NumPy and torch: `lib` is the module) -----

def _sym(lib, x):
    return (x + lib.swapaxes(x, -1, -2)) / 2


def _signed(lib, a, b):
    """a's columns times the sign of their first entry, b's rows likewise (Q, R; U, Vh)."""
    d = lib.sign(a[..., :1, :])
    return a * d, b * lib.swapaxes(d, -1, -2)


def _eigh_signed(lib, eigh, x):
    w, v = eigh(_sym(lib, x))
    return w, v * lib.sign(v[..., :1, :])


def _svd_signed(lib, u, s, vh):
    u, vh = _signed(lib, u, vh)
    return u, s, vh


def _qr_complete(lib, q, r):
    """Leading k columns of Q and rows of R (signed), R's zero rows, and the projector onto
    the rest of Q (any orthonormal basis of the complement is valid)."""
    k = min(r.shape[-2:])
    q1, r1 = _signed(lib, q[..., :k], r[..., :k, :])
    q2 = q[..., k:]
    return q1, r1, r[..., k:, :], q2 @ lib.swapaxes(q2, -1, -2)


def _np_qr_complete(x):
    q1, r1 = _signed(np, *np_qr(x))
    m, n = x.shape[-2:]
    rest = np.eye(m) - q1 @ np.swapaxes(q1, -1, -2)
    return q1, r1, np.zeros(x.shape[:-2] + (m - min(m, n), n)), rest


def _svd_full(lib, u, s, vh):
    """U's and Vh's leading k singular vectors (signed), S, and the projectors onto the rest."""
    k = s.shape[-1]
    u1, vh1 = _signed(lib, u[..., :k], vh[..., :k, :])
    u2, vh2 = u[..., k:], vh[..., k:, :]
    return u1, s, vh1, u2 @ lib.swapaxes(u2, -1, -2), lib.swapaxes(vh2, -1, -2) @ vh2


def _np_svd_full(x):
    u1, s, vh1 = _svd_signed(np, *np_svd(x))
    m, n = x.shape[-2:]
    return (u1, s, vh1, np.eye(m) - u1 @ np.swapaxes(u1, -1, -2),
            np.eye(n) - np.swapaxes(vh1, -1, -2) @ vh1)


def _np_matrix_power(x, n):
    """Repeated products (of the Gauss-Jordan inverse for negative n); I for n = 0."""
    base = np_inv(x) if n < 0 else x
    out = np.broadcast_to(np.eye(x.shape[-1]), x.shape).copy()
    for _ in range(abs(n)):
        out = out @ base
    return out


def _np_pinv(x):
    u, s, vh = np_svd(x)
    return np.swapaxes(vh, -1, -2) @ (np.swapaxes(u, -1, -2) / s[..., :, None])


def _np_matrix_rank(x):
    """Singular values above max(M, N) * eps * the largest (the standard's default rtol)."""
    if not x.any():
        return np.zeros(x.shape[:-2], dtype=np.int64)
    s = np_svd(x)[1]
    return np.sum(s > max(x.shape[-2:]) * np.finfo(np.float64).eps * s[..., :1],
                  axis=-1).astype(np.int64)


def _np_matrix_norm(x, o):
    a = np.abs(x)
    if o == "fro":
        return np.sqrt(np.sum(x * x, axis=(-2, -1)))
    if o == "nuc":
        return np.sum(np_svd(x)[1], axis=-1)
    if o in (2, -2):
        s = np_svd(x)[1]
        return s[..., 0] if o == 2 else s[..., -1]
    sums = np.sum(a, axis=-2) if o in (1, -1) else np.sum(a, axis=-1)  # columns / rows
    return np.max(sums, axis=-1) if o > 0 else np.min(sums, axis=-1)


def _np_diagonal(x, k):
    m, n = x.shape[-2:]
    rows = [(i, i + k) for i in range(m) if 0 <= i + k < n]
    return np.stack([x[..., i, j] for i, j in rows], axis=-1) if rows else np.zeros(
        x.shape[:-2] + (0,))


def _np_trace(x, k):
    return np.sum(_np_diagonal(x, k), axis=-1)


def _np_cross(x, y):
    x, y = np.broadcast_arrays(x, y)
    a1, a2, a3 = x[..., 0], x[..., 1], x[..., 2]
    b1, b2, b3 = y[..., 0], y[..., 1], y[..., 2]
    return np.stack([a2 * b3 - a3 * b2, a3 * b1 - a1 * b3, a1 * b2 - a2 * b1], axis=-1)


def _np_gather(x, i, axis):
    out = np.zeros(i.shape)
    for idx in np.ndindex(i.shape):
        source = list(idx)
        source[axis] = i[idx]
        out[idx] = x[tuple(source)]
    return out


def _np_cum_extreme(x, axis, largest):
    """(running max or min, index of where it was last attained) along axis; no ties."""
    values, where = np.moveaxis(x.copy(), axis, -1), np.zeros(x.shape, dtype=np.int64)
    where = np.moveaxis(where, axis, -1)
    for row in np.ndindex(values.shape[:-1]):
        best = 0
        for j in range(values.shape[-1]):
            if (values[row][j] > values[row][best]) == largest and j:
                best = j
            values[row + (j,)], where[row + (j,)] = values[row][best], best
    return np.moveaxis(values, -1, axis), np.moveaxis(where, -1, axis)


def _np_logcumsumexp(x, axis):
    out = np.moveaxis(x.copy(), axis, -1)
    for row in np.ndindex(out.shape[:-1]):
        acc = -np.inf
        for j in range(out.shape[-1]):
            v = out[row + (j,)]
            hi = max(acc, v)
            acc = hi + math.log(math.exp(acc - hi) + math.exp(v - hi))
            out[row + (j,)] = acc
    return np.moveaxis(out, -1, axis)


def _np_cumulative(x, axis, kind, include_initial):
    out = (np.cumsum if kind == "sum" else np.cumprod)(x, axis=axis)
    if include_initial:
        shape = list(x.shape)
        shape[axis] = 1
        out = np.concatenate([np.full(shape, 0.0 if kind == "sum" else 1.0), out], axis=axis)
    return out


def _torch_cumulative(x, axis, kind, include_initial):
    out = (torch.cumsum if kind == "sum" else torch.cumprod)(x, axis)
    if include_initial:
        shape = list(x.shape)
        shape[axis] = 1
        out = torch.cat([torch.full(shape, 0.0 if kind == "sum" else 1.0, dtype=x.dtype), out],
                        axis)
    return out


def _np_isclose(x, y, rtol, atol, equal_nan):
    """|x - y| <= atol + rtol |y|, infinities close only to themselves, NaN to NaN if asked."""
    out = np.zeros(x.shape, dtype=bool)
    for i in np.ndindex(x.shape):
        a, b = x[i], y[i]
        if np.isnan(a) or np.isnan(b):
            out[i] = equal_nan and np.isnan(a) and np.isnan(b)
        elif np.isinf(a) or np.isinf(b):
            out[i] = a == b
        else:
            out[i] = abs(a - b) <= atol + rtol * abs(b)
    return out


def _top_projector(lib, vectors, k):
    """V_k V_k^T over the last k eigenvectors (ascending order: the top k eigenvalues)."""
    top = vectors[..., -k:]
    return top @ lib.swapaxes(top, -1, -2)


# ---- sparse tensors (lib/sparse/tensors.py): the primitives through their public calls -----

_SPARSE_SIZE = (3, 4)
_CSR_CROW, _CSR_COL = [0, 2, 2, 5], [0, 3, 1, 2, 3]  # row 1 empty
_COO_SORTED = [[0, 0, 1, 2, 2], [1, 3, 2, 0, 3]]  # coalesced: sorted, distinct


def _np_coo_dense(indices, values, size):
    out = np.zeros(size + values.shape[1:])
    np.add.at(out, tuple(indices), values)
    return out


def _np_csr_indices():
    return np.array([np.repeat(np.arange(3), np.diff(_CSR_CROW)), _CSR_COL])


def _np_sparse_softmax(values, segments):
    out = np.empty_like(values)
    for s in np.unique(segments):
        e = np.exp(values[segments == s] - values[segments == s].max())
        out[segments == s] = e / e.sum()
    return out


def _fixed(array):
    return lambda rng: np.array(array, dtype=np.int64)


OPS += [
    Op("sparse_coo_mm",
       lambda i, v, d: rill.sparse.mm(rill.sparse_coo_tensor(i, v, _SPARSE_SIZE), d),
       lambda i, v, d: _np_coo_dense(i, v, _SPARSE_SIZE) @ d,
       lambda i, v, d: torch.sparse.mm(torch.sparse_coo_tensor(i, v, _SPARSE_SIZE), d),
       [(ints((2, 6), 0, 3), (6,), (4, 2)), (ints((2, 0), 0, 3), (0,), (4, 5))]),
    Op("sparse_csr_mm",
       lambda r, c, v, d: rill.sparse.mm(rill.sparse_csr_tensor(r, c, v, _SPARSE_SIZE), d),
       lambda r, c, v, d: _np_coo_dense(_np_csr_indices(), v, _SPARSE_SIZE) @ d,
       lambda r, c, v, d: torch.sparse.mm(
           torch.sparse_coo_tensor(torch.from_numpy(_np_csr_indices()), v, _SPARSE_SIZE), d),
       [(_fixed(_CSR_CROW), _fixed(_CSR_COL), (5,), (4, 2))]),
    Op("segment_softmax",
       lambda i, v: rill.sparse.softmax(
           rill.sparse_coo_tensor(i, v, _SPARSE_SIZE, is_coalesced=True), 1).values(),
       lambda i, v: _np_sparse_softmax(v, i[0]),
       lambda i, v: torch.sparse.softmax(
           torch.sparse_coo_tensor(i, v, _SPARSE_SIZE, is_coalesced=True), 1).values(),
       [(_fixed(_COO_SORTED), (5,))]),
]
