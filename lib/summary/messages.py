"""TensorBoard's messages (Event, Summary, TensorProto, ...) encoded by hand.

Field numbers are those of TensorFlow's public .proto files (event.proto, summary.proto,
tensor.proto, tensor_shape.proto, types.proto); tests parse what is written here with the
tensorboard package's own classes, so a wrong number fails there.
"""
from __future__ import annotations

import numpy as np

from . import protobuf as pb

# types.proto: DataType, by NumPy dtype name (bfloat16 is stored as float32 by rill).
DATA_TYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
              "str": 7, "complex64": 8, "int64": 9, "bool": 10, "bfloat16": 14,
              "uint16": 17, "complex128": 18, "float16": 19, "uint32": 22, "uint64": 23}


def shape_proto(shape) -> bytes:
    """TensorShapeProto: a Dim (field 2) per axis, each with its size (field 1)."""
    return b"".join(pb.message(2, pb.uint(1, size)) for size in shape)


def tensor_proto(array) -> bytes:
    """TensorProto of a NumPy array: strings as string_val, numbers as raw tensor_content."""
    array = np.asarray(array)
    if array.dtype.kind in "USO":
        strings = [s if isinstance(s, bytes) else str(s).encode("utf-8")
                   for s in array.reshape(-1).tolist()]
        return (pb.uint(1, DATA_TYPES["str"]) + pb.message(2, shape_proto(array.shape))
                + b"".join(pb.blob(8, s, keep=True) for s in strings))
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return (pb.uint(1, DATA_TYPES[array.dtype.name]) + pb.message(2, shape_proto(array.shape))
            + pb.blob(4, np.ascontiguousarray(little).tobytes()))


def summary_metadata(plugin_name: str, content: bytes = b"", display_name: str = "",
                     description: str = "", data_class: int = 0) -> bytes:
    """SummaryMetadata: plugin_data (1: plugin_name 1, content 2), display_name 2,
    summary_description 3, data_class 4 (1 scalar, 2 tensor, 3 blob sequence; unset: the
    reader decides from the plugin)."""
    plugin = pb.blob(1, plugin_name) + pb.blob(2, content)
    return (pb.message(1, plugin) + pb.blob(2, display_name) + pb.blob(3, description)
            + pb.uint(4, data_class))


def value(tag: str, *, simple_value=None, image=None, histo=None, tensor=None,
          metadata=None) -> bytes:
    """Summary.Value: tag 1, simple_value 2 (float), image 4, histo 5, tensor 8, metadata 9."""
    out = pb.blob(1, tag)
    if metadata is not None:
        out += pb.message(9, metadata)
    if simple_value is not None:
        out += pb.float32(2, simple_value, keep=True)
    if image is not None:
        out += pb.message(4, image)
    if histo is not None:
        out += pb.message(5, histo)
    if tensor is not None:
        out += pb.message(8, tensor)
    return out


def summary(*values: bytes) -> bytes:
    """Summary: repeated Value (field 1)."""
    return b"".join(pb.message(1, v) for v in values)


def image(height: int, width: int, channels: int, png: bytes) -> bytes:
    """Summary.Image: height 1, width 2, colorspace 3 (its channel count), encoded 4."""
    return (pb.uint(1, height) + pb.uint(2, width) + pb.uint(3, channels)
            + pb.blob(4, png))


def histogram(low, high, count, total, total_squares, limits, counts) -> bytes:
    """HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6, bucket 7;
    bucket i counts the values in (limits[i-1], limits[i]]."""
    return (pb.double(1, low) + pb.double(2, high) + pb.double(3, count)
            + pb.double(4, total) + pb.double(5, total_squares)
            + pb.packed_doubles(6, limits) + pb.packed_doubles(7, counts))


def session_log_start() -> bytes:
    """SessionLog with status START (1): a restart; TensorBoard drops older events at or
    after its step."""
    return pb.uint(1, 1)


def event(wall_time: float, step: int = 0, *, summary=None, file_version=None,
          graph_def=None, session_log=None) -> bytes:
    """Event: wall_time 1 (double), step 2, and one of file_version 3, graph_def 4 (a
    serialized GraphDef), summary 5, session_log 7."""
    out = pb.double(1, wall_time, keep=True) + pb.uint(2, step)
    if file_version is not None:
        out += pb.blob(3, file_version, keep=True)
    if graph_def is not None:
        out += pb.blob(4, graph_def, keep=True)
    if summary is not None:
        out += pb.message(5, summary)
    if session_log is not None:
        out += pb.message(7, session_log)
    return out
