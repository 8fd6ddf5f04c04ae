"""An interpreter that adds something around the current one (a profiler's clock, an ONNX
import's size budget) and leaves everything else to it."""
from __future__ import annotations


class WrappingInterpreter:
    """Subclasses override `apply` and call `self.inner.apply`; any other attribute asked of
    the interpreter (capturing, value_of, before_update, ...) is the inner one's."""

    def __init__(self, inner):
        self.inner = inner
        self.capturing = inner.capturing

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply(self, prim, args, attrs, avals, device):
        return self.inner.apply(prim, args, attrs, avals, device)
