"""The fusion pass (lib/capture/passes/fuse.py): which nodes it groups, and that a fused graph
computes what the unfused graph computes, bit for bit, on the CPU and on the gpu (Triton's
interpreter), saved and loaded, and differentiated."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import rill
import rill.nn.functional as F
from rill.capture.executor import Program
from rill.capture.passes import fuse as fuse_module
from rill.capture.passes import pipeline
from rill.capture.passes.fuse import fuse, fuse_where_it_pays
from rill.capture.passes.memory import memory


@pytest.fixture
def small_groups(monkeypatch):
    """Fuse groups of any size (the defaults leave small ones alone), so tests stay fast."""
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 1)
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "gpu", 1)
    # every elementwise node, not only those a generated C loop runs (the NumPy fused
    # function runs the rest; tests/kernels/native/test_fused_c.py tests the C loops)
    monkeypatch.setattr(fuse_module, "COMPILED_CPU_ONLY", False)


def _fusing(monkeypatch, on: bool):
    monkeypatch.setattr(pipeline, "EXECUTION_PASSES", [fuse_where_it_pays, memory] if on else [])


def _graph(fn, *args):
    """fn's optimized graph without fusion (the pipeline's rewrites only)."""
    return pipeline.optimize(rill.capture(fn, optimize=False).graph_for(*args),
                             pipeline.PASSES)


def _run(graph, *args):
    return Program(graph, parallel=False)([a._data for a in args])


def _ops(graph):
    return [n.op for n in graph.nodes if n.op not in ("input", "constant")]


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


rng = np.random.default_rng(0)
X = rill.tensor(rng.standard_normal((6, 5)).astype(np.float32))
B = rill.tensor(rng.standard_normal(5).astype(np.float32))


# ---- what becomes a group ------------------------------------------------------------------

def test_a_chain_becomes_one_fused_node(small_groups):
    graph = _graph(lambda x, b: rill.tanh(rill.exp(x + b) * 2.0 - 1.0), X, B)
    fused = fuse(graph).lint()
    assert _ops(fused) == ["fused"]
    body = fused.nodes[-1].attrs["body"]
    assert [n.op for n in body.nodes if n.op != "input"] == \
        ["add", "exp", "multiply", "subtract", "tanh"]
    assert "body: fused(" in str(fused)  # printed nested, like control flow's bodies
    assert fused.count("exp") == 1 and fused.count("fused") == 1


def test_a_diamond_and_two_joining_chains_are_one_group(small_groups):
    def f(x, b):
        a = rill.relu(x)
        left, right = rill.exp(a), rill.sigmoid(x * 3.0 + b)  # right starts its own chain
        return left * a + right
    fused = fuse(_graph(f, X, B)).lint()
    assert _ops(fused) == ["fused"]
    assert len(fused.nodes[-1].outputs) == 1


def test_reductions_and_other_ops_bound_groups_and_no_cycle_is_made(small_groups):
    def f(x):
        a = rill.exp(x) + 1.0
        s = rill.sum(a, axis=1, keepdims=True)  # needs a; the next op needs s and a
        return rill.tanh(a / s), rill.matmul(a, rill.ones((5, 2)))
    fused = fuse(_graph(f, X)).lint()
    assert _ops(fused) == ["fused", "sum", "fused", "matmul"] or \
        _ops(fused) == ["fused", "sum", "matmul", "fused"]
    first = fused.nodes[[n.op for n in fused.nodes].index("fused")]
    assert len(first.outputs) == 1  # a goes on to sum, the second group and matmul


def test_shapes_dtypes_sizes_and_random_draws_are_respected(small_groups, monkeypatch):
    def f(x, b):
        wide = x * 2.0 + 1.0                  # [6,5]
        narrow = b * 3.0 + 1.0                # [5]: another shape, another group
        noise = rill.rand(6, 5)               # a draw stays a node of its own
        return wide + narrow + noise
    fused = fuse(_graph(f, X, B)).lint()
    assert _ops(fused).count("fused") == 2 and "uniform" in _ops(fused)
    # The pipeline's fusion leaves groups below MIN_ELEMENTS alone: [6,5] is 30 elements.
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 31)
    assert "fused" not in _ops(fuse_where_it_pays(_graph(f, X, B)))
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 30)
    assert _ops(fuse_where_it_pays(_graph(f, X, B))).count("fused") == 1


def test_the_pass_leaves_its_input_alone(small_groups):
    graph = _graph(lambda x: rill.exp(x) * 2.0, X)
    before = str(graph)
    fuse(graph)
    assert str(graph) == before


# ---- same results ---------------------------------------------------------------------------

def _train(make, make_opt, batches, fused: bool, monkeypatch):
    _fusing(monkeypatch, fused)
    rill.manual_seed(0)
    model = make()
    opt = make_opt(model.parameters())

    def step(x, t):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), t)
        loss.backward()
        opt.step()
        return loss
    run = rill.capture(step)
    losses = [run(x, t).numpy().copy() for x, t in batches]
    graph = run.graph_for(*batches[0])
    return model, losses, graph


def _batches(shape, classes, n=3):
    r = np.random.default_rng(1)
    return [(rill.tensor(r.standard_normal(shape).astype(np.float32)),
             rill.tensor(r.integers(0, classes, shape[0]))) for _ in range(n)]


class _Block(rill.nn.Module):
    """Layer norm, GELU and a softmax-weighted mix: the elementwise-heavy pieces."""

    def __init__(self):
        super().__init__()
        self.norm = rill.nn.LayerNorm(12)
        self.fc = rill.nn.Linear(12, 12)
        self.out = rill.nn.Linear(12, 4)

    def forward(self, x):
        h = F.gelu(self.fc(self.norm(x)), approximate="tanh")
        h = h * rill.softmax(h, axis=-1) + F.gelu(h)
        return self.out(h)


MODELS = {
    "mlp-adam": (lambda: rill.nn.Sequential(rill.nn.Linear(12, 16), rill.nn.ReLU(),
                                            rill.nn.Linear(16, 4)),
                 lambda ps: rill.optim.Adam(ps, lr=1e-2)),
    "layernorm-gelu-softmax-adamw": (_Block, lambda ps: rill.optim.AdamW(ps, lr=1e-2)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fused_training_steps_equal_unfused_bit_for_bit(name, small_groups, monkeypatch):
    make, make_opt = MODELS[name]
    batches = _batches((8, 12), 4)
    plain, plain_losses, _ = _train(make, make_opt, batches, False, monkeypatch)
    fused, fused_losses, graph = _train(make, make_opt, batches, True, monkeypatch)
    # the optimizer's scalars at least (Adam's bias corrections are one group since a group's
    # step counts step together); ReLU's gradient is one node on the CPU (relu_grad), which
    # groups with elementwise neighbours only, and has none in this MLP
    assert graph.count("fused") >= (2 if name != "mlp-adam" else 1)
    for a, b in zip(plain_losses, fused_losses):
        _bits_equal(a, b)
    for (key, a), (_, b) in zip(plain.named_parameters(), fused.named_parameters()):
        _bits_equal(a.numpy(), b.numpy())
        _bits_equal(a.grad.numpy(), b.grad.numpy())


def test_lstm_cell_step_equals_unfused_bit_for_bit(small_groups, monkeypatch):
    results = []
    for on in (False, True):
        _fusing(monkeypatch, on)
        rill.manual_seed(0)
        cell = rill.nn.LSTMCell(6, 8)
        opt = rill.optim.SGD(cell.parameters(), lr=0.1, momentum=0.9)

        @rill.capture
        def step(xs):
            opt.zero_grad()
            h = c = rill.zeros((4, 8))
            for t in range(3):
                h, c = cell(xs[t], (h, c))
            loss = (h * h).mean() + c.mean()
            loss.backward()
            opt.step()
            return loss
        xs = rill.tensor(np.random.default_rng(2).standard_normal((3, 4, 6)).astype(np.float32))
        losses = [step(xs).numpy() for _ in range(3)]
        results.append((losses, [p.numpy() for p in cell.parameters()],
                        step.graph_for(xs).count("fused")))
    (l0, p0, n0), (l1, p1, n1) = results
    assert n0 == 0 and n1 >= 3
    for a, b in zip(l0 + p0, l1 + p1):
        _bits_equal(a, b)


def test_transposed_inputs_keep_the_unfused_layout(small_groups):
    # A ufunc's result follows its inputs' memory order, and a later sum adds in that order.
    def f(x):
        t = rill.transpose(x, (1, 0))
        return rill.sum(rill.exp(t) * 3.0 + t, axis=0)
    x = rill.tensor(np.random.default_rng(3).standard_normal((64, 48)).astype(np.float32))
    graph = _graph(f, x)
    fused = fuse(graph).lint()
    assert "fused" in _ops(fused)
    _bits_equal(_run(graph, x)[0], _run(fused, x)[0])


def test_fused_graph_differentiates_through_its_body(small_groups, monkeypatch):
    # A captured call on the tape runs through evaluate: the fused node's vjp is its body's.
    _fusing(monkeypatch, True)
    f = rill.capture(lambda x, b: (rill.tanh(x * b + 1.0) * rill.exp(x)).sum())
    x = rill.tensor(X.numpy(), requires_grad=True)
    b = rill.tensor(B.numpy(), requires_grad=True)
    f(x, b).backward()
    assert f.graph_for(x, b).count("fused") == 1
    xe = rill.tensor(X.numpy(), requires_grad=True)
    be = rill.tensor(B.numpy(), requires_grad=True)
    (rill.tanh(xe * be + 1.0) * rill.exp(xe)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), be.grad.numpy(), rtol=1e-6)


# ---- saving ---------------------------------------------------------------------------------

def test_a_saved_fused_graph_validates_and_loads_back(tmp_path, small_groups, monkeypatch):
    _fusing(monkeypatch, True)
    f = rill.capture(lambda x, b: F.gelu(x * b + 1.0) - rill.sigmoid(x))
    expected = f(X, B).numpy()
    f.save(tmp_path / "g")
    docs = [json.load(open(tmp_path / "g" / name)) for name in os.listdir(tmp_path / "g")
            if name.endswith(".json") and name.startswith("graph")]
    assert '"fused"' in json.dumps(docs)
    loaded = rill.load_graph(tmp_path / "g")
    _bits_equal(loaded(X, B).numpy(), expected)


def test_a_fused_node_whose_inputs_disagree_with_its_body_is_refused(small_groups):
    fused = fuse(_graph(lambda x: rill.exp(x) * 2.0, X))
    node = [n for n in fused.nodes if n.op == "fused"][0]
    node.inputs = node.inputs[:1] + node.inputs  # one input too many
    with pytest.raises(rill.CaptureError, match="fused"):
        fused.lint()


# ---- gpu (Triton's interpreter where there is no GPU) --------------------------------------

@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device (interpreted or real)")
def test_gpu_fused_kernel_equals_the_unfused_kernels(small_groups):
    from rill.kernels.triton.fused import run_fused

    def f(x, b, h):
        y = rill.relu(x + b)
        z = rill.exp(y) * 2.0 - F.gelu(y, approximate="tanh")
        w = rill.where(z > 1.0, z, rill.sigmoid(z)) + F.leaky_relu(y, 0.2)
        return w, (h * 1.5 + 1.0).astype(rill.float32) * z
    r = np.random.default_rng(4)
    args = [rill.tensor(r.standard_normal(s).astype(d), device="gpu")
            for s, d in (((6, 5), np.float32), ((5,), np.float32), ((6, 1), np.float16))]
    graph = _graph(f, *args)
    fused = fuse(graph).lint()
    assert _ops(fused).count("fused") == 2 and len(_ops(fused)) == 2
    for node in fused.nodes:
        if node.op == "fused":
            xp = rill.gpu.backend().xp  # device buffers: CuPy on a GPU, NumPy when interpreted
            run_fused(*[xp.asarray(r.standard_normal(v.shape).astype(v.dtype.storage))
                        for v in node.inputs], body=node.attrs["body"])
            assert node.attrs["body"]._triton_fused.kernel is not None  # one kernel, no fallback
    for a, b in zip(_run(graph, *args), _run(fused, *args)):
        _bits_equal(a.get() if hasattr(a, "get") else a, b.get() if hasattr(b, "get") else b)
