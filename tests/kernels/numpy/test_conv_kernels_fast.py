"""The CPU convolution kernels that work a few images at a time on every core
(kernels/numpy/conv_per_image.py) against PyTorch: forward, input, weight and bias gradients
in float64 and float32, on batches large enough that the work is split over threads (with
BLAS held at one thread), for odd sizes and every stride/padding/dilation combination; the
grouped cases that keep the whole-batch kernels; the two kernel paths against each other;
capture; and bad arguments."""
import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import conv as conv_kernels
from rill.kernels.numpy import parallel

F, TF = rill.nn.functional, torch.nn.functional
RNG = np.random.default_rng(20)
TOL = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=2e-5, atol=2e-5)}


@pytest.fixture(autouse=True)
def split_everything(monkeypatch):
    """Every pass split over (at least) two threads, however small: the tests stay fast and
    still run the threaded paths (chunks, BLAS held at one thread, partial sums)."""
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(conv_kernels, "ONEDNN", False)  # these kernels, not oneDNN's
    monkeypatch.setattr(parallel, "THREADS", max(2, parallel.THREADS))


def randn(*shape):
    return RNG.standard_normal(shape)


def check(rill_fn, torch_fn, arrays, dtype, **kw):
    """Same call in both: values, then the gradients of a random projection for every input.
    Tolerances are relative to each result's largest entry."""
    arrays = [a.astype(dtype) for a in arrays]
    rx = [rill.tensor(a, requires_grad=True) for a in arrays]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    r, t = rill_fn(*rx, **kw), torch_fn(*tx, **kw)
    assert r.shape == tuple(t.shape) and r.dtype == getattr(rill, dtype)
    close(r.numpy(), t.detach().numpy(), dtype)
    gy = RNG.standard_normal(tuple(t.shape)).astype(dtype)
    r.backward(rill.tensor(gy))
    t.backward(torch.tensor(gy))
    for a, b in zip(rx, tx):
        close(a.grad.numpy(), b.grad.numpy(), dtype)


def close(a, b, dtype):
    scale = max(1.0, float(np.abs(b).max()))
    np.testing.assert_allclose(a / scale, b / scale, **TOL[dtype])


# Batches of 6-9 images of odd sizes: more images than chunks, so uneven chunks and several
# images per GEMM run.
CONV2D = [
    ((7, 5, 13, 11), (6, 5, 3, 3), dict(padding=1)),
    # from 64 rows (C*KK) on, stride 1 copies columns in runs of whole padded rows
    ((7, 8, 13, 11), (6, 8, 3, 3), dict(padding=1)),
    ((6, 11, 19, 16), (5, 11, 3, 2), dict(dilation=(2, 3), padding=(1, 2))),
    ((7, 5, 15, 13), (6, 5, 5, 3), dict(padding="same", dilation=2)),
    ((6, 8, 9, 10), (4, 8, 3, 3), dict()),
    ((9, 3, 17, 15), (8, 3, 3, 3), dict(stride=2, padding=(2, 1))),
    ((6, 4, 19, 16), (5, 4, 3, 2), dict(dilation=(2, 3), padding=(1, 2))),
    ((8, 6, 12, 14), (4, 6, 1, 1), dict()),                       # no padding: x read in place
    ((7, 4, 15, 13), (6, 4, 5, 3), dict(padding="same", dilation=2)),
    ((6, 5, 20, 21), (7, 5, 4, 4), dict(stride=(3, 2), padding=3, dilation=(1, 2))),
    ((6, 6, 14, 13), (8, 3, 3, 3), dict(padding=1, groups=2)),    # grouped: whole-batch path
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("xs, ws, kw", CONV2D)
def test_conv2d_matches_torch(xs, ws, kw, dtype):
    check(F.conv2d, TF.conv2d, [randn(*xs), randn(*ws), randn(ws[0])], dtype, **kw)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=1, output_padding=1),
                                dict(stride=(2, 3), padding=(0, 2), output_padding=(1, 2),
                                     dilation=(2, 1))])
def test_conv_transpose2d_matches_torch(kw, dtype):
    # output_padding reaches the kernels as a negative pad: their crop is tested here.
    check(F.conv_transpose2d, TF.conv_transpose2d,
          [randn(7, 6, 9, 11), randn(6, 5, 3, 4), randn(5)], dtype, **kw)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_conv1d_and_conv3d_match_torch(dtype):
    check(F.conv1d, TF.conv1d, [randn(9, 5, 301), randn(7, 5, 3), randn(7)], dtype,
          stride=2, padding=2, dilation=2)
    check(F.conv3d, TF.conv3d, [randn(6, 3, 9, 8, 7), randn(5, 3, 3, 2, 3), randn(5)], dtype,
          padding=(1, 0, 1), stride=(1, 2, 1))
    # stride 1: the input gradient's col2im runs over whole padded rows
    for c in (4, 13):  # below and above 64 rows
        check(F.conv1d, TF.conv1d, [randn(7, c, 33), randn(6, c, 5), randn(6)], dtype,
              padding=3)
    for c in (3, 4):
        check(F.conv3d, TF.conv3d, [randn(6, c, 7, 8, 6), randn(5, c, 3, 2, 3), randn(5)],
              dtype, padding=(1, 2, 0), dilation=(1, 2, 1))


def test_conv2d_input_and_weight_only_gradients():
    """The frozen-weight and first-layer cases run one of the two backward kernels alone."""
    x, w = randn(8, 4, 16, 16), randn(6, 4, 3, 3)
    for needs in ((True, False), (False, True)):
        rx, rw = (rill.tensor(a, requires_grad=r) for a, r in zip((x, w), needs))
        tx, tw = (torch.tensor(a, requires_grad=r) for a, r in zip((x, w), needs))
        F.conv2d(rx, rw, padding=1).sum().backward()
        TF.conv2d(tx, tw, padding=1).sum().backward()
        for r, t in ((rx, tx), (rw, tw)):
            assert (r.grad is None) == (t.grad is None)
            if t.grad is not None:
                close(r.grad.numpy(), t.grad.numpy(), "float64")


def test_noncontiguous_and_float16_inputs():
    x = randn(8, 12, 14, 5).transpose(0, 3, 1, 2)  # (8, 5, 12, 14), not contiguous
    w = randn(6, 5, 3, 3)
    close(F.conv2d(rill.tensor(x), rill.tensor(w), padding=1).numpy(),
          TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy(), "float64")
    # float16 runs in float32 and comes back float16
    r = F.conv2d(rill.tensor(x.astype(np.float16)), rill.tensor(w.astype(np.float16)), padding=1)
    t = TF.conv2d(torch.tensor(x.astype(np.float16).astype(np.float32)),
                  torch.tensor(w.astype(np.float16).astype(np.float32)), padding=1)
    assert r.dtype == rill.float16
    np.testing.assert_allclose(r.numpy().astype(np.float32), t.numpy(), rtol=2e-3, atol=2e-2)


def _kernels_both_ways(fn):
    saved = conv_kernels.PER_IMAGE
    try:
        out = []
        for per_image in (True, False):
            conv_kernels.PER_IMAGE = per_image
            out.append(fn())
        return out
    finally:
        conv_kernels.PER_IMAGE = saved


def test_per_image_and_whole_batch_kernels_agree():
    x, w, b, g = randn(9, 5, 15, 13), randn(7, 5, 3, 3), randn(7), randn(9, 7, 8, 7)
    attrs = dict(stride=(2, 2), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    new, old = _kernels_both_ways(lambda: (
        conv_kernels.conv(x, w, b, **attrs),
        conv_kernels.conv_transpose(g, w, (15, 13), **attrs),
        conv_kernels.conv_weight_grad(x, g, (3, 3), **attrs)))
    for a, c in zip(new, old):
        assert a.shape == c.shape and a.dtype == c.dtype
        close(a, c, "float64")


def test_weight_gradient_is_deterministic():
    """The threads' partial sums add in one order, whichever thread finishes first."""
    x, g = randn(16, 8, 16, 16).astype(np.float32), randn(16, 12, 16, 16).astype(np.float32)
    attrs = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    first = conv_kernels.conv_weight_grad(x, g, (3, 3), **attrs)
    for _ in range(3):
        assert np.array_equal(conv_kernels.conv_weight_grad(x, g, (3, 3), **attrs), first)


def test_blas_threads_restored_after_a_split():
    controllers = parallel._blas_controllers()
    if not controllers or parallel.THREADS < 2:
        pytest.skip("needs threadpoolctl and two cores")
    before = [c.get_num_threads() for c in controllers]
    seen = []
    parallel.split(lambda lo, hi: seen.append(controllers[0].get_num_threads()), 8,
                   1 << 20, serial_blas=True)
    assert seen and set(seen) == {1}
    assert [c.get_num_threads() for c in controllers] == before
    with pytest.raises(ValueError, match="chunk failed"):  # restored on failure too
        parallel.split(lambda lo, hi: (_ for _ in ()).throw(ValueError("chunk failed")), 8,
                       1 << 20, serial_blas=True)
    assert [c.get_num_threads() for c in controllers] == before


def test_captured_training_step_equals_eager():
    x, w0 = randn(8, 3, 16, 16).astype(np.float32), randn(6, 3, 3, 3).astype(np.float32)

    def run(captured):
        w = rill.tensor(w0, requires_grad=True)

        def step(x):
            loss = F.relu(F.conv2d(x, w, padding=1)).sum()
            loss.backward()
            return loss
        step = rill.capture(step) if captured else step
        loss = step(rill.tensor(x))
        return loss.numpy(), w.grad.numpy()
    for a, b in zip(run(False), run(True)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def test_bad_arguments_raise_rill_errors():
    x = rill.tensor(randn(8, 4, 16, 16))
    with pytest.raises(rill.Error, match="channels"):
        F.conv2d(x, rill.tensor(randn(6, 3, 3, 3)))
    with pytest.raises(rill.Error, match="stride"):
        F.conv2d(x, rill.tensor(randn(6, 4, 3, 3)), stride=0)


@pytest.mark.parametrize("per", [2, 3])
def test_runs_of_images_that_do_not_divide_the_batch(monkeypatch, per):
    """One thread over 7 images, `per` images per GEMM: the last run is short."""
    from rill.kernels.numpy import conv_per_image
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 1 << 62)  # no split: one chunk of 7
    pixels = 10 * 9  # padding 1 keeps the size
    for c in (3, 8):  # 27 and 72 rows: both forward copies
        xs, ws = (7, c, 10, 9), (4, c, 3, 3)
        monkeypatch.setattr(conv_per_image, "_COLS_BYTES", per * c * 9 * pixels * 8)
        monkeypatch.setattr(conv_per_image, "_WEIGHT_GRAD_COLUMNS", per * pixels)
        monkeypatch.setattr(conv_per_image, "_WEIGHT_GRAD_BYTES", 0)
        check(F.conv2d, TF.conv2d, [randn(*xs), randn(*ws), randn(4)], "float64", padding=1)
        check(F.conv2d, TF.conv2d, [randn(*xs), randn(*ws), randn(4)], "float64", padding=1,
              stride=2)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fewer_images_than_threads(monkeypatch, dtype):
    """One image on four threads: not split, BLAS keeps its threads; same results."""
    monkeypatch.setattr(parallel, "THREADS", 4)
    check(F.conv2d, TF.conv2d, [randn(1, 8, 21, 19), randn(6, 8, 3, 3), randn(6)], dtype,
          padding=1)
    check(F.conv2d, TF.conv2d, [randn(3, 8, 21, 19), randn(6, 8, 3, 3), randn(6)], dtype,
          padding=2, stride=2)
