"""In-place operators store their result in the left operand's dtype as PyTorch does: a
result is cast back within its kind or into a higher one (float32 += float64, int8 += int64,
uint8 += int8), and refused when it would lose its kind (int += float, real += complex,
bool += int). PyTorch is the oracle for every pair of dtypes both libraries have.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")

NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
         "float32", "float64", "complex64", "complex128")
OPS = {
    "+=": lambda a, b: a.__iadd__(b),
    "-=": lambda a, b: a.__isub__(b),
    "*=": lambda a, b: a.__imul__(b),
    "/=": lambda a, b: a.__itruediv__(b),
    "|=": lambda a, b: a.__ior__(b),
}
OUT_OF_PLACE = {"+=": "__add__", "-=": "__sub__", "*=": "__mul__", "/=": "__truediv__",
                "|=": "__or__"}

_VALUES = np.array([[1, 2, 3], [0, 1, 2]])


def _pair(name, values):
    t = torch.tensor(values).to(getattr(torch, name))
    source = t.to(torch.float32) if name == "bfloat16" else t
    return rill.tensor(source.numpy()).astype(getattr(rill, name)), t


def _as_numpy(x):
    if isinstance(x, torch.Tensor):
        return (x.to(torch.float64) if x.dtype == torch.bfloat16 else x).numpy()
    return np.asarray(x)


def _torch_outcome(op, left, right):
    """torch's in-place result, or None where it refuses; skip where the op itself (out of
    place) is not defined for these dtypes in torch, which is not what this file tests."""
    try:
        getattr(left, OUT_OF_PLACE[op])(right)
    except RuntimeError:
        pytest.skip(f"torch has no out-of-place {op[0]} for these dtypes")
    try:
        return OPS[op](left.clone(), right)
    except RuntimeError:
        return None


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("right", NAMES)
@pytest.mark.parametrize("left", NAMES)
def test_in_place_dtype_rule_matches_torch(left, right, op):
    x, tx = _pair(left, _VALUES[0] + 1)
    y, ty = _pair(right, _VALUES[1] + 1)
    want = _torch_outcome(op, tx, ty)
    try:
        getattr(x, OUT_OF_PLACE[op])(y)
    except rill.Error:
        pytest.skip(f"rill has no out-of-place {op[0]} for these dtypes")
    if want is None:
        with pytest.raises(rill.DTypeError, match="in-place"):
            OPS[op](x, y)
        return
    got = OPS[op](x, y)
    assert got is x and got.dtype is getattr(rill, left)
    tol = 1e-2 if left in ("float16", "bfloat16") else 1e-6
    np.testing.assert_allclose(_as_numpy(got), _as_numpy(want), rtol=tol)


def test_float32_plus_float64_computes_in_float64_then_stores_float32():
    x = rill.tensor([1.0, 2.0], dtype=rill.float32)
    y = rill.tensor([1e-9, 0.1], dtype=rill.float64)
    tx = torch.tensor([1.0, 2.0], dtype=torch.float32)
    tx += torch.tensor([1e-9, 0.1], dtype=torch.float64)
    x += y
    assert x.dtype is rill.float32
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_int_plus_float_is_refused_with_the_fix():
    x = rill.tensor([1, 2, 3])
    with pytest.raises(rill.DTypeError, match=r"int64 tensor.*x = x op y"):
        x += rill.tensor([0.5, 0.5, 0.5])
    assert x.tolist() == [1, 2, 3]  # unchanged


def test_the_rule_holds_for_setitem_sources_and_gradients():
    w = rill.tensor([1.0, 2.0], dtype=rill.float64, requires_grad=True)
    x = rill.zeros(2, dtype=rill.float32)
    x += w * w  # float64 result, stored as float32, still on the tape
    x.sum().backward()
    assert x.dtype is rill.float32 and w.grad.dtype is rill.float64
    assert w.grad.tolist() == [2.0, 4.0]


def test_calibrated_classifier_with_temperature_runs_on_rill():
    """scikit-learn's temperature scaling updates a float32 array with float64 values in
    place; it failed on rill before the cast."""
    import subprocess
    import sys
    pytest.importorskip("sklearn")
    pytest.importorskip("array_api_compat")
    code = """
import numpy as np, sklearn, rill
from sklearn.calibration import CalibratedClassifierCV
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
rng = np.random.default_rng(0)
X = rng.standard_normal((90, 4))
y = (X[:, 0] + 0.3 * rng.standard_normal(90) > 0).astype(np.int64)
make = lambda: CalibratedClassifierCV(LinearDiscriminantAnalysis(), method="temperature", cv=3)
want = make().fit(X, y).predict_proba(X)
with sklearn.config_context(array_api_dispatch=True):
    got = make().fit(rill.tensor(X), rill.tensor(y)).predict_proba(rill.tensor(X))
assert isinstance(got, rill.Tensor), type(got)
np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
"""
    import os
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
