"""A transformed function may read tensors it does not take as arguments: a closure over what
an enclosing transform differentiates, or over what the tape outside records. Their
derivatives must reach those tensors, as in PyTorch (torch.func): before, every case here
gave zeros or an untaped result, silently."""
import numpy as np
import pytest
import torch

import rill

RNG = np.random.default_rng(4)
X0, W0 = RNG.standard_normal(3), RNG.standard_normal((3, 2))


def _f(x, w):
    return ((x @ w).sin() * x.sum()).sum()


def _vec(x, w):
    return (x @ w).sin() * x.sum()


def _inner(fw, func, kind):
    """A function of x that runs transform `kind` over w, closing over x."""
    one = fw.tensor(1.0, dtype=fw.float64)
    w = fw.tensor(W0)
    return {
        "grad": lambda x: (func.grad(lambda v: _f(x, v))(w) ** 2).sum(),
        "vjp": lambda x: func.vjp(lambda v: _f(x, v), w)[1](one)[0].sum(),
        "vjp value": lambda x: func.vjp(lambda v: _f(x, v), w)[0],
        "jvp": lambda x: func.jvp(lambda v: _f(x, v), (w,), (fw.ones_like(w),))[1],
        "jvp value": lambda x: func.jvp(lambda v: _f(x, v), (w,), (fw.ones_like(w),))[0],
        "jacrev": lambda x: func.jacrev(lambda v: _vec(x, v))(w).sum(),
        "jacfwd": lambda x: func.jacfwd(lambda v: _vec(x, v))(w).sum(),
        "hessian": lambda x: func.hessian(lambda v: _f(x, v))(w).sum(),
    }[kind]


KINDS = ["grad", "vjp", "vjp value", "jvp", "jvp value", "jacrev", "jacfwd", "hessian"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_transform_inside_grad_differentiates_its_closure(kind):
    got = rill.grad(_inner(rill, rill.func, kind))(rill.tensor(X0))
    want = torch.func.grad(_inner(torch, torch.func, kind))(torch.tensor(X0))
    assert np.abs(want.numpy()).max() > 0.1  # the case has something to miss
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_a_transform_under_the_tape_differentiates_its_closure(kind):
    """x.requires_grad outside, the transform's function reads x: backward reaches x."""
    x = rill.tensor(X0, requires_grad=True)
    _inner(rill, rill.func, kind)(x).backward()
    xt = torch.tensor(X0, requires_grad=True)
    _inner(torch, torch.func, kind)(xt).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_three_levels_of_closures():
    def f(fw, func, x):
        def middle(y):
            return func.grad(lambda z: (z * x * y).sin().sum())(fw.tensor(X0)).sum()
        return func.grad(middle)(fw.tensor(X0) * 0.5).sum()
    got = rill.grad(lambda x: f(rill, rill.func, x))(rill.tensor(X0))
    want = torch.func.grad(lambda x: f(torch, torch.func, x))(torch.tensor(X0))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_a_plain_grad_stays_untaped():
    """No enclosing transform and nothing taped outside: the gradient is a plain value (no
    tape kept for it), as before."""
    w = rill.tensor(W0)
    g = rill.grad(lambda v: _f(rill.tensor(X0), v))(w)
    assert not g.requires_grad
    x = rill.tensor(X0, requires_grad=True)  # read, but under no_grad: nothing taped
    with rill.no_grad():
        assert not rill.grad(lambda v: _f(x, v))(w).requires_grad


def test_a_loop_without_a_higher_order_rule_gives_the_gradient_and_refuses_more():
    """A captured GRU runs as scan, which has no higher-order rule yet: the input gradient of
    a function closing over its parameters is computed as before, and differentiating it
    further raises instead of treating it as a constant."""
    gru = rill.nn.GRU(3, 4, dtype=rill.float64)
    x = rill.tensor(np.random.default_rng(0).standard_normal((5, 2, 3)))
    step = rill.capture(lambda x: rill.grad(lambda x: gru(x)[0].sum())(x))
    got = step(x)
    eager = rill.grad(lambda x: gru(x)[0].sum())(x)
    np.testing.assert_allclose(got.numpy(), eager.numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(rill.GradientError):
        (got ** 2).sum().backward()
    (eager ** 2).sum().backward()  # eagerly the loop is Python: second order works
    assert float(gru.weight_ih_l0.grad.abs().sum()) > 0


def test_the_refusing_gradient_raises_its_refusal_when_differentiated():
    from rill.autodiff.grad import _refusing
    w = rill.tensor([2.0], requires_grad=True)
    g = _refusing(rill.tensor([3.0]), [w], rill.GradientError("no rule here", op="scan"))
    assert g.tolist() == [3.0] and g.requires_grad
    with pytest.raises(rill.GradientError, match="scan: no rule here"):
        (g * w).sum().backward()
