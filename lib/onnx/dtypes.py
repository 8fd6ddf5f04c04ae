"""rill dtypes <-> ONNX element types, and arrays of ONNX tensors as rill tensors.

bfloat16 has no NumPy dtype of its own: onnx hands its tensors over as arrays of
ml_dtypes' bfloat16, which rill holds as float32 buffers of bfloat16 values (every value
of such an array is one, so the conversion is exact)."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .errors import ONNXError
from ..ops.creation import as_tensor


def onnx_type(dtype) -> int:
    """The TensorProto element type of a rill dtype."""
    from onnx import helper
    if dtype is dt.bfloat16:  # held as float32 on the host: its bits would need rewriting
        raise ONNXError("bfloat16 tensors are not exported; cast the model to float32 first",
                        op="export")
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype.storage))


def rill_dtype(elem_type: int, op: str = "load"):
    """The rill dtype of a TensorProto element type (ONNXError for one rill lacks)."""
    from onnx import TensorProto, helper
    if elem_type == TensorProto.BFLOAT16:
        return dt.bfloat16
    try:
        found = dt.from_numpy(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - string, float8, int4, ... tensors
        found = None
    if found is None:
        from onnx import TensorProto
        raise ONNXError(f"element type {TensorProto.DataType.Name(elem_type)} has no rill "
                        "dtype", op=op)
    return found


def is_bfloat16(array) -> bool:
    """Whether `array` is a NumPy array of ml_dtypes' bfloat16 (as onnx decodes them)."""
    return isinstance(array, np.ndarray) and array.dtype.name == "bfloat16"


def as_rill(value):
    """`value` (a rill tensor, a NumPy array, a number) as a rill tensor; an array of
    bfloat16 becomes a bfloat16 tensor."""
    if is_bfloat16(value):
        return as_tensor(np.asarray(value, dtype=np.float32)).astype(dt.bfloat16)
    return as_tensor(value)
