"""F.pad (PyTorch's flat, last-axis-first convention) and the padding layers against
PyTorch: every mode, 1-3 padded axes, negative constant pads, gradients, capture, errors."""
import numpy as np
import pytest
import torch

import rill

F, TF = rill.nn.functional, torch.nn.functional
RNG = np.random.default_rng(7)


def check(pad, mode, shape, value=None, dtype="float64"):
    x = RNG.standard_normal(shape).astype(dtype)
    rx, tx = rill.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    r, t = F.pad(rx, pad, mode, value), TF.pad(tx, pad, mode, value)
    np.testing.assert_array_equal(r.numpy(), t.detach().numpy())
    gy = RNG.standard_normal(tuple(t.shape)).astype(dtype)
    (r * rill.tensor(gy)).sum().backward()
    (t * torch.tensor(gy)).sum().backward()
    np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad, shape", [
    ((1, 2), (2, 3, 5)), ((2, 0), (3, 4)),
    ((1, 2, 0, 3), (2, 3, 5, 4)), ((3, 1, 2, 2), (3, 4, 5)),
    ((1, 0, 2, 1, 1, 2), (1, 2, 4, 3, 5)),
])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_modes_match_torch(mode, pad, shape, dtype):
    check(pad, mode, shape, dtype=dtype)


@pytest.mark.parametrize("pad", [(-1, 2), (0, 0, -2, 1), (1, -3, 2, 0, 0, 1), (3,) * 8])
def test_constant_pads_any_axes_and_negative_pads_crop(pad):
    check(pad, "constant", (2, 3, 5, 6), value=-2.5)


LAYERS = [("ZeroPad", ()), ("ConstantPad", (1.5,)), ("ReflectionPad", ()),
          ("ReplicationPad", ()), ("CircularPad", ())]


@pytest.mark.parametrize("name, extra", LAYERS)
@pytest.mark.parametrize("rank", [1, 2, 3])
def test_layers_match_torch(name, extra, rank):
    shape = (2, 3, 6, 7, 5)[:rank + 2]
    x = RNG.standard_normal(shape)
    cls, tcls = getattr(rill.nn, f"{name}{rank}d"), getattr(torch.nn, f"{name}{rank}d")
    for padding in (2, tuple(range(1, 2 * rank + 1)) if rank < 3 else (1, 2, 0, 1, 3, 2)):
        np.testing.assert_array_equal(cls(padding, *extra)(rill.tensor(x)).numpy(),
                                      tcls(padding, *extra)(torch.tensor(x)).numpy())


def test_pad_captured_equals_eager():
    x = rill.tensor(RNG.standard_normal((2, 3, 4, 5)))

    def f(v):
        return (F.pad(v, (1, 2, 2, 1), "circular") ** 2).sum() + \
            F.pad(v, (2, 2, 1, 0), "reflect").sum() + (F.pad(v, (-1, 1), value=3.0) ** 3).sum()

    eager = rill.value_and_grad(f)(x)
    captured = rill.capture(rill.value_and_grad(f))(x)
    for a, b in zip(eager, captured):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: F.pad(rill.ones(2, 3), (1, 2, 3)), "even number"),
    (lambda: F.pad(rill.ones(2, 3), (1, 1, 1, 1, 1, 1)), "only 2"),
    (lambda: F.pad(rill.ones(2, 3), 1), "tuple"),
    (lambda: F.pad(rill.ones(1, 2, 3), (3, 0), "reflect"), "smaller than the axis"),
    (lambda: F.pad(rill.ones(1, 2, 3), (1, 0), "reflect", value=1.0), "takes no value"),
    (lambda: F.pad(rill.ones(1, 2, 3), (4, 0), "circular"), "may not exceed"),
    (lambda: F.pad(rill.ones(2, 3), (1, 1, 1, 1, 1, 1), "replicate"), "axes"),
    (lambda: F.pad(rill.ones(1, 2, 3), (1, 1), "wrap"), "mode"),
    (lambda: rill.nn.ReflectionPad2d((1, 2)), "4 ints"),
])
def test_bad_arguments_raise_rill_errors(call, match):
    with pytest.raises(rill.Error, match=match):
        call()
