"""The Tensor API: creation, attributes, conversions, operators, in-place forms, indexing.

Expected values come from NumPy on the same data.
"""
import operator

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import rill


def check(t, expected, dtype=None, exact=True):
    """t is a rill Tensor with expected's shape and values (and `dtype` when given)."""
    assert isinstance(t, rill.Tensor), type(t)
    expected = np.asarray(expected)
    assert t.shape == expected.shape and (dtype is None or t.dtype is dtype), (t.shape, t.dtype)
    if exact:
        assert_array_equal(t.numpy(), expected)
    else:
        assert_allclose(t.numpy(), expected, rtol=1e-6, atol=1e-6, equal_nan=True)


def np_key(key):
    """The same key with rill tensors replaced by NumPy arrays."""
    conv = lambda k: k.numpy() if isinstance(k, rill.Tensor) else k  # noqa: E731
    return tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)


# ---- creation ------------------------------------------------------------------------------

@pytest.mark.parametrize("data, dtype", [
    ([True, False], rill.bool_), ([1, 2, 3], rill.int64), ([[1.0, 2.0]], rill.float32),
    ([1, 2.5], rill.float32), ([True, 2], rill.int64), (3, rill.int64), (2.5, rill.float32),
    ([], rill.float32)])
def test_tensor_from_python_values(data, dtype):
    check(rill.tensor(data), np.array(data), dtype)


@pytest.mark.parametrize("npdtype", [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                                     np.float16, np.float32, np.float64])
def test_tensor_from_numpy_keeps_dtype(npdtype):
    a = np.arange(6).reshape(2, 3).astype(npdtype)
    t = rill.tensor(a)
    assert t.dtype is getattr(rill, np.dtype(npdtype).name) and t.numpy().dtype == npdtype
    check(t, a)
    assert rill.tensor(np.float64(2.0)).dtype is rill.float64


def test_tensor_dtype_and_device_arguments():
    for spec in (rill.float64, "float64", np.float64, "double"):
        check(rill.tensor([1, 2], dtype=spec), np.array([1.0, 2.0]), rill.float64)
    assert rill.tensor([1], dtype=float).dtype is rill.float32
    assert rill.tensor([1.0], dtype=int).dtype is rill.int64
    assert rill.tensor([0, 2], dtype=bool).tolist() == [False, True]
    t = rill.tensor([1.5, 2.5], device="cpu:1")
    assert str(t.device) == "cpu:1" and t.device is rill.device("cpu:1")
    assert rill.tensor(t).device is t.device  # a tensor's device is kept


def test_tensor_copies_and_as_tensor_shares():
    a = np.arange(4, dtype=np.int32)
    t = rill.tensor(a)
    a[0] = 99
    check(t, [0, 1, 2, 3], rill.int32)
    src = rill.tensor([1.0, 2.0])
    u = rill.tensor(src)
    assert u is not src and not np.shares_memory(u.numpy(), src.numpy())
    f = np.arange(4.0)
    shared = rill.as_tensor(f)
    assert shared.dtype is rill.float64 and np.shares_memory(shared.numpy(), f)
    converted = rill.as_tensor(f, dtype=rill.float32)
    assert not np.shares_memory(converted.numpy(), f)
    check(converted, f.astype(np.float32), rill.float32)
    assert rill.as_tensor(shared) is shared
    check(rill.as_tensor([1, 2]), [1, 2], rill.int64)


@pytest.mark.parametrize("fn, value", [(rill.zeros, 0.0), (rill.ones, 1.0)])
def test_zeros_ones(fn, value):
    for t in (fn(2, 3), fn((2, 3)), fn([2, 3])):
        check(t, np.full((2, 3), value, np.float32), rill.float32)
    check(fn(4, dtype=rill.int32), np.full(4, value, np.int32), rill.int32)
    check(fn(), np.array(value, np.float32))
    assert fn(0, 3).shape == (0, 3) and str(fn(2, device="cpu:1").device) == "cpu:1"


def test_full_empty_and_like_forms():
    check(rill.full((2, 2), 7), np.full((2, 2), 7), rill.int64)
    check(rill.full(3, 1.5), np.full(3, 1.5, np.float32), rill.float32)
    check(rill.full((2,), True), [True, True], rill.bool_)
    check(rill.full((2, 2), 7, dtype=rill.float64), np.full((2, 2), 7.0), rill.float64)
    for e, shape, dtype in [(rill.empty(2, 3), (2, 3), rill.float32),
                            (rill.empty((4,), dtype=rill.int8), (4,), rill.int8)]:
        assert e.shape == shape and e.dtype is dtype
    x = rill.tensor([[1, 2, 3]], dtype=rill.int32)
    check(rill.zeros_like(x), np.zeros((1, 3), np.int32), rill.int32)
    check(rill.ones_like(x, dtype=rill.float64), np.ones((1, 3)), rill.float64)
    check(rill.full_like(x, 4), np.full((1, 3), 4, np.int32), rill.int32)
    e = rill.empty_like(x)
    assert e.shape == (1, 3) and e.dtype is rill.int32
    y = rill.ones(2, device="cpu:1")
    assert str(rill.zeros_like(y).device) == "cpu:1"
    assert rill.ones_like(y, requires_grad=True).requires_grad and not x.requires_grad


@pytest.mark.parametrize("args", [(5,), (2, 9, 3), (5, 0, -2), (10, 0, -3), (3, 3), (0, -1), (-5,),
                                  (1, 2, 0.25), (0.0, 1.0, 0.1), (1.0, -1.0, -0.5), (2.5,)])
def test_arange(args):
    dtype = rill.int64 if all(isinstance(a, int) for a in args) else rill.float32
    check(rill.arange(*args), np.arange(*args, dtype=dtype.storage), dtype, exact=False)
    check(rill.arange(*args, dtype=rill.float64), np.arange(*args, dtype=np.float64), rill.float64)


def test_linspace_and_eye():
    check(rill.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32), rill.float32)
    check(rill.linspace(0, 1, 4, endpoint=False), [0, 0.25, 0.5, 0.75])
    check(rill.linspace(2, -2, 5, dtype=rill.float64), np.linspace(2, -2, 5), rill.float64)
    assert rill.linspace(0, 1, 1).tolist() == [0.0] and rill.linspace(0, 1, 0).shape == (0,)
    check(rill.eye(3), np.eye(3, dtype=np.float32), rill.float32)
    check(rill.eye(2, 4, k=1), np.eye(2, 4, 1, dtype=np.float32))
    check(rill.eye(3, 2, k=-1), np.eye(3, 2, -1, dtype=np.float32))
    check(rill.eye(3, k=-1, dtype=rill.int64), np.eye(3, k=-1, dtype=np.int64), rill.int64)
    check(rill.eye(2, k=5), np.zeros((2, 2), np.float32))


# ---- random --------------------------------------------------------------------------------

def test_random_shapes_and_dtypes():
    assert rill.rand(2, 3).shape == (2, 3) and rill.rand((2, 3)).dtype is rill.float32
    assert rill.randn(4).shape == (4,) and rill.randn(2, dtype=rill.float64).dtype is rill.float64
    assert rill.rand().shape == () and rill.rand(0).shape == (0,)
    r = rill.randint(0, 10, (3, 4))
    assert r.shape == (3, 4) and r.dtype is rill.int64
    assert rill.randint(5, shape=(3,), dtype=rill.int32).dtype is rill.int32
    assert rill.normal(2.0, 3.0, (2, 5)).shape == (2, 5)
    assert rill.uniform(-1, 1, shape=4).shape == (4,)
    assert rill.randn(3, dtype=rill.float16).dtype is rill.float16
    assert str(rill.rand(2, device="cpu:1").device) == "cpu:1"
    assert rill.rand(2, requires_grad=True).requires_grad


def test_random_value_ranges_and_moments():
    rill.manual_seed(1234)
    n = 100_000
    u = rill.rand(n).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.01
    v = rill.uniform(-2.0, 4.0, (n,)).numpy()
    assert v.min() >= -2.0 and v.max() < 4.0
    assert abs(v.mean() - 1.0) < 0.03 and abs(v.std() - 6 / np.sqrt(12)) < 0.03
    z = rill.randn(n).numpy()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    w = rill.normal(3.0, 2.0, (n,)).numpy()
    assert abs(w.mean() - 3.0) < 0.04 and abs(w.std() - 2.0) < 0.04
    assert set(np.unique(rill.randint(-3, 4, (10_000,)).numpy())) == set(range(-3, 4))
    assert set(np.unique(rill.randint(3, shape=(1000,)).numpy())) == {0, 1, 2}


@pytest.mark.parametrize("draw", [
    lambda g: rill.rand(5, generator=g), lambda g: rill.randn(2, 3, generator=g),
    lambda g: rill.randint(0, 100, (6,), generator=g),
    lambda g: rill.normal(1.0, 2.0, (4,), generator=g),
    lambda g: rill.uniform(-1.0, 1.0, (4,), generator=g)])
def test_random_reproducibility(draw):
    rill.manual_seed(7)
    a = draw(None).numpy()
    rill.manual_seed(7)
    assert_array_equal(draw(None).numpy(), a)
    rill.manual_seed(8)
    assert not np.array_equal(draw(None).numpy(), a)
    g1, g2 = rill.Generator(seed=7), rill.Generator(seed=7)
    assert_array_equal(draw(g1).numpy(), draw(g2).numpy())
    assert_array_equal(draw(g1).numpy(), draw(g2).numpy())  # the streams stay in step
    assert_array_equal(draw(rill.Generator(7)).numpy(), a)   # seed 7 either way


def test_explicit_generator_leaves_default_alone():
    rill.manual_seed(1)
    reference = rill.rand(4).numpy()
    rill.manual_seed(1)
    g = rill.Generator(seed=1)
    rill.randn(100, generator=g)
    assert_array_equal(rill.rand(4).numpy(), reference)
    state = g.get_state()
    first = rill.rand(3, generator=g).numpy()
    g.set_state(state)
    assert_array_equal(rill.rand(3, generator=g).numpy(), first)


# ---- attributes and conversions ------------------------------------------------------------

def test_attributes():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = rill.tensor(a)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24 and len(t) == 2
    assert t.dtype is rill.float32 and str(t.device) == "cpu"
    with pytest.raises(rill.ShapeError, match="at most 2 dimensions"):
        t.T  # noqa: B018 - the standard asks for an error; PyTorch deprecated reversing
    check(t[0].T, a[0].T)
    check(t.mT, np.swapaxes(a, -1, -2))
    check(rill.tensor([1.0, 2.0]).T, [1.0, 2.0])
    check(rill.tensor(3.0).T, np.float32(3.0))
    assert rill.tensor(3.0).ndim == 0 and rill.tensor(3.0).size == 1


def test_numpy_and_array_protocol():
    t = rill.tensor([1.0, 2.0, 3.0])
    view = t.numpy()
    assert isinstance(view, np.ndarray) and view.dtype == np.float32
    with pytest.raises(ValueError):
        view[0] = 5.0
    check(t, [1.0, 2.0, 3.0])
    assert rill.tensor([1.0], dtype=rill.bfloat16).numpy().dtype == np.float32
    i = rill.tensor([[1, 2], [3, 4]], dtype=rill.int32)
    a = np.asarray(i)
    assert isinstance(a, np.ndarray) and a.dtype == np.int32
    assert_array_equal(a, [[1, 2], [3, 4]])
    assert np.asarray(i, dtype=np.float64).dtype == np.float64
    assert_array_equal(np.array(i), a)


def test_asarray_cannot_change_the_tensor():
    t = rill.tensor([1.0, 2.0, 3.0])
    tail = t[1:]
    a = np.asarray(t)
    try:
        a[1] = 100.0
    except ValueError:  # a read-only array is fine too
        pass
    check(t, [1.0, 2.0, 3.0])
    check(tail, [2.0, 3.0])


def test_to_and_astype():
    t = rill.tensor([1.5, -2.5, 3.0])
    check(t.to(rill.int32), np.array([1.5, -2.5, 3.0]).astype(np.int32), rill.int32)
    check(t.to("float64"), t.numpy().astype(np.float64), rill.float64)
    check(t.astype(rill.int64), [1, -2, 3], rill.int64)
    check(t.astype(np.float16), t.numpy().astype(np.float16), rill.float16)
    moved = t.to("cpu:1")
    assert str(moved.device) == "cpu:1" and moved.dtype is rill.float32
    check(moved, t.numpy())
    back = moved.to("cpu")
    assert back.device is rill.device("cpu")
    check(back, t.numpy())
    assert t.to(rill.device("cpu")) is t
    w = rill.tensor([1.0, 2.0], requires_grad=True)  # the move is differentiable
    (w.to("cpu:1") ** 2).sum().backward()
    assert w.grad.device is rill.device("cpu")
    check(w.grad, [2.0, 4.0])


def test_repr():
    assert repr(rill.tensor([1.0, 2.0, 3.0])) == "tensor([1., 2., 3.])"
    assert repr(rill.tensor([1, 2])) == "tensor([1, 2])"
    r = repr(rill.tensor([1, 2], dtype=rill.int32))
    assert "[1, 2]" in r and "dtype=int32" in r
    assert "dtype=float64" in repr(rill.tensor([0.5], dtype=rill.float64))
    assert "device='cpu:1'" in repr(rill.tensor([1.0], device="cpu:1"))
    leaf = rill.tensor([1.0], requires_grad=True)
    assert "requires_grad=True" in repr(leaf)
    r = repr(leaf * 2)
    assert "2." in r and "grad_fn=multiply" in r
    assert "..." in repr(rill.arange(1000.0))


# ---- operators -----------------------------------------------------------------------------

A = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], np.float32)
B = np.array([[2.0, 3.0, -1.0], [1.0, 2.0, 4.0]], np.float32)
I = np.array([[5, -7, 3], [8, 9, -2]], np.int64)
J = np.array([[2, 3, -2], [3, 4, 5]], np.int64)
ARITH = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
         operator.mod, operator.pow]
name = lambda f: f.__name__  # noqa: E731


@pytest.mark.parametrize("op", ARITH, ids=name)
@pytest.mark.parametrize("scalar", [2, 2.0, -3.0])
def test_float_arithmetic(op, scalar):
    a, b = rill.tensor(A), rill.tensor(B)
    check(op(a, b), op(A, B), rill.float32, exact=False)
    check(op(a, scalar), op(A, scalar), rill.float32, exact=False)
    with np.errstate(invalid="ignore"):  # (-3.0) ** 1.5 is nan in both
        expected = op(scalar, A)
    check(op(scalar, a), expected, rill.float32, exact=False)


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.floordiv,
                                operator.mod, operator.and_, operator.or_, operator.xor], ids=name)
def test_int_arithmetic_and_bitwise(op):
    i, j = rill.tensor(I), rill.tensor(J)
    check(op(i, j), op(I, J), rill.int64)
    check(op(i, 3), op(I, 3), rill.int64)
    check(op(3, i), op(3, I), rill.int64)


def test_int_division_and_power():
    i, j = rill.tensor(I), rill.tensor(J)
    check(i / j, I / J, rill.float32, exact=False)
    check(i ** 2, I ** 2, rill.int64)
    check(i ** rill.tensor(np.abs(J)), I ** np.abs(J), rill.int64)
    check(2 ** rill.tensor(np.abs(J)), 2 ** np.abs(J), rill.int64)
    check(i * 0.5, I * 0.5, rill.float32)
    assert (rill.tensor([1, 2], dtype=rill.int32) * 2).dtype is rill.int32


@pytest.mark.parametrize("op", [operator.and_, operator.or_, operator.xor], ids=name)
def test_bool_bitwise(op):
    p, q = np.array([True, False, True, False]), np.array([True, True, False, False])
    check(op(rill.tensor(p), rill.tensor(q)), op(p, q), rill.bool_)
    check(op(rill.tensor(p), True), op(p, True), rill.bool_)
    check(op(False, rill.tensor(q)), op(False, q), rill.bool_)


@pytest.mark.parametrize("op", [operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
                                operator.ge], ids=name)
def test_comparisons(op):
    a, b, i = rill.tensor(A), rill.tensor(B), rill.tensor(I)
    check(op(a, b), op(A, B), rill.bool_)
    check(op(a, 1.5), op(A, 1.5), rill.bool_)
    check(op(1.5, a), op(1.5, A), rill.bool_)
    check(op(i, 3.5), op(I, 3.5), rill.bool_)
    check(op(B, a), op(B, A), rill.bool_)  # ndarray on the left


def test_unary_operators():
    a, i = rill.tensor(A), rill.tensor(I)
    check(-a, -A, rill.float32)
    check(+a, A, rill.float32)
    check(abs(a), np.abs(A), rill.float32)
    check(-i, -I, rill.int64)
    check(~i, ~I, rill.int64)
    check(~rill.tensor([True, False]), [False, True], rill.bool_)


def test_matmul():
    a, b = rill.tensor(A), rill.tensor(B)
    check(a @ b.T, A @ B.T, rill.float32, exact=False)
    check(a @ B.T, A @ B.T, exact=False)
    check(B.T @ a, B.T @ A, exact=False)
    v = np.array([1.0, -1.0], np.float32)
    check(rill.tensor(v) @ a, v @ A, exact=False)


@pytest.mark.parametrize("op", ARITH + [operator.lt, operator.eq], ids=name)
def test_numpy_array_on_the_left(op):
    check(op(B, rill.tensor(A)), op(B, A), exact=False)  # check() asserts a rill Tensor
    check(op(B.astype(np.float64), rill.tensor(A)), op(B.astype(np.float64), A), exact=False)


# ---- in-place forms ------------------------------------------------------------------------

@pytest.mark.parametrize("iop, op, x, y", [
    (operator.iadd, operator.add, A, B), (operator.isub, operator.sub, A, B),
    (operator.imul, operator.mul, A, B), (operator.itruediv, operator.truediv, A, B),
    (operator.ifloordiv, operator.floordiv, A, B), (operator.imod, operator.mod, A, B),
    (operator.ipow, operator.pow, A, B), (operator.iadd, operator.add, A, 2.5),
    (operator.imatmul, operator.matmul, A, np.eye(3, dtype=np.float32) * 2),
    (operator.iadd, operator.add, I, J), (operator.iand, operator.and_, I, J),
    (operator.ior, operator.or_, I, J), (operator.ixor, operator.xor, I, 6)],
    ids=lambda v: getattr(v, "__name__", None))
def test_in_place(iop, op, x, y):
    t = rill.tensor(x)
    row, flat, same = t[0], t.reshape(-1), t
    result = iop(t, rill.tensor(y) if isinstance(y, np.ndarray) else y)
    assert result is t and same is t
    check(t, op(x, y), getattr(rill, x.dtype.name), exact=False)
    check(row, x[0])  # value semantics: earlier views keep the old value
    check(flat, x.reshape(-1))


def test_in_place_on_views_and_items():
    a = rill.tensor(A)
    b = a[0]
    b += 1
    check(b, A[0] + 1)
    check(a[0], A[0] + 1)  # a view written in place writes its base, as NumPy and PyTorch
    check(a[1:], A[1:])
    a = rill.tensor(A)
    c = a[0]
    a += 1
    check(c, A[0])  # a write to the base does not reach a view taken before (values)
    a = rill.tensor(A)
    ref = A.copy()
    a[0] += 1  # getitem, iadd, setitem
    a[:, 1] *= 2
    a[[1, 1]] -= 3  # as in NumPy, the repeated row is written once
    ref[0] += 1
    ref[:, 1] *= 2
    ref[[1, 1]] -= 3
    check(a, ref)


def test_in_place_errors_and_grad():
    i = rill.tensor([1, 2])
    with pytest.raises(rill.DTypeError):
        i += 0.5
    with pytest.raises(rill.DTypeError):
        i /= 2
    check(i, [1, 2], rill.int64)
    a = rill.ones(2, 3)
    with pytest.raises(rill.ShapeError):
        a @= rill.ones(3, 4)
    check(a, np.ones((2, 3)))
    w = rill.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(rill.GradientError):
        w += 1
    check(w, [1.0, 2.0])
    with rill.no_grad():
        w -= 0.5
    check(w, [0.5, 1.5])
    assert w.requires_grad and w.is_leaf
    u = w * 3  # a non-leaf may change in place, and stays differentiable
    u *= w
    u.sum().backward()
    check(w.grad, [3.0, 9.0])


# ---- Python protocols and errors -----------------------------------------------------------

def test_len_iter_bool_item():
    a = rill.tensor(A)
    assert len(a) == 2
    rows = list(a)
    assert len(rows) == 2
    for r, expected in zip(rows, A):
        check(r, expected)
    assert [x.item() for x in rill.tensor([4, 5])] == [4, 5]
    assert bool(rill.tensor([1])) is True and bool(rill.tensor(0.0)) is False
    for many in (a, rill.tensor([True, True])):
        with pytest.raises(rill.ShapeError, match="ambiguous"):
            bool(many)
    assert rill.tensor(3.5).item() == 3.5 and type(rill.tensor(3).item()) is int
    assert type(rill.tensor([True]).item()) is bool
    assert rill.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert rill.tensor(2.0).tolist() == 2.0
    assert float(rill.tensor(2.5)) == 2.5 and int(rill.tensor([7])) == 7
    assert int(rill.tensor(-2.7)) == -2


@pytest.mark.parametrize("error, make", [
    (rill.DTypeError, lambda: rill.tensor(["a", "b"])),
    (rill.ArgumentError, lambda: rill.tensor([[1, 2], [3]])),
    (rill.ShapeError, lambda: rill.zeros(-1)),
    (rill.ShapeError, lambda: rill.ones(2.0)),
    (rill.ArgumentError, lambda: rill.arange(0, 5, 0)),
    (rill.DTypeError, lambda: rill.rand(3, dtype=rill.int32)),
    (rill.DTypeError, lambda: rill.randint(0, 5, (2,), dtype=rill.float32)),
    (rill.ArgumentError, lambda: rill.randint(3, 3)),
    (rill.ArgumentError, lambda: rill.normal(0.0, -1.0, (2,))),
    (rill.ArgumentError, lambda: rill.rand(3, generator=np.random.default_rng(0))),
    (rill.ShapeError, lambda: rill.tensor([1.0, 2.0]).mT),
    (rill.ShapeError, lambda: rill.tensor([1.0, 2.0]).item()),
    (rill.ShapeError, lambda: float(rill.tensor([1, 2]))),
    (rill.ShapeError, lambda: len(rill.tensor(1.0))),
    (rill.ShapeError, lambda: next(iter(rill.tensor(1.0)))),
    (rill.DeviceError, lambda: rill.tensor([1.0], device="cpu:1") + rill.tensor([1.0])),
    (rill.DTypeError, lambda: ~rill.tensor(A)),
    (rill.DTypeError, lambda: rill.tensor(A) & rill.tensor(A)),
    (rill.ShapeError, lambda: rill.tensor(A) @ rill.tensor(B))])
def test_errors(error, make):
    with pytest.raises(error):
        make()


# ---- indexing ------------------------------------------------------------------------------

X4 = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
S = slice(None)
KEYS = [
    1, -1, (0, -2), (1, 2, 3, 4), (-2, -3, -4, -5), slice(None, None, -1), (S, slice(3, 0, -2)),
    (slice(None, None, 3), slice(None, None, -3)), (np.int64(1), slice(-100, 100)),
    (S, S, slice(-1, None, -2)), (None, 1), (Ellipsis, 2), (1, Ellipsis, None, 0),
    (S, None, Ellipsis, 0), [1, 0], np.array([1, 1, 0]), (slice(1, None), [0, 2]),
    ([0, 1], S, [1, 2]), (Ellipsis, np.array([[0, 1], [3, 2]])), (S, [[0], [2]], S, [1, 3]),
    ([1], S, 0, [2, 3]), (rill.tensor([0, 1]), 0), (S, rill.tensor([2, -1, 2])), rill.tensor(1),
    (slice(rill.tensor(1), None),), (0, []), np.array([], dtype=np.int64), X4[..., 0, 0] > 10,
    (S, X4[0, :, :, 0] > 20), rill.tensor(X4[:, 0, 0, 0] > 0), (Ellipsis, X4[0, 0, 0] > 2),
    (X4[:, :, 0, 0] > 5, slice(None, None, -1)), ()]


@pytest.mark.parametrize("key", KEYS, ids=[f"key{i}" for i in range(len(KEYS))])
def test_getitem_matches_numpy(key):
    check(rill.tensor(X4)[key], X4[np_key(key)], rill.float32)


@pytest.mark.parametrize("key", [2, -3, (0, 3), (S, [0, 3]), (0, 0, 0, 5), [5], (1, 2, 3, 4, 0),
                                 np.array([True, False, True]),     # out of range
                                 1.5, True, "a", (Ellipsis, Ellipsis)])  # unsupported
def test_getitem_bad_keys(key):
    with pytest.raises(rill.IndexingError) as info:
        rill.tensor(X4)[key]
    assert isinstance(info.value, IndexError)


def _rand_slice(rng, n):
    step = None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3]))
    lo, hi = sorted(int(v) for v in rng.integers(-n - 1, n + 2, size=2))
    start, stop = (hi, lo) if (step or 1) < 0 else (lo, hi)  # mostly non-empty, may overrun
    return slice(None if rng.random() < 0.4 else start, None if rng.random() < 0.4 else stop, step)


def _rand_items(rng, shape, lo, hi, state):
    """Index items that consume axes lo..hi-1, with None scattered in."""
    items, ax = [], lo
    while ax < hi:
        if rng.random() < 0.15:
            items.append(None)
            continue
        kinds = ["int", "slice", "slice"] + (["array"] if state["mode"] == "array" else []) + \
            (["mask"] if state["mode"] == "mask" and not state["masked"] else [])
        kind, n = kinds[rng.integers(len(kinds))], shape[ax]
        if kind == "int":
            items.append(int(rng.integers(-n, n)))
        elif kind == "slice":
            items.append(_rand_slice(rng, n))
        elif kind == "array":  # all index arrays of a key share one (broadcastable) shape
            idx = rng.integers(-n, n, size=state["adv_shape"])
            items.append([idx.tolist(), idx, rill.tensor(idx)][rng.integers(3)])
        else:  # one mask over one or two axes
            span = int(rng.integers(1, min(2, hi - ax) + 1))
            mask = rng.random(shape[ax:ax + span]) < 0.5
            items.append(mask if rng.random() < 0.5 else rill.tensor(mask))
            state["masked"] = True
            ax += span - 1
        ax += 1
    return items


def random_key(rng, shape):
    ndim = len(shape)
    state = {"mode": rng.choice(["basic", "array", "array", "mask"]), "masked": False,
             "adv_shape": [(2,), (3,), (2, 2), (1, 3), ()][rng.integers(5)]}
    if rng.random() < 0.35:  # front items, Ellipsis, back items
        a = int(rng.integers(0, ndim + 1))
        b = int(rng.integers(a, ndim + 1))
        items = (_rand_items(rng, shape, 0, a, state) + [Ellipsis] +
                 _rand_items(rng, shape, b, ndim, state))
    else:
        items = _rand_items(rng, shape, 0, int(rng.integers(0, ndim + 1)), state)
    if rng.random() < 0.1:
        items.append(None)
    return items[0] if len(items) == 1 and rng.random() < 0.5 else tuple(items)


def test_random_keys_match_numpy(rng):
    for trial in range(200):
        shape = (3, 4, 5) if trial % 2 else (2, 3, 4, 5)
        data = rng.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)
        key = random_key(rng, shape)
        nkey = np_key(key)
        expected = data[nkey]
        x = rill.tensor(data, requires_grad=True)
        out = x[key]
        assert out.shape == expected.shape, (key, out.shape, expected.shape)
        assert_array_equal(out.numpy(), expected, err_msg=repr(key))
        # the gradient is NumPy's scatter-add of the cotangent
        c = rng.standard_normal(expected.shape).astype(np.float32)
        (out * rill.tensor(c)).sum().backward()
        g = np.zeros_like(data)
        np.add.at(g, nkey, c)
        assert_allclose(np.asarray(x.grad), g, rtol=1e-5, atol=1e-6, err_msg=repr(key))
        # and x[key] = v writes where NumPy writes
        y, ref = rill.tensor(data), data.copy()
        y[key] = rill.tensor(c)
        ref[nkey] = c
        assert_array_equal(y.numpy(), ref, err_msg=repr(key))


# ---- differentiable indexing ---------------------------------------------------------------

X3 = np.random.default_rng(1).standard_normal((4, 5, 3)).astype(np.float32)
GRAD_KEYS = [
    1, (S, [0, 0, 2]), [3, 3, 1, 3], (slice(1, None, 2), -1), X3[..., 0] > 0, (X3[:, 0, 0] > 0,),
    ([0, 0], S, [1, 1]), (Ellipsis, None, 2), (slice(None, None, -1), np.array([[1, 1], [4, 0]])),
    np.array([2, 2, 0]), rill.tensor([1, 1, 2]), (S, slice(4, None, -2), [2, 2, 0, 1, 2, 2])]


@pytest.mark.parametrize("key", GRAD_KEYS, ids=[f"key{i}" for i in range(len(GRAD_KEYS))])
def test_getitem_gradient_is_scatter_add(key, rng):
    x = rill.tensor(X3, requires_grad=True)
    nkey = np_key(key)
    c = rng.standard_normal(X3[nkey].shape).astype(np.float32)
    (x[key] * rill.tensor(c)).sum().backward()
    expected = np.zeros_like(X3)
    np.add.at(expected, nkey, c)
    assert_allclose(np.asarray(x.grad), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("idx", [rill.tensor([3, 0, 3]), [3, 0, 3], np.array([[3, 0], [1, 1]]),
                                 rill.tensor([2], dtype=rill.int32)],
                         ids=["tensor", "list", "2d", "int32"])
def test_row_gather_gives_sparse_rows(idx, rng):
    x = rill.tensor(X3, requires_grad=True)
    nidx = np_key(idx)
    c = rng.standard_normal(X3[nidx].shape).astype(np.float32)
    (x[idx] * rill.tensor(c)).sum().backward()
    g = x.grad
    assert isinstance(g, rill.SparseRows)
    assert g.shape == X3.shape and g.dtype is rill.float32
    assert_array_equal(g.indices.numpy(), np.asarray(nidx).reshape(-1))
    expected = np.zeros_like(X3)
    np.add.at(expected, nidx, c)
    check(g.to_dense(), expected, rill.float32, exact=False)


def test_sparse_and_dense_gradients_accumulate():
    x = rill.ones(4, 2, requires_grad=True)
    (x[rill.tensor([1, 1])].sum() + (x * 2).sum()).backward()
    assert_array_equal(np.asarray(x.grad), [[2, 2], [4, 4], [2, 2], [2, 2]])
    x[rill.tensor([3])].sum().backward()  # and across backward() calls
    assert_array_equal(np.asarray(x.grad), [[2, 2], [4, 4], [2, 2], [3, 3]])


def test_sparse_rows_coalesce_with_negative_indices():
    x = rill.tensor(X3, requires_grad=True)
    x[[-1, 3, 0]].sum().backward()
    c = x.grad.coalesce()
    expected = np.zeros_like(X3)
    np.add.at(expected, [-1, 3, 0], np.ones((3, 5, 3), np.float32))
    check(c.to_dense(), expected, exact=False)
    assert sorted(c.indices.tolist()) == [0, 3]  # row 3 named twice, once as -1


# ---- __setitem__ ---------------------------------------------------------------------------

def test_setitem_matches_numpy():
    ref = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    t = rill.tensor(ref)
    ident, before = id(t), t[0]
    steps = [
        (1, 7.0), ((S, 0), rill.tensor([1.0, 2.0, 3.0])), ((2, slice(1, 3)), [9.0, 8.0]),
        ((S, slice(1, 3)), rill.tensor([-1.0, -2.0])),  # broadcast over rows
        ([0, 2], rill.tensor([[10.0], [20.0]])),        # broadcast over columns
        ((S, -1), np.array([5.0, 6.0, 7.0])), ((Ellipsis, slice(None, None, -2)), 0.5),
        ((None, 1, 0), 42.0), (0, 3)]                   # an int into float32
    for key, value in steps:
        t[key] = value
        ref[np_key(key)] = np.asarray(value.numpy() if isinstance(value, rill.Tensor) else value)
        check(t, ref, rill.float32)
    assert id(t) == ident
    check(before, np.arange(4.0))  # value semantics


def test_setitem_with_masks():
    ref = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    t = rill.tensor(ref)
    t[t > 5] = -1.0
    ref[ref > 5] = -1.0
    check(t, ref)
    mask = np.array([[True, False, True, False]] * 3)
    t[rill.tensor(mask)] = rill.tensor(np.arange(6.0, dtype=np.float32))
    ref[mask] = np.arange(6.0)
    check(t, ref)
    rows = np.array([True, False, True])
    t[rows] = rill.tensor([100.0, 200.0, 300.0, 400.0])  # broadcast over the selected rows
    ref[rows] = [100.0, 200.0, 300.0, 400.0]
    check(t, ref)


def test_setitem_errors():
    t = rill.zeros(3, 4)
    with pytest.raises(rill.ShapeError):
        t[0] = rill.ones(3)
    with pytest.raises(rill.ShapeError):
        t[:, 1] = rill.ones(2)
    with pytest.raises(rill.IndexingError):
        t[3] = 1.0
    check(t, np.zeros((3, 4)))
    w = rill.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(rill.GradientError):
        w[0] = 5.0
    check(w, [1.0, 2.0])
    with rill.no_grad():
        w[0] = 5.0
    check(w, [5.0, 2.0])
    assert w.requires_grad and w.is_leaf


def test_setitem_is_differentiable():
    v = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    s = rill.tensor(4.0, requires_grad=True)
    u = v * 1
    u[1] = s
    (u * u).sum().backward()
    check(v.grad, [2.0, 0.0, 6.0])
    check(s.grad, np.float32(8.0))


def test_setitem_gradient_with_repeated_indices():
    x = rill.zeros(4)
    w = rill.tensor(1.0, requires_grad=True)
    x[[0, 0, 2]] = w  # x == [w, 0, w, 0]
    check(x, [1.0, 0.0, 1.0, 0.0])
    x.sum().backward()
    check(w.grad, np.float32(2.0))  # d(2w)/dw; rill gives 3


def test_comparison_with_none_or_text_is_identity_not_an_error():
    t = rill.tensor([1.0, 2.0])
    assert (t == None) is False  # noqa: E711
    assert (t != None) is True  # noqa: E711
    assert (t == "a") is False
    assert t in [t] and None not in [t]
    np.testing.assert_array_equal((t == 1.0).numpy(), [True, False])
