"""CPU kernels with fast paths that the op table's small shapes never reach."""
from __future__ import annotations

import numpy as np
import pytest

from rill.kernels.numpy.elementwise import _where
from rill.kernels.numpy.pooling import max_pool2d, max_pool2d_grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int8,
                                   np.bool_])
def test_branch_free_where_equals_numpy(dtype):
    rng = np.random.default_rng(0)
    c = rng.random((70, 90)) > 0.5
    x = (rng.standard_normal((70, 90)) * 50).astype(dtype)
    y = (rng.standard_normal((90,)) * 50).astype(dtype)  # broadcast
    if np.dtype(dtype).kind == "f":
        x[::7, ::3] = np.nan
        x[1::5] = np.inf
        y[::4] = -0.0
    for xs, ys in ((x, y), (x.T.copy().T, y), (x[:, ::-1], np.asarray(y[0])),
                   (x, np.zeros((), dtype))):  # the where(c, x, 0) shortcut
        got, want = _where(c, xs, ys), np.where(c, xs, ys)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit


def test_max_pool_kernels_on_a_large_batch_match_a_loop():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 9, 11)).astype(np.float32)
    x[0, 0, 2, 3] = np.nan
    x[1, 2, :4, :4] = 1.0  # ties: the first maximum wins
    out, winners = max_pool2d(x, (3, 2), (2, 2), (1, 1), (1, 1))
    g = rng.standard_normal(out.shape).astype(np.float32)
    gx = max_pool2d_grad(g, winners, x.shape, (3, 2), (2, 2), (1, 1), (1, 1))
    expected_gx = np.zeros_like(x)
    for n, c, i, j in np.ndindex(out.shape):
        best, where = -np.inf, None
        for a in range(3):
            for b in range(2):
                r, s = i * 2 - 1 + a, j * 2 - 1 + b
                if 0 <= r < 9 and 0 <= s < 11:
                    v = x[n, c, r, s]
                    if where is None or v > best or (np.isnan(v) and not np.isnan(best)):
                        best, where = v, (r, s)
        a, b = divmod(int(winners[n, c, i, j]), 2)  # the winning tap, row-major in 3x2
        assert (i * 2 - 1 + a, j * 2 - 1 + b) == where
        assert np.array_equal(out[n, c, i, j], best, equal_nan=True)
        expected_gx[n, c][where] += g[n, c, i, j]
    np.testing.assert_allclose(gx, expected_gx, rtol=1e-6)


def test_max_pool_with_more_than_127_taps_finds_the_maximum():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 13, 12)).astype(np.float32)
    out, winners = max_pool2d(x, (12, 12), (1, 1), (0, 0), (1, 1))
    assert winners.dtype == np.int32  # 144 taps do not fit a byte
    for n, c, i in np.ndindex(2, 3, 2):
        window = x[n, c, i:i + 12, :]
        assert out[n, c, i, 0] == window.max()
        assert winners[n, c, i, 0] == np.argmax(window)  # row-major tap number


def test_im2col_columns_are_reused_for_the_same_image_and_dropped_with_it():
    import gc
    from rill.kernels.numpy import conv
    geometry = ((1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    x = np.random.default_rng(3).standard_normal((2, 3, 5, 5)).astype(np.float32)
    first = conv._cols(x, (3, 3), (5, 5), *geometry)
    assert conv._cols(x, (3, 3), (5, 5), *geometry) is first      # the forward's columns
    np.testing.assert_array_equal(first, conv._build_cols(x, (3, 3), (5, 5), *geometry))
    other = x.copy()                                                # equal values, other array
    assert conv._cols(other, (3, 3), (5, 5), *geometry) is not first
    ident = id(x)
    del x, first
    gc.collect()
    assert ident not in conv._CACHE._by_id
