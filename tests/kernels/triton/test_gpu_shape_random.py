"""The gpu shape, indexing, random and check kernels beyond the op table's tiny shapes: many
programs and ragged tails, non-contiguous and reversed inputs, repeated indices, random
statistics and reproducibility. Each result is compared with NumPy (or the CPU device)."""
from __future__ import annotations

import numpy as np
import pytest

import rill

if not rill.gpu.is_available():  # pragma: no cover
    pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()), allow_module_level=True)

GPU = rill.device("gpu")


@pytest.fixture(autouse=True)
def gpu_sized_blocks(monkeypatch):
    """Under the interpreter, the GPU's ~1K-element programs instead of 64K-element ones, so
    that these shapes run as many programs with ragged tails, as they would on a GPU (the
    random draws keep large programs: 100K draws already span two)."""
    from rill.kernels.triton import checks, indexing, launch, shape
    if launch.INTERPRET:
        def block_for(n, cap=1024):
            return max(16, min(cap, launch.triton.next_power_of_2(max(n, 1))))
        for module in (checks, indexing, shape):
            monkeypatch.setattr(module, "block_for", block_for)
        monkeypatch.setattr(indexing, "INTERPRET", False)


def gpu(a):
    return rill.tensor(a, device=GPU)


def same(t, expected):
    got = t.numpy()
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# ---- shape ---------------------------------------------------------------------------------


def test_reshape_of_views_matches_numpy(rng):
    a = rng.standard_normal((4, 6, 10))
    cases = [((slice(None), slice(None), slice(2, 8)), (4, 36)),   # rows of a slice: a view
             ((slice(None), slice(None), slice(2, 8)), (24, 6)),
             ((slice(None, None, -1), slice(1, 5)), (-1, 10)),
             ((slice(None), slice(None, None, 2)), (12, 10)),
             ((slice(None), slice(None), slice(None, None, 3)), (-1,))]  # needs a copy
    for key, shape in cases:
        same(rill.reshape(gpu(a)[key], shape), a[key].reshape(shape))
    t = rill.transpose(gpu(a), (2, 0, 1))
    same(rill.reshape(t, (10, 24)), np.transpose(a, (2, 0, 1)).reshape(10, 24))
    same(rill.reshape(t, (5, 2, 4, 6)), np.transpose(a, (2, 0, 1)).reshape(5, 2, 4, 6))
    same(rill.expand_dims(t[:, 1], 0), np.transpose(a, (2, 0, 1))[None, :, 1])


def test_pad_every_mode_on_a_bigger_reversed_input(rng):
    a = rng.standard_normal((5, 37, 70))
    view = rill.flip(gpu(a), 2)[:, ::2]
    base = np.flip(a, 2)[:, ::2]
    widths = ((1, 2), (3, 0), (4, 9))
    for mode in ("constant", "edge", "reflect"):
        expected = np.pad(base, widths, mode=mode) if mode != "constant" else \
            np.pad(base, widths, constant_values=-1.5)
        same(rill.pad(view, widths, mode=mode, value=-1.5), expected)
    ints = rng.integers(-9, 9, (3, 300))
    same(rill.pad(gpu(ints), ((0, 0), (5, 7)), value=4), np.pad(ints, ((0, 0), (5, 7)),
                                                                 constant_values=4))


def test_roll_concat_triangles_on_bigger_shapes(rng):
    a = rng.standard_normal((6, 50, 130))
    t = gpu(a)
    same(rill.roll(t, (3, -41), axis=(1, 2)), np.roll(a, (3, -41), axis=(1, 2)))
    same(rill.roll(t.transpose((2, 0, 1)), 1001), np.roll(a.transpose(2, 0, 1), 1001))
    same(rill.roll(t[:, ::-3], 5, axis=(0, -1)), np.roll(a[:, ::-3], 5, axis=(0, -1)))
    b = rng.standard_normal((6, 7, 130))
    same(rill.concat([t, gpu(b), t[:, ::-5]], axis=1), np.concatenate([a, b, a[:, ::-5]], 1))
    same(rill.stack([t, t * 2.0], axis=-1), np.stack([a, a * 2.0], -1))
    same(rill.tril(t, 3), np.tril(a, 3))
    same(rill.triu(t.transpose((0, 2, 1)), -7), np.triu(a.transpose(0, 2, 1), -7))
    same(rill.tril(gpu(a > 0), 0), np.tril(a > 0, 0))


def test_views_split_flip_tile_repeat(rng):
    a = rng.standard_normal((9, 40))
    pieces = rill.split(gpu(a), [2, 0, 30, 8], axis=-1)
    for p, e in zip(pieces, np.split(a, [2, 2, 32], axis=-1)):
        same(p, e)
    same(rill.flip(gpu(a)), np.flip(a))
    same(rill.tile(gpu(a)[:, ::3], (2, 1, 3)), np.tile(a[:, ::3], (2, 1, 3)))
    same(rill.repeat(gpu(a), 3, axis=0), np.repeat(a, 3, axis=0))


# ---- indexing ------------------------------------------------------------------------------


def test_embedding_gather_and_sparse_scatter_add_with_repeats(rng):
    table = rng.standard_normal((1000, 96)).astype(np.float32)
    idx = rng.integers(-1000, 1000, (33, 61))
    idx[0, :10] = 7  # many repeats
    w = rill.tensor(table, device=GPU, requires_grad=True)
    out = rill.nn.functional.embedding(gpu(idx), w)
    same(out, table[idx])
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * rill.tensor(g, device=GPU)).sum().backward()
    expected = np.zeros_like(table, dtype=np.float64)
    np.add.at(expected, idx, g.astype(np.float64))
    np.testing.assert_allclose(w.grad.to_dense().numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int64, np.int8, np.bool_])
def test_index_add_accumulates_repeats_in_every_dtype(rng, dtype):
    x = (rng.standard_normal((50, 3, 20)) * 4).astype(dtype)
    v = (rng.standard_normal((300, 3, 20)) * 4).astype(dtype)
    idx = rng.integers(0, 50, 300)
    expected = x.copy()
    np.add.at(expected, idx, v)
    got = rill.index_add(gpu(x), (gpu(idx),), gpu(v)).numpy()
    assert got.dtype == expected.dtype
    if dtype == np.float16:  # one rounding at the end instead of one per add
        np.testing.assert_allclose(got, expected, rtol=1e-2, atol=0.1)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_advanced_keys_match_numpy(rng):
    a = rng.standard_normal((6, 7, 8, 9))
    i = rng.integers(-6, 6, (4, 5))
    j = rng.integers(0, 8, (5,))
    k = rng.integers(-9, 9, (4, 1))
    mask = rng.random((7, 8)) > 0.5
    keys = [(i,), (slice(1, 5), j), (i, slice(None), j), (i, 2, j), (1, slice(None), j, k),
            (Ellipsis, j[:3], None), (slice(None, None, -2), None, mask),
            (i, j[None, :], slice(None), k), (np.int64(3), j), (j[:2],), (Ellipsis, 2),
            (1, Ellipsis, None, 3), (1, 2, 3, 4), (Ellipsis, j, slice(2, 3))]
    x = gpu(a)
    for key in keys:
        gkey = tuple(gpu(p) if isinstance(p, np.ndarray) else p for p in key)
        same(x[gkey], a[key])
    t = rill.transpose(x, (3, 1, 0, 2))  # a non-contiguous source
    same(t[i, ::-1, j % 6], np.transpose(a, (3, 1, 0, 2))[i, ::-1, j % 6])


def test_index_set_keeps_the_last_write_and_basic_keys(rng):
    x = rng.standard_normal((30, 40))
    idx = np.array([3, 5, 3, 3, 29, 5, -1])
    v = rng.standard_normal((7, 40))
    expected = x.copy()
    expected[idx] = v
    same(rill.index_set(gpu(x), (gpu(idx),), gpu(v)), expected)
    expected = x.copy()
    expected[2:20:3, ::-2] = 7.0
    same(rill.index_set(gpu(x), (slice(2, 20, 3), slice(None, None, -2)), gpu(np.array(7.0))),
         expected)
    expected = x.copy()
    expected[5:, 1:4] += v[0, :3]
    same(rill.index_add(gpu(x), (slice(5, None), slice(1, 4)), gpu(v[:1, :3])), expected)


def test_take_along_axis_and_scatter_add_with_broadcast_and_repeats(rng):
    x = rng.standard_normal((40, 1, 300))
    idx = rng.integers(-300, 300, (40, 6, 500))
    same(rill.take_along_axis(gpu(x), gpu(idx), axis=2),
         np.take_along_axis(x, idx % 300, axis=2))
    base = rng.standard_normal((40, 6, 300))
    upd = rng.standard_normal(idx.shape)
    expected = base.copy()
    np.add.at(expected, (np.arange(40)[:, None, None], np.arange(6)[None, :, None], idx), upd)
    got = rill.scatter_add(gpu(base), gpu(idx), gpu(upd), axis=-1).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


# ---- random --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_random_statistics_and_range(dtype):
    g = rill.Generator(seed=11)
    n = 100_000
    u = rill.uniform(-2.0, 3.0, (n,), dtype=dtype, device=GPU, generator=g)
    z = rill.normal(1.5, 2.0, (n,), dtype=dtype, device=GPU, generator=g)
    assert u.dtype.name == dtype and z.dtype.name == dtype
    u, z = u.astype(rill.float64).numpy(), z.astype(rill.float64).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.03 and abs(u.std() - 5 / np.sqrt(12)) < 0.03
    assert abs(z.mean() - 1.5) < 0.03 and abs(z.std() - 2.0) < 0.03
    assert abs(((z - 1.5) / 2.0 > 1.0).mean() - 0.1587) < 0.01  # the normal's tail
    counts = np.histogram(rill.rand(n, device=GPU, generator=g).numpy(), 10, (0, 1))[0]
    assert np.all(np.abs(counts - n / 10) < 5 * np.sqrt(n / 10))


def test_randint_range_and_dtype():
    g = rill.Generator(seed=5)
    r = rill.randint(-3, 5, (100_000,), dtype=rill.int32, device=GPU, generator=g).numpy()
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 4
    counts = np.bincount(r + 3)
    assert np.all(np.abs(counts - 12_500) < 600)
    big = rill.randint(0, 1 << 40, (10_000,), device=GPU, generator=g).numpy()
    assert big.dtype == np.int64 and big.min() >= 0 and big.max() < 1 << 40
    assert big.max() > 0.99 * (1 << 40)


def test_random_draws_are_reproducible_and_fresh():
    def draws(g):
        return [rill.randn(1000, device=GPU, generator=g).numpy(),
                rill.rand(3, 5, device=GPU, generator=g).numpy(),
                rill.randint(0, 100, (50,), device=GPU, generator=g).numpy()]
    first, again = draws(rill.Generator(seed=1)), draws(rill.Generator(seed=1))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    g = rill.Generator(seed=1)
    one, two = rill.rand(1000, device=GPU, generator=g), rill.rand(1000, device=GPU, generator=g)
    assert not np.array_equal(one.numpy(), two.numpy())  # each draw takes fresh counters
    g.manual_seed(1)
    np.testing.assert_array_equal(rill.rand(1000, device=GPU, generator=g).numpy(), one.numpy())
    other = rill.rand(1000, device=GPU, generator=rill.Generator(seed=2)).numpy()
    assert not np.array_equal(other, one.numpy())


# ---- check ---------------------------------------------------------------------------------


def test_check_raises_on_any_false_element():
    ok = np.ones((300, 500), bool)
    x = gpu(np.arange(3.0))
    same(rill.ops.checks.check(gpu(ok).T, x, "never"), np.arange(3.0))
    ok[299, 499] = False
    with pytest.raises(rill.ShapeError, match="one is off"):
        rill.ops.checks.check(gpu(ok), x, "one is off", error="ShapeError")
