"""rill.nn's Transformer family, RNN, the new normalization layers and Module conveniences
against torch.nn: state dicts load across by name, forward outputs and the gradients of
inputs and parameters agree (float64 tightly, float32 loosely); captured training steps
agree with eager; bad arguments raise rill errors."""
import numpy as np
import pytest
import torch

import rill
from rill import nn

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def copy_into_rill(layer, ref):
    """ref's weights into layer, converted tensor by tensor (names and shapes must match)."""
    assert list(layer.state_dict()) == list(ref.state_dict())
    layer.load_state_dict({k: rill.tensor(v.detach().numpy())
                           for k, v in ref.state_dict().items()})


def outputs(out):
    if out is None:
        return []
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in outputs(o)]
    return [out]


def check(layer, ref, args, kwargs=None, dtype=np.float64, grads=True):
    """Same weights, same inputs: outputs, input gradients and parameter gradients agree."""
    kwargs = kwargs or {}
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    if dtype == np.float64:
        ref.double(), layer.double()
    copy_into_rill(layer, ref)
    def convert(make, a):
        if isinstance(a, tuple):
            return tuple(convert(make, b) for b in a)
        return make(a.astype(dtype), requires_grad=grads) if isinstance(a, np.ndarray) else a

    ar = [convert(rill.tensor, a) for a in args]
    at = [convert(torch.tensor, a) for a in args]
    kr = {k: rill.tensor(v) for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    kt = {k: torch.tensor(v) for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    kr.update({k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)})
    kt.update({k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)})
    yr, yt = outputs(layer(*ar, **kr)), outputs(ref(*at, **kt))
    assert len(yr) == len(yt)
    for a, b in zip(yr, yt):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), **tol)
    if not grads:
        return
    total_r = sum((y * rill.tensor(np.cos(np.arange(y.size)).reshape(y.shape).astype(dtype))
                   ).sum() for y in yr)
    total_t = sum((y * torch.tensor(np.cos(np.arange(y.numel())).reshape(y.shape)
                                    .astype(dtype))).sum() for y in yt)
    total_r.backward(), total_t.backward()
    for a, b in zip(outputs(ar), outputs(at)):
        if isinstance(b, torch.Tensor) and b.requires_grad:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol)
    params = dict(ref.named_parameters())
    for name, p in layer.named_parameters():
        expected = params[name].grad
        got = p.grad
        if expected is None:
            assert got is None or not np.any(got.numpy()), name
        else:
            np.testing.assert_allclose(got.numpy(), expected.numpy(), err_msg=name, **tol)


# ---- Transformer family ----------------------------------------------------------------------

SRC = RNG.standard_normal((6, 2, 8))
TGT = RNG.standard_normal((4, 2, 8))
PAD = np.zeros((2, 6), bool)
PAD[1, -2:] = True
CAUSAL_BOOL = np.triu(np.ones((4, 4), bool), 1)


def settings(**kw):
    return dict(dim_feedforward=16, dropout=0.0, **kw)


@pytest.mark.parametrize("kw", [{}, {"norm_first": True, "activation": "gelu"},
                                {"activation": torch.nn.functional.silu, "bias": False}],
                         ids=["post-norm", "pre-norm-gelu", "callable-nobias"])
def test_encoder_layer(kw):
    rill_kw = dict(kw)
    if callable(kw.get("activation")):
        rill_kw["activation"] = rill.nn.functional.silu
    check(nn.TransformerEncoderLayer(8, 2, **settings(**rill_kw)),
          torch.nn.TransformerEncoderLayer(8, 2, **settings(**kw)), [SRC],
          {"src_key_padding_mask": PAD})


def test_encoder_layer_masks_and_batch_first():
    mask = RNG.standard_normal((6, 6))  # a float mask is added to the scores
    check(nn.TransformerEncoderLayer(8, 2, batch_first=True, **settings()),
          torch.nn.TransformerEncoderLayer(8, 2, batch_first=True, **settings()),
          [SRC.transpose(1, 0, 2)], {"src_mask": mask})


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer(norm_first):
    check(nn.TransformerDecoderLayer(8, 2, norm_first=norm_first, **settings()),
          torch.nn.TransformerDecoderLayer(8, 2, norm_first=norm_first, **settings()),
          [TGT, SRC], {"tgt_mask": CAUSAL_BOOL, "memory_key_padding_mask": PAD})


def test_decoder_is_causal_without_a_mask_is_the_causal_mask():
    layer = nn.TransformerDecoderLayer(8, 2, **settings()).double()
    tgt, mem = rill.tensor(TGT), rill.tensor(SRC)
    flagged = layer(tgt, mem, tgt_is_causal=True)
    masked = layer(tgt, mem, tgt_mask=rill.tensor(CAUSAL_BOOL))
    np.testing.assert_allclose(flagged.numpy(), masked.numpy(), rtol=1e-12)


def test_stacks_with_final_norm():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, **settings()), 2,
                                norm=nn.LayerNorm(8))
    ref = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, **settings()), 2,
                                      norm=torch.nn.LayerNorm(8), enable_nested_tensor=False)
    check(enc, ref, [SRC], {"src_key_padding_mask": PAD})
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, **settings()), 2)
    ref = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, **settings()), 2)
    check(dec, ref, [TGT, SRC], {"tgt_mask": CAUSAL_BOOL})
    # the copies are independent parameters
    assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_transformer(dtype):
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
              dim_feedforward=16, dropout=0.0)
    mine, ref = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert {k: tuple(v.shape) for k, v in mine.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                                  mask)
    check(mine, ref, [SRC, TGT], {"tgt_mask": mask.astype(dtype), "src_key_padding_mask": PAD,
                                  "memory_key_padding_mask": PAD}, dtype=dtype)


def test_transformer_custom_parts_and_train_vs_eval():
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), 1)
    model = nn.Transformer(8, 2, dim_feedforward=16, dropout=0.5, custom_encoder=encoder)
    assert model.encoder is encoder and model.encoder.norm is None
    src, tgt = rill.tensor(SRC.astype(np.float32)), rill.tensor(TGT.astype(np.float32))
    model.eval()
    first, second = model(src, tgt), model(src, tgt)
    np.testing.assert_array_equal(first.numpy(), second.numpy())  # eval: no dropout
    model.train()
    assert not np.allclose(model(src, tgt).numpy(), first.numpy())  # dropout active


def test_captured_transformer_training_step_matches_eager():
    def make():
        rill.manual_seed(0)
        model = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
        return model, rill.optim.Adam(model.parameters(), lr=1e-2)

    src = rill.tensor(SRC.transpose(1, 0, 2).astype(np.float32))
    tgt = rill.tensor(TGT.transpose(1, 0, 2).astype(np.float32))
    mask = nn.Transformer.generate_square_subsequent_mask(4)

    def step(model, opt, src, tgt):
        opt.zero_grad()
        loss = (model(src, tgt, tgt_mask=mask) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    (m1, o1), (m2, o2) = make(), make()
    captured = rill.capture(lambda s, t: step(m2, o2, s, t))
    for _ in range(3):
        np.testing.assert_allclose(captured(src, tgt).numpy(), step(m1, o1, src, tgt).numpy(),
                                   rtol=1e-5)
    for (name, a), b in zip(m1.named_parameters(), m2.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


# ---- recurrent -------------------------------------------------------------------------------

SEQ = RNG.standard_normal((5, 3, 4))


@pytest.mark.parametrize("kw", [{}, {"nonlinearity": "relu", "num_layers": 2},
                                {"bidirectional": True, "bias": False},
                                {"batch_first": True, "num_layers": 2, "bidirectional": True}])
def test_rnn(kw):
    x = SEQ.transpose(1, 0, 2) if kw.get("batch_first") else SEQ
    check(nn.RNN(4, 6, **kw), torch.nn.RNN(4, 6, **kw), [x])


def test_rnn_initial_state_and_unbatched():
    h0 = RNG.standard_normal((2, 3, 6))
    check(nn.RNN(4, 6, 2), torch.nn.RNN(4, 6, 2), [SEQ, h0])
    check(nn.RNN(4, 6, 2), torch.nn.RNN(4, 6, 2), [SEQ[:, 0], h0[:, 0]])


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_cell(nonlinearity):
    check(nn.RNNCell(4, 6, nonlinearity=nonlinearity),
          torch.nn.RNNCell(4, 6, nonlinearity=nonlinearity),
          [SEQ[0], RNG.standard_normal((3, 6))])


def test_lstm_with_projection():
    kw = dict(num_layers=2, bidirectional=True, proj_size=3)
    mine, ref = nn.LSTM(4, 6, **kw), torch.nn.LSTM(4, 6, **kw)
    assert "weight_hr_l1_reverse" in mine.state_dict()
    h0, c0 = RNG.standard_normal((4, 3, 3)), RNG.standard_normal((4, 3, 6))
    check(mine, ref, [SEQ, (h0, c0)])


def test_rnn_dropout_between_layers_only_in_training():
    rnn = nn.RNN(4, 6, num_layers=2, dropout=0.5)
    x = rill.tensor(SEQ.astype(np.float32))
    rnn.eval()
    a, b = rnn(x)[0], rnn(x)[0]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    rnn.train()
    assert not np.allclose(rnn(x)[0].numpy(), a.numpy())


def test_captured_rnn_training_step_matches_eager():
    def make():
        rill.manual_seed(1)
        model = nn.RNN(4, 6, num_layers=2, batch_first=True)
        return model, rill.optim.SGD(model.parameters(), lr=0.1)

    x = rill.tensor(SEQ.transpose(1, 0, 2).astype(np.float32))

    def step(model, opt, x):
        opt.zero_grad()
        out, h = model(x)
        loss = (out ** 2).mean() + (h ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    (m1, o1), (m2, o2) = make(), make()
    captured = rill.capture(lambda x: step(m2, o2, x))
    for _ in range(3):
        np.testing.assert_allclose(captured(x).numpy(), step(m1, o1, x).numpy(), rtol=1e-5)
    for a, b in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


# ---- normalization ---------------------------------------------------------------------------

IMG = RNG.standard_normal((2, 3, 4, 5)) * 2 + 1


@pytest.mark.parametrize("kw", [{}, {"affine": True}, {"affine": True,
                                                       "track_running_stats": True}])
def test_instance_norm(kw):
    mine, ref = nn.InstanceNorm2d(3, **kw), torch.nn.InstanceNorm2d(3, **kw)
    if kw.get("affine"):
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5), ref.bias.uniform_(-1, 1)
    check(mine, ref, [IMG])
    check(nn.InstanceNorm1d(4, **kw), torch.nn.InstanceNorm1d(4, **kw), [IMG[0]])  # (N, C, L)
    if kw.get("track_running_stats"):
        np.testing.assert_allclose(mine.running_var.numpy(), ref.running_var.numpy(),
                                   rtol=1e-12)
        mine.eval(), ref.eval()
        check(mine, ref, [IMG], grads=False)  # eval: the running statistics


def test_instance_norm_unbatched_and_functional():
    check(nn.InstanceNorm2d(3), torch.nn.InstanceNorm2d(3), [IMG[0]])
    x = rill.tensor(IMG)
    np.testing.assert_allclose(rill.nn.functional.instance_norm(x, eps=1e-3).numpy(),
                               torch.nn.functional.instance_norm(torch.tensor(IMG),
                                                                 eps=1e-3).numpy(), rtol=1e-10)


@pytest.mark.parametrize("shape,eps", [((5,), None), ((4, 5), 1e-3)])
def test_rms_norm(shape, eps):
    mine, ref = nn.RMSNorm(shape, eps=eps), torch.nn.RMSNorm(shape, eps=eps)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    check(mine, ref, [IMG])
    check(nn.RMSNorm(shape, eps=eps), torch.nn.RMSNorm(shape, eps=eps), [IMG],
          dtype=np.float32)
    y = rill.nn.functional.rms_norm(rill.tensor(IMG), shape, eps=eps)
    z = torch.nn.functional.rms_norm(torch.tensor(IMG), shape, eps=eps)
    np.testing.assert_allclose(y.numpy(), z.numpy(), rtol=1e-12)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_local_response_norm(size):
    check(nn.LocalResponseNorm(size, alpha=0.3, beta=0.6, k=2.0),
          torch.nn.LocalResponseNorm(size, alpha=0.3, beta=0.6, k=2.0), [IMG])


def test_existing_norms_take_torch_arguments():
    check(nn.BatchNorm2d(3, affine=False, track_running_stats=False),
          torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False), [IMG])
    check(nn.LayerNorm(5, elementwise_affine=True, bias=False),
          torch.nn.LayerNorm(5, elementwise_affine=True, bias=False), [IMG])
    check(nn.GroupNorm(1, 3, affine=False), torch.nn.GroupNorm(1, 3, affine=False), [IMG])


# ---- Module conveniences ---------------------------------------------------------------------

def test_module_casts_keep_parameter_identity():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    weight = model[0].weight
    opt = rill.optim.SGD(model.parameters(), lr=0.1)
    for cast, dtype in ((model.double, rill.float64), (model.half, rill.float16),
                        (model.bfloat16, rill.bfloat16), (model.float, rill.float32)):
        assert cast() is model
        assert model[0].weight is weight and weight.dtype == dtype
        assert model[1].running_mean.dtype == dtype
        assert model[1].num_batches_tracked.dtype == rill.int64  # integers stay
    assert opt.param_groups[0]["params"][0] is weight
    model.type(rill.float64)
    assert weight.dtype == rill.float64 and model[1].num_batches_tracked.dtype == rill.float64
    model.float()  # the counter is floating now, so float() converts it too (as PyTorch)
    assert model[1].num_batches_tracked.dtype == rill.float32


def test_zero_grad_set_to_none():
    model = nn.Linear(3, 2)
    model(rill.ones(4, 3)).sum().backward()
    model.zero_grad(set_to_none=False)
    assert model.weight.grad is not None and not np.any(model.weight.grad.numpy())
    model.zero_grad()
    assert model.weight.grad is None


def test_cuda_and_cpu():
    model = nn.Linear(3, 2)
    assert model.cpu() is model and model.weight.device == rill.device("cpu")
    if not rill.gpu.is_available():
        with pytest.raises(rill.DeviceError, match="not available"):
            model.cuda()
        assert model.weight.device == rill.device("cpu")  # nothing moved


def test_lookups_by_dotted_name():
    model = nn.Transformer(8, 2, 1, 1, 16)
    layer = model.get_submodule("encoder.layers.0")
    assert layer is model.encoder.layers[0]
    assert model.get_parameter("encoder.layers.0.linear1.weight") is layer.linear1.weight
    bn = nn.Sequential(nn.BatchNorm1d(2))
    assert bn.get_buffer("0.running_mean") is bn[0].running_mean
    extra = nn.Linear(2, 2)
    model.register_module("head", extra)
    assert model.get_submodule("head") is extra
    with pytest.raises(rill.ArgumentError, match="no submodule 'nope'"):
        model.get_submodule("encoder.nope")
    with pytest.raises(rill.ArgumentError, match="no parameter 'bias2'"):
        model.get_parameter("head.bias2")


# ---- errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("make,error,match", [
    (lambda: nn.RNN(4, 6, nonlinearity="sigmoid"), rill.ArgumentError, "nonlinearity"),
    (lambda: nn.RNNCell(4, 6, nonlinearity="gelu"), rill.ArgumentError, "nonlinearity"),
    (lambda: nn.LSTM(4, 6, proj_size=6), rill.ArgumentError, "proj_size"),
    (lambda: nn.RNN(4, 6)(rill.ones(5, 3, 5)), rill.ShapeError, "4 input features"),
    (lambda: nn.RNN(4, 6, 2)(rill.ones(5, 3, 4), rill.ones(1, 3, 6)), rill.ShapeError, "h_0"),
    (lambda: nn.TransformerEncoderLayer(8, 2, activation="swish"), rill.ArgumentError,
     "activation"),
    (lambda: nn.TransformerEncoderLayer(8, 3), rill.ArgumentError, "divisible"),
    (lambda: nn.TransformerEncoder(nn.Linear(2, 2), 2), rill.ArgumentError,
     "TransformerEncoderLayer"),
    (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2), 0), rill.ArgumentError,
     "num_layers"),
    (lambda: nn.Transformer(8, 2, 1, 1, 16)(rill.ones(5, 2, 8), rill.ones(4, 3, 8)),
     rill.ShapeError, "batch size"),
    (lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True), rill.ArgumentError,
     "add_bias_kv"),
    (lambda: nn.Transformer.generate_square_subsequent_mask(-1), rill.ArgumentError, "sz"),
    (lambda: nn.InstanceNorm2d(3)(rill.ones(2, 3)), rill.ShapeError, "InstanceNorm2d"),
    (lambda: nn.RMSNorm(4)(rill.ones(2, 5)), rill.ShapeError, "normalized_shape"),
    (lambda: rill.nn.functional.instance_norm(rill.ones(2, 3, 4), use_input_stats=False),
     rill.ArgumentError, "running_mean"),
])
def test_bad_arguments_raise_rill_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()
