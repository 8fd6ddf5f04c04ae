"""Python values a trace reads (issue 32): numbers, bools and strings read from globals,
closure cells and attributes of the objects a captured function reaches are guarded, so a
change traces again (saying once what changed) and the captured result stays the eager one;
what capture cannot watch is said. And tensor arguments that backward would reach are
refused with advice that, followed, gives the eager result."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import rill
from rill import nn

lr = 0.1             # annealed by test_a_global_learning_rate_annealed_between_calls
SCALE = 2.0          # read by a helper the captured function calls
gain = rill.tensor(1.0)  # a 0-d tensor changed in place: the advice in the retrace message


def _said(calls):
    """Run calls(); return the CaptureWarnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls()
    return [str(w.message) for w in caught if issubclass(w.category, rill.CaptureWarning)]


def _sgd_by_hand(model):
    """word_language_model's update: p.data.add_(p.grad, alpha=-lr), lr a module global."""
    def step(x, y):
        model.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        return loss
    return step


def test_a_global_learning_rate_annealed_between_calls():
    global lr
    x, y = rill.randn(8, 3), rill.randn(8, 1)
    results = {}
    for captured in (False, True):
        lr = 0.1
        rill.manual_seed(0)
        model = nn.Linear(3, 1)
        step = _sgd_by_hand(model)
        step = rill.capture(step) if captured else step

        def loop():
            global lr
            for epoch in range(3):
                for _ in range(2):
                    step(x, y)
                lr /= 4.0
        said = _said(loop)
        results[captured] = model.weight.numpy().copy()
    lr = 0.1
    np.testing.assert_allclose(results[True], results[False], rtol=1e-6)
    assert len(said) == 2, said  # two changes of lr that reached a call, each said once
    assert "`lr` (read in test_a_global_learning_rate_annealed_between_calls" not in said[0]
    assert "`lr`" in said[0] and "was 0.1 when traced and is 0.025 now" in said[0], said[0]


def test_unchanged_values_never_retrace():
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.0), nn.LayerNorm(4))
    step = rill.capture(_sgd_by_hand(model))
    x, y = rill.randn(8, 3), rill.randn(8, 4)
    said = _said(lambda: [step(x, y) for _ in range(5)])
    assert said == [] and step.retraces == [] and len(step.variants) == 1


def test_a_closure_cell_changed_by_nonlocal():
    def make():
        weight = 1.0

        def loss(x):
            return (x * weight).sum()

        def set_weight(w):
            nonlocal weight
            weight = w
        return loss, set_weight

    loss, set_weight = make()
    fast = rill.capture(loss)
    x = rill.ones(3)
    assert float(fast(x)) == 3.0
    set_weight(0.5)
    said = _said(lambda: fast(x))
    assert float(fast(x)) == float(loss(x)) == 1.5
    assert len(said) == 1 and "`weight`" in said[0] and "was 1.0" in said[0], said


def test_a_helper_called_by_the_function_reads_a_global():
    global SCALE

    def helper(t):
        return t * SCALE

    fast = rill.capture(lambda t: helper(t) + 1.0)
    x = rill.ones(2)
    assert fast(x).numpy().tolist() == [3.0, 3.0]
    SCALE = 5.0
    try:
        said = _said(lambda: fast(x))
        assert fast(x).numpy().tolist() == [6.0, 6.0]
        assert len(said) == 1 and "`SCALE`" in said[0] and "helper" in said[0], said
    finally:
        SCALE = 2.0


class WeightedLoss(nn.Module):
    """A loss weight kept as a float attribute of a user module."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight
        self.inner = nn.Linear(3, 1)

    def forward(self, x):
        return self.inner(x).sum() * self.weight


def test_a_user_modules_float_attribute_and_nested_modules_attribute():
    rill.manual_seed(0)
    model = WeightedLoss(1.0)
    fast = rill.capture(model)
    x = rill.randn(4, 3)
    fast(x)
    model.weight = 0.25
    said = _said(lambda: fast(x))
    np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-6)
    assert len(said) == 1 and "`WeightedLoss.weight`" in said[0], said
    # a user object reached through a loop variable: the chain is followed where it is read
    scales = [type("Scale", (), {"k": 2.0})(), type("Scale", (), {})()]
    scales[1].k = 3.0

    @rill.capture
    def f(t):
        for s in scales:
            t = t * s.k
        return t

    assert f(rill.ones(1)).numpy().tolist() == [6.0]
    scales[1].k = 4.0
    said = _said(lambda: f(rill.ones(1)))
    assert f(rill.ones(1)).numpy().tolist() == [8.0]
    assert len(said) == 1 and "`s.k`" in said[0] and "3.0" in said[0], said


def test_dropout_p_changed_after_the_first_call_named_by_its_path():
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0))
    fast = rill.capture(model)
    x = rill.randn(16, 4)
    np.testing.assert_allclose(fast(x).numpy(), model(x).numpy(), rtol=1e-6)
    model[1].p = 1.0  # drops everything, as in PyTorch (p=1 gives zeros)
    said = _said(lambda: fast(x))
    assert np.all(fast(x).numpy() == 0.0)
    assert len(said) == 1 and "`Sequential.1.p` (read in Dropout.forward)" in said[0], said


def test_a_property_is_watched_through_its_getter():
    class Schedule:
        def __init__(self):
            self._base = 1.0

        @property
        def value(self):
            return self._base * 2.0

    sched = Schedule()
    fast = rill.capture(lambda t: t * sched.value)
    assert fast(rill.ones(1)).numpy().tolist() == [2.0]
    sched._base = 3.0
    said = _said(lambda: fast(rill.ones(1)))
    assert fast(rill.ones(1)).numpy().tolist() == [6.0]
    assert len(said) == 1 and "`self._base`" in said[0], said


def test_param_groups_read_by_user_code_and_optimizer_lr_as_graph_state():
    rill.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = rill.optim.SGD(model.parameters(), lr=0.1)
    x = rill.randn(4, 3)

    def by_hand(x):  # the user reads group['lr'] itself: a Python number, guarded
        model.zero_grad()
        model(x).sum().backward()
        with rill.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    p.sub_(p.grad * group["lr"])

    fast = rill.capture(by_hand)
    fast(x)
    opt.param_groups[0]["lr"] = 0.0
    before = model.weight.numpy().copy()
    said = _said(lambda: fast(x))
    np.testing.assert_array_equal(model.weight.numpy(), before)  # lr 0: no change
    assert len(said) == 1 and "`group['lr']`" in said[0], said

    def builtin(x):  # opt.step() reads lr as graph state: no retrace at all
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    fast = rill.capture(builtin)
    fast(x)
    opt.param_groups[0]["lr"] = 0.5
    assert _said(lambda: fast(x)) == []


def test_nested_captured_function_guards_hold_for_the_outer_graph():
    global SCALE
    inner = rill.capture(lambda t: t * SCALE)
    outer = rill.capture(lambda t: inner(t) + 1.0)
    x = rill.ones(1)
    assert outer(x).numpy().tolist() == [3.0]
    SCALE = 10.0
    try:
        said = _said(lambda: outer(x))
        assert outer(x).numpy().tolist() == [11.0]
        assert any("`SCALE`" in s for s in said), said
    finally:
        SCALE = 2.0


def test_the_advice_a_0d_tensor_changed_in_place_reaches_the_graph_without_retrace():
    w = rill.zeros(2)

    @rill.capture
    def step(g):
        w.sub_(gain * g)
        return w

    gain.fill_(1.0)
    g = rill.ones(2)
    step(g)
    gain.fill_(0.5)
    said = _said(lambda: step(g))
    assert said == [] and w.numpy().tolist() == [-1.5, -1.5]


def test_the_function_changing_a_value_it_reads_is_said():
    class Counter:
        calls = 0

    counter = Counter()

    @rill.capture
    def f(t):
        counter.calls += 1  # Python: runs once, while tracing
        return t * 2.0

    said = _said(lambda: [f(rill.ones(1)) for _ in range(3)])
    assert counter.calls == 1 and len(f.variants) == 1
    assert len(said) == 1 and "`counter.calls`" in said[0] and "runs once" in said[0], said


def test_getattr_reads_are_guarded_as_attribute_reads():
    """getattr(o, name) reads in C: a recording getattr stands in for the builtin at that
    instruction, so a number read that way is guarded as o.name would be, and a function or
    module read that way (getattr(F, act_name)) is neither guarded nor said."""
    import builtins
    cfg = type("Cfg", (), {})()
    cfg.scale = 2.0
    act = "relu"
    fast = rill.capture(lambda t: getattr(nn.functional, act)(t) * getattr(cfg, "scale"))
    x = rill.tensor([1.0, -2.0])
    assert _said(lambda: fast(x)) == []
    assert builtins.getattr is getattr  # the builtin is back
    cfg.scale = 3.0
    said = _said(lambda: np.testing.assert_array_equal(fast(x).numpy(), [3.0, 0.0]))
    assert len(said) == 1 and "getattr(Cfg, 'scale')" in said[0] and "3.0" in said[0], said
    assert _said(lambda: fast(x)) == []  # guarded at the new value: no retrace


def test_reads_that_cannot_be_guarded_are_said():
    """A getattr the guard could not repeat without running code (a property), and vars(),
    are said: their values are baked into the graph."""
    class Cfg:
        @property
        def scale(self):
            return 2.0
    cfg = Cfg()
    said = _said(lambda: rill.capture(lambda t: t * getattr(cfg, "scale"))(rill.ones(1)))
    assert len(said) == 1 and "getattr" in said[0] and "not watched" in said[0], said
    box = type("Box", (), {})()
    box.k = 4.0
    said = _said(lambda: rill.capture(lambda t: t * vars(box)["k"])(rill.ones(1)))
    assert len(said) == 1 and "vars" in said[0] and "not watched" in said[0], said


# ---- tensor arguments that backward reaches --------------------------------------------------

def _policy():
    rill.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _episode():
    rng = np.random.default_rng(3)
    states = rill.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    actions = rill.tensor(rng.integers(0, 2, 5))
    returns = rill.tensor(rng.standard_normal(5).astype(np.float32))
    return states, actions, returns


def _log_probs(policy, states, actions):
    logp = nn.functional.log_softmax(policy(states), -1)
    return rill.take_along_axis(logp, actions[:, None], 1)[:, 0]


@pytest.mark.parametrize("as_list", [True, False])
def test_reinforce_on_taped_log_probs_is_refused_and_the_advice_works(as_list):
    states, actions, returns = _episode()

    def update_on(opt):
        def update(log_probs, returns):
            opt.zero_grad()
            lp = rill.stack(log_probs) if isinstance(log_probs, list) else log_probs
            loss = -(lp * returns).sum()
            loss.backward()
            opt.step()
            return loss
        return update

    policy = _policy()
    opt = rill.optim.SGD(policy.parameters(), lr=0.1)
    lp = _log_probs(policy, states, actions)
    arg = [lp[i] for i in range(5)] if as_list else lp
    before = policy[0].weight.numpy().copy()
    with pytest.raises(rill.CaptureError, match="carries autodiff history") as info:
        rill.capture(update_on(opt))(arg, returns)
    text = str(info.value)
    assert "test_capture_python_values.py" in text and "from tensors without history" in text
    assert ("`log_probs[0]`" if as_list else "`log_probs`") in text, text
    np.testing.assert_array_equal(policy[0].weight.numpy(), before)

    # eager reference: the update on the taped log-probs
    eager_policy = _policy()
    eager_opt = rill.optim.SGD(eager_policy.parameters(), lr=0.1)
    update_on(eager_opt)(_log_probs(eager_policy, states, actions), returns)

    # advice 1: compute the log-probs inside, from the states and actions
    policy = _policy()
    opt = rill.optim.SGD(policy.parameters(), lr=0.1)

    @rill.capture
    def update(states, actions, returns):
        opt.zero_grad()
        loss = -(_log_probs(policy, states, actions) * returns).sum()
        loss.backward()
        opt.step()
        return loss

    update(states, actions, returns)
    for p, q in zip(policy.parameters(), eager_policy.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-7)


def test_a_leaf_argument_whose_grad_backward_sets_is_refused_and_the_advice_works():
    def f(a, x):
        (a * a * x).sum().backward()

    x = rill.ones(3)
    a = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(rill.CaptureError, match="requires grad and backward") as info:
        rill.capture(f)(a, x)
    assert "Read the tensor from outside instead" in str(info.value)
    eager = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    f(eager, x)
    # the advice: read it from outside (here a closure variable), as parameters are
    held = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)

    @rill.capture
    def g(x):
        (held * held * x).sum().backward()

    g(x)
    np.testing.assert_allclose(held.grad.numpy(), eager.grad.numpy())
    g(x)  # accumulates, as eager .backward() does
    np.testing.assert_allclose(held.grad.numpy(), 2 * eager.grad.numpy())


def test_a_taped_tensor_read_from_outside_is_refused_and_passing_it_works():
    policy = _policy()
    states, _, _ = _episode()
    out = policy(states)
    with pytest.raises(rill.CaptureError, match="carries autodiff") as info:
        rill.capture(lambda: (out * 2.0).sum())()
    assert "pass it as an argument and call backward outside" in str(info.value)
    # the advice: an argument, backward outside: the gradient reaches the policy
    rill.capture(lambda o: (o * 2.0).sum())(out).backward()
    captured = [p.grad.numpy().copy() for p in policy.parameters()]
    policy.zero_grad()
    (policy(states) * 2.0).sum().backward()
    for c, p in zip(captured, policy.parameters()):
        np.testing.assert_allclose(c, p.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_closure_made_after_an_earlier_trace_is_guarded_through_its_own_cell():
    """The closures running a code object are remembered across traces (finding them walks
    the heap) only while that provably still holds: a closure of the same code made later,
    holding the same value object, is found, and a change to its cell retraces."""
    def scaler(factor):
        def scale(t):
            return t * factor
        return scale

    first = scaler(2.0)
    f1 = rill.capture(lambda t: first(t))
    np.testing.assert_array_equal(f1(rill.ones(2)).numpy(), [2.0, 2.0])
    same_value = first.__closure__[0].cell_contents
    second = scaler(same_value)  # the very same float object, in a new cell

    def rebind(value):
        second.__closure__[0].cell_contents = value
    f2 = rill.capture(lambda t: second(t))
    np.testing.assert_array_equal(f2(rill.ones(2)).numpy(), [2.0, 2.0])
    rebind(5.0)
    said = _said(lambda: np.testing.assert_array_equal(f2(rill.ones(2)).numpy(), [5.0, 5.0]))
    assert len(said) == 1 and "5.0" in said[0], said
