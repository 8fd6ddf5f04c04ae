"""nn.LSTM through oneDNN's LSTM primitive (lib/ops/lstm_layer.py, kernels/onednn/lstm.py),
against torch.nn.LSTM run in float64 on the same float32 weights and inputs: outputs, final
states and every gradient; eager against captured; and the fallback to lstm_sequence when
oneDNN is turned off."""
import numpy as np
import pytest

import rill
from rill.kernels.onednn import library
from rill.ops.batching import FallbackWarning

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.skipif(library.library() is None,
                                 reason=f"oneDNN not loaded: {library.why_not()}"),
              # the steps read their inputs from outside (so that a captured step sets their
              # .grad), and clear those .grad between runs: captures say so, as they should
              pytest.mark.filterwarnings("ignore::rill.CaptureWarning")]

F32 = dict(rtol=2e-4, atol=2e-5)  # float32 against the float64 oracle


def _pair(seed=0, **kw):
    torch.manual_seed(seed)
    ref = torch.nn.LSTM(5, 7, **kw)
    mine = rill.nn.LSTM(5, 7, **kw)
    mine.load_state_dict({k: rill.tensor(v.detach().numpy()) for k, v in
                          ref.state_dict().items()})
    return mine, ref.double()


def _data(shape, layers, directions, with_state, seed=1, batch=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    states = None
    if with_state:
        lead = (layers * directions, batch)
        states = tuple((rng.standard_normal(lead + (7,)) * 0.5).astype(np.float32)
                       for _ in range(2))
    return x, states


def _loss_weights(out_shape, state_shape, seed=2):
    """Fixed random weights for a loss reaching every output: sum(out * a) + sum(h * b)
    + sum(c * d)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32) for s in
                 (out_shape, state_shape, state_shape))


def _torch_step(ref, x, states, weights):
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ts = None if states is None else tuple(torch.tensor(s, dtype=torch.float64,
                                                        requires_grad=True) for s in states)
    out, (h, c) = ref(tx, ts)
    a, b, d = (torch.tensor(w, dtype=torch.float64) for w in weights)
    ((out * a).sum() + (h * b).sum() + (c * d).sum()).backward()
    grads = {n: p.grad.numpy() for n, p in ref.named_parameters()}
    grads["x"] = tx.grad.numpy()
    if ts is not None:
        grads["h0"], grads["c0"] = ts[0].grad.numpy(), ts[1].grad.numpy()
    return out.detach().numpy(), h.detach().numpy(), c.detach().numpy(), grads


def _rill_step(mine, x, states, weights):
    """A training step over tensors read from outside (as parameters are, so a captured
    step sets their .grad too): returns (out, h_n, c_n, x.grad, h0.grad, c0.grad)."""
    xt = rill.tensor(x, requires_grad=True)
    st = () if states is None else tuple(rill.tensor(s, requires_grad=True) for s in states)
    a, b, d = (rill.tensor(w) for w in weights)

    def step():
        mine.zero_grad()
        for t in (xt,) + st:
            t.grad = None
        out, (h, c) = mine(xt, st or None)
        ((out * a).sum() + (h * b).sum() + (c * d).sum()).backward()
        return out, h, c

    def run(fn):
        return [t.numpy() for t in fn()] + [t.grad.numpy() for t in (xt,) + st]
    return step, run


CASES = [dict(num_layers=1), dict(num_layers=2), dict(num_layers=2, batch_first=True),
         dict(num_layers=1, bidirectional=True), dict(num_layers=2, bias=False)]


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("kw", CASES,
                         ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_matches_torch_eager_and_captured(kw, with_state):
    mine, ref = _pair(**kw)
    directions = 2 if kw.get("bidirectional") else 1
    layers = kw["num_layers"]
    shape = (3, 6, 5) if kw.get("batch_first") else (6, 3, 5)
    x, states = _data(shape, layers, directions, with_state)
    out_shape = shape[:2] + (7 * directions,)
    weights = _loss_weights(out_shape, (layers * directions, 3, 7))
    want_out, want_h, want_c, want = _torch_step(ref, x, states, weights)
    step, run = _rill_step(mine, x, states, weights)
    captured = rill.capture(step)
    results = []
    for fn in (step, captured):
        got = run(fn)
        np.testing.assert_allclose(got[0], want_out, **F32)
        np.testing.assert_allclose(got[1], want_h, **F32)
        np.testing.assert_allclose(got[2], want_c, **F32)
        np.testing.assert_allclose(got[3], want["x"], **F32, err_msg="x")
        if with_state:
            np.testing.assert_allclose(got[4], want["h0"], **F32, err_msg="h0")
            np.testing.assert_allclose(got[5], want["c0"], **F32, err_msg="c0")
        for name, p in mine.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), want[name], **F32, err_msg=name)
        results.append(got + [p.grad.numpy() for _, p in mine.named_parameters()])
    for e, c in zip(*results):  # the same kernels either way
        np.testing.assert_allclose(c, e, rtol=1e-6, atol=1e-7)
    graph = captured.graph_for()
    assert graph.count("lstm_layer") == graph.count("lstm_layer_grad") == layers * directions
    assert graph.count("lstm_sequence") == 0


def test_gradient_when_the_outputs_are_dropped():
    """Only h_n enters the loss: the per-step outputs and c_n are dropped, yet oneDNN's
    backward reads them (lstm_layer keeps copies as residuals)."""
    mine, ref = _pair(num_layers=1)
    x, _ = _data((6, 3, 5), 1, 1, False)
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ref(tx)[1][0].pow(2).sum().backward()
    xt = rill.tensor(x, requires_grad=True)
    _, (h, _) = mine(xt)
    (h ** 2).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), **F32)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(getattr(mine, name).grad.numpy(), p.grad.numpy(), **F32,
                                   err_msg=name)


def test_backward_reads_the_outputs_it_is_given():
    """Why the residuals hold copies of hs and c_T: oneDNN's backward reads them (3.2: c_T,
    and hs for a left-to-right layer), so stand-ins would be silently wrong."""
    from rill.kernels.onednn import lstm
    rng = np.random.default_rng(0)

    def f(*s):
        return (rng.standard_normal(s) * 0.5).astype(np.float32)
    x, h0, c0, w_ih, w_hh, b = f(4, 2, 3), f(2, 5), f(2, 5), f(20, 3), f(20, 5), f(20)
    hs, h_t, c_t, ws = lstm.forward(x, h0, c0, w_ih, w_hh, (b, b), False)
    g = f(4, 2, 5), f(2, 5), f(2, 5)
    right = lstm.backward(*g, x, h0, c0, w_ih, w_hh, (b, b), ws, (hs, h_t, c_t), False)
    stand_in = lstm.backward(*g, x, h0, c0, w_ih, w_hh, (b, b), ws,
                             (hs, h_t, np.zeros_like(c_t)), False)
    assert not all(np.array_equal(a, s) for a, s in zip(right, stand_in))


def test_fallback_when_onednn_is_off(monkeypatch):
    mine, ref = _pair(num_layers=2)
    x, states = _data((6, 3, 5), 2, 1, True)
    weights = _loss_weights((6, 3, 7), (2, 3, 7))
    want_out, _, _, want = _torch_step(ref, x, states, weights)
    monkeypatch.setattr(library, "ENABLED", False)
    from rill.kernels.onednn import lstm
    calls = []
    monkeypatch.setattr(lstm, "forward", lambda *a: calls.append(a))
    step, run = _rill_step(mine, x, states, weights)
    captured = rill.capture(step)
    for fn in (step, captured):
        got = run(fn)
        np.testing.assert_allclose(got[0], want_out, **F32)
        np.testing.assert_allclose(got[3], want["x"], **F32, err_msg="x")
        for name, p in mine.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), want[name], **F32, err_msg=name)
    assert calls == []
    graph = captured.graph_for()
    assert graph.count("lstm_layer") == 0 and graph.count("lstm_sequence") == 2


def test_inference_keeps_lstm_sequence():
    """Without a gradient to take there is no workspace to keep: the projection and
    lstm_sequence run (and export to ONNX as before)."""
    mine, _ = _pair()
    x = rill.tensor(_data((6, 3, 5), 1, 1, False)[0])
    with rill.no_grad():
        graph = rill.capture(lambda x: mine(x)[0]).graph_for(x)
    assert graph.count("lstm_layer") == 0 and graph.count("lstm_sequence") == 1


def test_vmap_of_per_example_gradients():
    """vmap has no batching rule for lstm_layer: it runs the layer once per example."""
    mine, ref = _pair()
    xs, _ = _data((4, 6, 5), 1, 1, False)  # 4 examples of (T 6, F 5), unbatched each

    def loss(x):
        out, _ = mine(x)
        return (out * out).sum()
    with pytest.warns(FallbackWarning, match="lstm_layer has no batching rule"):
        got = rill.vmap(rill.grad(loss))(rill.tensor(xs)).numpy()
    for i in range(4):
        tx = torch.tensor(xs[i], dtype=torch.float64, requires_grad=True)
        (ref(tx)[0] ** 2).sum().backward()
        np.testing.assert_allclose(got[i], tx.grad.numpy(), **F32)


def test_second_order_gradient_through_the_composite():
    """create_graph: the gradient is the layer again in rill ops, differentiable further."""
    mine, ref = _pair()
    x = _data((5, 2, 5), 1, 1, False)[0]

    def loss(x):
        return (mine(x)[0] ** 2).sum()
    got = rill.grad(lambda x: (rill.grad(loss)(x) ** 2).sum())(rill.tensor(x)).numpy()
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad((ref(tx)[0] ** 2).sum(), tx, create_graph=True)
    (g ** 2).sum().backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-3, atol=1e-5)
