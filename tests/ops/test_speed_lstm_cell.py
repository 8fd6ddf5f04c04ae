"""The fused LSTM cell (rill.ops.lstm_cell, issue 20, speed): one primitive for the recurrent
GEMM and the gates' elementwise math, another for its gradient's elementwise math.

Forward against a NumPy float64 reference written from PyTorch's documented LSTM equations;
gradients against central finite differences (float64) and PyTorch; the primitive eager and
under rill.capture (where rill.nn.LSTM's scan runs it), and the composite fallback; bad input
as rill errors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import rill
from rill.ops import lstm_cell as cell_module
from rill.ops.lstm_cell import lstm_cell, lstm_cell_composite, lstm_cell_p

N, H, K = 3, 4, 4


@pytest.fixture(autouse=True)
def _quiet_retraces():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rill.CaptureWarning)
        yield


def arrays(k=K, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    out = [rng.uniform(-1, 1, (N, 4 * H)), rng.uniform(-1, 1, (N, k)),
           rng.uniform(-1, 1, (N, H)), rng.uniform(-1, 1, (4 * H, k))]
    return out + [rng.uniform(-1, 1, (4 * H,))] if bias else out


def reference(x_proj, h, c, w, b=None):
    """i, f, g, o = split(x_proj + h W^T + b); c' = s(f) c + s(i) tanh(g); h' = s(o) tanh(c')."""
    gates = x_proj + h @ w.T + (0 if b is None else b)
    i, f, g, o = np.split(gates, 4, axis=-1)

    def s(a):
        return 1 / (1 + np.exp(-a))
    c_new = s(f) * c + s(i) * np.tanh(g)
    return s(o) * np.tanh(c_new), c_new


def tensors(values, dtype=np.float64, requires_grad=False):
    return [rill.tensor(v.astype(dtype), requires_grad=requires_grad) for v in values]


@pytest.mark.parametrize("k, bias", [(K, True), (K, False), (2, True)])
def test_forward_matches_numpy_float64(k, bias):
    values = arrays(k, bias=bias)
    h, c = lstm_cell(*tensors(values))
    want = reference(*values)
    np.testing.assert_allclose(h.numpy(), want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c.numpy(), want[1], rtol=1e-12, atol=1e-14)
    # the fused primitive really ran (not the composite fallback)
    out = rill.ops.lstm_cell.bind(lstm_cell_p, *tensors(values))
    np.testing.assert_allclose(out[0].numpy(), want[0], rtol=1e-12, atol=1e-14)


def test_float32_matches_float64_reference():
    values = arrays()
    h, c = lstm_cell(*tensors(values, np.float32))
    assert h.dtype is rill.float32 and c.dtype is rill.float32
    want = reference(*values)
    np.testing.assert_allclose(h.numpy(), want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), want[1], rtol=1e-5, atol=1e-6)


def loss_of(h, c, weights):
    """A loss that gives both outputs a cotangent of its own."""
    return (h * weights[0]).sum() + (c * weights[1]).sum()


@pytest.mark.parametrize("k", [K, 2])
def test_gradients_match_finite_differences_and_torch(k):
    values = arrays(k, seed=1)
    rng = np.random.default_rng(5)
    weights = [rng.uniform(-1, 1, (N, H)), rng.uniform(-1, 1, (N, H))]
    ts = tensors(values, requires_grad=True)
    loss_of(*lstm_cell(*ts), tensors(weights)).backward()
    got = [t.grad.numpy() for t in ts]

    def f(*vs):
        h, c = reference(*vs)
        return float((h * weights[0]).sum() + (c * weights[1]).sum())
    eps = 1e-6
    for i, v in enumerate(values):
        fd = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus, minus = [a.copy() for a in values], [a.copy() for a in values]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            fd[idx] = (f(*plus) - f(*minus)) / (2 * eps)
        np.testing.assert_allclose(got[i], fd, rtol=1e-6, atol=1e-8)

    tt = [torch.tensor(v, requires_grad=True) for v in values]
    x_proj, h, c, w, b = tt
    gates = x_proj + h @ w.T + b
    i_, f_, g_, o_ = gates.chunk(4, dim=-1)
    c_new = torch.sigmoid(f_) * c + torch.sigmoid(i_) * torch.tanh(g_)
    h_new = torch.sigmoid(o_) * torch.tanh(c_new)
    ((h_new * torch.tensor(weights[0])).sum() + (c_new * torch.tensor(weights[1])).sum()).backward()
    for mine, ref in zip(got, tt):
        np.testing.assert_allclose(mine, ref.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_one_output_without_cotangent():
    """Only h' used: c' gets no cotangent, the vjp takes zeros for it."""
    values = arrays()
    ts = tensors(values, requires_grad=True)
    lstm_cell(*ts)[0].sum().backward()
    tt = tensors(values, requires_grad=True)
    lstm_cell_composite(*tt)[0].sum().backward()
    for a, b in zip(ts, tt):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_second_order_gradient_through_the_composite_rule():
    values = arrays(seed=2)

    def inner(w):
        x_proj, h, c, _, b = tensors(values)
        h2, c2 = lstm_cell(x_proj, h, c, w, b)
        return (h2 * h2).sum() + c2.sum()

    def outer(w):
        return (rill.grad(inner)(w) ** 2).sum()

    got = rill.grad(outer)(rill.tensor(values[3])).numpy()

    w = torch.tensor(values[3], requires_grad=True)
    x_proj, h, c, _, b = (torch.tensor(v) for v in values)
    i_, f_, g_, o_ = (x_proj + h @ w.T + b).chunk(4, dim=-1)
    c2 = torch.sigmoid(f_) * c + torch.sigmoid(i_) * torch.tanh(g_)
    h2 = torch.sigmoid(o_) * torch.tanh(c2)
    (gw,) = torch.autograd.grad((h2 * h2).sum() + c2.sum(), w, create_graph=True)
    (gg,) = torch.autograd.grad((gw ** 2).sum(), w)
    np.testing.assert_allclose(got, gg.numpy(), rtol=1e-9, atol=1e-12)


def test_second_order_gradient_of_the_fused_sequence_is_its_composites():
    """lstm_sequence declares its composite (Primitive(composite=...)): under create_graph
    the reverse walk differentiates the per-step cells instead of the fused gradient kernel,
    so a gradient of its gradient is right: against central differences, in float64."""
    from rill.ops.lstm_sequence import fits, lstm_sequence, lstm_sequence_p
    rng = np.random.default_rng(4)
    steps, n, hidden = 4, 2, 3
    proj = rng.standard_normal((steps, n, 4 * hidden))
    h0, c0 = rng.standard_normal((2, n, hidden))
    w = 0.3 * rng.standard_normal((4 * hidden, hidden))
    assert lstm_sequence_p.composite is not None

    def gradient(p):
        def loss(p):
            hs, _, c_t = lstm_sequence(p, rill.tensor(h0), rill.tensor(c0), rill.tensor(w))
            return (hs ** 2).sum() + c_t.sum()
        return rill.grad(loss)(p)

    assert fits(rill.tensor(proj), rill.tensor(h0), rill.tensor(c0), rill.tensor(w))
    got = rill.grad(lambda p: (gradient(p) ** 2).sum())(rill.tensor(proj)).numpy()

    def f(a):
        return float((gradient(rill.tensor(a)).numpy() ** 2).sum())
    want, eps = np.zeros_like(proj), 1e-6
    for i in np.ndindex(proj.shape):
        up, down = proj.copy(), proj.copy()
        up[i] += eps
        down[i] -= eps
        want[i] = (f(up) - f(down)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_captured_matches_eager():
    values = arrays(seed=3)

    def step(*ts):
        h, c = lstm_cell(*ts)
        return (h * h).sum() + (c * 0.5).sum()
    grad = rill.grad(step, argnums=(0, 1, 2, 3, 4))
    eager = grad(*tensors(values))
    captured = rill.capture(grad)
    for _ in range(2):
        got = captured(*tensors(values))
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-13, atol=1e-15)
    assert "lstm_cell" in str(captured.graph_for(*tensors(values)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_captured_lstm_scan_matches_torch(dtype):
    """rill.nn.LSTM captured (one lstm_sequence node per layer and its gradient's) and eager,
    against torch.nn.LSTM: output, final state and all parameter gradients."""
    torch.manual_seed(0)
    ref = torch.nn.LSTM(5, 6, num_layers=2).to(torch.float64 if dtype is np.float64 else
                                                torch.float32)
    mine = rill.nn.LSTM(5, 6, num_layers=2, dtype=rill.float64 if dtype is np.float64 else
                        rill.float32)
    mine.load_state_dict({k: rill.tensor(v.detach().numpy()) for k, v in
                          ref.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((7, 3, 5)).astype(dtype)
    out, (h, c) = ref(torch.tensor(x))
    ((out ** 2).mean() + (h * c).sum()).backward()
    tol = dict(rtol=1e-10, atol=1e-12) if dtype is np.float64 else dict(rtol=1e-4, atol=1e-6)

    def step(x):
        mine.zero_grad()
        out, (h, c) = mine(x)
        loss = (out ** 2).mean() + (h * c).sum()
        loss.backward()
        return out
    for fn in (step, rill.capture(step)):
        for _ in range(2):
            got = fn(rill.tensor(x))
        np.testing.assert_allclose(got.numpy(), out.detach().numpy(), **tol)
        for name, p in ref.named_parameters():
            np.testing.assert_allclose(getattr(mine, name).grad.numpy(), p.grad.numpy(),
                                       **tol, err_msg=name)
    graph = str(rill.capture(step).graph_for(rill.tensor(x)))
    # float32 with oneDNN loaded: the layers with their projections (tests/kernels/onednn/test_lstm_onednn.py)
    from rill.kernels.onednn.library import library
    op = "lstm_layer" if dtype is np.float32 and library() is not None else "lstm_sequence"
    assert graph.count(f"{op}(") == 2 and graph.count(f"{op}_grad(") == 2


def test_composite_fallback_for_unbatched_and_half_precision():
    values = arrays()
    # unbatched (1-d) input: the composite, same values
    h, c = lstm_cell(*tensors([values[0][0], values[1][0], values[2][0], values[3],
                               values[4]]))
    want = reference(*values)
    np.testing.assert_allclose(h.numpy(), want[0][0], rtol=1e-12)
    h16, _ = lstm_cell(*tensors(values, np.float16))
    assert h16.dtype is rill.float16
    np.testing.assert_allclose(h16.numpy().astype(np.float64), want[0], atol=5e-3)


def test_bad_shapes_and_dtypes_are_rill_errors():
    x_proj, h, c, w, b = tensors(arrays())
    with pytest.raises(rill.ShapeError, match="lstm_cell.*x_proj \\(N, 4H\\)"):
        cell_module.bind(lstm_cell_p, x_proj[:, :-1], h, c, w, b)
    with pytest.raises(rill.ShapeError, match="b_hh must have shape"):
        cell_module.bind(lstm_cell_p, x_proj, h, c, w, b[:-1])
    with pytest.raises(rill.DTypeError, match="one float dtype"):
        cell_module.bind(lstm_cell_p, x_proj, h, c.to(rill.float32), w, b)
    with pytest.raises(rill.DTypeError, match="float32 or float64"):
        cell_module.bind(lstm_cell_p, *[t.to(rill.float16) for t in (x_proj, h, c, w, b)])
    # through the public layer: a wrong feature count names the layer
    with pytest.raises(rill.ShapeError, match="LSTM"):
        rill.nn.LSTM(5, 6)(rill.ones(7, 3, 4))
