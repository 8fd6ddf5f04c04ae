"""The errors of the ONNX bridge, where they happened, and the lazy import of onnx."""
from __future__ import annotations

from ..errors import CaptureError


class ONNXError(CaptureError):
    """A graph or model the ONNX bridge cannot translate: the op is named, and for export the
    user's line that recorded it; for import, the model file and the node."""

    file = None  # the model file (or ModelProto) the error is about, once known
    node = None  # the node it is about, once known

    def __str__(self) -> str:
        if self.node is None:
            return super().__str__()
        # the message names the node and its op type: the op is not said twice
        return self.message + (f"  [at {self.location}]" if self.location else "")


class ONNXBudgetError(ONNXError):
    """An imported model that asks for more than rill.onnx.Limits allows: loop trips, nodes,
    nesting, or elements of a tensor. The message names the limit and how to raise it."""


def require_onnx():
    """The onnx module, or an ONNXError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise ONNXError('the onnx package is not installed; install it with '
                        'pip install "rill[onnx]"', op="onnx") from None
    return onnx


def at(error: ONNXError, source) -> ONNXError:
    """The error located at a graph node's recorded source line (not the exporter's)."""
    if source:
        error.location = str(source)
    return error


def short(text, limit: int = 80) -> str:
    """repr(text), cut: names in a hostile file may be megabytes long."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 5] + "...'"


def describe(node, index: int) -> str:
    """A node as errors name it: its op type, its index in its graph, and its name."""
    name = f" {short(node.name)}" if node.name else ""
    return f"{short(node.op_type, 40).strip(chr(39))} node #{index}{name}"


def in_node(error: ONNXError, node, index: int) -> ONNXError:
    """The error said to be about `node` (the innermost node that failed), or, when an inner
    node is already named, about the node that holds it (a loop body, a function call)."""
    where = describe(node, index)
    if error.node is None:
        error.node = where
        error.message = f"{where}: {error.message}"
    else:
        error.message += f" (inside {where})"
    error.args = (error.message,)
    return error


def in_file(error: ONNXError, source: str) -> ONNXError:
    """The error said to be about the model `source`, once."""
    if error.file is None:
        error.file = source
        error.message = f"{source}: {error.message}"
        error.args = (error.message,)
    return error
