"""Control flow (rill.cond, switch, while_loop, fori_loop, scan): eager as Python, captured
as one node holding subgraphs; values and gradients against eager unrolled code and central
finite differences (float64), graph sizes independent of trip counts, state, errors,
passes and serialization inside bodies."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import rill

import saved_graphs

f64 = rill.float64


@pytest.fixture(autouse=True)
def _quiet_retraces():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rill.CaptureWarning)
        yield


def t(a, requires_grad=False):
    return rill.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def rand(*shape, seed=0, low=-1.0, high=1.0):
    return np.random.default_rng(seed + sum(shape)).uniform(low, high, shape)


def finite_differences(f, arrays, eps=1e-6):
    """d f / d arrays[i] for a scalar f of float64 arrays, by central differences."""
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus = [b.copy() for b in arrays]
            minus = [b.copy() for b in arrays]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (f(*plus) - f(*minus)) / (2 * eps)
        grads.append(g)
    return grads


def check_gradients(loss, unrolled, arrays, rtol=1e-6):
    """The captured gradient of `loss` equals eager `unrolled`'s and finite differences."""
    argnums = tuple(range(len(arrays)))
    captured = rill.capture(rill.grad(loss, argnums=argnums))
    got = captured(*[t(a) for a in arrays])
    eager = rill.grad(unrolled, argnums=argnums)(*[t(a) for a in arrays])
    fd = finite_differences(lambda *a: float(unrolled(*[t(x) for x in a])), arrays)
    for g, e, d in zip(got, eager, fd):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=rtol, atol=1e-12)
        np.testing.assert_allclose(g.numpy(), d, rtol=1e-5, atol=1e-7)
    return captured


# ---- cond and switch -----------------------------------------------------------------------

def test_eager_cond_runs_only_the_branch_taken():
    ran = []
    out = rill.cond(t(2.0) > 1, lambda x: ran.append("t") or x * 2, lambda x: ran.append("f"),
                    t(3.0))
    assert ran == ["t"] and float(out) == 6.0
    assert float(rill.switch(2, [lambda: t(0.0), lambda: t(1.0), lambda: t(2.0)])) == 2.0


def test_captured_cond_takes_either_branch_with_nested_operands():
    @rill.capture
    def f(p, d):
        return rill.cond(p, lambda d: {"a": d["x"] * 2, "b": (d["y"] + 1,)},
                         lambda d: {"a": -d["x"], "b": (d["y"] * d["y"],)}, d)
    d = {"x": t(rand(3)), "y": t(rand(2))}
    for p in (True, False):
        got = f(rill.tensor(p), d)
        want = rill.cond(p, lambda d: {"a": d["x"] * 2, "b": (d["y"] + 1,)},
                         lambda d: {"a": -d["x"], "b": (d["y"] * d["y"],)}, d)
        np.testing.assert_array_equal(got["a"].numpy(), want["a"].numpy())
        np.testing.assert_array_equal(got["b"][0].numpy(), want["b"][0].numpy())
    graph = f.graph_for(rill.tensor(True), d)
    assert graph.count("switch") == 1 and "branches[1]" in str(graph)


def test_cond_and_switch_gradients():
    def branchy(x, y):
        return rill.cond(x.sum() > 0, lambda a, b: (a * b).sum(), lambda a, b: (rill.sin(a) - b).sum(),
                         x, y) * 1.5

    def unrolled(x, y):
        return ((x * y).sum() if float(x.sum()) > 0 else (rill.sin(x) - y).sum()) * 1.5
    check_gradients(branchy, unrolled, [rand(3), rand(3, seed=1)])
    check_gradients(branchy, unrolled, [rand(3) - 2, rand(3, seed=1)])

    def switched(k, x):
        return rill.switch(k, [lambda v: (v ** 2).sum(), lambda v: rill.exp(v).sum(),
                               lambda v: (v * w).sum()], x)
    w = t(rand(4, seed=3))
    for k in range(3):
        g = rill.capture(rill.grad(switched, argnums=1))(rill.tensor(k), t(rand(4)))
        e = rill.grad(lambda x: [lambda v: (v ** 2).sum(), lambda v: rill.exp(v).sum(),
                                 lambda v: (v * w).sum()][k](x))(t(rand(4)))
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-12)


def test_cond_gradient_reaches_parameters_used_inside_branches():
    w = rill.tensor(rand(3), dtype=f64, requires_grad=True)

    @rill.capture
    def step(x):
        loss = rill.cond(x.sum() > 0, lambda v: (v * w).sum(), lambda v: (v * w * w).sum(), x)
        loss.backward()
        return loss
    x = t(rand(3) - 1.5)
    step(x)
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy() * w.numpy(), rtol=1e-12)


# ---- scan ----------------------------------------------------------------------------------

def rnn_step(w, u):
    return lambda h, x: (rill.tanh(h @ w + x * u), (h * h).sum())


def rnn_loss(w, u, h0, xs, reverse=False):
    h, ys = rill.scan(rnn_step(w, u), h0, xs, reverse=reverse)
    return (h * h).sum() + (ys * ys).sum()


def rnn_unrolled(w, u, h0, xs, reverse=False):
    h, ys = h0, [None] * xs.shape[0]
    order = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    for i in order:
        h, ys[i] = rnn_step(w, u)(h, xs[i])
    ys = rill.stack(ys)
    return (h * h).sum() + (ys * ys).sum()


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_gradients_match_unrolled_and_finite_differences(reverse):
    arrays = [rand(3, 3) * 0.7, rand(3, seed=1), rand(2, 3, seed=2), rand(5, 2, 3, seed=3)]
    check_gradients(lambda *a: rnn_loss(*a, reverse=reverse),
                    lambda *a: rnn_unrolled(*a, reverse=reverse), arrays)


def test_scan_with_nested_carry_and_xs_matches_eager():
    def fn(c, x):
        h = rill.tanh(c["h"] * x[0] + x[1]["b"])
        return {"h": h, "n": c["n"] + 1}, (h.sum(), None)
    init = {"h": t(rand(3)), "n": rill.tensor(0)}
    xs = (t(rand(4, 3)), {"b": t(rand(4, 3, seed=5))})
    eager = rill.scan(fn, init, xs)
    captured = rill.capture(lambda i, x: rill.scan(fn, i, x))(init, xs)
    np.testing.assert_array_equal(captured[0]["h"].numpy(), eager[0]["h"].numpy())
    assert int(captured[0]["n"]) == 4 and captured[1][1] is None
    np.testing.assert_array_equal(captured[1][0].numpy(), eager[1][0].numpy())


def test_scan_graph_does_not_grow_with_the_length():
    f = rill.capture(lambda w, xs: rnn_loss(w, w[0], w[1:2], xs))
    w = rill.tensor(rand(3, 3), dtype=f64, requires_grad=True)
    short = f.graph_for(w, t(rand(10, 1, 3)))
    long = f.graph_for(w, t(rand(10_000, 1, 3)))
    assert short.count() == long.count()
    assert short.count("scan") == 1


def test_gradient_through_a_captured_function_uses_the_scan_vjp_eagerly():
    # Called with grad on, a captured function runs node by node on the tape; the scan's
    # vjp then runs as a Python loop over the saved residuals.
    arrays = [rand(3, 3) * 0.7, rand(3, seed=1), rand(2, 3, seed=2), rand(4, 2, 3, seed=3)]
    captured = rill.capture(rnn_loss)
    ts = [rill.tensor(a, dtype=f64, requires_grad=True) for a in arrays]
    captured(*ts).backward()
    want = rill.grad(rnn_unrolled, argnums=(0, 1, 2, 3))(*[t(a) for a in arrays])
    for x, g in zip(ts, want):
        np.testing.assert_allclose(x.grad.numpy(), g.numpy(), rtol=1e-12)


# ---- fori_loop and while_loop --------------------------------------------------------------

def test_fori_loop_static_and_dynamic_bounds():
    body = lambda i, c: c * 1.5 + rill.cast(i, f64)  # noqa: E731
    eager = rill.fori_loop(0, 5, body, t(1.0))
    assert float(rill.capture(lambda c: rill.fori_loop(0, 5, body, c))(t(1.0))) == float(eager)
    dyn = rill.capture(lambda n, c: rill.fori_loop(0, n, body, c))
    assert float(dyn(rill.tensor(5), t(1.0))) == float(eager)
    assert dyn.graph_for(rill.tensor(5), t(1.0)).count("while") == 1

    def loss(x):
        return rill.fori_loop(1, 4, lambda i, c: rill.sin(c) * rill.cast(i, f64), x).sum()

    def unrolled(x):
        for i in range(1, 4):
            x = rill.sin(x) * float(i)
        return x.sum()
    check_gradients(loss, unrolled, [rand(3)])


def test_while_loop_gradients_with_max_iterations():
    def loss(x, w):
        _, y = rill.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * w + rill.sin(c[1])),
                               (rill.tensor(0), x), max_iterations=20)
        return (y * y).sum()

    def unrolled(x, w):
        for _ in range(4):
            x = x * w + rill.sin(x)
        return (x * x).sum()
    check_gradients(loss, unrolled, [rand(3), rand(3, seed=1)])


def test_captured_while_loop_needs_max_iterations_to_be_differentiated():
    def loss(x):
        return rill.while_loop(lambda c: c.sum() < 10, lambda c: c * 2, x).sum()
    with pytest.raises(rill.GradientError, match="max_iterations"):
        rill.capture(rill.grad(loss))(t([1.0, 2.0]))


def newton_sqrt(a, tol):
    """Newton's iteration for sqrt(a), to convergence: the trip count is data."""
    def body(c):
        x, _, n = c
        new = 0.5 * (x + a / x)
        return new, rill.abs(new - x).max(), n + 1
    x, _, n = rill.while_loop(lambda c: c[1] > tol, body, (a, rill.tensor(np.inf, dtype=f64),
                                                            rill.tensor(0)))
    return x, n


def test_data_dependent_while_loop_matches_eager_and_keeps_its_size():
    a, tol = t([2.0, 9.0, 1e6]), t(1e-12)
    captured = rill.capture(newton_sqrt)
    x, n = captured(a, tol)
    ex, en = newton_sqrt(a, tol)
    np.testing.assert_array_equal(x.numpy(), ex.numpy())
    assert int(n) == int(en) and int(n) > 10
    np.testing.assert_allclose(x.numpy(), np.sqrt(a.numpy()), rtol=1e-15)
    # A fixed number of Newton-like steps: 10 or 10,000 iterations, the same graph size.
    steps = rill.capture(lambda k, x: rill.while_loop(lambda c: c[0] < k,
                                                      lambda c: (c[0] + 1, 0.5 * (c[1] + 2 / c[1])),
                                                      (rill.tensor(0), x))[1])
    ten = rill.capture(lambda x: rill.fori_loop(0, 10, lambda i, v: 0.5 * (v + 2 / v), x))
    many = rill.capture(lambda x: rill.fori_loop(0, 10_000, lambda i, v: 0.5 * (v + 2 / v), x))
    assert ten.graph_for(t(1.0)).count() == many.graph_for(t(1.0)).count()
    assert float(steps(rill.tensor(10), t(1.0))) == float(ten(t(1.0)))
    assert float(steps(rill.tensor(10_000), t(1.0))) == float(many(t(1.0)))


# ---- nesting -------------------------------------------------------------------------------

def test_nested_loops_and_branches_gradients():
    def loss(w, xs):
        def outer(h, x_row):
            def inner(g, x):
                g = rill.cond(x.sum() > 0, lambda v: rill.tanh(v * w), lambda v: v * 0.5 + w, g + x)
                return g, None
            g, _ = rill.scan(inner, h, x_row)
            return g, g.sum()
        h, ys = rill.scan(outer, rill.zeros(3, dtype=f64), xs)
        return (h * h).sum() + ys.sum()

    def unrolled(w, xs):
        h, total = rill.zeros(3, dtype=f64), 0
        for i in range(xs.shape[0]):
            g = h
            for j in range(xs.shape[1]):
                v = g + xs[i, j]
                g = rill.tanh(v * w) if float(xs[i, j].sum()) > 0 else v * 0.5 + w
            h = g
            total = total + g.sum()
        return (h * h).sum() + total
    captured = check_gradients(loss, unrolled, [rand(3), rand(3, 4, 3, seed=1)])
    graph = captured.graph_for(t(rand(3)), t(rand(3, 4, 3, seed=1)))
    assert graph.count("scan") == 2  # forward and backward, the inner loops inside them


def test_while_inside_cond_and_fori_inside_while():
    def f(x):
        def halve_until_small(v):
            return rill.while_loop(lambda c: rill.abs(c).max() > 1, lambda c: c / 2, v)
        y = rill.cond(x.sum() > 0, halve_until_small, lambda v: v, x)
        return rill.while_loop(lambda c: c[0] < 3,
                               lambda c: (c[0] + 1, rill.fori_loop(0, 2, lambda i, v: v + 1, c[1])),
                               (rill.tensor(0), y))[1]
    for x in (t([10.0, -3.0]), t([-10.0, 3.0])):
        np.testing.assert_array_equal(rill.capture(f)(x).numpy(), f(x).numpy())


# ---- state ---------------------------------------------------------------------------------

def test_in_place_updates_inside_a_loop_are_carried_in_order():
    counter = rill.tensor(0.0, dtype=f64)
    total = rill.tensor(0.0, dtype=f64)
    state = {"counter": counter, "total": total}

    def f(xs):
        before = counter * 1  # read before the loop: the old value
        def body(c, x):
            state["counter"] += 1.0
            state["total"] += x.sum() * counter  # reads the counter as updated this iteration
            return c + counter, None
        c, _ = rill.scan(body, rill.tensor(0.0, dtype=f64), xs)
        return before, c, counter * 1  # read after: the final value

    xs = t(rand(4, 2))
    eager = f(xs)
    eager_state = (float(counter), float(total))
    counter._data[...] = 0.0
    total._data[...] = 0.0
    got = rill.capture(f)(xs)
    assert [float(v) for v in got] == [float(v) for v in eager]
    assert (float(counter), float(total)) == eager_state
    assert float(counter) == 4.0


def test_a_module_buffer_updated_in_a_branch():
    bn = rill.nn.BatchNorm1d(3)
    f = rill.capture(lambda train, x: rill.cond(train, lambda v: bn(v), lambda v: v, x))
    before = bn.running_mean.numpy().copy()
    f(rill.tensor(False), rill.randn(8, 3))
    np.testing.assert_array_equal(bn.running_mean.numpy(), before)
    f(rill.tensor(True), rill.randn(8, 3) + 5)
    assert (bn.running_mean.numpy() > before).all()


# ---- errors --------------------------------------------------------------------------------

def test_mismatched_branches_and_carries_name_the_leaf():
    f = rill.capture(lambda p, x: rill.cond(p, lambda v: {"h": v}, lambda v: {"h": v[:2]}, x))
    with pytest.raises(rill.ShapeError, match=r"true_fn's result\['h'\] is f32\[3\] but false_fn's result\['h'\] is f32\[2\]"):
        f(rill.tensor(True), rill.ones(3))
    g = rill.capture(lambda p, x: rill.cond(p, lambda v: v, lambda v: rill.cast(v, f64), x))
    with pytest.raises(rill.DTypeError, match="f64"):
        g(rill.tensor(True), rill.ones(3))
    h = rill.capture(lambda x: rill.while_loop(lambda c: c[0].sum() < 3,
                                               lambda c: (c[0] + 1, c[1][None]), (x, x)))
    with pytest.raises(rill.ShapeError, match=r"body_fn's result\[1\] is f32\[1, 3\] but the initial carry\[1\] is f32\[3\]"):
        h(rill.ones(3))
    with pytest.raises(rill.ShapeError, match="initial carry"):  # eagerly too
        rill.while_loop(lambda c: c.sum() < 5, lambda c: c[None] + 1, rill.ones(3))
    with pytest.raises(rill.ArgumentError, match="structure"):
        rill.capture(lambda x: rill.scan(lambda c, v: ((c, c), v), x, x))(rill.ones(3))


def test_bad_arguments_are_named():
    with pytest.raises(rill.ArgumentError, match="pair"):
        rill.scan(lambda c, x: c + x, rill.tensor(0.0), rill.ones(3))
    with pytest.raises(rill.ShapeError, match="different lengths"):
        rill.scan(lambda c, x: (c, None), rill.tensor(0.0), (rill.ones(3), rill.ones(4)))
    with pytest.raises(rill.ShapeError, match="one element"):
        rill.cond(rill.ones(2), lambda: 1, lambda: 2)
    with pytest.raises(rill.IndexingError, match="out of range"):
        rill.switch(3, [lambda: 1])
    with pytest.raises(rill.ArgumentError, match="max_iterations"):
        rill.while_loop(lambda c: c < 1, lambda c: c, rill.tensor(0), max_iterations=-1)
    with pytest.raises(rill.ArgumentError, match="xs or length"):
        rill.scan(lambda c, x: (c, None), rill.tensor(0.0), None)
    sw = rill.capture(lambda k, x: rill.switch(k, [lambda v: v, lambda v: -v], x))
    with pytest.raises(rill.IndexingError, match="out of range"):
        sw(rill.tensor(5), rill.ones(2))  # found when the graph runs: named there


def test_backward_inside_a_body_and_higher_order_are_refused():
    w = rill.ones(3, requires_grad=True)

    def body(c, x):
        (c * w).sum().backward()
        return c, None
    with pytest.raises(rill.CaptureError, match="rill.grad"):
        rill.capture(lambda x: rill.scan(body, x, x[None]))(rill.ones(3))
    second = rill.grad(rill.grad(lambda x: rill.scan(lambda c, v: (c * rill.sin(v), None),
                                                     x, x[None])[0].sum()))
    with pytest.raises(rill.GradientError, match="higher-order"):
        rill.capture(second)(t(0.5))


# ---- passes, printing, saving --------------------------------------------------------------

def test_passes_optimize_bodies_like_top_level_graphs():
    f = rill.capture(lambda xs: rill.scan(lambda c, x: (c + x * 1.0 + rill.tensor(2.0) * 3.0, None),
                                          rill.tensor(0.0), xs)[0])
    xs = rill.ones(4)
    traced = f.graph_for(xs, optimized=False).nodes
    optimized = f.graph_for(xs).nodes
    body_of = lambda nodes: next(n for n in nodes if n.op == "scan").attrs["body"]  # noqa: E731
    assert body_of(traced).count("multiply") == 2 and body_of(optimized).count("multiply") == 0
    assert float(f(xs)) == 4 * 7.0


def test_a_check_inside_a_loop_body_survives_dce_and_raises():
    def f(labels):
        loss = lambda c, y: (c + rill.nn.functional.nll_loss(rill.zeros(1, 3), y[None]), None)  # noqa: E731
        rill.scan(loss, rill.tensor(0.0), labels)  # result unused
        return labels * 1
    f = rill.capture(f)
    f(rill.tensor([0, 1, 2]))
    with pytest.raises(rill.Error, match="nll_loss"):
        f(rill.tensor([0, 7, 2]))


def test_printed_graph_shows_bodies_and_lint_checks_them():
    f = rill.capture(lambda x: rill.scan(lambda c, v: (rill.tanh(c + v), c), x[0], x))
    graph = f.graph_for(rill.ones(3, 2))
    text = str(graph)
    assert "scan(" in text and "body: body(" in text and "tanh" in text
    body = next(n for n in graph.nodes if n.op == "scan").attrs["body"]
    body.outputs.append(body.outputs[0])  # break it: more outputs than the node has
    body.nodes.reverse()
    with pytest.raises(rill.CaptureError, match="in its body"):
        graph.lint()


def test_saved_graph_with_loops_and_branches_loads_and_runs(tmp_path):
    w = rill.tensor(rand(3, 3) * 0.5, dtype=f64)

    @rill.capture
    def f(xs, p):
        h, ys = rill.scan(lambda h, x: (rill.tanh(h @ w + x), h.sum()), rill.zeros(3, dtype=f64), xs)
        return rill.cond(p, lambda a: a * 2, lambda a: -a, h), ys
    xs = t(rand(5, 3))
    want = f(xs, rill.tensor(True))
    f.save(tmp_path / "g")
    doc = saved_graphs.read_doc(tmp_path / "g")
    assert "$graph" in json.dumps(doc)
    loaded = rill.load_graph(tmp_path / "g")
    got = loaded(xs, rill.tensor(True))
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    np.testing.assert_array_equal(got[1].numpy(), want[1].numpy())
    np.testing.assert_array_equal(loaded(xs, rill.tensor(False))[0].numpy(), -want[0].numpy() / 2)


# ---- recurrent layers ----------------------------------------------------------------------

@pytest.mark.parametrize("cls", [rill.nn.LSTM, rill.nn.GRU])
def test_recurrent_layers_capture_as_scans(cls):
    rill.manual_seed(0)
    model = cls(4, 5, num_layers=2, bidirectional=True, dtype=f64)
    x = rill.randn(6, 3, 4, dtype=f64)

    def step(x):
        out, _ = model(x)
        loss = (out * out).sum()
        loss.backward()
        return loss
    eager_loss = step(x)
    eager = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    captured = rill.capture(step)
    got = captured(x)
    assert float(got) == pytest.approx(float(eager_loss), rel=1e-12)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), eager[n], rtol=1e-10, atol=1e-12)
    graph = captured.graph_for(x)
    # layers x directions, forward and backward: scans, or (an LSTM) fused layers
    ops = ("lstm_sequence", "lstm_sequence_grad") if cls is rill.nn.LSTM else ("scan",)
    assert sum(graph.count(op) for op in ops) == 2 * 2 * 2
    long = captured.graph_for(rill.randn(60, 3, 4, dtype=f64))
    assert long.count() == graph.count()


def test_a_cond_on_a_constant_is_inlined_and_residuals_are_stacked_once():
    f = rill.capture(lambda x: rill.cond(rill.tensor(True), lambda v: rill.sin(v) * 2,
                                         lambda v: -v, x) + 1)
    x = t(rand(3))
    np.testing.assert_array_equal(f(x).numpy(), (rill.sin(x) * 2 + 1).numpy())
    assert f.graph_for(x).count("switch") == 0 and f.graph_for(x, optimized=False).count("switch") == 1
    gru = rill.nn.GRU(3, 4, dtype=f64)
    step = rill.capture(lambda x: rill.grad(lambda x: gru(x)[0].sum())(x))
    graph = step.graph_for(t(rand(5, 2, 3)))
    body = next(n for n in graph.nodes if n.op == "scan").attrs["body"]
    saved = body.outputs[2:]  # after the carry h and the output h: the residuals
    assert len(set(saved)) == len(saved)  # 1 - z is computed and saved once


def test_a_loop_inside_a_branch_is_differentiated():
    w = t(rand(3, seed=4))

    def loss(x, xs):
        inner = lambda v: rill.scan(lambda c, u: (rill.sin(c * w + u), None), v, xs)[0].sum()  # noqa: E731
        return rill.cond(x.sum() > -10, inner, lambda v: v.sum(), x)

    def unrolled(x, xs):
        for i in range(xs.shape[0]):
            x = rill.sin(x * w + xs[i])
        return x.sum()
    check_gradients(loss, unrolled, [rand(3), rand(4, 3, seed=2)])
