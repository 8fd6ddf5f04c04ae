"""rill.optim as a PyTorch user meets it (issue 17): every scheduler's rates (and cycled
momentum) are torch's floats over 60 steps, ReduceLROnPlateau reacts to a metric sequence as
torch's, `rill.optim.lr_scheduler` imports as a module, and the optimizers take torch's
constructor keywords, zero_grad(set_to_none=False), add_param_group and state_dict keys."""
from __future__ import annotations

import importlib
import inspect
import math
import warnings

import numpy as np
import pytest
import torch

import rill
import rill.optim.lr_scheduler as rill_lr
from rill import nn, optim

torch_lr = torch.optim.lr_scheduler
STEPS = 60


def _optimizers(kind):
    """The same two-group optimizer in both libraries (the second group with its own lr)."""
    def groups(make):
        return [{"params": [make()]}, {"params": [make()], "lr": 0.02}]
    rill_p = lambda: rill.nn.Parameter(rill.zeros(1))  # noqa: E731
    torch_p = lambda: torch.nn.Parameter(torch.zeros(1))  # noqa: E731
    if kind == "SGD":
        return (optim.SGD(groups(rill_p), lr=0.1, momentum=0.9),
                torch.optim.SGD(groups(torch_p), lr=0.1, momentum=0.9))
    return (optim.Adam(groups(rill_p), lr=0.1), torch.optim.Adam(groups(torch_p), lr=0.1))


def _trace(opt, sched, steps=STEPS):
    """Per step: the rates get_last_lr() reports and every group's lr and momentum/betas."""
    out = []
    for _ in range(steps):
        groups = [(g["lr"], g.get("momentum"), tuple(g.get("betas", ())))
                  for g in opt.param_groups]
        out.append((list(sched.get_last_lr()), groups))
        opt.step()
        sched.step()
    return out


class Halving:
    """A callable object: its attributes are scheduler state (state_dict saves them)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, step):
        self.calls += 1
        return 0.5 ** (step // 10)


# (id, make(L, opt)) with L the lr_scheduler module of either library.
SCHEDULERS = [
    ("StepLR", lambda L, o: L.StepLR(o, step_size=7, gamma=0.5)),
    ("MultiStepLR", lambda L, o: L.MultiStepLR(o, milestones=[5, 20, 20, 41], gamma=0.3)),
    ("ExponentialLR", lambda L, o: L.ExponentialLR(o, gamma=0.93)),
    ("CosineAnnealingLR-wraps", lambda L, o: L.CosineAnnealingLR(o, T_max=13, eta_min=0.001)),
    ("LinearLR", lambda L, o: L.LinearLR(o, start_factor=0.25, end_factor=0.9,
                                         total_iters=8)),
    ("OneCycleLR", lambda L, o: L.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=STEPS)),
    ("OneCycleLR-three-phase", lambda L, o: L.OneCycleLR(
        o, max_lr=0.4, total_steps=STEPS + 3, anneal_strategy="linear", three_phase=True)),
    ("LambdaLR", lambda L, o: L.LambdaLR(o, lr_lambda=lambda e: 0.95 ** e)),
    ("LambdaLR-per-group", lambda L, o: L.LambdaLR(
        o, lr_lambda=[lambda e: 1 / (1 + e), lambda e: math.cos(e / 10) ** 2])),
    ("MultiplicativeLR", lambda L, o: L.MultiplicativeLR(o, lr_lambda=lambda e: 0.97)),
    ("ConstantLR", lambda L, o: L.ConstantLR(o, factor=0.5, total_iters=7)),
    ("PolynomialLR", lambda L, o: L.PolynomialLR(o, total_iters=40, power=2.0)),
    ("CosineAnnealingWarmRestarts", lambda L, o: L.CosineAnnealingWarmRestarts(o, T_0=7)),
    ("CosineAnnealingWarmRestarts-mult", lambda L, o: L.CosineAnnealingWarmRestarts(
        o, T_0=5, T_mult=2, eta_min=0.01)),
    ("CyclicLR", lambda L, o: L.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=5)),
    ("CyclicLR-triangular2", lambda L, o: L.CyclicLR(
        o, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=4, step_size_down=9,
        mode="triangular2", base_momentum=[0.7, 0.75], max_momentum=0.95)),
    ("CyclicLR-exp_range", lambda L, o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=6, mode="exp_range", gamma=0.97)),
    ("CyclicLR-scale_fn", lambda L, o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=3, scale_fn=lambda x: 1 / (1 + x),
        scale_mode="iterations")),
    ("CyclicLR-no-momentum", lambda L, o: L.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=4, cycle_momentum=False)),
    ("SequentialLR", lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, 0.1, total_iters=5), L.ExponentialLR(o, 0.9),
            L.CosineAnnealingLR(o, T_max=9)], milestones=[5, 25])),
    ("SequentialLR-constant-multistep", lambda L, o: L.SequentialLR(
        o, [L.ConstantLR(o, factor=0.2, total_iters=3), L.MultiStepLR(o, [10, 30])],
        milestones=[8])),
    ("ChainedScheduler", lambda L, o: L.ChainedScheduler(
        [L.ConstantLR(o, factor=0.5, total_iters=10), L.ExponentialLR(o, gamma=0.95)])),
    ("ChainedScheduler-warm-restarts", lambda L, o: L.ChainedScheduler(
        [L.CosineAnnealingWarmRestarts(o, T_0=6), L.MultiplicativeLR(o, lambda e: 0.99)], o)),
]


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
@pytest.mark.parametrize("make", [m for _, m in SCHEDULERS], ids=[n for n, _ in SCHEDULERS])
def test_scheduler_rates_and_momentum_are_torchs(make, kind):
    ropt, topt = _optimizers(kind)
    rsched, tsched = make(rill_lr, ropt), make(torch_lr, topt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on call order
        theirs = _trace(topt, tsched)
    ours = _trace(ropt, rsched)
    assert ours == theirs  # the same floats, not just close ones
    assert len({lr for lrs, _ in ours for lr in lrs}) > 3  # the schedule did move


def test_cyclic_momentum_moves_against_the_rate():
    ropt, _ = _optimizers("SGD")
    sched = optim.CyclicLR(ropt, base_lr=0.1, max_lr=0.5, step_size_up=2, base_momentum=0.8,
                           max_momentum=0.9)
    seen = []
    for _ in range(5):
        seen.append((ropt.param_groups[0]["lr"], ropt.param_groups[0]["momentum"]))
        sched.step()
    lrs, momenta = zip(*seen)
    assert lrs == pytest.approx((0.1, 0.3, 0.5, 0.3, 0.1))
    assert momenta == pytest.approx((0.9, 0.85, 0.8, 0.85, 0.9))


def test_warm_restarts_take_fractional_epochs_as_torch():
    ropt, topt = _optimizers("SGD")
    rs = optim.CosineAnnealingWarmRestarts(ropt, T_0=3, T_mult=2, eta_min=0.005)
    ts = torch_lr.CosineAnnealingWarmRestarts(topt, T_0=3, T_mult=2, eta_min=0.005)
    for epoch in range(25):
        for batch in range(4):
            e = epoch + batch / 4
            rs.step(e)
            ts.step(e)
            assert rs.get_last_lr() == ts.get_last_lr()
            assert (rs.T_cur, rs.T_i, rs.last_epoch) == (ts.T_cur, ts.T_i, ts.last_epoch)


def test_step_with_an_epoch_jumps_as_torch():
    ropt, topt = _optimizers("SGD")
    rs = optim.MultiStepLR(ropt, milestones=[3, 7], gamma=0.5)
    ts = torch_lr.MultiStepLR(topt, milestones=[3, 7], gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation note
        for epoch in [5, 9, 2, 2, 8]:
            rs.step(epoch)
            ts.step(epoch)
            assert rs.get_last_lr() == ts.get_last_lr()


# ---- ReduceLROnPlateau -----------------------------------------------------------------------

METRICS = ([5.0, 4.0, 3.0, 3.0, 2.9999, 3.1, 3.0, 2.5, 2.5, 2.5, 2.5, 2.6, 2.4, 2.4, 2.4] +
           [2.4 + 0.01 * math.sin(i) for i in range(30)] + [1.0, 1.0, 0.9999, 1.2] * 4)

PLATEAU = [
    dict(),
    dict(patience=2, factor=0.5),
    dict(patience=0, factor=0.3, threshold=0.0),
    dict(mode="max", patience=1, threshold=0.05, threshold_mode="abs", cooldown=2),
    dict(mode="min", patience=1, threshold=0.01, threshold_mode="abs", min_lr=[0.001, 0.005]),
    dict(patience=1, factor=0.5, min_lr=0.004, eps=1e-3, cooldown=1),
]


@pytest.mark.parametrize("kwargs", PLATEAU, ids=[str(k) for k in PLATEAU])
def test_reduce_on_plateau_follows_torch(kwargs):
    ropt, topt = _optimizers("SGD")
    rs = optim.ReduceLROnPlateau(ropt, **kwargs)
    ts = torch_lr.ReduceLROnPlateau(topt, **kwargs)
    for i, metric in enumerate(METRICS):
        rs.step(metric if i % 2 else rill.tensor(metric, dtype=rill.float64))  # a number or a 0-d tensor
        ts.step(metric)
        assert rs.get_last_lr() == ts.get_last_lr()
        assert [g["lr"] for g in ropt.param_groups] == [g["lr"] for g in topt.param_groups]
        assert (rs.best, rs.num_bad_epochs, rs.cooldown_counter, rs.last_epoch) == \
            (ts.best, ts.num_bad_epochs, ts.cooldown_counter, ts.last_epoch)
    assert rs.get_last_lr()[0] < 0.1  # it did cut


# ---- state_dict --------------------------------------------------------------------------------

def _plain(obj):
    """Only dicts, lists, tuples, numbers, strings, None (what rill.save writes)."""
    if isinstance(obj, dict):
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return all(_plain(v) for v in obj)
    return isinstance(obj, (int, float, str)) or obj is None


RESUMABLE = [
    ("LambdaLR-callable-object", lambda o: optim.LambdaLR(o, Halving())),
    ("MultiplicativeLR", lambda o: optim.MultiplicativeLR(o, lambda e: 0.9)),
    ("ConstantLR", lambda o: optim.ConstantLR(o, 0.25, total_iters=15)),
    ("PolynomialLR", lambda o: optim.PolynomialLR(o, total_iters=30)),
    ("CyclicLR", lambda o: optim.CyclicLR(o, 0.01, 0.1, step_size_up=7, mode="triangular2")),
    ("CosineAnnealingWarmRestarts", lambda o: optim.CosineAnnealingWarmRestarts(o, 4, 2)),
    ("SequentialLR", lambda o: optim.SequentialLR(
        o, [optim.LinearLR(o, 0.1, total_iters=12), optim.CosineAnnealingLR(o, 9)], [12])),
    ("ChainedScheduler", lambda o: optim.ChainedScheduler(
        [optim.ExponentialLR(o, 0.9), optim.CyclicLR(o, 0.01, 0.1, step_size_up=3)])),
]


@pytest.mark.parametrize("make", [m for _, m in RESUMABLE], ids=[n for n, _ in RESUMABLE])
def test_scheduler_state_dict_resumes_the_sequence(make):
    opt, _ = _optimizers("SGD")
    straight = _trace(opt, make(opt), 30)

    opt, _ = _optimizers("SGD")
    sched = make(opt)
    first = _trace(opt, sched, 15)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    assert _plain(saved_sched)
    opt2, _ = _optimizers("SGD")
    sched2 = make(opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    assert first + _trace(opt2, sched2, 15) == straight


def test_plateau_state_dict_resumes():
    def run(split=None):
        opt, _ = _optimizers("SGD")
        sched = optim.ReduceLROnPlateau(opt, patience=1, cooldown=1)
        for i, metric in enumerate(METRICS):
            if i == split:
                saved = sched.state_dict()
                assert _plain(saved)
                sched = optim.ReduceLROnPlateau(opt)
                sched.load_state_dict(saved)
            sched.step(metric)
        return sched.get_last_lr(), sched.best
    assert run() == run(split=20)


def test_callable_object_state_is_saved_and_functions_are_not():
    opt, _ = _optimizers("SGD")
    halving = Halving()
    sched = optim.LambdaLR(opt, [halving, lambda e: 1.0])
    saved = sched.state_dict()
    assert saved["lr_lambdas"] == [{"calls": 1}, None]
    other = Halving()
    optim.LambdaLR(opt, [other, lambda e: 1.0]).load_state_dict(saved)
    assert other.calls == 1


# ---- lr_scheduler as a module --------------------------------------------------------------

def test_lr_scheduler_is_a_module_with_torchs_schedulers():
    module = importlib.import_module("rill.optim.lr_scheduler")
    assert module is rill.optim.lr_scheduler
    from rill.optim.lr_scheduler import ReduceLROnPlateau, StepLR
    assert StepLR is rill.optim.StepLR and ReduceLROnPlateau is rill.optim.ReduceLROnPlateau
    for name in ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
                 "ConstantLR", "LinearLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
                 "CosineAnnealingWarmRestarts", "CyclicLR", "OneCycleLR", "ReduceLROnPlateau",
                 "SequentialLR", "ChainedScheduler"]:
        ours, theirs = getattr(module, name), getattr(torch_lr, name)
        assert getattr(rill.optim, name) is ours
        assert list(inspect.signature(ours).parameters) == \
            list(inspect.signature(theirs).parameters), name
        for p, q in zip(inspect.signature(ours).parameters.values(),
                        inspect.signature(theirs).parameters.values()):
            assert p.default == q.default, (name, p.name)


def test_scheduler_errors():
    opt, _ = _optimizers("SGD")
    other, _ = _optimizers("SGD")
    adagrad = optim.Adagrad([rill.nn.Parameter(rill.zeros(1))])
    cases = [
        (lambda: optim.ReduceLROnPlateau(opt, factor=1.0), "factor must be a number < 1"),
        (lambda: optim.ReduceLROnPlateau(opt, mode="avg"), "mode must be 'min' or 'max'"),
        (lambda: optim.ReduceLROnPlateau(opt, threshold_mode="x"), "threshold_mode"),
        (lambda: optim.ReduceLROnPlateau(opt, min_lr=[0.1]), "min_lr has 1 values for 2"),
        (lambda: optim.ReduceLROnPlateau(opt).step("bad"), "the metric to watch"),
        (lambda: optim.CyclicLR(opt, 0.1, 1.0, mode="sawtooth"), "mode must be one of"),
        (lambda: optim.CyclicLR(opt, [0.1], 1.0), "base_lr has 1 values for 2"),
        (lambda: optim.CyclicLR(adagrad, 0.1, 1.0), "cycle_momentum=False"),
        (lambda: optim.CyclicLR(opt, 0.1, 1.0, step_size_up=0), "step_size_up"),
        (lambda: optim.LambdaLR(opt, [lambda e: 1.0]), "1 functions for 2"),
        (lambda: optim.MultiplicativeLR(opt, 0.5), "lr_lambda must be a function"),
        (lambda: optim.ConstantLR(opt, factor=1.5), "factor must be a number in"),
        (lambda: optim.PolynomialLR(opt, total_iters=0), "total_iters"),
        (lambda: optim.CosineAnnealingWarmRestarts(opt, T_0=0), "T_0"),
        (lambda: optim.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=0), "T_mult"),
        (lambda: optim.CosineAnnealingWarmRestarts(opt, T_0=2).step(-1), "epoch must be"),
        (lambda: optim.SequentialLR(opt, [optim.StepLR(opt, 2)], milestones=[3]),
         "1 schedulers need 0 milestones"),
        (lambda: optim.SequentialLR(opt, [optim.StepLR(opt, 2), optim.StepLR(other, 2)], [3]),
         "another optimizer"),
        (lambda: optim.ChainedScheduler([optim.ReduceLROnPlateau(opt)]), "needs the metric"),
        (lambda: optim.ChainedScheduler([]), "non-empty list"),
        (lambda: optim.SequentialLR(opt, [optim.StepLR(opt, 2), optim.ChainedScheduler(
            [optim.StepLR(opt, 3)])], [1]).step(), "cannot be a later part"),
    ]
    for make, message in cases:
        with pytest.raises(rill.ArgumentError, match=message):
            make()


def test_constant_lr_with_factor_zero_returns_to_the_base_rate():
    opt, _ = _optimizers("SGD")
    sched = optim.ConstantLR(opt, factor=0.0, total_iters=2)
    lrs = [lr for lrs, _ in _trace(opt, sched, 4) for lr in lrs[:1]]
    assert lrs == [0.0, 0.0, 0.1, 0.1]  # torch divides by zero at step 2


# ---- schedulers reach a captured step ----------------------------------------------------

@pytest.mark.parametrize("make_sched", [
    lambda o: optim.CyclicLR(o, 0.01, 0.2, step_size_up=2),
    lambda o: optim.SequentialLR(o, [optim.ConstantLR(o, 0.5, 2), optim.PolynomialLR(o, 5)],
                                 [2]),
], ids=["CyclicLR", "SequentialLR"])
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_schedulers_reach_a_captured_step_with_no_retrace(make_sched, kind):
    rng = np.random.default_rng(0)
    batches = [(rill.tensor(rng.standard_normal((8, 4)).astype(np.float32)),
                rill.tensor(rng.standard_normal((8, 2)).astype(np.float32))) for _ in range(6)]

    def train(captured):
        rill.manual_seed(0)
        model = nn.Linear(4, 2)
        opt = (optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if kind == "SGD" else
               optim.Adam(model.parameters(), lr=0.1))
        sched = make_sched(opt)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        run = rill.capture(step) if captured else step
        losses = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rill.CaptureWarning)  # the retrace, counted below
            for x, y in batches:
                losses.append(run(x, y).numpy().copy())
                sched.step()
        return losses, [p.numpy().copy() for p in model.parameters()], run, sched

    eager, captured = train(False), train(True)
    np.testing.assert_array_equal(eager[0], captured[0])
    for a, b in zip(eager[1], captured[1]):
        np.testing.assert_array_equal(a, b)
    # Adam traces once more when beta1 first changes (it leaves its fused kernel for ops
    # that read betas as tensors, rill.optim.adam); after that, no retrace.
    cycles_beta1 = kind == "Adam" and isinstance(captured[3], optim.CyclicLR)
    assert len(captured[2].retraces) == (1 if cycles_beta1 else 0)


# ---- optimizers: torch's keywords and API --------------------------------------------------

OPTIMIZERS = ["SGD", "Adam", "AdamW", "SparseAdam", "Adagrad", "RMSprop", "Adadelta", "LBFGS"]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_constructor_takes_torchs_keywords_in_torchs_order(name):
    ours = inspect.signature(getattr(optim, name)).parameters.values()
    theirs = inspect.signature(getattr(torch.optim, name)).parameters.values()
    assert [(p.name, p.kind) for p in ours] == [(p.name, p.kind) for p in theirs]
    for p, q in zip(ours, theirs):
        assert p.default == q.default, p.name
    r = getattr(optim, name)([rill.nn.Parameter(rill.zeros(2))])
    t = getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))])
    assert r.state_dict()["param_groups"] == t.state_dict()["param_groups"]
    assert r.defaults == t.defaults


FLAGGED = [
    ("SGD", dict(lr=0.1, momentum=0.9), dict(fused=True)),
    ("SGD", dict(lr=0.1), dict(foreach=False, fused=False)),
    ("Adam", dict(lr=0.05, amsgrad=True), dict(foreach=True, capturable=True)),
    ("AdamW", dict(lr=0.05), dict(foreach=False, capturable=True, fused=True)),
    ("Adagrad", dict(lr=0.1), dict(fused=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.5), dict(foreach=True, capturable=True)),
    ("Adadelta", dict(lr=1.0), dict(foreach=True, capturable=True)),
]


@pytest.mark.parametrize("name,kwargs,flags", FLAGGED,
                         ids=[f"{n}-{'-'.join(f)}" for n, _, f in FLAGGED])
def test_performance_flags_are_accepted_and_change_nothing(name, kwargs, flags):
    rng = np.random.default_rng(3)
    start = rng.standard_normal((3, 2))
    grads = [rng.standard_normal((3, 2)) for _ in range(4)]

    def run(opt_cls, tensor, Parameter, **extra):
        w = Parameter(tensor(start.copy()))
        opt = opt_cls([w], **kwargs, **extra)
        for g in grads:
            w.grad = tensor(g)
            opt.step()
        return np.array(w.tolist())
    plain = run(getattr(optim, name), rill.tensor, rill.nn.Parameter)
    flagged = run(getattr(optim, name), rill.tensor, rill.nn.Parameter, **flags)
    np.testing.assert_array_equal(plain, flagged)
    # (torch's capturable=True needs a GPU; its flags do not change the update either)
    theirs = run(getattr(torch.optim, name), torch.tensor, torch.nn.Parameter)
    np.testing.assert_allclose(flagged, theirs, rtol=1e-12, atol=1e-14)


def test_differentiable_and_bad_flags_are_refused():
    w = rill.nn.Parameter(rill.zeros(2))
    with pytest.raises(rill.ArgumentError, match="differentiable=True is not supported"):
        optim.Adam([w], differentiable=True)
    with pytest.raises(rill.ArgumentError, match="foreach must be None, True or False"):
        optim.SGD([w], foreach="yes")
    with pytest.raises(rill.ArgumentError, match="fused=True and foreach=True"):
        optim.Adam([w], fused=True, foreach=True)  # torch refuses the pair too
    with pytest.raises(rill.ArgumentError, match="capturable must be True or False"):
        optim.RMSprop([w], capturable=None)
    with pytest.raises(TypeError):
        optim.SGD([w], capturable=True)  # torch's SGD has no such keyword either


def test_sgd_positional_arguments_mean_what_torchs_do():
    r = optim.SGD([rill.nn.Parameter(rill.zeros(1))], 0.1, 0.9, 0.0, 0.01, True)
    t = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], 0.1, 0.9, 0.0, 0.01, True)
    assert r.state_dict()["param_groups"] == t.state_dict()["param_groups"]
    assert r.param_groups[0]["weight_decay"] == 0.01 and r.param_groups[0]["nesterov"]


def test_zero_grad_set_to_none_false_zeroes_as_torch():
    a, b = np.array([1.0, -2.0]), np.array([[0.5, 0.25]])
    results = []
    for lib, Parameter in ((rill, rill.nn.Parameter), (torch, torch.nn.Parameter)):
        w, v, unused = (Parameter(lib.tensor(a)), Parameter(lib.tensor(b)),
                        Parameter(lib.tensor(a)))
        opt = (optim if lib is rill else torch.optim).SGD([w, v, unused], lr=0.1)
        ((w * w).sum() + (v * 3).sum()).backward()
        opt.zero_grad(set_to_none=False)
        results.append([None if p.grad is None else np.array(p.grad.tolist())
                        for p in (w, v, unused)])
        opt.zero_grad()  # the default: None
        assert all(p.grad is None for p in (w, v, unused))
    ours, theirs = results
    assert ours[2] is None and theirs[2] is None  # no gradient: left as None
    for x, y in zip(ours[:2], theirs[:2]):
        np.testing.assert_array_equal(x, y)
        assert x.shape in ((2,), (1, 2)) and not x.any()


def test_add_param_group_state_and_state_dict_as_torch():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(3), rng.standard_normal((2, 2))
    ropt = optim.Adam([rill.nn.Parameter(rill.tensor(a))], lr=0.1)
    topt = torch.optim.Adam([torch.nn.Parameter(torch.tensor(a))], lr=0.1)
    ropt.add_param_group({"params": [rill.nn.Parameter(rill.tensor(b))], "lr": 0.01,
                          "betas": (0.5, 0.9)})
    topt.add_param_group({"params": [torch.nn.Parameter(torch.tensor(b))], "lr": 0.01,
                          "betas": (0.5, 0.9)})
    for _ in range(3):
        for opt in (ropt, topt):
            for group in opt.param_groups:
                for p in group["params"]:
                    p.grad = (rill if opt is ropt else torch).tensor(
                        np.cos(np.arange(np.prod(p.shape))).reshape(p.shape))
            opt.step()
    for rg, tg in zip(ropt.param_groups, topt.param_groups):
        assert {k: v for k, v in rg.items() if k != "params"} == \
            {k: v for k, v in tg.items() if k != "params"}
        for rp, tp in zip(rg["params"], tg["params"]):
            np.testing.assert_allclose(np.array(rp.tolist()), tp.detach().numpy(), rtol=1e-12)
    rsd, tsd = ropt.state_dict(), topt.state_dict()
    assert rsd["param_groups"] == tsd["param_groups"]
    assert rsd["state"].keys() == tsd["state"].keys()
    for i in rsd["state"]:
        assert set(rsd["state"][i]) == set(tsd["state"][i])
        assert float(rsd["state"][i]["step"]) == float(tsd["state"][i]["step"])
    # torch's param_groups (numbers only) load into rill's optimizer
    ropt.load_state_dict({"state": {}, "param_groups": tsd["param_groups"]})
    assert ropt.param_groups[1]["betas"] == (0.5, 0.9)
