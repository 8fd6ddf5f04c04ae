"""Every rill.nn layer against its PyTorch twin: the same weights (copied by state-dict name,
so the names must match PyTorch's), the same input; outputs, input and parameter gradients,
and the parameters after five plain SGD steps must agree in float32."""
import numpy as np
import pytest
import torch

import rill
from rill import nn

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny shapes: PyTorch's thread pool only adds contention (15x slower on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def flat(out):
    """The tensors of a nested (output, (h, c)) structure, in order; None is skipped."""
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def dense(g):
    return g.to_dense() if isinstance(g, rill.SparseRows) else g


def host(t):
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(dense(t).numpy())


def close(a, b, what, tol=TOL):
    a, b = host(a), host(b)
    if a is None or b is None:  # an unused parameter: None on one side, zeros on the other
        a, b = (np.zeros_like(b) if a is None else a), (np.zeros_like(a) if b is None else b)
    np.testing.assert_allclose(a, b, err_msg=what, **tol)


def load_into_torch(layer, ref):
    state = {k: torch.from_numpy(np.array(v.numpy())) for k, v in layer.state_dict().items()}
    ref.load_state_dict(state, strict=True)  # raises unless every name matches PyTorch's


def sgd_step(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad
                p.grad = None


def rill_sgd_step(params, lr):
    with rill.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * dense(p.grad)  # in place: keeps the Parameter object
                p.grad = None


def check_against_torch(layer, ref, inputs, call=None, steps=5, lr=0.05, tol=TOL,
                        train_tol=None):
    """Compare forward, gradients and `steps` SGD steps; inputs are NumPy arrays (float
    ones get gradients)."""
    load_into_torch(layer, ref)
    call = call or (lambda m, *xs: m(*xs))
    xs = [rill.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    ts = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    rng = np.random.default_rng(1)
    cotangents = None
    params = dict(layer.named_parameters())
    ref_params = dict(ref.named_parameters())
    assert sorted(params) == sorted(ref_params)
    for step in range(steps + 1):
        outs, ref_outs = flat(call(layer, *xs)), flat(call(ref, *ts))
        assert len(outs) == len(ref_outs)
        if cotangents is None:
            cotangents = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
        if step == 0:
            for i, (o, r) in enumerate(zip(outs, ref_outs)):
                assert o.shape == tuple(r.shape), f"output {i}: {o.shape} vs {tuple(r.shape)}"
                close(o, r, f"output {i}", tol)
        loss = sum((o * rill.tensor(c)).sum() for o, c in zip(outs, cotangents))
        ref_loss = sum((r * torch.tensor(c)).sum() for r, c in zip(ref_outs, cotangents))
        loss.backward()
        ref_loss.backward()
        if step == 0:
            for i, (x, t) in enumerate(zip(xs, ts)):
                if x.requires_grad:
                    close(x.grad, t.grad, f"gradient of input {i}", tol)
            for name, p in params.items():
                close(p.grad, ref_params[name].grad, f"gradient of {name}", tol)
        if step == steps:
            break
        rill_sgd_step(params.values(), lr)
        sgd_step(ref_params.values(), lr)
        for x, t in zip(xs, ts):
            x.grad, t.grad = None, None
    assert all(p is q for p, q in zip(params.values(), layer.parameters()))
    ref_state = ref.state_dict()
    for name, value in layer.state_dict().items():
        close(value, ref_state[name], f"{name} after {steps} SGD steps", train_tol or tol)


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- dense, embedding, activations ---------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    check_against_torch(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias),
                        [randn(4, 2, 5)])


def test_identity_and_flatten():
    check_against_torch(nn.Identity(), torch.nn.Identity(), [randn(2, 3)])
    check_against_torch(nn.Flatten(), torch.nn.Flatten(), [randn(2, 3, 4, 5)])
    check_against_torch(nn.Flatten(0, 1), torch.nn.Flatten(0, 1), [randn(2, 3, 4)])


@pytest.mark.parametrize("padding_idx", [None, 1])
def test_embedding(padding_idx):
    idx = np.array([[1, 4, 4], [0, 1, 2]], dtype=np.int64)
    layer = nn.Embedding(6, 3, padding_idx=padding_idx)
    check_against_torch(layer, torch.nn.Embedding(6, 3, padding_idx=padding_idx), [idx], lr=0.5)
    layer(rill.tensor(idx)).sum().backward()
    assert isinstance(layer.weight.grad, rill.SparseRows)  # only the rows looked up


ACTIVATIONS = [
    (nn.ReLU(), torch.nn.ReLU()), (nn.GELU(), torch.nn.GELU()),
    (nn.GELU("tanh"), torch.nn.GELU("tanh")), (nn.SiLU(), torch.nn.SiLU()),
    (nn.Tanh(), torch.nn.Tanh()), (nn.Sigmoid(), torch.nn.Sigmoid()),
    (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)), (nn.ELU(0.7), torch.nn.ELU(0.7)),
    (nn.Softplus(), torch.nn.Softplus()), (nn.Softplus(2.0, 3.0), torch.nn.Softplus(2.0, 3.0)),
    (nn.Softmax(axis=1), torch.nn.Softmax(dim=1)), (nn.LogSoftmax(), torch.nn.LogSoftmax(-1)),
]


@pytest.mark.parametrize("layer,ref", ACTIVATIONS, ids=lambda m: repr(m))
def test_activation(layer, ref):
    x = randn(3, 4, 5) * 3
    check_against_torch(layer, ref, [x], steps=0)


def test_dropout_is_identity_in_eval_and_scales_in_training():
    x = rill.ones(20000)
    drop = nn.Dropout(0.3, generator=rill.Generator(5))
    y = drop(x).numpy()
    assert abs((y == 0).mean() - 0.3) < 0.015
    np.testing.assert_allclose(y[y != 0], 1 / 0.7, rtol=1e-6)
    again = nn.Dropout(0.3, generator=rill.Generator(5))(x).numpy()
    np.testing.assert_array_equal(y, again)  # seeded: the same mask
    rill.manual_seed(11)
    a = nn.Dropout(0.5)(x).numpy()
    rill.manual_seed(11)
    np.testing.assert_array_equal(a, nn.Dropout(0.5)(x).numpy())
    drop.eval()
    assert drop(x) is x or np.array_equal(drop(x).numpy(), x.numpy())
    x = rill.ones(5, requires_grad=True)
    kept = nn.Dropout(0.5, generator=rill.Generator(0))(x)
    kept.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), kept.numpy())  # d/dx = mask / (1 - p)
    with pytest.raises(rill.ArgumentError, match=r"\[0, 1\]"):
        nn.Dropout(1.5)


# ---- convolutions and pooling --------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1),
                                    dict(dilation=2, groups=2, bias=False),
                                    dict(padding="same")])
def test_conv1d(kwargs):
    check_against_torch(nn.Conv1d(4, 6, 3, **kwargs), torch.nn.Conv1d(4, 6, 3, **kwargs),
                        [randn(2, 4, 9)])


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=(2, 1), padding=(1, 2)),
                                    dict(dilation=2, groups=2), dict(padding="same", bias=False)])
def test_conv2d(kwargs):
    check_against_torch(nn.Conv2d(4, 6, 3, **kwargs), torch.nn.Conv2d(4, 6, 3, **kwargs),
                        [randn(2, 4, 7, 6)], lr=0.02)


@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, output_padding=1),
                                    dict(groups=2, dilation=2, bias=False)])
def test_conv_transpose2d(kwargs):
    check_against_torch(nn.ConvTranspose2d(4, 6, 3, **kwargs),
                        torch.nn.ConvTranspose2d(4, 6, 3, **kwargs), [randn(2, 4, 5, 4)], lr=0.02)


@pytest.mark.parametrize("layer,ref", [
    (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
    (nn.MaxPool2d(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1)),
    (nn.AvgPool2d(2, stride=1), torch.nn.AvgPool2d(2, stride=1)),
    (nn.AvgPool2d(3, 2, padding=1, count_include_pad=False),
     torch.nn.AvgPool2d(3, 2, padding=1, count_include_pad=False)),
    (nn.AdaptiveAvgPool2d((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3))),
    (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)),
], ids=repr)
def test_pooling(layer, ref):
    check_against_torch(layer, ref, [randn(2, 3, 7, 5)], steps=0)


# ---- normalization -------------------------------------------------------------------------

@pytest.mark.parametrize("make,shape", [
    (lambda m: m.BatchNorm1d(4), (8, 4)),
    (lambda m: m.BatchNorm1d(4, momentum=None), (6, 4, 5)),
    (lambda m: m.BatchNorm2d(4, momentum=0.3), (3, 4, 5, 2)),
    (lambda m: m.BatchNorm2d(4, affine=False), (3, 4, 2, 2)),
])
def test_batch_norm_training_statistics_and_eval(make, shape):
    layer, ref = make(nn), make(torch.nn)
    with rill.no_grad():  # start from non-trivial parameters and statistics
        for p in layer.parameters():
            p += rill.tensor(randn(*p.shape, seed=3)) * 0.3
        layer.running_mean += 0.5
    check_against_torch(layer, ref, [randn(*shape) * 2 + 1])
    assert int(layer.num_batches_tracked) == 6
    layer.eval(), ref.eval()
    check_against_torch(layer, ref, [randn(*shape, seed=9)], steps=2)


def test_batch_norm_without_running_statistics_and_shape_errors():
    layer = nn.BatchNorm1d(3, track_running_stats=False)
    ref = torch.nn.BatchNorm1d(3, track_running_stats=False)
    assert list(layer.state_dict()) == ["weight", "bias"]
    layer.eval(), ref.eval()
    check_against_torch(layer, ref, [randn(5, 3)])
    with pytest.raises(rill.ShapeError, match="BatchNorm2d expects input with 4 axes"):
        nn.BatchNorm2d(3)(rill.ones(2, 3))
    with pytest.raises(rill.ShapeError, match="got 5 channels"):
        nn.BatchNorm1d(3)(rill.ones(2, 5))


@pytest.mark.parametrize("kwargs", [dict(), dict(elementwise_affine=False), dict(bias=False)])
def test_layer_norm(kwargs):
    layer, ref = nn.LayerNorm((3, 4), **kwargs), torch.nn.LayerNorm((3, 4), **kwargs)
    with rill.no_grad():
        for p in layer.parameters():
            p += rill.tensor(randn(*p.shape, seed=3))
    check_against_torch(layer, ref, [randn(2, 3, 4) * 3])


@pytest.mark.parametrize("groups,affine", [(2, True), (6, False), (1, True)])
def test_group_norm(groups, affine):
    layer, ref = nn.GroupNorm(groups, 6, affine=affine), torch.nn.GroupNorm(groups, 6,
                                                                           affine=affine)
    check_against_torch(layer, ref, [randn(3, 6, 4, 2)])


# ---- recurrent -----------------------------------------------------------------------------

def test_lstm_cell_and_gru_cell():
    x, h, c = randn(3, 4), randn(3, 5, seed=1), randn(3, 5, seed=2)
    check_against_torch(nn.LSTMCell(4, 5), torch.nn.LSTMCell(4, 5), [x, h, c],
                        call=lambda m, x, h, c: m(x, (h, c)))
    check_against_torch(nn.LSTMCell(4, 5, bias=False), torch.nn.LSTMCell(4, 5, bias=False),
                        [x])
    check_against_torch(nn.GRUCell(4, 5), torch.nn.GRUCell(4, 5), [x, h])
    check_against_torch(nn.GRUCell(4, 5), torch.nn.GRUCell(4, 5), [randn(4)])  # unbatched


RECURRENT = [dict(), dict(num_layers=2, batch_first=True), dict(bidirectional=True),
             dict(num_layers=2, bidirectional=True, bias=False)]


@pytest.mark.parametrize("kwargs", RECURRENT)
def test_lstm(kwargs):
    layer, ref = nn.LSTM(3, 4, **kwargs), torch.nn.LSTM(3, 4, **kwargs)
    x = randn(2, 5, 3) if kwargs.get("batch_first") else randn(5, 2, 3)
    check_against_torch(layer, ref, [x])
    states = (kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1), 2, 4)
    check_against_torch(layer, ref, [x, randn(*states, seed=1), randn(*states, seed=2)],
                        call=lambda m, x, h, c: m(x, (h, c)), steps=2)


@pytest.mark.parametrize("kwargs", RECURRENT)
def test_gru(kwargs):
    layer, ref = nn.GRU(3, 4, **kwargs), torch.nn.GRU(3, 4, **kwargs)
    x = randn(2, 5, 3) if kwargs.get("batch_first") else randn(5, 2, 3)
    check_against_torch(layer, ref, [x])
    states = (kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1), 2, 4)
    check_against_torch(layer, ref, [x, randn(*states, seed=1)], steps=2)


def test_unbatched_sequences_and_state_errors():
    check_against_torch(nn.LSTM(3, 4, num_layers=2), torch.nn.LSTM(3, 4, num_layers=2),
                        [randn(6, 3)], steps=1)
    check_against_torch(nn.GRU(3, 4), torch.nn.GRU(3, 4), [randn(6, 3), randn(1, 4)], steps=1)
    with pytest.raises(rill.ShapeError, match=r"initial h_0 of shape \(2, 2, 4\)"):
        nn.LSTM(3, 4, num_layers=2)(rill.ones(5, 2, 3), (rill.zeros(1, 2, 4),
                                                          rill.zeros(2, 2, 4)))
    with pytest.raises(rill.ShapeError, match="LSTM: expects 3 input features"):
        nn.LSTM(3, 4)(rill.ones(5, 2, 7))
    with pytest.raises(rill.ArgumentError, match=r"a tuple \(h_0, c_0\)"):
        nn.LSTM(3, 4)(rill.ones(5, 2, 3), rill.zeros(1, 2, 4))
    with pytest.raises(rill.ShapeError, match=r"initial h_0 of shape \(1, 4\), got \(1, 1, 4\)"):
        nn.GRU(3, 4)(rill.ones(5, 3), rill.zeros(1, 1, 4))  # unbatched: no batch axis
    with pytest.raises(rill.DTypeError, match="h_0 is float64"):
        nn.GRU(3, 4)(rill.ones(5, 2, 3), rill.zeros(1, 2, 4, dtype=rill.float64))


def test_cells_name_the_bad_argument():
    with pytest.raises(rill.ShapeError, match=r"LSTMCell: expects c of shape \(2, 4\)"):
        nn.LSTMCell(3, 4)(rill.ones(2, 3), (rill.zeros(2, 4), rill.zeros(3, 4)))
    with pytest.raises(rill.ShapeError, match=r"GRUCell: expects x of shape \(N, 3\)"):
        nn.GRUCell(3, 4)(rill.ones(2, 2, 3))
    with pytest.raises(rill.ArgumentError, match="a pair"):
        nn.LSTMCell(3, 4)(rill.ones(2, 3), rill.zeros(2, 4))


def test_recurrent_dropout_between_layers_only_in_training():
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = rill.tensor(randn(5, 2, 3))
    rill.manual_seed(0)
    a, _ = lstm(x)
    rill.manual_seed(1)
    b, _ = lstm(x)
    assert not np.allclose(a.numpy(), b.numpy())
    lstm.eval()
    np.testing.assert_array_equal(lstm(x)[0].numpy(), lstm(x)[0].numpy())


# ---- attention and transformer -------------------------------------------------------------

def masks(n, length, source, heads):
    rng = np.random.default_rng(4)
    padding = np.zeros((n, source), dtype=bool)
    padding[0, -2:] = True
    causal = np.triu(np.ones((length, source), dtype=bool), k=1)
    float_mask = rng.standard_normal((n * heads, length, source)).astype(np.float32)
    return padding, causal, float_mask


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_self_attention_with_masks(batch_first, need_weights):
    layer = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    ref = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    x = randn(3, 5, 8) if batch_first else randn(5, 3, 8)
    padding, causal, _ = masks(3, 5, 5, 2)

    def call(m, x, padding, causal):
        return m(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=need_weights)

    check_against_torch(layer, ref, [x, padding, causal], call=call)


def test_multihead_cross_attention_float_masks_and_head_weights():
    layer = nn.MultiheadAttention(8, 4, kdim=6, vdim=5)
    ref = torch.nn.MultiheadAttention(8, 4, kdim=6, vdim=5)
    assert sorted(layer.state_dict()) == sorted(ref.state_dict())
    q, k, v = randn(4, 2, 8), randn(7, 2, 6, seed=1), randn(7, 2, 5, seed=2)
    _, _, float_mask = masks(2, 4, 7, 4)
    check_against_torch(
        layer, ref, [q, k, v, float_mask],
        call=lambda m, q, k, v, mask: m(q, k, v, attn_mask=mask, average_attn_weights=False))


def test_multihead_attention_unbatched_and_without_bias():
    layer, ref = nn.MultiheadAttention(6, 3, bias=False), torch.nn.MultiheadAttention(6, 3,
                                                                                      bias=False)
    q, kv = randn(4, 6), randn(5, 6, seed=1)
    check_against_torch(layer, ref, [q, kv], call=lambda m, q, kv: m(q, kv, kv))


def test_multihead_attention_is_causal_and_float_padding_mask():
    layer, ref = nn.MultiheadAttention(8, 2), torch.nn.MultiheadAttention(8, 2)
    x = randn(5, 3, 8)
    padding = np.where(masks(3, 5, 5, 2)[0], -1e4, 0.0).astype(np.float32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5)

    def call(m, x, padding):
        if isinstance(m, nn.Module):
            return m(x, x, x, key_padding_mask=padding, is_causal=True)
        return m(x, x, x, key_padding_mask=padding, attn_mask=causal, is_causal=True)

    check_against_torch(layer, ref, [x, padding], call=call, steps=2)


@pytest.mark.parametrize("kwargs", [dict(), dict(activation="gelu", norm_first=True),
                                    dict(batch_first=True)])
def test_transformer_encoder_layer(kwargs):
    rill.manual_seed(0)  # fixed weights: how far float32 rounding drifts depends on them
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    ref = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs)
    padding, _, _ = masks(3, 5, 5, 2)
    x = randn(3, 5, 8) if kwargs.get("batch_first") else randn(5, 3, 8)
    # Five float32 SGD steps through two layer norms drift apart by rounding alone (a few
    # 1e-5); the float64 test below shows the updates agree to 1e-10.
    check_against_torch(layer, ref, [x * 2, padding],
                        call=lambda m, x, p: m(x, src_key_padding_mask=p),
                        train_tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_trains_like_pytorch_in_float64(norm_first):
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                       activation="gelu", norm_first=norm_first)
    ref = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                           activation="gelu", norm_first=norm_first)
    padding, causal, _ = masks(3, 5, 5, 2)
    check_against_torch(layer.to(rill.float64), ref.double(),
                        [randn(5, 3, 8).astype(np.float64), padding, causal],
                        call=lambda m, x, p, c: m(x, src_mask=c, src_key_padding_mask=p),
                        tol=dict(rtol=1e-10, atol=1e-10))


def test_transformer_layer_dropout_is_active_only_in_training():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5)
    x = rill.tensor(randn(5, 3, 8))
    assert not np.allclose(layer(x).numpy(), layer(x).numpy())
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())
    with pytest.raises(rill.ArgumentError, match="activation must be"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")


# ---- losses --------------------------------------------------------------------------------

def classes(*shape, c=5, seed=0):
    return np.random.default_rng(seed).integers(0, c, shape).astype(np.int64)


@pytest.mark.parametrize("make,inputs", [
    (lambda m, t: m.CrossEntropyLoss(), [randn(6, 5), classes(6)]),
    (lambda m, t: m.CrossEntropyLoss(weight=t([1.0, 2.0, 0.5, 1.0, 3.0]), ignore_index=2,
                                     label_smoothing=0.1), [randn(6, 5, 3), classes(6, 3)]),
    (lambda m, t: m.CrossEntropyLoss(reduction="sum"),
     [randn(4, 5), np.full((4, 5), 0.2, dtype=np.float32)]),
    (lambda m, t: m.NLLLoss(reduction="none"), [randn(6, 5), classes(6)]),
    (lambda m, t: m.NLLLoss(weight=t([1.0, 2.0, 0.5, 1.0, 3.0])), [randn(6, 5), classes(6)]),
    (lambda m, t: m.MSELoss(), [randn(3, 4), randn(3, 4, seed=1)]),
    (lambda m, t: m.L1Loss(reduction="sum"), [randn(3, 4), randn(3, 4, seed=1)]),
    (lambda m, t: m.HuberLoss(delta=0.5), [randn(3, 4), randn(3, 4, seed=1)]),
    (lambda m, t: m.BCEWithLogitsLoss(pos_weight=t([1.0, 2.0, 3.0, 0.5])),
     [randn(3, 4) * 4, (randn(3, 4, seed=1) > 0).astype(np.float32)]),
], ids=["ce", "ce-weighted-smoothed", "ce-probabilities", "nll", "nll-weighted", "mse", "l1",
        "huber", "bce"])
def test_loss(make, inputs):
    layer = make(nn, lambda v: rill.tensor(v, dtype=rill.float32))
    ref = make(torch.nn, lambda v: torch.tensor(v, dtype=torch.float32))
    check_against_torch(layer, ref, inputs, steps=0)


def test_loss_weights_are_buffers_and_reductions_are_checked():
    loss = nn.CrossEntropyLoss(weight=rill.ones(3))
    assert list(loss.state_dict()) == ["weight"] and not list(loss.parameters())
    assert list(nn.CrossEntropyLoss().state_dict()) == []
    with pytest.raises(rill.ArgumentError, match="reduction must be one of"):
        nn.MSELoss(reduction="avg")


# ---- a whole model -------------------------------------------------------------------------

def test_small_convnet_trains_like_pytorch():
    def build(m):
        return m.Sequential(m.Conv2d(2, 4, 3, padding=1), m.BatchNorm2d(4), m.ReLU(),
                            m.MaxPool2d(2), m.Flatten(), m.Linear(4 * 3 * 3, 5))

    layer, ref = build(nn), build(torch.nn)
    target = classes(4)

    def call(m, x):
        logits = m(x)
        if isinstance(m, nn.Module):
            return nn.functional.cross_entropy(logits, rill.tensor(target))
        return torch.nn.functional.cross_entropy(logits, torch.tensor(target))

    check_against_torch(layer, ref, [randn(4, 2, 6, 6)], call=call, lr=0.1)
