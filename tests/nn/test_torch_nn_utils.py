"""rill.nn.utils against torch.nn.utils on the same values: clipping (eager and captured),
parameter <-> vector conversions, rnn.pad_sequence (forward and gradients)."""
import math

import numpy as np
import pytest
import torch

import rill
import rill.nn.utils
from rill.nn.utils.rnn import pad_sequence

SHAPES = [(3, 4), (5,), (2, 1, 3)]


def params_with_grads(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [3 * rng.standard_normal(s).astype(dtype) for s in SHAPES]
    rp = [rill.nn.Parameter(rill.tensor(v)) for v in values]
    tp = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    for r, t, g in zip(rp, tp, grads):
        r.grad, t.grad = rill.tensor(g), torch.tensor(g)
    return rp, tp


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, dtype):
    rp, tp = params_with_grads(dtype)
    total = rill.nn.utils.clip_grad_norm_(rp, max_norm, norm_type=norm_type, foreach=None)
    ttotal = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type=norm_type)
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=rtol)
    assert str(total.dtype) == str(ttotal.dtype).replace("torch.", "")
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-7)
    assert (float(total) > max_norm) == (max_norm == 0.5)  # both branches are exercised


def test_clipping_is_rill_optims():
    assert rill.nn.utils.clip_grad_norm_ is rill.optim.clip_grad_norm_
    assert rill.nn.utils.clip_grad_value_ is rill.optim.clip_grad_value_


def test_get_total_norm_and_clip_grads_with_norm_match_torch():
    rp, tp = params_with_grads()
    total = rill.nn.utils.get_total_norm([p.grad for p in rp], norm_type=3.0)
    ttotal = torch.nn.utils.get_total_norm([p.grad for p in tp], norm_type=3.0)
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-12)
    rill.nn.utils.clip_grads_with_norm_(rp, 1.0, total)
    torch.nn.utils.clip_grads_with_norm_(tp, 1.0, ttotal)
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    assert float(rill.nn.utils.get_total_norm([])) == 0.0


def test_clip_grad_value_matches_torch():
    rp, tp = params_with_grads()
    assert rill.nn.utils.clip_grad_value_(rp, 1.5, foreach=None) is None
    torch.nn.utils.clip_grad_value_(tp, 1.5)
    for r, t in zip(rp, tp):
        np.testing.assert_array_equal(r.grad.numpy(), t.grad.numpy())


def test_clip_grad_norm_errors_on_nonfinite():
    rp, _ = params_with_grads()
    rp[1].grad = rill.tensor([np.inf, 0, 0, 0, 0], dtype=rill.float64)
    with pytest.raises(rill.GradientError, match="clip_grad_norm_.*error_if_nonfinite"):
        rill.nn.utils.clip_grad_norm_(rp, 1.0, error_if_nonfinite=True)


def test_clip_grad_norm_captured_agrees_with_eager():
    def step(model, x):
        model.zero_grad()
        (model(x) ** 2).sum().backward()
        return rill.nn.utils.clip_grad_norm_(model.parameters(), 0.1)

    x = rill.tensor(np.random.default_rng(1).standard_normal((4, 3)), dtype=rill.float32)
    rill.manual_seed(0)
    eager_model = rill.nn.Linear(3, 2)
    rill.manual_seed(0)
    captured_model = rill.nn.Linear(3, 2)
    captured = rill.capture(lambda x: step(captured_model, x))
    for _ in range(3):
        want, got = step(eager_model, x), captured(x)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
        for a, b in zip(captured_model.parameters(), eager_model.parameters()):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6)
    assert captured.retraces == []


# ---- parameters <-> vector ---------------------------------------------------------------------


def test_parameters_to_vector_round_trip_matches_torch():
    rp, tp = params_with_grads()
    vec, tvec = rill.nn.utils.parameters_to_vector(rp), torch.nn.utils.parameters_to_vector(tp)
    np.testing.assert_array_equal(vec.numpy(), tvec.detach().numpy())
    new = np.arange(vec.shape[0], dtype=np.float64)
    kept = list(rp)
    rill.nn.utils.vector_to_parameters(rill.tensor(new), rp)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), tp)
    for r, t, k in zip(rp, tp, kept):
        assert r is k and r.requires_grad  # the same Parameter objects, new values
        np.testing.assert_array_equal(r.numpy(), t.detach().numpy())
    np.testing.assert_array_equal(rill.nn.utils.parameters_to_vector(rp).numpy(), new)


def test_parameters_to_vector_is_differentiable():
    rp, tp = params_with_grads()
    weights = np.linspace(-1, 1, sum(int(np.prod(s)) for s in SHAPES))
    for p in rp:
        p.grad = None
    (rill.nn.utils.parameters_to_vector(rp) ** 2 * rill.tensor(weights)).sum().backward()
    for p in tp:
        p.grad = None
    (torch.nn.utils.parameters_to_vector(tp) ** 2 * torch.tensor(weights)).sum().backward()
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_vector_to_parameters_errors():
    rp, _ = params_with_grads()
    with pytest.raises(rill.ArgumentError, match="expected a rill.Tensor"):
        rill.nn.utils.vector_to_parameters(np.zeros(23), rp)
    with pytest.raises(rill.ShapeError, match="23 elements"):
        rill.nn.utils.vector_to_parameters(rill.zeros(22), rp)
    with pytest.raises(rill.ArgumentError, match="must be tensors"):
        rill.nn.utils.parameters_to_vector([rp[0], 3.0])


# ---- pad_sequence ------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("trailing", [(), (2,)])
def test_pad_sequence_matches_torch(batch_first, padding_side, trailing):
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((n,) + trailing) for n in (3, 1, 4)]
    weights = rng.standard_normal((4, 3) + trailing)
    if batch_first:
        weights = np.swapaxes(weights, 0, 1)
    rs = [rill.tensor(v, requires_grad=True) for v in values]
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    out = pad_sequence(rs, batch_first=batch_first, padding_value=-2.5,
                       padding_side=padding_side)
    tout = torch.nn.utils.rnn.pad_sequence(ts, batch_first=batch_first, padding_value=-2.5,
                                           padding_side=padding_side)
    np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
    (out * rill.tensor(weights)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    for r, t in zip(rs, ts):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_pad_sequence_keeps_integer_dtype_and_captures():
    seqs = [rill.tensor([1, 2, 3]), rill.tensor([4])]
    out = pad_sequence(seqs, batch_first=True)
    tout = torch.nn.utils.rnn.pad_sequence([torch.tensor([1, 2, 3]), torch.tensor([4])],
                                           batch_first=True)
    assert out.dtype == rill.int64
    np.testing.assert_array_equal(out.numpy(), tout.numpy())
    captured = rill.capture(lambda a, b: pad_sequence([a, b], padding_value=9))
    np.testing.assert_array_equal(captured(*seqs).numpy(),
                                  pad_sequence(seqs, padding_value=9).numpy())


def test_pad_sequence_errors():
    with pytest.raises(rill.ShapeError, match="trailing dimensions"):
        pad_sequence([rill.zeros(2, 3), rill.zeros(2, 4)])
    with pytest.raises(rill.ArgumentError, match="padding_side"):
        pad_sequence([rill.zeros(2)], padding_side="middle")
    with pytest.raises(rill.ArgumentError, match="at least one"):
        pad_sequence([])
