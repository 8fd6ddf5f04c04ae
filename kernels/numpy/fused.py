"""CPU kernel of the `fused` node (lib/capture/passes/fuse.py): a group of elementwise ops
run as one generated Python function of NumPy calls with `out=` buffers.

Why NumPy and not a compiled loop: see docs/DESIGN.md, "Fusion and memory planning". In
short, each op of the group is the same ufunc call the unfused graph makes, on the same
dtypes, so the fused result is the unfused result bit for bit; what fusion removes is the
allocation of every intermediate (large NumPy temporaries are fresh pages from the OS on
each call) and a Python dispatch per node.

`program(body)` writes, once per body graph, a function `run(x0, x1, ..., out=None)`:
- an op whose kernel is a plain ufunc (add, exp, maximum, ...) writes into a buffer with
  `out=`: a scratch buffer of the group (recycled as soon as its value is dead, in place when
  the dying value is the op's own input), or the caller's output buffer (`out[j]`, from the
  memory plan) for a value the group returns;
- any other op (where, sigmoid, gelu, cast, ...) calls its ordinary kernel: same result,
  a fresh buffer.
Inputs are never written.

Layout: a ufunc's new result follows the memory order of its inputs (NumPy's order="K"), and
an order-sensitive consumer (a sum, a GEMM) adds in memory order, so the layout of a value is
part of "the same result". The buffers made here are C-ordered, which is what NumPy makes
from C-ordered inputs; a call with any input not C-contiguous (a transposed gradient) runs
the body node by node instead, exactly as unfused. The source holds only names made here;
ufuncs, kernels, attrs, shapes and dtypes reach it as objects in its scope, never as text
taken from the graph (a loaded graph cannot inject code).
"""
from __future__ import annotations

import numpy as np

from rill import cpu_memory
from rill.dtypes import bfloat16
from rill.kernels.native import fused as native_fused

from .elementwise import KERNELS, AgainstRows

# name -> the CPU kernel, for the kernels that are a ufunc (or call one as it is: AgainstRows,
# and `quiet`'s wrapper, which keeps inf/nan quiet), so that a call with out= computes the
# same bits under the same error state.
UFUNCS = {name: getattr(fn, "ufunc", fn) for name, fn in KERNELS.items()
          if isinstance(getattr(fn, "ufunc", None) or getattr(fn, "__wrapped__", fn),
                        (np.ufunc, AgainstRows))}
# (a kernel with a `ufunc` attribute computes that ufunc bit for bit: `add`, which runs on
# OpenMP's team where it can; the plan and the NumPy groups call the ufunc itself, with out=)
# relu's kernel takes out= too: np.maximum(x, 0 of x's dtype), one operand.
_RELU = "relu"

# Elementwise ops a group may hold: one output element from the same-index input elements.
# conj/real/imag are complex-only; floor/ceil/round/trunc may hand back their input
# (integers pass through), which a fused node must never return.
ELEMENTWISE = frozenset(set(KERNELS) - {"conj", "real", "imag", "floor", "ceil", "round",
                                        "trunc"})


def fusible_dtype(dtype) -> bool:
    """bfloat16 results are rounded after every op by the executor (a fixup between nodes
    that a group would skip); complex stays unfused."""
    return dtype is not bfloat16 and dtype.kind != "c"


def program(body):
    """The body graph's generated function, made once and kept on the graph."""
    found = body.__dict__.get("_numpy_fused")
    if found is None:
        found = body.__dict__["_numpy_fused"] = _generate(body)
    return found


def run_fused(*inputs, body, out=None):
    """The `fused` primitive's CPU kernel: the body's outputs as a list of buffers. The
    group's generated C loop where it has one (kernels/native/fused.py: the same bits, one
    pass), else the NumPy function below."""
    compiled = native_fused.kernel(body)
    if compiled is not None:
        results = compiled(inputs, out)
        if results is not None:
            return results
    return program(body)(*inputs, out=out)


def scratch_bytes(body) -> int:
    """Bytes of the scratch buffers a call allocates (reported by graph.memory_plan())."""
    program(body)
    return body.__dict__["_numpy_fused_scratch"]


def _generate(body):
    inputs = body.inputs
    names = {v: f"x{i}" for i, v in enumerate(inputs)}
    last_use: dict = {}
    for k, node in enumerate(body.nodes):
        for v in node.inputs:
            last_use[v] = k
    returned = {v: j for j, v in enumerate(body.outputs)}
    scope = {"np": np, "empty": cpu_memory.empty, "unfused": _unfused(body)}
    args = ", ".join(names[v] for v in inputs)
    c_order = " and ".join(f"{names[v]}.flags.c_contiguous" for v in inputs) or "True"
    # Quiet (inf and nan as values) where an op's own kernel is: errstate costs a microsecond.
    quiet = any(hasattr(KERNELS.get(n.op), "__wrapped__") for n in body.nodes)
    lines = ["def run(" + "".join(f"{names[v]}, " for v in inputs) + "out=None):",
             f"    if not ({c_order}):",
             f"        return unfused([{args}])",
             "    with np.errstate(all='ignore'):" if quiet else "    if True:",
             "        if out is None:",
             f"            out = (None,) * {len(body.outputs)}"]
    free: dict = {}       # (shape, dtype) -> scratch buffer names not holding a live value
    holder: dict = {}     # value -> scratch name holding it
    scratch = [0, 0]      # count, bytes
    for k, node in enumerate(body.nodes):
        if node.op == "input":
            continue
        v = node.outputs[0]
        name = names[v] = f"v{k}"
        args = [names[a] for a in node.inputs]
        dying = [a for a in dict.fromkeys(node.inputs) if last_use.get(a) == k and a in holder]
        ufunc = _ufunc_of(node)
        code = []
        if ufunc is not None:
            scope[f"U{k}"] = ufunc
            if v in returned:
                j = returned[v]
                scope[f"S{k}"] = (v.shape, np.dtype(v.dtype.storage))
                target = f"out[{j}] if out[{j}] is not None else empty(*S{k})"
                code.append(f"{name} = U{k}({', '.join(args)}, out={target})")
            else:
                # In place: a dying input's scratch of the same spec is free for the result.
                for a in dying:
                    free.setdefault(_spec(a), []).append(holder.pop(a))
                dying = []
                key = _spec(v)
                if free.get(key):
                    buf = free[key].pop()
                else:
                    buf = f"s{scratch[0]}"
                    scratch[0] += 1
                    scratch[1] += _nbytes(v)
                    scope[f"S{k}"] = (v.shape, np.dtype(key[1]))
                    code.append(f"{buf} = empty(*S{k})")
                holder[v] = buf
                code.append(f"{name} = U{k}({', '.join(args)}, out={buf})")
        else:
            scope[f"K{k}"] = node.primitive.kernels["cpu"]
            scope[f"A{k}"] = node.attrs
            code.append(f"{name} = K{k}({', '.join(args)}, **A{k})")
            if v.shape == ():  # reductions of 0-d may give NumPy scalars
                code.append(f"{name} = np.asarray({name})")
        for a in dying:
            free.setdefault(_spec(a), []).append(holder.pop(a))
        lines += ["        " + c for c in code]
    outs = ", ".join(names[v] for v in body.outputs)
    lines.append(f"        return [{outs}]")
    source = "\n".join(lines)
    exec(compile(source, "<rill fused numpy kernel>", "exec"), scope)
    run = scope["run"]
    run.source = source
    body.__dict__["_numpy_fused_scratch"] = scratch[1]
    return run


def _unfused(body):
    """The body run node by node with the ordinary kernels (the group as if unfused)."""
    def run(inputs):
        from rill.capture.executor import program_of
        return program_of(body)(inputs)
    return run


def _ufunc_of(node):
    """The ufunc that computes node's value bit for bit with out=, or None."""
    v = node.outputs[0]
    if v.shape == () or len(node.outputs) != 1:
        return None
    if node.op == _RELU:
        ufunc, operands = KERNELS[_RELU], [node.inputs[0].dtype]
    else:
        ufunc = UFUNCS.get(node.op)
        if ufunc is None or node.attrs:
            return None
        operands = [a.dtype for a in node.inputs]
    try:  # the dtype the ufunc picks for these operands must be the value's own
        with np.errstate(all="ignore"):
            probe = ufunc(*[np.zeros((), d.storage) for d in operands])
    except Exception:  # a loop NumPy lacks: the kernel will say so
        return None
    return ufunc if np.asarray(probe).dtype == np.dtype(v.dtype.storage) else None


def _spec(v):
    return (tuple(v.shape), np.dtype(v.dtype.storage))


def _nbytes(v) -> int:
    n = np.dtype(v.dtype.storage).itemsize
    for s in v.shape:
        n *= s
    return n
