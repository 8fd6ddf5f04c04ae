"""bind remembers shape/dtype rule answers per primitive (eager/rule_cache.py): a remembered
answer is never one the rule would not give now."""
import numpy as np
import pytest

import rill
from rill.eager import rule_cache
from rill.eager.bind import bind
from rill.ops import attrs as A
from rill.ops.primitive import PRIMITIVES, Primitive
from rill.ops.promotion import lift


def _probe(name, infer, attrs):
    """An unregistered primitive whose cpu kernel returns a float32 zero of the rule's shape."""
    prim = Primitive(name, infer, normalize=lift, attrs=attrs)
    prim.kernels["cpu"] = lambda x, **_: np.zeros(x.shape, np.float32)
    return prim


def test_a_float_attr_is_keyed_by_its_type_too():
    """1 and 1.0 are equal keys in Python; a rule may give them different dtypes."""
    def infer(x, *, value):
        return x.shape, rill.int64 if type(value) is int else rill.float32

    prim = _probe("typed_probe", infer, {"value": A.FLOAT})
    prim.kernels["cpu"] = lambda x, value: np.zeros(
        x.shape, np.int64 if type(value) is int else np.float32)
    x = rill.ones(3)
    assert bind(prim, x, value=1).dtype is rill.int64
    assert bind(prim, x, value=1.0).dtype is rill.float32
    assert bind(prim, x, value=1).dtype is rill.int64
    assert len(prim.rule_cache) == 2


def test_a_rule_that_reads_anything_else_fails_the_check(monkeypatch):
    """With RILL_CHECK_KERNELS (set for the suite) every remembered answer is recomputed:
    a rule that reads state outside its inputs and attrs is caught, not answered stale."""
    monkeypatch.setattr(rule_cache, "CHECK_KERNELS", True)
    rows = [2]
    prim = _probe("stateful_probe", lambda x: ((rows[0],), rill.float32), {})
    prim.kernels["cpu"] = lambda x: np.zeros(rows[0], np.float32)
    x = rill.ones(3)
    assert bind(prim, x).shape == (2,)
    rows[0] = 5
    with pytest.raises(AssertionError, match="stateful_probe.*cannot be cached"):
        bind(prim, x)


def test_the_default_float_dtype_is_part_of_the_key():
    """A rule may give int inputs the default float dtype (dtypes.to_float)."""
    from rill import dtypes as dt
    prim = _probe("default_float_probe", lambda x: (x.shape, dt.to_float(x.dtype)), {})
    prim.kernels["cpu"] = lambda x: np.zeros(x.shape, dt.default_float.storage)
    x = rill.arange(4)
    assert bind(prim, x).dtype is rill.float32
    rill.set_default_dtype(rill.float64)
    try:
        assert bind(prim, x).dtype is rill.float64
        assert rill.sqrt(x).dtype is rill.float64
    finally:
        rill.set_default_dtype(rill.float32)
    assert bind(prim, x).dtype is rill.float32


def test_bad_input_fails_every_time():
    """A rule that raises is not remembered: the second bad call is refused as the first."""
    x = rill.ones(2, 3)
    for _ in range(2):
        with pytest.raises(rill.ShapeError, match="cannot reshape"):
            x.reshape(4, 2)
    for _ in range(2):
        with pytest.raises(rill.ShapeError):
            rill.ones(2, 3) @ rill.ones(2, 3)


def test_which_primitives_are_cached():
    """Only primitives whose every attr type can key a cache have one: a graph attr leaves
    theirs uncached, and so do the elementwise families, whose rules cost less than the
    lookup. An index key is a tuple of tags, ints and None: it keys getitem's cache."""
    from rill.ops.elementwise import P as ELEMENTWISE
    assert PRIMITIVES["matmul"].rule_cache is not None
    assert PRIMITIVES["reshape"].rule_cache is not None
    assert PRIMITIVES["layer_norm"].typed_attrs == ("eps",)
    assert PRIMITIVES["getitem"].rule_cache is not None
    assert PRIMITIVES["add"].rule_cache is None and PRIMITIVES["tanh"].rule_cache is None
    # ... the compiled bind's lookup costs less than add's rule, not than tanh's
    assert PRIMITIVES["add"].dispatch_cache is not None
    assert PRIMITIVES["tanh"].dispatch_cache is None
    assert PRIMITIVES["while"].dispatch_cache is None  # a graph attr keys no cache
    uncached = {n for n, p in PRIMITIVES.items() if p.rule_cache is None} - set(ELEMENTWISE)
    assert {"while", "scan", "switch"} <= uncached
    # declared cache_rule=False: measured cheaper than the lookup of their key (ops/primitive.py)
    cheaper = {"adam_update", "batch_norm_grad", "cast", "empty", "full", "gelu_grad",
               "layer_norm", "layer_norm_grad", "linear", "lstm_layer_grad", "max_pool2d_grad",
               "max_pool3d_grad", "relu_grad", "softmax_cross_entropy",
               "softmax_cross_entropy_grad", "where"}
    assert cheaper <= uncached
    assert len(uncached - cheaper) < len(PRIMITIVES) // 10, sorted(uncached - cheaper)


def test_index_keys_key_getitems_cache_by_value():
    """Keys that differ in one bound, or in an int against a slice, are answered apart; a
    bool, a float or a NumPy int where the key wants an int is refused every time, never
    answered from the entry of the int it equals."""
    x = rill.arange(24).reshape(4, 6)
    expected = np.arange(24).reshape(4, 6)
    for _ in range(2):  # the second round from the cache
        for key in [(slice(1, 3),), (slice(1, 4),), (1,), (slice(None), 2), (Ellipsis, None),
                    (None, slice(None, None, 2)), (slice(-1, None, -1), 0)]:
            assert x[key].shape == expected[key].shape
            np.testing.assert_array_equal(x[key].numpy(), expected[key])
    from rill.ops.indexing import getitem_p
    for bad in [(("int", True),), (("int", 1.0),), (("int", np.int64(1)),),
                (("slice", 0, 2.0, None),)]:
        with pytest.raises(rill.Error):
            bind(getitem_p, x, key=bad)


def test_the_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(rule_cache, "MAX_ENTRIES", 4)
    prim = _probe("bounded_probe", lambda x: (x.shape, rill.float32), {})
    for n in range(1, 12):
        assert bind(prim, rill.ones(n)).shape == (n,)
        assert len(prim.rule_cache) <= 4


def test_a_repeated_step_reuses_the_answers():
    """The point of the cache: a second identical step asks no rule again."""
    calls = []
    prim = PRIMITIVES["matmul"]
    infer = prim.infer

    def counting(*args, **kwargs):
        calls.append(1)
        return infer(*args, **kwargs)

    prim.rule_cache.clear()
    try:
        prim.infer = counting
        a, b = rill.ones(3, 4), rill.ones(4, 5)
        for _ in range(3):
            assert (a @ b).shape == (3, 5)
        # once, plus one recomputation per remembered answer under the suite's check mode
        assert len(calls) == (3 if rule_cache.CHECK_KERNELS else 1)
    finally:
        prim.infer = infer
        prim.rule_cache.clear()
