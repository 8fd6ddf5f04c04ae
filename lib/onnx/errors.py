"""The error of the ONNX bridge, and the lazy import of the onnx package."""
from __future__ import annotations

from ..errors import CaptureError


class ONNXError(CaptureError):
    """A graph or model the ONNX bridge cannot translate: the op is named, and for export the
    user's line that recorded it."""


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
