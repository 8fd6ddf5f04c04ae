"""bind's common case compiled (kernels/native/dispatch.c) against the Python bind it hands
every other call to: every op case of the table gives the same bits and the same gradients
through either; errors are the same errors, raised at the caller's line; the tape's nodes
hold the same things; nothing is leaked; and what the compiled bind does not take (autocast,
a capture, several results, an unregistered Tensor subclass) runs in the Python bind."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import traceback

import numpy as np
import pytest

import rill
from rill.eager import bind as bind_module
from rill.errors import ArgumentError, DTypeError, Error, ShapeError
from rill.kernels.native import build
from rill.ops.elementwise import P
from rill.tensor import Tensor, new_tensor

from kernel_paths import needs_compiler
from op_cases import (CASES, as_tuple, cotangents_for, diff_positions, make_inputs,
                      rill_inputs, scalar_loss)

COMPILED = bind_module._COMPILED
python_bind = bind_module.python_bind
compiled_only = pytest.mark.skipif(COMPILED is None,
                                   reason=f"no compiled bind: {build.why_not('dispatch')}")


@pytest.fixture
def python_binds(monkeypatch):
    """Every rill module's `bind` is the Python one while the test runs."""
    def use():
        for name, module in list(sys.modules.items()):
            if name.startswith("rill") and getattr(module, "bind", None) is bind_module.bind:
                monkeypatch.setattr(module, "bind", python_bind)
    return use


@needs_compiler
def test_the_compiled_bind_is_in_use_where_a_compiler_is():
    assert COMPILED is not None, build.why_not("dispatch")
    assert bind_module.bind is COMPILED.bind
    # installed by rill/__init__.py before any op module imported `bind`: none holds the
    # Python one, and the arithmetic operators are the compiled ones
    stale = [name for name, module in sys.modules.items()
             if name.startswith("rill") and getattr(module, "bind", None) is python_bind]
    assert stale == []
    assert type(Tensor.__add__).__name__ == "Operator" and Tensor.__add__.__wrapped__ is rill.add


def _run_case(op, case):
    """Outputs of the case and the gradients of a scalar loss of them, as float64 arrays."""
    arrays = make_inputs(op, op.shapes[case])
    rill.manual_seed(0)
    outs = as_tuple(op.fn(*rill_inputs(arrays)))
    results = [(o.dtype.name, np.array(o.numpy())) for o in outs]
    positions = diff_positions(op, arrays) if op.grad else []
    if positions:
        cots = cotangents_for(outs)

        def loss(*xs):
            full = list(rill_inputs(arrays))
            for p, x in zip(positions, xs):
                full[p] = x
            return scalar_loss(as_tuple(op.fn(*full)), cots)
        rill.manual_seed(0)
        grads = rill.grad(loss, argnums=tuple(range(len(positions))))(
            *[rill.tensor(arrays[p]) for p in positions])
        results += [("grad", np.array(g.numpy())) for g in as_tuple(grads)]
    return results


@compiled_only
@pytest.mark.parametrize("op,case", CASES)
def test_every_op_case_gives_the_same_bits_through_either_bind(op, case, python_binds):
    compiled = _run_case(op, case)
    python_binds()
    reference = _run_case(op, case)
    assert len(compiled) == len(reference)
    for (kind, got), (want_kind, want) in zip(compiled, reference):
        assert kind == want_kind and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{op}: {kind}")


CREATIONS = [
    lambda: rill.zeros(2, 3), lambda: rill.ones(4, dtype=rill.int32), lambda: rill.full((2,), 7.5),
    lambda: rill.arange(1, 10, 2), lambda: rill.linspace(0, 1, 5), lambda: rill.eye(3, 4),
    lambda: rill.rand(3, 2), lambda: rill.randn(5), lambda: rill.randint(0, 9, (4,)),
    lambda: rill.zeros_like(rill.ones(2, requires_grad=True)), lambda: rill.ones(3).to("cpu"),
    lambda: rill.empty(2, 2).shape, lambda: rill.full((2,), 1.0, device="cpu"),
    lambda: rill.arange(0, 5, 0), lambda: rill.full((-1,), 1.0), lambda: rill.eye(-2),
]


@compiled_only
@pytest.mark.parametrize("make", CREATIONS)
def test_creation_ops_are_the_same_through_either_bind(make, python_binds):
    rill.manual_seed(3)
    compiled = _outcome(make)
    python_binds()
    rill.manual_seed(3)
    assert _outcome(make) == compiled


# ---- the tape ------------------------------------------------------------------------------


def _node_summary(t):
    node = t._node
    return (t.requires_grad, t._origin, t._index, node is None or node.prim.name,
            node is None or [id(a) for a in node.inputs],
            node is None or dict(node.attrs), node is None or node.versions,
            node is None or node.outputs is None)


@compiled_only
@pytest.mark.parametrize("call", [
    lambda w, x, i: w + x,
    lambda w, x, i: x * x,                       # nothing requires grad
    lambda w, x, i: w.sum(axis=0, keepdims=True),  # attrs
    lambda w, x, i: rill.exp(w),                 # saves its output
    lambda w, x, i: i + 1,                        # an int result: no gradient, an origin
    lambda w, x, i: w > 0,                        # no vjp
    lambda w, x, i: (w > 0) + i,                  # an input that came from an op without a gradient
    lambda w, x, i: w.reshape(2, 6),
])
def test_tape_nodes_hold_the_same_things(call, python_binds):
    w = rill.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    x = rill.tensor(np.ones((3, 4)))
    i = rill.tensor(np.arange(12).reshape(3, 4))
    compiled = call(w, x, i)
    python_binds()
    reference = call(w, x, i)
    assert _node_summary(compiled) == _node_summary(reference)
    np.testing.assert_array_equal(compiled.numpy(), reference.numpy())
    assert (compiled.dtype, compiled.shape, compiled.device) == \
        (reference.dtype, reference.shape, reference.device)


@compiled_only
def test_its_results_set_every_slot_as_new_tensor_does():
    made = COMPILED.bind(P["add"], rill.ones(2), rill.ones(2))
    expected = new_tensor(made._data, made.dtype, made.device)
    for name in Tensor.__slots__[:-1]:  # an unset slot raises AttributeError here
        assert getattr(made, name) is getattr(expected, name) or \
            getattr(made, name) == getattr(expected, name), name


@compiled_only
def test_a_tensor_with_a_slot_it_does_not_set_is_refused():
    class Wider(Tensor):
        __slots__ = ("_extra",)
    try:
        with pytest.raises(TypeError, match="dispatch.c sets the slots"):
            bind_module.set_up(COMPILED, python_bind, tensor=Wider)
        assert rill.ones(2).__add__(rill.ones(2)).numpy().tolist() == [2.0, 2.0]  # handed over
    finally:
        bind_module.set_up(COMPILED, python_bind)
    made = COMPILED.bind(P["add"], rill.ones(2), rill.ones(2))
    assert type(made) is Tensor


@compiled_only
def test_under_no_grad_nothing_is_recorded():
    w = rill.ones(3, requires_grad=True)
    with rill.no_grad():
        y = COMPILED.bind(P["multiply"], w, w)
    assert not y.requires_grad and y._node is None


@compiled_only
def test_a_parameter_is_taken_as_a_tensor_and_an_unregistered_subclass_is_handed_over():
    class Odd(Tensor):
        __slots__ = ()
    p = rill.nn.Parameter(rill.ones(3))
    odd = Odd.__new__(Odd)
    for slot in Tensor.__slots__[:-1]:
        setattr(odd, slot, getattr(rill.ones(3), slot))
    for a in (p, odd):
        y = COMPILED.bind(P["add"], a, a)
        assert type(y) is Tensor and y.numpy().tolist() == [2.0, 2.0, 2.0]
    (COMPILED.bind(P["multiply"], p, p)).sum().backward()
    assert p.grad.numpy().tolist() == [2.0, 2.0, 2.0]


# ---- errors --------------------------------------------------------------------------------


def _raised(fn):
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the test compares whatever is raised
        return e
    raise AssertionError("nothing raised")


@compiled_only
@pytest.mark.parametrize("call,kind", [
    (lambda: rill.ones(3) + rill.ones(4), ShapeError),
    (lambda: rill.ones(3).sum(axis=5), Error),
    (lambda: rill.ones(3).sum(axis="a"), ArgumentError),
    (lambda: bind_module.bind(P["add"], rill.ones(3), rill.ones(3), nonsense=1), ArgumentError),
    (lambda: rill.ones(3, dtype=rill.bool) - rill.ones(3, dtype=rill.bool), DTypeError),
    (lambda: rill.ones(3) + [1, 2], ShapeError),
    (lambda: rill.ones(3) + object(), ArgumentError),
    (lambda: rill.take(rill.ones(3), rill.tensor([7])), Error),  # the kernel's IndexError
], ids=["shapes", "axis", "attr-type", "unknown-attr", "dtype", "list", "object", "kernel"])
def test_errors_are_the_python_binds_errors(call, kind, python_binds):
    compiled = _raised(call)
    python_binds()
    reference = _raised(call)
    assert isinstance(compiled, kind), compiled
    assert type(compiled) is type(reference) and str(compiled) == str(reference)
    assert compiled.op == reference.op
    assert type(compiled.__cause__) is type(reference.__cause__)


@compiled_only
def test_an_error_is_raised_at_the_callers_line():
    def user_code():
        return rill.ones(3) + rill.ones(4)  # the line the error names
    error = _raised(user_code)
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if f.name == "user_code"]
    assert mine and "the line the error names" in mine[0].line


# ---- what is handed over ---------------------------------------------------------------------


@compiled_only
def test_autocast_and_captures_and_several_results_run_in_the_python_bind(monkeypatch):
    seen = []

    def spy(prim, *args, **attrs):
        seen.append(prim.name)
        return python_bind(prim, *args, **attrs)
    # dispatch.c calls the `python_bind` it was set up with: swap in a spy through setup
    _setup_with(spy)
    try:
        x = rill.ones(2, 3)
        seen.clear()
        x + x
        rill.zeros(3)
        rill.arange(4).to("cpu")
        x.sum(axis=0)
        assert seen == []                              # the common case: compiled
        with rill.amp.autocast("cpu", dtype=rill.bfloat16):
            x @ x.T
        assert "matmul" in seen
        seen.clear()
        rill.capture(lambda a: a * 2)(x)
        assert "multiply" in seen
        seen.clear()
        rill.split(x, 1, axis=1)  # three results
        assert seen
    finally:
        _setup_with(python_bind)


def _setup_with(fallback):
    bind_module.set_up(COMPILED, fallback)


# ---- references ----------------------------------------------------------------------------


@compiled_only
def test_no_reference_is_leaked_on_any_path():
    x = rill.ones(4)
    w = rill.ones(4, requires_grad=True)
    i = rill.tensor([1, 2, 3, 4])
    add, total = P["add"], rill.ops.primitive.PRIMITIVES["sum"]
    watched = [x, w, i, x._data, w._data, add, total, x.device, x.dtype]

    def many():
        for _ in range(2000):
            COMPILED.bind(add, x, w)
            COMPILED.bind(add, x, 2.0)
            COMPILED.bind(total, w, axis=0, keepdims=False)
            COMPILED.bind(add, i, i)
            for bad in ((add, x, rill.ones(3)), (total, x)):
                try:
                    COMPILED.bind(*bad, axis=9) if bad[0] is total else COMPILED.bind(*bad)
                except Error:
                    pass
    many()  # warm: caches filled
    before = [sys.getrefcount(o) for o in watched]
    many()
    assert [sys.getrefcount(o) for o in watched] == before


def test_without_compiled_code_bind_is_the_python_function(tmp_path):
    env = dict(os.environ, RILL_NATIVE="0")
    code = ("import rill, rill.eager.bind as b; "
            "print(b.bind is b.python_bind, (rill.ones(2, requires_grad=True) * 3).sum().item())")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "6.0"]


# ---- operators -----------------------------------------------------------------------------

OPERATORS = sorted(name for name, value in vars(Tensor).items()
                   if type(value).__name__ == "Operator")


@compiled_only
def test_the_binary_operators_are_compiled():
    assert {"__add__", "__radd__", "__sub__", "__mul__", "__truediv__", "__pow__", "__lt__",
            "__and__"} <= set(OPERATORS)


@compiled_only
@pytest.mark.parametrize("name", OPERATORS)
def test_an_operator_is_its_op_function(name):
    method = getattr(Tensor, name)
    fn = method.__wrapped__
    assert method.__name__ == fn.__name__ and method.__doc__ == fn.__doc__
    # what the operator skips is exactly `bind(P[name], x, y)`: nothing else happens there
    code = inspect.unwrap(fn).__code__
    assert code.co_names == ("bind", "P") and code.co_consts[-1] == fn.__name__
    assert code.co_argcount == 2
    reflected = name.startswith("__r") and name != "__rshift__"
    f32 = rill.tensor(np.linspace(-1, 2, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    ints = rill.tensor(np.arange(1, 4))
    flags = rill.tensor([True, False, True])
    for x, y in [(f32, f32), (f32, ints), (ints, f32), (ints, 2.5), (f32, 3), (ints, ints),
                 (ints, 2), (flags, flags), (flags, ints), (f32, rill.ones(3, dtype=rill.float64)),
                 (f32, np.float32(2.0)), (f32, "a"), (ints, None), (f32, rill.ones(4))]:
        want = _outcome(fn, *((y, x) if reflected else (x, y)))
        assert _outcome(method, x, y) == want
        assert _outcome(getattr(x, name), y) == want  # the operator as a bound method
    with pytest.raises(TypeError):
        method(f32)  # the op function's own TypeError: an argument missing


def _outcome(fn, *args):
    """What fn(*args) gives or raises, comparable (one line for every call: an error's
    message names the caller's line)."""
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - the test compares whatever is raised
        return "raised", type(e), str(e)
    if not isinstance(out, Tensor):
        return "value", out
    return "value", out.dtype, out.shape, out.requires_grad, out.numpy().tobytes()


@compiled_only
def test_operators_record_gradients_as_the_op_functions_do():
    w = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (2.0 * w / (1.0 + w) - w * w + 3.0 - (w - 1.0)).sum().backward()
    x = w.numpy().astype(np.float64)
    np.testing.assert_allclose(w.grad.numpy(), 2 / (1 + x) ** 2 - 2 * x - 1, rtol=1e-6)


# ---- the compiled bind's own rule cache -----------------------------------------------------

# Run with RILL_CHECK_KERNELS off (the suite sets it, and under it every call asks the rule
# and the attrs' check again, comparing with what dispatch.c remembered): here remembered
# answers are what calls get, so what a key must tell apart is tried from the cache.
_DISPATCH_CACHE = r"""
import numpy as np, rill
from rill import dtypes as dt
from rill.eager import bind as B
from rill.ops import attrs as A
from rill.ops.primitive import Primitive
from rill.ops.promotion import lift
asked = []

def kind_of(int_input, value):  # a rule reading an attr's type and the default float dtype
    if type(value) is int:
        return rill.int64
    return dt.default_float if int_input else rill.float32

def infer(x, *, value, flag, axes):
    asked.append(value)
    return x.shape, kind_of(x.dtype.kind == "i", value)

prim = Primitive("dispatch_cache_probe", infer, normalize=lift,
                 attrs={"value": A.FLOAT, "flag": A.BOOL, "axes": A.TupleOf(A.INT)})
prim.kernels["cpu"] = lambda x, value, flag, axes: np.zeros(
    x.shape, kind_of(x.dtype.kind == "i", value).storage)
x, i = rill.ones(3), rill.arange(3)
bind = B._COMPILED.bind
ok = dict(flag=False, axes=(0,))
for _ in range(3):  # the rule is asked once per distinct call; the rest are remembered
    assert bind(prim, x, value=1, **ok).dtype is rill.int64
    assert bind(prim, x, value=1.0, **ok).dtype is rill.float32  # 1 == 1.0: the type tells
    assert bind(prim, x, value=1.0, flag=True, axes=(0,)).shape == (3,)
    assert bind(prim, rill.ones(4), value=1.0, **ok).shape == (4,)
assert len(asked) == 4, asked
assert len(prim.dispatch_cache) == 4, len(prim.dispatch_cache)
refused = 0
for bad in [dict(value=1.0, flag=1, axes=(0,)), dict(value=True, **ok),
            dict(value=1.0, flag=False, axes=(False,)), dict(value=1.0, flag=False, axes=(0.0,)),
            dict(value=1.0, flag=False, axes=[0]), dict(value="1", **ok),
            dict(value=1.0, other=2, **ok), dict(**ok)]:
    for _ in range(2):  # refused every time, never answered from the entry it equals
        try:
            bind(prim, x, **bad)
        except rill.Error:
            refused += 1
assert refused == 16, refused
assert len(prim.dispatch_cache) == 4, len(prim.dispatch_cache)
rill.set_default_dtype(rill.float64)  # a rule may read it: part of the key
assert bind(prim, i, value=1.0, **ok).dtype is rill.float64
rill.set_default_dtype(rill.float32)
assert bind(prim, i, value=1.0, **ok).dtype is rill.float32
for n in range(1, 300):  # bounded: a program making new shapes all the time starts over
    bind(prim, rill.ones(n), value=1.0, **ok)
assert 0 < len(prim.dispatch_cache) <= 256, len(prim.dispatch_cache)
from rill.ops.indexing import getitem_p  # an index key: tagged entries, tuples in a tuple
t = rill.arange(6).reshape(2, 3)
for _ in range(2):
    assert bind(getitem_p, t, key=(("int", 1),)).tolist() == [3, 4, 5]
    assert bind(getitem_p, t, key=(("slice", 0, 1, None),)).shape == (1, 3)
for bad in [(("int", True),), (("int", 1.0),), (("int", np.int64(1)),),
            (("slice", 0, True, None),), (("slice", 0, 1.0, None),)]:
    for _ in range(2):
        try:
            bind(getitem_p, t, key=bad)
            raise SystemExit(f"accepted {bad}")
        except rill.Error:
            pass
print("ok")
"""


@compiled_only
def test_the_compiled_bind_remembers_rule_answers_by_attr_types_too():
    env = dict(os.environ, RILL_CHECK_KERNELS="0")
    done = subprocess.run([sys.executable, "-c", _DISPATCH_CACHE], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


@compiled_only
def test_a_remembered_answer_the_rule_no_longer_gives_fails_the_check():
    """Under the suite's check mode every call asks again and compares with dispatch.c's
    entry: a rule reading state outside its inputs, attrs and default dtype is caught."""
    from rill.ops import attrs as A
    from rill.ops.primitive import Primitive
    from rill.ops.promotion import lift
    rows = [2]
    prim = Primitive("dispatch_stateful_probe", lambda x, *, k: ((rows[0],), rill.float32),
                     normalize=lift, attrs={"k": A.INT})
    prim.kernels["cpu"] = lambda x, k: np.zeros(rows[0], np.float32)
    x = rill.ones(3)
    assert COMPILED.bind(prim, x, k=1).shape == (2,)
    assert len(prim.dispatch_cache) == 1
    rows[0] = 5
    prim.rule_cache = None  # so the rule itself answers (eager/rule_cache.py has its own check)
    with pytest.raises(AssertionError, match="dispatch_stateful_probe.*dispatch.c"):
        COMPILED.bind(prim, x, k=1)
