"""Conv3d, ConvTranspose1d/3d and padding_mode against PyTorch: forward (float64, float32),
gradients for input, weight and bias, torch state_dicts, capture, and bad arguments."""
import numpy as np
import pytest
import torch

import rill

F, TF = rill.nn.functional, torch.nn.functional
RNG = np.random.default_rng(3)


def check(rill_fn, torch_fn, arrays, dtype="float64", **kw):
    """Same call in both: values, then gradients of a random projection for every input."""
    arrays = [a.astype(dtype) for a in arrays]
    rx = [rill.tensor(a, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    r, t = rill_fn(*rx, **kw), torch_fn(*tx, **kw)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == "float64" else dict(rtol=1e-4, atol=1e-4)
    assert r.shape == tuple(t.shape)
    np.testing.assert_allclose(r.numpy(), t.detach().numpy(), **tol)
    gy = RNG.standard_normal(tuple(t.shape)).astype(dtype)
    (r * rill.tensor(gy)).sum().backward()
    (t * torch.tensor(gy)).sum().backward()
    for a, b in zip(rx, tx):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol)


def randn(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(1, 2, 3), padding=(2, 0, 1), dilation=(1, 2, 1)),
    dict(padding="same", dilation=(2, 1, 1)),
    dict(padding="valid", groups=2),
    dict(stride=(2, 1, 1), groups=2, padding=(1, 1, 0)),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_conv3d_matches_torch(kw, dtype):
    groups = kw.get("groups", 1)
    check(F.conv3d, TF.conv3d, [randn(2, 4, 5, 6, 7), randn(6, 4 // groups, 3, 2, 3),
                                randn(6)], dtype, **kw)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3, 1), padding=(1, 0, 1), output_padding=(1, 2, 0), dilation=(1, 1, 2)),
    dict(stride=2, groups=2),
])
def test_conv_transpose3d_matches_torch(kw):
    check(F.conv_transpose3d, TF.conv_transpose3d,
          [randn(2, 4, 3, 4, 3), randn(4, 3, 3, 2, 3), randn(3 * kw.get("groups", 1))], **kw)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=3, dilation=2, groups=2, output_padding=2)])
def test_conv_transpose1d_matches_torch(kw):
    check(F.conv_transpose1d, TF.conv_transpose1d,
          [randn(2, 4, 9), randn(4, 3, 3), randn(3 * kw.get("groups", 1))], **kw)


LAYERS = [
    (rill.nn.Conv1d, torch.nn.Conv1d, (2, 4, 9), dict(kernel_size=3, padding=2)),
    (rill.nn.Conv2d, torch.nn.Conv2d, (2, 4, 7, 6), dict(kernel_size=(2, 3), padding="same",
                                                         dilation=2)),
    (rill.nn.Conv3d, torch.nn.Conv3d, (2, 4, 5, 6, 7), dict(kernel_size=3, padding=(1, 2, 1),
                                                            groups=2)),
    (rill.nn.Conv3d, torch.nn.Conv3d, (1, 4, 4, 5, 6), dict(kernel_size=2, stride=2,
                                                            padding="valid")),
]


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("layer", LAYERS, ids=lambda v: getattr(v, "__name__", ""))
def test_layers_load_a_torch_state_dict_and_agree(layer, mode):
    ours, theirs, shape, kw = layer
    t = theirs(4, 6, padding_mode=mode, **kw).double()
    r = ours(4, 6, padding_mode=mode, dtype=rill.float64, **kw)
    assert {k: tuple(v.shape) for k, v in r.state_dict().items()} == \
        {k: tuple(v.shape) for k, v in t.state_dict().items()}
    r.load_state_dict({k: rill.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = randn(*shape)
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ry, ty = r(rx), t(tx)
    np.testing.assert_allclose(ry.numpy(), ty.detach().numpy(), atol=1e-10)
    ry.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), atol=1e-10)
    np.testing.assert_allclose(r.weight.grad.numpy(), t.weight.grad.numpy(), atol=1e-10)


@pytest.mark.parametrize("ours, theirs, shape", [
    (rill.nn.ConvTranspose1d, torch.nn.ConvTranspose1d, (2, 4, 5)),
    (rill.nn.ConvTranspose3d, torch.nn.ConvTranspose3d, (1, 4, 3, 2, 3))])
def test_transposed_layers_agree(ours, theirs, shape):
    t = theirs(4, 2, kernel_size=3, stride=2, padding=1, output_padding=1).double()
    r = ours(4, 2, kernel_size=3, stride=2, padding=1, output_padding=1, dtype=rill.float64)
    r.load_state_dict({k: rill.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    x = randn(*shape)
    np.testing.assert_allclose(r(rill.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               atol=1e-10)


def test_conv3d_second_derivative_matches_torch():
    x, w = randn(1, 2, 4, 4, 4), randn(3, 2, 2, 2, 2)
    rx, rw = rill.tensor(x, requires_grad=True), rill.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (F.conv3d(rx, rw, stride=2) ** 2).sum().backward(create_graph=True)
    (gt,) = torch.autograd.grad((TF.conv3d(tx, tw, stride=2) ** 2).sum(), [tx],
                                create_graph=True)
    gr = rx.grad
    rw.grad = None
    (gr * gr).sum().backward()
    (gt * gt).sum().backward()
    np.testing.assert_allclose(rw.grad.numpy(), tw.grad.numpy(), rtol=1e-9)


def test_conv3d_training_step_captured_equals_eager():
    def build():
        rill.manual_seed(0)
        model = rill.nn.Sequential(rill.nn.Conv3d(2, 3, 3, padding=1, padding_mode="circular"),
                                   rill.nn.ReLU(), rill.nn.MaxPool3d(2, ceil_mode=True),
                                   rill.nn.Flatten(), rill.nn.Linear(3 * 2 * 2 * 3, 1))
        return model, rill.optim.SGD(list(model.parameters()), lr=0.1)

    def make_step(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    x, y = rill.tensor(randn(2, 2, 4, 3, 5)), rill.tensor(randn(2, 1))
    results = []
    for captured in (False, True):
        model, opt = build()
        step = make_step(model, opt)
        step = rill.capture(step) if captured else step
        results.append([float(step(x, y)) for _ in range(3)])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


@pytest.mark.parametrize("call, match", [
    (lambda: F.conv3d(rill.ones(1, 2, 4, 4), rill.ones(3, 2, 2, 2, 2)), "N, C, D, H, W"),
    (lambda: F.conv3d(rill.ones(1, 2, 4, 4, 4), rill.ones(3, 2, 2, 2, 2), stride=(1, 2)),
     "stride"),
    (lambda: F.conv3d(rill.ones(1, 2, 4, 4, 4), rill.ones(3, 2, 2, 2, 2), stride=2,
                      padding="same"), "stride 1"),
    (lambda: F.conv3d(rill.ones(1, 2, 2, 4, 4), rill.ones(3, 2, 3, 2, 2)), "does not fit"),
    (lambda: F.conv3d(rill.ones(1, 3, 4, 4, 4), rill.ones(3, 2, 2, 2, 2)), "input channels"),
    (lambda: F.conv_transpose3d(rill.ones(1, 2, 3, 3, 3), rill.ones(2, 2, 2, 2, 2),
                                output_padding=1), "output_padding"),
    (lambda: F.conv_transpose1d(rill.ones(1, 2, 3), rill.ones(2, 2, 2), padding=(1, 1)),
     "padding"),
    (lambda: rill.nn.Conv3d(2, 3, 3, padding_mode="mirror"), "padding_mode"),
    (lambda: rill.nn.ConvTranspose3d(2, 3, 3, padding_mode="reflect"), "padding_mode"),
])
def test_bad_arguments_raise_rill_errors(call, match):
    with pytest.raises(rill.Error, match=match):
        call()


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device (nor Triton's interpreter)")
def test_gpu_conv3d_and_max_pool3d_equal_the_cpu():
    """The gpu runs 3-d ops as the 2-d kernels once per depth tap: same values and gradients."""
    x, w, b = randn(2, 4, 5, 4, 3), randn(4, 2, 3, 2, 2), randn(4)
    results = []
    for device in ("cpu", "gpu"):
        rx, rw, rb = (rill.tensor(a, device=device, requires_grad=True) for a in (x, w, b))
        y = F.conv3d(rx, rw, rb, stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 1, 2),
                     groups=2)
        up = F.conv_transpose3d(y, rw[:, :2], stride=(2, 1, 2), padding=(1, 0, 0),
                                output_padding=(1, 0, 1))
        pooled, indices = F.max_pool3d(up, 3, stride=(2, 1, 2), padding=1, ceil_mode=True,
                                       return_indices=True)
        (pooled ** 2).sum().backward()
        results.append([v.numpy() for v in (pooled, indices, rx.grad, rw.grad, rb.grad)])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-10)
