"""The Adam update kernel by cache-sized blocks split over the cores (issue 20, speed).

kernels/numpy/updates.py runs each block of CHUNK elements through the whole update; a
tensor of several blocks must give the same bits as one pass over it, and torch's Adam and
AdamW the same values, for Adam's L2 decay, AdamW's decoupled decay and both lerp forms."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import updates


@pytest.mark.parametrize("kw", [dict(weight_decay=0.0, decay=1.0, beta1=0.9),
                                dict(weight_decay=0.01, decay=1.0, beta1=0.9),
                                dict(weight_decay=0.0, decay=0.99, beta1=0.3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blocks_give_the_bits_of_one_pass(monkeypatch, kw, dtype):
    rng = np.random.default_rng(0)
    shape = (3 * 4096 + 7,)
    p, g, m = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    v = np.abs(rng.standard_normal(shape)).astype(dtype)
    args = (p, g, m, v, np.asarray(0.01, dtype), np.asarray(0.3, dtype))
    kw = dict(kw, beta2=0.999, eps=1e-8)
    whole = updates._adam_update(*args, **kw)
    monkeypatch.setattr(updates, "CHUNK", 4096)
    monkeypatch.setattr(updates, "split", _split_in_two)
    blocks = updates._adam_update(*args, **kw)
    for a, b in zip(whole, blocks):
        assert a.dtype == dtype and np.array_equal(a, b)
    assert not any(np.shares_memory(out, x) for out in blocks for x in (p, g, m, v))


@pytest.mark.parametrize("layout", ["F", "transposed view"])
def test_a_parameter_not_in_c_order_gets_the_same_update(layout):
    """A Parameter made from a transposed tensor holds an F-ordered buffer: its blocks must
    still be written (the flat views of the outputs are views, not copies)."""
    rng = np.random.default_rng(2)
    shape = (700, 500)  # more than one CHUNK
    c_order = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    c_order.append(np.abs(rng.standard_normal(shape)).astype(np.float32))
    other = [np.asfortranarray(a) if layout == "F" else np.ascontiguousarray(a.T).T
             for a in c_order]
    scalars = (np.float32(1e-3), np.float32(0.9))
    kw = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decay=1.0)
    want = updates._adam_update(*c_order, *scalars, **kw)
    got = updates._adam_update(*other, *scalars, **kw)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def _split_in_two(fn, n, elements):
    """As parallel.split on two cores: two runs of consecutive blocks."""
    fn(0, n // 2)
    fn(n // 2, n)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_a_tensor_of_many_blocks_matches_torch(name):
    rng = np.random.default_rng(1)
    value = rng.standard_normal(updates.CHUNK * 2 + 11).astype(np.float32)
    rp, tp = rill.nn.Parameter(rill.tensor(value)), torch.nn.Parameter(torch.tensor(value))
    ropt = getattr(rill.optim, name)([rp], lr=1e-2, weight_decay=0.1)
    topt = getattr(torch.optim, name)([tp], lr=1e-2, weight_decay=0.1)
    for step in range(3):
        grad = rng.standard_normal(value.shape).astype(np.float32)
        rp.grad, tp.grad = rill.tensor(grad), torch.tensor(grad)
        ropt.step()
        topt.step()
    np.testing.assert_allclose(rp.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
