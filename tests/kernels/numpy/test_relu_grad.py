"""ReLU's gradient as one primitive on the CPU, `relu_grad(g, x)` = where(x > 0, g, 0), one C
pass (kernels/native/elementwise.c) where NumPy ran a comparison and a bitwise select; and
ReLU itself, a C pass split over the cores for large arrays, bit-equal to np.maximum(x, 0).

Bit-equal to the composite for float32 and float64 on the compiled and NumPy kernels, NaN,
infinities and signed zeros included, split over the cores or not; the composite elsewhere
(float16); second derivatives against torch; a fused C group in a captured step, equal to
eager; vmap; bad operands raise rill errors."""
from __future__ import annotations


import numpy as np
import pytest
import torch

import rill
from kernel_paths import PATHS, compiled_or_numpy
from rill.eager.bind import bind
from rill.kernels.numpy import elementwise
from rill.ops.elementwise import relu_grad_p


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Each test on the compiled kernels and on the NumPy ones (as RILL_NATIVE=0 runs)."""
    return compiled_or_numpy(request, monkeypatch, "elementwise")


SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3.0, -3.0]


def _operands(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    k = len(SPECIAL)
    x[:k * k] = np.repeat(SPECIAL, k)  # every special x against every special g
    g[:k * k] = np.tile(SPECIAL, k)
    return g, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [81, 5000, (1 << 20) + 17])  # the last split over the cores
def test_bit_equal_to_where(path, dtype, n):
    g, x = _operands(dtype, n)
    got = elementwise.KERNELS["relu_grad"](g, x)
    want = np.where(x > 0, g, dtype(0))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [81, (1 << 20) + 17])  # the last split over the cores
def test_relu_bit_equal_to_maximum(path, dtype, n):
    _, x = _operands(dtype, n)
    x[-1] = -np.array(np.nan, dtype)                   # a NaN of the other sign, kept as is
    want = np.maximum(x, dtype(0))
    got = elementwise.KERNELS["relu"](x)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    into = np.full_like(x, 7)
    assert elementwise.KERNELS["relu"](x, out=into) is into
    np.testing.assert_array_equal(into.view(np.uint8), want.view(np.uint8))
    elementwise.KERNELS["relu"](x, out=x)                  # in place, as relu_ writes
    np.testing.assert_array_equal(x.view(np.uint8), want.view(np.uint8))
    shifted = np.concatenate([x, x[:1]])                   # out one element past x, sharing
    elementwise.KERNELS["relu"](shifted[:-1], out=shifted[1:])  # all but one element with it
    np.testing.assert_array_equal(shifted[1:], want)


def test_one_primitive_on_the_cpu_and_a_composite_elsewhere(path):
    for dtype, fused in (("float32", True), ("float64", True), ("float16", False)):
        x = rill.tensor(np.linspace(-2, 2, 9), dtype=dtype, requires_grad=True)
        y = rill.relu(x)
        with rill.profiler.profile() as prof:
            y.backward(rill.arange(9, dtype=dtype))
        names = {e.name for e in prof.events()}
        assert ("relu_grad" in names) is fused, names
        np.testing.assert_array_equal(x.grad.numpy(), np.where(np.linspace(-2, 2, 9) > 0,
                                                                np.arange(9), 0))


def test_gradient_through_nn_relu_matches_torch(path):
    x = np.random.default_rng(1).standard_normal((4, 3, 8, 8)).astype(np.float32)
    xr = rill.tensor(x, requires_grad=True)
    (rill.nn.ReLU()(xr) * rill.tensor(x)).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    (torch.relu(xt) * torch.tensor(x)).sum().backward()
    np.testing.assert_array_equal(xr.grad.numpy(), xt.grad.numpy())


def test_second_derivative_against_torch(path):
    x = np.random.default_rng(2).standard_normal((5, 6))
    w = np.random.default_rng(3).standard_normal((5, 6))

    def first(t):
        return rill.grad(lambda u: (rill.relu(u) * rill.tensor(w)).sum())(t)

    got = rill.grad(lambda t: (first(t) * rill.tensor(w) * t).sum())(rill.tensor(x))
    xt = torch.tensor(x, requires_grad=True)
    (gx,) = torch.autograd.grad((torch.relu(xt) * torch.tensor(w)).sum(), xt,
                                create_graph=True)
    (want,) = torch.autograd.grad((gx * torch.tensor(w) * xt).sum(), xt)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-15)


def test_cotangent_gradient_is_itself(path):
    x = rill.tensor(np.array([-1.0, 0.0, 2.0, np.nan]))
    h = np.array([5.0, 6.0, 7.0, 8.0])
    got = rill.grad(lambda g: (bind(relu_grad_p, g, x) * rill.tensor(h)).sum())(
        rill.tensor(np.ones(4)))
    np.testing.assert_array_equal(got.numpy(), [0.0, 0.0, 7.0, 0.0])


def test_captured_step_equals_eager(path):
    rng = np.random.default_rng(4)
    x0 = rng.standard_normal((64, 512)).astype(np.float32)  # large enough to fuse
    w0 = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)

    def loss(w, x):
        h = rill.relu(x @ w)
        return (rill.relu(h @ w - 0.1) * h).sum()

    step = rill.value_and_grad(loss)
    args = (rill.tensor(w0), rill.tensor(x0))
    eager = [t.numpy() for t in step(*args)]
    captured = rill.capture(step)
    got = [t.numpy() for t in captured(*args)]
    for e, c in zip(eager, got):
        np.testing.assert_allclose(c, e, rtol=1e-5, atol=1e-5)
    if path == "native":  # the fusion pass puts relu_grad into C groups with its neighbours
        nodes = captured.graph_for(*args).nodes
        bodies = [m.op for n in nodes if n.op == "fused" for m in n.attrs["body"].nodes]
        assert "relu_grad" not in [n.op for n in nodes] and bodies.count("relu_grad") == 2


def test_vmap_of_the_gradient(path):
    x = np.random.default_rng(5).standard_normal((3, 7))
    got = rill.vmap(rill.grad(lambda t: (rill.relu(t) ** 2).sum()))(rill.tensor(x))
    np.testing.assert_array_equal(got.numpy(), np.where(x > 0, 2 * x, 0))


def test_relu_grad_checks_its_operands():
    x = rill.ones(3)
    with pytest.raises(rill.ShapeError, match="one shape"):
        bind(relu_grad_p, rill.ones(4), x)
    with pytest.raises(rill.DTypeError, match="one dtype"):
        bind(relu_grad_p, rill.ones(3, dtype="float64"), x)
    with pytest.raises(rill.DTypeError):
        bind(relu_grad_p, rill.ones(3, dtype="int32"), rill.ones(3, dtype="int32"))
