"""Reading an ONNX file and its tensors without trusting them.

A model file is parsed only if it is a regular file protobuf can hold; a TensorProto is
turned into an array only after its element type, dims and data agree with each other and
with the size budget (`limits.Meter`). External data is read only from regular files inside
the model's folder, reached without following a symlink, and only the declared bytes.
"""
from __future__ import annotations

import errno
import os
import stat

import numpy as np

from .. import files
from .errors import ONNXError, short

PROTOBUF_MAX = 2 ** 31 - 1  # protobuf refuses larger messages; big weights go to external data
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once, and is then refused


def read_model(path):
    """The ModelProto in the file at `path`, or an ONNXError naming the file."""
    from google.protobuf.message import DecodeError
    from onnx import ModelProto
    try:
        f, _ = files.open_regular(path, op="load", max_bytes=PROTOBUF_MAX, error=ONNXError,
                                  too_large=f"protobuf reads ({PROTOBUF_MAX:,} bytes); save "
                                            "the weights as external data")
    except ValueError as e:  # a path with a NUL byte
        raise ONNXError(f"cannot open the model file: {e}", op="load") from None
    with f:
        data = files.read_bounded(f, path, PROTOBUF_MAX, op="load", error=ONNXError)
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError, RecursionError) as e:
        raise ONNXError(f"not an ONNX model (protobuf cannot decode it: "
                        f"{e})", op="load") from None
    if not model.HasField("graph"):
        raise ONNXError("the file holds no graph: not an ONNX model", op="load")
    return model


def check_text(model) -> None:
    """Refuse a model with a string field that is not UTF-8: protobuf hands such a field
    over as bytes, and every name, op type and domain is read as text."""
    from google.protobuf.descriptor import FieldDescriptor
    pending = [model]
    while pending:
        message = pending.pop()
        for field, value in message.ListFields():
            if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
                continue
            many = field.is_repeated if hasattr(field, "is_repeated") else \
                field.label == FieldDescriptor.LABEL_REPEATED  # protobuf before 6
            values = list(value) if many else [value]
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                pending.extend(values)
            elif any(not isinstance(v, str) for v in values):
                raise ONNXError(f"a {field.full_name.removeprefix('onnx.')} field is not "
                                "UTF-8 text: the file is damaged", op="load")


def _read_exactly(fd, offset: int, length: int, source: str) -> bytes:
    chunks, got = [], 0
    while got < length:
        chunk = os.pread(fd, min(length - got, 1 << 26), offset + got)
        if not chunk:
            raise ONNXError(f"{short(source)} ended after {got:,} of the {length:,} bytes "
                            "expected", op="load")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# Element types that hold one NumPy value per element, by their TensorProto number, and the
# field a TensorProto keeps them in when they are not raw bytes.
def _element_types():
    from onnx import TensorProto as T
    return {T.FLOAT: "float_data", T.UINT8: "int32_data", T.INT8: "int32_data",
            T.UINT16: "int32_data", T.INT16: "int32_data", T.INT32: "int32_data",
            T.INT64: "int64_data", T.BOOL: "int32_data", T.FLOAT16: "int32_data",
            T.DOUBLE: "double_data", T.UINT32: "uint64_data", T.UINT64: "uint64_data",
            T.COMPLEX64: "float_data", T.COMPLEX128: "double_data",
            T.BFLOAT16: "int32_data"}  # onnx decodes it to an array of ml_dtypes' bfloat16


def _type_name(data_type: int) -> str:
    from onnx import TensorProto
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"number {data_type}"


def decode(tensor, what: str, meter, folder=None) -> np.ndarray:
    """The array a TensorProto holds (an initializer, a Constant's value), checked first:
    a known element type, dims >= 0 within the budget, as many values (or raw bytes) as
    the dims say. `folder`: the model's folder, for external data (None: refused)."""
    from onnx import TensorProto, helper, numpy_helper
    what = f"{what} {short(tensor.name)}" if tensor.name else what
    field = _element_types().get(tensor.data_type)
    if field is None:
        raise ONNXError(f"{what} has element type {_type_name(tensor.data_type)}, which "
                        "rill does not read (it reads bool, integers, bfloat16, float16/32/64, "
                        "complex)",
                        op="load")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    dims = list(tensor.dims)
    count = meter.elements(dims, what)
    if tensor.HasField("segment"):
        raise ONNXError(f"{what} is stored in segments, which rill does not read", op="load")
    external = tensor.data_location == TensorProto.EXTERNAL
    if external:
        raw = _external(tensor, what, folder, count * dtype.itemsize)
        return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype).reshape(dims)
    if tensor.HasField("raw_data"):
        if len(tensor.raw_data) != count * dtype.itemsize:
            raise ONNXError(f"{what} has {len(tensor.raw_data):,} bytes of raw data; its dims "
                            f"{dims[:8]} of {_type_name(tensor.data_type)} need "
                            f"{count * dtype.itemsize:,}", op="load")
    else:
        per = 2 if dtype.kind == "c" else 1  # complex values are (real, imaginary) pairs
        given = len(getattr(tensor, field))
        if given != count * per:
            raise ONNXError(f"{what} holds {given:,} values in {field}; its dims {dims[:8]} "
                            f"need {count * per:,}", op="load")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as e:  # noqa: BLE001 - a case the checks above missed: say which tensor
        raise ONNXError(f"{what} cannot be decoded: {type(e).__name__}: {e}",
                        op="load") from e


def _external(tensor, what: str, folder, nbytes: int) -> bytes:
    """The `nbytes` bytes an external-data tensor names, read from inside `folder`."""
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    if folder is None:
        raise ONNXError(f"{what} keeps its data in the external file {short(location)}; "
                        "load the model from its path (not a ModelProto) so that rill knows "
                        "the folder to read it from", op="load")
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else nbytes
    except ValueError:
        raise ONNXError(f"{what}: the external data's offset {short(entries.get('offset'))} "
                        f"and length {short(entries.get('length'))} must be integers",
                        op="load") from None
    if offset < 0 or length != nbytes:
        raise ONNXError(f"{what}: the external data declares offset {offset:,} and length "
                        f"{length:,}; its dims need a length of {nbytes:,} at an offset "
                        ">= 0", op="load")
    fd = _open_inside(folder, location, what)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ONNXError(f"{what}: the external data {short(location)} is not a regular "
                            "file", op="load")
        if offset + length > info.st_size:
            raise ONNXError(f"{what}: the external data {short(location)} holds "
                            f"{info.st_size:,} bytes; the tensor needs {length:,} from offset "
                            f"{offset:,}", op="load")
        return _read_exactly(fd, offset, length, location)
    finally:
        os.close(fd)


def _open_inside(folder, location: str, what: str) -> int:
    """A read-only descriptor of the file `location` names inside `folder`: a relative
    path without '..', each part opened without following a symlink."""
    parts = [p for p in location.replace("\\", "/").split("/") if p not in ("", ".")]
    if not location or "\0" in location or os.path.isabs(location) or \
            location[:1] in ("/", "\\") or (len(location) > 1 and location[1] == ":") or \
            ".." in parts or not parts:
        raise ONNXError(f"{what}: the external data location {short(location)} must be a "
                        "relative path inside the model's folder (no '..', not absolute)",
                        op="load")
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    except OSError as e:
        raise ONNXError(f"{what}: cannot open the model's folder {folder!r}: {e}",
                        op="load") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | \
                (_NONBLOCK if last else getattr(os, "O_DIRECTORY", 0))
            inner = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError as e:
        os.close(fd)
        why = "it is (or passes through) a symlink, which rill does not follow" \
            if e.errno == errno.ELOOP else e.strerror
        raise ONNXError(f"{what}: cannot open the external data {short(location)} inside "
                        f"{folder!r}: {why}", op="load") from None
    return fd
