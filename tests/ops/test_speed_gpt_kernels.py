"""Faster paths of the GPT training step (issue 20, speed), against torch.

- layer_norm's CPU kernels take their row sums as matrix-vector products: forward and
  gradients equal torch's to float rounding, on the GPT bench's shape and odd ones (two
  normalized axes, float16, empty, non-contiguous).
- clip_grad_norm_ / get_total_norm join small dense gradients of one dtype into one vector
  for one norm: equal to torch's norm of norms within rounding, for every p > 0 and inf;
  p <= 0, mixed dtypes and sparse gradients keep the norm of norms; a captured step agrees
  with the eager one and takes one norm.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill import nn
from rill.optim import clip as rill_clip

F = rill.nn.functional


def _layer_norm_both(x, w, b, shape, g):
    rx, rw, rb = (rill.tensor(a, requires_grad=True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ry = F.layer_norm(rx, shape, rw, rb, eps=1e-5)
    ty = torch.nn.functional.layer_norm(tx, shape, tw, tb, eps=1e-5)
    (ry * rill.tensor(g)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    return [ry, rx.grad, rw.grad, rb.grad], [ty, tx.grad, tw.grad, tb.grad]


@pytest.mark.parametrize("shape, norm_axes, dtype, tol", [
    ((8, 64, 64), 1, np.float32, 2e-5), ((8, 64, 64), 1, np.float64, 1e-11),
    ((3, 5, 4, 6), 2, np.float64, 1e-11), ((7, 33), 1, np.float32, 2e-5),
    ((4, 1), 1, np.float64, 1e-11)])
def test_layer_norm_forward_and_gradients_match_torch(shape, norm_axes, dtype, tol):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    normalized = shape[len(shape) - norm_axes:]
    w = rng.standard_normal(normalized).astype(dtype)
    b = rng.standard_normal(normalized).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    ours, theirs = _layer_norm_both(x, w, b, normalized, g)
    for r, t in zip(ours, theirs):
        assert r.dtype.name == str(t.dtype).replace("torch.", "")
        np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=tol, atol=tol)


def test_layer_norm_float16_is_computed_in_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 16)).astype(np.float16)
    w, b = np.ones(16, np.float16), np.zeros(16, np.float16)
    y = F.layer_norm(rill.tensor(x), (16,), rill.tensor(w), rill.tensor(b))
    expected = torch.nn.functional.layer_norm(torch.tensor(x, dtype=torch.float32), (16,))
    assert y.dtype is rill.float16
    np.testing.assert_allclose(y.numpy().astype(np.float32), expected.numpy(), atol=4e-3)


def test_layer_norm_of_no_rows_and_of_a_transposed_input():
    empty = F.layer_norm(rill.zeros((0, 4)), (4,))
    assert empty.shape == (0, 4)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 5))
    w = rill.tensor(rng.standard_normal(6), requires_grad=True)
    rx = rill.tensor(x, requires_grad=True)
    y = F.layer_norm(rx.T, (6,), w, None)  # rows of a transposed view
    (y * y).sum().backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w.numpy(), requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx.T, (6,), tw, None)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_layer_norm_under_capture_agrees_with_eager():
    rill.manual_seed(0)
    ln = nn.LayerNorm(64)
    x = rill.tensor(np.random.default_rng(3).standard_normal((8, 64, 64)).astype(np.float32))

    def step(x):
        ln.zero_grad()
        y = ln(x)
        (y * y).sum().backward()
        return y, ln.weight.grad, ln.bias.grad
    eager = [t.numpy().copy() for t in step(x)]
    captured = rill.capture(step)
    captured(x)
    for e, c in zip(eager, captured(x)):
        np.testing.assert_array_equal(c.numpy(), e)


GRAD_SHAPES = [(16, 8), (8,), (), (3, 4, 5), (1,)]


def _grads(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 2).astype(dtype) for s in GRAD_SHAPES]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0, 0.5, 0.0,
                                       float("-inf"), "inf"])
def test_total_norm_matches_torch(norm_type):
    grads = _grads()
    ours = rill_clip.get_total_norm([rill.tensor(g) for g in grads], norm_type)
    theirs = torch.nn.utils.get_total_norm([torch.tensor(g) for g in grads], norm_type)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=2e-6)


def test_clip_grad_norm_matches_torch_and_clips():
    grads = _grads(np.float64, seed=4)
    rp = [nn.Parameter(rill.zeros(g.shape, dtype=rill.float64)) for g in grads]
    tp = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in grads]
    for r, t, g in zip(rp, tp, grads):
        r.grad, t.grad = rill.tensor(g), torch.tensor(g)
    ours = rill.optim.clip_grad_norm_(rp, 1.5)
    theirs = torch.nn.utils.clip_grad_norm_(tp, 1.5)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-13)
    assert float(ours) > 1.5  # it clipped
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-13, atol=1e-15)


def test_which_gradients_are_joined():
    def joined(tensors, ord):
        groups, rest = rill_clip._joined_groups(tensors, ord)
        return [[id(t) for t in g] for g in groups], sorted(id(t) for t in rest)

    dense = [rill.tensor(g) for g in _grads()]
    ids = [id(t) for t in dense]
    assert joined(dense, 2.0) == ([ids], []) and joined(dense, float("inf")) == ([ids], [])
    assert joined(dense, 0.0) == ([], sorted(ids)) and joined(dense, -1.0) == ([], sorted(ids))
    assert joined(dense[:1], 2.0) == ([], ids[:1])  # one tensor: its own norm already
    wide = rill.tensor(np.ones(3))  # a float64 among float32: normed on its own
    assert joined(dense[:2] + [wide], 2.0) == ([ids[:2]], [id(wide)])
    sparse = rill.sparse.SparseRows(rill.tensor([0]), rill.ones((1, 2)), (3, 2))
    # a sparse gradient (a GPT's embedding) no longer keeps the dense ones apart
    assert joined(dense + [sparse], 2.0) == ([ids], [id(sparse)])
    assert joined(dense[:1] + [sparse], 2.0) == ([], sorted([ids[0], id(sparse)]))
    big = [rill.zeros(rill_clip.JOIN_MAX_ELEMENTS), rill.zeros(1)]
    assert joined(big, 2.0) == ([], sorted(id(t) for t in big))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
@pytest.mark.parametrize("table_rows, ids", [(6, [4, 0, 4]), (2, [1, 0, 1])],
                         ids=["coalesced", "scattered"])  # more rows than ids, or not
def test_total_norm_of_dense_and_sparse_gradients_is_the_norm_of_all_entries(
        norm_type, table_rows, ids):
    dense = _grads(np.float64, seed=7)
    rows = np.random.default_rng(8).standard_normal((3, 4))
    sparse = rill.sparse.SparseRows(rill.tensor(ids), rill.tensor(rows), (table_rows, 4))
    total = rill_clip.get_total_norm([rill.tensor(g) for g in dense] + [sparse], norm_type)
    as_dense = np.zeros((table_rows, 4))
    np.add.at(as_dense, ids, rows)  # repeated rows add up
    entries = np.concatenate([g.ravel() for g in dense] + [as_dense.ravel()])
    want = np.abs(entries).max() if norm_type == float("inf") else \
        (np.abs(entries) ** norm_type).sum() ** (1 / norm_type)
    np.testing.assert_allclose(total.numpy(), want, rtol=1e-13)


def test_mixed_dtypes_keep_torch_total():
    g32, g64 = np.arange(1.0, 5.0, dtype=np.float32), np.arange(2.0, 4.0)
    ours = rill_clip.get_total_norm([rill.tensor(g32), rill.tensor(g64)])
    theirs = torch.nn.utils.get_total_norm([torch.tensor(g32), torch.tensor(g64)])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_captured_clip_agrees_with_eager_and_takes_one_norm():
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    params = list(model.parameters())
    x = rill.tensor(np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32))

    def step(x):
        model.zero_grad()
        (model(x) ** 2).sum().backward()
        total = rill.optim.clip_grad_norm_(params, 0.5)
        return [total] + [p.grad for p in params]
    eager = [t.numpy().copy() for t in step(x)]
    captured = rill.capture(step)
    captured(x)
    out = captured(x)
    for e, c in zip(eager, out):
        np.testing.assert_array_equal(c.numpy(), e)
    (variant,) = captured.variants.values()
    graph = variant.program.graph
    # one dot product of the joined gradients, not a norm per gradient
    assert graph.count("norm") == 0 and graph.count("concat") == 1
    dots = [n for n in graph.nodes if n.op == "matmul" and n.outputs[0].shape == ()]
    assert len(dots) == 1 and graph.count("sqrt") == 1


@pytest.mark.parametrize("dtype, tol", [(np.float32, 2e-6), (np.float16, 1e-3)])
def test_total_norm_of_many_entries_matches_torch(dtype, tol):
    rng = np.random.default_rng(8)
    grads = [rng.standard_normal(s).astype(dtype) for s in [(256, 64), (64, 256), (3000,), (7,)]]
    ours = rill.optim.clip.get_total_norm([rill.tensor(g) for g in grads])
    theirs = torch.nn.utils.get_total_norm([torch.tensor(g) for g in grads])
    assert ours.dtype.name == np.dtype(dtype).name
    np.testing.assert_allclose(float(ours), float(theirs), rtol=tol)


# ---- softmax, log_softmax, cross-entropy (row sums as matrix-vector products) -----------

@pytest.mark.parametrize("shape, axis, dtype, tol", [
    ((512, 65), -1, np.float32, 1e-6), ((8, 4, 64, 64), -1, np.float64, 1e-13),
    ((7,), 0, np.float32, 1e-6), ((5, 9), 0, np.float64, 1e-13), ((3, 4), -1, np.float16, 2e-3)])
def test_softmax_and_log_softmax_match_torch(shape, axis, dtype, tol):
    x = (np.random.default_rng(6).standard_normal(shape) * 4).astype(dtype)
    tx = torch.tensor(x.astype(np.float32) if dtype == np.float16 else x)
    for ours, theirs in ((rill.softmax, torch.softmax), (rill.log_softmax, torch.log_softmax)):
        got = ours(rill.tensor(x), axis=axis)
        assert got.dtype.name == np.dtype(dtype).name
        np.testing.assert_allclose(got.numpy().astype(np.float64),
                                   theirs(tx, dim=axis).numpy().astype(np.float64),
                                   rtol=tol, atol=tol)


def test_softmax_rows_of_minus_inf_are_nan_as_torch():
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    for ours, theirs in ((rill.softmax, torch.softmax), (rill.log_softmax, torch.log_softmax)):
        got = ours(rill.tensor(x), axis=-1).numpy()
        assert np.isnan(got[1]).all()
        np.testing.assert_allclose(got, theirs(torch.tensor(x), dim=-1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("label_smoothing, reduction", [(0.0, "mean"), (0.1, "mean"),
                                                        (0.2, "sum"), (0.0, "none")])
def test_cross_entropy_and_its_gradient_match_torch(dtype, label_smoothing, reduction):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((512, 65)) * 3).astype(dtype)
    target = rng.integers(0, 65, 512)
    target[::7] = -100  # ignored rows
    rl, tl = rill.tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
    ours = F.cross_entropy(rl, rill.tensor(target), reduction=reduction,
                           label_smoothing=label_smoothing)
    theirs = torch.nn.functional.cross_entropy(tl, torch.tensor(target), reduction=reduction,
                                               label_smoothing=label_smoothing)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol,
                               atol=tol)
    ours.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(rl.grad.numpy(), tl.grad.numpy(), rtol=tol, atol=tol * 1e-2)


def test_cross_entropy_bad_target_is_a_rill_error():
    with pytest.raises(rill.Error, match="outside"):
        F.cross_entropy(rill.zeros((2, 3)), rill.tensor([0, 3]))
