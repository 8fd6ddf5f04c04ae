"""rill.nn's activations against torch.nn's: modules and functional forms, forward in
float64 and float32, input (and PReLU weight) gradients, inplace=, and bad arguments."""
import numpy as np
import pytest
import torch

import rill
from rill import nn
from rill.nn import functional as F

TF = torch.nn.functional
# Points on and around the kinks (-3, -1, 0, 1, 3, 6) and a random spread.
POINTS = np.concatenate([[-3.0, -1.0, 0.0, 1.0, 3.0, 6.0, -30.0, 30.0],
                         np.random.default_rng(0).uniform(-8, 8, 40)])

# (rill module, torch module): the same constructor arguments on both sides.
MODULES = [
    ("SELU", (), {}), ("CELU", (0.7,), {}), ("Hardsigmoid", (), {}), ("Hardswish", (), {}),
    ("Hardtanh", (-2.0, 1.5), {}), ("ReLU6", (), {}), ("Mish", (), {}), ("Softsign", (), {}),
    ("Tanhshrink", (), {}), ("LogSigmoid", (), {}), ("Threshold", (0.5, -2.0), {}),
    ("ReLU", (), {}), ("LeakyReLU", (0.2,), {}), ("ELU", (0.5,), {}), ("SiLU", (), {}),
    ("Softplus", (), {"beta": 2.0, "threshold": 5.0}), ("GELU", (), {"approximate": "tanh"}),
]


def compare(rill_fn, torch_fn, x, dtype, tol):
    xr = rill.tensor(x.astype(dtype), requires_grad=True)
    xt = torch.tensor(x.astype(dtype), requires_grad=True)
    yr, yt = rill_fn(xr), torch_fn(xt)
    np.testing.assert_allclose(yr.numpy(), yt.detach().numpy(), **tol)
    weights = np.linspace(-1, 1, yr.size).reshape(yr.shape).astype(dtype)
    (yr * rill.tensor(weights)).sum().backward()
    (yt * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), **tol)


# float64 to 1e-7 relative: some of PyTorch's float64 gradients round a constant to
# float32 (hardsigmoid's 1/6), so bit-level agreement is not the bar; formula slips are O(1).
@pytest.mark.parametrize("dtype,tol", [(np.float64, dict(rtol=1e-7, atol=1e-12)),
                                       (np.float32, dict(rtol=2e-6, atol=2e-6))])
@pytest.mark.parametrize("name,args,kwargs", MODULES, ids=[m[0] for m in MODULES])
def test_module_matches_torch(name, args, kwargs, dtype, tol):
    if name == "CELU" and dtype == np.float64:
        # PyTorch's CELU gradient is off by ~2e-7 relative far left (rill's agrees with the
        # exact exp(x / alpha) there; test_celu_gradient_is_exact checks that).
        tol = dict(rtol=1e-6, atol=1e-12)
    compare(getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs),
            POINTS, dtype, tol)


def test_celu_gradient_is_exact():
    x = rill.tensor(POINTS, requires_grad=True)
    F.celu(x, 0.7).sum().backward()
    exact = np.where(POINTS > 0, 1.0, np.exp(POINTS / 0.7))
    np.testing.assert_allclose(x.grad.numpy(), exact, rtol=1e-10, atol=1e-15)


FUNCTIONS = [
    ("selu", {}), ("celu", {"alpha": 1.0}), ("hardsigmoid", {}), ("hardswish", {}),
    ("hardtanh", {"min_val": 0.0, "max_val": 2.0}), ("relu6", {}), ("mish", {}),
    ("softsign", {}), ("tanhshrink", {}), ("logsigmoid", {}),
    ("threshold", {"threshold": 1.0, "value": 0.0}), ("relu", {}),
    ("leaky_relu", {"negative_slope": 0.3}), ("elu", {"alpha": 2.0}), ("silu", {}),
    ("softplus", {"beta": 0.5}),
]


@pytest.mark.parametrize("name,kwargs", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_functional_matches_torch(name, kwargs):
    compare(lambda x: getattr(F, name)(x, **kwargs), lambda x: getattr(TF, name)(x, **kwargs),
            POINTS, np.float64, dict(rtol=1e-7, atol=1e-12))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_glu_softmin(dim):
    x = np.random.default_rng(1).standard_normal((4, 6, 2))
    tol = dict(rtol=1e-12, atol=1e-12)
    compare(nn.GLU(dim), torch.nn.GLU(dim), x, np.float64, tol)
    compare(nn.Softmin(dim), torch.nn.Softmin(dim), x, np.float64, tol)
    compare(lambda t: F.softmin(t, dim=dim), lambda t: TF.softmin(t, dim=dim), x,
            np.float64, tol)


@pytest.mark.parametrize("num_parameters,shape", [(1, (5,)), (1, (3, 4, 5)), (4, (3, 4, 5)),
                                                  (4, (2, 4))])
def test_prelu_weight_and_gradients(num_parameters, shape):
    x = np.random.default_rng(2).standard_normal(shape)
    mine, ref = nn.PReLU(num_parameters, init=0.1), torch.nn.PReLU(num_parameters, init=0.1)
    assert list(mine.state_dict()) == list(ref.state_dict()) == ["weight"]
    assert mine.weight.shape == tuple(ref.weight.shape)
    mine.double(), ref.double()
    ref.load_state_dict({"weight": torch.tensor(np.array([0.1, -0.2, 0.3, 0.5])[
        :num_parameters])})
    mine.load_state_dict({k: rill.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    compare(mine, ref, x, np.float64, dict(rtol=1e-12, atol=1e-12))
    np.testing.assert_allclose(mine.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-12)


def test_inplace_functional_updates_the_input_object():
    x = rill.tensor([-1.0, 0.5, 7.0])
    y = F.relu6(x, inplace=True)
    assert y is x and x.tolist() == [0.0, 0.5, 6.0]
    z = rill.tensor([-1.0, 2.0])
    assert F.relu(z).tolist() == [0.0, 2.0] and z.tolist() == [-1.0, 2.0]  # not in place
    drop = rill.ones(8)
    assert F.dropout(drop, 1.0, inplace=True) is drop and drop.tolist() == [0.0] * 8


def test_inplace_on_a_non_leaf_keeps_gradients():
    """As PyTorch: an activation in place on an intermediate gives the out-of-place
    gradients; rill's tape sees an out-of-place op on the old value."""
    data = np.array([-2.0, -0.5, 0.5, 2.0, 4.0])
    xr = rill.tensor(data, requires_grad=True)
    xt = torch.tensor(data, requires_grad=True)
    hr = xr * 2.0
    out_r = nn.Hardswish(inplace=True)(hr)
    assert out_r is hr
    out_t = torch.nn.Hardswish(inplace=True)(xt * 2.0)
    np.testing.assert_allclose(out_r.numpy(), out_t.detach().numpy(), rtol=1e-12)
    out_r.sum().backward(), out_t.sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_inplace_on_a_leaf_that_requires_grad_is_refused():
    x = rill.tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(rill.GradientError, match="leaf"):
        F.elu(x, inplace=True)
    with rill.no_grad():  # allowed under no_grad, as PyTorch
        F.leaky_relu(x, 0.5, inplace=True)
    assert x.tolist() == [1.0, -0.5]


def test_every_inplace_module_accepts_the_flag():
    for name in ("ReLU", "ReLU6", "SELU", "CELU", "SiLU", "Mish", "Hardsigmoid", "Hardswish",
                 "Hardtanh", "LeakyReLU", "ELU", "Dropout"):
        module = getattr(nn, name)(inplace=True)
        assert module.inplace and "inplace=True" in repr(module)
    assert nn.Threshold(0.1, 20, inplace=True).inplace


def test_captured_activations_match_eager():
    x = rill.tensor(POINTS)

    def f(t):
        return F.hardswish(F.celu(t, 0.5)) + F.mish(t) * F.logsigmoid(t) + F.glu(
            rill.stack([t, t]), dim=0)

    captured = rill.capture(f)
    np.testing.assert_allclose(captured(x).numpy(), f(x).numpy(), rtol=1e-12)


@pytest.mark.parametrize("make,error,match", [
    (lambda: nn.CELU(0.0), rill.ArgumentError, "alpha"),
    (lambda: nn.Hardtanh(1.0, -1.0), rill.ArgumentError, "min_val"),
    (lambda: nn.ReLU(inplace="yes"), rill.ArgumentError, "inplace"),
    (lambda: nn.PReLU(0), rill.ArgumentError, "num_parameters"),
    (lambda: F.glu(rill.ones(3, 5)), rill.ShapeError, "odd"),
    (lambda: F.prelu(rill.ones(2, 3), rill.ones(4)), rill.ShapeError, "channels"),
    (lambda: nn.PReLU(3)(rill.ones(3)), rill.ShapeError, "channels"),  # 1-d: one channel
    (lambda: F.selu(rill.tensor([1, 2])), rill.DTypeError, "floating"),
    (lambda: F.relu6([1.0], inplace=True), rill.ArgumentError, "inplace"),
])
def test_bad_arguments_raise_rill_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()
