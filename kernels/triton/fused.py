"""gpu kernel of the `fused` node (lib/capture/passes/fuse.py): one Triton kernel per group,
generated from the elementwise expression table (kernels/triton/elementwise.py).

Each op of the body becomes a call of a small @jit function whose body is its
EXPRESSIONS entry (Triton inlines them); the kernel reads every input of the group once
through its own strides (0 where broadcast), evaluates the ops in the body's order, and
stores only the values the group returns. So per call: bytes moved = group inputs + group
outputs, where unfused each op reads its inputs and writes its result.

Each intermediate value is rounded to its dtype's storage exactly as the unfused kernels
store it (float16 rounded, then widened to float32 for the next op; booleans as 0/1 bytes),
so the arithmetic is the same op by op. The compiler may still contract a multiply and an
add of two former kernels into one fused multiply-add on a GPU: results then differ in the
last bit (DESIGN.md). Under RILL_TRITON_INTERPRET=1 they are equal bit for bit.

An op the table cannot express for these dtypes (a rare case: the fuse pass already leaves
out ops without gpu kernels) makes the group run node by node with the ordinary kernels.
"""
from __future__ import annotations

import linecache
import math

import numpy as np

from rill.errors import ArgumentError

from .libdevice import libdevice
from .elementwise import (_HELPERS, CONSTANTS, EXPRESSIONS, MAX_DIMS, _is_flat, _layout,
                          refuse_complex)
from .launch import block_for, cdiv, empty, jit, pointer

_TL = {"float16": "tl.float16", "float32": "tl.float32", "float64": "tl.float64",
       "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32", "int64": "tl.int64",
       "uint8": "tl.uint8", "bool": "tl.uint8"}  # booleans travel as bytes, as unfused
_COUNT = [0]
_KERNELS: dict = {}  # (source, constants) -> compiled kernel


def run_fused(*inputs, body, out=None):
    """The `fused` primitive's gpu kernel: the body's outputs as new buffers."""
    found = body.__dict__.get("_triton_fused")
    if found is None:
        found = body.__dict__["_triton_fused"] = _Generated(body)
    return found(inputs)


def _expression(node):
    """(EXPRESSIONS name, constexpr values by name) for one body node, or None."""
    op, attrs = node.op, dict(node.attrs)
    first = node.inputs[0].dtype
    if op in ("floor_divide", "power"):
        name = op + "_int" if np.dtype(first.storage).kind in "iu" else op
    elif op == "gelu":
        name = "gelu_tanh" if attrs.pop("approximate") == "tanh" else "gelu_exact"
    elif op == "signbit":
        name = "signbit" if first.kind == "f" else "signbit_int"
    elif op == "bitwise_invert":
        name = "logical_not" if first.storage == np.bool_ else "bitwise_invert"
    elif op == "cast":
        name = "cast_to_bool" if attrs.pop("dtype").storage == np.bool_ else "cast"
    else:
        name = op
    if name not in EXPRESSIONS or any(k not in CONSTANTS for k in attrs):
        return None
    constants = {}
    for key, value in attrs.items():
        if type(value) not in (int, float) or not math.isfinite(value):
            raise ArgumentError(f"attribute {key} must be a finite number, got {value!r}",
                                op=op)
        constants[CONSTANTS[key]] = value
    return name, constants


class _Generated:
    """The kernel for one body, or the node-by-node fallback."""

    def __init__(self, body):
        self.body = body
        self.constants: dict = {}
        self.kernel = None
        steps = [None if n.op == "input" else _expression(n) for n in body.nodes]
        dtypes = {np.dtype(v.dtype.storage).name for n in body.nodes for v in n.outputs}
        if all(s is not None for n, s in zip(body.nodes, steps) if n.op != "input") and \
                dtypes <= set(_TL):
            self.kernel = self._compile(steps)

    def _compile(self, steps):
        body = self.body
        inputs, outputs = body.inputs, body.outputs
        kernel_name = "fused_kernel"
        names = {v: f"a{i}" for i, v in enumerate(inputs)}
        helpers, code = {}, []
        for k, (node, step) in enumerate(zip(body.nodes, steps)):
            if step is None:
                continue
            name, constants = step
            params, expression = EXPRESSIONS[name]
            uses = [c for c in CONSTANTS.values() if c in expression]
            helpers[name] = (
                f"@jit\ndef _e_{name}({', '.join(list(params) + [f'{c}: tl.constexpr' for c in uses])}):\n"  # noqa: E501
                f"    return {expression}\n")
            args = [names[v] for v in node.inputs]
            for c in uses:
                self.constants[f"C{k}_{c}"] = constants[c]
                args.append(f"C{k}_{c}")
            v = node.outputs[0]
            result = names[v] = f"v{k}"
            storage = np.dtype(v.dtype.storage).name
            code.append(f"    {result} = _e_{name}({', '.join(args)}).to({_TL[storage]})")
            if storage == "float16":  # computed in float32, as each unfused kernel does
                code.append(f"    {result} = {result}.to(tl.float32)")
        dims = ", ".join(f"D{d}" for d in range(1, MAX_DIMS))
        params = [f"o{j}_ptr" for j in range(len(outputs))]
        params += [f"{names[v]}_ptr" for v in inputs] + ["n", dims]
        params += [", ".join(f"{names[v]}_s{d}" for d in range(MAX_DIMS)) for v in inputs]
        params += [f"{c}: tl.constexpr" for c in self.constants]
        flats = [f"{names[v].upper()}_FLAT" for v in inputs]
        params += [f"{f}: tl.constexpr" for f in flats] + ["BLOCK: tl.constexpr"]
        lines = ["@jit", f"def {kernel_name}({', '.join(params)}):",
                 "    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)",
                 "    mask = offs < n"]
        if inputs:
            lines += [f"    if not ({' and '.join(flats)}):", "        rest = offs"]
            for d in range(MAX_DIMS - 1, 0, -1):
                lines += [f"        i{d} = rest % D{d}", f"        rest = rest // D{d}"]
            lines.append("        i0 = rest")
        for v, flat in zip(inputs, flats):
            a = names[v]
            index = " + ".join(f"i{d} * {a}_s{d}" for d in range(MAX_DIMS))
            lines += [f"    if {flat}:", f"        {a}_at = offs", "    else:",
                      f"        {a}_at = {index}",
                      f"    {a} = tl.load({a}_ptr + {a}_at, mask=mask)"]
            if v.dtype.storage == np.float16:
                lines.append(f"    {a} = {a}.to(tl.float32)")
        lines += code
        for j, v in enumerate(outputs):
            lines.append(f"    tl.store(o{j}_ptr + offs, {names[v]}.to(o{j}_ptr.dtype."
                         "element_ty), mask=mask)")
        source = ("import triton.language as tl\n" + _HELPERS + "\n\n" +
                  "\n\n".join(helpers.values()) + "\n\n" + "\n".join(lines) + "\n")
        self.source = source
        # Groups of the same ops and dtypes (each parameter's optimizer update) share one
        # kernel: sizes and strides are arguments, constants part of the source's key.
        key = (source, tuple(self.constants.items()))
        if key in _KERNELS:
            return _KERNELS[key]
        _COUNT[0] += 1
        filename = f"<rill generated fused kernel {_COUNT[0]}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        scope = {"libdevice": libdevice, "jit": jit, "__name__": __name__}
        exec(compile(source, filename, "exec"), scope)
        _KERNELS[key] = scope[kernel_name]
        return _KERNELS[key]

    def __call__(self, inputs):
        if self.kernel is None:
            from rill.capture.executor import program_of
            return program_of(self.body)(list(inputs))
        refuse_complex("fused", *inputs)
        body = self.body
        shape = tuple(body.outputs[0].shape)
        outs = [empty(v.shape, np.dtype(v.dtype.storage)) for v in body.outputs]
        n = math.prod(shape)
        if n == 0:
            return outs
        buffers = [b.view(np.uint8) if b.dtype == np.bool_ else b for b in inputs]
        views = [o.view(np.uint8) if o.dtype == np.bool_ else o for o in outs]
        dims, merged = _layout(shape, buffers)
        if len(dims) > MAX_DIMS:  # dims that cannot be merged: node by node
            from rill.capture.executor import program_of
            return program_of(body)(list(inputs))
        pad = MAX_DIMS - len(dims)
        sizes = [1] * pad + dims
        args = [pointer(o) for o in views] + [pointer(b) for b in buffers] + [n] + sizes[1:]
        flags = {}
        for i, s in enumerate(merged):
            args += [0] * pad + s
            flags[f"A{i}_FLAT"] = _is_flat(dims, s)
        block = block_for(n)
        self.kernel[(cdiv(n, block),)](*args, **self.constants, **flags, BLOCK=block)
        return outs
