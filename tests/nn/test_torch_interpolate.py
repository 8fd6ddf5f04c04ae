"""F.interpolate, pixel_shuffle/unshuffle and the upsampling layers against PyTorch: every
mode, size and scale_factor (PyTorch's output-size and source-index rules, with
recompute_scale_factor), align_corners, float64 and float32, gradients, capture, errors."""
import numpy as np
import pytest
import torch

import rill

F, TF = rill.nn.functional, torch.nn.functional
RNG = np.random.default_rng(11)
SHAPES = {1: (2, 3, 7), 2: (2, 2, 5, 7), 3: (1, 2, 4, 5, 3)}


def check(shape, dtype="float64", **kw):
    x = RNG.standard_normal(shape).astype(dtype)
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    r, t = F.interpolate(rx, **kw), TF.interpolate(tx, **kw)
    assert r.shape == tuple(t.shape), kw
    tol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=tol, atol=tol)
    gy = RNG.standard_normal(tuple(t.shape)).astype(dtype)
    (r * rill.tensor(gy)).sum().backward()
    (t * torch.tensor(gy)).sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=tol * 10, atol=tol * 10)


CASES = [(mode, rank, ac) for mode, ranks in [
    ("nearest", (1, 2, 3)), ("nearest-exact", (1, 2, 3)), ("area", (1, 2, 3)),
    ("linear", (1,)), ("bilinear", (2,)), ("bicubic", (2,)), ("trilinear", (3,))]
    for rank in ranks
    for ac in ((None,) if mode in ("nearest", "nearest-exact", "area") else (False, True))]


@pytest.mark.parametrize("mode, rank, align_corners", CASES, ids=str)
def test_sizes_match_torch(mode, rank, align_corners):
    for size in (1, 3, 4, 10):
        check(SHAPES[rank], size=(size,) * rank if rank > 1 else size, mode=mode,
              align_corners=align_corners)


@pytest.mark.parametrize("mode, rank, align_corners", CASES, ids=str)
def test_scale_factors_match_torch(mode, rank, align_corners):
    # 1.7 and 0.7 give sizes whose scale in/out differs from 1/scale_factor: the source
    # positions then depend on recompute_scale_factor, as in PyTorch.
    for factor in (0.5, 0.7, 1.7, 2, 3.0):
        for recompute in ((None,) if mode == "area" else (None, True)):
            check(SHAPES[rank], scale_factor=factor, mode=mode, align_corners=align_corners,
                  recompute_scale_factor=recompute)


@pytest.mark.parametrize("mode, rank", [("nearest", 2), ("bilinear", 2), ("bicubic", 2),
                                        ("trilinear", 3), ("nearest-exact", 1)])
def test_float32_matches_torch(mode, rank):
    check(SHAPES[rank], "float32", scale_factor=(1.5,) * rank, mode=mode)


def test_per_axis_scale_factors():
    check((1, 2, 5, 6), scale_factor=(2, 0.5), mode="bilinear", align_corners=False)
    check((1, 2, 5, 6), size=(3, 11), mode="nearest")


def test_layers_match_torch():
    x = RNG.standard_normal((2, 8, 3, 4))
    pairs = [(rill.nn.Upsample(scale_factor=2, mode="bilinear"),
              torch.nn.Upsample(scale_factor=2, mode="bilinear")),
             (rill.nn.Upsample(size=(5, 7)), torch.nn.Upsample(size=(5, 7))),
             (rill.nn.UpsamplingNearest2d(scale_factor=3), torch.nn.UpsamplingNearest2d(
                 scale_factor=3)),
             (rill.nn.UpsamplingBilinear2d(size=(4, 9)), torch.nn.UpsamplingBilinear2d(
                 size=(4, 9))),
             (rill.nn.PixelShuffle(2), torch.nn.PixelShuffle(2))]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours(rill.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy(),
                                   rtol=1e-12)
    y = RNG.standard_normal((2, 3, 4, 6))
    np.testing.assert_array_equal(rill.nn.PixelUnshuffle(2)(rill.tensor(y)).numpy(),
                                  torch.nn.PixelUnshuffle(2)(torch.tensor(y)).numpy())


@pytest.mark.parametrize("shape, r", [((2, 8, 3, 5), 2), ((3, 18, 2, 1), 3),
                                      ((2, 1, 4, 2, 2), 2)])
def test_pixel_shuffle_and_unshuffle_match_torch(shape, r):
    x = RNG.standard_normal(shape)
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    if shape[-3] % (r * r) == 0:
        r_out, t_out = F.pixel_shuffle(rx, r), TF.pixel_shuffle(tx, r)
    else:
        r_out, t_out = F.pixel_unshuffle(rx, r), TF.pixel_unshuffle(tx, r)
    np.testing.assert_array_equal(r_out.numpy(), t_out.detach().numpy())
    gy = RNG.standard_normal(tuple(t_out.shape))
    (r_out * rill.tensor(gy)).sum().backward()
    (t_out * torch.tensor(gy)).sum().backward()
    np.testing.assert_array_equal(rx.grad.numpy(), tx.grad.numpy())
    back = F.pixel_unshuffle(r_out, r) if shape[-3] % (r * r) == 0 else \
        F.pixel_shuffle(r_out, r)
    np.testing.assert_array_equal(back.numpy(), x)


def test_interpolate_step_captured_equals_eager():
    x = rill.tensor(RNG.standard_normal((2, 4, 5, 6)))

    def f(v):
        a = F.interpolate(v, scale_factor=1.5, mode="bicubic", align_corners=True)
        b = F.interpolate(F.pixel_shuffle(v, 2), size=(7, 9), mode="nearest-exact")
        return (a ** 2).sum() + (b ** 3).sum()

    eager = rill.value_and_grad(f)(x)
    captured = rill.capture(rill.value_and_grad(f))(x)
    for a, b in zip(eager, captured):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


X4 = rill.ones(1, 1, 4, 4)


@pytest.mark.parametrize("call, match", [
    (lambda: F.interpolate(X4), "exactly one of size and scale_factor"),
    (lambda: F.interpolate(X4, size=3, scale_factor=2), "exactly one"),
    (lambda: F.interpolate(X4, size=3, mode="linear"), "linear"),
    (lambda: F.interpolate(X4, size=3, mode="trilinear"), "5-d"),
    (lambda: F.interpolate(X4, size=3, mode="cubic"), "mode"),
    (lambda: F.interpolate(X4, size=3, align_corners=True), "align_corners"),
    (lambda: F.interpolate(X4, size=(3, 4, 5)), "2 entries"),
    (lambda: F.interpolate(X4, scale_factor=-1.0), "positive"),
    (lambda: F.interpolate(X4, size=3, mode="bilinear", antialias=True), "antialias"),
    (lambda: F.interpolate(rill.ones(4, 4), size=3), "N, C"),
    (lambda: F.pixel_shuffle(rill.ones(1, 3, 2, 2), 2), "divisible"),
    (lambda: F.pixel_unshuffle(rill.ones(1, 3, 3, 2), 2), "divisible"),
    (lambda: F.pixel_shuffle(rill.ones(1, 4, 2, 2), 0), "positive"),
])
def test_bad_arguments_raise_rill_errors(call, match):
    with pytest.raises(rill.Error, match=match):
        call()
