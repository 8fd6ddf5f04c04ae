"""index_add of rows by one index array, summed by sorted runs (kernels/numpy/indexing.py,
issue 20, speed): against np.add.at in float64, with repeated and negative indices, 1-d
tables, and what it leaves to np.add.at; an embedding's gradient against PyTorch; a bad index
is still a rill error."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.kernels.numpy import indexing as kernels
from rill.ops.indexing import ARRAY

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("table", [(65, 8), (40,), (30, 3, 4)])
def test_matches_np_add_at(table):
    x = RNG.standard_normal(table)
    idx = RNG.integers(-table[0], table[0], 300)  # repeats and negatives
    values = RNG.standard_normal((300,) + table[1:])
    want = x.copy()
    np.add.at(want, idx, values)
    assert kernels._add_rows_by_runs(x.copy(), idx, values)  # the fast path applies
    got = kernels._index_add(x, values, idx, key=(ARRAY,))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not np.shares_memory(got, x)


def test_other_cases_are_left_to_np_add_at():
    out = np.zeros((10, 4))
    assert not kernels._add_rows_by_runs(out, np.arange(8) % 10, np.ones((8, 4)))  # few rows
    assert not kernels._add_rows_by_runs(out, np.arange(80) % 11, np.ones((80, 4)))  # bound
    assert not kernels._add_rows_by_runs(out, np.arange(80) % 10, np.ones((80, 4), np.float32))
    assert not kernels._add_rows_by_runs(out, np.arange(80) % 10, np.ones((1, 4)))  # broadcast
    assert not out.any()


def test_embedding_gradient_matches_torch():
    weights = RNG.standard_normal((65, 16)).astype(np.float32)
    tokens = RNG.integers(0, 65, (8, 64))
    g = RNG.standard_normal((8, 64, 16)).astype(np.float32)
    rw = rill.tensor(weights, requires_grad=True)
    (rill.nn.functional.embedding(rill.tensor(tokens), rw) * rill.tensor(g)).sum().backward()
    tw = torch.tensor(weights, requires_grad=True)
    (torch.nn.functional.embedding(torch.tensor(tokens), tw) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(rw.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_an_index_out_of_range_is_a_rill_error():
    x = rill.zeros(10, 4)
    with pytest.raises(rill.Error, match="out of bounds|out of range"):
        rill.ops.indexing.index_add(x, (rill.tensor(np.arange(80) % 11),), rill.ones(80, 4))
