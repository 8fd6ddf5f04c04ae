"""Padding layers, as PyTorch's: {Zero,Constant,Reflection,Replication,Circular}Pad{1,2,3}d.

`padding` is an int (every side) or a tuple of 2, 4 or 6 ints in F.pad's order, last axis
first: (left, right), (left, right, top, bottom), (left, right, top, bottom, front, back).
"""
from __future__ import annotations

from ..errors import ArgumentError
from ..ops.arguments import as_int, as_number
from ..ops.padding import pad
from .module import Module


class _Pad(Module):
    mode = "constant"
    spatial = 2

    def __init__(self, padding, value=None):
        super().__init__()
        name, n = type(self).__name__, 2 * self.spatial
        if isinstance(padding, (tuple, list)):
            if len(padding) != n:
                raise ArgumentError(f"padding must be an int or {n} ints (last axis first), "
                                    f"got {tuple(padding)}", op=name)
            self.padding = tuple(as_int(p, "padding", name) for p in padding)
        else:
            self.padding = (as_int(padding, "padding", name),) * n
        self.value = None if value is None else as_number(value, "value", name)

    def forward(self, input):
        return pad(input, self.padding, self.mode, self.value)

    def extra_repr(self) -> str:
        return f"{self.padding}" + ("" if self.value is None else f", value={self.value}")


def _layers(mode: str, prefix: str, with_value: bool = False):
    """The 1-, 2- and 3-d classes of one mode."""
    made = []
    for spatial in (1, 2, 3):
        doc = (f"Pad the last {spatial} axes of (N, C, ...) or (C, ...) with mode {mode!r}; "
               f"`padding` is an int or {2 * spatial} ints, last axis first.")
        if with_value:
            def init(self, padding, value):
                _Pad.__init__(self, padding, value)
        else:
            def init(self, padding):
                _Pad.__init__(self, padding)
        made.append(type(f"{prefix}{spatial}d", (_Pad,), dict(
            __init__=init, __doc__=doc, mode=mode, spatial=spatial, __module__=__name__,
            __qualname__=f"{prefix}{spatial}d")))
    return made


ConstantPad1d, ConstantPad2d, ConstantPad3d = _layers("constant", "ConstantPad", True)
ZeroPad1d, ZeroPad2d, ZeroPad3d = _layers("constant", "ZeroPad")
ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = _layers("reflect", "ReflectionPad")
ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = _layers("replicate", "ReplicationPad")
CircularPad1d, CircularPad2d, CircularPad3d = _layers("circular", "CircularPad")
