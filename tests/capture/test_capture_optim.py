"""Optimizer hyper-parameters under capture (issue 15): a learning rate, momentum or betas
changed between steps (by a scheduler or by hand) reaches a captured training step with no
retrace, because the optimizer holds them as 0-d tensors the graph reads by reference; every
other hyper-parameter a trace bakes in is guarded, so changing it traces again, once, and
says why. Each case trains the same model eagerly and captured and asks for equal bits."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import rill
from rill import nn, optim


def _batches(n=5, seed=1, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [(rill.tensor(rng.standard_normal((8, 6)).astype(dtype)),
             rill.tensor(rng.standard_normal((8, 3)).astype(dtype))) for _ in range(n)]


def _model(dtype=None):
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    return model.to(dtype) if dtype is not None else model


def _train(make_opt, between, captured, *, steps=5, dtype=None, setup=None):
    """Train `steps` steps; after step i, between(opt, extra, i) changes what it changes.
    Returns (model, losses, the step function, its CaptureWarnings)."""
    model = _model(dtype)
    opt = make_opt(list(model.parameters()))
    extra = setup(opt) if setup else None

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = rill.capture(step) if captured else step
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, y) in enumerate(_batches(steps, dtype=np.float64 if dtype is rill.float64
                                            else np.float32)):
            losses.append(run(x, y).numpy().copy())
            between(opt, extra, i)
    said = [str(w.message) for w in caught if issubclass(w.category, rill.CaptureWarning)]
    return model, losses, run, said


def _same(eager, captured):
    """Equal bits: the captured step runs the same ops on the same values."""
    model_e, losses_e = eager[:2]
    model_c, losses_c = captured[:2]
    np.testing.assert_array_equal(losses_c, losses_e)
    for (name, a), (_, b) in zip(model_e.named_parameters(), model_c.named_parameters()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)


def _compare(make_opt, between, setup=None, dtype=None):
    eager = _train(make_opt, between, captured=False, setup=setup, dtype=dtype)
    captured = _train(make_opt, between, captured=True, setup=setup, dtype=dtype)
    _same(eager, captured)
    return captured[2]  # the captured function, for its retraces


# id, optimizer, the momentum-like value a test changes (twice) and to what, how many
# retraces those two changes cost, and what a retrace must name. Values held as tensors cost
# none; a guarded value costs one per change. Adam's fused kernel takes betas as constants:
# the first change of betas traces again (with betas as tensors), later ones do not.
OPTIMIZERS = [
    ("sgd", lambda ps: optim.SGD(ps, lr=0.1), "momentum", (0.5, 0.3), 1, "momentum"),
    ("sgd-momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), "momentum", (0.5, 0.3), 0,
     None),
    ("sgd-nesterov", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                          weight_decay=1e-2), "momentum", (0.5, 0.3), 0, None),
    ("sgd-dampening", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5,
                                           maximize=True), "momentum", (0.5, 0.3), 0, None),
    ("adam", lambda ps: optim.Adam(ps, lr=1e-2), "betas", ((0.8, 0.99), (0.7, 0.9)), 1,
     "betas"),
    ("adam-l2", lambda ps: optim.Adam(ps, lr=1e-2, weight_decay=1e-2), "betas",
     ((0.8, 0.99), (0.7, 0.9)), 1, "betas"),
    ("adamw", lambda ps: optim.AdamW(ps, lr=1e-2), "betas", ((0.8, 0.99), (0.7, 0.9)), 1,
     "betas"),
    ("adam-amsgrad", lambda ps: optim.Adam(ps, lr=1e-2, amsgrad=True), "betas",
     ((0.8, 0.99), (0.7, 0.9)), 0, None),
    ("adamw-amsgrad", lambda ps: optim.AdamW(ps, lr=1e-2, amsgrad=True), "betas",
     ((0.3, 0.99), (0.7, 0.9)), 1, "betas"),  # 1 - beta1 crosses 0.5: lerp's other form
    ("adagrad", lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01), "lr_decay", (0.05, 0.1),
     2, "lr_decay"),
    ("rmsprop", lambda ps: optim.RMSprop(ps, lr=1e-2), "momentum", (0.5, 0.3), 1, "momentum"),
    ("rmsprop-centered", lambda ps: optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True,
                                                  weight_decay=1e-2), "momentum", (0.2, 0.4),
     0, None),
    ("adadelta", lambda ps: optim.Adadelta(ps, lr=1.0), "rho", (0.8, 0.7), 2, "rho"),
]
IDS = [case[0] for case in OPTIMIZERS]


@pytest.mark.parametrize("name,make_opt,key,values,retraces,reason", OPTIMIZERS, ids=IDS)
def test_step_lr_reaches_a_captured_step_with_no_retrace(name, make_opt, key, values,
                                                         retraces, reason):
    step = _compare(make_opt, lambda opt, sched, i: sched.step(),
                    setup=lambda opt: optim.StepLR(opt, step_size=2, gamma=0.5))
    assert step.retraces == []


@pytest.mark.parametrize("name,make_opt,key,values,retraces,reason", OPTIMIZERS, ids=IDS)
def test_manual_lr_change_reaches_a_captured_step_with_no_retrace(name, make_opt, key, values,
                                                                  retraces, reason):
    def between(opt, _, i):
        if i == 1:
            opt.param_groups[0]["lr"] *= 0.3
        elif i == 3:
            opt.param_groups[0]["lr"] = 0.07
    step = _compare(make_opt, between)
    assert step.retraces == []


@pytest.mark.parametrize("name,make_opt,key,values,retraces,reason", OPTIMIZERS, ids=IDS)
def test_momentum_change_reaches_a_captured_step(name, make_opt, key, values, retraces,
                                                 reason):
    def between(opt, _, i):
        if i in (1, 3):
            opt.param_groups[0][key] = values[i // 2]
    step = _compare(make_opt, between)
    assert len(step.retraces) == retraces, step.retraces
    for why in step.retraces:
        assert f"{type(make_opt([rill.zeros(1)])).__name__}.param_groups[0]['{reason}']" in why


@pytest.mark.parametrize("name,make_opt", [
    ("sgd-momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("adam", lambda ps: optim.Adam(ps, lr=1e-2)),
    ("adamw", lambda ps: optim.AdamW(ps, lr=1e-2)),
    ("rmsprop", lambda ps: optim.RMSprop(ps, lr=1e-2, momentum=0.5)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_float64_parameters_take_the_changed_rates_exactly(name, make_opt):
    def between(opt, _, i):
        opt.param_groups[0]["lr"] *= 0.7
    eager = _train(make_opt, between, captured=False, dtype=rill.float64)
    captured = _train(make_opt, between, captured=True, dtype=rill.float64)
    _same(eager, captured)
    assert captured[2].retraces == []


LOW_PRECISION = [
    ("sgd-dampening", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5,
                                           weight_decay=1e-2), "momentum", (0.5, 0.3)),
    ("adam", lambda ps: optim.Adam(ps, lr=1e-2, eps=1e-3), "betas", ((0.8, 0.99), (0.7, 0.9))),
    ("adamw", lambda ps: optim.AdamW(ps, lr=1e-2, eps=1e-3), "lr", (0.02, 0.01)),
    ("adamw-amsgrad", lambda ps: optim.AdamW(ps, lr=1e-2, eps=1e-3, amsgrad=True), "betas",
     ((0.8, 0.99), (0.7, 0.9))),
    ("rmsprop-centered", lambda ps: optim.RMSprop(ps, lr=1e-2, eps=1e-3, momentum=0.5,
                                                  centered=True), "momentum", (0.2, 0.4)),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name,make_opt,key,values", LOW_PRECISION,
                         ids=[case[0] for case in LOW_PRECISION])
def test_low_precision_parameters_take_the_changed_values_exactly(dtype, name, make_opt, key,
                                                                  values):
    # bfloat16 kernels work in float32 storage and round once: the captured ops must too.
    def between(opt, _, i):
        opt.param_groups[0]["lr"] *= 0.7
        if i in (1, 3):
            opt.param_groups[0][key] = values[i // 2]
    dtype = getattr(rill, dtype)
    eager = _train(make_opt, between, captured=False, dtype=dtype)
    captured = _train(make_opt, between, captured=True, dtype=dtype)
    _same(eager, captured)
    assert all(np.isfinite(p.numpy()).all() for p in captured[0].parameters())


@pytest.mark.parametrize("make_opt", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: optim.Adam(ps, lr=1e-2),
    lambda ps: optim.AdamW(ps, lr=1e-2, amsgrad=True),
    lambda ps: optim.RMSprop(ps, lr=1e-2, momentum=0.5),
], ids=["sgd", "adam", "adamw-amsgrad", "rmsprop"])
def test_one_cycle_moves_lr_and_momentum_every_step_with_no_retrace(make_opt):
    step = _compare(make_opt, lambda opt, sched, i: sched.step(), setup=lambda opt:
                    optim.OneCycleLR(opt, max_lr=0.05, total_steps=6))
    assert step.retraces == []


def test_groups_keep_their_own_rates():
    def make_opt(ps):
        return optim.SGD([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02}], lr=0.1,
                         momentum=0.9)

    def between(opt, sched, i):
        sched.step()
        opt.param_groups[1]["momentum"] = 0.5
    step = _compare(make_opt, between,
                    setup=lambda opt: optim.StepLR(opt, step_size=1, gamma=0.5))
    assert step.retraces == []


def test_a_guarded_value_retraces_once_and_says_which():
    def between(opt, _, i):
        if i == 1:
            opt.param_groups[0]["eps"] = 1e-6
    eager = _train(lambda ps: optim.Adam(ps, lr=1e-2), between, captured=False)
    captured = _train(lambda ps: optim.Adam(ps, lr=1e-2), between, captured=True)
    _same(eager, captured)
    assert captured[2].retraces == [
        "step is traced again because Adam.param_groups[0]['eps'] was 1e-08 when traced and "
        "is 1e-06 now"]
    assert captured[3] == captured[2].retraces  # said as a CaptureWarning, once


def test_nesterov_switched_on_retraces_and_matches_eager():
    def between(opt, _, i):
        if i == 2:
            opt.param_groups[0]["nesterov"] = True
    step = _compare(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), between)
    assert len(step.retraces) == 1 and "['nesterov']" in step.retraces[0]


def test_load_state_dict_reaches_a_captured_step():
    donor = optim.Adam(list(_model().parameters()), lr=3e-3, betas=(0.8, 0.95))
    saved = donor.state_dict()

    def between(opt, _, i):
        if i == 1:
            state = opt.state_dict()
            state["param_groups"] = saved["param_groups"]
            opt.load_state_dict(state)
    step = _compare(lambda ps: optim.Adam(ps, lr=1e-2), between)
    assert len(step.retraces) == 1 and "['betas']" in step.retraces[0]  # fused: see OPTIMIZERS


def test_a_param_group_added_after_tracing_retraces():
    extra = nn.Parameter(rill.ones(3))

    def between(opt, _, i):
        if i == 1:
            opt.add_param_group({"params": [extra], "lr": 0.5})
    step = _compare(lambda ps: optim.SGD(ps, lr=0.1), between)
    assert len(step.retraces) == 1 and "param_groups" in step.retraces[0]


def test_groups_are_still_plain_numbers_for_user_code():
    opt = optim.Adam([nn.Parameter(rill.ones(2))], lr=0.1)
    group = opt.param_groups[0]
    assert isinstance(group, dict) and type(group["lr"]) is float and group["lr"] == 0.1
    group["lr"] *= 0.5
    group.update(betas=(0.5, 0.6))
    assert group["lr"] == 0.05 and group["betas"] == (0.5, 0.6)
    packed = opt.state_dict()["param_groups"][0]
    assert type(packed) is dict and packed["lr"] == 0.05
    assert not any(isinstance(v, rill.Tensor) for v in packed.values())


def test_changing_a_rate_inside_a_captured_step_is_refused():
    model = _model()
    opt = optim.SGD(list(model.parameters()), lr=0.1)
    sched = optim.StepLR(opt, step_size=1, gamma=0.5)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()  # Python: it would run once, while tracing, and never again
        return loss

    x, y = _batches(1)[0]
    with pytest.raises(rill.CaptureError, match="outside the captured function"):
        step(x, y)
    assert opt.param_groups[0]["lr"] == 0.1


def test_a_group_replaced_by_a_plain_dict_is_guarded_whole():
    def between(opt, _, i):
        if i == 1:
            opt.param_groups[0] = dict(opt.param_groups[0])  # torch code does this
        elif i == 2:
            opt.param_groups[0]["lr"] = 0.03  # a plain dict: only a guard can see it
    step = _compare(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), between)
    assert len(step.retraces) == 2, step.retraces
    assert "SGD.param_groups was [a group at" in step.retraces[0]
    assert "SGD.param_groups[0]['lr'] was 0.1 when traced and is 0.03 now" in step.retraces[1]


@pytest.mark.parametrize("kind", ["norm", "value"])
def test_a_clip_threshold_in_a_tensor_reaches_a_captured_step(kind):
    def run(captured):
        model = _model()
        opt = optim.SGD(list(model.parameters()), lr=0.1, momentum=0.9)
        limit = rill.tensor(0.05)

        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            if kind == "norm":
                optim.clip_grad_norm_(model.parameters(), limit)
            else:
                optim.clip_grad_value_(model.parameters(), limit)
            opt.step()
            return loss
        fn = rill.capture(step) if captured else step
        losses = []
        for i, (x, y) in enumerate(_batches()):
            losses.append(fn(x, y).numpy().copy())
            limit[()] = [0.2, 0.01, 1e-3, 0.5, 0.1][i]  # in place: the same tensor
        return model, losses, fn

    eager, captured = run(False), run(True)
    _same(eager, captured)
    assert captured[2].retraces == []


def test_hyper_tensors_follow_the_group_and_are_named_after_it():
    model = _model()
    opt = optim.Adam(list(model.parameters()), lr=1e-2, amsgrad=True)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    assert opt.hyper_tensors() == []  # eager steps need none
    step(*_batches(1)[0])
    opt.param_groups[0].update(lr=0.5, betas=(0.25, 0.75))
    named = [(name, t.item()) for name, t in opt.hyper_tensors()]
    assert named == [("param_groups[0].lr", 0.5), ("param_groups[0].betas.0", 0.25),
                     ("param_groups[0].betas.1", 0.75)]
    with pytest.raises(rill.ArgumentError, match="cannot become"):
        opt.param_groups[0]["betas"] = (0.5,)
