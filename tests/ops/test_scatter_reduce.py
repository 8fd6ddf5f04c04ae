"""PyTorch's gather/scatter family against torch on the same inputs: scatter_reduce (every
reduce, include_self both ways, duplicates, zeros and ties), scatter, gather, index_select,
masked_fill, masked_select; gradients against torch and finite differences; capture; errors;
the gpu device (Triton's interpreter without a GPU) against the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.ops.indexing import (gather, index_select, masked_fill, masked_select, scatter,
                               scatter_reduce)

REDUCES = ("sum", "prod", "mean", "amax", "amin")


def operands(rng, dtype=np.float64):
    """x (3, 5), an index (3, 6) into dim 1 with repeats, src like the index. Small integers
    as floats, so amax/amin have ties and prod meets zeros."""
    x = rng.integers(-2, 3, (3, 5)).astype(dtype)
    idx = rng.integers(0, 4, (3, 6))  # column 4 never named: it keeps x
    src = rng.integers(-2, 3, (3, 6)).astype(dtype)
    return x, idx, src


def torch_result(x, idx, src, reduce, include_self, cotangent=None):
    tx = torch.tensor(x, requires_grad=cotangent is not None)
    ts = torch.tensor(src, requires_grad=cotangent is not None)
    out = torch.scatter_reduce(tx, 1, torch.tensor(idx), ts, reduce, include_self=include_self)
    if cotangent is None:
        return out.numpy(), None, None
    gx, gs = torch.autograd.grad(out, (tx, ts), torch.tensor(cotangent))
    return out.detach().numpy(), gx.numpy(), gs.numpy()


def rill_result(x, idx, src, reduce, include_self, cotangent=None, device="cpu"):
    grad = cotangent is not None
    rx = rill.tensor(x, device=device, requires_grad=grad)
    rs = rill.tensor(src, device=device, requires_grad=grad)
    out = scatter_reduce(rx, 1, rill.tensor(idx, device=device), rs, reduce,
                         include_self=include_self)
    if not grad:
        return out.numpy(), None, None
    (out * rill.tensor(cotangent, device=device)).sum().backward()
    return out.numpy(), rx.grad.numpy(), rs.grad.numpy()


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_float64_and_gradients_match_torch(rng, reduce, include_self):
    for _ in range(3):
        x, idx, src = operands(rng)
        g = rng.standard_normal(x.shape)
        got = rill_result(x, idx, src, reduce, include_self, g)
        want = torch_result(x, idx, src, reduce, include_self, g)
        for a, b, what in zip(got, want, ("value", "grad input", "grad src")):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=what)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax"])
def test_scatter_reduce_gradients_match_finite_differences(rng, reduce):
    x = rng.standard_normal((2, 4))
    idx = np.array([[0, 0, 2, 2, 2], [3, 1, 3, 0, 0]])
    src = rng.standard_normal((2, 5))
    g = rng.standard_normal(x.shape)
    for include_self in (True, False):
        _, gx, gs = rill_result(x, idx, src, reduce, include_self, g)
        for arg, grad in ((0, gx), (1, gs)):
            base = [x, src]
            numeric = np.zeros_like(base[arg])
            for i in np.ndindex(numeric.shape):
                plus, minus = [b.copy() for b in base], [b.copy() for b in base]
                plus[arg][i] += 1e-6
                minus[arg][i] -= 1e-6
                f = [(rill_result(p[0], idx, p[1], reduce, include_self)[0] * g).sum()
                     for p in (plus, minus)]
                numeric[i] = (f[0] - f[1]) / 2e-6
            np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_other_dtypes_match_torch(rng, reduce, include_self, dtype):
    x, idx, src = operands(rng, dtype)
    x, src = x * 3 + 1, src * 5 - 2  # integer means must floor negative quotients
    got = rill_result(x, idx, src, reduce, include_self)[0]
    want = torch_result(x, idx, src, reduce, include_self)[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scatter_reduce_index_smaller_than_input_and_src_larger(rng):
    x = rng.standard_normal((4, 5))
    idx = rng.integers(0, 5, (2, 3))
    src = rng.standard_normal((3, 6))  # only its leading (2, 3) block is read
    for reduce in REDUCES:
        got = scatter_reduce(rill.tensor(x), 1, rill.tensor(idx), rill.tensor(src), reduce)
        want = torch.scatter_reduce(torch.tensor(x), 1, torch.tensor(idx), torch.tensor(src),
                                    reduce)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    got = scatter_reduce(rill.tensor(x), 0, rill.tensor(idx[:, :2] % 4), rill.tensor(src), "amin",
                         include_self=False)
    want = torch.scatter_reduce(torch.tensor(x), 0, torch.tensor(idx[:, :2] % 4),
                                torch.tensor(src), "amin", include_self=False)
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_scatter_reduce_empty_index_keeps_input(rng):
    x = rng.standard_normal((3, 4))
    for reduce in REDUCES:
        for include_self in (True, False):
            rx = rill.tensor(x, requires_grad=True)
            out = scatter_reduce(rx, 1, rill.zeros(3, 0, dtype="int64"), rill.zeros(3, 0),
                                 reduce, include_self=include_self)
            np.testing.assert_array_equal(out.numpy(), x)
            out.sum().backward()
            np.testing.assert_array_equal(rx.grad.numpy(), np.ones_like(x))


def test_gather_matches_torch_with_a_smaller_index(rng):
    x = rng.standard_normal((4, 5, 3))
    for dim, shape in ((1, (2, 7, 3)), (0, (6, 2, 1)), (2, (4, 5, 2)), (-1, (1, 1, 4))):
        idx = rng.integers(0, x.shape[dim], shape)
        rx = rill.tensor(x, requires_grad=True)
        out = gather(rx, dim, rill.tensor(idx))
        tx = torch.tensor(x, requires_grad=True)
        want = torch.gather(tx, dim, torch.tensor(idx))
        np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
        g = rng.standard_normal(shape)
        (out * rill.tensor(g)).sum().backward()
        want.backward(torch.tensor(g))
        np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_scatter_add_gradient_with_a_smaller_index(rng):
    """scatter_add's src gradient reads only the block its index covers (was a broadcast)."""
    x = rng.standard_normal((3, 5))
    idx = rng.integers(0, 5, (2, 4))
    src = rng.standard_normal((2, 4))
    rs = rill.tensor(src, requires_grad=True)
    rill.scatter_add(rill.tensor(x), rill.tensor(idx), rs, axis=1).sum().backward()
    np.testing.assert_array_equal(rs.grad.numpy(), np.ones_like(src))


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_matches_torch_forward_and_gradients(rng):
    x = rng.standard_normal((3, 6))
    idx = np.stack([rng.permutation(6)[:4] for _ in range(3)])  # one write per target
    src = rng.standard_normal((3, 4))  # torch's src gradient needs src shaped as the index
    rx, rs = rill.tensor(x, requires_grad=True), rill.tensor(src, requires_grad=True)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    out = scatter(rx, 1, rill.tensor(idx), rs)
    want = torch.scatter(tx, 1, torch.tensor(idx), ts)
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    g = rng.standard_normal(x.shape)
    (out * rill.tensor(g)).sum().backward()
    want.backward(torch.tensor(g))
    np.testing.assert_array_equal(rx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(rs.grad.numpy(), ts.grad.numpy())
    # A number as src, or value=; reduce='add' / 'multiply'.
    for args, kwargs in (((2.5,), {}), ((), {"value": -1.0})):
        got = scatter(rill.tensor(x), 0, rill.tensor(idx % 3), *args, **kwargs)
        ref = torch.scatter(torch.tensor(x), 0, torch.tensor(idx % 3), *args, **kwargs)
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
    wide = rng.standard_normal((4, 7))  # only its leading (3, 4) block is read
    np.testing.assert_array_equal(
        scatter(rill.tensor(x), 1, rill.tensor(idx), rill.tensor(wide)).numpy(),
        torch.scatter(torch.tensor(x), 1, torch.tensor(idx), torch.tensor(wide)).numpy())
    for mode in ("add", "multiply"):
        got = scatter(rill.tensor(x), 1, rill.tensor(idx % 2), rill.tensor(src), reduce=mode)
        ref = torch.scatter(torch.tensor(x), 1, torch.tensor(idx % 2), torch.tensor(src),
                            reduce=mode)
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12)


def test_scatter_gradient_with_duplicate_targets_is_torchs(rng):
    """Every src entry aimed at a position gets its cotangent, whichever write landed."""
    idx = np.array([[1, 1, 3]])
    rs = rill.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    ts = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    g = np.array([[10.0, 20.0, 30.0, 40.0]])
    (scatter(rill.zeros(1, 4), 1, rill.tensor(idx), rs) * rill.tensor(g)).sum().backward()
    (torch.scatter(torch.zeros(1, 4), 1, torch.tensor(idx), ts) * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(rs.grad.numpy(), ts.grad.numpy())


def test_index_select_matches_torch(rng):
    x = rng.standard_normal((4, 5))
    idx = np.array([4, 0, 0, 2])
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, want = index_select(rx, 1, rill.tensor(idx)), torch.index_select(tx, 1, torch.tensor(idx))
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    out.sum().backward()
    want.sum().backward()
    np.testing.assert_array_equal(rx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(index_select(rill.tensor(x), 0, rill.tensor(2)).numpy(),
                                  torch.index_select(torch.tensor(x), 0, torch.tensor(2)).numpy())


def test_masked_fill_matches_torch(rng):
    x = rng.standard_normal((3, 4))
    mask = rng.random((4,)) < 0.5  # broadcast over rows
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    rv, tv = rill.tensor(2.0, dtype="float64", requires_grad=True), \
        torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out, want = masked_fill(rx, rill.tensor(mask), rv), tx.masked_fill(torch.tensor(mask), tv)
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    g = rng.standard_normal(x.shape)
    (out * rill.tensor(g)).sum().backward()
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(rv.grad.numpy(), tv.grad.numpy())
    ints = np.arange(6).reshape(2, 3)
    got = masked_fill(rill.tensor(ints), rill.tensor(ints > 2), 7.9)
    ref = torch.tensor(ints).masked_fill(torch.tensor(ints > 2), 7.9)
    assert got.dtype == rill.int64
    np.testing.assert_array_equal(got.numpy(), ref.numpy())


def test_masked_select_eager_and_refused_under_capture(rng):
    x = rng.standard_normal((3, 4))
    mask = rng.random((3, 1)) < 0.5
    mask[0] = True
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, want = masked_select(rx, rill.tensor(mask)), torch.masked_select(tx, torch.tensor(mask))
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    out.sum().backward()
    want.sum().backward()
    np.testing.assert_array_equal(rx.grad.numpy(), tx.grad.numpy())

    @rill.capture
    def selected(t, m):
        return masked_select(t, m)
    with pytest.raises(rill.CaptureError, match="masked_select.*masked_fill"):
        selected(rill.tensor(x), rill.tensor(mask))


def test_captured_agrees_with_eager(rng):
    x, idx, src = operands(rng)

    def step(a, i, b):
        out = [scatter_reduce(a, 1, i, b, r, include_self=s)
               for r in ("prod", "mean", "amax") for s in (True, False)]
        return out + [gather(a, 1, i[:, :3] % 5), scatter(a, 1, i, b), masked_fill(a, a > 0, 0.5)]
    args = [rill.tensor(x), rill.tensor(idx), rill.tensor(src)]
    for got, want in zip(rill.capture(step)(*args), step(*args)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())

    @rill.capture
    def loss_and_grad(a, b):
        return rill.value_and_grad(lambda u, v: scatter_reduce(u, 1, args[1], v, "amin").sum(),
                                   argnums=(0, 1))(a, b)
    (value, (ga, gb)) = loss_and_grad(args[0], args[2])
    ra, rb = rill.tensor(x, requires_grad=True), rill.tensor(src, requires_grad=True)
    scatter_reduce(ra, 1, args[1], rb, "amin").sum().backward()
    np.testing.assert_array_equal(ga.numpy(), ra.grad.numpy())
    np.testing.assert_array_equal(gb.numpy(), rb.grad.numpy())


def test_bad_input_raises_rill_errors():
    x, i = rill.zeros(3, 4), rill.tensor([[0, 5]])
    with pytest.raises(rill.IndexingError, match="index 5 is out of bounds for axis 1"):
        scatter_reduce(x, 1, i, rill.ones(1, 2), "amax")
    with pytest.raises(rill.IndexingError, match="out of bounds"):
        scatter(x, 1, i, 1.0)
    with pytest.raises(rill.IndexingError, match="out of bounds"):
        gather(x, 1, i)
    with pytest.raises(rill.ShapeError, match="scatter_reduce.*as many dimensions"):
        scatter_reduce(x, 1, rill.tensor([0, 1]), rill.ones(2), "sum")
    with pytest.raises(rill.ShapeError, match="gather.*larger than input"):
        gather(x, 1, rill.zeros(4, 2, dtype="int64"))
    with pytest.raises(rill.ShapeError, match="src"):
        scatter_reduce(x, 1, rill.tensor([[0, 1]]), rill.ones(1, 1), "sum")
    with pytest.raises(rill.ArgumentError, match="reduce must be one of 'sum'.*got 'max'"):
        scatter_reduce(x, 1, rill.tensor([[0]]), rill.ones(1, 1), "max")
    with pytest.raises(rill.ShapeError, match="out of range"):
        gather(x, 2, rill.tensor([[0]]))
    with pytest.raises(rill.DTypeError, match="integer"):
        gather(x, 1, rill.tensor([[0.0]]))
    with pytest.raises(rill.ArgumentError, match="exactly one"):
        scatter(x, 1, rill.tensor([[0]]))
    with pytest.raises(rill.DTypeError, match="bool"):
        masked_fill(x, rill.ones(3, 4), 1.0)
    with pytest.raises(rill.ShapeError, match="does not broadcast to input"):
        masked_fill(x, rill.ones(2, 3, 4, dtype="bool"), 1.0)
    with pytest.raises(rill.ShapeError, match="1-d"):
        index_select(x, 0, rill.tensor([[0]]))


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.float16])
def test_gpu_agrees_with_cpu(rng, dtype):
    gpu = rill.device("gpu")
    x, idx, src = operands(rng, dtype)
    idx = idx - 2  # negative indices count from the end
    for reduce in REDUCES:
        for include_self in (True, False):
            got = rill_result(x, idx, src, reduce, include_self, device=gpu)[0]
            want = rill_result(x, idx, src, reduce, include_self)[0]
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got.astype(float), want.astype(float), rtol=1e-3)
    unique = np.array([[0, 3, 1], [4, 2, 0], [1, 0, 2]])
    got = scatter(rill.tensor(x, device=gpu), 1, rill.tensor(unique, device=gpu),
                  rill.tensor(src, device=gpu))
    want = scatter(rill.tensor(x), 1, rill.tensor(unique), rill.tensor(src))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if dtype == np.float64:
        g = rng.standard_normal(x.shape)
        got = rill_result(x, idx, src, "prod", True, g, device=gpu)
        want = rill_result(x, idx, src, "prod", True, g)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
