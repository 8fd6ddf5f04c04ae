"""Guards (issue 15): Python values a trace baked in are checked before each call; a change
traces again and says once, plainly, what changed."""
from __future__ import annotations

import warnings

import numpy as np

import rill
from rill import nn


def _retraces(fn, calls):
    """Run calls(); return the CaptureWarnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls()
    return [str(w.message) for w in caught if issubclass(w.category, rill.CaptureWarning)]


def test_switching_train_and_eval_retraces_and_says_why_once():
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    fast = rill.capture(model)
    x = rill.randn(8, 4)

    def calls():
        fast(x)
        model.eval()
        evaluated = fast(x).numpy()
        np.testing.assert_allclose(evaluated, model(x).numpy(), rtol=1e-6)  # no dropout
        fast(x)
        model.train()
        fast(x)
        model.eval()
        fast(x)

    said = _retraces(fast, calls)
    assert len(said) == 1, said  # train -> eval traces; back to train, then eval, reuse
    assert len(fast.retraces) == 1
    assert "Sequential.training was True when traced and is False now" in said[0]
    assert fast.retraces.count(fast.retraces[0]) == 1


def test_changing_requires_grad_of_a_parameter_retraces_and_says_which():
    rill.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = rill.optim.SGD(model.parameters(), lr=0.1)

    @rill.capture
    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    x = rill.randn(4, 3)
    step(x)
    before = model.bias.numpy().copy()
    model.bias.requires_grad_(False)  # freeze the bias
    said = _retraces(step, lambda: step(x))
    assert len(said) == 1 and "bias.requires_grad was True when traced and is False now" in \
        said[0], said
    np.testing.assert_array_equal(model.bias.numpy(), before)  # frozen: not updated
    assert model.bias.grad is None and model.weight.grad is not None  # as eagerly


def test_a_guard_registered_by_library_code_retraces_on_change():
    flags = {"scale": 2.0}

    @rill.capture
    def f(x):
        rill.capture_guard("flags['scale']", lambda: flags["scale"])
        return x * flags["scale"]

    x = rill.ones(2)
    assert f(x).numpy().tolist() == [2.0, 2.0]
    flags["scale"] = 3.0
    said = _retraces(f, lambda: f(x))
    assert f(x).numpy().tolist() == [3.0, 3.0]
    assert len(said) == 1 and "flags['scale'] was 2.0 when traced and is 3.0 now" in said[0]
