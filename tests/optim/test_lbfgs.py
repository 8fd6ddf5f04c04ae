"""rill.optim.LBFGS against torch.optim.LBFGS: the same closure from the same start takes the
same iterates (float64, to rounding), with and without the strong-Wolfe line search; the
counters and history carry across step() calls and through state_dict(); a captured
function may not call it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.optim.line_search import cubic_minimizer

F64 = np.float64


def rosenbrock(x):
    return ((1 - x[:-1]) ** 2).sum() + 100 * ((x[1:] - x[:-1] ** 2) ** 2).sum()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((30, 5))
    w = rng.standard_normal((5, 2))
    y = X @ w + 0.3 * rng.standard_normal((30, 2))
    labels = (X @ rng.standard_normal(5) + 0.5 * rng.standard_normal(30) > 0).astype(F64)
    return X, y, labels


def least_squares(lib, params, X, y):
    W, b = params
    r = X @ W + b - y
    return (r * r).mean()


def logistic(lib, params, X, labels):
    w, b = params
    z = X @ w + b
    # softplus(z) - label * z, the negative log-likelihood, with the library's own softplus;
    # an L2 term keeps the optimum finite
    return (lib.nn.functional.softplus(z) - labels * z).mean() + 0.05 * (w * w).sum()


PROBLEMS = {
    "rosenbrock": ([np.array([-1.5, 2.0, 0.3, -0.7])], lambda lib, ps, *_: rosenbrock(ps[0])),
    "least_squares": ([np.zeros((5, 2)), np.zeros(2)], least_squares),
    "logistic": ([np.full(5, 0.1), np.zeros(())], logistic),
}


def _both(problem, dtype=F64, **kwargs):
    """(rill params, optimizer, closure), (torch ...) for one problem from the same start."""
    inits, loss_fn = PROBLEMS[problem]
    X, y, labels = _data()
    extra = (X, labels) if problem == "logistic" else (X, y)
    out = []
    for lib, tensor, Parameter, optim in (
            (rill, lambda a: rill.tensor(a.astype(dtype)), rill.nn.Parameter, rill.optim),
            (torch, lambda a: torch.tensor(a.astype(dtype)), torch.nn.Parameter, torch.optim)):
        params = [Parameter(tensor(a)) for a in inits]
        data = [tensor(a) for a in extra]
        opt = optim.LBFGS(params, **kwargs)

        def closure(lib=lib, params=params, data=data, opt=opt):
            opt.zero_grad()
            loss = loss_fn(lib, params, *data)
            loss.backward()
            return loss
        out.append((params, opt, closure))
    return out


def _values(params):
    return [np.asarray(p.detach().numpy() if isinstance(p, torch.Tensor) else p.numpy())
            for p in params]


CASES = [
    ("rosenbrock", dict(lr=0.1, max_iter=10, history_size=5)),
    ("rosenbrock", dict(line_search_fn="strong_wolfe", max_iter=15, history_size=4)),
    ("rosenbrock", dict(lr=1, line_search_fn="strong_wolfe")),  # torch's defaults otherwise
    ("least_squares", dict(lr=0.5, max_iter=6)),
    ("least_squares", dict(line_search_fn="strong_wolfe", max_iter=8, history_size=3)),
    ("logistic", dict(lr=1, max_iter=7, max_eval=9, history_size=2)),
    ("logistic", dict(line_search_fn="strong_wolfe", max_iter=5)),
]


@pytest.mark.parametrize("problem,kwargs", CASES,
                         ids=[f"{p}-{'-'.join(f'{k}={v}' for k, v in kw.items())}"
                              for p, kw in CASES])
def test_iterates_equal_torch(problem, kwargs):
    (rp, ropt, rclosure), (tp, topt, tclosure) = _both(problem, **kwargs)
    moved = False
    for _ in range(6):
        ours, theirs = ropt.step(rclosure), topt.step(tclosure)
        assert isinstance(ours, rill.Tensor)  # the closure's own first loss
        np.testing.assert_allclose(float(ours), theirs.item(), rtol=1e-10, atol=1e-14)
        for a, b in zip(_values(rp), _values(tp)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        rs, ts = ropt.state[rp[0]], topt.state[tp[0]]
        assert (rs["func_evals"], rs["n_iter"]) == (ts["func_evals"], ts["n_iter"])
        assert len(rs["old_dirs"]) == len(ts["old_dirs"])
        moved = moved or rs["n_iter"] > 1
    assert moved
    # and it optimizes: the loss went down a lot from the start
    assert float(rclosure()) < 0.9 * float(_both(problem, **kwargs)[0][2]())


def test_float32_follows_torch_closely():
    (rp, ropt, rclosure), (tp, topt, tclosure) = _both(
        "least_squares", dtype=np.float32, line_search_fn="strong_wolfe", max_iter=5)
    for _ in range(2):
        ropt.step(rclosure)
        topt.step(tclosure)
    for a, b in zip(_values(rp), _values(tp)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_stops_at_the_optimum_and_counts_evaluations_as_torch():
    # A quadratic is solved within a few iterations; the next steps stop at once (one
    # evaluation each, the gradient test), as torch's do.
    (rp, ropt, rclosure), (tp, topt, tclosure) = _both(
        "least_squares", line_search_fn="strong_wolfe", max_iter=100, tolerance_grad=1e-6)
    for _ in range(3):
        ropt.step(rclosure)
        topt.step(tclosure)
        rs, ts = ropt.state[rp[0]], topt.state[tp[0]]
        assert (rs["func_evals"], rs["n_iter"]) == (ts["func_evals"], ts["n_iter"])
    assert rs["n_iter"] < 100
    X, y, _ = _data()
    A = np.hstack([X, np.ones((30, 1))])
    best = np.linalg.lstsq(A, y, rcond=None)[0]
    np.testing.assert_allclose(_values(rp)[0], best[:5], atol=1e-5)


def test_a_parameter_without_gradient_stays_put():
    rill_ps = [rill.nn.Parameter(rill.tensor([3.0, -2.0], dtype=rill.float64)),
               rill.nn.Parameter(rill.tensor([7.0], dtype=rill.float64))]
    torch_ps = [torch.nn.Parameter(torch.tensor([3.0, -2.0], dtype=torch.float64)),
                torch.nn.Parameter(torch.tensor([7.0], dtype=torch.float64))]
    for ps, opt_cls, lib in ((rill_ps, rill.optim.LBFGS, rill), (torch_ps, torch.optim.LBFGS,
                                                                  torch)):
        opt = opt_cls(ps, line_search_fn="strong_wolfe")

        def closure(ps=ps, opt=opt):
            opt.zero_grad()
            loss = (ps[0] ** 4).sum() + (ps[0] ** 2).sum()
            loss.backward()
            return loss
        opt.step(closure)
        opt.step(closure)
    for a, b in zip(_values(rill_ps), _values(torch_ps)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert _values(rill_ps)[1].tolist() == [7.0]


def test_state_dict_round_trip_continues_the_same_iterates():
    def run(resume_after=None):
        (rp, ropt, rclosure), _ = _both("rosenbrock", line_search_fn="strong_wolfe",
                                        max_iter=4, history_size=3)
        for i in range(4):
            values = _values(rp)
            if i == resume_after:
                saved = ropt.state_dict()
                snapshot = [t.numpy().copy() for t in saved["state"][0]["old_dirs"]]
                ropt.step(rclosure)  # changes the optimizer, not what was saved
                assert [t.numpy().tolist() for t in saved["state"][0]["old_dirs"]] == \
                    [a.tolist() for a in snapshot]
                fresh = rill.optim.LBFGS(rp, line_search_fn="strong_wolfe", max_iter=4,
                                         history_size=3)
                with rill.no_grad():
                    for p, v in zip(rp, values):
                        p.copy_(rill.tensor(v))
                fresh.load_state_dict(saved)
                ropt = fresh
            ropt.step(rclosure)
        return _values(rp), ropt.state[rp[0]]
    straight, state = run()
    resumed, state2 = run(resume_after=2)
    np.testing.assert_array_equal(straight[0], resumed[0])
    assert (state["func_evals"], state["n_iter"]) == (state2["func_evals"], state2["n_iter"])
    # torch's state keys (all but its scratch list "al")
    assert set(state) == {"func_evals", "n_iter", "d", "t", "old_dirs", "old_stps", "ro",
                          "H_diag", "prev_flat_grad", "prev_loss"}


def test_load_state_dict_checks_the_vectors():
    (rp, ropt, rclosure), _ = _both("rosenbrock", max_iter=3)
    ropt.step(rclosure)
    saved = ropt.state_dict()
    other = rill.optim.LBFGS([rill.nn.Parameter(rill.zeros(3, dtype=rill.float64))])
    with pytest.raises(rill.ArgumentError, match="flat vector of 3"):
        other.load_state_dict(saved)


def test_cubic_minimizer_finds_the_cubic_minimum():
    # f(x) = (x - 1)^3 - 3 (x - 1): minimum at x = 2; values and slopes at 0 and 3.
    f = lambda x: (x - 1) ** 3 - 3 * (x - 1)  # noqa: E731
    df = lambda x: 3 * (x - 1) ** 2 - 3  # noqa: E731
    assert cubic_minimizer(0.0, f(0.0), df(0.0), 3.0, f(3.0), df(3.0)) == pytest.approx(2.0)
    assert cubic_minimizer(3.0, f(3.0), df(3.0), 0.0, f(0.0), df(0.0)) == pytest.approx(2.0)
    # clamped to the bounds given; no real minimum gives the middle of the bounds
    assert cubic_minimizer(0.0, f(0.0), df(0.0), 3.0, f(3.0), df(3.0), (0.0, 1.5)) == 1.5
    assert cubic_minimizer(0.0, 0.0, 1.5, 1.0, 1.0, 1.5, (0.0, 4.0)) == 2.0


def test_errors():
    w = rill.nn.Parameter(rill.zeros(2))
    opt = rill.optim.LBFGS([w])
    with pytest.raises(rill.ArgumentError, match="needs a closure"):
        opt.step()
    with pytest.raises(rill.ArgumentError, match="one parameter group"):
        rill.optim.LBFGS([{"params": [w]}, {"params": [rill.nn.Parameter(rill.zeros(1))]}])
    with pytest.raises(rill.ArgumentError, match="one parameter group"):
        opt.add_param_group({"params": [rill.nn.Parameter(rill.zeros(1))]})
    with pytest.raises(rill.ArgumentError, match="line_search_fn"):
        rill.optim.LBFGS([w], line_search_fn="wolfe")
    with pytest.raises(rill.ArgumentError, match="history_size"):
        rill.optim.LBFGS([w], history_size=0)
    with pytest.raises(rill.ArgumentError, match="max_iter"):
        rill.optim.LBFGS([w], max_iter=2.5)
    assert rill.optim.LBFGS([w], max_iter=8).defaults["max_eval"] == 10  # torch's default


def test_a_captured_function_may_not_call_step():
    w = rill.nn.Parameter(rill.tensor([1.0, 2.0]))
    opt = rill.optim.LBFGS([w])

    @rill.capture
    def train(x):
        def closure():
            opt.zero_grad()
            loss = ((w - x) ** 2).sum()
            loss.backward()
            return loss
        return opt.step(closure)

    with pytest.raises(rill.CaptureError, match="LBFGS.*eagerly"):
        train(rill.tensor([0.0, 0.0]))
    assert w.tolist() == [1.0, 2.0]
