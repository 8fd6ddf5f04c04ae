"""uint16/32/64 and complex64/128: the Array API standard's promotion table, weak complex
scalars, casts, creation, printing, saving, and complex values and gradients (PyTorch's
convention: for a real loss L, z.grad = dL/dx + i dL/dy) against torch and finite
differences."""
import itertools

import numpy as np
import pytest
import torch

import rill
from rill import dtypes as dt

E = rill.ops.elementwise
U8, U16, U32, U64 = dt.uint8, dt.uint16, dt.uint32, dt.uint64
I8, I16, I32, I64 = dt.int8, dt.int16, dt.int32, dt.int64
F16, BF16, F32, F64 = dt.float16, dt.bfloat16, dt.float32, dt.float64
C64, C128 = dt.complex64, dt.complex128

# The standard's table (type_promotion.html), written out by hand; None where it is
# unspecified and rill refuses (uint64 with a signed integer).
STANDARD = {
    (U8, I8): I16, (U8, I16): I16, (U8, I32): I32, (U8, I64): I64,
    (U16, I8): I32, (U16, I16): I32, (U16, I32): I32, (U16, I64): I64,
    (U32, I8): I64, (U32, I16): I64, (U32, I32): I64, (U32, I64): I64,
    (U64, I8): None, (U64, I16): None, (U64, I32): None, (U64, I64): None,
    (U8, U16): U16, (U8, U32): U32, (U8, U64): U64, (U16, U32): U32, (U16, U64): U64,
    (U32, U64): U64,
    (F32, C64): C64, (F64, C64): C128, (F32, C128): C128, (F64, C128): C128,
    (C64, C128): C128, (F16, C64): C64, (BF16, C64): C64, (F16, C128): C128,
    (I64, C64): C64, (U64, C128): C128, (dt.bool_, C64): C64,
    (U64, F32): F32, (U32, F16): F16,
}


@pytest.mark.parametrize("pair", list(STANDARD), ids=lambda p: f"{p[0]}-{p[1]}")
def test_promotion_follows_the_standards_table(pair):
    a, b = pair
    expected = STANDARD[pair]
    x, y = rill.ones(2, dtype=a), rill.ones(2, dtype=b)
    if expected is None:
        with pytest.raises(rill.DTypeError, match="uint64.*cast one first"):
            rill.promote_types(a, b)
        with pytest.raises(rill.DTypeError, match="no common dtype"):
            x + y
        return
    assert rill.promote_types(a, b) is expected and rill.promote_types(b, a) is expected
    assert (x + y).dtype is expected and (y * x).dtype is expected


def test_table_is_total_symmetric_and_matches_numpy_where_specified():
    for a, b in itertools.product(dt.ALL, dt.ALL):
        ours = dt.PROMOTION_TABLE[a, b]
        assert ours is dt.PROMOTION_TABLE[b, a]
        if ours is None or BF16 in (a, b) or a.kind != b.kind and "b" in a.kind + b.kind:
            continue
        if {a.kind, b.kind} in ({"i", "u"},) or a.kind == b.kind or {a.kind, b.kind} == {"f", "c"}:
            assert ours.storage == np.promote_types(a.storage, b.storage), (a, b)


@pytest.mark.parametrize("tensor_dtype,scalar,expected", [
    (C64, 2.0, C64), (C64, 2, C64), (C64, 1j, C64), (C128, 1j, C128), (F32, 1j, C64),
    (F64, 1j, C128), (I32, 1j, C64), (dt.bool_, 1j, C64), (F16, 1j, C64), (U16, 3, U16),
    (U64, 3, U64),
])
def test_python_complex_scalars_are_weak(tensor_dtype, scalar, expected):
    x = rill.ones(3, dtype=tensor_dtype)
    assert (x * scalar).dtype is expected and (scalar + x).dtype is expected
    if tensor_dtype not in (U16, U64, F16):  # torch has complex32 for float16
        t = torch.ones(3, dtype=getattr(torch, tensor_dtype.name))
        assert (t * scalar).dtype == getattr(torch, expected.name)


def test_dtype_properties_names_and_finfo():
    assert C64.is_complex and not C64.is_floating and C64.is_inexact and C64.is_signed
    assert not U32.is_signed and U32.is_integer and U64.itemsize == 8 and C128.itemsize == 16
    assert rill.complex64 is C64 and rill.uint16 is U16 and rill.uint64 is U64
    assert dt.short_name(C128) == "c128" and dt.short_name(U16) == "u16"
    assert dt.as_dtype(np.complex128) is C128 and dt.as_dtype(complex) is C64
    assert dt.as_dtype("cdouble") is C128 and dt.as_dtype(np.uint32) is U32
    assert rill.finfo(C64).eps == np.finfo(np.float32).eps
    assert rill.finfo(C128).max == np.finfo(np.float64).max
    with pytest.raises(rill.DTypeError, match="iinfo"):
        rill.finfo(U16)


def test_creation_from_python_and_numpy_complex():
    x = rill.tensor([1 + 2j, 3.0])
    assert x.dtype is C64 and torch.tensor([1 + 2j, 3.0]).dtype == torch.complex64
    assert rill.tensor(np.array([1j])).dtype is C128
    assert rill.tensor(np.arange(3, dtype=np.uint32)).dtype is U32
    assert rill.tensor([1 + 0j], dtype=rill.float64).dtype is F64
    with pytest.raises(rill.DTypeError, match="imaginary parts would be dropped"):
        rill.tensor([1 + 2j], dtype=rill.float32)
    assert rill.zeros(2, dtype=C128).dtype is C128
    assert rill.ones(2, 2, dtype=U16).numpy().dtype == np.uint16


def test_casts_complex_to_real_are_refused_with_the_fix():
    z = rill.tensor([1 + 2j])
    with pytest.raises(rill.DTypeError, match=r"drop the imaginary part.*rill.real"):
        z.astype(rill.float32)
    with pytest.raises(rill.DTypeError, match="imaginary"):
        rill.cast(z, rill.int64)
    assert rill.cast(z, rill.bool).numpy().tolist() == [True]
    assert rill.cast(rill.tensor([1.5]), C128).numpy().tolist() == [1.5 + 0j]
    assert rill.cast(rill.tensor([7], dtype=U64), F64).numpy().tolist() == [7.0]


def test_repr_prints_complex_and_unsigned():
    assert repr(rill.tensor([1 + 2j])) == "tensor([1.+2.j])"
    assert "dtype=complex128" in repr(rill.tensor(np.array([1j])))
    assert "dtype=uint32" in repr(rill.tensor([1], dtype=U32))


def test_save_and_load_round_trip_new_dtypes(tmp_path):
    state = {"z": rill.tensor(np.array([1 + 2j, -3.5j])), "w": rill.tensor([1 - 1j]),
             "u": rill.tensor(np.array([2**63 + 5], dtype=np.uint64)),
             "h": rill.tensor([7], dtype=U16), "g": rill.tensor([1j]).requires_grad_()}
    rill.save(state, tmp_path / "c.rill")
    back = rill.load(tmp_path / "c.rill")
    for k, v in state.items():
        assert back[k].dtype is v.dtype
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())
    assert back["g"].requires_grad


def test_captured_graph_prints_and_agrees_with_eager():
    @rill.capture
    def f(z, w):
        return E.real(z * w).sum() + rill.abs(z).sum()

    z = rill.tensor(np.array([1 + 2j, -1j]))
    w = rill.tensor(np.array([0.5 - 1j, 2 + 2j]))
    expected = E.real(z * w).sum() + rill.abs(z).sum()
    np.testing.assert_allclose(f(z, w).numpy(), expected.numpy())
    printed = str(f.graph_for(z, w))
    assert "c128[2]" in printed and "real(" in printed


def test_ordering_and_real_only_ops_refuse_complex():
    z = rill.tensor([1 + 1j, 2.0])
    for fn, name in [(lambda: z < z, "less"), (lambda: rill.maximum(z, z), "maximum"),
                     (lambda: rill.floor(z), "floor"), (lambda: rill.max(z), "max"),
                     (lambda: rill.argmax(z), "argmax"), (lambda: rill.var(z, correction=0), "var"),
                     (lambda: rill.sigmoid(z), "sigmoid"), (lambda: rill.clip(z, 0, 1), "clip"),
                     (lambda: z // z, "floor_divide")]:
        with pytest.raises(rill.DTypeError, match="complex") as info:
            fn()
        assert info.value.op == name or name in str(info.value), name
    assert (z == z).numpy().all() and not (z != z).numpy().any()


# ---- complex forward against NumPy ---------------------------------------------------------

def _z(rng, shape=(3, 4)):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


UNARY_NP = ["exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "arcsin",
            "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "log2", "log10", "log1p",
            "expm1", "square", "reciprocal", "neg", "abs", "sign", "isnan", "isinf",
            "isfinite", "round", "conj", "real", "imag"]


@pytest.mark.parametrize("name", UNARY_NP)
@pytest.mark.parametrize("dtype", [C64, C128])
def test_complex_unary_matches_numpy(name, dtype, rng):
    a = _z(rng).astype(dtype.storage)
    got = getattr(E, name)(rill.tensor(a))
    ref = {"neg": np.negative, "conj": np.conjugate, "arcsinh": np.arcsinh,
           "arccosh": np.arccosh, "arctanh": np.arctanh}.get(name) or getattr(np, name)
    expected = np.asarray(ref(a))
    assert got.numpy().dtype == expected.dtype, name
    tol = 1e-5 if dtype is C64 else 1e-12
    np.testing.assert_allclose(got.numpy(), expected, rtol=tol, atol=tol)


def test_complex_reductions_and_matmul_match_numpy(rng):
    a, b = _z(rng), _z(rng, (4, 2))
    x, y = rill.tensor(a), rill.tensor(b)
    np.testing.assert_allclose((x @ y).numpy(), a @ b)
    np.testing.assert_allclose(rill.sum(x, axis=1).numpy(), a.sum(1))
    np.testing.assert_allclose(rill.mean(x).numpy(), a.mean())
    np.testing.assert_allclose(rill.prod(x, axis=0).numpy(), a.prod(0))
    np.testing.assert_allclose(rill.concat([x, x]).numpy(), np.concatenate([a, a]))
    np.testing.assert_allclose(x[1:, ::2].numpy(), a[1:, ::2])
    np.testing.assert_allclose(rill.where(x.real > 0 if False else E.real(x) > 0, x, 0).numpy(),
                               np.where(a.real > 0, a, 0))


# ---- complex gradients ---------------------------------------------------------------------

def _real_loss(out):
    """A real loss that sees both parts of a complex result (and real results as they are)."""
    if out.dtype.is_complex:
        return (E.real(out) * 0.7 + E.imag(out) * 1.3 + rill.abs(out) ** 2).sum()
    return (out * 0.9 + out * out).sum()


def _torch_loss(out):
    if out.is_complex():
        return (out.real * 0.7 + out.imag * 1.3 + out.abs() ** 2).sum()
    return (out * 0.9 + out * out).sum()


GRAD_CASES = {
    "mul": (lambda x, y: x * y, lambda x, y: x * y),
    "div": (lambda x, y: x / y, lambda x, y: x / y),
    "exp": (lambda x, y: rill.exp(x) + y, lambda x, y: x.exp() + y),
    "log": (lambda x, y: rill.log(x) * y, lambda x, y: x.log() * y),
    "sqrt": (lambda x, y: rill.sqrt(x) - y, lambda x, y: x.sqrt() - y),
    "sin": (lambda x, y: rill.sin(x * y), lambda x, y: (x * y).sin()),
    "abs": (lambda x, y: rill.abs(x) * rill.abs(y), lambda x, y: x.abs() * y.abs()),
    "real": (lambda x, y: E.real(x * y), lambda x, y: (x * y).real),
    "imag": (lambda x, y: E.imag(x) + E.real(y), lambda x, y: x.imag + y.real),
    "conj": (lambda x, y: E.conj(x) * y, lambda x, y: x.conj() * y),
    "sign": (lambda x, y: rill.sign(x) * y, lambda x, y: x.sgn() * y),
    "matmul": (lambda x, y: x @ rill.transpose(y), lambda x, y: x @ y.T),
    "sum": (lambda x, y: rill.sum(x * y, axis=1), lambda x, y: (x * y).sum(1)),
    "mean": (lambda x, y: rill.mean(x, axis=0) * rill.mean(y), lambda x, y: x.mean(0) * y.mean()),
    "getitem": (lambda x, y: x[1:, ::2] * y[:2, 1:3], lambda x, y: x[1:, ::2] * y[:2, 1:3]),
    "pow": (lambda x, y: x ** 2 + x ** y, lambda x, y: x ** 2 + x ** y),
    "prod": (lambda x, y: rill.prod(x, axis=1) + y[:, 0], lambda x, y: x.prod(1) + y[:, 0]),
    "mixed_real": (lambda x, y: E.real(x) * y, lambda x, y: x.real * y),
}


@pytest.mark.parametrize("name", list(GRAD_CASES))
def test_complex_gradients_match_torch(name, rng):
    fr, ft = GRAD_CASES[name]
    a, b = _z(rng), _z(rng)
    x, y = rill.tensor(a, requires_grad=True), rill.tensor(b, requires_grad=True)
    _real_loss(fr(x, y)).backward()
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    _torch_loss(ft(xt, yt)).backward()
    assert x.grad.dtype is C128
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.resolve_conj().numpy(), rtol=1e-9,
                               atol=1e-10)
    np.testing.assert_allclose(y.grad.numpy(), yt.grad.resolve_conj().numpy(), rtol=1e-9,
                               atol=1e-10)


def test_abs_squared_gives_two_z_as_torch():
    z = rill.tensor(np.array([1 + 2j, -3 + 0.5j]), requires_grad=True)
    (rill.abs(z) ** 2).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), 2 * z.detach().numpy())


@pytest.mark.parametrize("name", ["mul", "div", "log", "sin", "abs", "real", "imag", "conj",
                                  "sign", "matmul", "prod"])
def test_complex_gradients_match_finite_differences(name, rng):
    fr, _ = GRAD_CASES[name]
    a, b = _z(rng, (2, 4)), _z(rng, (2, 4))
    loss = lambda a_: float(_real_loss(fr(rill.tensor(a_), rill.tensor(b))).numpy())  # noqa: E731
    x = rill.tensor(a, requires_grad=True)
    _real_loss(fr(x, rill.tensor(b))).backward()
    h, fd = 1e-6, np.zeros_like(a)
    for i in np.ndindex(a.shape):
        for direction in (1, 1j):  # dL/dx + i dL/dy
            step = np.zeros_like(a)
            step[i] = h * direction
            fd[i] += direction * (loss(a + step) - loss(a - step)) / (2 * h)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-5, atol=1e-6)


def test_real_input_promoted_to_complex_gets_a_real_gradient(rng):
    a, b = rng.standard_normal(3), _z(rng, (3,))
    x = rill.tensor(a, requires_grad=True)
    xt = torch.tensor(a, requires_grad=True)
    _real_loss(x * rill.tensor(b)).backward()
    _torch_loss(xt * torch.tensor(b)).backward()
    assert x.grad.dtype is F64
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
    x.grad = None
    _real_loss(rill.cast(x, C128) * 1j).backward()
    assert x.grad.dtype is F64


def test_captured_complex_gradient_equals_eager(rng):
    a, b = _z(rng), _z(rng)

    def step(x, y):
        return rill.grad(lambda x_: _real_loss(rill.exp(x_) * E.conj(y) / (1 + rill.abs(x_))))(x)

    x, y = rill.tensor(a), rill.tensor(b)
    eager = step(x, y)
    captured = rill.capture(step)(x, y)
    np.testing.assert_allclose(captured.numpy(), eager.numpy(), rtol=1e-12)
    xt = torch.tensor(a, requires_grad=True)
    _torch_loss(xt.exp() * torch.tensor(b).conj() / (1 + xt.abs())).backward()
    np.testing.assert_allclose(eager.numpy(), xt.grad.numpy(), rtol=1e-9)


def test_complex_gradient_through_scan_matches_eager_loop(rng):
    a = _z(rng, (3,))
    w = rill.tensor(_z(rng, (3,)))

    def looped(x):
        for _ in range(3):
            x = x * w + 1j
        return _real_loss(x)

    def scanned(x):
        carry, _ = rill.scan(lambda c, _x: (c * w + 1j, None), x, None, length=3)
        return _real_loss(carry)

    g1 = rill.grad(looped)(rill.tensor(a))
    g2 = rill.grad(scanned)(rill.tensor(a))
    np.testing.assert_allclose(g2.numpy(), g1.numpy(), rtol=1e-12)


def test_random_ops_for_complex():
    with pytest.raises(rill.DTypeError, match="rand and randn make complex"):
        rill.normal(0.0, 1.0, (3,), dtype=C64)
    u = rill.rand(500, dtype=C128).numpy()
    assert u.dtype == np.complex128 and 0 <= u.real.min() and u.imag.max() < 1
    assert u.imag.std() > 0.2  # the parts are drawn independently
    z = rill.randn(4000, dtype=C64)
    assert z.dtype is C64
    # torch's convention: each part has variance 1/2, so E|z|^2 = 1
    assert abs(float((rill.abs(z) ** 2).mean().numpy()) - 1.0) < 0.1
