"""rill.utils.safetensors: read and write `.safetensors` files, the format the Hugging Face
ecosystem ships weights in, through the `safetensors` package (`pip install
"rill[safetensors]"`; imported only when these functions run).

- `load_file(path, device=None, *, max_bytes=None)` -> {name: Tensor}, memory-mapped by the
  package; `rill.load(path)` does the same for a safetensors file.
- `save_file(tensors, path, metadata=None)` writes {name: Tensor} (and optional str -> str
  metadata) atomically: the old file or the whole new one, never half.

Every dtype rill shares with the format round-trips bit for bit, bfloat16 included (the
package's NumPy side has no bfloat16, so rill reads and writes those 2-byte values itself).
A file's tensors may take at most `max_bytes` (the load budget, rill.files), checked before
any is read; a malformed file, and a dtype rill does not have (U16, F8_E4M3, ...), raises
CheckpointError naming the file.

>>> import os, tempfile, rill
>>> from rill.utils import safetensors
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> _ = safetensors.save_file({"w": rill.ones(2, 3, dtype=rill.bfloat16)}, path)  # doctest: +SKIP
>>> safetensors.load_file(path)["w"].dtype  # doctest: +SKIP
rill.bfloat16
"""
from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping

import numpy as np

from .. import dtypes as _dt
from ..devices import device as _as_device
from ..errors import ArgumentError, CheckpointError, DTypeError
from ..files import load_budget, open_regular, over_budget, show_bytes
from ..serialization import _disk_array, register_reader, write_atomically  # one layout
from ..tensor import Tensor, new_tensor

__all__ = ["load_file", "save_file"]

# The format's dtype codes for the dtypes rill has, and the names its writer takes.
DTYPES = {"F64": _dt.float64, "F32": _dt.float32, "F16": _dt.float16, "BF16": _dt.bfloat16,
          "I64": _dt.int64, "I32": _dt.int32, "I16": _dt.int16, "I8": _dt.int8,
          "U8": _dt.uint8, "BOOL": _dt.bool_, "C64": _dt.complex64}
_WRITE_NAMES = {d.name: ("bool" if d is _dt.bool_ else d.name) for d in DTYPES.values()}
MAX_HEADER = 100 << 20  # the package refuses a longer header too


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are a safetensors header's: its u64 length, then '{'."""
    return len(head) >= 9 and head[8:9] == b"{" and \
        struct.unpack("<Q", head[:8])[0] <= MAX_HEADER


def load_file(path, device=None, *, max_bytes=None) -> dict:
    """{name: Tensor} of the safetensors file at `path`, on the cpu or `device`."""
    path = os.fspath(path)
    budget = load_budget(max_bytes, op="load_file")
    f, _ = open_regular(path, op="load_file")
    with f:
        return load_from(f, path, device, max_bytes=budget)


def load_from(f, path, device=None, *, max_bytes=None) -> dict:
    """What `load_file` returns; `f` is the file `files.open_regular` opened (bfloat16
    values are read from it), `path` is what the package maps."""
    package = _require()
    budget = load_budget(max_bytes, op="load")
    target = _as_device("cpu" if device is None else device)
    try:
        with package.safe_open(path, framework="np") as st:
            specs = {key: (st.get_slice(key).get_dtype(), tuple(st.get_slice(key).get_shape()))
                     for key in st.keys()}
            _check_specs(specs, path, budget)
            header = _header(f, path) if any(c == "BF16" for c, _ in specs.values()) else None
            tensors = {}
            for key, (code, shape) in specs.items():
                host = (_read_bfloat16(f, path, key, shape, header) if code == "BF16"
                        else _checked(st.get_tensor(key), code, path, key))
                t = new_tensor(host.reshape(shape), DTYPES[code], _as_device("cpu"))
                tensors[key] = t if target is t.device else t.to(target)
            return tensors
    except CheckpointError:
        raise
    except MemoryError:
        raise CheckpointError(f"{path}: there is not enough memory for its tensors; free "
                              "some, or load it where there is more", op="load") from None
    except Exception as e:  # the package's error types differ from version to version
        raise CheckpointError(f"{path}: not a readable safetensors file: "
                              f"{type(e).__name__}: {e}", op="load") from None


def save_file(tensors, path, metadata=None) -> str:
    """Write {name: Tensor} to a safetensors file at `path`, atomically; returns the path.
    `metadata` is an optional {str: str} the file's header keeps ("__metadata__")."""
    package = _require()
    path = os.fspath(path)
    if not isinstance(tensors, Mapping):
        raise ArgumentError(f"save_file takes a mapping of names to tensors (a state_dict), "
                            f"got {type(tensors).__name__}", op="save_file")
    for key, t in tensors.items():
        if not isinstance(key, str) or not isinstance(t, Tensor):
            raise ArgumentError(f"save_file takes str names and rill tensors, got {key!r:.60}:"
                                f" {type(t).__name__}", op="save_file")
        if t.dtype.name not in _WRITE_NAMES:
            raise DTypeError(f"{key!r} is {t.dtype.name}, which safetensors files cannot hold "
                             f"(they hold {', '.join(_WRITE_NAMES)}); cast it first",
                             op="save_file")
    if metadata is not None and not (isinstance(metadata, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ArgumentError("save_file's metadata is a dict of str to str", op="save_file")
    arrays = {key: _disk_array(t) for key, t in tensors.items()}  # alive while writing
    specs = {key: _spec(package, _WRITE_NAMES[t.dtype.name], t.shape, arrays[key])
             for key, t in tensors.items()}

    def fill(f):
        # The package writes by name: it fills the temporary file write_atomically made,
        # which that then fsyncs and renames.
        package.serialize_file(specs, f.name, metadata=dict(metadata) if metadata else None)

    return write_atomically(path, fill, op="save_file")


def _require():
    try:
        import safetensors
    except ImportError:
        raise CheckpointError('the safetensors package is not installed; install it with '
                              'pip install "rill[safetensors]"', op="safetensors") from None
    return safetensors


def _spec(package, dtype: str, shape, array: np.ndarray):
    if hasattr(package, "TensorSpec"):  # safetensors >= 0.8 takes pointers
        return package.TensorSpec(dtype=dtype, shape=list(shape), data_ptr=array.ctypes.data,
                                  data_len=array.nbytes)
    return {"dtype": dtype, "shape": list(shape), "data": array.tobytes()}


def _check_specs(specs, path, budget) -> None:
    total = 0
    for key, (code, shape) in specs.items():
        if code not in DTYPES:
            raise CheckpointError(f"{path}: tensor {key!r} is {code}, a dtype rill does not "
                                  f"have (it has {', '.join(DTYPES)})", op="load")
        total += math.prod(shape) * DTYPES[code].storage.itemsize
    if total > budget:
        raise CheckpointError(f"{path}: its tensors take {show_bytes(total)}, more than "
                              f"{over_budget(budget)}", op="load")


def _checked(array: np.ndarray, code: str, path, key) -> np.ndarray:
    if code == "BOOL":
        raw = array.view(np.uint8)
        if raw.size and raw.max() > 1:
            raise CheckpointError(f"{path}: bool tensor {key!r} holds byte {int(raw.max())}; "
                                  "a bool is stored as 0 or 1", op="load")
    return array


def _header(f, path) -> tuple[dict, int]:
    """The JSON header and where the data starts, read by rill (for bfloat16 values)."""
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    (length,) = struct.unpack("<Q", f.read(8))
    if length > min(MAX_HEADER, size - 8):
        raise CheckpointError(f"{path}: its header claims {length} bytes, more than the "
                              "file holds", op="load")
    return json.loads(f.read(length)), 8 + length


def _read_bfloat16(f, path, key, shape, header) -> np.ndarray:
    entries, start = header
    entry = entries.get(key)
    count = math.prod(shape)
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if not (isinstance(offsets, list) and len(offsets) == 2 and
            all(isinstance(o, int) for o in offsets) and offsets[1] - offsets[0] == 2 * count):
        raise CheckpointError(f"{path}: tensor {key!r}'s data_offsets {offsets!r:.60} do not "
                              f"span its {count} bfloat16 values", op="load")
    bits = np.empty(count, dtype="<u2")
    f.seek(start + offsets[0])
    if f.readinto(bits.view(np.uint8)) != 2 * count:
        raise CheckpointError(f"{path}: truncated inside tensor {key!r}", op="load")
    return (bits.astype(np.uint32) << 16).view(np.float32)


register_reader(1, lambda head: load_from if looks_like(head) else None)  # for rill.load
