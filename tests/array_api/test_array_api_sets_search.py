"""Array API 2024.12 searching and set functions: nonzero, searchsorted, count_nonzero,
unique_all / unique_counts / unique_inverse / unique_values, and isin.

Written from the standard's text. Values against NumPy 2 where NumPy does what the standard
says (np.unique with equal_nan=False: each NaN is its own value, as the standard's value
equality makes it), and against the text's own conditions (searchsorted's index condition,
unique's reconstruction) over random inputs with many ties.
"""
import numpy as np
import pytest

import rill
from rill.ops.searching import count_nonzero, nonzero, searchsorted, torch_nonzero
from rill.ops.sets import isin, unique_all, unique_counts, unique_inverse, unique_values


def same(r, expected, dtype=None):
    got = r.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_array_equal(got, expected)
    if dtype is not None:
        assert r.dtype is dtype, (r.dtype, dtype)


# ---- nonzero -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0,), (2, 0, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_, np.uint8])
def test_nonzero_against_numpy(shape, dtype):
    a = np.random.default_rng(0).integers(0, 3, shape).astype(dtype)
    if dtype == np.float64 and a.size:
        a.flat[0] = np.nan  # NaN is non-zero
        a.flat[-1] = -0.0   # and -0.0 is zero
    got = nonzero(rill.tensor(a))
    ref = np.nonzero(a)
    assert isinstance(got, tuple) and len(got) == a.ndim
    for g, r in zip(got, ref):
        same(g, r, rill.int64)


def test_nonzero_refuses_0d_and_capture():
    with pytest.raises(rill.ShapeError, match="0-d"):
        nonzero(rill.tensor(1.0))

    @rill.capture
    def f(x):
        return nonzero(x)[0]
    with pytest.raises(rill.CaptureError, match="depends on the tensor's values"):
        f(rill.ones(3))


def test_torch_nonzero():
    torch = pytest.importorskip("torch")
    a = np.array([[0, 2, 0], [1, 0, 3]])
    same(torch_nonzero(rill.tensor(a)), torch.nonzero(torch.tensor(a)).numpy(), rill.int64)
    for g, r in zip(torch_nonzero(rill.tensor(a), as_tuple=True),
                    torch.nonzero(torch.tensor(a), as_tuple=True)):
        same(g, r.numpy())
    assert torch_nonzero(rill.tensor(5)).shape == tuple(torch.nonzero(torch.tensor(5)).shape)
    assert torch_nonzero(rill.tensor(0)).shape == (0, 0)


# ---- count_nonzero -------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), ()])
@pytest.mark.parametrize("keepdims", [False, True])
def test_count_nonzero_against_numpy(axis, keepdims):
    a = np.random.default_rng(1).integers(0, 3, (2, 3, 4)).astype(np.float64)
    a[0, 0, 0] = np.nan
    got = count_nonzero(rill.tensor(a), axis=axis, keepdims=keepdims)
    same(got, np.count_nonzero(a, axis=axis, keepdims=keepdims), rill.int64)


def test_count_nonzero_dtypes_and_edges():
    same(count_nonzero(rill.tensor([True, False, True])), 2, rill.int64)
    same(count_nonzero(rill.tensor([0, 7], dtype=rill.uint8)), 1, rill.int64)
    same(count_nonzero(rill.zeros(0, 3), axis=0), [0, 0, 0], rill.int64)
    same(count_nonzero(rill.tensor(0.0)), 0)
    with pytest.raises(rill.ShapeError, match="out of range"):
        count_nonzero(rill.ones(2, 2), axis=2)
    with pytest.raises(rill.ArgumentError, match="axis"):
        count_nonzero(rill.ones(2), axis=0.5)


# ---- searchsorted --------------------------------------------------------------------------


def _index_condition_holds(x1, v, i, side):
    """The standard's condition on out[j] = i for v = x2[j] (numbers only)."""
    lower_ok = i == 0 or (x1[i - 1] < v if side == "left" else x1[i - 1] <= v)
    upper_ok = i == len(x1) or (v <= x1[i] if side == "left" else v < x1[i])
    return lower_ok and upper_ok


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 100])
def test_searchsorted_against_numpy_and_the_condition(side, n):
    rng = np.random.default_rng(n)
    x1 = np.sort(rng.integers(0, 6, n)).astype(np.float64)  # many ties
    x2 = rng.integers(-1, 8, (3, 5)).astype(np.float64)
    got = searchsorted(rill.tensor(x1), rill.tensor(x2), side=side)
    same(got, np.searchsorted(x1, x2, side=side), rill.int64)
    for v, i in zip(x2.ravel(), got.numpy().ravel()):
        assert _index_condition_holds(x1, v, i, side)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_nan_sorts_last_as_sort_does(side):
    x1 = np.array([-np.inf, 1.0, 2.0, 2.0, np.inf, np.nan, np.nan])
    x2 = np.array([np.nan, np.inf, 2.0, -np.inf, 0.0, 5.0])
    same(searchsorted(rill.tensor(x1), rill.tensor(x2), side=side),
         np.searchsorted(x1, x2, side=side))


def test_searchsorted_sorter_dtypes_and_scalars():
    x1 = np.array([3, 1, 2, 1], dtype=np.int32)
    order = np.argsort(x1, kind="stable")
    got = searchsorted(rill.tensor(x1), rill.tensor([1.5, 3.0, 0.0]), side="right",
                       sorter=rill.tensor(order))
    same(got, np.searchsorted(x1, [1.5, 3.0, 0.0], side="right", sorter=order), rill.int64)
    same(searchsorted(rill.tensor([1, 2, 3]), 2), 1, rill.int64)
    same(searchsorted(rill.tensor([1.0, 2.0]), rill.zeros(0)), np.zeros(0, np.int64))


def test_searchsorted_capture_and_bad_input():
    x1, x2 = rill.tensor([1.0, 2.0, 2.0, 4.0]), rill.tensor([[2.0, 3.0], [5.0, 0.0]])
    captured = rill.capture(lambda a, b: searchsorted(a, b, side="right"))
    same(captured(x1, x2), searchsorted(x1, x2, side="right").numpy())
    with pytest.raises(rill.ShapeError, match="1-d"):
        searchsorted(rill.ones(2, 2), x2)
    with pytest.raises(rill.ArgumentError, match="side"):
        searchsorted(x1, x2, side="middle")
    with pytest.raises(rill.ShapeError, match="sorter"):
        searchsorted(x1, x2, sorter=rill.tensor([0, 1]))


# ---- unique_* ------------------------------------------------------------------------------


def _numpy_unique(a):
    return np.unique(a, return_index=True, return_inverse=True, return_counts=True,
                     equal_nan=False)


CASES = {
    "ints_2d": np.array([[3, 1, 3], [2, 1, 1]], dtype=np.int64),
    "floats_nan": np.array([2.0, np.nan, 1.0, np.nan, 2.0, -0.0, 0.0, np.inf]),
    "all_nan": np.full(3, np.nan),
    "bool": np.array([True, False, True]),
    "empty": np.zeros((0, 2)),
    "0d": np.array(4.5),
    "uint8": np.array([200, 3, 200], dtype=np.uint8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_unique_all_against_numpy(name):
    a = CASES[name]
    x = rill.tensor(a)
    values, indices, inverse, counts = _numpy_unique(a)
    got = unique_all(x)
    assert got._fields == ("values", "indices", "inverse_indices", "counts")
    same(got.values, values, x.dtype)
    same(got.indices, indices, rill.int64)
    same(got.inverse_indices, inverse.reshape(a.shape), rill.int64)
    same(got.counts, counts, rill.int64)
    assert got.values.ndim == 1 and got.inverse_indices.shape == x.shape
    # The standard's reconstruction (signed zeros aside): values[inverse_indices] is x.
    rebuilt = got.values.numpy()[got.inverse_indices.numpy()]
    np.testing.assert_array_equal(np.where(rebuilt == 0, 0, rebuilt), np.where(a == 0, 0, a))
    assert int(got.counts.numpy().sum()) == a.size


@pytest.mark.parametrize("name", list(CASES))
def test_unique_counts_inverse_values_agree_with_unique_all(name):
    x = rill.tensor(CASES[name])
    full = unique_all(x)
    counts = unique_counts(x)
    inverse = unique_inverse(x)
    assert counts._fields == ("values", "counts")
    assert inverse._fields == ("values", "inverse_indices")
    for got in (counts.values, inverse.values, unique_values(x)):
        same(got, full.values.numpy(), x.dtype)
    same(counts.counts, full.counts.numpy())
    same(inverse.inverse_indices, full.inverse_indices.numpy())


def test_unique_nan_each_distinct_and_signed_zero_counted_once():
    got = unique_counts(rill.tensor([np.nan, 0.0, np.nan, -0.0, 1.0]))
    assert np.isnan(got.values.numpy()[-2:]).all() and got.counts.tolist() == [2, 1, 1, 1]
    assert unique_values(rill.tensor([np.nan] * 4)).shape == (4,)


def test_unique_keeps_dtype_and_device():
    x = rill.tensor([1.5, 0.5, 1.5], dtype=rill.bfloat16)
    assert unique_values(x).dtype is rill.bfloat16
    y = rill.tensor([2, 1, 2], device="cpu:1")
    got = unique_all(y)
    assert all(t.device == rill.device("cpu:1") for t in got)


def test_unique_refused_under_capture():
    @rill.capture
    def f(x):
        return unique_values(x)
    with pytest.raises(rill.CaptureError, match="unique_values"):
        f(rill.ones(3))


# ---- isin ----------------------------------------------------------------------------------


@pytest.mark.parametrize("invert", [False, True])
def test_isin_against_numpy(invert):
    rng = np.random.default_rng(4)
    x1 = rng.integers(0, 10, (3, 5)).astype(np.float64)
    x1[0, 0] = np.nan
    x2 = np.append(rng.integers(0, 10, 6).astype(np.float64), [np.nan, -0.0])
    got = isin(rill.tensor(x1), rill.tensor(x2), invert=invert)
    same(got, np.isin(x1, x2, invert=invert), rill.bool)


def test_isin_mixed_dtypes_scalars_empty_and_capture():
    same(isin(rill.tensor([1, 2, 3]), rill.tensor([3.0, 1.5])), [False, False, True])
    same(isin(rill.tensor([0.0, 2.0]), rill.tensor([[-0.0], [2.0]])), [True, True])
    same(isin(rill.tensor(2), rill.tensor([1, 2])), True)
    same(isin(rill.tensor([1, 2]), rill.zeros(0)), [False, False])
    same(isin(rill.tensor([1, 2]), rill.zeros(0), invert=True), [True, True])
    x1, x2 = rill.tensor([[4, 1], [0, 9]]), rill.tensor([9, 4, 4])
    same(rill.capture(lambda a, b: isin(a, b))(x1, x2), isin(x1, x2).numpy())
    with pytest.raises(rill.ArgumentError, match="invert"):
        isin(x1, x2, invert=None)


# ---- complex tensors (non-zero: either part; unique: each NaN-holding value distinct) -------

needs_complex = pytest.mark.skipif(not hasattr(rill.dtypes, "complex128"),
                                   reason="complex dtypes not in this build")


@needs_complex
def test_complex_nonzero_count_unique_isin():
    z = np.array([[1 + 1j, 0j, 2j], [complex(np.nan, 1), 0j, 1 + 1j]])
    x = rill.tensor(z)
    for g, r in zip(nonzero(x), np.nonzero(z)):
        same(g, r, rill.int64)
    same(count_nonzero(x, axis=0), np.count_nonzero(z, axis=0), rill.int64)
    values, indices, inverse, counts = _numpy_unique(z)
    got = unique_all(x)
    same(got.values, values, rill.complex128)
    same(got.indices, indices)
    same(got.inverse_indices, inverse.reshape(z.shape))
    same(got.counts, counts)
    pool = np.array([1 + 1j, complex(np.nan, 1), 5])
    same(isin(x, rill.tensor(pool)), np.isin(z, pool), rill.bool)
    same(isin(rill.tensor([5, 2]), rill.tensor(pool), invert=True), [False, True])
    with pytest.raises(rill.DTypeError, match="real"):
        searchsorted(rill.tensor(pool), x)
