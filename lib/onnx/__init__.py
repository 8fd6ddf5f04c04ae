"""ONNX export and import: `rill.onnx.export(f, example_args, path)` writes a captured graph
as an ONNX model (run it with onnxruntime, view it in Netron); `rill.onnx.load(path)` reads
one back as a rill captured function whose initializers are trainable parameters.

The `onnx` package is imported only when one of these runs (`pip install "rill[onnx]"`), so
`import rill` stays light. See docs/ONNX.md for what maps and what does not; `Limits` bounds
what an imported file may ask for (loop trips, nodes, nesting, tensor sizes).
"""
from .errors import ONNXBudgetError, ONNXError
from .export import export
from .limits import Limits
from .load import load

__all__ = ["export", "load", "Limits", "ONNXError", "ONNXBudgetError"]
