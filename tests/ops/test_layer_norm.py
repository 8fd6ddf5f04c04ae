"""The fused layer_norm primitive: second-order gradients equal the composite formula's,
and the gpu kernels equal the CPU kernels on rows longer than one block."""
from __future__ import annotations

import numpy as np
import pytest

import rill
import rill.nn.functional as F
from rill.ops.elementwise import rsqrt, square
from rill.ops.reduce import mean


def _composite(x, w, b, axes=(1, 2)):
    mu = mean(x, axis=axes, keepdims=True)
    c = x - mu
    return c * rsqrt(mean(square(c), axis=axes, keepdims=True) + 1e-5) * w + b


def _second_order(layer_norm, arrays, cot):
    def first(x, w, b):
        gx, gw, gb = rill.grad(lambda x, w, b: (layer_norm(x, w, b) * rill.tensor(cot)).sum(),
                               argnums=(0, 1, 2))(x, w, b)
        return (gx * gx).sum() + (gw * gw * gx.sum()).sum() + (gb * gb * gw).sum()
    return rill.grad(first, argnums=(0, 1, 2))(*(rill.tensor(a) for a in arrays))


def test_second_order_gradient_equals_the_composite_formula():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in ((3, 2, 5), (2, 5), (2, 5))]
    cot = rng.standard_normal((3, 2, 5))
    fused = _second_order(lambda x, w, b: F.layer_norm(x, (2, 5), w, b), arrays, cot)
    composite = _second_order(_composite, arrays, cot)
    for f, c in zip(fused, composite):
        np.testing.assert_allclose(np.asarray(f), np.asarray(c), rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
@pytest.mark.parametrize("shape,normalized", [((9, 3000), (3000,)), ((4, 3, 70), (3, 70)),
                                              ((5, 1), (1,))])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_gpu_matches_cpu_forward_and_backward(shape, normalized, dtype):
    rng = np.random.default_rng(1)
    x, w, b, g = (rng.standard_normal(s) for s in (shape, normalized, normalized, shape))
    results = {}
    for device in ("cpu", "gpu"):
        ts = [rill.tensor(a, dtype=dtype, device=device) for a in (x, w, b)]
        cot = rill.tensor(g, dtype=dtype, device=device)
        y = F.layer_norm(*ts[:1], normalized, *ts[1:])
        grads = rill.grad(lambda x, w, b: (F.layer_norm(x, normalized, w, b) * cot).sum(),
                          argnums=(0, 1, 2))(*ts)
        results[device] = [y] + list(grads)
    tol = {"float64": 1e-10, "float32": 1e-4, "float16": 2e-2}[dtype]
    for c, h in zip(results["cpu"], results["gpu"]):
        assert h.device == rill.device("gpu") and (h.dtype, h.shape) == (c.dtype, c.shape)
        np.testing.assert_allclose(h.numpy().astype(np.float64), c.numpy().astype(np.float64),
                                   rtol=tol, atol=tol)
