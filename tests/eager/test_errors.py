"""rill's error contract.

Every error a user can cause is a `rill.Error` subclass; bad input is caught by the op's
shape/dtype rule before any kernel runs; the message starts with the op's name (also in
`e.op`), says what was expected and what was given, and ends with the user's file and line
(`e.location`, e.g. 'test_errors.py:123'); framework frames are hidden from printed
tracebacks unless RILL_TRACEBACK=full.

Most cases are one-line lambdas: the line that makes the failing call is the lambda's own
line, `fn.__code__.co_firstlineno`. Multi-statement cases put `line = next_line()` right
above the failing call.
"""
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import textwrap

import pytest

import rill
from rill.ops.primitive import PRIMITIVES

THIS_FILE = os.path.basename(__file__)
RILL_LIB = os.path.dirname(os.path.abspath(rill.__file__))

ERROR_CLASSES = [rill.ShapeError, rill.DTypeError, rill.DeviceError, rill.IndexingError,
                 rill.ArgumentError, rill.GradientError, rill.KernelError]


# ---- helpers -------------------------------------------------------------------------------


def next_line() -> int:
    """The line number just below the caller's line."""
    return inspect.currentframe().f_back.f_lineno + 1


def check(e, cls, op, line, *mentions):
    """e is exactly a `cls`, names `op`, points at this file's `line`, and mentions each text."""
    text = str(e)
    assert type(e) is cls, f"expected {cls.__name__}, got {type(e).__name__}: {text}"
    assert e.op == op, text
    assert text.startswith(f"{op}:"), text
    assert e.location == f"{THIS_FILE}:{line}", text
    assert e.location in text
    for m in mentions:
        assert m in text, f"{m!r} not in {text!r}"


def raised(fn):
    """(the rill.Error that fn() raised, the line of fn: the line that made the call)."""
    with pytest.raises(rill.Error) as info:
        fn()
    return info.value, fn.__code__.co_firstlineno


@pytest.fixture
def kernel_calls(monkeypatch):
    """Names of the primitives whose CPU kernels ran while the test used this fixture."""
    calls = []

    def spy(name, kernel):
        def run(*args, **kwargs):
            calls.append(name)
            return kernel(*args, **kwargs)
        return run

    for name, prim in PRIMITIVES.items():
        if "cpu" in prim.kernels:
            monkeypatch.setitem(prim.kernels, "cpu", spy(name, prim.kernels["cpu"]))
    return calls


def case(fn, op, *mentions, id, marks=()):
    return pytest.param(fn, op, mentions, id=id, marks=marks)


def rule_error_test(cls, fn, op, mentions, kernel_calls):
    e, line = raised(fn)
    check(e, cls, op, line, *mentions)
    # Caught by the shape/dtype rule: the op's kernel never ran, no kernel error is chained.
    assert op not in kernel_calls
    assert e.__cause__ is None


def o(*shape):
    return rill.ones(*shape)


# ---- class hierarchy -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_is_a_rill_error(cls):
    assert issubclass(cls, rill.Error)
    assert issubclass(cls, Exception)


@pytest.mark.parametrize("cls, builtin", [
    (rill.ShapeError, ValueError),
    (rill.DTypeError, TypeError),
    (rill.IndexingError, IndexError),
    (rill.ArgumentError, ValueError),
], ids=lambda v: v.__name__)
def test_error_class_is_also_the_matching_builtin(cls, builtin):
    assert issubclass(cls, builtin)


def test_builtin_except_clauses_catch_rill_errors():
    with pytest.raises(ValueError):
        o(2, 3) + o(4)
    with pytest.raises(TypeError):
        rill.bitwise_and(o(2), o(2))
    with pytest.raises(IndexError):
        o(3)[5]


# ---- mismatched shapes ---------------------------------------------------------------------

SHAPE_CASES = [
    case(lambda: o(2, 3) + o(4), "add", "(2, 3)", "(4,)", id="add"),
    case(lambda: o(2, 3) @ o(4, 5), "matmul", "(2, 3)", "(4, 5)", id="matmul"),
    case(lambda: rill.concat([o(2, 3), o(2, 4)]), "concat", "(2, 3)", "(2, 4)", id="concat"),
    case(lambda: o(2, 3).reshape(4, 2), "reshape", "(2, 3)", "(4, 2)", id="reshape"),
    case(lambda: o(2, 3).broadcast_to((4, 3)), "broadcast_to", "(2, 3)", "(4, 3)",
         id="broadcast_to"),
    case(lambda: rill.stack([o(2, 3), o(3, 2)]), "stack", "(2, 3)", "(3, 2)", id="stack"),
    case(lambda: rill.where(rill.tensor([True, False]), o(3), o(3)), "where", "(2,)", "(3,)",
         id="where"),
]


@pytest.mark.parametrize("fn, op, mentions", SHAPE_CASES)
def test_mismatched_shapes(fn, op, mentions, kernel_calls):
    rule_error_test(rill.ShapeError, fn, op, mentions, kernel_calls)


# ---- bad axis ------------------------------------------------------------------------------

X = rill.ones(2, 3)

AXIS_CASES = [
    case(lambda: X.sum(axis=2), "sum", "axis 2", id="sum"),
    case(lambda: rill.mean(X, axis=-3), "mean", "axis -3", id="mean"),
    case(lambda: X.argmax(axis=2), "argmax", "axis 2", id="argmax"),
    case(lambda: X.cumsum(axis=5), "cumsum", "axis 5", id="cumsum"),
    case(lambda: X.squeeze(0), "squeeze", "axis 0", "length 2", id="squeeze-non-1-axis"),
    case(lambda: X.squeeze(3), "squeeze", "axis 3", id="squeeze-out-of-range"),
    case(lambda: rill.split(X, 2, axis=3), "split", "axis 3", id="split"),
    case(lambda: rill.concat([X, X], axis=2), "concat", "axis 2", id="concat"),
    case(lambda: X.sort(axis=2), "sort", "axis 2", id="sort"),
    # repeated axes
    case(lambda: X.sum(axis=(0, 0)), "sum", "repeated", id="sum-repeated"),
    case(lambda: X.mean(axis=(1, -1)), "mean", "repeated", id="mean-repeated-negative"),
    case(lambda: X.max(axis=[0, 0]), "max", "repeated", id="max-repeated-list"),
    case(lambda: o(1, 3).squeeze((0, 0)), "squeeze", "repeated", id="squeeze-repeated"),
]


@pytest.mark.parametrize("fn, op, mentions", AXIS_CASES)
def test_bad_axis(fn, op, mentions, kernel_calls):
    rule_error_test(rill.ShapeError, fn, op, mentions, kernel_calls)


MORE_AXIS_CASES = [
    case(lambda: X.topk(1, axis=2), "topk", "axis 2", id="topk"),
    case(lambda: X.roll(1, axis=2), "roll", "axis 2", id="roll"),
    case(lambda: X.take_along_axis(rill.tensor([[0]]), axis=2), "take_along_axis", "axis 2",
         id="take_along_axis"),
    case(lambda: X.flip(axis=2), "flip", "axis 2", id="flip"),
    case(lambda: X.take(rill.tensor([0]), axis=2), "take", "axis 2", id="take"),
    case(lambda: X.swapaxes(0, 2), "swapaxes", "axis 2", id="swapaxes"),
    case(lambda: X.moveaxis(0, 2), "moveaxis", "axis 2", id="moveaxis"),
    case(lambda: X.flatten(0, 2), "flatten", "axis 2", id="flatten"),
    case(lambda: rill.repeat(X, 2, axis=2), "repeat", "axis 2", id="repeat"),
    case(lambda: rill.stack([X, X], axis=4), "stack", "axis 4", id="stack"),
]


@pytest.mark.parametrize("fn, op, mentions", MORE_AXIS_CASES)
def test_bad_axis_other_ops(fn, op, mentions, kernel_calls):
    rule_error_test(rill.ShapeError, fn, op, mentions, kernel_calls)


# ---- wrong dtype ---------------------------------------------------------------------------

DTYPE_CASES = [
    case(lambda: rill.bitwise_and(o(3), o(3)), "bitwise_and", "float32", id="bitwise_and"),
    case(lambda: o(3) & o(3), "bitwise_and", "float32", id="bitwise_and-operator"),
    case(lambda: rill.tensor([True]) - rill.tensor([False]), "subtract", "bool",
         id="subtract-bool"),
    case(lambda: rill.arange(3).requires_grad_(), "requires_grad_", "int64",
         id="requires_grad_-int"),
    case(lambda: rill.tensor([1, 2], requires_grad=True), "requires_grad_", "int64",
         id="tensor-requires_grad-int"),
    case(lambda: rill.grad(lambda a: (a * a).sum())(rill.arange(3)), "grad", "int64",
         id="grad-of-int-argument"),
    case(lambda: rill.one_hot(rill.tensor([0.0, 1.0]), 3), "one_hot", "float32",
         id="one_hot-floats"),
]


@pytest.mark.parametrize("fn, op, mentions", DTYPE_CASES)
def test_wrong_dtype(fn, op, mentions, kernel_calls):
    rule_error_test(rill.DTypeError, fn, op, mentions, kernel_calls)


# A float index is an index of an unsupported kind: IndexingError (an IndexError), as in
# NumPy and PyTorch.
@pytest.mark.parametrize("fn", [
    pytest.param(lambda: X[rill.tensor([0.0, 1.0])], id="float-tensor"),
    pytest.param(lambda: X[[0.0, 1.0]], id="float-list"),
])
def test_float_index_tensor(fn, kernel_calls):
    rule_error_test(rill.IndexingError, fn, "getitem", ("float32",), kernel_calls)


# ---- autodiff misuse -----------------------------------------------------------------------


def test_backward_of_non_scalar_needs_grad():
    y = rill.ones(2, 3, requires_grad=True) * 2
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        y.backward()
    check(info.value, rill.GradientError, "backward", line, "(2, 3)", "grad")


def test_backward_with_grad_of_wrong_shape():
    y = rill.ones(3, requires_grad=True) * 2
    with pytest.raises(rill.ShapeError) as info:
        line = next_line()
        y.backward(rill.ones(4))
    check(info.value, rill.ShapeError, "backward", line, "(4,)", "(3,)")


def test_backward_of_argmax():
    x = rill.tensor([1.0, 3.0, 2.0], requires_grad=True)
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        x.argmax().backward()
    check(info.value, rill.GradientError, "backward", line, "argmax")


def test_backward_through_argmax_cast_to_float():
    x = rill.tensor([1.0, 3.0, 2.0], requires_grad=True)
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        x.argmax().astype(rill.float32).backward()
    check(info.value, rill.GradientError, "backward", line, "argmax")


def test_grad_through_argmax_cast_to_float():
    x = rill.tensor([1.0, 3.0, 2.0])
    f = rill.grad(lambda v: v.argmax().astype(rill.float32))
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        f(x)
    check(info.value, rill.GradientError, "grad", line, "argmax")


def test_backward_twice_without_retain_graph():
    x = rill.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        y.backward()
    check(info.value, rill.GradientError, "backward", line, "retain_graph")


def test_backward_twice_with_retain_graph_is_fine():
    x = rill.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]


def _add_one(w):
    w += 1


def _set_first(w):
    w[0] = 5.0


@pytest.mark.parametrize("change", [_add_one, _set_first], ids=["iadd", "setitem"])
def test_in_place_change_of_leaf_that_requires_grad(change):
    w = rill.ones(3, requires_grad=True)
    with pytest.raises(rill.GradientError) as info:
        change(w)
    line = change.__code__.co_firstlineno + 1  # the in-place statement in the helper
    check(info.value, rill.GradientError, "in-place", line, "leaf")
    assert w.tolist() == [1.0, 1.0, 1.0]


def test_in_place_change_of_leaf_under_no_grad_is_fine():
    w = rill.ones(3, requires_grad=True)
    with rill.no_grad():
        w += 1
    assert w.tolist() == [2.0, 2.0, 2.0]


def test_input_changed_in_place_after_use():
    w = rill.ones(3, requires_grad=True)
    x = rill.ones(3)
    y = w * x
    x += 1
    with pytest.raises(rill.GradientError) as info:
        line = next_line()
        y.sum().backward()
    check(info.value, rill.GradientError, "backward", line, "multiply", "in place")


# ---- devices -------------------------------------------------------------------------------


@pytest.mark.parametrize("fn, op", [
    pytest.param(lambda: rill.ones(3) + rill.ones(3).to("cpu:1"), "add", id="add"),
    pytest.param(lambda: rill.ones(3).to("cpu:1") * rill.ones(3), "multiply", id="multiply"),
    pytest.param(lambda: rill.ones(2, 3) @ rill.ones(3, 2).to("cpu:1"), "matmul", id="matmul"),
    pytest.param(lambda: rill.concat([rill.ones(3), rill.ones(3).to("cpu:1")]), "concat",
                 id="concat"),
])
def test_mixed_devices(fn, op, kernel_calls):
    e, line = raised(fn)
    check(e, rill.DeviceError, op, line)
    assert sorted(set(re.findall(r"cpu(?::\d+)?", e.message))) == ["cpu", "cpu:1"], str(e)
    assert op not in kernel_calls


_GPU_UNAVAILABLE = """
import os, sys
os.environ.pop("RILL_TRITON_INTERPRET", None)
import rill
cases = {"device": lambda: rill.device("gpu"), "device-index": lambda: rill.device("gpu:0"),
         "ones": lambda: rill.ones(3, device="gpu"), "to": lambda: rill.ones(3).to("gpu")}
try:
    cases[sys.argv[1]]()
except rill.DeviceError as e:
    print(repr(e.op)); print(e.location); print(str(e))
else:
    print("NO ERROR")
"""


def _gpu_error_outside_interpreter(case):
    """What asking for a gpu says on this machine without the interpreter (a fresh process:
    the test session itself runs the gpu device interpreted)."""
    env = {k: v for k, v in os.environ.items() if k != "RILL_TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", _GPU_UNAVAILABLE, case], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("NO ERROR"):
        pytest.skip("this machine has a GPU")
    return out.stdout.splitlines()


@pytest.mark.parametrize("case", ["device", "device-index", "ones", "to"])
def test_gpu_unavailable_says_what_is_missing(case):
    op, location, message = _gpu_error_outside_interpreter(case)[:3]
    assert op == "'device'"
    assert message.startswith("device:") and "'gpu" in message
    assert location.startswith("<string>:") and location in message
    expected = [f"{name} is not installed" for module, name in (("triton", "Triton"),
                                                                 ("cupy", "CuPy"))
                if importlib.util.find_spec(module) is None]
    for missing in expected:
        assert missing in message
    assert expected, "CuPy or Triton is missing here, else the GPU would be usable"
    assert "RILL_TRITON_INTERPRET=1" in message  # the way out, named


# ---- indexing ------------------------------------------------------------------------------

INDEX_CASES = [
    case(lambda: X[5], "getitem", "5", "size 2", id="int"),
    case(lambda: X[-3], "getitem", "-3", id="negative-int"),
    case(lambda: X[:, 3], "getitem", "3", "axis 1", id="int-on-axis-1"),
    case(lambda: X[0, 0, 0], "getitem", "too many", id="too-many"),
    case(lambda: X[rill.tensor([0, 7])], "getitem", "7", id="array"),
    case(lambda: X[:, rill.tensor([0, 3])], "getitem", "3", "axis 1", id="array-on-axis-1"),
    case(lambda: X.__setitem__(5, 1.0), "index_set", "5", id="setitem"),
]


@pytest.mark.parametrize("fn, op, mentions", INDEX_CASES)
def test_index_out_of_range(fn, op, mentions):
    e, line = raised(fn)
    check(e, rill.IndexingError, op, line, *mentions)
    assert isinstance(e, IndexError)


# ---- bad attribute values ------------------------------------------------------------------

ARGUMENT_CASES = [
    case(lambda: o(3).pad(1, mode="bogus"), "pad", "'bogus'", "constant", id="pad-mode"),
    case(lambda: rill.gelu(o(3), approximate="bogus"), "gelu", "'bogus'", "tanh",
         id="gelu-approximate"),
    case(lambda: rill.arange(0, 5, 0), "arange", "step", id="arange-step-0"),
    case(lambda: rill.arange(0.0, 1.0, 0.0), "arange", "step", id="arange-float-step-0"),
    case(lambda: rill.randint(5, 5, (3,)), "randint", "low < high", "5", id="randint-equal"),
    case(lambda: rill.randint(5, 2, (3,)), "randint", "low < high", "2", id="randint-below"),
    case(lambda: rill.norm(o(3, 3), ord="nuc"), "norm", "'nuc'", id="norm-nuc"),
]


@pytest.mark.parametrize("fn, op, mentions", ARGUMENT_CASES)
def test_bad_attribute_value(fn, op, mentions, kernel_calls):
    rule_error_test(rill.ArgumentError, fn, op, mentions, kernel_calls)


# ---- kernel failures the rule cannot see ---------------------------------------------------


@pytest.mark.parametrize("fn", [
    pytest.param(lambda: rill.tensor([2, 3]) ** rill.tensor([-1, 2]), id="tensor"),
    pytest.param(lambda: rill.power(rill.tensor([2, 3]), -2), id="scalar-exponent"),
])
def test_int_to_negative_int_power_is_a_kernel_error(fn, kernel_calls):
    e, line = raised(fn)
    check(e, rill.KernelError, "power", line, "negative")
    assert "power" in kernel_calls  # the rule passed it; the kernel refused


# ---- location is the innermost user frame --------------------------------------------------


def _user_helper(a, b):
    return a @ b  # the error points here


def test_location_is_innermost_user_frame():
    e, _ = raised(lambda: _user_helper(o(2, 3), o(4, 5)))
    check(e, rill.ShapeError, "matmul", _user_helper.__code__.co_firstlineno + 1)


# ---- printed tracebacks --------------------------------------------------------------------

SCRIPT = textwrap.dedent("""\
    import rill
    x = rill.ones(2, 3)
    y = x + rill.ones(4)
    """)


def _run_script(tmp_path, **env):
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    environ = {k: v for k, v in os.environ.items() if k != "RILL_TRACEBACK"}
    environ.update(env)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=environ, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "ShapeError" in proc.stderr and "add: cannot broadcast" in proc.stderr
    assert 'user_script.py", line 3' in proc.stderr
    assert "[at user_script.py:3]" in proc.stderr
    return proc.stderr


def test_traceback_hides_framework_frames(tmp_path):
    stderr = _run_script(tmp_path)
    assert "bind.py" not in stderr
    assert RILL_LIB not in stderr


def test_full_traceback_on_request(tmp_path):
    stderr = _run_script(tmp_path, RILL_TRACEBACK="full")
    assert "bind.py" in stderr
    assert RILL_LIB in stderr


@pytest.mark.parametrize("make", [
    lambda: rill.tile(rill.ones(3), (10 ** 12,)),
    lambda: rill.ones(3).repeat(10 ** 12),
    lambda: rill.tile(rill.ones(3), (10 ** 12, 10 ** 12)),
    lambda: rill.capture(lambda a: rill.tile(a, (10 ** 12,)))(rill.ones(3)),
])
def test_a_result_too_large_to_allocate_is_a_rill_error_naming_the_op(make):
    """A resource bomb (the probe: tile with 10^12 repetitions) fails at the user's line as a
    rill error that is also a MemoryError, naming the op and the size."""
    with pytest.raises(rill.OutOfMemoryError) as caught:
        make()
    assert isinstance(caught.value, MemoryError)
    assert "could not allocate" in str(caught.value)
    assert caught.value.op.split()[0] in ("tile", "reshape", "repeat") and \
        "test_errors.py" in str(caught.value)
