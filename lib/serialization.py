"""rill.save and rill.load: tensors and nested structures in one checksummed file.

The layout is documented in docs/FORMAT.md: a fixed header, a JSON manifest (the structure,
and for every tensor its name, shape, dtype, offset, length and CRC-32), then the raw
little-endian buffers. Nothing is pickled, so loading a file never runs code from it.

Every way a file can be wrong (missing, truncated, a flipped bit, not a rill file, a newer
format) raises `CheckpointError` naming the file and the fault; a load never returns data
it has not verified. Writes go to a temporary file in the same directory that replaces the
target only once it is complete and on disk, so a crash leaves the old file or the new one.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import struct
import sys
import zlib

import numpy as np

from . import dtypes as _dt
from .devices import device as _as_device
from .errors import CheckpointError
from .sparse import SparseRows
from .tensor import Tensor, new_tensor

MAGIC = b"RILL\x00"
VERSION = 1
FORMAT_NAME = "rill"
ALIGN = 64  # buffers start on 64-byte boundaries, so they can be mapped and read as arrays

# magic, format version (u16), reserved byte, manifest length (u64), manifest CRC-32 (u32),
# then the CRC-32 of those 20 bytes: a flipped bit in the length is reported as such
# instead of as a confusing truncation.
_HEAD = struct.Struct("<5sHxQI")
HEADER_SIZE = _HEAD.size + 4

TEMP_SUFFIX = ".tmp"  # temp files are '.<name>.<pid>.<random>.tmp': never a checkpoint name

# How each dtype is laid out on disk (always little-endian). bfloat16 lives in float32
# buffers in memory; on disk it takes the 2 bytes that are a bfloat16's own bits.
_DISK = {d.name: np.dtype(d.storage).newbyteorder("<") for d in _dt.ALL}
_DISK["bool"] = np.dtype(np.uint8)
_DISK["bfloat16"] = np.dtype("<u2")


def save(obj, path) -> str:
    """Write a tensor, or a nested structure of dicts, lists, tuples, scalars and tensors,
    to one file at `path`, atomically. Returns the path.

    Dict keys are str or int. Tensors are stored bit for bit (bfloat16 as its 2 bytes).
    Subclasses of dict, list and tuple (OrderedDict, namedtuples) come back as the base type.

    >>> import os, tempfile
    >>> from rill.serialization import save, load
    >>> path = os.path.join(tempfile.mkdtemp(), "state.rill")
    >>> _ = save({"w": rill.ones(2, 3), "step": 7, "note": ("adam", None)}, path)
    >>> state = load(path)
    >>> state["w"].shape, state["step"], state["note"]
    ((2, 3), 7, ('adam', None))
    """
    return write(plan(obj, path), path)


def load(path, device=None):
    """Read a file written by `save`, verifying every byte; tensors come back on the cpu,
    or on `device` if given.

    >>> import os, tempfile
    >>> from rill.serialization import save, load
    >>> path = os.path.join(tempfile.mkdtemp(), "x.rill")
    >>> _ = save(rill.arange(3, dtype=rill.bfloat16), path)
    >>> load(path)
    tensor([0., 1., 2.], dtype=bfloat16)
    >>> with open(path, "r+b") as f:
    ...     _ = f.seek(-1, 2)
    ...     _ = f.write(b"?")
    >>> try:
    ...     load(path)
    ... except rill.CheckpointError as e:
    ...     print(e.message)
    /.../x.rill: the tensor (bfloat16 (3,)) fails its CRC-32 check: the data is corrupted
    """
    path = os.fspath(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file", op="load") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot open: {e.strerror}", op="load") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        manifest, data_start = _read_manifest(f, path, size)
        specs = _check_manifest(manifest, path, size - data_start)
        target = None if device is None else _as_device(device)
        tensors, cursor = [], data_start
        for spec in specs:
            _check_padding(f, path, data_start + spec["offset"] - cursor)
            tensors.append(_read_tensor(f, path, spec, target))
            cursor = data_start + spec["offset"] + spec["length"]
        _check_padding(f, path, data_start + manifest["data_length"] - cursor)
    return _decode(manifest["tree"], tensors, _Fault(path))


# ---- writing --------------------------------------------------------------------------------


class Plan:
    """What a save will write: the manifest's structure and the tensors, in order.

    Planning walks the structure (and reports unsavable values) without touching tensor
    data, so a background writer can do the expensive part from an immutable snapshot.
    """

    __slots__ = ("tree", "tensors", "names")

    def __init__(self, tree, tensors, names):
        self.tree, self.tensors, self.names = tree, tensors, names


def plan(obj, path=None) -> Plan:
    """Check that `obj` can be saved and fix its structure; see `write`."""
    tensors, names = [], []

    def tensor_ref(t: Tensor, name: str):
        tensors.append(t)
        names.append(name)
        return {"tensor": len(tensors) - 1}

    def walk(o, name):
        if o is None or isinstance(o, (bool, int, str)):
            return o
        if isinstance(o, float):
            return o if math.isfinite(o) else {"float": repr(o)}
        if isinstance(o, Tensor):
            return tensor_ref(o, name)
        if isinstance(o, SparseRows):
            return {"sparse_rows": {"indices": tensor_ref(o.indices, _join(name, "indices")),
                                    "rows": tensor_ref(o.rows, _join(name, "rows")),
                                    "shape": list(o.shape)}}
        if isinstance(o, (list, tuple, dict)):
            if id(o) in open_containers:
                _unsavable(path, name, "a container that contains itself", "")
            open_containers.add(id(o))
            try:
                return walk_container(o, name)
            finally:
                open_containers.discard(id(o))
        hint = ""
        if isinstance(o, (np.ndarray, np.generic)):
            hint = "; convert it with rill.tensor(...) or .item()"
        elif hasattr(o, "state_dict"):
            hint = "; save its state_dict() (or use rill.train.Checkpoint)"
        _unsavable(path, name, f"a {type(o).__module__}.{type(o).__qualname__}", hint)

    open_containers: set = set()  # on the path being walked: a cycle would recurse forever

    def walk_container(o, name):
        if isinstance(o, list):
            return [walk(v, _join(name, i)) for i, v in enumerate(o)]
        if isinstance(o, tuple):
            return {"tuple": [walk(v, _join(name, i)) for i, v in enumerate(o)]}
        items = []  # a dict
        for k, v in o.items():
            if not isinstance(k, (str, int)):
                _unsavable(path, name, f"a dict key of type {type(k).__name__} ({k!r})",
                           "; dict keys must be str or int")
            items.append([k, walk(v, _join(name, k))])
        return {"dict": items}

    tree = walk(obj, "")
    return Plan(tree, tensors, names)


def write(p: Plan, path) -> str:
    """Write a planned save to `path` atomically: temp file, fsync, rename, fsync dir."""
    path = os.fspath(path)
    arrays = [_disk_array(t) for t in p.tensors]
    entries, end = [], 0
    for t, name, a in zip(p.tensors, p.names, arrays):
        entries.append({"name": name, "shape": list(t.shape), "dtype": t.dtype.name,
                        "offset": _aligned(end), "length": a.nbytes,
                        "crc32": f"{zlib.crc32(a):08x}", "requires_grad": t.requires_grad})
        end = entries[-1]["offset"] + a.nbytes
    manifest = {"format": FORMAT_NAME, "version": VERSION, "tree": p.tree,
                "tensors": entries, "data_length": end}
    text = json.dumps(manifest, separators=(",", ":"), allow_nan=False).encode()
    head = _HEAD.pack(MAGIC, VERSION, len(text), zlib.crc32(text))
    head += struct.pack("<I", zlib.crc32(head))

    def fill(f):
        f.write(head)
        f.write(text)
        f.write(bytes(_aligned(len(head) + len(text)) - len(head) - len(text)))
        written = 0
        for entry, a in zip(entries, arrays):
            f.write(bytes(entry["offset"] - written))
            f.write(a)
            written = entry["offset"] + a.nbytes

    return write_atomically(path, fill, op="save")


def write_atomically(path, fill, op: str) -> str:
    """Call fill(binary file) on a temporary file beside `path`, then fsync and rename it to
    `path` and fsync the directory: readers see the old file or the whole new one."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}."
                                   f"{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        with open(temp, "xb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException as e:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise CheckpointError(f"{path}: cannot write: {e.strerror or e}", op=op) from e
        raise
    _fsync_directory(directory)
    return path


def _disk_array(t: Tensor) -> np.ndarray:
    """The tensor's bytes as written: a C-contiguous little-endian array (0-d made 1-d)."""
    host = np.asarray(t.numpy()).reshape(-1)
    if t.dtype is _dt.bfloat16:
        bits = _dt.round_to_bfloat16(host).view(np.uint32)
        # A NaN whose payload sits only in the low half would become inf when cut to 16
        # bits; setting the quiet bit keeps it a NaN.
        half = (bits >> 16).astype("<u2")
        half[np.isnan(host)] |= np.uint16(0x0040)
        host = half
    return np.ascontiguousarray(host, dtype=_DISK[t.dtype.name]).view(np.uint8)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _fsync_directory(directory: str) -> None:
    # The rename is durable only once the directory entry is; not every OS can open a dir.
    if sys.platform.startswith("win"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _join(prefix: str, key) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _unsavable(path, name, what, hint=""):
    where = f"at '{name}'" if name else "as the saved object"
    target = f"{os.fspath(path)}: " if path is not None else ""
    raise CheckpointError(f"{target}cannot save {what} {where}: files hold dicts, lists, "
                          f"tuples, None, bool, int, float, str and tensors{hint}", op="save")


# ---- reading --------------------------------------------------------------------------------


class _Fault:
    """Raises CheckpointError for one file: `fault('what is wrong')`."""

    def __init__(self, path):
        self.path = path

    def __call__(self, what: str):
        raise CheckpointError(f"{self.path}: {what}", op="load")


def _read_manifest(f, path, size):
    fault = _Fault(path)
    head = f.read(HEADER_SIZE)
    if head[:len(MAGIC)] != MAGIC[:len(head)]:
        fault(f"not a rill file (it starts with {head[:8]!r}, a rill file with {MAGIC!r})")
    if len(head) < HEADER_SIZE:
        fault(f"truncated: {size} bytes, shorter than the {HEADER_SIZE}-byte header")
    _, version, length, manifest_crc = _HEAD.unpack(head[:_HEAD.size])
    (head_crc,) = struct.unpack("<I", head[_HEAD.size:])
    if zlib.crc32(head[:_HEAD.size]) != head_crc:
        fault("the header is corrupted (its CRC-32 does not match)")
    if version != VERSION:
        newer = "newer than" if version > VERSION else "older than"
        fault(f"format version {version} is {newer} the version this rill reads ({VERSION})")
    if HEADER_SIZE + length > size:
        fault(f"truncated: the manifest needs {length} bytes after the header, the file has "
              f"{size - HEADER_SIZE}")
    text = f.read(length)
    if zlib.crc32(text) != manifest_crc:
        fault("the manifest is corrupted (its CRC-32 does not match)")
    try:
        manifest = json.loads(text.decode())
    except (UnicodeDecodeError, ValueError) as e:
        fault(f"the manifest is not valid JSON ({e})")
    data_start = _aligned(HEADER_SIZE + length)
    if data_start > size:
        fault(f"truncated: {size} bytes, the data section starts at byte {data_start}")
    _check_padding(f, path, data_start - HEADER_SIZE - length)
    return manifest, data_start


def _check_manifest(manifest, path, data_size) -> list:
    """The tensor entries, after checking that they describe exactly this file's data."""
    fault = _Fault(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME or \
            manifest.get("version") != VERSION:
        fault("the manifest does not describe a rill file of this version")
    missing = [k for k in ("tree", "tensors", "data_length") if k not in manifest]
    if missing:
        fault(f"the manifest lacks {', '.join(missing)}")
    expected = manifest["data_length"]
    if not isinstance(expected, int) or expected < 0:
        fault(f"the manifest's data_length is malformed: {expected!r}")
    if data_size < expected:
        fault(f"truncated: the data section should hold {expected} bytes, the file holds "
              f"{data_size}")
    if data_size > expected:
        fault(f"{data_size - expected} unexpected bytes after the data section")
    specs = manifest["tensors"]
    if not isinstance(specs, list):
        fault("the manifest's tensor table is not a list")
    end = 0
    for i, s in enumerate(specs):
        try:
            dtype = _dt.as_dtype(s["dtype"])
            shape = tuple(s["shape"])
            ok = (all(isinstance(n, int) and n >= 0 for n in shape)
                  and isinstance(s["offset"], int) and isinstance(s["length"], int)
                  and s["length"] == math.prod(shape) * _DISK[dtype.name].itemsize
                  and end <= s["offset"] and s["offset"] + s["length"] <= expected
                  and isinstance(s["crc32"], str) and isinstance(s["name"], str))
            end = s["offset"] + s["length"]
        except Exception:
            ok = False
        if not ok:
            fault(f"the manifest entry of tensor {i} is malformed: {s!r}")
    return specs


def _check_padding(f, path, n):
    # Every byte of a file is checked: padding must be zeros, as written.
    if any(f.read(n)):
        _Fault(path)("the padding between buffers is corrupted (it should be zeros)")


def _read_tensor(f, path, spec, target) -> Tensor:
    dtype = _dt.as_dtype(spec["dtype"])
    shape = tuple(spec["shape"])
    disk = np.empty(math.prod(shape), dtype=_DISK[dtype.name])
    raw = disk.view(np.uint8)
    if f.readinto(raw) != spec["length"]:
        _Fault(path)(f"truncated inside {_label(spec)}")
    if f"{zlib.crc32(raw):08x}" != spec["crc32"]:
        _Fault(path)(f"{_label(spec)} ({dtype.name} {shape}) fails its CRC-32 check: "
                     "the data is corrupted")
    if dtype is _dt.bfloat16:
        host = (disk.astype(np.uint32) << 16).view(np.float32)
    elif dtype is _dt.bool_:
        host = disk.view(np.bool_)
    else:
        host = disk.astype(dtype.storage, copy=False)  # a no-op on little-endian hosts
    cpu = _as_device("cpu")
    t = new_tensor(host.reshape(shape), dtype, cpu)
    if target is not None and target is not cpu:
        t = t.to(target)
    if spec.get("requires_grad") and dtype.is_floating:
        t.requires_grad_()
    return t


def _label(spec) -> str:
    return f"tensor '{spec['name']}'" if spec["name"] else "the tensor"


def _decode(node, tensors, fault):
    """The saved structure back from the manifest tree (every node was written by `plan`)."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors, fault) for v in node]
    if isinstance(node, dict) and len(node) == 1:
        (tag, body), = node.items()
        if tag == "tensor" and isinstance(body, int) and 0 <= body < len(tensors):
            return tensors[body]
        if tag == "tuple" and isinstance(body, list):
            return tuple(_decode(v, tensors, fault) for v in body)
        if tag == "dict" and isinstance(body, list) and all(
                isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], (str, int))
                for kv in body):
            return {k: _decode(v, tensors, fault) for k, v in body}
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "sparse_rows" and isinstance(body, dict):
            return SparseRows(_decode(body.get("indices"), tensors, fault),
                              _decode(body.get("rows"), tensors, fault), body.get("shape", ()))
    fault(f"the manifest's structure holds an unknown node {str(node)[:80]}")
