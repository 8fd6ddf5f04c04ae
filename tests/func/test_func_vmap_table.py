"""vmap on every row of the op table: the batched call equals the op run on each member and
stacked, with the batch axis first, elsewhere, or on some inputs only."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import rill
from rill.func import FallbackWarning, vmap

from op_cases import OPS, as_tuple, make_inputs

BATCH = 3
# One case per op (its first), plus every case of ops whose rules have branches by rank.
RANKED = {"matmul", "einsum", "getitem", "concat", "where", "add", "multiply", "broadcast_to"}
CASES = [pytest.param(op, i, id=f"{op.name}-{i}") for op in OPS
         for i in range(len(op.shapes)) if i == 0 or op.name in RANKED]


def _members(op, case):
    return [make_inputs(op, op.shapes[case], seed=s) for s in range(BATCH)]


def _looped(op, members):
    outs = [as_tuple(op.fn(*[rill.tensor(a) for a in m])) for m in members]
    return [np.stack([np.asarray(o[k].numpy()) for o in outs]) for k in range(len(outs[0]))]


def _check(op, got, expected, where):
    got = as_tuple(got)
    assert len(got) == len(expected), f"{op}: {where}"
    for g, e in zip(got, expected):
        g = np.asarray(g.numpy())
        assert g.shape == e.shape, f"{op} {where}: shape {g.shape} != {e.shape}"
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, err_msg=f"{op} {where}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"{op} {where}")


# Rows that update running statistics in place: refused under vmap when the statistics are
# not batched inputs (made inside, or unbatched), as torch.func.vmap refuses them.
RUNNING_STATS = {"batch_norm_train", "batch_norm_running_update"}


def _run(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        return fn(*args, **kw)


def _refused_in_place(op, call):
    """True when `call` is refused for writing per-member statistics into shared ones."""
    if op.name not in RUNNING_STATS:
        return False
    try:
        call()
    except rill.ArgumentError as e:
        assert "in-place op inside vmap" in str(e), str(e)
        return True
    return False


@pytest.mark.parametrize("op,case", CASES)
def test_vmap_over_all_inputs_equals_the_loop(op, case):
    members = _members(op, case)
    if any(a.ndim == 0 and a.dtype.kind not in "fc" for a in members[0]):
        pass  # integer scalars batch like any other input
    expected = _looped(op, members)
    stacked = [rill.tensor(np.stack([m[i] for m in members])) for i in range(len(members[0]))]
    if op.name == "batch_norm_train":  # fresh statistics made inside: shared, so refused
        assert _refused_in_place(op, lambda: _run(vmap(op.fn), *stacked))
        return
    _check(op, _run(vmap(op.fn), *stacked), expected, "all inputs at axis 0")


@pytest.mark.parametrize("op,case", CASES)
def test_vmap_over_the_first_input_at_its_last_axis(op, case):
    members = _members(op, case)
    rest = members[0][1:]
    members = [[m[0]] + rest for m in members]
    expected = _looped(op, members)
    first = np.stack([m[0] for m in members], axis=-1)
    in_dims = (first.ndim - 1,) + (None,) * len(rest)
    rest = [rill.tensor(a) for a in rest]
    if _refused_in_place(op, lambda: _run(vmap(op.fn, in_dims=in_dims), rill.tensor(first),
                                          *rest)):
        return
    got = _run(vmap(op.fn, in_dims=in_dims), rill.tensor(first), *rest)
    _check(op, got, expected, "first input batched at its last axis")


def test_out_dims_place_the_batch_axis():
    x = rill.tensor(np.arange(24.0).reshape(4, 2, 3))
    out = vmap(lambda m: m * 2, out_dims=2)(x)
    np.testing.assert_array_equal(out.numpy(), np.moveaxis(x.numpy() * 2, 0, 2))


def test_unbatched_outputs_are_broadcast_or_kept_with_out_dims_none():
    x = rill.ones(5, 2)
    a, b = vmap(lambda m: (m.sum(), rill.zeros(3)), out_dims=(0, None))(x)
    assert a.shape == (5,) and b.shape == (3,)
    (c,) = vmap(lambda m: (rill.ones(3),))(x)
    assert c.shape == (5, 3)


def test_nested_vmap_is_an_outer_product():
    a, b = rill.tensor([1.0, 2.0, 3.0]), rill.tensor([10.0, 20.0])
    out = vmap(vmap(lambda x, y: x * y, in_dims=(None, 0)), in_dims=(0, None))(a, b)
    np.testing.assert_array_equal(out.numpy(), np.outer(a.numpy(), b.numpy()))


def test_bad_arguments_are_rill_errors():
    with pytest.raises(rill.ShapeError, match="disagree on the batch size"):
        vmap(lambda x, y: x + y)(rill.ones(3), rill.ones(4))
    with pytest.raises(rill.ArgumentError, match="at least one input"):
        vmap(lambda x: x, in_dims=None)(rill.ones(3))
    with pytest.raises(rill.ArgumentError, match="not an axis"):
        vmap(lambda x: x, in_dims=2)(rill.ones(3))
    with pytest.raises(rill.ArgumentError, match="randomness"):
        vmap(lambda x: x + rill.randn(2))(rill.ones(3, 2))
    with pytest.raises(rill.ShapeError):
        vmap(lambda x: x @ rill.ones(3))(rill.ones(4, 2))  # shapes checked per member


def test_a_tensor_kept_from_inside_vmap_is_refused_later():
    kept = []
    vmap(lambda x: kept.append(x * 2) or x)(rill.ones(3, 2))
    with pytest.raises(rill.ArgumentError, match="after vmap returned"):
        (kept[0] + 1).numpy()


def test_randomness_different_and_same():
    rill.manual_seed(0)
    diff = vmap(lambda x: x + rill.randn(4), randomness="different")(rill.zeros(3, 4))
    assert not np.allclose(diff.numpy()[0], diff.numpy()[1])
    same = vmap(lambda x: x + rill.randn(4), randomness="same")(rill.zeros(3, 4))
    np.testing.assert_array_equal(same.numpy()[0], same.numpy()[1])


def test_chunks_give_the_same_result():
    x = rill.tensor(np.random.default_rng(0).normal(size=(7, 3)))
    f = lambda v: (rill.exp(v) * v).sum()  # noqa: E731
    np.testing.assert_allclose(vmap(f, chunk_size=3)(x).numpy(), vmap(f)(x).numpy())
    g = lambda v: (v * 2, rill.ones(2).sum())  # noqa: E731
    a, b = vmap(g, out_dims=(1, None), chunk_size=2)(rill.ones(5, 3))
    assert a.shape == (3, 5) and b.shape == ()


def test_vmap_inside_capture_equals_eager():
    w = rill.tensor(np.random.default_rng(1).normal(size=(3, 2)))

    def f(xs):
        return vmap(lambda x: rill.tanh(x @ w).sum())(xs)

    xs = rill.tensor(np.random.default_rng(2).normal(size=(5, 3)))
    np.testing.assert_allclose(rill.capture(f)(xs).numpy(), f(xs).numpy(), rtol=1e-12)


GRAD_CASES = [pytest.param(op, id=op.name) for op in OPS if op.grad]


@pytest.mark.parametrize("op", GRAD_CASES)
def test_per_member_gradients_equal_the_loop(op):
    """vmap of grad: every primitive a vjp rule calls (the *_grad primitives among them) is
    batched too; each member's gradient equals grad on that member alone."""
    from op_cases import cotangents_for, diff_positions, scalar_loss
    members = _members(op, 0)
    positions = diff_positions(op, members[0])
    cots = cotangents_for(as_tuple(op.fn(*[rill.tensor(a) for a in members[0]])))

    def loss(*xs):
        full = list(xs)
        return scalar_loss(as_tuple(op.fn(*full)), cots)

    argnums = tuple(positions)
    expected = [rill.grad(loss, argnums=argnums)(*[rill.tensor(a) for a in m]) for m in members]
    stacked = [rill.tensor(np.stack([m[i] for m in members])) for i in range(len(members[0]))]
    if _refused_in_place(op, lambda: _run(vmap(rill.grad(loss, argnums=argnums)), *stacked)):
        return
    try:
        got = _run(vmap(rill.grad(loss, argnums=argnums)), *stacked)
    except rill.GradientError as e:  # loops and branches: no grad of grad, said plainly
        assert "higher-order" in str(e) or "not supported" in str(e)
        return
    for k in range(len(positions)):
        want = np.stack([np.asarray(e[k].numpy()) for e in expected])
        np.testing.assert_allclose(got[k].numpy(), want, rtol=1e-9, atol=1e-12,
                                   err_msg=f"{op} input {positions[k]}")


def test_in_place_writes_reach_a_batched_input_and_are_refused_into_an_outside_tensor():
    x = rill.tensor(np.arange(24.0).reshape(4, 2, 3))
    y = rill.zeros(3, 4)
    vmap(lambda m, a: a.add_(m[0]), in_dims=(0, 1))(x, y)  # as torch.func.vmap: y changes
    np.testing.assert_array_equal(y.numpy(), x.numpy()[:, 0, :].T)
    acc = rill.zeros(3)
    with pytest.raises(rill.ArgumentError, match="in-place op inside vmap"):
        vmap(lambda m: acc.add_(m[0]))(x)
    np.testing.assert_array_equal(acc.numpy(), np.zeros(3))  # left as it was
