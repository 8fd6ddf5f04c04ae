"""@rill.capture: tracing, state, gradients, training steps, retraces, errors, threads,
saving and loading (passes have tests of their own in test_capture_passes.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import rill
from rill import nn
from rill.capture.executor import Program

import saved_graphs


def _mlp(seed=0):
    rill.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))


def _cnn(seed=0):
    rill.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 2 * 2, 3))


def _batches(shape, classes, n=10, seed=1):
    rng = np.random.default_rng(seed)
    return [(rill.tensor(rng.standard_normal(shape).astype(np.float32)),
             rill.tensor(rng.integers(0, classes, shape[0]))) for _ in range(n)]


def _train(make_model, make_opt, batches, captured):
    model = make_model()
    opt = make_opt(model.parameters())

    def step(x, t):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss

    run = rill.capture(step) if captured else step
    losses = [run(x, t).numpy().copy() for x, t in batches]
    return model, losses, run


# ---- training steps ------------------------------------------------------------------------

@pytest.mark.parametrize("make_opt", [
    lambda ps: rill.optim.SGD(ps, lr=0.1),
    lambda ps: rill.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda ps: rill.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
    lambda ps: rill.optim.Adam(ps, lr=1e-2),
    lambda ps: rill.optim.AdamW(ps, lr=1e-2, amsgrad=True),
    lambda ps: rill.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    lambda ps: rill.optim.Adagrad(ps, lr=1e-1, lr_decay=0.01),
], ids=["sgd", "sgd-nesterov", "sgd-dampening", "adam", "adamw-amsgrad", "rmsprop", "adagrad"])
def test_captured_mlp_training_equals_eager_after_10_steps(make_opt):
    batches = _batches((8, 12), 4)
    eager, eager_losses, _ = _train(_mlp, make_opt, batches, captured=False)
    captured, captured_losses, step = _train(_mlp, make_opt, batches, captured=True)
    assert len(step.variants) == 1  # one trace, nine runs of the same graph
    np.testing.assert_array_equal(captured_losses, eager_losses)
    for (name, a), (_, b) in zip(eager.named_parameters(), captured.named_parameters()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)
        np.testing.assert_array_equal(b.grad.numpy(), a.grad.numpy(), err_msg=name + ".grad")


def test_captured_cnn_training_equals_eager_after_10_steps():
    batches = _batches((4, 2, 8, 8), 3)
    make_opt = lambda ps: rill.optim.SGD(ps, lr=0.05, momentum=0.9)  # noqa: E731
    eager, eager_losses, _ = _train(_cnn, make_opt, batches, captured=False)
    captured, captured_losses, _ = _train(_cnn, make_opt, batches, captured=True)
    np.testing.assert_array_equal(captured_losses, eager_losses)
    for (name, a), (_, b) in zip(eager.named_parameters(), captured.named_parameters()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)


def test_training_step_is_one_graph_with_state_by_reference():
    model = _mlp()
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @rill.capture
    def step(x, t):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss

    x, t = _batches((8, 12), 4, n=1)[0]
    graph = step.graph_for(x, t)
    names = {v.name for v in graph.variables}
    assert {"model.0.weight", "model.2.bias", "model.0.weight.momentum_buffer"} <= names
    assert graph.count("assign") == 12  # 4 parameters, 4 momentum buffers, 4 gradients
    assert graph.count("constant") < 10  # weights are read, never baked in
    before = model[0].weight.numpy().copy()
    step(x, t)
    assert not np.array_equal(model[0].weight.numpy(), before)  # the user's tensor changed
    assert model[0].weight.grad is not None and model[0].weight.is_leaf


def test_gradients_accumulate_across_calls_like_eager():
    w = rill.ones(3, requires_grad=True)

    def f(x):
        (w * x).sum().backward()

    captured = rill.capture(f)
    x = rill.tensor([1.0, 2.0, 3.0])
    captured(x)
    np.testing.assert_array_equal(w.grad.numpy(), [1, 2, 3])
    with pytest.warns(rill.CaptureWarning, match="grad it accumulates into was None"):
        captured(x)  # traced again: now the graph reads the gradient and adds to it
    captured(x)
    np.testing.assert_array_equal(w.grad.numpy(), [3, 6, 9])


def test_differentiable_outputs_reach_the_tape():
    model = _mlp()
    fast = rill.capture(model)
    x = _batches((8, 12), 4, n=1)[0][0]
    fast(x).sum().backward()
    expected = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_array_equal(p.grad.numpy(), e)
    with rill.no_grad(), pytest.warns(rill.CaptureWarning, match="grad mode is now off"):
        assert not fast(x).requires_grad  # compiled path, no tape


# ---- tracing -------------------------------------------------------------------------------

def test_print_reads_like_code_with_user_lines():
    @rill.capture
    def f(x, w):
        return rill.relu(x @ w)

    text = str(f.graph_for(rill.ones((2, 3)), rill.ones((3, 4))))
    assert "f(%x0, %x1):" in text
    assert "%0 : f32[2,4] = matmul(%x0, %x1)" in text
    assert f"test_capture.py:{f.__wrapped__.__code__.co_firstlineno + 2}" in text
    assert text.rstrip().endswith("return %1")


def test_nested_arguments_and_results():
    @rill.capture
    def f(batch, scale=2.0):
        return {"sum": batch["a"] + batch["b"][0], "pair": (batch["b"][1] * scale, scale)}

    a, b0, b1 = rill.ones(2), rill.full((2,), 3.0), rill.arange(2.0)
    out = f({"a": a, "b": [b0, b1]}, scale=3.0)
    np.testing.assert_array_equal(out["sum"].numpy(), [4, 4])
    np.testing.assert_array_equal(out["pair"][0].numpy(), [0, 3])
    assert out["pair"][1] == 3.0


def test_retrace_is_explained_once_and_names_the_argument():
    @rill.capture
    def f(x, n):
        return x * n

    f(rill.ones((2, 3)), 2)
    with pytest.warns(rill.CaptureWarning) as record:
        f(rill.ones((5, 3)), 2)
    assert str(record[0].message) == ("f is traced again because argument `x` changed from "
                                      "float32[2, 3] to float32[5, 3]")
    with pytest.warns(rill.CaptureWarning, match="argument `n` changed from 2 to 3"):
        f(rill.ones((5, 3)), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(rill.ones((5, 3)), 3)  # cached: no trace, no message
    assert len(f.variants) == 3


def test_variant_cap_warns_and_drops_the_oldest():
    f = rill.capture(lambda x: x + 1, max_variants=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(1, 5):
            f(rill.ones(n))
    assert len(f.variants) == 2
    assert any("more than max_variants=2" in m for m in f.retraces)


def test_methods_are_captured_per_instance():
    class Scaler:
        def __init__(self, k):
            self.k = rill.tensor(k)

        @rill.capture
        def apply(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    np.testing.assert_array_equal(a.apply(rill.ones(2)).numpy(), [2, 2])
    np.testing.assert_array_equal(b.apply(rill.ones(2)).numpy(), [3, 3])
    a.k += 1  # state by reference: the graph reads the new value
    np.testing.assert_array_equal(a.apply(rill.ones(2)).numpy(), [3, 3])


def test_lint_catches_a_broken_graph():
    f = rill.capture(lambda x: rill.exp(x) + 1, optimize=False)
    graph = f.graph_for(rill.ones(2))
    graph.nodes.reverse()
    with pytest.raises(rill.CaptureError, match="not produced before it"):
        graph.lint()


def test_dot_and_rich_renderings():
    graph = rill.capture(lambda x: rill.exp(x) * 2.0).graph_for(rill.ones(2))
    dot = graph.to_dot()
    assert dot.startswith("digraph") and "exp" in dot and "->" in dot
    assert "multiply" in graph._repr_html_()
    from rich.console import Console
    console = Console(record=True, width=120)
    console.print(graph)
    assert "exp" in console.export_text()


# ---- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("body,what", [
    (lambda x: x * 2 if x.sum() > 0 else x, "bool"),
    (lambda x: float(x.sum()), "float"),
    (lambda x: x.sum().item(), "item"),
    (lambda x: x.numpy(), "numpy"),
])
def test_python_control_flow_on_graph_values_names_the_line(body, what):
    with pytest.raises(rill.CaptureError) as info:
        rill.capture(body)(rill.ones(3))
    message = str(info.value)
    assert info.value.op == what
    assert "rill.cond" in message and "rill.while_loop" in message
    assert "test_capture.py:" in message


def test_node_errors_name_the_node_and_the_users_line():
    @rill.capture
    def loss(logits, target):
        return nn.functional.nll_loss(logits, target)

    logits = rill.randn(4, 3)
    loss(logits, rill.tensor([0, 1, 2, 1]))
    with pytest.raises(rill.ArgumentError) as info:
        loss(logits, rill.tensor([0, 1, 7, 1]))  # runs the graph: the check node fails
    message = str(info.value)
    assert "outside [0, 3)" in message and "while running" in message and "check(" in message
    assert f"test_capture.py:{loss.__wrapped__.__code__.co_firstlineno + 2}" in message


def test_a_graph_value_that_escapes_is_refused():
    kept = []

    @rill.capture
    def leak(x):
        y = x * 2
        kept.append(y)
        return y

    @rill.capture
    def use(x):
        return x + kept[0]

    leak(rill.ones(2))
    with pytest.raises(rill.CaptureError, match=r"made while tracing leak \(a multiply result at "
                                                r"test_capture.py:\d+\), and was stored as "
                                                r"kept\[0\]"):
        use(rill.ones(2))


# ---- execution -----------------------------------------------------------------------------

def test_partial_execution_prunes_and_feeds():
    graph = rill.capture(lambda x, y: (rill.exp(x) * 2.0, rill.sin(y)),
                         optimize=False).graph_for(rill.ones(3), rill.ones(3))
    assert "%3 : f32[3] = sin(%x1)" in str(graph)
    np.testing.assert_allclose(graph.run("%3", args=[None, rill.zeros(3)]).numpy(), 0)
    fed = graph.run("%2", feeds={"%0": rill.tensor([1.0, 2.0, 3.0])})
    np.testing.assert_array_equal(fed.numpy(), [2, 4, 6])  # exp did not run; x not needed
    with pytest.raises(rill.CaptureError, match="pass it in args"):
        graph.run("%2")


def test_parallel_scheduler_matches_sequential():
    def f(a, b):
        left = rill.tanh(a @ b) @ b.T
        right = rill.sigmoid(b.T @ a.T).T @ b.T
        return (left + right).sum(axis=0)

    rng = np.random.default_rng(0)
    a = rill.tensor(rng.standard_normal((64, 48)).astype(np.float32))
    b = rill.tensor(rng.standard_normal((48, 64)).astype(np.float32))
    sequential = rill.capture(f, parallel=False)(a, b)
    parallel = rill.capture(f, parallel=True)
    np.testing.assert_array_equal(parallel(a, b).numpy(), sequential.numpy())
    assert next(iter(parallel.variants.values())).program.parallel


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
@pytest.mark.parametrize("parallel", [True, "auto"])
def test_a_graph_with_gpu_nodes_runs_straight_line(monkeypatch, parallel):
    """GPU kernels are launches onto one stream (and Triton's interpreter runs one kernel at
    a time: two at once on pool threads failed), so the pool never runs them."""
    from rill.capture import executor
    monkeypatch.setattr(executor, "PARALLEL_MIN_ELEMENTS", 16)
    monkeypatch.setattr(executor, "_threads", lambda: executor.TRIAL_MIN_THREADS)
    a, b = rill.randn(32, 32, device="gpu"), rill.randn(32, 32, device="gpu")
    captured = rill.capture(_two_branches, parallel=parallel)
    for _ in range(3 + 2 * executor.TRIAL_CALLS + 2):  # past any trials
        np.testing.assert_allclose(captured(a, b).numpy(), _two_branches(a, b).numpy(),
                                   rtol=1e-6)
    program = next(iter(captured.variants.values())).program
    assert not program.parallel and program._trials is None
    host = rill.capture(_two_branches, parallel=parallel)  # the same graph on the host
    host(a.to("cpu"), b.to("cpu"))
    assert next(iter(host.variants.values())).program.parallel == (parallel is True) or \
        next(iter(host.variants.values())).program._trials is not None


def _two_branches(a, b):
    """Two independent branches the pool's schedule could run at once."""
    return (rill.tanh(a) * 2.0).sum() + (rill.exp(b) - 1.0).sum()


def test_auto_warms_up_then_times_each_schedule_in_a_run(monkeypatch):
    """Untimed warm calls, then the straight-line trials, then the pool's: not alternated,
    since a call right after the other schedule's ran slower and biased the choice."""
    from rill.capture import executor
    monkeypatch.setattr(executor, "PARALLEL_MIN_ELEMENTS", 1000)  # small nodes count as heavy
    monkeypatch.setattr(executor, "_threads", lambda: executor.TRIAL_MIN_THREADS)

    f = _two_branches

    a, b = rill.randn(64, 64), rill.randn(64, 64)
    captured = rill.capture(f)  # parallel="auto"
    captured(a, b)
    program = next(iter(captured.variants.values())).program
    ways = []
    for name, way in (("_run", False), ("_run_parallel", True)):
        original = getattr(program, name)
        monkeypatch.setattr(program, name,
                            lambda args, original=original, way=way: (ways.append(way),
                                                                      original(args))[1])
    for _ in range(executor.TRIAL_WARM_CALLS + 2 * executor.TRIAL_CALLS):
        captured(a, b)
    warm = executor.TRIAL_WARM_CALLS - 1  # the first call above was a warm one
    assert ways == [False] * (warm + executor.TRIAL_CALLS) + [True] * executor.TRIAL_CALLS + \
        [program.parallel]
    assert program._trials is None


def test_auto_times_both_schedules_on_real_calls_then_keeps_one(monkeypatch):
    from rill.capture import executor
    monkeypatch.setattr(executor, "PARALLEL_MIN_ELEMENTS", 1000)  # small nodes count as heavy
    monkeypatch.setattr(executor, "_threads", lambda: executor.TRIAL_MIN_THREADS)

    f = _two_branches

    a, b = rill.randn(64, 64), rill.randn(64, 64)
    captured = rill.capture(f)  # parallel="auto"
    want = f(a, b).numpy()
    program = None
    for _ in range(executor.TRIAL_WARM_CALLS + 2 * executor.TRIAL_CALLS + 2):
        np.testing.assert_allclose(captured(a, b).numpy(), want, rtol=1e-6)
        program = next(iter(captured.variants.values())).program
    assert program._trials is None and isinstance(program.parallel, bool)


def test_auto_keeps_the_straight_line_on_few_cores(monkeypatch):
    """Below TRIAL_MIN_THREADS the pool's schedule is not tried: every call runs straight."""
    from rill.capture import executor
    monkeypatch.setattr(executor, "PARALLEL_MIN_ELEMENTS", 1000)  # small nodes count as heavy
    monkeypatch.setattr(executor, "_threads", lambda: executor.TRIAL_MIN_THREADS - 1)

    f = _two_branches

    a, b = rill.randn(64, 64), rill.randn(64, 64)
    captured = rill.capture(f)  # parallel="auto"
    captured(a, b)
    program = next(iter(captured.variants.values())).program
    assert program._trials is None and program.parallel is False
    assert executor._worth_parallel(program.graph)  # it would have been tried on more cores
    np.testing.assert_allclose(captured(a, b).numpy(), f(a, b).numpy(), rtol=1e-6)


def test_a_scheduler_thread_runs_its_kernels_on_one_core():
    from rill.capture import executor
    from rill.kernels.numpy import parallel
    seen = executor._pool().submit(lambda: (parallel.team_threads(1 << 22),
                                            getattr(parallel._inside, "active", False)))
    assert seen.result() == (1, True)


def test_two_threads_call_one_captured_function():
    f = rill.capture(lambda x: rill.tanh(x @ x.T).sum(axis=1))
    inputs = [rill.tensor(np.full((16, 8), i, np.float32) / 50) for i in range(8)]
    expected = [rill.tanh(x @ x.T).sum(axis=1).numpy() for x in inputs]
    f(inputs[0])
    errors, results = [], {}

    def worker(k):
        try:
            for _ in range(50):
                i = (k * 3 + _) % len(inputs)
                results.setdefault(i, []).append(f(inputs[i]).numpy())
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, outs in results.items():
        for out in outs:
            np.testing.assert_array_equal(out, expected[i])


def test_program_runs_without_bind_on_buffers():
    graph = rill.capture(lambda x: x * 3.0 + 1.0).graph_for(rill.ones(2))
    (out,) = Program(graph)([np.array([1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(out, [4, 7])


def test_captured_inside_capture_inlines():
    inner = rill.capture(lambda x: x * 2.0)
    outer = rill.capture(lambda x: inner(x) + 1.0)
    np.testing.assert_array_equal(outer(rill.ones(2)).numpy(), [3, 3])
    assert outer.graph_for(rill.ones(2)).count("multiply") == 1


# ---- saving --------------------------------------------------------------------------------

def test_save_and_load_in_a_fresh_process_without_the_model(tmp_path):
    model = _cnn()
    fast = rill.capture(model)
    x = _batches((2, 2, 8, 8), 3, n=1)[0][0]
    expected = fast(x).numpy()
    fast.save(tmp_path / "cnn")
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", expected)
    code = ("import numpy as np, rill\n"
            f"g = rill.load_graph({str(tmp_path / 'cnn')!r})\n"
            f"out = g(rill.tensor(np.load({str(tmp_path / 'x.npy')!r})))\n"
            f"assert np.array_equal(out.numpy(), np.load({str(tmp_path / 'y.npy')!r}))\n"
            "print(sorted(g.state_dict())[:2])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0.bias" in done.stdout


def test_saved_training_step_keeps_training(tmp_path):
    batches = _batches((8, 12), 4, n=4)
    make_opt = lambda ps: rill.optim.Adam(ps, lr=1e-2)  # noqa: E731
    model, _, step = _train(_mlp, make_opt, batches[:2], captured=True)
    step.save(tmp_path / "step")
    loaded = rill.load_graph(tmp_path / "step")
    later = [loaded(x, t).numpy() for x, t in batches[2:]]
    reference = [step(x, t).numpy() for x, t in batches[2:]]
    np.testing.assert_array_equal(later, reference)


def test_load_refuses_bad_files(tmp_path):
    fast = rill.capture(lambda x: rill.exp(x))
    fast(rill.ones(2))
    fast.save(tmp_path / "g")
    doc = saved_graphs.read_doc(tmp_path / "g")
    text = json.dumps(doc)
    saved_graphs.write_text(tmp_path / "g", text.replace('"exp"', '"exp_v2"'))
    with pytest.raises(rill.CheckpointError, match="does not have"):
        rill.load_graph(tmp_path / "g")
    saved_graphs.write_text(tmp_path / "g", text.replace('"version": 2', '"version": 99'))
    with pytest.raises(rill.CheckpointError, match="version 99"):
        rill.load_graph(tmp_path / "g")
    saved_graphs.write_text(tmp_path / "g", text[: len(text) // 2])
    with pytest.raises(rill.CheckpointError, match="damaged"):
        rill.load_graph(tmp_path / "g")
    saved_graphs.write_text(tmp_path / "g", text)
    rill.load_graph(tmp_path / "g")  # sealed again as it was: loads
    state = saved_graphs.graph_file(tmp_path / "g").replace("graph.", "state.").replace(
        ".json", ".rill")
    with open(state, "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 0xFF]))
    with pytest.raises(rill.CheckpointError):
        rill.load_graph(tmp_path / "g")


def test_loaded_graph_checks_its_arguments(tmp_path):
    fast = rill.capture(lambda x: x + 1)
    fast(rill.ones((2, 3)))
    fast.save(tmp_path / "g")
    loaded = rill.load_graph(tmp_path / "g")
    with pytest.raises(rill.CaptureError, match=r"must be float32\[2, 3\]"):
        loaded(rill.ones((4, 3)))
    with pytest.raises(rill.CaptureError, match="saved for arguments"):
        loaded(rill.ones((2, 3)), rill.ones(1))


def test_save_keeps_every_traced_variant_and_load_dispatches_like_the_original(tmp_path):
    rill.manual_seed(0)
    model = nn.Linear(3, 2)
    fast = rill.capture(model)
    small, large = rill.randn(2, 3), rill.randn(5, 3)
    with pytest.warns(rill.CaptureWarning):  # the second shape traces again
        want = [fast(small).numpy(), fast(large).numpy()]
    fast.save(tmp_path / "both")
    loaded = rill.load_graph(tmp_path / "both")
    assert len(loaded.variants) == 2
    np.testing.assert_array_equal(loaded(small).numpy(), want[0])
    np.testing.assert_array_equal(loaded(large).numpy(), want[1])
    assert loaded.variants[0][0].variables[0].owner is loaded.variants[1][0].variables[0].owner
    with pytest.raises(rill.CaptureError, match=r"must be float32\[[25], 3\] on cpu \(or 1 "
                                                r"other saved variant"):
        loaded(rill.randn(7, 3))


def test_small_adds_run_as_the_ufunc_large_ones_keep_their_kernel():
    # add's CPU kernel is np.add below parallel.TEAM_MIN_ELEMENTS (above it, a C pass on
    # OpenMP's team may run): a program calls np.add itself for nodes known to be smaller
    from rill.kernels.numpy import parallel
    from rill.kernels.numpy.elementwise import KERNELS
    kernel = KERNELS["add"]
    big = parallel.TEAM_MIN_ELEMENTS

    def f(x, y):
        return x + y

    for n, expected in ((64, np.add), (big, kernel)):
        x = rill.tensor(np.arange(n, dtype=np.float32))
        y = rill.tensor(np.ones(n, np.float32))
        fn = rill.capture(f, optimize=False)
        out = fn(x, y)
        (variant,) = fn.variants.values()
        (step,) = [s for s, node in zip(variant.program.steps, variant.program.graph.nodes)
                   if node.op == "add"]
        assert step is expected
        np.testing.assert_array_equal(out.numpy(), np.arange(n, dtype=np.float32) + 1)
