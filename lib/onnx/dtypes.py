"""rill dtypes <-> ONNX element types."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .errors import ONNXError


def onnx_type(dtype) -> int:
    """The TensorProto element type of a rill dtype."""
    from onnx import helper
    if dtype is dt.bfloat16:  # held as float32 on the host: its bits would need rewriting
        raise ONNXError("bfloat16 tensors are not exported; cast the model to float32 first",
                        op="export")
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype.storage))


def rill_dtype(elem_type: int, op: str = "load"):
    """The rill dtype of a TensorProto element type (ONNXError for one rill lacks)."""
    from onnx import helper
    try:
        found = dt.from_numpy(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - string, float8, int4, ... tensors
        found = None
    if found is None:
        from onnx import TensorProto
        raise ONNXError(f"element type {TensorProto.DataType.Name(elem_type)} has no rill "
                        "dtype", op=op)
    return found
