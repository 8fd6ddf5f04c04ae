"""The CPU linear kernel's two GEMM forms (kernels/numpy/linalg.py, issue 20, speed): a
layer of few rows and many outputs computes x @ w.T as (w @ x.T).T. Both forms against NumPy
in float64, with and without a bias, for 2-d and 3-d inputs; the transposed result through
the ops that follow it (eager against captured, and the gradients against PyTorch)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import linalg as kernels

RNG = np.random.default_rng(5)


# transposed form: (16, 784) -> 512, (32, 64) -> 192, (2, 8, 96) -> 256; direct: the others
# (a 1-d x is one row, whatever its length)
@pytest.mark.parametrize("x_shape, outputs", [((16, 784), 512), ((32, 64), 192),
                                              ((2, 8, 96), 256), ((512, 64), 192),
                                              ((16, 512), 10), ((33, 64), 192), ((8,), 64),
                                              ((40,), 64)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_forms_match_numpy(x_shape, outputs, with_bias, dtype):
    x = RNG.standard_normal(x_shape).astype(dtype)
    w = RNG.standard_normal((outputs, x_shape[-1])).astype(dtype)
    b = RNG.standard_normal(outputs).astype(dtype)
    got = kernels._linear(x, w, *([b] if with_bias else []))
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (b if with_bias else 0)
    assert got.shape == want.shape and got.dtype == dtype
    assert got.flags.c_contiguous  # the transposed form's product is copied back to C order
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_an_mlp_step_matches_torch_and_its_capture():
    """Few rows, many outputs: the hidden layer takes the transposed form; its output goes
    through ReLU, the loss and the gradients."""
    xs = RNG.standard_normal((16, 300)).astype(np.float32)
    ys = RNG.integers(0, 10, 16)
    shapes = [(256, 300), (256,), (10, 256), (10,)]
    ws = [(RNG.standard_normal(s) / 16).astype(np.float32) for s in shapes]

    def step(fw, params, x, y):
        h = fw.nn.functional.relu(fw.nn.functional.linear(x, params[0], params[1]))
        loss = fw.nn.functional.cross_entropy(fw.nn.functional.linear(h, params[2], params[3]), y)
        loss.backward()
        return loss

    tp = [torch.tensor(w, requires_grad=True) for w in ws]
    want = step(torch, tp, torch.tensor(xs), torch.tensor(ys))
    results = []
    for captured in (False, True):
        rp = [rill.tensor(w, requires_grad=True) for w in ws]
        run = rill.capture(lambda x, y: step(rill, rp, x, y)) if captured else \
            (lambda x, y: step(rill, rp, x, y))
        loss = run(rill.tensor(xs), rill.tensor(ys))
        np.testing.assert_allclose(float(loss), want.item(), rtol=1e-5)
        for r, t in zip(rp, tp):
            np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)
        results.append([float(loss)] + [r.grad.numpy() for r in rp])
    for eager, captured in zip(*results):  # the same kernels: the same bits
        np.testing.assert_array_equal(eager, captured)
