"""Every primitive declares the types of its attrs (ops/attrs.py), the declaration matches
its shape/dtype rule, bind checks calls against it, and attr_problems judges any value
without raising (loaders run it on file data)."""
import inspect
import math

import numpy as np
import pytest

import rill
from rill.capture.ir import Graph
from rill.eager.bind import bind
from rill.ops import attrs as A
from rill.ops.attrs import attr_problems
from rill.ops.primitive import PRIMITIVES

NAMES = sorted(PRIMITIVES)


def test_every_primitive_is_declared():
    assert len(PRIMITIVES) >= 120
    undeclared = [n for n in NAMES if PRIMITIVES[n].attrs is None]
    assert not undeclared, f"primitives without attrs=: {undeclared}"


@pytest.mark.parametrize("name", NAMES)
def test_declared_attrs_are_the_keyword_parameters_of_infer(name):
    """Attrs are exactly infer's keyword-only parameters (inputs come positionally), so a
    declaration cannot drift from the rule that uses it."""
    prim = PRIMITIVES[name]
    params = inspect.signature(prim.infer).parameters.values()
    assert not any(p.kind is p.VAR_KEYWORD for p in params), \
        f"{name}: infer takes **kwargs; spell each attr out as a keyword-only parameter"
    keyword = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    assert set(prim.attrs) == keyword
    assert prim.required_attrs == {p.name for p in params if p.kind is p.KEYWORD_ONLY
                                   and p.default is p.empty}
    for kind in prim.attrs.values():
        assert isinstance(kind, A.AttrType)


# ---- the types -----------------------------------------------------------------------------

GRAPH = Graph()


@pytest.mark.parametrize("kind, good, bad", [
    (A.INT, [0, -3, 2**63 - 1, -2**63], [1.5, True, "1", None, 2**63, -2**63 - 1, np.int64(1)]),
    (A.NonNegInt, [0, 7], [-1, 1.0]),
    (A.FLOAT, [0, 1.5, math.inf, math.nan, 2**80], [True, "1", None, 1j, 2**1024]),
    (A.Float(finite=True), [1.5, 3], [math.inf, math.nan]),
    (A.BOOL, [True, False], [1, 0, None, "True", np.bool_(True)]),
    (A.Choice("a", "b"), ["a", "b"], ["c", 1, None]),
    (A.Letters(), ["", "ij", "ABz"], ["i j", "i,j", "é", 3]),
    (A.Scalar(), [True, 1, 2.5, 2**64 - 1], ["1", None, 2**64, (1,)]),
    (A.AXES, [None, 0, -1, (0, 1), ()], [1.5, "0", True, [0], (0, 1.0), (True,)]),
    (A.SHAPE, [(), (2, 3), (0,)], [(2, -1), [2], 2, (2.0,)]),
    (A.TupleOf(A.PAIR, length=2), [((0, 0), (1, 1))], [((0, 0),), ((0, 0), (1,)), "ab"]),
    (A.Optional(A.INT), [None, 3], [3.0]),
    (A.OneOf(A.INT, A.TupleOf(A.INT)), [1, (1, 2)], [1.5, (1.5,)]),
    (A.DTypeAttr, [rill.float32], ["float32", np.float32, None]),
    (A.DeviceAttr, [rill.device("cpu")], ["cpu", None]),
    (A.Subgraph, [GRAPH], [None, "graph"]),
    (A.TupleOf(A.Subgraph, min_length=1), [(GRAPH, GRAPH)], [(), [GRAPH], (GRAPH, 1)]),
    (A.GeneratorAttr, [rill.Generator(0)], [0, None]),
    (A.NDArray, [np.zeros(2)], [[0.0], 0.0]),
    (A.ErrorName, ["ShapeError", "ArgumentError"], ["ValueError", "os.system", ""]),
    (A.INDEX_KEY, [(), (("int", 0), ("slice", None, 3, -1), ("new",), ("...",), ("array",))],
     [(("slice", 0, 1, 0),), (("int", 1.5),), (("eval", "x"),), [("int", 0)], (("int",),),
      (("slice", 0, 2**70, 1),), ((),)]),
])
def test_attr_types_accept_and_refuse(kind, good, bad):
    for v in good:
        assert kind.check(v) is None, (kind, v)
        assert kind.problems(v) == []
    for v in bad:
        why = kind.check(v)
        assert isinstance(why, str) and why, (kind, v)
        assert kind.problems(v), (kind, v)


def test_messages_are_short_and_say_what_was_given():
    assert A.FLOAT.check("a") == "expected float, got str"
    assert A.INT.check(2**70) == "expected int in [-2**63, 2**63), got 2**70"
    assert A.NonNegInt.check(-1) == "expected int in [0, 2**63), got -1"
    assert A.AXES.check((0, 1.5)) == "[1]: expected int, got float"
    assert A.Choice("none", "tanh").check("x") == "expected one of 'none', 'tanh', got 'x'"
    assert A.INT.check(10**10000).startswith("expected int in")  # no 4300-digit str() error


def test_attr_problems_paths():
    conv = PRIMITIVES["conv2d"]
    good = dict(stride=(1, 1), padding=((0, 0), (1, 1)), dilation=(1, 1), groups=1)
    assert attr_problems(conv, good) == []
    bad = dict(good, padding=((0, 0), (1, 1.5)), bogus=3)
    del bad["groups"]
    assert sorted(attr_problems(conv, bad)) == sorted([
        ("padding[1][1]", "expected int, got float"),
        ("bogus", "unknown attribute"),
        ("groups", "missing")])
    assert attr_problems(PRIMITIVES["add"], {}) == []
    assert attr_problems(PRIMITIVES["sum"], {"axis": None}) == [("keepdims", "missing")]


class _Hostile:
    """An object whose every comparison, length and conversion raises."""

    def __eq__(self, other):
        raise RuntimeError("eq")

    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __hash__(self):
        raise RuntimeError("hash")

    def __len__(self):
        raise RuntimeError("len")

    def __iter__(self):
        raise RuntimeError("iter")

    def __index__(self):
        raise RuntimeError("index")

    def __repr__(self):
        raise RuntimeError("repr")


class _HostileStr(str):
    def isascii(self):
        raise RuntimeError("isascii")

    def __eq__(self, other):
        raise RuntimeError("eq")

    __hash__ = str.__hash__


ODD_VALUES = [None, 0, -1, 2**70, 10**5000, 1.5, math.nan, "x", "", b"x", [], [1], (), (1.5,),
              ((),), {}, {1: 2}, set(), object(), _Hostile(), _HostileStr("ij"), (_Hostile(),),
              np.int64(1), np.zeros(3), rill.float32, rill.ones(2), GRAPH, slice(1), Ellipsis,
              print, rill.Generator(0)]


@pytest.mark.parametrize("name", NAMES)
def test_attr_problems_never_raises(name):
    prim = PRIMITIVES[name]
    keys = list(prim.attrs) + ["bogus", ""]
    for value in ODD_VALUES:
        for key in keys:
            found = attr_problems(prim, {key: value})
            assert isinstance(found, list)
            for path, why in found:
                assert isinstance(path, str) and isinstance(why, str)
        assert isinstance(attr_problems(prim, {k: value for k in keys}), list)


# ---- bind checks attrs before the rule runs ------------------------------------------------


def test_bind_names_the_op_and_the_attr():
    with pytest.raises(rill.ArgumentError) as info:
        bind(PRIMITIVES["leaky_relu"], rill.ones(2), alpha="a")
    assert info.value.op == "leaky_relu"
    assert info.value.message == "attribute alpha: expected float, got str"
    with pytest.raises(rill.ArgumentError, match="unknown attribute bogus"):
        bind(PRIMITIVES["add"], rill.ones(2), rill.ones(2), bogus=1)
    with pytest.raises(rill.ArgumentError, match="missing attribute keepdims"):
        bind(PRIMITIVES["sum"], rill.ones(2), axis=0)
    with pytest.raises(rill.ArgumentError, match=r"missing attribute axis; missing attribute"):
        bind(PRIMITIVES["sum"], rill.ones(2))
    with pytest.raises(rill.ArgumentError, match=r"attribute key\[0\]\[3\]: a slice step"):
        bind(PRIMITIVES["getitem"], rill.ones(2), key=(("slice", None, None, 0),))


def test_non_rill_exception_in_infer_is_chained():
    """A rule that trips over a value it was never meant to see raises an ArgumentError
    naming the op, chained from what it raised."""
    from rill.ops.primitive import Primitive

    def infer(x, *, n):
        return [1, 2][n], x.dtype  # IndexError for n >= 2

    prim = Primitive("test_crashing_rule", infer, attrs={"n": A.INT})
    prim.normalize = lambda args: args
    with pytest.raises(rill.ArgumentError) as info:
        bind(prim, rill.ones(2), n=5)
    assert info.value.op == "test_crashing_rule"
    assert isinstance(info.value.__cause__, IndexError)
