"""The fused training batch norm (rill.ops.batch_norm, issue 20, speed): one primitive for the
forward (y and the batch's per-channel mean and biased variance), one for the gradient.

Forward against NumPy float64 written from the documented formula; gradients against central
finite differences and PyTorch, second order (create_graph) included; the primitive eager and
under rill.capture, beside the composite it replaces; the ONNX row run by onnxruntime; bad
input as rill errors. (The op table's batch_norm rows check rill.nn.functional.batch_norm
against PyTorch in every mode on top of this.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
import rill.nn.functional as F
from rill.eager.bind import bind
from rill.ops.batch_norm import batch_norm_grad_p, batch_norm_p, batch_norm_train, composite

EPS = 1e-5
SHAPES = [(4, 3, 5, 6), (6, 2), (3, 4, 7), (2, 3, 2, 3, 4)]


def reference(x, w, b, eps=EPS):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * w.reshape(shape) + b.reshape(shape), mean, var


def arrays(shape, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    return (rng.standard_normal(shape) * 3 + 2, rng.standard_normal(c), rng.standard_normal(c))


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_matches_numpy_float64(shape):
    x, w, b = arrays(shape)
    y, mean, var = bind(batch_norm_p, *(rill.tensor(a) for a in (x, w, b)), eps=EPS)
    want = reference(x, w, b)
    for got, ref in zip((y, mean, var), want):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_float32_stays_float32_and_matches_float64():
    x, w, b = arrays((8, 4, 6, 6))
    y, mean, var = batch_norm_train(*(rill.tensor(a.astype(np.float32)) for a in (x, w, b)), EPS)
    assert {y.dtype, mean.dtype, var.dtype} == {rill.float32}
    want = reference(x, w, b)
    np.testing.assert_allclose(y.numpy(), want[0], rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(var.numpy(), want[2], rtol=1e-5)


@pytest.mark.parametrize("split_bytes", [1 << 40, 0])
def test_blocks_and_cores_give_what_one_pass_gives(monkeypatch, split_bytes):
    from rill.kernels.numpy import batch_norm as kernels
    x, w, b = arrays((12, 5, 8, 8), seed=3)
    g = loss_weights(x.shape)
    one = kernels._batch_norm(x, w, b, EPS)
    one_grad = kernels._batch_norm_grad(g, x, w, one[1], one[2], EPS)
    # blocks of 3 images (an image is 512 bytes), in one thread or split over the cores
    monkeypatch.setattr(kernels, "BLOCK_BYTES", 3 * 512)
    monkeypatch.setattr(kernels, "SPLIT_BYTES", split_bytes)
    monkeypatch.setattr(kernels, "split", lambda fn, n, elements: (fn(0, 5), fn(5, n)))
    blocked = kernels._batch_norm(x, w, b, EPS)
    blocked_grad = kernels._batch_norm_grad(g, x, w, one[1], one[2], EPS)
    for got, want in zip(blocked + blocked_grad, one + one_grad):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(blocked[0], reference(x, w, b)[0], rtol=1e-12, atol=1e-12)


def loss_weights(shape, seed=5):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_gradients_match_finite_differences_and_torch(shape):
    x, w, b = arrays(shape, seed=1)
    g = loss_weights(shape)
    rx, rw, rb = (rill.tensor(a, requires_grad=True) for a in (x, w, b))
    (F.batch_norm(rx, None, None, rw, rb, training=True) * rill.tensor(g)).sum().backward()
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (torch.nn.functional.batch_norm(tx, None, None, tw, tb, training=True)
     * torch.tensor(g)).sum().backward()
    for mine, theirs in ((rx, tx), (rw, tw), (rb, tb)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-10)

    def loss(xv, wv, bv):
        return float((reference(xv, wv, bv)[0] * g).sum())
    step = 1e-6
    for index in [(0, 1) + (0,) * (len(shape) - 2), (1, 0) + (1,) * (len(shape) - 2)]:
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        numeric = (loss(up, w, b) - loss(down, w, b)) / (2 * step)
        assert abs(rx.grad.numpy()[index] - numeric) < 1e-6
    up, down = w.copy(), w.copy()
    up[1] += step
    down[1] -= step
    assert abs(rw.grad.numpy()[1] - (loss(x, up, b) - loss(x, down, b)) / (2 * step)) < 1e-6


def test_second_order_matches_torch():
    x, w, b = arrays((4, 3, 5), seed=2)
    g = loss_weights((4, 3, 5))

    def inner(xt, wt):
        y = F.batch_norm(xt, None, None, wt, rill.tensor(b), training=True)
        return (y * rill.tensor(g)).sum()

    def outer(xt, wt):
        return (rill.grad(inner)(xt, wt) ** 2).sum()
    got_x, got_w = rill.grad(outer, argnums=(0, 1))(rill.tensor(x), rill.tensor(w))

    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.batch_norm(tx, None, None, tw, torch.tensor(b), training=True)
    (tgx,) = torch.autograd.grad((ty * torch.tensor(g)).sum(), [tx], create_graph=True)
    want_x, want_w = torch.autograd.grad((tgx ** 2).sum(), [tx, tw])
    np.testing.assert_allclose(got_x.numpy(), want_x.numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got_w.numpy(), want_w.numpy(), rtol=1e-7, atol=1e-9)


def test_captured_step_runs_the_primitive_and_equals_eager():
    def step(x, model):
        out = model(x)
        (out * out).mean().backward()
        return out

    def model_and_input():
        rill.manual_seed(0)
        model = rill.nn.Sequential(rill.nn.Conv2d(2, 3, 3), rill.nn.BatchNorm2d(3))
        return model, rill.randn(4, 2, 6, 6)

    model, x = model_and_input()
    eager = step(x, model)
    eager_grads = [p.grad.numpy().copy() for p in model.parameters()]
    eager_stats = model[1].running_var.numpy().copy()

    model, x = model_and_input()
    captured = rill.capture(step)
    graph = str(captured.graph_for(x, model))  # before the call sets the .grads it traced
    out = captured(x, model)
    assert "batch_norm_train" in graph and "batch_norm_grad" in graph
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)
    for p, want in zip(model.parameters(), eager_grads):
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model[1].running_var.numpy(), eager_stats, rtol=1e-6)


def test_fused_matches_the_composite_it_replaces():
    x, w, b = (rill.tensor(a.astype(np.float32)) for a in arrays((16, 8, 10, 10), seed=4))
    fused = batch_norm_train(x, w, b, EPS)
    plain = composite(x, w, b, EPS)
    for got, want in zip(fused, plain):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_other_dtypes_run_the_composite():
    x = rill.randn(4, 3, 5).to(rill.float16)
    y, mean, var = batch_norm_train(x, None, None, EPS)
    assert y.dtype is rill.float16 and mean.shape == (3,)
    want = reference(x.numpy().astype(np.float64), np.ones(3), np.zeros(3))[0]
    np.testing.assert_allclose(y.numpy().astype(np.float64), want, rtol=1e-2, atol=1e-2)


def test_onnx_export_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import rill.onnx

    def normalize(x, w, b):
        return F.batch_norm(x, None, None, w, b, training=True)
    x, w, b = (rill.tensor(a.astype(np.float32)) for a in arrays((4, 3, 5, 5), seed=6))
    rill.onnx.export(normalize, (x, w, b), tmp_path / "bn.onnx")
    session = ort.InferenceSession(str(tmp_path / "bn.onnx"), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), (x, w, b))}
    (out,) = session.run(None, feeds)
    np.testing.assert_allclose(out, normalize(x, w, b).numpy(), rtol=1e-4, atol=1e-5)


def test_bad_input_is_a_rill_error():
    x, w = rill.randn(4, 3, 5), rill.randn(3)
    with pytest.raises(rill.ShapeError, match=r"shape \(3,\)"):
        bind(batch_norm_p, x, rill.randn(2), w, eps=EPS)
    with pytest.raises(rill.ShapeError, match="more than one value per channel"):
        bind(batch_norm_p, rill.randn(1, 3), w, w, eps=EPS)
    with pytest.raises(rill.DTypeError, match="float32 or float64"):
        bind(batch_norm_p, x.to(rill.float16), w.to(rill.float16), w.to(rill.float16), eps=EPS)
    with pytest.raises(rill.ShapeError, match="does not match the input"):
        bind(batch_norm_grad_p, rill.randn(4, 3, 4), x, w, w, w, eps=EPS)
    with pytest.raises(rill.ShapeError, match="more than one value per channel"):
        F.batch_norm(rill.randn(1, 3), training=True)


def test_variance_of_values_far_from_zero_stays_accurate():
    # One pass over x - k (k one of each channel's values) keeps the two-pass accuracy where
    # E[x^2] - E[x]^2 would cancel: float32 values around 1e4 with unit spread.
    x = (1e4 + np.random.default_rng(7).standard_normal((16, 3, 20))).astype(np.float32)
    _, mean, var = bind(batch_norm_p, rill.tensor(x), rill.ones(3), rill.zeros(3), eps=EPS)
    want = reference(x.astype(np.float64), np.ones(3), np.zeros(3))
    np.testing.assert_allclose(var.numpy(), want[2], rtol=1e-3)
    np.testing.assert_allclose(mean.numpy(), want[1], rtol=1e-6)


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
@pytest.mark.parametrize("shape", [(5, 3, 40), (6, 2), (2, 4, 3, 5)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("block", [None, 16])
def test_gpu_kernels_match_the_cpu_kernels(monkeypatch, shape, dtype, block):
    """kernels/triton/batch_norm.py (Triton's interpreter without a GPU): the primitive runs
    on the gpu, and y, dx, dw, db and the running statistics equal the CPU kernels'; with
    blocks of 16 a channel's run of 40 takes three, the last one masked (as a GPU's 1024-
    element blocks do on larger images)."""
    if block is not None:
        from rill.kernels.triton import batch_norm as triton_kernels
        monkeypatch.setattr(triton_kernels, "_block", lambda m: block)
    x, w, b = arrays(shape, seed=8)
    g = loss_weights(shape)
    results = {}
    for device in ("cpu", "gpu"):
        ts = [rill.tensor(a, dtype=dtype, device=device, requires_grad=True) for a in (x, w, b)]
        stats = [rill.zeros(shape[1], dtype=dtype, device=device),
                 rill.ones(shape[1], dtype=dtype, device=device)]
        with rill.profiler.profile() as prof:
            y = F.batch_norm(ts[0], *stats, ts[1], ts[2], training=True)
        assert "batch_norm_train" in [e.name for e in prof.events()]
        (y * rill.tensor(g, dtype=dtype, device=device)).sum().backward()
        results[device] = [y] + [t.grad for t in ts] + stats
    tol = 1e-10 if dtype == "float64" else 1e-5
    for c, h in zip(results["cpu"], results["gpu"]):
        assert h.device == rill.device("gpu") and (h.dtype, h.shape) == (c.dtype, c.shape)
        np.testing.assert_allclose(h.numpy(), c.numpy(), rtol=tol, atol=tol)


_COMPILE_SCRIPT = r'''
import inspect
import numpy as np
import rill.gpu

class _HostBackend:  # enough of a backend to import the kernels without CuPy or a GPU
    xp = np
    interpreted = False

rill.gpu.backend = lambda: _HostBackend()
import triton
from triton.backends.compiler import GPUTarget
from rill.kernels.triton import batch_norm as kernels

INTS = ("images", "channels", "m", "per_program", "groups", "count")

def build(fn, dtype, meta):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {}
    for n in names:
        if n in meta:
            sig[n] = "constexpr"
        elif n in INTS:
            sig[n] = "i32"
        else:  # pointers: statistics buffers are float32 or float64 as the data
            sig[n] = "*" + dtype
    src = triton.compiler.ASTSource(fn, sig, constexprs={(names.index(k),): v
                                                         for k, v in meta.items()})
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))

for dtype in ("fp32", "fp64"):
    for product in (False, True):
        build(kernels._partial_sums_kernel, dtype, dict(PRODUCT=product, BLOCK=256))
    build(kernels._forward_stats_kernel, dtype, dict(EPS=1e-5, BLOCK=64))
    build(kernels._backward_stats_kernel, dtype, dict(EPS=1e-5, BLOCK=64))
    for with_g in (False, True):
        build(kernels._per_channel_kernel, dtype, dict(WITH_G=with_g, BLOCK=256))
print("compiled")
'''


def test_gpu_kernels_compile_for_a_real_gpu():
    """The interpreter never runs Triton's compiler: compile every batch norm kernel for
    sm_90, float32 and float64 (no GPU needed)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ("RILL_TRITON_INTERPRET", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
