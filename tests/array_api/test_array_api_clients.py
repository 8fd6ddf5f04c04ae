"""Real clients of the Array API standard run on rill tensors and agree with NumPy inputs:
scikit-learn (array_api_dispatch), array-api-compat and SciPy.

scikit-learn and SciPy read SCIPY_ARRAY_API when they are first imported, so these run in a
fresh interpreter with it set (the rest of the suite keeps SciPy's default).
"""
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("array_api_compat")

_PRELUDE = """
import numpy as np
import rill
rng = np.random.default_rng(0)
X = rng.standard_normal((80, 6))
X[:, 2] *= 5.0
y_class = (X[:, 0] + 0.5 * X[:, 1] - 0.2 * X[:, 3] > 0).astype(np.int64)
y_class[::7] = 2  # three classes
y_real = X @ np.arange(6.0) + 0.3 * rng.standard_normal(80)


def close(got, want, tol=1e-8):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
"""


def run(body: str) -> None:
    code = _PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"SCIPY_ARRAY_API": "1", **_env()}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _env():
    import os
    return {k: v for k, v in os.environ.items() if k != "SCIPY_ARRAY_API"}


def test_array_api_compat_sees_rill():
    run("""
    import array_api_compat as compat
    x = rill.tensor(X)
    assert compat.array_namespace(x) is rill
    assert compat.is_array_api_obj(x)
    assert str(compat.device(x)) == "cpu"
    assert rill.__array_api_version__ == "2024.12"
    info = rill.__array_namespace_info__()
    assert info.default_dtypes()["real floating"] is rill.float32
    assert rill.float64 in info.dtypes(kind="real floating").values()
    """)


@pytest.mark.parametrize("estimator,target,method", [
    ("LinearDiscriminantAnalysis(solver='svd')", "y_class", "predict"),
    ("LinearDiscriminantAnalysis(solver='svd')", "y_class", "transform"),
    ("PCA(n_components=3, svd_solver='full')", None, "transform"),
    ("Ridge(solver='svd', alpha=0.5)", "y_real", "predict"),
    # (scikit-learn dispatches Ridge's array-API path with solver="svd" only.)
    ("Ridge(solver='svd', alpha=0.5, fit_intercept=False)", "y_real", "predict"),
    ("StandardScaler()", None, "transform"),
    ("MinMaxScaler()", None, "transform"),
    ("MaxAbsScaler()", None, "transform"),
])
def test_scikit_learn_estimators_agree_with_numpy(estimator, target, method):
    run(f"""
    import sklearn
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, StandardScaler
    targets = () if {target!r} is None else ({target},)
    reference = {estimator}.fit(X, *targets)
    want = getattr(reference, {method!r})(X)
    with sklearn.config_context(array_api_dispatch=True):
        model = {estimator}.fit(rill.tensor(X), *(rill.tensor(t) for t in targets))
        got = getattr(model, {method!r})(rill.tensor(X))
    assert isinstance(got, rill.Tensor), type(got)
    if {method!r} == "transform" and {estimator!r}.startswith(("PCA", "Linear")):
        got, want = np.abs(np.asarray(got)), np.abs(want)  # component signs are arbitrary
    close(got, want, 1e-7)
    """)


def test_scipy_functions_take_rill_tensors():
    run("""
    import scipy.special
    x = rill.tensor(X)
    got = scipy.special.logsumexp(x, axis=1)
    assert isinstance(got, rill.Tensor)
    close(got, scipy.special.logsumexp(X, axis=1), 1e-12)
    got = scipy.special.logsumexp(x, axis=0, b=rill.tensor(np.abs(X)))
    close(got, scipy.special.logsumexp(X, axis=0, b=np.abs(X)), 1e-12)
    got = scipy.special.softmax(x, axis=1)
    close(got, scipy.special.softmax(X, axis=1), 1e-12)
    """)
