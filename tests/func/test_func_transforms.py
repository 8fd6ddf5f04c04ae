"""rill.func against torch.func and finite differences: jvp on every op-table row, per-example
gradients of an MLP and a CNN, Jacobians and Hessians, functional_call, and the transforms
nested and composed with each other and with capture."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import rill
import rill.func as F
from rill.func import FallbackWarning

from op_cases import OPS, as_tuple, diff_positions, make_inputs

JVP_CASES = [pytest.param(op, id=op.name) for op in OPS if op.grad]


# Loops and branches refuse higher-order gradients, which forward mode here is built from
# (forward.py); that refusal is tested in test_control_flow.
NO_SECOND_ORDER = {"scan", "scan_reverse", "while", "switch"}


@pytest.mark.parametrize("op", JVP_CASES)
def test_jvp_matches_central_differences(op):
    """One input's tangent at a time (a label input is only continuous on its own), against
    central differences in float64, or against torch.func.jvp where the op rounds to float32."""
    if op.name in NO_SECOND_ORDER:
        with pytest.raises(rill.GradientError, match="higher-order"):
            arrays = make_inputs(op, op.shapes[0])
            _jvp_one(op, arrays, diff_positions(op, arrays))
        return
    arrays = make_inputs(op, op.shapes[0])
    for p in diff_positions(op, arrays):
        _jvp_one(op, arrays, [p])


def _jvp_one(op, arrays, positions):
    rng = np.random.default_rng(7)
    tangents = [rng.uniform(-1, 1, size=arrays[p].shape) for p in positions]

    def f(*xs):
        full = [rill.tensor(a) for a in arrays]
        for p, x in zip(positions, xs):
            full[p] = x
        return as_tuple(op.fn(*full))

    primals = tuple(rill.tensor(arrays[p]) for p in positions)
    outs, jv = F.jvp(f, primals, tuple(rill.tensor(t) for t in tangents))
    # float32 roundings (a cast) make differences noisy: PyTorch is the reference there
    if op.fd_rtol >= 1e-2 or any(o.dtype.is_floating and o.dtype is not rill.float64
                                 for o in outs):
        def tf(*xs):
            full = [torch.tensor(a) for a in arrays]
            for p, x in zip(positions, xs):
                full[p] = x
            return tuple(as_tuple(op.torch_fn(*full)))
        _, expected = torch.func.jvp(tf, tuple(torch.tensor(arrays[p]) for p in positions),
                                     tuple(torch.tensor(t) for t in tangents))
        for j, e in zip(jv, expected):
            np.testing.assert_allclose(j.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
        return
    eps = 1e-6

    def shifted(sign):
        xs = [rill.tensor(arrays[p] + sign * eps * t) for p, t in zip(positions, tangents)]
        with rill.no_grad():
            return [np.asarray(o.numpy()) for o in f(*xs)]

    plus, minus = shifted(1), shifted(-1)
    for o, j, a, b in zip(outs, jv, plus, minus):
        if o.dtype.is_floating:
            np.testing.assert_allclose(j.numpy(), (a - b) / (2 * eps), rtol=op.fd_rtol,
                                       atol=1e-6, err_msg=f"{op} input {positions}")


def _mlp_params(rng):
    return {"w1": rng.normal(size=(8, 5)) * 0.5, "b1": rng.normal(size=8) * 0.1,
            "w2": rng.normal(size=(3, 8)) * 0.5, "b2": rng.normal(size=3) * 0.1}


def _mlp_loss(lib):
    functional = rill.nn.functional if lib is rill else torch.nn.functional

    def loss(p, x, y):
        h = lib.tanh(x @ p["w1"].T + p["b1"])
        logits = h @ p["w2"].T + p["b2"]
        return functional.cross_entropy(logits[None], y[None])
    return loss


def test_per_example_gradients_of_an_mlp_match_torch_func():
    rng = np.random.default_rng(0)
    params = _mlp_params(rng)
    x, y = rng.normal(size=(6, 5)), rng.integers(0, 3, size=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # every op batched by a rule
        ours = F.vmap(F.grad(_mlp_loss(rill)), in_dims=(None, 0, 0))(
            {k: rill.tensor(v) for k, v in params.items()}, rill.tensor(x), rill.tensor(y))
    theirs = torch.func.vmap(torch.func.grad(_mlp_loss(torch)), in_dims=(None, 0, 0))(
        {k: torch.tensor(v) for k, v in params.items()}, torch.tensor(x), torch.tensor(y))
    for k in params:
        assert ours[k].shape == (6,) + params[k].shape
        np.testing.assert_allclose(ours[k].numpy(), theirs[k].numpy(), rtol=1e-10, atol=1e-12)


class _TorchCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(h.flatten(1))


class _RillCNN(rill.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = rill.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = rill.nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        h = rill.nn.functional.max_pool2d(rill.relu(self.conv(x)), 2)
        return self.fc(h.flatten(1))


def test_per_example_gradients_of_a_cnn_match_torch_func():
    torch.manual_seed(0)
    tm = _TorchCNN().double()
    rm = _RillCNN().to(rill.float64)
    rm.load_state_dict({k: rill.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(5, 2, 6, 6)), rng.integers(0, 3, size=5)

    def ours_loss(params, xi, yi):
        out = F.functional_call(rm, params, (xi[None],))
        return rill.nn.functional.cross_entropy(out, yi[None])

    def theirs_loss(params, xi, yi):
        out = torch.func.functional_call(tm, params, (xi[None],))
        return torch.nn.functional.cross_entropy(out, yi[None])

    params = {k: rill.tensor(v.detach().numpy()) for k, v in tm.named_parameters()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ours = F.vmap(F.grad(ours_loss), in_dims=(None, 0, 0))(params, rill.tensor(x),
                                                               rill.tensor(y))
    theirs = torch.func.vmap(torch.func.grad(theirs_loss), in_dims=(None, 0, 0))(
        dict(tm.named_parameters()), torch.tensor(x), torch.tensor(y))
    for k in params:
        np.testing.assert_allclose(ours[k].numpy(), theirs[k].detach().numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=k)


def test_hessian_of_a_small_mlp_matches_torch_func():
    rng = np.random.default_rng(2)
    w1, w2, x = rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=3)

    def f(lib):
        return lambda v: (lib.tanh(lib.tensor(w1) @ v) * lib.tensor(w2)).sum() ** 2

    ours = F.hessian(f(rill))(rill.tensor(x))
    theirs = torch.func.hessian(f(torch))(torch.tensor(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_jacobians_of_several_arguments_and_outputs_match_torch_func():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=3)

    def f(lib):
        return lambda x, y: (lib.sin(x) * y, (x * x).sum(-1))

    for ours_t, theirs_t in ((F.jacrev, torch.func.jacrev), (F.jacfwd, torch.func.jacfwd)):
        ours = ours_t(f(rill), argnums=(0, 1))(rill.tensor(a), rill.tensor(b))
        theirs = theirs_t(f(torch), argnums=(0, 1))(torch.tensor(a), torch.tensor(b))
        for o_out, t_out in zip(ours, theirs):
            for o, t in zip(o_out, t_out):
                assert o.shape == tuple(t.shape)
                np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-12, atol=1e-14)


def test_vjp_and_linearize_match_torch_func():
    x = np.array([0.3, -1.2, 2.0])
    f_r = lambda v: rill.exp(v) * v  # noqa: E731
    f_t = lambda v: torch.exp(v) * v  # noqa: E731
    out, vjp_fn = F.vjp(f_r, rill.tensor(x))
    t_out, t_vjp = torch.func.vjp(f_t, torch.tensor(x))
    ct = np.array([1.0, 2.0, -1.0])
    np.testing.assert_allclose(vjp_fn(rill.tensor(ct))[0].numpy(), t_vjp(torch.tensor(ct))[0])
    np.testing.assert_allclose(vjp_fn(rill.tensor(ct))[0].numpy(), t_vjp(torch.tensor(ct))[0])
    _, jvp_fn = F.linearize(f_r, rill.tensor(x))
    _, t_jvp = torch.func.linearize(f_t, torch.tensor(x))
    for t in (ct, ct * 3):
        np.testing.assert_allclose(jvp_fn(rill.tensor(t)).numpy(), t_jvp(torch.tensor(t)))


def test_transforms_compose_grad_of_jvp_and_vmap_of_jacrev():
    x = np.array([0.5, 1.5])

    def g_r(v):
        return F.jvp(lambda u: rill.sin(u) * u, (v,), (rill.ones(2, dtype=v.dtype),))[1].sum()

    def g_t(v):
        return torch.func.jvp(lambda u: torch.sin(u) * u, (v,),
                              (torch.ones(2, dtype=v.dtype),))[1].sum()

    np.testing.assert_allclose(F.grad(g_r)(rill.tensor(x)).numpy(),
                               torch.func.grad(g_t)(torch.tensor(x)).numpy(), rtol=1e-12)
    xs = np.array([[0.1, 0.2], [1.0, -1.0], [2.0, 0.5]])
    ours = F.vmap(F.jacrev(lambda v: rill.tanh(v) * v[0]))(rill.tensor(xs))
    theirs = torch.func.vmap(torch.func.jacrev(lambda v: torch.tanh(v) * v[0]))(
        torch.tensor(xs))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_transforms_under_capture_equal_eager():
    rng = np.random.default_rng(4)
    w = rill.tensor(rng.normal(size=(3, 3)))
    xs = rill.tensor(rng.normal(size=(4, 3)))

    def per_example(xs):
        return F.vmap(F.grad(lambda x: rill.tanh(w @ x).sum() ** 2))(xs)

    def hess(x):
        return F.hessian(lambda v: (rill.sin(w @ v) ** 2).sum())(x)

    np.testing.assert_allclose(rill.capture(per_example)(xs).numpy(), per_example(xs).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(rill.capture(hess)(xs[0]).numpy(), hess(xs[0]).numpy(),
                               rtol=1e-12)


def test_functional_call_swaps_in_and_restores():
    lin = rill.nn.Linear(2, 2)
    before = lin.weight
    w = rill.eye(2)
    out = F.functional_call(lin, {"weight": w, "bias": rill.zeros(2)}, (rill.tensor([[1.0, 2.0]]),))
    np.testing.assert_array_equal(out.numpy(), [[1.0, 2.0]])
    assert lin.weight is before
    with pytest.raises(rill.ArgumentError, match="unexpected"):
        F.functional_call(lin, {"weights": w}, (rill.ones(1, 2),))
    with pytest.raises(rill.ArgumentError, match="missing"):
        F.functional_call(lin, {"weight": w}, (rill.ones(1, 2),), strict=True)


def test_bad_transform_arguments_are_rill_errors():
    with pytest.raises(rill.ShapeError, match="tangent"):
        F.jvp(rill.sin, (rill.ones(2),), (rill.ones(3),))
    with pytest.raises(rill.ArgumentError, match="tuple"):
        F.jvp(rill.sin, rill.ones(2), rill.ones(2))
    with pytest.raises(rill.ArgumentError, match="argnums"):
        F.jacrev(rill.sin, argnums=(0, 4))(rill.ones(2))
    with pytest.raises(rill.ArgumentError, match="integer|floating"):
        F.jacfwd(lambda v: v * 2)(rill.tensor([1, 2]))


def test_a_non_leaf_primal_read_through_a_view_keeps_its_gradient():
    # x * 2 is taped; indexing it reads a snapshot of it (a view op's second handle). Found
    # by identity alone, its gradient went missing: the outer derivative was silently zero.
    x = np.array([0.5, -1.0, 2.0])

    def ours(v):
        return F.jvp(lambda u: (u[0] * rill.sin(u)).sum(), (v * 2,),
                     (rill.ones(3, dtype=v.dtype),))[1]

    def theirs(v):
        return torch.func.jvp(lambda u: (u[0] * torch.sin(u)).sum(), (v * 2,),
                              (torch.ones(3, dtype=v.dtype),))[1]

    np.testing.assert_allclose(F.grad(ours)(rill.tensor(x)).numpy(),
                               torch.func.grad(theirs)(torch.tensor(x)).numpy(), rtol=1e-12)
