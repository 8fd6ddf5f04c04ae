"""The Array API standard's elementwise functions: every special case the standard lists
(NaN, infinities, signed zeros), a table per function written from the standard's text, for
real float32/float64 and complex inputs; the new functions' values against NumPy and torch,
their gradients against torch, under capture, on the gpu device, and their errors."""
import math

import numpy as np
import pytest
import torch

import rill

# inf - inf and friends are the point here; NumPy's add/multiply warn (rill keeps errstate
# off its hottest kernels).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")

E = rill.ops.elementwise
inf, nan, pi = math.inf, math.nan, math.pi
NEG_NAN = float(np.copysign(np.nan, -1.0))

# ---- real special cases: function -> [(inputs, expected)] ---------------------------------
# Expected values are compared bit for bit where they are zeros (the sign matters) and with
# NaN equal to NaN; "x" in a row is any value the case allows, chosen here.

UNARY = {
    "abs": [(nan, nan), (-0.0, 0.0), (-inf, inf), (-2.5, 2.5)],
    "acos": [(nan, nan), (1.5, nan), (-1.5, nan), (1.0, 0.0)],
    "acosh": [(nan, nan), (0.5, nan), (1.0, 0.0), (inf, inf)],
    "asin": [(nan, nan), (1.5, nan), (-1.5, nan), (0.0, 0.0), (-0.0, -0.0)],
    "asinh": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf)],
    "atan": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, pi / 2), (-inf, -pi / 2)],
    "atanh": [(nan, nan), (-1.5, nan), (1.5, nan), (-1.0, -inf), (1.0, inf), (0.0, 0.0),
              (-0.0, -0.0)],
    "ceil": [(inf, inf), (-inf, -inf), (0.0, 0.0), (-0.0, -0.0), (nan, nan), (-0.5, -0.0)],
    "floor": [(inf, inf), (-inf, -inf), (0.0, 0.0), (-0.0, -0.0), (nan, nan), (0.5, 0.0)],
    "trunc": [(inf, inf), (-inf, -inf), (0.0, 0.0), (-0.0, -0.0), (nan, nan), (-0.7, -0.0)],
    "round": [(inf, inf), (-inf, -inf), (0.0, 0.0), (-0.0, -0.0), (nan, nan), (0.5, 0.0),
              (1.5, 2.0), (2.5, 2.0), (-0.5, -0.0), (-2.5, -2.0), (3.5, 4.0)],
    "cos": [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, nan), (-inf, nan)],
    "cosh": [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, inf)],
    "exp": [(nan, nan), (0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0)],
    "expm1": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -1.0)],
    "log": [(nan, nan), (-1.0, nan), (0.0, -inf), (-0.0, -inf), (1.0, 0.0), (inf, inf)],
    "log1p": [(nan, nan), (-1.5, nan), (-1.0, -inf), (0.0, 0.0), (-0.0, -0.0), (inf, inf)],
    "log2": [(nan, nan), (-1.0, nan), (0.0, -inf), (-0.0, -inf), (1.0, 0.0), (inf, inf)],
    "log10": [(nan, nan), (-1.0, nan), (0.0, -inf), (-0.0, -inf), (1.0, 0.0), (inf, inf)],
    "negative": [(0.0, -0.0), (-0.0, 0.0), (inf, -inf), (nan, nan)],
    "positive": [(-0.0, -0.0), (-inf, -inf), (nan, nan)],
    "reciprocal": [(nan, nan), (0.0, inf), (-0.0, -inf), (inf, 0.0), (-inf, -0.0)],
    "sign": [(-2.0, -1.0), (0.0, 0.0), (-0.0, 0.0), (3.0, 1.0), (nan, nan), (-inf, -1.0)],
    "signbit": [(0.0, False), (-0.0, True), (inf, False), (-inf, True), (2.0, False),
                (-2.0, True), (nan, False), (NEG_NAN, True)],
    "sin": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan)],
    "sinh": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -inf)],
    "sqrt": [(nan, nan), (-1.0, nan), (0.0, 0.0), (-0.0, -0.0), (inf, inf)],
    "square": [(nan, nan), (-0.0, 0.0), (-inf, inf)],
    "tan": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, nan), (-inf, nan)],
    "tanh": [(nan, nan), (0.0, 0.0), (-0.0, -0.0), (inf, 1.0), (-inf, -1.0)],
    "isnan": [(nan, True), (inf, False), (0.0, False)],
    "isinf": [(inf, True), (-inf, True), (nan, False), (1.0, False)],
    "isfinite": [(inf, False), (nan, False), (-0.0, True), (1e30, True)],
}

BINARY = {
    "add": [((nan, 1.0), nan), ((inf, -inf), nan), ((inf, inf), inf), ((-inf, -inf), -inf),
            ((-0.0, -0.0), -0.0), ((-0.0, 0.0), 0.0), ((0.0, 0.0), 0.0), ((5.0, inf), inf),
            ((-inf, 5.0), -inf), ((3.0, -3.0), 0.0)],
    "subtract": [((inf, inf), nan), ((-0.0, 0.0), -0.0), ((0.0, -0.0), 0.0), ((2.0, 2.0), 0.0)],
    "multiply": [((nan, 1.0), nan), ((inf, 0.0), nan), ((-0.0, inf), nan), ((inf, -inf), -inf),
                 ((-inf, -2.0), inf), ((-0.0, 3.0), -0.0), ((0.0, -3.0), -0.0)],
    "divide": [((nan, 1.0), nan), ((inf, -inf), nan), ((0.0, -0.0), nan), ((0.0, 2.0), 0.0),
               ((-0.0, 2.0), -0.0), ((0.0, -2.0), -0.0), ((-0.0, -2.0), 0.0),
               ((2.0, 0.0), inf), ((2.0, -0.0), -inf), ((-2.0, 0.0), -inf),
               ((-2.0, -0.0), inf), ((inf, 2.0), inf), ((inf, -2.0), -inf),
               ((-inf, 2.0), -inf), ((-inf, -2.0), inf), ((2.0, inf), 0.0),
               ((2.0, -inf), -0.0), ((-2.0, inf), -0.0), ((-2.0, -inf), 0.0)],
    # Where the standard lets a library follow Python (its notes on inf // finite and on a
    # finite number over an infinity of the other sign), rill does, as NumPy and PyTorch do.
    "floor_divide": [((nan, 1.0), nan), ((inf, -inf), nan), ((0.0, -0.0), nan),
                     ((0.0, 2.0), 0.0), ((-0.0, 2.0), -0.0), ((0.0, -2.0), -0.0),
                     ((-0.0, -2.0), 0.0), ((2.0, 0.0), inf), ((2.0, -0.0), -inf),
                     ((-2.0, 0.0), -inf), ((-2.0, -0.0), inf), ((inf, 2.0), nan),
                     ((inf, -2.0), nan), ((-inf, 2.0), nan), ((-inf, -2.0), nan),
                     ((2.0, inf), 0.0), ((2.0, -inf), -1.0), ((-2.0, inf), -1.0),
                     ((-1.63, inf), -1.0), ((-2.0, -inf), 0.0), ((7.0, 2.0), 3.0),
                     ((-7.0, 2.0), -4.0), ((7.5, -2.0), -4.0), ((1e308, 1e-308), inf)],
    "remainder": [((nan, 1.0), nan), ((inf, 2.0), nan), ((-inf, 2.0), nan), ((0.0, 0.0), nan),
                  ((0.0, 2.0), 0.0), ((-0.0, 2.0), 0.0), ((0.0, -2.0), -0.0),
                  ((-0.0, -2.0), -0.0), ((2.0, 0.0), nan), ((-2.0, -0.0), nan),
                  ((2.0, inf), 2.0), ((2.0, -inf), -inf), ((-2.0, inf), inf),
                  ((-2.0, -inf), -2.0), ((-7.0, 2.0), 1.0)],
    "pow": [((nan, 0.0), 1.0), ((nan, -0.0), 1.0), ((1.0, nan), 1.0), ((nan, 2.0), nan),
            ((2.0, nan), nan), ((2.0, inf), inf), ((2.0, -inf), 0.0), ((-1.0, inf), 1.0),
            ((1.0, -inf), 1.0), ((0.5, inf), 0.0), ((0.5, -inf), inf), ((inf, 2.0), inf),
            ((inf, -2.0), 0.0), ((-inf, 3.0), -inf), ((-inf, 2.0), inf), ((-inf, -3.0), -0.0),
            ((-inf, -2.0), 0.0), ((0.0, 2.0), 0.0), ((0.0, -2.0), inf), ((-0.0, 3.0), -0.0),
            ((-0.0, 2.0), 0.0), ((-0.0, -3.0), -inf), ((-0.0, -2.0), inf),
            ((-2.0, 0.5), nan)],
    "atan2": [((nan, 1.0), nan), ((1.0, 0.0), pi / 2), ((1.0, -0.0), pi / 2),
              ((0.0, 1.0), 0.0), ((0.0, 0.0), 0.0), ((0.0, -0.0), pi), ((0.0, -1.0), pi),
              ((-0.0, 1.0), -0.0), ((-0.0, 0.0), -0.0), ((-0.0, -0.0), -pi),
              ((-0.0, -1.0), -pi), ((-1.0, 0.0), -pi / 2), ((1.0, inf), 0.0),
              ((1.0, -inf), pi), ((-1.0, inf), -0.0), ((-1.0, -inf), -pi), ((inf, 1.0), pi / 2),
              ((-inf, 1.0), -pi / 2), ((inf, inf), pi / 4), ((inf, -inf), 3 * pi / 4),
              ((-inf, inf), -pi / 4), ((-inf, -inf), -3 * pi / 4)],
    "hypot": [((inf, nan), inf), ((nan, -inf), inf), ((nan, 1.0), nan), ((0.0, -0.0), 0.0),
              ((3.0, 4.0), 5.0)],
    "logaddexp": [((nan, 1.0), nan), ((1.0, nan), nan), ((inf, 1.0), inf), ((1.0, inf), inf),
                  ((inf, -inf), inf), ((-inf, -inf), -inf)],
    "copysign": [((2.0, -1.0), -2.0), ((2.0, -0.0), -2.0), ((-2.0, 0.0), 2.0),
                 ((-2.0, 1.0), 2.0), ((2.0, NEG_NAN), -2.0), ((-2.0, nan), 2.0),
                 ((nan, -1.0), NEG_NAN)],
    "nextafter": [((nan, 1.0), nan), ((1.0, nan), nan), ((-0.0, 0.0), 0.0), ((0.0, -0.0), -0.0),
                  ((2.0, 2.0), 2.0)],
    "maximum": [((nan, 1.0), nan), ((1.0, nan), nan)],
    "minimum": [((nan, 1.0), nan), ((1.0, nan), nan)],
    "equal": [((nan, nan), False), ((0.0, -0.0), True), ((inf, inf), True)],
    "not_equal": [((nan, nan), True), ((0.0, -0.0), False)],
    "less": [((nan, 1.0), False), ((-0.0, 0.0), False)],
    "greater_equal": [((nan, nan), False), ((-0.0, 0.0), True)],
}

NAMES = {"acos": E.acos, "acosh": E.acosh, "asin": E.asin, "asinh": E.asinh, "atan": E.atan,
         "atanh": E.atanh, "atan2": E.atan2, "pow": E.pow, "negative": E.negative,
         "positive": E.positive}


def fn(name):
    return NAMES.get(name) or getattr(E, name)


def same(got, expected) -> bool:
    """Equal as the standard means: NaN is NaN, zeros carry their sign."""
    if isinstance(expected, bool):
        return bool(got) is expected
    if math.isnan(expected):
        return math.isnan(got)
    if expected == 0:
        return got == 0 and math.copysign(1, got) == math.copysign(1, expected)
    return math.isclose(got, expected, rel_tol=1e-6)


def unary_cases():
    return [(name, x, out) for name, rows in UNARY.items() for x, out in rows]


def binary_cases():
    return [(name, a, b, out) for name, rows in BINARY.items() for (a, b), out in rows]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_unary_special_case(dtype):
    failures = []
    for name, rows in UNARY.items():
        xs = rill.tensor(np.array([x for x, _ in rows]), dtype=dtype)
        got = fn(name)(xs).numpy()
        for (x, expected), g in zip(rows, got):
            if not same(g.item(), expected):
                failures.append(f"{name}({x}) = {g.item()}, the standard says {expected}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_binary_special_case(dtype):
    failures = []
    for name, rows in BINARY.items():
        a = rill.tensor(np.array([r[0][0] for r in rows]), dtype=dtype)
        b = rill.tensor(np.array([r[0][1] for r in rows]), dtype=dtype)
        got = fn(name)(a, b).numpy()
        for ((x, y), expected), g in zip(rows, got):
            if not same(g.item(), expected):
                failures.append(f"{name}({x}, {y}) = {g.item()}, the standard says {expected}")
    assert not failures, "\n".join(failures)


def test_special_cases_hold_under_capture():
    rows = BINARY["floor_divide"]
    a = rill.tensor(np.array([r[0][0] for r in rows]))
    b = rill.tensor(np.array([r[0][1] for r in rows]))
    eager = rill.ops.elementwise.floor_divide(a, b).numpy()
    captured = rill.capture(lambda x, y: x // y)(a, b).numpy()
    np.testing.assert_array_equal(np.signbit(captured), np.signbit(eager))
    np.testing.assert_array_equal(captured, eager)


# ---- complex special cases -----------------------------------------------------------------

C = complex
COMPLEX = {
    "abs": [(C(inf, 1), inf), (C(-inf, nan), inf), (C(1, -inf), inf), (C(nan, inf), inf),
            (C(nan, 1), nan), (C(nan, nan), nan), (C(-0.0, 0.0), 0.0), (C(3, 4), 5.0)],
    "exp": [(C(0.0, 0.0), C(1, 0)), (C(-0.0, 0.0), C(1, 0)), (C(1, inf), C(nan, nan)),
            (C(1, nan), C(nan, nan)), (C(inf, 0.0), C(inf, 0)), (C(-inf, 1), C(0, 0)),
            (C(nan, 0.0), C(nan, 0.0)), (C(nan, 1), C(nan, nan))],
    "log": [(C(-0.0, 0.0), C(-inf, pi)), (C(0.0, 0.0), C(-inf, 0.0)), (C(1, inf), C(inf, pi / 2)),
            (C(1, nan), C(nan, nan)), (C(-inf, 1), C(inf, pi)), (C(inf, 1), C(inf, 0.0)),
            (C(-inf, inf), C(inf, 3 * pi / 4)), (C(inf, inf), C(inf, pi / 4)),
            (C(inf, nan), C(inf, nan)), (C(nan, inf), C(inf, nan)), (C(nan, nan), C(nan, nan))],
    "sqrt": [(C(0.0, 0.0), C(0.0, 0.0)), (C(-0.0, 0.0), C(0.0, 0.0)), (C(1, inf), C(inf, inf)),
             (C(nan, inf), C(inf, inf)), (C(-inf, 1), C(0.0, inf)), (C(inf, 1), C(inf, 0.0)),
             (C(inf, nan), C(inf, nan)), (C(nan, nan), C(nan, nan))],
    "sign": [(C(0.0, 0.0), C(0.0, 0.0)), (C(-0.0, -0.0), C(0.0, 0.0)), (C(nan, 1), C(nan, nan)),
             (C(1, nan), C(nan, nan)), (C(3, -4), C(0.6, -0.8))],
    "conj": [(C(1, 2), C(1, -2)), (C(0.0, 0.0), C(0.0, -0.0)), (C(inf, -inf), C(inf, inf))],
    "round": [(C(0.5, 1.5), C(0, 2)), (C(2.5, -0.5), C(2, -0.0)), (C(nan, inf), C(nan, inf))],
    "isnan": [(C(nan, 0), True), (C(0, nan), True), (C(inf, nan), True), (C(inf, 0), False)],
    "isinf": [(C(inf, 0), True), (C(0, -inf), True), (C(inf, nan), True), (C(nan, 1), False)],
    "isfinite": [(C(1, 2), True), (C(inf, 0), False), (C(0, nan), False)],
    "real": [(C(-0.0, 3), -0.0), (C(nan, 1), nan)],
    "imag": [(C(3, -0.0), -0.0), (C(1, inf), inf)],
}


def same_complex(got, expected) -> bool:
    if not isinstance(expected, complex):
        return same(got.real if isinstance(got, complex) else got, expected)
    return same(got.real, expected.real) and same(got.imag, expected.imag)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_every_complex_special_case(dtype):
    failures = []
    for name, rows in COMPLEX.items():
        z = rill.tensor(np.array([x for x, _ in rows], dtype=dtype))
        got = fn(name)(z).numpy()
        for (x, expected), g in zip(rows, got):
            value = g.item()
            ok = value is expected if isinstance(expected, bool) else same_complex(value, expected)
            if not ok:
                failures.append(f"{name}({x}) = {value}, the standard says {expected}")
    assert not failures, "\n".join(failures)


def test_complex_equality_and_nan():
    z = rill.tensor(np.array([C(1, 2), C(nan, 0), C(0.0, -0.0)]))
    w = rill.tensor(np.array([C(1, 2), C(nan, 0), C(-0.0, 0.0)]))
    assert E.equal(z, w).numpy().tolist() == [True, False, True]
    assert E.not_equal(z, w).numpy().tolist() == [False, True, False]


# ---- the new functions: values against NumPy / torch, gradients, capture, gpu, errors ------

NEW_UNARY = {  # name: (numpy, torch, domain)
    "acosh": (np.arccosh, torch.acosh, (1.1, 4.0)), "asinh": (np.arcsinh, torch.asinh, (-3, 3)),
    "atanh": (np.arctanh, torch.atanh, (-0.9, 0.9)), "log10": (np.log10, torch.log10, (0.1, 5)),
    "acos": (np.arccos, torch.acos, (-0.9, 0.9)), "asin": (np.arcsin, torch.asin, (-0.9, 0.9)),
    "atan": (np.arctan, torch.atan, (-3, 3)),
}
NEW_BINARY = {
    "logaddexp": (np.logaddexp, torch.logaddexp), "hypot": (np.hypot, torch.hypot),
    "copysign": (np.copysign, torch.copysign), "atan2": (np.arctan2, torch.atan2),
}


@pytest.mark.parametrize("name", list(NEW_UNARY))
def test_new_unary_values_and_gradients(name, rng):
    ref, tref, (lo, hi) = NEW_UNARY[name]
    a = rng.uniform(lo, hi, (3, 4))
    x = rill.tensor(a, requires_grad=True)
    out = fn(name)(x)
    np.testing.assert_allclose(out.numpy(), ref(a), rtol=1e-12)
    assert fn(name)(rill.tensor(a, dtype=rill.float32)).dtype is rill.float32
    assert fn(name)(rill.tensor([1, 2, 3])).dtype is rill.float32 if name not in (
        "acosh", "atanh", "acos", "asin") else True
    out.sum().backward()
    xt = torch.tensor(a, requires_grad=True)
    tref(xt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
    captured = rill.capture(lambda t: fn(name)(t))(rill.tensor(a))
    np.testing.assert_allclose(captured.numpy(), ref(a), rtol=1e-12)


@pytest.mark.parametrize("name", list(NEW_BINARY))
def test_new_binary_values_and_gradients(name, rng):
    ref, tref = NEW_BINARY[name]
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    x, y = rill.tensor(a, requires_grad=True), rill.tensor(b, requires_grad=True)
    out = fn(name)(x, y)
    np.testing.assert_allclose(out.numpy(), ref(a, b), rtol=1e-12)
    (out * out).sum().backward()
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (tref(xt, yt) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    if name != "copysign":  # torch gives copysign no gradient in y; rill gives zeros
        np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-10, atol=1e-12)
    else:
        assert not y.grad.numpy().any()
    assert fn(name)(x.detach().astype(rill.float32), 2).dtype is rill.float32


def test_integer_functions_against_numpy():
    a = np.array([-8, -1, 0, 3, 127], dtype=np.int16)
    s = np.array([0, 1, 2, 3, 20], dtype=np.int16)
    x, y = rill.tensor(a), rill.tensor(s)
    np.testing.assert_array_equal(E.bitwise_left_shift(x, y).numpy(), np.left_shift(a, s))
    np.testing.assert_array_equal(E.bitwise_right_shift(x, y).numpy(), np.right_shift(a, s))
    np.testing.assert_array_equal(E.bitwise_invert(x).numpy(), np.invert(a))
    assert E.bitwise_invert(rill.tensor([True, False])).numpy().tolist() == [False, True]
    u = rill.tensor(np.array([1, 2], dtype=np.uint32))
    assert E.bitwise_left_shift(u, 31).numpy().tolist() == [2**31, 0]
    assert E.signbit(rill.tensor([-3, 4])).numpy().tolist() == [True, False]


def test_nextafter_steps_one_ulp():
    x = rill.tensor(np.array([1.0, 0.0, -1.0]))
    got = E.nextafter(x, rill.tensor(np.array([2.0, -1.0, -inf]))).numpy()
    np.testing.assert_array_equal(got, np.nextafter([1.0, 0.0, -1.0], [2.0, -1.0, -inf]))
    f32 = E.nextafter(rill.tensor([1.0]), 2.0)
    assert f32.dtype is rill.float32 and f32.numpy()[0] == np.nextafter(np.float32(1), 2)


def test_positive_negative_conj_real_of_real_tensors():
    x = rill.tensor([1.5, -0.0])
    assert E.positive(x) is x and E.conj(x) is x and E.real(x) is x
    assert E.imag(x).numpy().tolist() == [0.0, 0.0]
    assert E.negative(x).numpy().tolist() == [-1.5, 0.0]


def test_errors_name_the_op_and_the_fix():
    with pytest.raises(rill.DTypeError, match="real floating") as info:
        E.logaddexp(rill.tensor([1j]), 1.0)
    assert info.value.op == "logaddexp"
    with pytest.raises(rill.DTypeError, match="integer") as info:
        E.bitwise_left_shift(rill.tensor([1.0]), 1)
    assert info.value.op == "bitwise_left_shift"
    with pytest.raises(rill.DTypeError, match="cast to float32"):
        E.nextafter(rill.tensor([1.0], dtype=rill.bfloat16), 2.0)
    with pytest.raises(rill.DTypeError, match="bool") as info:
        E.positive(rill.tensor([True]))
    assert info.value.op == "positive"
    with pytest.raises(rill.DTypeError, match="sign bit"):
        E.signbit(rill.tensor([1j]))


# ---- the gpu device (Triton's interpreter without a GPU) -----------------------------------

GPU_NAMES = ["acosh", "asinh", "atanh", "log10", "signbit", "logaddexp", "hypot", "copysign",
             "nextafter", "bitwise_invert", "bitwise_left_shift", "bitwise_right_shift",
             "floor_divide", "sign", "round"]


@pytest.mark.parametrize("name", GPU_NAMES)
def test_new_functions_on_the_gpu_match_the_cpu(name, rng):
    if not rill.gpu.is_available():
        pytest.skip("no gpu device")
    gpu = rill.device("gpu")
    if name.startswith("bitwise"):
        args = [np.array([-8, -1, 0, 3, 127], np.int32), np.array([0, 1, 2, 33, 40], np.int32)]
        args = args[:1] if name == "bitwise_invert" else args
    else:
        special = [nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 2.5, 0.5]
        a = np.array(special + list(rng.uniform(1.1, 3, 4)))
        b = np.array(list(reversed(special)) + list(rng.uniform(-3, 3, 4)))
        args = [a] if name in ("acosh", "asinh", "atanh", "log10", "signbit", "sign",
                               "round") else [a, b]
    cpu = fn(name)(*[rill.tensor(v) for v in args]).numpy()
    on_gpu = fn(name)(*[rill.tensor(v, device=gpu) for v in args])
    assert on_gpu.device == gpu
    got = on_gpu.to("cpu").numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-12, atol=0, equal_nan=True)
    zeros = cpu == 0  # a NaN's sign bit is not specified; a zero's is
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(cpu[zeros]))


def test_complex_on_the_gpu_is_a_device_error_naming_the_op():
    if not rill.gpu.is_available():
        pytest.skip("no gpu device")
    gpu = rill.device("gpu")
    try:
        z = rill.tensor([1 + 2j], device=gpu)
    except rill.DeviceError as e:  # refused at the move already: also a rill error
        assert "cpu" in str(e).lower()
        return
    with pytest.raises(rill.DeviceError, match=r"complex tensors are CPU-only.*to\('cpu'\)") as i:
        rill.exp(z)
    assert i.value.op == "exp"
    with pytest.raises(rill.DeviceError, match="CPU-only"):
        E.real(z)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_floor_divide_with_infinities_and_zeros_matches_torch_and_python(dtype):
    """The probe's silent difference: -1.63 // inf is -1 (Python, NumPy, PyTorch), not -0, and
    inf // 2 is NaN, not inf; on every device, eagerly and captured."""
    values = [nan, inf, -inf, 0.0, -0.0, 1.63, -1.63, 2.0, -7.0, 1e30, -1e-30]
    a, b = (np.array(v, dtype) for v in zip(*[(x, y) for x in values for y in values]))
    want = torch.floor_divide(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    python = np.array([x // y if y != 0 and not (math.isinf(x) and math.isinf(y)) else w
                       for x, y, w in zip(a.tolist(), b.tolist(), want.tolist())], dtype)
    np.testing.assert_array_equal(want, python)          # torch is Python's floor division
    devices = ["cpu"] + (["gpu"] if rill.gpu.is_available() else [])
    for device in devices:
        x, y = rill.tensor(a, device=device), rill.tensor(b, device=device)
        for got in (x // y, rill.capture(lambda p, q: rill.floor_divide(p, q))(x, y)):
            got = got.to("cpu").numpy()
            np.testing.assert_array_equal(got, want, err_msg=device)
            signed = ~np.isnan(want)                      # a NaN's sign is no one's promise
            np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]),
                                          err_msg=device)
