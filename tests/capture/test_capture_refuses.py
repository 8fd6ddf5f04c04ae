"""Capture is correct or it refuses (issue 15): what a trace cannot get right is refused at
the user's line, named; nothing stale is computed silently."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import rill
from rill import nn


def _policy():
    rill.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_reinforce_update_on_eager_log_probs_is_refused_at_the_users_line():
    policy = _policy()
    opt = rill.optim.SGD(policy.parameters(), lr=0.1)
    log_probs, rewards = [], []

    @rill.capture
    def update():
        opt.zero_grad()
        loss = -(rill.stack(log_probs) * rill.tensor(rewards)).sum()
        loss.backward()
        opt.step()
        return loss

    for step in range(2):
        log_probs.append(nn.functional.log_softmax(policy(rill.randn(1, 4)), -1)[0, 0])
        rewards.append(1.0)
    with pytest.raises(rill.CaptureError, match="carries autodiff history") as info:
        update()
    assert "test_capture_refuses.py" in str(info.value)  # the user's line
    assert "pass it as an argument" in str(info.value)


def test_reinforce_update_with_log_probs_as_arguments_equals_eager():
    # The supported form: the episode's log-probs go in as an argument, so each call
    # differentiates through this episode's values (the forward runs inside the graph).
    def run(captured: bool):
        policy = _policy()
        opt = rill.optim.SGD(policy.parameters(), lr=0.1)

        def update(states, actions, returns):
            opt.zero_grad()
            logp = nn.functional.log_softmax(policy(states), -1)
            chosen = rill.take_along_axis(logp, actions[:, None], 1)[:, 0]
            loss = -(chosen * returns).sum()
            loss.backward()
            opt.step()
            return loss

        step = rill.capture(update) if captured else update
        rill.manual_seed(5)
        losses = []
        for episode in range(4):
            states = rill.randn(3, 4)
            actions = rill.randint(0, 2, (3,))
            losses.append(float(step(states, actions, rill.randn(3))))
        return losses, [p.numpy() for p in policy.parameters()]

    (eager, pe), (captured, pc) = run(False), run(True)
    np.testing.assert_allclose(captured, eager, rtol=1e-6)
    for a, b in zip(pc, pe):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


class CachedMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.src_mask = None

    def forward(self, x):
        if self.src_mask is None or self.src_mask.shape[0] != x.shape[0]:
            self.src_mask = rill.triu(rill.ones((x.shape[0], x.shape[0])), 1) * -1e9
        return self.proj(x) + self.src_mask.sum(0)[:, None]


def test_a_mask_cached_on_a_module_while_tracing_is_named_when_used_later():
    model = CachedMask()
    fast = rill.capture(model)
    fast(rill.ones((3, 4)))
    with pytest.raises(rill.CaptureError) as info:
        model(rill.ones((3, 4)))  # eager: reuses the cached mask, which has no data
    message = str(info.value)
    assert "stored as CachedMask.src_mask" in message, message
    assert "test_capture_refuses.py" in message.split("stored")[0]  # the line that made it
    assert "Compute it inside" in message


def test_zero_argument_capture_reading_outside_tensors_warns_naming_them():
    data = [rill.ones(3)]
    total = rill.zeros(())

    @rill.capture
    def accumulate():
        nonlocal total
        total += data[0].sum()
        return total

    with pytest.warns(rill.CaptureWarning, match=r"reads 1 tensor\(s\) made outside it.*float32\[3\]"):
        accumulate()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accumulate()  # said once, when traced


def test_a_counter_updated_in_place_is_state_not_a_suspect():
    count = rill.zeros(())

    @rill.capture
    def tick():
        nonlocal count
        count += 1.0
        return count

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [float(tick()) for _ in range(3)] == [1.0, 2.0, 3.0]  # 1, 1, 1 before the fix
    assert float(count) == 3.0


def test_rill_tensor_of_a_value_being_traced_is_a_copy_as_eagerly():
    def f(x):
        return rill.tensor(x * 2.0, dtype=rill.float64) + 1.0

    x = rill.tensor([1.0, 2.5])
    np.testing.assert_array_equal(rill.capture(f)(x).numpy(), f(x).numpy())


def test_a_sparse_gradient_in_dense_arithmetic_is_its_dense_tensor():
    table = nn.Embedding(5, 2)
    table(rill.tensor([1, 1, 3])).sum().backward()
    with rill.no_grad():
        new = table.weight - 0.5 * table.weight.grad
    np.testing.assert_allclose(new.numpy(), table.weight.numpy() -
                               0.5 * table.weight.grad.to_dense().numpy())
