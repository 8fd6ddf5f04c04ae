"""rill.optim against torch.optim: optimizers step for step, schedulers rate for rate,
gradient clipping, sparse (embedding) gradients, parameter groups, state_dict, errors."""
import math

import numpy as np
import pytest
import torch

import rill

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # torch's, not ours

F32 = np.float32
NAMES = ("w1", "b1", "w2")


# ---- a small problem computed the same way in both frameworks -----------------------------

def _problem():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((8, 4)).astype(F32),
            "y": rng.standard_normal((8, 2)).astype(F32),
            "w1": (0.5 * rng.standard_normal((4, 5))).astype(F32),
            "b1": (0.1 * rng.standard_normal(5)).astype(F32),
            "w2": (0.5 * rng.standard_normal((5, 2))).astype(F32)}


def _rill_loss(params, data):
    w1, b1, w2 = params
    h = rill.tanh(rill.tensor(data["x"]) @ w1 + b1)
    return ((h @ w2 - rill.tensor(data["y"])) ** 2).mean()


def _torch_loss(params, data):
    w1, b1, w2 = params
    h = torch.tanh(torch.tensor(data["x"]) @ w1 + b1)
    return ((h @ w2 - torch.tensor(data["y"])) ** 2).mean()


def _params(data):
    return ([rill.nn.Parameter(rill.tensor(data[k])) for k in NAMES],
            [torch.nn.Parameter(torch.tensor(data[k])) for k in NAMES])


def _train(opt, params, data, steps, loss=_rill_loss):
    for _ in range(steps):
        opt.zero_grad()
        loss(params, data).backward()
        opt.step()


def _close(rill_params, torch_params, rtol=1e-5, atol=1e-6):
    for name, r, t in zip(NAMES, rill_params, torch_params):
        np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.5, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.5, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.02, betas=(0.3, 0.8), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, maximize=True, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.5, amsgrad=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.1)),
    ("Adagrad", dict(lr=0.05, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.3, centered=True, momentum=0.5, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.01)),
    ("Adadelta", dict(lr=2.0, maximize=True)),
]


def _id(config):
    name, kwargs = config
    return name + "(" + ",".join(f"{k}={v}" for k, v in kwargs.items()) + ")"


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_five_steps_match_torch(config):
    name, kwargs = config
    data = _problem()
    rp, tp = _params(data)
    _train(getattr(rill.optim, name)(rp, **kwargs), rp, data, 5)
    _train(getattr(torch.optim, name)(tp, **kwargs), tp, data, 5, loss=_torch_loss)
    _close(rp, tp)
    moved = max(np.abs(r.numpy() - data[k]).max() for k, r in zip(NAMES, rp))
    assert moved > 1e-3  # far more than the tolerance: a step that did nothing would fail


@pytest.mark.parametrize("name,defaults,group", [
    ("SGD", dict(lr=0.05, momentum=0.9), dict(lr=0.2, nesterov=True)),
    ("Adam", dict(lr=0.01), dict(lr=0.05, betas=(0.5, 0.9))),
    ("RMSprop", dict(lr=0.01), dict(lr=0.001, centered=True)),
])
def test_parameter_groups_with_their_own_hyperparameters(name, defaults, group):
    data = _problem()
    rp, tp = _params(data)
    ropt = getattr(rill.optim, name)([{"params": rp[:2], **group}, {"params": [rp[2]]}],
                                     **defaults)
    topt = getattr(torch.optim, name)([{"params": tp[:2], **group}, {"params": [tp[2]]}],
                                      **defaults)
    assert ropt.param_groups[0]["lr"] == group["lr"]
    assert ropt.param_groups[1]["lr"] == defaults["lr"]
    _train(ropt, rp, data, 5)
    _train(topt, tp, data, 5, loss=_torch_loss)
    _close(rp, tp)


def test_add_param_group_later_matches_torch():
    data = _problem()
    rp, tp = _params(data)
    ropt, topt = rill.optim.Adam(rp[:2], lr=0.01), torch.optim.Adam(tp[:2], lr=0.01)
    _train(ropt, rp, data, 2)
    _train(topt, tp, data, 2, loss=_torch_loss)
    ropt.add_param_group({"params": [rp[2]], "lr": 0.03})
    topt.add_param_group({"params": [tp[2]], "lr": 0.03})
    assert ropt.param_groups[1]["betas"] == (0.9, 0.999)
    _train(ropt, rp, data, 3)
    _train(topt, tp, data, 3, loss=_torch_loss)
    _close(rp, tp)


# ---- updates are in place: the model's parameter objects train ----------------------------

@pytest.mark.parametrize("config", [c for c in CONFIGS if not c[1].get("maximize")][::2],
                         ids=_id)
def test_step_updates_the_models_parameter_objects(config):
    name, kwargs = config
    data = _problem()
    rp, _ = _params(data)
    model_params = list(rp)
    snapshot = rp[0].detach()
    opt = getattr(rill.optim, name)(rp, **kwargs)
    _rill_loss(rp, data).backward()
    grad = rp[0].grad
    grad_before = grad.numpy().copy()
    opt.step()
    assert all(a is b for a, b in zip(opt.param_groups[0]["params"], model_params))
    assert type(rp[0]) is rill.nn.Parameter and rp[0].requires_grad and rp[0].is_leaf
    assert not np.array_equal(rp[0].numpy(), data["w1"])   # the value changed ...
    np.testing.assert_array_equal(snapshot.numpy(), data["w1"])  # ... a snapshot did not
    assert rp[0].grad is grad
    np.testing.assert_array_equal(grad.numpy(), grad_before)  # the gradient is untouched
    for slot in opt.state.get(rp[0], {}).values():
        assert slot is not grad and slot is not rp[0]


def test_momentum_buffer_is_not_the_gradient():
    w = rill.nn.Parameter(rill.tensor([1.0, 2.0]))
    opt = rill.optim.SGD([w], lr=0.1, momentum=0.9)
    (w * 3.0).sum().backward()
    grad = w.grad
    opt.step()
    opt.step()  # updates the buffer in place: the gradient must not change with it
    np.testing.assert_array_equal(grad.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(opt.state[w]["momentum_buffer"].numpy(), [5.7, 5.7], rtol=1e-6)


def test_step_records_nothing_on_the_tape():
    w = rill.nn.Parameter(rill.tensor([1.0, 2.0]))
    opt = rill.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert w.is_leaf and w.requires_grad
    assert all(t._node is None for t in opt.state[w].values() if isinstance(t, rill.Tensor))


def test_step_with_closure_returns_its_loss():
    data = _problem()
    rp, tp = _params(data)
    ropt, topt = rill.optim.SGD(rp, lr=0.1), torch.optim.SGD(tp, lr=0.1)

    def closure():
        ropt.zero_grad()
        loss = _rill_loss(rp, data)
        loss.backward()
        return loss

    def torch_closure():
        topt.zero_grad()
        loss = _torch_loss(tp, data)
        loss.backward()
        return loss

    with rill.no_grad():  # the closure still records: step() turns grad mode on for it
        loss = ropt.step(closure)
    np.testing.assert_allclose(float(loss), topt.step(torch_closure).item(), rtol=1e-6)
    _close(rp, tp)


def test_zero_grad():
    w = rill.nn.Parameter(rill.tensor([1.0, 2.0]))
    v = rill.nn.Parameter(rill.zeros(3, 2))
    opt = rill.optim.SGD([w, v], lr=0.1)
    ((w * w).sum() + v[rill.tensor([1])].sum()).backward()
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(v.grad), np.zeros((3, 2)))
    opt.zero_grad()
    assert w.grad is None and v.grad is None
    opt.step()  # no gradients: nothing moves
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


# ---- state_dict ----------------------------------------------------------------------------

ROUND_TRIP = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.1)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5)),
    ("Adadelta", dict(lr=0.5)),
]


def _plain(obj):
    """Only dicts, lists, tuples, numbers, strings and rill tensors (what rill.save writes)."""
    if isinstance(obj, dict):
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return all(_plain(v) for v in obj)
    return isinstance(obj, (int, float, str, rill.Tensor)) or obj is None


@pytest.mark.parametrize("config", ROUND_TRIP, ids=_id)
def test_state_dict_round_trip_mid_training(config):
    name, kwargs = config
    cls = getattr(rill.optim, name)
    data = _problem()
    straight, _ = _params(data)
    _train(cls(straight, **kwargs), straight, data, 5)

    resumed, tp = _params(data)
    opt = cls(resumed, **kwargs)
    _train(opt, resumed, data, 3)
    saved = opt.state_dict()
    assert _plain(saved)
    frozen = {k: v.numpy().copy() for k, v in saved["state"][0].items()
              if isinstance(v, rill.Tensor)}
    assert frozen
    fresh = cls(resumed, **{**kwargs, "lr": 123.0})  # hyperparameters come from the dict too
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == kwargs["lr"]
    _train(fresh, resumed, data, 2)
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for k, v in frozen.items():  # training on did not change the saved dict
        np.testing.assert_array_equal(saved["state"][0][k].numpy(), v)

    # The layout is torch's: parameter indices, slot names, group hyperparameters.
    topt = getattr(torch.optim, name)(tp, **kwargs)
    _train(topt, tp, data, 1, loss=_torch_loss)
    tsaved = topt.state_dict()
    assert saved["state"].keys() == tsaved["state"].keys()
    assert all(saved["state"][i].keys() == tsaved["state"][i].keys() for i in saved["state"])
    assert saved["param_groups"][0]["params"] == tsaved["param_groups"][0]["params"]
    assert set(saved["param_groups"][0]) <= set(tsaved["param_groups"][0])


def test_state_dict_saves_with_rill_save(tmp_path):
    data = _problem()
    rp, _ = _params(data)
    opt = rill.optim.Adam(rp, lr=0.01)
    _train(opt, rp, data, 2)
    loaded = rill.load(rill.save(opt.state_dict(), str(tmp_path / "opt.rill")))
    again = rill.optim.Adam(rp, lr=0.5)
    again.load_state_dict(loaded)
    assert again.param_groups[0]["betas"] == (0.9, 0.999)
    assert again.param_groups[0]["lr"] == 0.01
    np.testing.assert_array_equal(again.state[rp[1]]["exp_avg"].numpy(),
                                  opt.state[rp[1]]["exp_avg"].numpy())


def test_load_state_dict_says_what_differs():
    data = _problem()
    rp, _ = _params(data)
    opt = rill.optim.Adam(rp, lr=0.01)
    _train(opt, rp, data, 1)
    saved = opt.state_dict()
    with pytest.raises(rill.ArgumentError, match="has 1 parameter group, this optimizer has 2"):
        rill.optim.Adam([{"params": rp[:1]}, {"params": rp[1:]}]).load_state_dict(saved)
    with pytest.raises(rill.ArgumentError, match="group 0 has 3 parameters.*2 in this"):
        rill.optim.Adam(rp[:2]).load_state_dict(saved)
    swapped = [rp[1], rp[0], rp[2]]
    with pytest.raises(rill.ArgumentError, match="'exp_avg' of parameter 0 has shape"):
        rill.optim.Adam(swapped).load_state_dict(saved)
    with pytest.raises(rill.ArgumentError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"state": {}})


# ---- sparse gradients (embedding tables) ---------------------------------------------------

LOOKUPS = [[1, 3, 1], [3, 5], [1, 1, 1], [5, 0]]  # rows 2, 4 and 6 are never looked up
UNTOUCHED = [2, 4, 6]


def _sparse_train(name, kwargs):
    rng = np.random.default_rng(1)
    table = rng.standard_normal((7, 3)).astype(F32)
    scale = rng.standard_normal((3, 3)).astype(F32)
    w = rill.nn.Parameter(rill.tensor(table))
    tw = torch.nn.Parameter(torch.tensor(table))
    ropt = getattr(rill.optim, name)([w], **kwargs)
    topt = getattr(torch.optim, name)([tw], **kwargs)
    for idx in LOOKUPS:
        ropt.zero_grad()
        (w[rill.tensor(idx)] * rill.tensor(scale[:len(idx)])).sum().backward()
        assert isinstance(w.grad, rill.SparseRows)
        ropt.step()
        topt.zero_grad()
        emb = torch.nn.functional.embedding(torch.tensor(idx), tw, sparse=True)
        (emb * torch.tensor(scale[:len(idx)])).sum().backward()
        assert tw.grad.is_sparse
        topt.step()
    return table, w, tw, ropt


SPARSE = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9)),  # densified; rows never looked up still stay
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, initial_accumulator_value=0.1, maximize=True)),
    ("SparseAdam", dict(lr=0.01)),
    ("SparseAdam", dict(lr=0.05, betas=(0.8, 0.9), eps=1e-6, maximize=True)),
]


@pytest.mark.parametrize("config", SPARSE, ids=_id)
def test_sparse_gradients_match_torch_and_update_only_touched_rows(config):
    name, kwargs = config
    table, w, tw, opt = _sparse_train(name, kwargs)
    final = w.numpy()
    np.testing.assert_array_equal(final[UNTOUCHED], table[UNTOUCHED])  # bit for bit
    touched = [0, 1, 3, 5]
    assert np.abs(final[touched] - table[touched]).min() > 1e-4
    np.testing.assert_allclose(final, tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    for key, slot in opt.state.get(w, {}).items():
        if key != "step" and name != "SGD":  # the step count is a 0-d tensor, not a row slot
            initial = kwargs.get("initial_accumulator_value", 0.0)
            np.testing.assert_array_equal(slot.numpy()[UNTOUCHED], np.float32(initial))


def test_sparse_adam_is_lazy_where_adam_is_not():
    # Row 0 is looked up at step 1 only: SparseAdam leaves it alone afterwards.
    w = rill.nn.Parameter(rill.ones(3, 2))
    opt = rill.optim.SparseAdam([w], lr=0.1)
    w[rill.tensor([0, 1])].sum().backward()
    opt.step()
    after_first = w.numpy()[0].copy()
    opt.zero_grad()
    w[rill.tensor([1])].sum().backward()
    opt.step()
    np.testing.assert_array_equal(w.numpy()[0], after_first)
    assert opt.state[w]["step"] == 2


@pytest.mark.parametrize("name", ["Adam", "AdamW", "RMSprop", "Adadelta"])
def test_dense_state_optimizers_apply_a_sparse_gradient_as_its_dense_form(name):
    idx = rill.tensor([1, 2, 1])
    updated = []
    for sparse in (True, False):
        w = rill.nn.Parameter(rill.ones(4, 2))
        opt = getattr(rill.optim, name)([w], lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            (w[idx] * rill.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
            if not sparse:
                w.grad = w.grad.to_dense()
            assert isinstance(w.grad, rill.SparseRows) == sparse
            opt.step()
        updated.append(w.numpy().copy())
    np.testing.assert_array_equal(updated[0], updated[1])
    assert not np.array_equal(updated[0], np.ones((4, 2)))


def test_sparse_adam_refuses_dense_gradients():
    w = rill.nn.Parameter(rill.ones(4, 2))
    opt = rill.optim.SparseAdam([w])
    (w * w).sum().backward()
    with pytest.raises(rill.ArgumentError, match="rill.optim.Adam"):
        opt.step()


def test_adagrad_refuses_weight_decay_with_sparse_gradients():
    w = rill.nn.Parameter(rill.ones(4, 2))
    opt = rill.optim.Adagrad([w], weight_decay=0.1)
    w[rill.tensor([1])].sum().backward()
    with pytest.raises(rill.ArgumentError, match="weight_decay.*sparse"):
        opt.step()


# ---- schedulers ----------------------------------------------------------------------------

SCHEDULERS = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[11, 2, 5, 5], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=7, eta_min=0.001)),
    ("CosineAnnealingLR", dict(T_max=30)),
    ("LinearLR", dict()),
    ("LinearLR", dict(start_factor=0.25, end_factor=0.9, total_iters=8)),
    ("OneCycleLR", dict(max_lr=[0.5, 1.0], total_steps=30)),
    ("OneCycleLR", dict(max_lr=0.5, epochs=3, steps_per_epoch=10, pct_start=0.25,
                        anneal_strategy="linear", three_phase=True, base_momentum=0.8)),
    ("OneCycleLR", dict(max_lr=0.5, total_steps=30, cycle_momentum=False)),
]


def _sched_optimizers(kind="SGD"):
    def groups(make):
        return [{"params": [make()]}, {"params": [make()], "lr": 0.02}]
    if kind == "SGD":
        return (rill.optim.SGD(groups(lambda: rill.nn.Parameter(rill.zeros(1))), lr=0.1,
                               momentum=0.9),
                torch.optim.SGD(groups(lambda: torch.nn.Parameter(torch.zeros(1))), lr=0.1,
                                momentum=0.9))
    return (rill.optim.Adam(groups(lambda: rill.nn.Parameter(rill.zeros(1))), lr=0.1),
            torch.optim.Adam(groups(lambda: torch.nn.Parameter(torch.zeros(1))), lr=0.1))


def _trace(opt, sched, steps, key):
    out = []
    for _ in range(steps):
        out.append((sched.get_last_lr(), [g[key] for g in opt.param_groups]))
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
@pytest.mark.parametrize("config", SCHEDULERS, ids=_id)
def test_scheduler_sequences_equal_torch(config, kind):
    name, kwargs = config
    ropt, topt = _sched_optimizers(kind)
    rsched = getattr(rill.optim, name)(ropt, **kwargs)
    tsched = getattr(torch.optim.lr_scheduler, name)(topt, **kwargs)
    key = "momentum" if kind == "SGD" else "betas"
    ours, theirs = _trace(ropt, rsched, 30, key), _trace(topt, tsched, 30, key)
    assert ours == theirs  # the same floats, not just close ones
    assert len({lr for (lrs, _), in zip(ours) for lr in lrs}) > 3


def test_one_cycle_refuses_to_step_past_total_steps():
    opt, _ = _sched_optimizers()
    sched = rill.optim.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(rill.ArgumentError, match="total_steps is 3"):
        sched.step()


def test_one_cycle_needs_momentum_to_cycle_it():
    opt = rill.optim.Adagrad([rill.nn.Parameter(rill.zeros(1))])
    with pytest.raises(rill.ArgumentError, match="cycle_momentum"):
        rill.optim.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    rill.optim.OneCycleLR(opt, max_lr=1.0, total_steps=3, cycle_momentum=False)


@pytest.mark.parametrize("start_factor", [0.1, 0.5])
def test_linear_warmup_then_cosine_equals_torch_sequential(start_factor):
    ropt, topt = _sched_optimizers()
    cosine = rill.optim.CosineAnnealingLR(ropt, T_max=12, eta_min=0.001)
    rsched = rill.optim.LinearWarmup(ropt, warmup_steps=5, start_factor=start_factor,
                                     then=cosine)
    L = torch.optim.lr_scheduler
    tsched = L.SequentialLR(topt, [L.LinearLR(topt, start_factor, 1.0, total_iters=5),
                                   L.CosineAnnealingLR(topt, T_max=12, eta_min=0.001)],
                            milestones=[5])
    ours = [lr for lrs, _ in _trace(ropt, rsched, 30, "lr") for lr in lrs]
    theirs = [lr for lrs, _ in _trace(topt, tsched, 30, "lr") for lr in lrs]
    # Warmup rates are computed from the base (torch's LinearLR chains them): equal to
    # rounding; from the hand-over on, the same floats.
    np.testing.assert_allclose(ours, theirs, rtol=1e-13)
    assert ours[10:] == theirs[10:]


def test_linear_warmup_alone_starts_from_zero_by_default():
    opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=0.8)
    sched = rill.optim.LinearWarmup(opt, warmup_steps=4)
    lrs = [lr for lrs, _ in _trace(opt, sched, 7, "lr") for lr in lrs]
    assert lrs == [0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 0.8, 0.8]


@pytest.mark.parametrize("make", [
    lambda opt: rill.optim.CosineAnnealingLR(opt, T_max=6),
    lambda opt: rill.optim.MultiStepLR(opt, milestones=[3, 8, 8]),
    lambda opt: rill.optim.OneCycleLR(opt, max_lr=1.0, total_steps=25),
    lambda opt: rill.optim.LinearWarmup(opt, 4, 0.1, then=rill.optim.ExponentialLR(opt, 0.8)),
], ids=["cosine", "multistep", "onecycle", "warmup"])
def test_scheduler_state_dict_resumes_the_sequence(make):
    opt, _ = _sched_optimizers()
    sched = make(opt)
    straight = _trace(opt, sched, 20, "momentum")

    opt, _ = _sched_optimizers()
    sched = make(opt)
    first = _trace(opt, sched, 10, "momentum")
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    assert _plain(saved_sched)
    opt2, _ = _sched_optimizers()
    sched2 = make(opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    assert first + _trace(opt2, sched2, 10, "momentum") == straight


def test_scheduler_sets_the_rate_the_optimizer_uses():
    w = rill.nn.Parameter(rill.tensor([1.0]))
    opt = rill.optim.SGD([w], lr=1.0)
    sched = rill.optim.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    w.grad = rill.tensor([1.0])
    opt.step()
    np.testing.assert_array_equal(w.numpy(), [0.5])
    assert rill.optim.lr_scheduler.StepLR is rill.optim.StepLR


def test_scheduler_errors():
    opt, _ = _sched_optimizers()
    with pytest.raises(rill.ArgumentError, match="optimizer"):
        rill.optim.StepLR(object(), step_size=2)
    with pytest.raises(rill.ArgumentError, match="step_size"):
        rill.optim.StepLR(opt, step_size=0)
    with pytest.raises(rill.ArgumentError, match="start_factor"):
        rill.optim.LinearLR(opt, start_factor=0.0)
    with pytest.raises(rill.ArgumentError, match="total_steps"):
        rill.optim.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(rill.ArgumentError, match="initial_lr"):
        rill.optim.StepLR(rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))]), 2, last_epoch=4)


# ---- gradient clipping ---------------------------------------------------------------------

def _grads():
    rng = np.random.default_rng(2)
    return [rng.standard_normal(s).astype(F32) for s in [(3, 4), (4,), (2, 2, 2)]]


def _with_grads(grads):
    rp = [rill.nn.Parameter(rill.zeros(*g.shape)) for g in grads]
    tp = [torch.nn.Parameter(torch.zeros(*g.shape)) for g in grads]
    for r, t, g in zip(rp, tp, grads):
        r.grad, t.grad = rill.tensor(g), torch.tensor(g)
    return rp, tp


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0, 0.5])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    rp, tp = _with_grads(_grads())
    total = rill.optim.clip_grad_norm_(rp, max_norm, norm_type=norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type=norm_type)
    assert isinstance(total, rill.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-5)
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
    clipped = float(total) > max_norm
    assert clipped == (max_norm == 0.5)


@pytest.mark.parametrize("norm_type", [2.0, math.inf, -math.inf])
def test_clip_grad_norm_of_sparse_gradients_is_that_of_the_dense_ones(norm_type):
    table = rill.nn.Parameter(rill.zeros(5, 2))
    dense = rill.nn.Parameter(rill.zeros(3))
    c = rill.tensor([[1.0, 2.0], [3.0, -4.0], [0.5, 0.5]])
    ((table[rill.tensor([1, 3, 1])] * c).sum() + (dense * rill.tensor([1.0, -2.0, 2.0])).sum()
     ).backward()
    assert isinstance(table.grad, rill.SparseRows)
    expected = [np.asarray(table.grad), dense.grad.numpy()]
    tp = [torch.nn.Parameter(torch.zeros(5, 2)), torch.nn.Parameter(torch.zeros(3))]
    for t, g in zip(tp, expected):
        t.grad = torch.tensor(g)
    total = rill.optim.clip_grad_norm_([table, dense], 1.0, norm_type=norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tp, 1.0, norm_type=norm_type)
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-6)
    assert isinstance(table.grad, rill.SparseRows)
    np.testing.assert_allclose(np.asarray(table.grad), tp[0].grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(dense.grad.numpy(), tp[1].grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_nonfinite():
    grads = _grads()
    grads[1][2] = np.nan
    rp, _ = _with_grads(grads)
    with pytest.raises(rill.GradientError, match="error_if_nonfinite"):
        rill.optim.clip_grad_norm_(rp, 1.0, error_if_nonfinite=True)
    np.testing.assert_array_equal(rp[0].grad.numpy(), grads[0])  # nothing was scaled
    assert math.isnan(float(rill.optim.clip_grad_norm_(rp, 1.0)))
    assert float(rill.optim.clip_grad_norm_([rill.nn.Parameter(rill.zeros(2))], 1.0)) == 0.0


def test_clip_grad_value_matches_torch():
    rp, tp = _with_grads(_grads())
    rill.optim.clip_grad_value_(rp, 0.7)
    torch.nn.utils.clip_grad_value_(tp, 0.7)
    for r, t in zip(rp, tp):
        np.testing.assert_array_equal(r.grad.numpy(), t.grad.numpy())
    assert max(np.abs(r.grad.numpy()).max() for r in rp) == np.float32(0.7)


def test_clip_grad_value_clips_the_sums_of_repeated_rows():
    table = rill.nn.Parameter(rill.zeros(4, 1))
    (table[rill.tensor([2, 2, 0])] * rill.tensor([[0.6], [0.6], [-0.3]])).sum().backward()
    rill.optim.clip_grad_value_(table, 1.0)
    np.testing.assert_allclose(np.asarray(table.grad), [[-0.3], [0.0], [1.0], [0.0]])


# ---- bad input -----------------------------------------------------------------------------

ALL = ["SGD", "Adam", "AdamW", "SparseAdam", "Adagrad", "RMSprop", "Adadelta"]


@pytest.mark.parametrize("name", ALL)
def test_negative_learning_rate(name):
    with pytest.raises(rill.ArgumentError, match=r"invalid lr -0.1: it must be"):
        getattr(rill.optim, name)([rill.nn.Parameter(rill.zeros(2))], lr=-0.1)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SparseAdam"])
@pytest.mark.parametrize("betas,which", [((1.0, 0.999), "beta1 1.0"), ((0.9, -0.1), "beta2 -0.1")])
def test_betas_outside_unit_interval(name, betas, which):
    with pytest.raises(rill.ArgumentError, match=f"invalid {which}"):
        getattr(rill.optim, name)([rill.nn.Parameter(rill.zeros(2))], betas=betas)


def test_bad_parameter_lists():
    w = rill.nn.Parameter(rill.zeros(2))
    with pytest.raises(rill.ArgumentError, match="empty parameter list"):
        rill.optim.SGD([], lr=0.1)
    with pytest.raises(rill.ArgumentError, match="single Parameter; wrap it in a list"):
        rill.optim.SGD(w, lr=0.1)
    with pytest.raises(rill.ArgumentError, match="given twice.*this group"):
        rill.optim.Adam([w, w])
    opt = rill.optim.Adam([w])
    with pytest.raises(rill.ArgumentError, match="parameter 0 of group 1 is given twice.*group 0"):
        opt.add_param_group({"params": [w]})
    assert len(opt.param_groups) == 1
    with pytest.raises(rill.ArgumentError, match="int64; only floating"):
        rill.optim.SGD([rill.tensor([1, 2])], lr=0.1)
    with pytest.raises(rill.ArgumentError, match="ndarray, not a rill tensor"):
        rill.optim.SGD([np.zeros(2)], lr=0.1)
    with pytest.raises(rill.ArgumentError, match="set"):
        rill.optim.SGD([{"params": {w}}], lr=0.1)
    with pytest.raises(rill.ArgumentError, match="Nesterov"):
        rill.optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(rill.ArgumentError, match="invalid momentum"):
        rill.optim.SGD([w], lr=0.1, momentum=-1.0)
    with pytest.raises(rill.ArgumentError, match="invalid rho"):
        rill.optim.Adadelta([w], rho=1.5)
    with pytest.raises(rill.ArgumentError, match="invalid lr"):
        rill.optim.SGD([{"params": [w], "lr": -1.0}], lr=0.1)  # groups are checked too


def test_aliases_and_defaults_are_torchs():
    assert rill.optim.AdaGrad is rill.optim.Adagrad
    assert rill.optim.RMSProp is rill.optim.RMSprop
    assert rill.optim.AdaDelta is rill.optim.Adadelta
    for name in ALL:
        w = rill.nn.Parameter(rill.zeros(2))
        ours = getattr(rill.optim, name)([w]).defaults
        theirs = getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))]).defaults
        assert {k: theirs[k] for k in ours} == ours, name
    assert "Parameter Group 0" in repr(rill.optim.SGD([w]))


def test_load_state_dict_refuses_another_optimizers_state():
    w = rill.nn.Parameter(rill.ones(2))
    sgd = rill.optim.SGD([w], lr=0.1, momentum=0.9)
    (w * w).sum().backward()
    sgd.step()
    adam = rill.optim.Adam([w], lr=0.5)
    with pytest.raises(rill.ArgumentError, match="another optimizer"):
        adam.load_state_dict(sgd.state_dict())
    with pytest.raises(rill.ArgumentError, match="keyed by parameter index"):
        adam.load_state_dict({"state": {"a": {}},
                              "param_groups": adam.state_dict()["param_groups"]})
    assert adam.param_groups[0]["lr"] == 0.5  # nothing changed


def test_scheduler_refuses_another_schedulers_state():
    opt = rill.optim.SGD([rill.nn.Parameter(rill.ones(1))], lr=0.1)
    step = rill.optim.StepLR(opt, step_size=2)
    with pytest.raises(rill.ArgumentError, match="state_dict\\(\\) of a StepLR"):
        step.load_state_dict(rill.optim.ExponentialLR(opt, gamma=0.9).state_dict())
    assert step.step_size == 2
