"""Every public op, called with arguments of every kind, returns or raises a rill.Error:
never a bare TypeError, ValueError, AttributeError ... from inside rill (issue 14, finding 7).

The ops are the callables `rill` and `rill.nn.functional` export (plus x[key] and
x[key] = v); the arguments mix valid tensors of several shapes and dtypes with Python
scalars, None, strings, floats where ints belong, ints beyond int64, nan and inf, tuples,
lists, slices, NumPy values, dtypes and callables. Bounded: a few dozen examples per op.
"""
import inspect
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rill
import rill.nn.functional as F

# Not callable as an op with made-up arguments, and why.
SKIP = {
    "save": "writes files",
    "load": "reads files named by its argument",
    "load_graph": "reads files named by its argument",
    "install_traceback_filter": "replaces the process's excepthook",
    "no_grad": "a context manager",
    "enable_grad": "a context manager",
    "reports_as": "a decorator factory for rill's own functions",
}
# Ops that run a user function as many times as their arguments say (a loop bound of 2**62
# is a legitimate, endless request): drawn with small ints only.
LOOPS = {"fori_loop", "while_loop", "scan"}
# FUZZ_EXAMPLES=300 explores further (a few minutes); the default keeps the file ~10 s.
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 25))


def _getitem(x, key):
    if isinstance(x, rill.Tensor):  # else Python's own error for indexing a non-tensor
        return x[key]


def _setitem(x, key, value):
    if isinstance(x, rill.Tensor):
        x = x.detach()  # a leaf that requires grad refuses in-place changes, rightly
        x[key] = value


def _public(module, prefix):
    found = {}
    for name in dir(module):
        fn = getattr(module, name)
        if name.startswith("_") or not callable(fn) or inspect.isclass(fn) or name in SKIP:
            continue
        found[prefix + name] = fn
    return found


OPS = {**_public(rill, ""), **_public(F, "F."), "getitem": _getitem, "setitem": _setitem}
assert len(OPS) > 150

# ---- argument values -----------------------------------------------------------------------

_SHAPES = [(), (3,), (2, 3), (1, 2, 3), (2, 1, 3, 3), (0,), (2, 0)]
_DTYPES = [rill.float32, rill.int64, rill.bool_, rill.float64, rill.int8, rill.uint8,
           rill.float16]


def _tensor(shape, dtype):
    values = np.arange(int(np.prod(shape))).reshape(shape) % 3
    return rill.tensor(values, dtype=dtype)


TENSORS = [_tensor(s, d) for s in _SHAPES for d in _DTYPES]
TENSORS.append(rill.ones(2, 3, requires_grad=True))

SMALL_INTS = [-2, -1, 0, 1, 2, 3]
HUGE_INTS = [2**62, 2**63 - 1, 2**63, 2**64, 2**70, -2**63 - 1, 10**30]
ODD = [None, True, False, 0.0, 1.5, 2.0, -0.5, math.nan, math.inf, -math.inf, 1e300, "a", "",
       "mean", "float32", "ij->ji", "same", (), (0, 1), (1.5,), (2, 2), ((0, 0), (1, 1)),
       [0, 1], [[1, 2], [3]], ["a"], slice(None, None, 0), slice(1, None), slice(0, 2.5),
       Ellipsis, np.int64(2), np.float32(0.5), np.zeros(2), np.array(["x"]), rill.float32,
       rill.int8, rill.device("cpu"), rill.Generator(0), object(), {"a": 1}, 1j,
       lambda *a, **k: False]


def _values(ints):
    return st.one_of(st.sampled_from(TENSORS), st.sampled_from(ints), st.sampled_from(ODD))


def _keywords(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _calls(name, fn):
    values = _values(SMALL_INTS if name in LOOPS else SMALL_INTS + HUGE_INTS)
    first = st.one_of(st.sampled_from(TENSORS), values)  # mostly a tensor, as most ops want
    args = st.builds(lambda a, rest: [a] + rest, first, st.lists(values, max_size=3))
    names = _keywords(fn)
    kwargs = st.dictionaries(st.sampled_from(names), values, max_size=2) if names else \
        st.just({})
    return st.tuples(args, kwargs)


def _run(fn, args, kwargs):
    # A keyword that repeats a positional argument is the caller's TypeError, raised by
    # Python before rill runs: not what this test is about.
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return
    except ValueError:
        pass
    try:
        fn(*args, **kwargs)
    except rill.Error:
        pass


@pytest.fixture(autouse=True)
def _keep_default_generator():
    state = rill.default_generator.get_state()
    yield
    rill.default_generator.set_state(state)


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_returns_or_raises_a_rill_error(name):
    fn = OPS[name]

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(_calls(name, fn))
    def check(call):
        args, kwargs = call
        _run(fn, args, kwargs)

    check()
