"""Building an ONNX graph: unique names, nodes, constants, and the few helpers whose form
changed between opsets (reduction axes, Squeeze/Unsqueeze, Split)."""
from __future__ import annotations

import itertools

import numpy as np

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


class Builder:
    """Nodes of one ONNX graph (the model's, or a body of If/Loop/Scan). Constants and the
    prelude (values every graph may use, such as the batch size) live in the root graph,
    which subgraphs see as outer scope."""

    def __init__(self, opset: int, parent: "Builder | None" = None):
        self.opset = opset
        self.parent = parent
        self.root = parent.root if parent else self
        self.nodes: list = []
        if parent is None:
            self.counter = itertools.count()
            self.initializers: list = []
            self.prelude: list = []
            self._consts: dict = {}
            self.batch_size = None  # a callable giving the int64[1] batch size, when dynamic
            self.alternatives: dict = {}  # node -> the same node traced at batch size B + 1

    def alternative(self, node):
        """The node as traced at batch size B + 1 (None unless the batch is dynamic)."""
        return self.root.alternatives.get(node)

    def child(self) -> "Builder":
        return Builder(self.opset, self)

    def fresh(self, hint: str = "t") -> str:
        return f"{hint}_{next(self.root.counter)}"

    def op(self, op_type: str, inputs, n_out: int = 1, hint: str | None = None, **attrs):
        """Append a node; its output name (a list of them when n_out != 1)."""
        from onnx import helper
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.fresh("n_" + op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=None, hint: str = "const") -> str:
        """An initializer of the root graph holding `value` (small ones shared)."""
        from onnx import numpy_helper
        array = np.asarray(value, dtype=dtype)
        root = self.root
        key = None
        if array.size <= 16:
            key = (array.dtype.str, array.shape, array.tobytes())
            if key in root._consts:
                return root._consts[key]
        name = self.fresh(hint)
        root.initializers.append(numpy_helper.from_array(array, name))
        if key is not None:
            root._consts[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint="ints")

    def scalar_like(self, value, dtype) -> str:
        """A 0-d constant of a rill dtype's storage type."""
        return self.const(np.asarray(value, dtype=dtype.storage))

    # ---- opset-dependent forms -------------------------------------------------------------

    def reduce(self, op_type: str, x: str, axes, keepdims: bool) -> str:
        """ReduceX over `axes` (None: all). ReduceSum takes axes as an input from opset 13,
        the others from opset 18."""
        keep = int(bool(keepdims))
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if axes is None:
            return self.op(op_type, [x], keepdims=keep)
        axes = [int(a) for a in (axes if isinstance(axes, (tuple, list)) else (axes,))]
        if not axes:
            return self.op("Identity", [x])
        if as_input:
            return self.op(op_type, [x, self.ints(axes)], keepdims=keep)
        return self.op(op_type, [x], keepdims=keep, axes=axes)

    def unsqueeze(self, x: str, axes) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(axes)])
        return self.op("Unsqueeze", [x], axes=list(axes))

    def squeeze(self, x: str, axes) -> str:
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.ints(axes)])
        return self.op("Squeeze", [x], axes=list(axes))

    def split(self, x: str, sizes, axis: int) -> list:
        if self.opset >= 13:
            outs = self.op("Split", [x, self.ints(sizes)], n_out=len(sizes), axis=axis)
        else:
            outs = self.op("Split", [x], n_out=len(sizes), axis=axis, split=list(sizes))
        return outs if isinstance(outs, list) else [outs]

    def slice(self, x: str, starts, ends, axes, steps) -> str:
        return self.op("Slice", [x, self.ints(starts), self.ints(ends), self.ints(axes),
                                 self.ints(steps)])

    # ---- shapes that follow the batch size -------------------------------------------------

    def shape(self, static, alternative=None) -> str:
        """An int64[n] shape input. With `alternative` (the same shape traced at batch size
        B + 1), every entry that differs is rebuilt at run time as a*batch + b."""
        static = [int(s) for s in static]
        if alternative is None or list(alternative) == static or self.root.batch_size is None:
            return self.ints(static)
        batch_value, batch = self.root.batch_size()
        parts = []
        for s, t in zip(static, alternative):
            a = int(t) - s
            if a == 0:
                parts.append(self.ints([s]))
                continue
            b = s - a * batch_value
            part = batch if a == 1 else self.op("Mul", [batch, self.ints([a])])
            parts.append(part if b == 0 else self.op("Add", [part, self.ints([b])]))
        return self.op("Concat", parts, axis=0, hint="shape")
