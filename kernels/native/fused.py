"""A fused elementwise group (lib/capture/passes/fuse.py) as one C loop, generated from its
body graph, compiled once per machine (build.load_generated) and run by
kernels/numpy/fused.py:run_fused in place of the group's NumPy calls.

Each element of the group's outputs is computed in one pass, its intermediates in registers:
where the NumPy fused function streams every intermediate array through memory once per op
(relu's gradient `where(x > 0, g, 0)`: a boolean array written and read back), this reads
each input once and writes each output once.

Same bits as the NumPy kernels, so whether a call runs this or the NumPy function never
changes a result: only ops whose C meaning is exactly their NumPy kernel's are generated
(IEEE +, -, *, / and sqrt are correctly rounded in both; comparisons, selects, sign and
exact casts), each in the dtype NumPy computes it in, with no FMA contraction
(build.FLAGS). maximum/minimum/relu are left out (NumPy's vector loops and a C select
disagree on which zero `max(-0.0, 0.0)` gives), as are transcendentals (exp, tanh: libm and
NumPy's own SIMD code differ in the last bit) and integers (C's overflow is undefined).
Inputs may broadcast as 0-d scalars or as trailing blocks: an input whose shape, leading 1s
dropped, is the result's last axes (a bias (512,) beside (16, 64, 512), an attention mask
(64, 64) beside (16, 4, 64, 64); 16 elements or more) is read at the element's offset within
its block; the loop then runs row by row over the largest such block. A group with any
other op, or other broadcasting, has no C source and runs in NumPy. One freedom is left to
the compiler, as to NumPy's own loops: where two NaNs meet in an op (NaN + -NaN), which
one's sign and payload the result takes (IEEE 754 does not say; a + b and b + a are the same
op to both). NaN stays NaN.

The first call of a new group starts its compile on a background thread (~0.3 s) and runs
the NumPy function meanwhile (the same bits): a step never waits for the compiler.

Trust: the source holds names made here (x0, v3, y1), C types and operators from the tables
below, float literals written with float.hex() from the validated attributes of the node,
and block sizes, products of the values' shapes (ints a loaded graph's schema checked, each
>= 0, under 2^48 in all); nothing is text taken from the graph, so a loaded graph cannot put
code in it.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from rill import cpu_memory
from rill.kernels.native import build
from rill.kernels.numpy import parallel

# Wait for a compile instead of running the NumPy function meanwhile (the test suite sets
# RILL_NATIVE_WAIT=1, so that its fused groups run the C loops from their first call).
WAIT = os.environ.get("RILL_NATIVE_WAIT", "0") == "1"

_C_TYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.bool_): "unsigned char"}
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# The buffer protocol's format of each, as NumPy exports a native-order array: C string
# literals for the generated source (a byte-swapped array's "<f"/">f" is refused there).
_FORMAT = {np.dtype(np.float32): '"f"', np.dtype(np.float64): '"d"', np.dtype(np.bool_): '"?"'}

# op -> (operand kinds: "same" (every operand the result's float dtype), "compare" (float
# operands of one dtype, a bool result), "bool" (bool operands and result)), C expression
_BINARY = {"add": "{0} + {1}", "subtract": "{0} - {1}", "multiply": "{0} * {1}",
           "divide": "{0} / {1}"}
_COMPARE = {"greater": ">", "greater_equal": ">=", "less": "<", "less_equal": "<=",
            "equal": "==", "not_equal": "!="}
_LOGICAL = {"logical_and": "{0} && {1}", "logical_or": "{0} || {1}",
            "logical_xor": "!{0} != !{1}", "logical_not": "!{0}",
            # on booleans NumPy's bitwise ops are these logical ones (any nonzero byte true)
            "bitwise_and": "{0} && {1}", "bitwise_or": "{0} || {1}",
            "bitwise_xor": "!{0} != !{1}", "bitwise_invert": "!{0}"}
_UNARY = {"neg": "-{0}", "square": "{0} * {0}", "reciprocal": "({t})1 / {0}",
          "sqrt": "{sqrt}({0})", "abs": "{fabs}({0})"}
_SQRT = {"float": "sqrtf", "double": "sqrt"}
_FABS = {"float": "fabsf", "double": "fabs"}


def _dtype(value) -> np.dtype:
    return np.dtype(value.dtype.storage)


def _literal(x: float, ctype: str) -> str:
    """An exact C literal for a float attribute (hex: no decimal rounding)."""
    x = float(x)
    if not math.isfinite(x):
        raise _NotC("non-finite literal")
    return f"(({ctype}){x.hex()})"


class _NotC(Exception):
    """The group has no exact C form; it runs in NumPy."""


def _expression(node, args) -> str:
    out = _dtype(node.outputs[0])
    ins = [_dtype(v) for v in node.inputs]
    t = _C_TYPE.get(out)
    op = node.op
    if op in _BINARY or op in _UNARY or op == "scaled_add":
        if out not in _FLOATS or any(d != out for d in ins):
            raise _NotC(op)
        if op == "scaled_add":
            alpha, beta = (_literal(node.attrs[k], t) for k in ("alpha", "beta"))
            if float(node.attrs["alpha"]) == 1.0:  # as the NumPy kernel: y * beta + x
                return f"{args[1]} * {beta} + {args[0]}"
            return f"{args[0]} * {alpha} + {args[1]} * {beta}"
        if op in _BINARY:
            return _BINARY[op].format(*args)
        return _UNARY[op].format(*args, t=t, sqrt=_SQRT[t], fabs=_FABS[t])
    if op in _COMPARE:
        if out != np.bool_ or ins[0] not in _FLOATS or ins[1] != ins[0]:
            raise _NotC(op)
        return f"{args[0]} {_COMPARE[op]} {args[1]}"
    if op in _LOGICAL:
        if out != np.bool_ or any(d != np.bool_ for d in ins):
            raise _NotC(op)
        return _LOGICAL[op].format(*args)
    if op == "relu_grad":  # g where x > 0, else 0: as the compiled kernel's loop
        if out not in _FLOATS or any(d != out for d in ins):
            raise _NotC(op)
        return f"{args[1]} > 0 ? {args[0]} : ({t})0"
    if op == "where":
        if ins[0] != np.bool_ or ins[1] != out or ins[2] != out or out not in _C_TYPE:
            raise _NotC(op)
        return f"{args[0]} ? {args[1]} : {args[2]}"
    if op == "cast":
        if out not in _C_TYPE or ins[0] not in _C_TYPE or out == ins[0]:
            raise _NotC(op)
        if out == np.bool_:
            return f"{args[0]} != 0"
        if ins[0] == np.bool_:  # any nonzero byte is True, so 1
            return f"({t})({args[0]} != 0)"
        return f"({t}){args[0]}"
    raise _NotC(op)


def _block(input_shape, shape) -> int | None:
    """How the loop reads an input of `input_shape` beside a result of `shape`: 0 for one
    element per element (the result's shape), else the size of the block it repeats (1: a
    0-d scalar; a trailing block: the result's last axes, leading 1s dropped); None where
    it broadcasts otherwise."""
    input_shape = tuple(input_shape)
    if input_shape == shape:
        return 0
    trailing = input_shape[next((k for k, d in enumerate(input_shape) if d != 1),
                                len(input_shape)):]
    if len(input_shape) > len(shape) or shape[len(shape) - len(trailing):] != trailing:
        return None
    size = math.prod(trailing)
    return size if size == 1 or size >= MIN_BLOCK else None


# The smallest trailing block a loop reads (above 0-d): rows of a few elements would make
# the loop mostly row changes, where NumPy's own broadcasting runs them as fast.
MIN_BLOCK = 16


def compiles(node) -> bool:
    """Whether a group may hold `node` and keep a C form: an op of the tables above on its
    dtypes, each input 0-d, of the result's shape or a trailing block of it. The pipeline
    fuses CPU nodes only where this holds (and a compiler is at hand), so its CPU groups all
    run as C loops."""
    shape = tuple(node.outputs[0].shape)
    if not shape or any(_block(v.shape, shape) is None for v in node.inputs) or \
            any(_dtype(v) not in _C_TYPE for v in node.inputs + node.outputs):
        return False
    try:
        _expression(node, [f"a{j}" for j in range(len(node.inputs))])
    except _NotC:
        return False
    return True


def available() -> bool:
    """A C compiler may build the loops here: compiled kernels on, a compiler on PATH, and no
    generated module has failed to build in this process (then the pipeline stops fusing
    on the CPU: the NumPy fused function alone does not pay)."""
    return build.ENABLED and _have_compiler() and "fused" not in build._failures


@functools.lru_cache(maxsize=None)
def _have_compiler() -> bool:
    return shutil.which(build._compiler()[0]) is not None


def source(body) -> str | None:
    """The C module of the body's loop, or None where the group has no exact C form."""
    try:
        return _source(body)
    except _NotC:
        return None


def _source(body) -> str:
    shape = tuple(body.outputs[0].shape)
    names, lines, loads = {}, [], []
    blocks = [_block(v.shape, shape) for v in body.inputs]
    if any(b is None for b in blocks):
        raise _NotC("broadcast input")
    row = max([b for b in blocks if b > 1], default=0)  # the loop's row: the largest block
    for j, (v, b) in enumerate(zip(body.inputs, blocks)):
        d = _dtype(v)
        if d not in _C_TYPE:
            raise _NotC("input dtype")
        t = _C_TYPE[d]
        if tuple(v.shape) == ():
            loads.append(f"    const {t} x{j} = *(const {t} *)in[{j}];")
            names[v] = f"x{j}"
        else:
            loads.append(f"    const {t} *restrict p{j} = (const {t} *)in[{j}];")
            # a block repeats along the rows: the row's offset, or within a smaller block
            names[v] = f"p{j}[i]" if b == 0 else f"p{j}[0]" if b == 1 else \
                f"p{j}[j]" if b == row else f"p{j}[j % {b}]"
    if any(tuple(v.shape) != shape for v in body.outputs) or not shape:
        raise _NotC("output shape")
    k = 0
    for node in body.nodes:
        if node.op == "input":
            continue
        if len(node.outputs) != 1:
            raise _NotC("several outputs")
        v = node.outputs[0]
        t = _C_TYPE.get(_dtype(v))
        if t is None:
            raise _NotC("dtype")
        expr = _expression(node, [f"({names[a]})" for a in node.inputs])
        names[v] = f"v{k}"
        lines.append(f"        const {t} v{k} = ({t})({expr});")
        k += 1
    stores = []
    for j, v in enumerate(body.outputs):
        t = _C_TYPE[_dtype(v)]
        loads.append(f"    {t} *restrict q{j} = ({t} *)out[{j}];")
        stores.append(f"        q{j}[i] = {names[v]};")
    itemsizes = ", ".join(str(_dtype(v).itemsize) for v in body.inputs) or "0"
    out_sizes = ", ".join(str(_dtype(v).itemsize) for v in body.outputs)
    in_formats = ", ".join(_FORMAT[_dtype(v)] for v in body.inputs) or "0"
    out_formats = ", ".join(_FORMAT[_dtype(v)] for v in body.outputs)
    return _TEMPLATE.format(
        n_in=len(body.inputs), n_out=len(body.outputs), in_sizes=itemsizes,
        in_formats=in_formats, out_formats=out_formats,
        in_fixed=", ".join(map(str, blocks)) or "0", out_sizes=out_sizes, row=row,
        loads="\n".join(loads), body="\n".join(lines + stores))


# The module around the loop: run(inputs, outputs, n, start, stop[, threads]) checks every
# buffer's size against the body's specs (a 0-d input holds one element, a trailing block its
# block, the others n), then runs elements [start, stop) with the GIL released, on `threads`
# of OpenMP's team if more than 1 (the body written twice: a parallel loop whose `if` clause
# is false ran unvectorized). Where blocks repeat (ROW > 0), the elements run row by row,
# the element's offset in its row indexing the blocks: a vector loop with no division in it
# (a row cut by start or stop runs in part).
_TEMPLATE = """/* generated by rill (kernels/native/fused.py) for a fused elementwise group */
#include "common.h"
#include <omp.h>

enum {{ N_IN = {n_in}, N_OUT = {n_out} }};
static const Py_ssize_t IN_SIZE[] = {{{in_sizes}}}, OUT_SIZE[] = {{{out_sizes}}};
static const Py_ssize_t IN_FIXED[] = {{{in_fixed}}};  /* elements, or 0: n */
static const char *const IN_FORMAT[] = {{{in_formats}}}, *const OUT_FORMAT[] = {{{out_formats}}};
#define ROW ((Py_ssize_t){row})

#if {row} > 0
static void rows(char *const *in, char *const *out, Py_ssize_t start, Py_ssize_t stop)
{{
{loads}
    for (Py_ssize_t first = start; first < stop;) {{
        const Py_ssize_t base = first - first % ROW;
        const Py_ssize_t end = stop - base < ROW ? stop - base : ROW;
        _Pragma("omp simd")
        for (Py_ssize_t j = first - base; j < end; j++) {{
            const Py_ssize_t i = base + j;
{body}
        }}
        first = base + end;
    }}
}}

static void loop(char *const *in, char *const *out, Py_ssize_t start, Py_ssize_t stop,
                 int threads)
{{
    if (threads > 1) {{  /* on OpenMP's team (kernels/numpy/parallel.py:team_threads) */
        _Pragma("omp parallel num_threads(threads)")
        {{
            const Py_ssize_t n = stop - start, t = omp_get_thread_num();
            const Py_ssize_t parts = omp_get_num_threads();
            rows(in, out, start + n * t / parts, start + n * (t + 1) / parts);
        }}
    }} else {{
        rows(in, out, start, stop);
    }}
}}
#else
static void loop(char *const *in, char *const *out, Py_ssize_t start, Py_ssize_t stop,
                 int threads)
{{
{loads}
    if (threads > 1) {{  /* on OpenMP's team (kernels/numpy/parallel.py:team_threads) */
        _Pragma("omp parallel for simd num_threads(threads) schedule(simd:static)")
        for (Py_ssize_t i = start; i < stop; i++) {{
{body}
        }}
    }} else {{
        _Pragma("omp simd")
        for (Py_ssize_t i = start; i < stop; i++) {{
{body}
        }}
    }}
}}
#endif

static PyObject *run(PyObject *self, PyObject *args)
{{
    PyObject *inputs, *outputs;
    Py_ssize_t n, start, stop;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "O!O!nnn|i", &PyTuple_Type, &inputs, &PyTuple_Type, &outputs,
                          &n, &start, &stop, &threads))
        return NULL;
    if (PyTuple_GET_SIZE(inputs) != N_IN || PyTuple_GET_SIZE(outputs) != N_OUT) {{
        PyErr_SetString(PyExc_ValueError, "fused: wrong number of buffers");
        return NULL;
    }}
    Py_buffer views[N_IN + N_OUT + 1];
    char *in[N_IN + 1], *out[N_OUT];
    int held = 0, ok = check_range(start, stop, n, "elements");
    for (int j = 0; ok && j < N_IN + N_OUT; j++) {{
        const int is_out = j >= N_IN;
        PyObject *item = is_out ? PyTuple_GET_ITEM(outputs, j - N_IN)
                                : PyTuple_GET_ITEM(inputs, j);
        if (PyObject_GetBuffer(item, &views[j], is_out ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {{
            ok = 0;
            break;
        }}
        held++;
        const Py_ssize_t count = !is_out && IN_FIXED[j] ? IN_FIXED[j] : n;
        ok = check_size(&views[j], count, is_out ? OUT_SIZE[j - N_IN] : IN_SIZE[j],
                        is_out ? "output" : "input");
        if (is_out) out[j - N_IN] = views[j].buf; else in[j] = views[j].buf;
    }}
    if (ok) {{
        Py_BEGIN_ALLOW_THREADS
        loop(in, out, start, stop, threads);
        Py_END_ALLOW_THREADS
    }}
    for (int j = 0; j < held; j++) PyBuffer_Release(&views[j]);
    return ok ? none() : NULL;
}}

/* call(inputs, outputs, shapes[, threads]): the whole group in one call, every check here.
 * Each buffer must be C-contiguous, of its format (a dtype other than the body's has
 * another format or itemsize), and of the shape `shapes` gives it; else nothing runs and
 * the answer is False (the caller's checked path then decides). True when it ran. */
static PyObject *call(PyObject *self, PyObject *args)
{{
    PyObject *inputs, *outputs, *shapes;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "O!O!O!|i", &PyTuple_Type, &inputs, &PyTuple_Type, &outputs,
                          &PyTuple_Type, &shapes, &threads))
        return NULL;
    if (PyTuple_GET_SIZE(inputs) != N_IN || PyTuple_GET_SIZE(outputs) != N_OUT ||
            PyTuple_GET_SIZE(shapes) != N_IN + N_OUT) {{
        PyErr_SetString(PyExc_ValueError, "fused: wrong number of buffers");
        return NULL;
    }}
    Py_buffer views[N_IN + N_OUT + 1];
    char *in[N_IN + 1], *out[N_OUT];
    int held = 0, fits = 1;
    for (int j = 0; fits && j < N_IN + N_OUT; j++) {{
        const int is_out = j >= N_IN;
        PyObject *item = is_out ? PyTuple_GET_ITEM(outputs, j - N_IN)
                                : PyTuple_GET_ITEM(inputs, j);
        PyObject *shape = PyTuple_GET_ITEM(shapes, j);
        const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (is_out ? PyBUF_WRITABLE : 0);
        if (!PyTuple_Check(shape) || PyObject_GetBuffer(item, &views[j], flags) < 0) {{
            PyErr_Clear();  /* not contiguous, read-only, not an array: not this path */
            fits = 0;
            break;
        }}
        held++;
        const Py_buffer *v = &views[j];
        const char *format = is_out ? OUT_FORMAT[j - N_IN] : IN_FORMAT[j];
        fits = v->itemsize == (is_out ? OUT_SIZE[j - N_IN] : IN_SIZE[j]) &&
               v->format != NULL && strcmp(v->format, format) == 0 &&
               v->ndim == PyTuple_GET_SIZE(shape);
        for (int k = 0; fits && k < v->ndim; k++)
            fits = v->shape[k] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        if (is_out) out[j - N_IN] = v->buf; else in[j] = v->buf;
    }}
    if (PyErr_Occurred()) fits = 0, PyErr_Clear();  /* a shape entry not an int */
    if (fits) {{
        const Py_ssize_t n = views[N_IN].len / OUT_SIZE[0];
        Py_BEGIN_ALLOW_THREADS
        loop(in, out, 0, n, threads);
        Py_END_ALLOW_THREADS
    }}
    for (int j = 0; j < held; j++) PyBuffer_Release(&views[j]);
    return PyBool_FromLong(fits);
}}

RILL_MODULE(fused, {{"run", run, METH_VARARGS, "the group over a range of elements"}},
            {{"call", call, METH_VARARGS, "the whole group, or False where a buffer differs"}})
"""

# ---- compiling and calling -----------------------------------------------------------------

# Elements per thread's share: a loop over fewer than two such blocks runs on one core. The
# loops are memory-bound (a second core saved 10% at 401,408 elements), and in a step a
# hand-off to the other core often waits for it: BLAS's worker spins there after a GEMM
# (the MLP at batch 128: five fused nodes 0.45 ms split from 2^16 elements, ... on one).
SPLIT_BLOCK = 1 << 19

_modules: dict = {}      # source -> module, None (failed), or a Future (compiling)
_lock = threading.Lock()
_compiler_thread: ThreadPoolExecutor | None = None


def _module(text: str):
    """The compiled module of `text`, or None (not compiled yet, or failed)."""
    global _compiler_thread
    with _lock:
        found = _modules.get(text, False)
        if found is False:
            if _compiler_thread is None:
                _compiler_thread = ThreadPoolExecutor(1, thread_name_prefix="rill-compile")
            found = _modules[text] = _compiler_thread.submit(build.load_generated, "fused", text)
    if isinstance(found, Future):
        if not (WAIT or found.done()):
            return None
        try:
            found = found.result()
        except Exception:  # noqa: BLE001 - whatever the build raised: NumPy runs the group
            found = None
        with _lock:
            _modules[text] = found
    return found


def kernel(body):
    """A function (inputs, out) -> list of outputs, or None where it cannot run (list) for
    this body: no exact C form, no compiler, or still compiling. Once compiled, the function
    is kept on the body: a call finds it with one lookup."""
    if not build.ENABLED:
        return None
    ready = body.__dict__.get("_native_fused_kernel")
    if ready is not None:
        return ready
    text = body.__dict__.get("_native_fused_source", False)
    if text is False:
        text = body.__dict__["_native_fused_source"] = source(body)
    if text is None:
        return None
    module = _module(text)
    if module is None:
        return None
    specs = ([(tuple(v.shape), _dtype(v)) for v in body.inputs],
             [(tuple(v.shape), _dtype(v)) for v in body.outputs])
    shapes = tuple(shape for shape, _ in specs[0] + specs[1])
    n = math.prod(specs[1][0][0])
    empty, outs, team_min = cpu_memory.empty, specs[1], parallel.TEAM_MIN_ELEMENTS

    def ready(inputs, out):
        """One call that checks every buffer in C where the pass is not split over this
        module's pool (a small group's checks in Python cost more than its loop)."""
        threads = 1 if n < team_min else parallel.team_threads(n)
        if threads == 1 and n >= 2 * SPLIT_BLOCK:
            return _call(module, specs, inputs, out)
        results = [empty(shape, dtype) for shape, dtype in outs] if out is None else \
            [o if o is not None else empty(*spec) for o, spec in zip(out, outs)]
        if module.call(tuple(inputs), tuple(results), shapes, threads):
            return results
        return _call(module, specs, inputs, out)  # a buffer that differs: checked there

    body.__dict__["_native_fused_kernel"] = ready
    return ready


def _call(module, specs, inputs, out):
    """The outputs, or None where an input is not a C-contiguous array of its spec."""
    ins, outs = specs
    for a, (shape, dtype) in zip(inputs, ins):
        if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous or \
                a.shape != shape:
            return None
    results = []
    for j, (shape, dtype) in enumerate(outs):
        given = None if out is None else out[j]
        if given is None or type(given) is not np.ndarray or given.dtype != dtype or \
                given.shape != shape or not given.flags.c_contiguous or \
                not given.flags.writeable:
            given = cpu_memory.empty(shape, dtype)  # a replaced variable's, where one is free
        results.append(given)
    n = results[0].size
    inputs, outputs = tuple(inputs), tuple(results)
    threads = parallel.team_threads(n)
    if threads > 1:
        module.run(inputs, outputs, n, 0, n, threads)
        return results
    blocks = -(-n // SPLIT_BLOCK)
    parallel.split(lambda lo, hi: module.run(inputs, outputs, n, lo * SPLIT_BLOCK,
                                             min(n, hi * SPLIT_BLOCK)), blocks, n)
    return results
