"""The rematerialization pass (lib/capture/passes/remat.py): `rill.capture(fn, memory_budget=)`
recomputes forward values in the backward pass so that the step's peak fits the budget, says
so in `graph.memory_plan().remat`, warns when it cannot, and changes no result. The peaks are
checked twice: as the memory plan computes them, and measured (tracemalloc) while the
compiled step runs."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import rill
import rill.nn.functional as F
from rill.capture.passes.remat import MemoryBudgetWarning, rematerialize, running_peak

RNG = np.random.default_rng(0)
LAYERS = [rill.nn.Linear(128, 128) for _ in range(6)]
X = rill.tensor(RNG.standard_normal((256, 128)).astype(np.float32))


def _mlp_step(x, dropout=0.0):
    y = x
    for layer in LAYERS:
        y = F.dropout(rill.tanh(layer(y)), dropout)
    loss = (y * y).mean()
    loss.backward()
    return loss


def _zero_grads(params):
    for p in params:  # set, not None: every call sees .grad as the trace did (no retrace)
        p.grad = rill.zeros_like(p)


@pytest.fixture(autouse=True)
def _grads_set():
    _zero_grads(PARAMS)


def _run(step, model_params, *args, seed=None):
    _zero_grads(model_params)
    if seed is not None:
        rill.manual_seed(seed)
    loss = step(*args)
    return loss.item(), [p.grad.numpy().copy() for p in model_params]


PARAMS = [p for layer in LAYERS for p in layer.parameters()]


def _measured_peak(step, *args) -> int:
    step(*args)  # traced and compiled; the memory plan's buffers made
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        step(*args)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_budget_below_the_peak_is_met_with_the_same_results_and_less_memory():
    plain = rill.capture(_mlp_step)
    before = plain.graph_for(X).memory_plan()
    budget = int(before.unplanned_peak_bytes * 0.7)
    fitted = rill.capture(_mlp_step, memory_budget=budget)
    graph = fitted.graph_for(X)
    report = graph.memory_plan().remat
    print(f"\nMLP step: {report}")
    assert report.budget == budget and report.fits
    assert report.peak_after <= budget < report.peak_before == running_peak(
        plain.graph_for(X))
    assert report.recomputed and {op for op, _, _ in report.recomputed} <= {"linear", "tanh",
                                                                            "matmul", "fused"}
    assert all(source and "test_capture_remat.py" in source for _, _, source in report.recomputed)
    assert "does not fit" not in repr(report) and "recomputed" in repr(report)
    assert graph.count("linear") > plain.graph_for(X).count("linear")
    assert _run(fitted, PARAMS, X) == _equal_to(_run(plain, PARAMS, X))
    again = _run(fitted, PARAMS, X)  # the compiled program (the first call ran the trace)
    assert again == _equal_to(_run(plain, PARAMS, X))
    measured = (_measured_peak(plain, X), _measured_peak(fitted, X))
    print(f"MLP step measured peak: {measured[0]} -> {measured[1]} bytes (budget {budget})")
    assert measured[1] < 0.8 * measured[0]


class _equal_to:
    """(loss, [gradients]) equal bit for bit: the copies compute what the originals did."""

    def __init__(self, expected):
        self.expected = expected

    def __eq__(self, got):
        return got[0] == self.expected[0] and all(
            np.array_equal(a, b) for a, b in zip(got[1], self.expected[1]))


def test_a_budget_it_cannot_meet_warns_with_the_budget_and_the_lowest_peak():
    fitted = rill.capture(_mlp_step, memory_budget=1000)
    with pytest.warns(MemoryBudgetWarning, match=r"memory_budget=1000 bytes.*lowest peak "
                                                 r"reached is \d+ bytes") as said:
        graph = fitted.graph_for(X)
    assert said[0].filename == __file__  # the user's line, not the pass's
    report = graph.memory_plan().remat
    assert not report.fits and report.peak_after < report.peak_before
    assert "does not fit" in repr(report)
    assert _run(fitted, PARAMS, X) == _equal_to(_run(rill.capture(_mlp_step), PARAMS, X))
    assert _run(fitted, PARAMS, X) == _equal_to(_run(rill.capture(_mlp_step), PARAMS, X))


def test_a_budget_above_the_peak_changes_nothing():
    plain = rill.capture(_mlp_step).graph_for(X)
    graph = rill.capture(_mlp_step, memory_budget=1 << 40).graph_for(X)
    report = graph.memory_plan().remat
    assert report.fits and report.recomputed == [] and report.peak_after == report.peak_before
    assert len(graph.nodes) == len(plain.nodes)
    assert plain.memory_plan().remat is None  # no budget, no report


def test_draws_are_never_recomputed_so_dropout_keeps_its_mask():
    plain = rill.capture(lambda x: _mlp_step(x, 0.2))
    peak = plain.graph_for(X).memory_plan().unplanned_peak_bytes
    fitted = rill.capture(lambda x: _mlp_step(x, 0.2), memory_budget=int(peak * 0.75))
    graph = fitted.graph_for(X)
    assert graph.count("uniform") == plain.graph_for(X).count("uniform") == len(LAYERS)
    assert graph.memory_plan().remat.recomputed
    expected = _run(plain, PARAMS, X, seed=3)
    assert _run(fitted, PARAMS, X, seed=3) == _equal_to(expected)
    assert _run(fitted, PARAMS, X, seed=3) == _equal_to(expected)


def test_the_pass_leaves_its_input_graph_as_it_was():
    graph = rill.capture(_mlp_step).graph_for(X)
    text, nodes = str(graph), list(graph.nodes)
    with pytest.warns(MemoryBudgetWarning):
        out = rematerialize(graph, running_peak(graph) // 2)
    assert str(graph) == text and graph.nodes == nodes
    assert out is not graph and out.lint() is out
    assert len(out.nodes) > len(graph.nodes)


def test_gpt_and_cnn_steps_under_a_budget_give_the_unbudgeted_gradients():
    pytest.importorskip("torch")
    from test_checkpoint_activations import (X_CNN, X_GPT, Y_CNN, _cnn, _gpt_loss,
                                             _rill_gpt)
    gpt = _rill_gpt()
    cnn = _cnn(rill.nn)
    cases = [(gpt, lambda x: _backward(_gpt_loss(gpt, x, False)), (rill.tensor(X_GPT),)),
             (cnn, lambda x, y: _backward(F.cross_entropy(cnn(x), y)),
              (rill.tensor(X_CNN), rill.tensor(Y_CNN)))]
    for model, step, args in cases:
        params = list(model.parameters())
        _zero_grads(params)
        plain = rill.capture(step)
        peak = plain.graph_for(*args).memory_plan().unplanned_peak_bytes
        fitted = rill.capture(step, memory_budget=int(peak * 0.6))
        report = fitted.graph_for(*args).memory_plan().remat
        print(f"\n{type(model).__name__}: {report}; measured "
              f"{_measured_peak(plain, *args)} -> {_measured_peak(fitted, *args)} bytes")
        assert report.fits and report.peak_after < 0.65 * report.peak_before
        expected = _run(plain, params, *args)
        got = _run(fitted, params, *args)
        assert got[0] == pytest.approx(expected[0], rel=1e-6)
        for a, b in zip(got[1], expected[1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _backward(loss):
    loss.backward()
    return loss


def test_memory_budget_must_be_a_number_of_bytes():
    for bad in (0.5, "1GB", -1, True):
        with pytest.raises(rill.CaptureError, match="memory_budget must be a number of bytes"):
            rill.capture(_mlp_step, memory_budget=bad)
