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


def _by_reduceat(x, idx, values):
    """The runs path in NumPy alone: np.add.reduceat over the sorted rows, added once."""
    n = x.shape[0]
    idx = np.where(idx < 0, idx + n, idx)
    order = np.argsort(idx, kind="stable")
    ordered = idx[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    out = x.copy()
    out.reshape(n, -1)[ordered[starts]] += np.add.reduceat(
        values.reshape(idx.size, -1)[order], starts, axis=0)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("table,lookups", [((256, 128), 1600), ((65, 64), 512), ((2, 3), 700),
                                           ((1, 5), 300), ((300, 7), 64), ((12, 2, 3), 90)])
def test_compiled_row_runs_are_reduceats_bits(dtype, table, lookups):
    """kernels/native/reduce.c:row_runs sums each run as np.add.reduceat does (its first row
    plus NumPy's pairwise sum of the rest: runs of 1 to ~700 rows, through every branch of
    the pairwise sum) and adds it once: the same bits as the NumPy path it replaces. A
    negative zero alone in its run stays one."""
    rng = np.random.default_rng(lookups)
    x = rng.standard_normal(table).astype(dtype)
    idx = rng.integers(-table[0], table[0], lookups)
    values = rng.standard_normal((lookups,) + table[1:]).astype(dtype)
    values[0] = -0.0
    got = x.copy()
    assert kernels._add_rows_by_runs(got, idx, values)
    assert got.tobytes() == _by_reduceat(x, idx, values).tobytes()


def test_compiled_row_runs_refuse_indices_outside_their_arrays():
    from rill.kernels.native import build
    module = build.load("reduce")
    if module is None:
        pytest.skip("no compiled kernels here")
    values, out = np.ones((4, 2), np.float32), np.zeros((3, 2), np.float32)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    good = (values, i64(0, 1, 2, 3), i64(0, 2), i64(0, 2), out, 4, 2, 3, 2, False)
    module.row_runs(*good)
    assert out.tolist() == [[2, 2], [0, 0], [2, 2]]
    for bad in [dict(order=i64(0, 1, 2, 4)), dict(order=i64(0, 1, -1, 3)),
                dict(starts=i64(1, 2)), dict(starts=i64(2, 2)), dict(starts=i64(0, 4)),
                dict(rows=i64(0, 3)), dict(rows=i64(-1, 0))]:
        args = list(good)
        for name, value in bad.items():
            args[["values", "order", "starts", "rows"].index(name)] = value
        with pytest.raises(ValueError, match="row_runs"):
            module.row_runs(*args)
    with pytest.raises(ValueError, match="values"):
        module.row_runs(np.ones((3, 2), np.float32), *good[1:])
