"""Array API 2024.12 functions (not elementwise, linalg or fft): data-type functions, the
inspection namespace, asarray/from_dlpack, manipulation functions, sorting and reductions.

Written from the standard's text; values are checked against NumPy 2 in float64 where NumPy
does what the standard says, against the text where it does not (meshgrid and
broadcast_arrays return lists in 2024.12; sort's descending ties). Gradients of the
differentiable functions against central finite differences.
"""
import inspect
import warnings

import numpy as np
import pytest

import rill
from rill.namespace_info import __array_namespace_info__
from rill.ops import data_types as D
from rill.ops import reduce as R
from rill.ops.conversion import asarray, from_dlpack
from rill.ops.indexing import take, take_along_axis
from rill.ops.shape import (broadcast_arrays, broadcast_shapes, concat, diff, expand_dims,
                            flip, meshgrid, repeat, reshape, roll, squeeze, stack, tile,
                            unstack)
from rill.ops.sorting import argsort, sort, topk

P, K, V = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.KEYWORD_ONLY,
           inspect.Parameter.VAR_POSITIONAL)


def t64(a):
    return rill.tensor(np.asarray(a, dtype=np.float64))


def same(r, expected, dtype=None):
    """rill tensor r equals the NumPy array `expected` in values, shape (and dtype)."""
    got = r.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0, equal_nan=True)
    if dtype is not None:
        assert r.dtype is dtype, (r.dtype, dtype)


def finite_differences(f, x: np.ndarray, eps=1e-6):
    """d sum(f(x) * w) / dx for a fixed random weighting w of f's (list of) outputs."""
    def scalar(a):
        outs = f(t64(a))
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return sum(float((o.numpy() * _weights(o.shape, i)).sum()) for i, o in enumerate(outs))
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (scalar(up) - scalar(down)) / (2 * eps)
    return grad


def _weights(shape, i):
    return np.random.default_rng(100 + i).standard_normal(shape)


def rill_gradient(f, x: np.ndarray):
    xt = rill.tensor(x, requires_grad=True)
    outs = f(xt)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    loss = sum((o * t64(_weights(o.shape, i))).sum() for i, o in enumerate(outs))
    loss.backward()
    return xt.grad.numpy()


def check_gradient(f, x):
    np.testing.assert_allclose(rill_gradient(f, x), finite_differences(f, x), rtol=1e-6,
                               atol=1e-8)


# ---- signatures: positional-only and keyword-only as the standard writes them -------------

SIGNATURES = {
    D.astype: [("x", P), ("dtype", P), ("copy", K), ("device", K)],
    D.can_cast: [("from_", P), ("to", P)],
    D.iinfo: [("type", P)],
    D.finfo: [("type", P)],
    asarray: [("obj", P), ("dtype", K), ("device", K), ("copy", K)],
    from_dlpack: [("x", P), ("device", K), ("copy", K)],
    unstack: [("x", P), ("axis", K)],
    diff: [("x", P), ("axis", K), ("n", K), ("prepend", K), ("append", K)],
    meshgrid: [("arrays", V), ("indexing", inspect.Parameter.KEYWORD_ONLY)],
}


@pytest.mark.parametrize("fn", list(SIGNATURES), ids=lambda f: f.__name__)
def test_signature(fn):
    params = [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]
    assert params == SIGNATURES[fn]


def test_standard_keywords_of_existing_functions():
    x = t64(np.arange(6.0).reshape(2, 3))
    assert reshape(x, shape=(3, 2), copy=False).shape == (3, 2)
    assert sort(x, axis=0, descending=True, stable=True).shape == (2, 3)
    assert argsort(x, axis=-1, stable=False).dtype is rill.int64
    assert take_along_axis(x, rill.tensor([[0], [2]])).shape == (2, 1)  # axis=-1 by default
    assert concat((x, x), axis=None).shape == (12,)
    assert stack([x, x], axis=-1).shape == (2, 3, 2)
    assert squeeze(reshape(x, (1, 2, 3)), axis=0).shape == (2, 3)
    assert rill.zeros_like(x, dtype=rill.int8, device="cpu").dtype is rill.int8
    assert rill.empty_like(x, dtype=rill.float32, device=rill.device("cpu")).shape == (2, 3)


# ---- data-type functions -------------------------------------------------------------------

KIND_NAMES = ["bool", "signed integer", "unsigned integer", "integral", "real floating",
              "complex floating", "numeric"]
KIND_LETTERS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
                "real floating": "f", "complex floating": "c", "numeric": "iufc"}


@pytest.mark.parametrize("d", rill.dtypes.ALL, ids=str)
def test_isdtype_covers_every_dtype(d):
    for kind in KIND_NAMES:
        assert D.isdtype(d, kind) == (d.kind in KIND_LETTERS[kind]), (d, kind)
    assert D.isdtype(d, d)
    assert D.isdtype(d, ("bool", "numeric"))
    assert D.isdtype(d, ("bool", d))
    assert not D.isdtype(d, ())


def test_isdtype_names_the_standard_examples():
    assert D.isdtype(rill.float16, "real floating") and D.isdtype(rill.bfloat16, "real floating")
    assert D.isdtype(rill.uint8, "unsigned integer") and not D.isdtype(rill.uint8, "signed integer")
    assert not D.isdtype(rill.bool, "numeric") and not D.isdtype(rill.int8, rill.int16)


def test_isdtype_bad_input():
    with pytest.raises(rill.ArgumentError, match="unknown dtype kind"):
        D.isdtype(rill.int8, "integer")
    with pytest.raises(rill.DTypeError, match="rill dtype"):
        D.isdtype("int8", "integral")
    with pytest.raises(rill.ArgumentError, match="tuple"):
        D.isdtype(rill.int8, (("integral",),))


def _np(d):
    return None if d is rill.bfloat16 else d.storage


@pytest.mark.parametrize("a", rill.dtypes.ALL, ids=str)
def test_can_cast_within_kinds_follows_numpy(a):
    for b in rill.dtypes.ALL:
        if a is rill.bfloat16 or b is rill.bfloat16:
            continue
        if a.kind == b.kind or (a.kind, b.kind) in {("i", "u"), ("u", "i"), ("f", "c")}:
            assert D.can_cast(a, b) == np.can_cast(_np(a), _np(b)), (a, b)
    assert D.can_cast(rill.ones(2, dtype=a), a)


def test_can_cast_rules():
    assert D.can_cast(rill.bool, rill.int8) and D.can_cast(rill.int16, rill.float32)
    assert not D.can_cast(rill.float32, rill.int64) and not D.can_cast(rill.int8, rill.uint8)
    assert not D.can_cast(rill.float16, rill.bfloat16) and not D.can_cast(rill.int8, rill.bool)
    with pytest.raises(rill.DTypeError, match="to must be a dtype"):
        D.can_cast(rill.int8, rill.ones(1))
    with pytest.raises(rill.DTypeError, match="from_"):
        D.can_cast(3, rill.int8)


def test_result_type_tensors_dtypes_and_weak_scalars():
    i8 = rill.ones(2, dtype=rill.int8)
    assert D.result_type(i8, rill.uint8) is rill.int16
    assert D.result_type(rill.float32, rill.float64, 1.0) is rill.float64
    assert D.result_type(i8, 1) is rill.int8           # a weak int keeps the int kind's dtype
    assert D.result_type(i8, 1.5) is rill.float32      # a float scalar lifts ints to default
    assert D.result_type(rill.bool, True) is rill.bool
    assert D.result_type(rill.float16, 2) is rill.float16
    for a in rill.dtypes.ALL:
        for b in rill.dtypes.ALL:
            try:
                expected = rill.promote_types(a, b)
            except rill.DTypeError:  # pairs the table refuses are refused here too
                with pytest.raises(rill.DTypeError, match="no common dtype"):
                    D.result_type(a, rill.ones(1, dtype=b))
                continue
            assert D.result_type(a, b) is expected
            assert D.result_type(rill.zeros(1, dtype=a), b, rill.zeros(1, dtype=b)) is expected
    with pytest.raises(rill.ArgumentError, match="at least one"):
        D.result_type(1, 2.0)
    with pytest.raises(rill.DTypeError):
        D.result_type(rill.int8, "no such dtype")


@pytest.mark.parametrize("d", [d for d in rill.dtypes.ALL if d.kind in "iu"], ids=str)
def test_iinfo(d):
    info = D.iinfo(d)
    ref = np.iinfo(d.storage)
    assert (info.bits, info.min, info.max) == (ref.bits, ref.min, ref.max)
    assert info.dtype is d and type(info.max) is int
    assert D.iinfo(rill.zeros(1, dtype=d)).dtype is d


@pytest.mark.parametrize("d", [d for d in rill.dtypes.ALL if d.kind in "fc"], ids=str)
def test_finfo(d):
    info = D.finfo(d)
    if d is rill.bfloat16:
        assert (info.bits, info.eps, info.smallest_normal) == (16, 2.0 ** -7, 2.0 ** -126)
        assert info.max == -info.min == float.fromhex("0x1.fep127")
        assert info.dtype is rill.bfloat16
        return
    ref = np.finfo(d.storage)
    assert (info.bits, info.eps, info.max, info.min, info.smallest_normal) == \
        (ref.bits, float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal))
    assert isinstance(info.dtype, rill.DType) and info.dtype.kind == "f"
    assert info.dtype.storage == ref.dtype  # a complex dtype's info describes its parts
    assert type(info.eps) is float and D.finfo(rill.ones(1, dtype=d)).bits == info.bits


def test_info_bad_dtypes():
    with pytest.raises(rill.DTypeError, match="iinfo is for integer"):
        D.iinfo(rill.float32)
    with pytest.raises(rill.DTypeError, match="finfo is for floating"):
        D.finfo(rill.int32)
    with pytest.raises(rill.DTypeError, match="dtype or a tensor"):
        D.finfo(1.0)


def test_astype():
    x = t64([1.7, -1.7, 0.0])
    y = D.astype(x, rill.int32)
    same(y, [1, -1, 0], rill.int32)
    same(D.astype(x, rill.bool), [True, True, False], rill.bool)
    same(D.astype(rill.tensor([True, False]), rill.float64), [1.0, 0.0], rill.float64)
    assert D.astype(x, rill.float64, copy=False) is x
    copied = D.astype(x, rill.float64)
    assert copied is not x and copied.dtype is rill.float64
    assert D.astype(x, "float32", device="cpu:1").device == rill.device("cpu:1")
    w = rill.tensor([1.0, 2.0], requires_grad=True, dtype=rill.float64)
    (D.astype(w, rill.float64) * 3).sum().backward()  # copy=True keeps the gradient
    same(w.grad, [3.0, 3.0])
    with pytest.raises(rill.DTypeError):
        D.astype(x, "complex256")
    with pytest.raises(rill.ArgumentError, match="copy"):
        D.astype(x, rill.int8, copy=None)


# ---- the inspection namespace --------------------------------------------------------------

STANDARD = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float32", "float64", "complex64", "complex128"}


def test_namespace_info():
    info = __array_namespace_info__()
    caps = info.capabilities()
    assert caps == {"boolean indexing": True, "data-dependent shapes": True,
                    "max dimensions": 64}
    assert info.default_device() == rill.device("cpu")
    defaults = info.default_dtypes()
    assert defaults["real floating"] is rill.float32 and defaults["integral"] is rill.int64
    assert defaults["indexing"] is rill.int64
    assert set(defaults) == {"real floating", "complex floating", "integral", "indexing"}
    everything = info.dtypes()
    assert set(everything) == {d.name for d in rill.dtypes.ALL} & STANDARD
    assert all(everything[n] is getattr(rill, n if n != "bool" else "bool_") for n in everything)
    assert "float16" not in everything and "bfloat16" not in everything
    assert set(info.dtypes(kind="integral")) == {d.name for d in rill.dtypes.ALL
                                                  if d.kind in "iu"}
    assert set(info.dtypes(kind=("bool", "real floating"))) == {"bool", "float32", "float64"}
    assert info.dtypes(device="cpu", kind="bool") == {"bool": rill.bool}
    assert info.default_device() in info.devices()
    with pytest.raises(rill.ArgumentError, match="unknown dtype kind"):
        info.dtypes(kind="floats")
    with pytest.raises(rill.DeviceError):
        info.default_dtypes(device="tpu")


# ---- asarray and from_dlpack ---------------------------------------------------------------


def test_asarray_infers_the_standard_defaults():
    assert asarray(True).dtype is rill.bool and asarray([True, 1]).dtype is rill.int64
    assert asarray([[1, 2], [3, 4]]).dtype is rill.int64
    assert asarray([1, 2.5]).dtype is rill.float32 and asarray(2.5).shape == ()
    same(asarray([[1, 2]], dtype=rill.float64), [[1.0, 2.0]], rill.float64)
    assert asarray(np.arange(3, dtype=np.int16)).dtype is rill.int16  # arrays keep theirs


def test_asarray_copy_semantics():
    a = np.arange(6.0).reshape(2, 3)
    shared = asarray(a)
    assert np.shares_memory(shared.numpy(), a)
    assert np.shares_memory(asarray(a, copy=False).numpy(), a)
    assert not np.shares_memory(asarray(a, copy=True).numpy(), a)
    x = t64([1.0, 2.0])
    assert asarray(x) is x and asarray(x, copy=False) is x
    assert asarray(x, copy=True) is not x
    assert asarray(x, dtype=rill.float32).dtype is rill.float32
    for bad in (lambda: asarray([1, 2], copy=False),
                lambda: asarray(a, dtype=rill.float32, copy=False),
                lambda: asarray(x, dtype=rill.int64, copy=False),
                lambda: asarray(x, device="cpu:1", copy=False)):
        with pytest.raises(rill.ArgumentError, match="copy=False") as e:
            bad()
        assert isinstance(e.value, ValueError)  # what the standard asks for


def test_asarray_buffer_protocol_array_and_dlpack_objects():
    import array
    same(asarray(array.array("d", [1.0, 2.0])), [1.0, 2.0], rill.float64)
    same(asarray(bytearray(b"\x01\x02")), [1, 2], rill.uint8)
    same(asarray(memoryview(np.arange(3, dtype=np.int32))), [0, 1, 2], rill.int32)

    class HasArray:
        def __array__(self, dtype=None, copy=None):
            return np.array([[1.0, 2.0]])
    same(asarray(HasArray()), [[1.0, 2.0]], rill.float64)
    torch = pytest.importorskip("torch")
    t = torch.arange(4, dtype=torch.float64)
    r = asarray(t)
    same(r, [0.0, 1.0, 2.0, 3.0], rill.float64)
    assert np.shares_memory(r.numpy(), t.numpy())  # through __dlpack__, no copy
    with pytest.raises(rill.ArgumentError, match="cannot make a tensor"):
        asarray(object())
    with pytest.raises(rill.ArgumentError, match="copy must be"):
        asarray([1], copy="yes")


def test_from_dlpack():
    a = np.arange(6.0).reshape(2, 3)
    r = from_dlpack(a)
    same(r, a, rill.float64)
    assert np.shares_memory(r.numpy(), a)
    assert not np.shares_memory(from_dlpack(a, copy=True).numpy(), a)
    assert from_dlpack(a, device="cpu:1").device == rill.device("cpu:1")
    with pytest.raises(rill.ArgumentError, match="copy=False"):
        from_dlpack(a, device="cpu:1", copy=False)
    torch = pytest.importorskip("torch")
    t = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).t()  # strided
    same(from_dlpack(t), [[1, 3], [2, 4]], rill.int32)
    x = t64([1.0])
    assert from_dlpack(x) is x
    with pytest.raises(rill.ArgumentError, match="__dlpack__"):
        from_dlpack([1, 2])


# ---- manipulation --------------------------------------------------------------------------


def test_broadcast_shapes_and_arrays():
    assert broadcast_shapes((3, 1), (4,), ()) == (3, 4)
    assert broadcast_shapes() == () and broadcast_shapes((0, 1), (5,)) == (0, 5)
    assert broadcast_shapes((2, 3)) == (2, 3)
    a, b = np.arange(3.0).reshape(3, 1), np.arange(4, dtype=np.int32)
    out = broadcast_arrays(rill.tensor(a), rill.tensor(b))
    assert isinstance(out, list) and len(out) == 2
    for got, ref in zip(out, np.broadcast_arrays(a, b)):
        same(got, ref)
    assert out[1].dtype is rill.int32  # each keeps its dtype
    assert broadcast_arrays() == []
    with pytest.raises(rill.ShapeError, match="cannot broadcast"):
        broadcast_shapes((2,), (3,))
    with pytest.raises(rill.ShapeError):
        broadcast_arrays(rill.ones(2), rill.ones(3))
    with pytest.raises(rill.ShapeError):
        broadcast_shapes((2, -1))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_meshgrid_against_numpy(indexing, n):
    vectors = [np.arange(k + 2, dtype=np.float64) * (k + 1) for k in range(n)]
    got = meshgrid(*map(rill.tensor, vectors), indexing=indexing)
    ref = np.meshgrid(*vectors, indexing=indexing)
    assert isinstance(got, list) and len(got) == n
    for g, r in zip(got, ref):
        same(g, r, rill.float64)


def test_meshgrid_bad_input():
    with pytest.raises(rill.ShapeError, match="1-d"):
        meshgrid(rill.ones(2, 2))
    with pytest.raises(rill.ArgumentError, match="indexing"):
        meshgrid(rill.ones(2), indexing="ji")


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_unstack(axis):
    a = np.arange(24.0).reshape(2, 3, 4)
    got = unstack(t64(a), axis=axis)
    ref = [np.take(a, i, axis=axis) for i in range(a.shape[axis])]
    assert isinstance(got, tuple) and len(got) == len(ref)
    for g, r in zip(got, ref):
        same(g, r)


def test_unstack_edges():
    assert unstack(rill.zeros(0, 3)) == ()
    assert [t.shape for t in unstack(rill.zeros(2, 0), axis=0)] == [(0,), (0,)]
    with pytest.raises(rill.ShapeError, match="out of range"):
        unstack(rill.zeros(2, 3), axis=2)
    with pytest.raises(rill.ShapeError, match="0 dimensions"):
        unstack(rill.tensor(1.0))


DIFF_CASES = [
    dict(), dict(axis=0), dict(n=2), dict(n=0), dict(n=3, axis=0), dict(n=5),
    dict(prepend=0.0), dict(append=-1.5, axis=0, n=2),
    dict(prepend=np.ones((3, 2)), append=np.zeros((3, 1))),
]


@pytest.mark.parametrize("kw", DIFF_CASES, ids=str)
def test_diff_against_numpy(kw):
    a = np.random.default_rng(1).standard_normal((3, 4))
    rill_kw = {k: (t64(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    same(diff(t64(a), **rill_kw), np.diff(a, **kw), rill.float64)


def test_diff_dtypes_and_errors():
    same(diff(rill.tensor([1, 4, 9, 16])), [3, 5, 7], rill.int64)
    same(diff(rill.tensor([True, False, False, True])), [True, False, True], rill.bool)
    same(diff(rill.zeros(0)), np.zeros(0))
    with pytest.raises(rill.ShapeError, match="0-d"):
        diff(rill.tensor(1.0))
    with pytest.raises(rill.ArgumentError, match="n must be"):
        diff(rill.ones(3), n=-1)
    with pytest.raises(rill.ShapeError):
        diff(rill.ones(3, 2), prepend=rill.ones(3, 3), axis=0)
    with pytest.raises(rill.ShapeError):
        diff(rill.ones(3), axis=1)


def test_concat_stack_expand_dims():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0).reshape(2, 2)
    same(concat([t64(a), t64(b)], axis=-1), np.concatenate([a, b], axis=-1))
    same(concat([t64(a), t64(b)], axis=None), np.concatenate([a, b], axis=None))
    same(concat([t64(a), rill.tensor(np.int32(5)).reshape(1)], axis=None),
         np.concatenate([a.ravel(), [5.0]]), rill.float64)
    same(stack([t64(a), t64(a)], axis=-1), np.stack([a, a], axis=-1))
    x = t64(a)
    for axis in (-3, -2, -1, 0, 1, 2):
        same(expand_dims(x, axis=axis), np.expand_dims(a, axis))
    with pytest.raises(rill.IndexingError) as e:
        expand_dims(x, axis=3)
    assert isinstance(e.value, IndexError)  # what the standard says an implementation raises
    with pytest.raises(rill.IndexingError):
        expand_dims(x, axis=-4)
    with pytest.raises(rill.ShapeError):
        concat([t64(a), t64(b)], axis=0)


def test_reshape_copy_and_forms():
    x = t64(np.arange(6.0))
    assert reshape(x, (6,)) is x and reshape(x, (6,), copy=True) is not x
    same(reshape(x, shape=(2, -1)), np.arange(6.0).reshape(2, 3))
    same(reshape(x, 3, 2), np.arange(6.0).reshape(3, 2))
    with pytest.raises(rill.ShapeError):
        reshape(x, (4, -1))
    with pytest.raises(rill.ArgumentError, match="copy"):
        reshape(x, (6,), copy=1)


def test_repeat_tile_roll_flip_take():
    a = np.arange(6.0).reshape(2, 3)
    x = t64(a)
    same(repeat(x, 2), np.repeat(a, 2))
    same(repeat(x, rill.tensor([1, 0, 2]), axis=1), np.repeat(a, [1, 0, 2], axis=1))
    same(repeat(x, rill.tensor([3]), axis=0), np.repeat(a, 3, axis=0))  # (1,) broadcasts
    same(tile(x, (2,)), np.tile(a, (2,)))
    same(tile(x, (2, 1, 2)), np.tile(a, (2, 1, 2)))
    same(roll(x, 1), np.roll(a, 1))
    same(roll(x, (1, -1), axis=(0, 1)), np.roll(a, (1, -1), axis=(0, 1)))
    same(roll(x, 2, axis=(0, 1)), np.roll(a, 2, axis=(0, 1)))
    same(flip(x), np.flip(a))
    same(flip(x, axis=(-1,)), np.flip(a, axis=-1))
    same(take(x, rill.tensor([2, -1, 0]), axis=1), np.take(a, [2, -1, 0], axis=1))
    same(take(t64([5.0, 6.0]), rill.tensor([1, -2])), [6.0, 5.0])
    same(take_along_axis(x, rill.tensor([[0, -1], [1, 1]]), axis=1),
         np.take_along_axis(a, np.array([[0, 2], [1, 1]]), axis=1))
    with pytest.raises(rill.ShapeError, match="repeats"):
        repeat(x, rill.tensor([1, 2]), axis=1)


# ---- sorting: stable in both directions ----------------------------------------------------


def _stable_order(a, descending):
    """The standard's stable order, by Python's stable sort on (value, position)."""
    key = (lambda i: (np.isnan(a[i]), a[i])) if not descending else \
        (lambda i: (not np.isnan(a[i]), -a[i] if not np.isnan(a[i]) else 0))
    return sorted(range(len(a)), key=key)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_both_ways(descending):
    a = np.array([2.0, 1.0, 2.0, np.nan, 1.0, 3.0, 2.0, np.nan, -0.0, 0.0])
    order = _stable_order(a, descending)
    same(argsort(t64(a), descending=descending), order, rill.int64)
    same(sort(t64(a), descending=descending, stable=True), a[order])
    ints = np.array([[3, 1, 3, 1, 2], [0, 0, 0, 0, 0]])
    idx = argsort(rill.tensor(ints), axis=1, descending=descending).numpy()
    for row, got in zip(ints, idx):
        ref = sorted(range(5), key=lambda i: -row[i] if descending else row[i])
        assert got.tolist() == ref


def test_topk_ties_keep_lower_index_first():
    values, indices = topk(rill.tensor([1, 5, 3, 5, 5, 0]), 3)
    assert values.tolist() == [5, 5, 5] and indices.tolist() == [1, 3, 4]
    values, indices = topk(rill.tensor([[2.0, 0.0, 2.0, 0.0]]), 2, largest=False)
    assert indices.tolist() == [[1, 3]]
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).integers(0, 3, (4, 9)).astype(np.float64)
    got = argsort(t64(a), axis=1, descending=True).numpy()
    ref = torch.sort(torch.tensor(a), dim=1, descending=True, stable=True).indices.numpy()
    np.testing.assert_array_equal(got, ref)


def test_sort_bad_input():
    with pytest.raises(rill.ArgumentError, match="stable"):
        sort(rill.ones(3), stable="yes")
    with pytest.raises(rill.ShapeError, match="0-d"):
        argsort(rill.tensor(1.0))


# ---- reductions the standard fixes ---------------------------------------------------------


def test_reductions_over_empty_axes():
    e = rill.zeros(0, 3, dtype=rill.float64)
    same(R.sum(e, axis=0), np.zeros(3))
    same(R.prod(e, axis=0), np.ones(3))
    with warnings.catch_warnings():  # NumPy's kernel says "Mean of empty slice"
        warnings.simplefilter("ignore", RuntimeWarning)
        same(R.mean(e, axis=0), np.full(3, np.nan))
    same(R.max(e, axis=1), np.zeros(0))  # no empty reduction there: an empty result
    assert R.all(e).item() is True and R.any(e).item() is False
    for fn in (R.max, R.min):
        with pytest.raises(rill.ShapeError, match="empty axis"):
            fn(e, axis=0)
        with pytest.raises(rill.ShapeError, match="empty axis"):
            fn(e)


def test_reduction_keyword_forms_match_numpy():
    a = np.random.default_rng(2).standard_normal((3, 4))
    x = t64(a)
    same(R.max(x, axis=(0, 1), keepdims=True), a.max(axis=(0, 1), keepdims=True))
    same(R.min(x, axis=-1), a.min(axis=-1))
    same(R.mean(x, axis=0, keepdims=True), a.mean(axis=0, keepdims=True))
    same(R.prod(x, axis=1), a.prod(axis=1))
    same(R.sum(x, axis=None, keepdims=True), a.sum(keepdims=True))
    same(R.std(x, axis=1, correction=1, keepdims=False), a.std(axis=1, ddof=1))
    same(R.var(x, axis=(0, 1), correction=0.5), a.var(ddof=0.5))
    same(R.all(x > 0, axis=0), (a > 0).all(axis=0))
    same(R.any(x > 0, axis=1, keepdims=True), (a > 0).any(axis=1, keepdims=True))
    for d in (rill.bool, rill.int8, rill.int32):  # small signed ints and bool sum in int64
        assert R.sum(rill.ones(2, dtype=d)).dtype is rill.int64
        assert R.prod(rill.ones(2, dtype=d)).dtype is rill.int64
    assert R.cumulative_sum(rill.ones(2, dtype=rill.int8)).dtype is rill.int64


def test_clip_and_where_with_tensors_and_scalars():
    a = np.array([1.0, 5.0, 9.0])
    x = t64(a)
    same(rill.clip(x, min=t64([2.0, 6.0, 2.0]), max=t64(7.0)),
         np.clip(a, [2.0, 6.0, 2.0], 7.0), rill.float64)
    same(rill.clip(x, max=4), np.clip(a, None, 4))
    assert rill.clip(rill.tensor([1, 5], dtype=rill.int8), 2, 3).dtype is rill.int8
    c = rill.tensor([True, False, True])
    same(rill.where(c, x, 0.5), np.where([True, False, True], a, 0.5), rill.float64)
    assert rill.where(c, rill.ones(3, dtype=rill.int8), 5).dtype is rill.int8


# ---- gradients against finite differences --------------------------------------------------


def test_gradients_against_finite_differences():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 4))
    check_gradient(lambda x: diff(x, axis=1, n=2), a)
    check_gradient(lambda x: diff(x, axis=0, prepend=x[:1] * 2.0, append=3.0), a)
    check_gradient(lambda x: unstack(x, axis=1), a)
    check_gradient(lambda x: broadcast_arrays(x[:, :1], x[:1], x), a)
    check_gradient(lambda x: meshgrid(x[0], x[1, :3], x[2, :2]), a)
    check_gradient(lambda x: meshgrid(x[0], x[1, :2], indexing="ij"), a)
    idx = rill.tensor([[0, 3, 3], [-1, 1, 2], [2, 2, 0]])
    check_gradient(lambda x: take_along_axis(x, idx, axis=1), a)
    check_gradient(lambda x: take_along_axis(x, rill.tensor([[0], [2], [1]]), axis=0), a[:, :1])
    check_gradient(lambda x: sort(x, axis=0, descending=True), a)
    check_gradient(lambda x: concat([x, x[:1]], axis=None), a)


# ---- captured graphs agree with eager ------------------------------------------------------


def test_capture_agrees_with_eager():
    def f(x, y):
        gx, gy = meshgrid(x[0], y)
        parts = unstack(x, axis=1)
        bx, by = broadcast_arrays(x[:, :1], y)
        return (diff(x, n=2, append=x[:, :1] * 2.0), gx * gy, parts[2],
                bx + by, concat([x, y[None, :4]], axis=None), sort(x, axis=0, descending=True),
                D.astype(x, rill.float32))

    x, y = t64(np.random.default_rng(6).standard_normal((3, 4))), t64(np.arange(5.0))
    captured = rill.capture(f)
    for got, ref in zip(captured(x, y), f(x, y)):
        np.testing.assert_array_equal(got.numpy(), ref.numpy())
        assert got.dtype is ref.dtype


# ---- complex dtypes ------------------------------------------------------------------------

needs_complex = pytest.mark.skipif(not hasattr(rill.dtypes, "complex128"),
                                   reason="complex dtypes not in this build")


@needs_complex
def test_complex_creation_and_casts():
    assert asarray(1j).dtype is rill.complex64 and asarray([1, 2.5j]).dtype is rill.complex64
    z = np.array([1 + 2j, 0j, -3j])
    same(from_dlpack(z), z, rill.complex128)
    same(D.astype(rill.tensor(z), rill.bool), [True, False, True], rill.bool)
    same(D.astype(rill.tensor([True, False]), rill.complex64), [1 + 0j, 0j], rill.complex64)
    assert D.astype(rill.tensor(z), rill.complex64).dtype is rill.complex64
    with pytest.raises(rill.DTypeError, match="rill.real"):
        D.astype(rill.tensor(z), rill.float64)
    assert D.result_type(rill.float64, 1j) is rill.complex128
    assert D.result_type(rill.float32, rill.complex64) is rill.complex64
    assert D.can_cast(rill.float32, rill.complex64) and not D.can_cast(rill.complex64,
                                                                       rill.float64)
    assert D.finfo(rill.complex64).dtype is rill.float32
    assert D.isdtype(rill.complex64, "complex floating") and D.isdtype(rill.complex128,
                                                                       "numeric")
