"""Fused elementwise groups as generated C loops (kernels/native/fused.py): every op they
generate against the NumPy kernels bit for bit (NaN, infinities, signed zeros, 0-d operands,
booleans, casts, several outputs); which nodes the pipeline fuses on the CPU; input the loop
cannot take going to the NumPy function; planned output buffers; the source holding nothing
taken from the graph; the compile in the background; wrong buffers as errors."""
from __future__ import annotations

import numpy as np
import pytest

import rill
from rill.capture.passes import fuse as fuse_module
from rill.capture.passes import pipeline
from rill.capture.passes.fuse import fuse
from rill.kernels.native import build
from rill.kernels.native import fused as native_fused
from rill.kernels.numpy import fused as numpy_fused

pytestmark = pytest.mark.skipif(not native_fused._have_compiler(), reason="no C compiler")


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    monkeypatch.setattr(build, "ENABLED", True)
    monkeypatch.setattr(native_fused, "WAIT", True)


def _values(shape, dtype, seed):
    """Normal draws with the special values in the first eight places."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = a.reshape(-1)
    flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.0]
    return a


def _fused_graph(fn, *args):
    """fn's optimized graph with every group fused (the pass itself, groups of any size)."""
    graph = pipeline.optimize(rill.capture(fn, optimize=False).graph_for(*args), pipeline.PASSES)
    return fuse(graph)


def _bodies(graph):
    return [n.attrs["body"] for n in graph.nodes if n.op == "fused"]


def _check_body_bits(body, arrays):
    """The body's C loop gives the NumPy fused function's bytes, output for output."""
    kernel = native_fused.kernel(body)
    assert kernel is not None, native_fused.source(body)
    got = kernel(arrays, None)
    want = numpy_fused.program(body)(*arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        _same_bits_but_nan_signs(g, w)


def _same_bits_but_nan_signs(g, w):
    """Bit for bit, except that where two NaNs meet in an op (a NaN + a -NaN), which one's
    sign goes on is the compiler's choice (IEEE 754 leaves it open): NaN where NaN."""
    if g.dtype.kind != "f":
        assert g.tobytes() == w.tobytes()
        return
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    keep = ~np.isnan(w)
    assert g[keep].tobytes() == w[keep].tobytes()


CASES = {
    "arithmetic": lambda x, y, s: ((x + y) * s - x / (y - 0.5), -x * x),
    "sqrt, abs, reciprocal": lambda x, y, s: rill.sqrt(rill.abs(x) + y * y) - 1.0 / (x + s),
    "compare and select": lambda x, y, s: (rill.where(x > y, x, y * s),
                                           rill.where(x <= s, y, 0.0)),
    "every comparison": lambda x, y, s: ((x < y) | (x >= s)) ^ ((x == y) | (x != s)),
    "logical": lambda x, y, s: rill.logical_not((x > 0) & (y < 0)),
    "relu gradient": lambda x, y, s: rill.where(x > 0, y, 0.0),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_loops_are_bit_equal_to_numpy(name, dtype):
    x, y = _values((37, 29), dtype, 1), _values((37, 29), dtype, 2)
    s = np.asarray(-0.75, dtype)
    args = [rill.tensor(a) for a in (x, y, s)]
    bodies = _bodies(_fused_graph(CASES[name], *args))
    assert bodies
    for body in bodies:
        inputs = [np.zeros(v.shape, v.dtype.storage) for v in body.inputs]
        # feed the body what the graph feeds it: here x, y and s in order of first use
        pool = {(tuple(a.shape), a.dtype): a for a in (x, y)}
        pool[((), np.dtype(dtype))] = s
        for j, v in enumerate(body.inputs):
            inputs[j] = pool.get((tuple(v.shape), np.dtype(v.dtype.storage)), inputs[j])
        _check_body_bits(body, inputs)


def test_casts_and_scaled_add_are_bit_equal():
    from rill.ops.elementwise import scaled_add
    x = _values((50, 40), np.float64, 3)
    body = _bodies(_fused_graph(
        lambda a: (a.to(rill.float32) * 3.0).to(rill.float64) + (a > 0).to(rill.float64),
        rill.tensor(x)))[0]
    _check_body_bits(body, [x, np.asarray(3.0, np.float32), np.asarray(0.0, np.float64)][
        :len(body.inputs)] if len(body.inputs) <= 3 else None)
    p, g = _values((30, 20), np.float32, 12), _values((30, 20), np.float32, 13)
    for alpha, beta in [(1.0, -0.1), (0.9, 0.3)]:  # SGD's update; momentum's
        body = _bodies(_fused_graph(lambda a, b: scaled_add(a, b * b, alpha, beta),
                                    rill.tensor(p), rill.tensor(g)))[0]
        assert native_fused.source(body).count("0x1.") >= 1  # the factors as hex literals
        _check_body_bits(body, [p, g])


def test_the_pipeline_fuses_only_what_the_c_loops_run(monkeypatch):
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 1)
    x = rill.tensor(_values((8, 9), np.float32, 4))
    b = rill.tensor(_values((9,), np.float32, 5))

    def f(x, b):
        y = x * 2.0 + 1.0          # fused: same-shape and 0-d operands
        z = rill.exp(y) * 3.0      # exp has no exact C form: it stays a node
        return rill.maximum(z, y) - x + b  # maximum stays; - x + b (a row): one loop

    graph = pipeline.optimize(rill.capture(f, optimize=False).graph_for(x, b))
    ops = [n.op for n in graph.nodes if n.op not in ("input", "constant")]
    assert ops.count("fused") >= 1 and "exp" in ops and "maximum" in ops
    for body in _bodies(graph):
        assert native_fused.source(body) is not None
        assert {n.op for n in body.nodes} <= {"input", "multiply", "add", "subtract"}
    eager = f(x, b).numpy()
    captured = rill.capture(f)(x, b).numpy()
    assert captured.tobytes() == eager.tobytes()


def test_no_compiler_no_cpu_fusion(monkeypatch):
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 1)
    monkeypatch.setattr(build, "ENABLED", False)
    x = rill.tensor(_values((8, 9), np.float32, 6))
    graph = pipeline.optimize(rill.capture(lambda x: x * 2.0 + 1.0, optimize=False).graph_for(x))
    assert graph.count("fused") == 0


def test_input_the_loop_cannot_take_runs_in_numpy():
    x = _values((12, 10), np.float32, 7)
    body = _bodies(_fused_graph(lambda a: a * 2.0 - a, rill.tensor(x)))[0]
    kernel = native_fused.kernel(body)
    two = np.asarray(2.0, np.float32)
    transposed = np.ascontiguousarray(x.T).T  # same values, Fortran order
    assert kernel([transposed, two], None) is None
    got = numpy_fused.run_fused(transposed, two, body=body)[0]
    assert got.tobytes() == (x * two - x).tobytes()


def test_planned_output_buffers_are_written_and_others_replaced():
    x = _values((16, 16), np.float32, 8)
    body = _bodies(_fused_graph(lambda a: a * a + a, rill.tensor(x)))[0]
    kernel = native_fused.kernel(body)
    planned = np.empty((16, 16), np.float32)
    got = kernel([x], [planned])[0]
    assert got is planned and planned.tobytes() == (x * x + x).tobytes()
    wrong = np.empty((16, 16), np.float64)  # not the value's dtype: a new buffer instead
    got = kernel([x], [wrong])[0]
    assert got is not wrong and got.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trailing_blocks_broadcast_in_the_loop(dtype):
    """A bias row and an attention-style mask beside a (5, 3, 7, 16) result (the bias a block
    smaller than the mask's, inside its rows): the loop's bytes equal NumPy's, run whole, in
    pieces cut inside rows (a thread's share), and on OpenMP's team."""
    x = _values((5, 3, 7, 16), dtype, 20)
    mask, bias = _values((1, 7, 16), dtype, 21), _values((16,), dtype, 22)
    graph = _fused_graph(lambda a, m, b: (a * 0.5 + m) * 2.0 - b,
                         *(rill.tensor(a) for a in (x, mask, bias)))
    (node,) = [n for n in graph.nodes if n.op == "fused"]
    body = node.attrs["body"]
    # what the graph feeds it: the arguments, and the constants 0.5 and 2.0
    inputs = [(x, mask, bias)[v.node.attrs["index"]] if v.node.op == "input" else
              np.asarray(v.node.attrs["value"]) for v in node.inputs]
    assert sorted(a.shape for a in inputs) == [(), (), (1, 7, 16), (5, 3, 7, 16), (16,)]
    text = native_fused.source(body)
    assert "% 16]" in text  # the bias inside the mask's rows of 112
    with np.errstate(invalid="ignore"):  # inf - inf among the special values
        want = numpy_fused.program(body)(*inputs)[0]
        _check_body_bits(body, inputs)
    module = native_fused._module(text)
    n = x.size
    for cuts in ([0, n], [0, 1, 111, 113, 500, n], [0, 41, 224, n]):
        got = np.full(x.shape, np.nan, dtype)
        for lo, hi in zip(cuts, cuts[1:]):
            module.run(tuple(inputs), (got,), n, lo, hi)
        _same_bits_but_nan_signs(got, want)
        teamed = np.full(x.shape, np.nan, dtype)
        module.run(tuple(inputs), (teamed,), n, cuts[1], n, 2)
        module.run(tuple(inputs), (teamed,), n, 0, cuts[1], 2)
        _same_bits_but_nan_signs(teamed, want)
    with pytest.raises(ValueError, match="input"):  # a block of the wrong size
        module.run(tuple(a[:5] if a is bias else a for a in inputs), (got,), n, 0, n)


def test_the_pipeline_fuses_a_bias_and_a_residual_into_one_loop(monkeypatch):
    """x + (h @ w + b), the residual of a transformer block: one C loop over the two adds,
    the bias read as a row; a column broadcast (a (rows, 1) operand) and a row of fewer than
    MIN_BLOCK elements are not fused."""
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 1)
    rng = np.random.default_rng(23)
    x, h = (rill.tensor(rng.standard_normal((4, 9, 16)).astype(np.float32)) for _ in range(2))
    w = rill.tensor(rng.standard_normal((16, 16)).astype(np.float32))
    b = rill.tensor(rng.standard_normal(16).astype(np.float32))
    column = rill.tensor(rng.standard_normal((4, 9, 1)).astype(np.float32))

    def block(x, h, w, b):
        return x + (h @ w + b)

    graph = pipeline.optimize(rill.capture(block, optimize=False).graph_for(x, h, w, b))
    (body,) = _bodies(graph)
    assert [n.op for n in body.nodes if n.op != "input"] == ["add", "add"]
    assert native_fused.source(body) is not None
    assert rill.capture(block)(x, h, w, b).numpy().tobytes() == block(x, h, w, b).numpy().tobytes()

    def by_column(x, c):
        return (x + c) * 2.0

    graph = pipeline.optimize(rill.capture(by_column, optimize=False).graph_for(x, column))
    assert graph.count("fused") == 0
    short = rill.tensor(rng.standard_normal(4).astype(np.float32))
    graph = pipeline.optimize(rill.capture(by_column, optimize=False).graph_for(
        rill.tensor(rng.standard_normal((9, 4)).astype(np.float32)), short))
    assert graph.count("fused") == 0


def test_the_source_holds_nothing_taken_from_the_graph():
    x = rill.tensor(_values((10, 10), np.float32, 9))

    def evil_name_y(a):
        return a * 1.5 + a

    body = _bodies(_fused_graph(evil_name_y, x))[0]
    text = native_fused.source(body)
    assert "evil_name_y" not in text and "test_fused_c" not in text
    for node in body.nodes:
        if node.source is not None:
            assert str(node.source) not in text


def test_compiles_in_the_background_while_numpy_runs(monkeypatch):
    import threading
    release = threading.Event()
    real = build.load_generated

    def slow(name, text):
        release.wait(10)
        return real(name, text)

    monkeypatch.setattr(native_fused, "WAIT", False)
    monkeypatch.setattr(build, "load_generated", slow)
    monkeypatch.setitem(fuse_module.MIN_ELEMENTS, "cpu", 1)
    x = rill.tensor(_values((9, 7), np.float32, 10))

    def f(a):  # a group no other test makes: its source is new to this process
        return (a - 0.125) * (a + 0.375)

    captured = rill.capture(f)
    want = f(x).numpy().tobytes()
    assert captured(x).numpy().tobytes() == want  # the NumPy function, while compiling
    graph = next(iter(captured.variants.values())).graph
    body = _bodies(graph)[0]
    assert native_fused.kernel(body) is None
    release.set()
    for _ in range(400):
        if native_fused.kernel(body) is not None:
            break
        threading.Event().wait(0.05)
    assert native_fused.kernel(body) is not None
    assert captured(x).numpy().tobytes() == want  # the C loop


def test_wrong_buffers_are_errors_not_reads_out_of_bounds():
    x = _values((6, 6), np.float32, 11)
    body = _bodies(_fused_graph(lambda a: a * a + a, rill.tensor(x)))[0]
    module = native_fused._module(native_fused.source(body))
    out = np.empty(36, np.float32)
    module.run((x,), (out,), 36, 0, 36)
    with pytest.raises(ValueError, match="input"):
        module.run((x[:3],), (out,), 36, 0, 36)
    with pytest.raises(ValueError, match="elements"):
        module.run((x,), (out,), 36, 0, 37)
    with pytest.raises(ValueError, match="number of buffers"):
        module.run((x, x), (out,), 36, 0, 36)
    with pytest.raises(BufferError):
        module.run((x,), (np.empty(36, np.float32).tobytes(),), 36, 0, 36)  # read-only out


def test_the_checked_call_runs_only_buffers_of_the_body():
    """module.call checks every buffer in C (the path of each call under 2^15 elements): a
    buffer of another dtype, byte order, layout or shape (same count), or a read-only
    output, runs nothing and answers False; the body's own buffers run, bit equal."""
    x = _values((6, 6), np.float32, 12)
    body = _bodies(_fused_graph(lambda a: a * a + a, rill.tensor(x)))[0]
    module = native_fused._module(native_fused.source(body))
    shapes = ((6, 6), (6, 6))
    out = np.full((6, 6), 7.0, np.float32)
    assert module.call((x,), (out,), shapes) is True
    assert out.tobytes() == (x * x + x).tobytes()
    differing = [
        ((x.astype(np.float64),), (out,)),           # input dtype
        ((x.astype(">f4"),), (out,)),                # byte order
        ((np.asfortranarray(x.T),), (out,)),          # layout (values as x, transposed)
        ((x.reshape(4, 9),), (out,)),                 # same count, other shape
        ((x,), (np.empty((6, 6), np.float64),)),     # output dtype
        ((x,), (np.empty(36, np.float32),)),         # output shape
        ((x.tobytes(),), (out,)),                     # not an array
    ]
    readonly = np.empty((6, 6), np.float32)
    readonly.flags.writeable = False
    differing.append(((x,), (readonly,)))
    for inputs, outputs in differing:
        before = [o.tobytes() if isinstance(o, np.ndarray) else o for o in outputs]
        assert module.call(inputs, outputs, shapes) is False
        assert [o.tobytes() for o in outputs] == before  # nothing written
    with pytest.raises(ValueError, match="number of buffers"):
        module.call((x, x), (out,), shapes)
    # Through the body's kernel: a differing input falls to the checked path (None: NumPy
    # runs the group); a differing planned output is replaced by a new buffer.
    kernel = native_fused.kernel(body)
    assert kernel([x.reshape(4, 9)], None) is None
    got = kernel([x], [np.empty(36, np.float32)])[0]
    assert got.shape == (6, 6) and got.tobytes() == (x * x + x).tobytes()


_FUSE_WITH_A_BAD_CACHE = """
import numpy as np, rill
from rill.capture.passes import fuse
from rill.kernels.native import build, fused
fuse.MIN_ELEMENTS["cpu"] = 1
x = rill.tensor(np.arange(12, dtype=np.float32))
f = rill.capture(lambda a: a * 2.0 + 1.0)
assert f(x).numpy().tolist() == (np.arange(12) * 2.0 + 1.0).tolist()  # NumPy ran it
print(build.why_not("fused"))
print(fused.available())
g = rill.capture(lambda a: a * 3.0 - 1.0)
g(x)
print(next(iter(g.variants.values())).graph.count("fused"))
"""


def test_a_generated_build_that_fails_leaves_numpy_running_the_group(tmp_path):
    """The cache folder cannot be made (its path is a file): the group runs in NumPy, the
    failure is kept (why_not), and later captures stop fusing on the CPU."""
    import os
    import subprocess
    import sys
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = dict(os.environ, RILL_CACHE_DIR=str(blocker), RILL_NATIVE_WAIT="1")
    env.pop("RILL_NATIVE", None)
    done = subprocess.run([sys.executable, "-c", _FUSE_WITH_A_BAD_CACHE], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    why, available, fused_nodes = done.stdout.splitlines()[-3:]
    assert "writing the source" in why and available == "False" and fused_nodes == "0"


def test_booleans_of_any_nonzero_byte_are_true_as_in_numpy():
    """NumPy's bitwise ops, selects and casts on booleans read any nonzero byte as True; a
    bool array made by viewing bytes can hold 2."""
    raw = np.array([0, 1, 2, 255, 2, 0] * 8, np.uint8).view(np.bool_)
    other = np.array([1, 1, 1, 0, 2, 1] * 8, np.uint8).view(np.bool_)
    values = _values(raw.shape, np.float32, 14)
    t = lambda a: rill.tensor(np.ones(a.shape, a.dtype))  # noqa: E731 - shapes and dtypes
    graph = _fused_graph(
        lambda a, b, v: rill.where(a & b, v, -v) + (a ^ b).to(rill.float32) * v +
        a.to(rill.float32), t(raw), t(other), t(values))
    (node,) = [n for n in graph.nodes if n.op == "fused"]
    # the fused node's inputs are the graph's inputs (no constant in this group)
    arrays = [(raw, other, values)[v.node.attrs["index"]] for v in node.inputs]
    assert [v.node.op for v in node.inputs] == ["input"] * 3
    _check_body_bits(node.attrs["body"], arrays)
