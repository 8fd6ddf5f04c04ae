"""PyTorch checkpoints (`torch.save`'s zip format) read without torch and without unpickling.

A `torch.save` file is a zip archive: `<name>/data.pkl` pickles the saved structure, each
tensor as a call of `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`
whose storage is a persistent id `('storage', torch.FloatStorage, key, location, numel)`;
the storage's bytes are the stored entry `<name>/data/<key>`, in the byte order that
`<name>/byteorder` names (little when absent).

`load_from` reads that pickle with rill.restricted_pickle: only the tensor rebuilders below,
the storage types of rill's dtypes, OrderedDict and plain values are allowed, and rill builds
each tensor itself from the storage's bytes. Anything else the pickle names (a model class,
`os.system` by a crafted `__reduce__`, NumPy arrays) is refused with a CheckpointError that
names it, before anything is called: the same promise as `torch.load(weights_only=True)`.

Every size comes from the file, so every one is checked before it is used: the pickle is at
most MAX_PICKLE bytes; a storage's entry must hold exactly numel * itemsize bytes; a tensor
must lie inside its storage; and storages and tensor copies together stay within the load
budget (rill.files), refused before anything over it is allocated.
"""
from __future__ import annotations

import math
import zipfile
import zlib

import numpy as np

from . import dtypes as _dt
from . import restricted_pickle as _rp
from .devices import device as _as_device
from .errors import CheckpointError
from .files import MAX_JSON, load_budget, over_budget, read_bounded, show_bytes
from .serialization import register_reader
from .tensor import new_tensor, Tensor

ZIP_MAGIC = b"PK\x03\x04"
MAX_PICKLE = MAX_JSON  # a state dict's pickle is small; its tensors live in the storages
MAX_NDIM = 64

# The storage types torch pickles, for the dtypes rill has.
STORAGES = {
    "DoubleStorage": _dt.float64, "FloatStorage": _dt.float32, "HalfStorage": _dt.float16,
    "BFloat16Storage": _dt.bfloat16, "LongStorage": _dt.int64, "IntStorage": _dt.int32,
    "ShortStorage": _dt.int16, "CharStorage": _dt.int8, "ByteStorage": _dt.uint8,
    "BoolStorage": _dt.bool_, "ComplexFloatStorage": _dt.complex64,
    "ComplexDoubleStorage": _dt.complex128,
}

_REFUSAL_FIX = (
    "rill reads from a PyTorch checkpoint only tensors, storages, dicts, lists, tuples and "
    "plain values, and never runs code from it (as torch.load(weights_only=True)). If the "
    "file is one you trust, load it with PyTorch and save the tensors it holds, e.g. "
    "torch.save(model.state_dict(), path) or safetensors")


def is_torch_zip(head: bytes) -> bool:
    """Whether a file's first bytes are a zip archive's (as `torch.save` writes)."""
    return head.startswith(ZIP_MAGIC)


def is_pickle(head: bytes) -> bool:
    """Whether a file's first bytes are a pickle's (protocol 2 to 5)."""
    return head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")


# A legacy torch.save file starts with this number, pickled (protocol 2, LONG1).
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950a86a20f9469cfc6c).to_bytes(10, "little")


def refuse_pickle(path, head: bytes) -> None:
    """A bare pickle: PyTorch's legacy format or any other; rill reads neither."""
    if head.startswith(_LEGACY_MAGIC):
        raise CheckpointError(
            f"{path}: PyTorch's legacy format (written before torch 1.6, or with "
            "_use_new_zipfile_serialization=False), which rill does not read; load it with "
            "PyTorch and save it again with torch.save(obj, path) (the zip format rill reads) "
            "or as safetensors", op="load")
    raise CheckpointError(
        f"{path}: a pickle file, which rill does not read (unpickling can run any code); "
        "save the tensors with rill.save, torch.save or safetensors", op="load")


def load_from(f, path, device=None, *, max_bytes=None):
    """The object a `torch.save` zip archive holds, its tensors as rill tensors on the cpu
    (or `device`). `f` is the file open at its start (files.open_regular), `path` names it
    in errors, `max_bytes` is the load budget."""
    budget = load_budget(max_bytes, op="load")
    fault = _Fault(path)
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
        fault(f"not a rill file, and not a readable zip archive as torch.save writes ({e}): "
              "if it is one, it is truncated or corrupted")
    with archive:
        prefix = _checkpoint_prefix(archive, fault)
        order = _byte_order(archive, prefix, fault)
        data = _read_entry(archive, prefix + "data.pkl", MAX_PICKLE, fault)
        target = _as_device("cpu" if device is None else device)
        reader = _Reader(archive, prefix, order, budget, fault, target)
        try:
            obj = _rp.loads(data, allowed=reader.allowed, persistent_load=reader.storage,
                            build=_build)
        except _rp.Refused as e:
            fault(f"refused: its {prefix}data.pkl {e}. {_REFUSAL_FIX}")
        except MemoryError:
            fault("there is not enough memory for its tensors; free some, or load it where "
                  "there is more")
    return obj


class _Fault:
    def __init__(self, path):
        self.path = path

    def __call__(self, what: str):
        raise CheckpointError(f"{self.path}: {what}", op="load")


def _checkpoint_prefix(archive, fault) -> str:
    names = archive.namelist()
    found = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1
             and n.split("/")[1] == "data.pkl"]
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        fault("a TorchScript archive (torch.jit.save), which holds code; rill reads the "
              "weights of a torch.save checkpoint: save the scripted model's state_dict() "
              "with torch.save")
    if len(found) == 1:
        return found[0][:-len("data.pkl")]
    fault(f"a zip archive with {len(found)} '<name>/data.pkl' entries, not 1: not a "
          "torch.save checkpoint")


def _byte_order(archive, prefix, fault) -> str:
    if prefix + "byteorder" not in archive.namelist():
        return "<"  # written before torch recorded it: little-endian machines
    text = _read_entry(archive, prefix + "byteorder", 16, fault)
    if text not in (b"little", b"big"):
        fault(f"its {prefix}byteorder says {text!r}, not 'little' or 'big'")
    return "<" if text == b"little" else ">"


def _read_entry(archive, name, limit, fault) -> bytes:
    try:
        with archive.open(name) as entry:
            return read_bounded(entry, f"{fault.path}:{name}", limit, op="load")
    except _ZIP_ERRORS as e:
        fault(f"cannot read {name} ({e}): the archive is truncated or corrupted")


_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError,
               NotImplementedError, ValueError, KeyError)


class _Storage:
    """One storage's elements, as a 1-d host array of its dtype's buffer type."""

    __slots__ = ("key", "dtype", "array")

    def __init__(self, key, dtype, array):
        self.key, self.dtype, self.array = key, dtype, array


class _StorageType:
    """What `torch.FloatStorage` & kin stand for in a pickle: a dtype."""

    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype


class _TypeMarker:
    """torch.Tensor or torch.nn.Parameter, named as _rebuild_from_type_v2's type."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class _Reader:
    """Reads the storages a pickle names, once each, and rebuilds tensors from them, all
    within the load budget."""

    def __init__(self, archive, prefix, order, budget, fault, target):
        self.archive, self.prefix, self.order = archive, prefix, order
        self.target = target
        self.budget, self.spent, self.fault = budget, 0, fault
        self.storages = {}
        self.allowed = dict(_rp.PLAIN)
        for name, dtype in STORAGES.items():
            self.allowed[f"torch {name}"] = _StorageType(name, dtype)
        self.allowed.update({
            "torch._utils _rebuild_tensor_v2": _rp.Call("torch._utils._rebuild_tensor_v2",
                                                        self.rebuild_tensor_v2),
            "torch._utils _rebuild_tensor": _rp.Call("torch._utils._rebuild_tensor",
                                                     self.rebuild_tensor),
            "torch._utils _rebuild_parameter": _rp.Call("torch._utils._rebuild_parameter",
                                                        _rebuild_parameter),
            "torch._utils _rebuild_parameter_with_state": _rp.Call(
                "torch._utils._rebuild_parameter_with_state", _rebuild_parameter_with_state),
            "torch._tensor _rebuild_from_type_v2": _rp.Call(
                "torch._tensor._rebuild_from_type_v2", _rebuild_from_type_v2),
            "torch Tensor": _TypeMarker("torch.Tensor"),
            "torch.nn.parameter Parameter": _TypeMarker("torch.nn.Parameter"),
            "torch Size": _rp.Call("torch.Size", _size),
        })

    def charge(self, nbytes: int, what: str) -> None:
        if self.spent + nbytes > self.budget:
            self.fault(f"{what} takes {show_bytes(nbytes)}, which with the "
                       f"{show_bytes(self.spent)} read before it is more than "
                       f"{over_budget(self.budget)}")
        self.spent += nbytes

    def storage(self, pid) -> _Storage:
        """BINPERSID: ('storage', storage type, key, location, numel)."""
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _rp.Refused(f"has a persistent id {pid!r:.80} that is not a storage's")
        _, kind, key, _location, numel = pid  # any location: tensors load where rill says
        if not isinstance(kind, _StorageType):
            raise _rp.Refused(f"has a storage of type {kind!r:.60}, not one of rill's dtypes "
                              f"({', '.join(STORAGES)})")
        if not isinstance(key, str) or not _is_int(numel) or numel < 0:
            raise _rp.Refused(f"has a malformed storage id {pid!r:.80}")
        known = self.storages.get(key)
        if known is not None:
            if known.dtype is not kind.dtype or known.array.size != numel:
                raise _rp.Refused(f"names storage {key!r} as {kind.name} of {numel} elements "
                                  f"and before as {known.dtype.name} of {known.array.size}")
            return known
        known = self.storages[key] = _Storage(key, kind.dtype, self.read(key, kind, numel))
        return known

    def read(self, key, kind, numel) -> np.ndarray:
        name = f"{self.prefix}data/{key}"
        dtype = kind.dtype
        disk = _disk_dtype(dtype).newbyteorder(self.order)
        nbytes = numel * disk.itemsize
        try:
            info = self.archive.getinfo(name)
        except KeyError:
            raise _rp.Refused(f"names storage {key!r}, which the archive lacks ({name})") \
                from None
        if info.file_size != nbytes:
            self.fault(f"{name} holds {info.file_size} bytes, but the pickle says it is a "
                       f"{kind.name} of {numel} elements ({nbytes} bytes)")
        held = numel * dtype.storage.itemsize  # bfloat16 is held in float32
        self.charge(nbytes + (held if held != nbytes else 0), f"storage {key!r}")
        raw = np.empty(nbytes, dtype=np.uint8)
        try:
            with self.archive.open(info) as entry:
                _read_exactly(entry, raw, name, self.fault)
        except _ZIP_ERRORS as e:
            self.fault(f"cannot read {name} ({e}): the archive is truncated or corrupted")
        values = raw.view(disk)
        if dtype is _dt.bfloat16:
            return (values.astype(np.uint32) << 16).view(np.float32)
        if dtype is _dt.bool_:
            if raw.size and raw.max() > 1:
                self.fault(f"{name}: a bool storage holds byte {int(raw.max())}; a bool is "
                           "stored as 0 or 1")
            return raw.view(np.bool_)
        return values.astype(dtype.storage, copy=False)  # a no-op in the machine's order

    def rebuild_tensor_v2(self, storage, offset, size, stride, requires_grad=False,
                          backward_hooks=None, metadata=None):
        if backward_hooks:
            raise _rp.Refused("saves a tensor with backward hooks")
        if metadata:
            raise _rp.Refused(f"saves a tensor with metadata {metadata!r:.60}, which rill "
                              "does not read")
        return self.rebuild_tensor(storage, offset, size, stride, requires_grad)

    def rebuild_tensor(self, storage, offset, size, stride, requires_grad=False):
        if not isinstance(storage, _Storage):
            raise _rp.Refused(f"rebuilds a tensor from {type(storage).__name__}, not a "
                              "storage")
        if not (_is_int(offset) and offset >= 0 and _is_ints(size) and _is_ints(stride)
                and len(size) == len(stride) <= MAX_NDIM and isinstance(requires_grad, bool)):
            raise _rp.Refused(f"rebuilds a tensor with a malformed layout (offset {offset!r:.20}"
                              f", size {size!r:.60}, stride {stride!r:.60})")
        array = storage.array
        count = math.prod(size)
        if count and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= array.size:
            raise _rp.Refused(f"rebuilds a tensor of size {tuple(size)}, stride {tuple(stride)}"
                              f" at offset {offset}, which reaches past its storage "
                              f"{storage.key!r} ({array.size} elements)")
        if count == array.size and offset == 0 and _is_contiguous(size, stride):
            host = array.reshape(size)  # the whole storage: shared, not copied
        elif count == 0:
            host = np.empty(size, dtype=array.dtype)
        else:
            self.charge(count * array.itemsize, f"a tensor of size {tuple(size)}")
            item = array.itemsize
            host = np.lib.stride_tricks.as_strided(
                array[offset:], shape=tuple(size), strides=tuple(s * item for s in stride)).copy()
        t = new_tensor(host, storage.dtype, _as_device("cpu"))
        if self.target is not t.device:
            t = t.to(self.target)
        if requires_grad and storage.dtype.is_inexact:
            t.requires_grad_()
        return t


def _rebuild_parameter(data, requires_grad, backward_hooks=None):
    from .nn.parameter import Parameter  # nn sits above serialization; only needed here
    if not isinstance(data, Tensor) or not isinstance(requires_grad, bool):
        raise _rp.Refused("rebuilds a Parameter from something other than a tensor")
    if backward_hooks:
        raise _rp.Refused("saves a Parameter with backward hooks")
    return Parameter(data, requires_grad=requires_grad and data.dtype.is_inexact)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    if state:
        raise _rp.Refused(f"saves a Parameter with Python attributes {_keys(state)}, which "
                          "rill does not read")
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _rebuild_from_type_v2(func, new_type, args, state):
    if not isinstance(func, _rp.Call) or not isinstance(args, tuple):
        raise _rp.Refused("calls torch._tensor._rebuild_from_type_v2 with a malformed call")
    if not isinstance(new_type, _TypeMarker):
        raise _rp.Refused(f"rebuilds a tensor of type {new_type!r:.60}")
    if state:
        raise _rp.Refused(f"saves a tensor with Python attributes {_keys(state)}, which rill "
                          "does not read")
    t = func.fn(*args)
    return _rebuild_parameter(t, t.requires_grad) if new_type.name.endswith("Parameter") else t


def _size(dims=()):
    if not _is_ints(dims):
        raise _rp.Refused(f"calls torch.Size with {dims!r:.60}")
    return tuple(dims)


def _build(obj, state):
    """BUILD as state dicts use it: an OrderedDict's `_metadata` (module versions)."""
    from collections import OrderedDict
    if type(obj) is OrderedDict and isinstance(state, dict) and set(state) == {"_metadata"}:
        obj._metadata = state["_metadata"]
        return
    raise _rp.Refused(f"sets state {_keys(state)} on a {type(obj).__name__} (BUILD)")


def _keys(state) -> str:
    return repr(list(state)[:5]) if isinstance(state, dict) else f"{type(state).__name__}"


def _disk_dtype(dtype) -> np.dtype:
    if dtype is _dt.bfloat16:
        return np.dtype("<u2")
    if dtype is _dt.bool_:
        return np.dtype(np.uint8)
    return np.dtype(dtype.storage)


def _read_exactly(entry, raw, name, fault) -> None:
    """Fill `raw` from a zip entry in pieces, then check the entry ends there (which makes
    zipfile check its CRC-32)."""
    view, done = memoryview(raw), 0
    while done < raw.size:
        n = entry.readinto(view[done:done + (1 << 24)])
        if not n:
            fault(f"{name} is truncated: {done} of {raw.size} bytes")
        done += n
    if entry.read(1):
        fault(f"{name} is longer than its {raw.size} bytes")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_ints(v) -> bool:
    return isinstance(v, (tuple, list)) and all(_is_int(n) and n >= 0 for n in v)


def _is_contiguous(size, stride) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _zip_reader(head: bytes):
    return load_from if is_torch_zip(head) else None


def _pickle_refusal(head: bytes):
    if not is_pickle(head):
        return None
    return lambda f, path, device, max_bytes: refuse_pickle(path, head)


# rill.load reads PyTorch's zip files, and refuses its legacy pickles with the way round; the
# safetensors check (rank 1) comes before the pickle test: a length may start with 0x80.
register_reader(0, _zip_reader)
register_reader(2, _pickle_refusal)
