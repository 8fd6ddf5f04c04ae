"""rill.save and rill.load: tensors and nested structures in one checksummed file.

The layout is documented in docs/FORMAT.md: a fixed header, a JSON manifest (the structure,
and for every tensor its name, shape, dtype, offset, length and CRC-32), then the raw
little-endian buffers. Nothing is pickled, so loading a file never runs code from it.

Every way a file can be wrong (missing, truncated, a flipped bit, not a rill file, a newer
format, or crafted: CRC-valid but outside the schema) raises `CheckpointError` naming the
file and the fault; a load never returns data it has not verified, and bounds its recursion
and allocation by limits, the file's size and the load budget (docs/FORMAT.md, "Trust
model"; lib/files.py: only regular files are read, a FIFO or device is refused at once).
Writes go to a temporary file in the same directory that replaces the target only once it
is complete and on disk, so a crash leaves the old file or the new one.
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
from .errors import ArgumentError, CheckpointError
from .files import MAX_JSON, load_budget, open_regular, over_budget, show_bytes
from .ops.sparse_rows import SparseRows
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

# Limits a file must keep to: they bound the loader's recursion and allocation, whatever the
# file says. NumPy arrays have at most 64 axes; state dicts nest a handful of levels deep.
MAX_NESTING = 100  # containers (lists, tuples, dicts) inside one another, the outermost included
MAX_NDIM = 64
_MAX_BYTES = 2**63 - 1  # what one NumPy array can span, counting a 0-length axis as 1

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


def load(path, device=None, *, map_location=None, weights_only=None, max_bytes=None):
    """Read a file written by `save`, verifying every byte; tensors come back on the cpu,
    or on `device` if given. PyTorch's spellings work too: `map_location` is `device` (a
    device or its name), and `weights_only` is accepted and changes nothing, because loading
    never runs code whatever the file holds. `path` must be a regular file (a link to one is
    followed); its tensors may take at most `max_bytes` (default: RILL_LOAD_MAX_BYTES, else
    the machine's memory; see rill.files), checked before any is allocated.

    Weights other frameworks wrote load too, known by their first bytes: a `torch.save`
    checkpoint (read without torch and without unpickling: rill.torch_format) and a
    `.safetensors` file (rill.utils.safetensors, which needs the safetensors package).

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
    if map_location is not None:
        if device is not None:
            raise ArgumentError("got both device= and map_location=, which mean the same; "
                                "pass one", op="load")
        if callable(map_location) or isinstance(map_location, dict):
            raise ArgumentError("map_location must name one device (a function or a "
                                "dict of devices is PyTorch's storage remapping, which "
                                "rill files do not need)", op="load")
        device = map_location
    budget = load_budget(max_bytes, op="load")
    f, _ = open_regular(path, op="load")  # a link is followed: `latest.rill` may be one
    with f:
        other = _other_format(f, path, device, budget)
        if other is not None:
            return other()
        return load_from(f, path, device, max_bytes=budget)


# Readers of files other frameworks write, registered by the modules that read them when rill
# is imported (torch_format.py, utils/safetensors.py): (rank, recognize), tried in rank order;
# recognize(head: the file's first 16 bytes) -> read(f, path, device, max_bytes), or None.
_READERS: list = []


def register_reader(rank: int, recognize) -> None:
    """Let `load` read another format: files whose first bytes `recognize` knows."""
    _READERS.append((rank, recognize))
    _READERS.sort(key=lambda entry: entry[0])


def _other_format(f, path, device, budget):
    """A loader for a file another framework wrote (by its first bytes), or None for a
    rill file (and anything else, which the rill loader refuses)."""
    head = f.read(16)
    f.seek(0)
    if head.startswith(MAGIC):
        return None
    for _, recognize in _READERS:
        read = recognize(head)
        if read is not None:
            return lambda: read(f, path, device, max_bytes=budget)
    return None


def load_from(f, path, device=None, *, max_bytes=None):
    """What `load` returns, read from `f`, a binary file open at its start that
    `files.open_regular` opened (so a loader that checked the file first, as a saved graph
    checks its state file's SHA-256, reads the very file it checked). `path` names it in
    errors; `max_bytes` is the load budget (rill.files)."""
    budget = load_budget(max_bytes, op="load")
    size = os.fstat(f.fileno()).st_size
    manifest, data_start = _read_manifest(f, path, size)
    entries = _check_manifest(manifest, path, size - data_start)
    if manifest["data_length"] > budget:
        _Fault(path)(f"its tensors take {show_bytes(manifest['data_length'])}, more than "
                     f"{over_budget(budget)}")
    target = None if device is None else _as_device(device)
    tensors, cursor = [], data_start
    try:
        for e in entries:
            _check_padding(f, path, data_start + e.offset - cursor)
            tensors.append(_read_tensor(f, path, e, target))
            cursor = data_start + e.offset + e.length
    except MemoryError:  # within the budget, yet more than this machine has free
        _Fault(path)(f"there is not enough memory for its tensors "
                     f"({show_bytes(manifest['data_length'])}); free some, or load it where "
                     "there is more")
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
        if t.device.task is not None:  # its value is another process's; ours is stale
            raise CheckpointError(
                f"{os.fspath(path) + ': ' if path is not None else ''}cannot save "
                f"{'at ' + repr(name) if name else 'the tensor'}: it is held by task "
                f"{t.device.task}, and this process has only its initial value. Save it with "
                "rill.train.Checkpoint (which asks that task to save it), or "
                "rill.distributed.fetch() it first", op="save")
        tensors.append(t)
        names.append(name)
        return {"tensor": len(tensors) - 1}

    def walk(o, name, depth=0):
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
            if depth >= MAX_NESTING:
                _unsavable(path, name, f"containers nested more than {MAX_NESTING} deep",
                           "; a load would refuse the file")
            open_containers.add(id(o))
            try:
                return walk_container(o, name, depth + 1)
            finally:
                open_containers.discard(id(o))
        hint = ""
        if isinstance(o, (np.ndarray, np.generic)):
            hint = "; convert it with rill.tensor(...) or .item()"
        elif hasattr(o, "state_dict"):
            hint = "; save its state_dict() (or use rill.train.Checkpoint)"
        _unsavable(path, name, f"a {type(o).__module__}.{type(o).__qualname__}", hint)

    open_containers: set = set()  # on the path being walked: a cycle would recurse forever

    def walk_container(o, name, depth):
        if isinstance(o, list):
            return [walk(v, _join(name, i), depth) for i, v in enumerate(o)]
        if isinstance(o, tuple):
            return {"tuple": [walk(v, _join(name, i), depth) for i, v in enumerate(o)]}
        items = []  # a dict
        for k, v in o.items():
            if not isinstance(k, (str, int)):
                _unsavable(path, name, f"a dict key of type {type(k).__name__} ({k!r})",
                           "; dict keys must be str or int")
            items.append([k, walk(v, _join(name, k), depth)])
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
    try:
        text = json.dumps(manifest, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as e:  # an int of more digits than Python will print
        raise CheckpointError(f"{path}: cannot save: {e}", op="save") from None
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
#
# The manifest is untrusted input. Every field is checked against the schema below before
# anything is allocated or built from it: types (a bool is not an int), ranges, nesting depth
# and sizes (no buffer larger than the file). Nothing in a file names code to run: tags select
# one of a fixed set of plain constructors.


class _Fault:
    """Raises CheckpointError for one file: `fault('what is wrong')`."""

    def __init__(self, path):
        self.path = path

    def __call__(self, what: str):
        raise CheckpointError(f"{self.path}: {what}", op="load")


class _Refused(Exception):
    """JSON the manifest schema has no place for, found while parsing."""


def _no_constant(name):
    # Python's json reads NaN and Infinity, which are not JSON; rill writes {"float": "nan"}.
    raise _Refused(f"holds {name}, which is not JSON (rill writes {{\"float\": ...}})")


def _unique_keys(pairs):
    # Python's json keeps the last of repeated keys; a file that says two things is refused.
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise _Refused(f"has an object with the key {key!r} twice")
        seen.add(key)
    return dict(pairs)


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
    if length > MAX_JSON:  # a header may claim any length; the JSON is parsed in memory
        fault(f"its header gives the manifest {show_bytes(length)}; a rill file's manifest is "
              f"at most {show_bytes(MAX_JSON)}, so this is not a file rill wrote")
    if HEADER_SIZE + length > size:
        fault(f"truncated: the manifest needs {length} bytes after the header, the file has "
              f"{size - HEADER_SIZE}")
    text = f.read(length)
    if zlib.crc32(text) != manifest_crc:
        fault("the manifest is corrupted (its CRC-32 does not match)")
    try:
        manifest = json.loads(text.decode(), parse_constant=_no_constant,
                              object_pairs_hook=_unique_keys)
    except _Refused as e:
        fault(f"the manifest {e}")
    except RecursionError:
        fault(f"the manifest nests too deeply to parse (a rill file nests at most "
              f"{MAX_NESTING} containers)")
    except (UnicodeDecodeError, ValueError) as e:
        fault(f"the manifest is not valid JSON ({e})")
    except MemoryError:  # under MAX_JSON, yet more objects than this machine can hold
        fault(f"the manifest ({show_bytes(length)}) holds more than there is memory to parse")
    data_start = _aligned(HEADER_SIZE + length)
    if data_start > size:
        fault(f"truncated: {size} bytes, the data section starts at byte {data_start}")
    _check_padding(f, path, data_start - HEADER_SIZE - length)
    return manifest, data_start


class _Entry:
    """One tensor's entry of the manifest, checked and typed."""

    __slots__ = ("index", "name", "shape", "dtype", "offset", "length", "crc32",
                 "requires_grad")

    def __init__(self, index, name, shape, dtype, offset, length, crc32, requires_grad):
        self.index, self.name, self.shape, self.dtype = index, name, shape, dtype
        self.offset, self.length, self.crc32 = offset, length, crc32
        self.requires_grad = requires_grad


def _check_manifest(manifest, path, data_size) -> list:
    """The tensor entries, typed, after checking every field of the manifest against the
    schema and that the entries describe exactly this file's data section."""
    fault = _Fault(path)
    if not isinstance(manifest, dict):
        fault(f"the manifest is {_kind(manifest)}, not a JSON object")
    if manifest.get("format") != FORMAT_NAME:
        fault(f"the manifest's format is {_show(manifest.get('format'))}, not {FORMAT_NAME!r}: "
              "it does not describe a rill file")
    if not _is_int(manifest.get("version")) or manifest["version"] != VERSION:
        fault(f"the manifest's version is {_show(manifest.get('version'))}, not {VERSION} as "
              "its header says")
    missing = [k for k in ("tree", "tensors", "data_length") if k not in manifest]
    if missing:
        fault(f"the manifest lacks {', '.join(missing)}")
    expected = manifest["data_length"]
    if not _is_int(expected) or expected < 0:
        fault(f"the manifest's data_length should be an int >= 0, got {_show(expected)}")
    if data_size < expected:
        fault(f"truncated: the data section should hold {expected} bytes, the file holds "
              f"{data_size}")
    if data_size > expected:
        fault(f"{data_size - expected} unexpected bytes after the data section")
    specs = manifest["tensors"]
    if not isinstance(specs, list):
        fault(f"the manifest's tensors should be a list, got {_show(specs)}")
    entries, end = [], 0
    for i, spec in enumerate(specs):
        e = _check_entry(spec, i, fault)
        where = f"the manifest entry of tensor {i} is malformed: tensors[{i}]"
        if e.offset < end:
            fault(f"{where}.offset {e.offset} is inside the buffer before it (which ends at "
                  f"{end}): buffers are in order and do not overlap")
        if e.offset + e.length > expected:
            fault(f"{where}.offset + length = {e.offset + e.length} is past the end of the data "
                  f"section ({expected} bytes)")
        end = e.offset + e.length
        entries.append(e)
    _check_tree(manifest["tree"], entries, fault, "", 0)
    return entries


def _check_entry(spec, i, fault) -> _Entry:
    where = f"the manifest entry of tensor {i} is malformed: tensors[{i}]"
    if not isinstance(spec, dict):
        fault(f"{where} is {_kind(spec)}, not a JSON object")
    missing = [k for k in ("name", "shape", "dtype", "offset", "length", "crc32")
               if k not in spec]
    if missing:
        fault(f"{where} lacks {', '.join(missing)}")

    def bad(field, wanted):
        fault(f"{where}.{field} should be {wanted}, got {_show(spec[field])}")

    name, shape, dtype = spec["name"], spec["shape"], spec["dtype"]
    offset, length, crc = spec["offset"], spec["length"], spec["crc32"]
    if not isinstance(name, str):
        bad("name", "a string")
    if not isinstance(dtype, str) or dtype not in _DISK:  # names only, not aliases
        bad("dtype", f"one of {', '.join(_DISK)}")
    if not _is_shape(shape):
        bad("shape", f"a list of at most {MAX_NDIM} ints >= 0")
    itemsize = _DISK[dtype].itemsize
    if math.prod(max(n, 1) for n in shape) * itemsize > _MAX_BYTES:
        bad("shape", f"a shape an array can have (at most {_MAX_BYTES} bytes, a 0-length "
                     "axis counting as 1)")
    if not _is_int(offset) or offset < 0 or offset % ALIGN:
        bad("offset", f"an int >= 0 and a multiple of {ALIGN}")
    if not _is_int(length):
        bad("length", "an int")
    if length != math.prod(shape) * itemsize:
        fault(f"{where}.length is {length}, but a {dtype} tensor of shape {shape} takes "
              f"{math.prod(shape) * itemsize} bytes")
    if not (isinstance(crc, str) and len(crc) == 8 and all(c in "0123456789abcdef" for c in crc)):
        bad("crc32", "8 lowercase hex digits")
    requires_grad = spec.get("requires_grad", False)  # optional: fields may be added, not removed
    if not isinstance(requires_grad, bool):
        bad("requires_grad", "true or false")
    return _Entry(i, name, tuple(shape), _dt.as_dtype(dtype), offset, length, crc,
                  requires_grad)


def _check_tree(node, entries, fault, name: str, depth: int) -> None:
    """Check the structure against what `plan` writes (tags, types, tensor references,
    nesting depth) before anything is built from it."""
    where = f"the manifest's tree at '{name}'" if name else "the manifest's tree (its root)"
    if node is None or isinstance(node, (bool, int, str)):
        return
    if isinstance(node, float):
        if not math.isfinite(node):  # a literal like 1e999; plan writes {"float": "inf"}
            fault(f"{where} holds a number too large for a float")
        return
    if isinstance(node, (list, dict)) and depth >= MAX_NESTING:
        fault(f"{where}: containers nest more than {MAX_NESTING} deep")
    if isinstance(node, list):
        for i, v in enumerate(node):
            _check_tree(v, entries, fault, _join(name, i), depth + 1)
        return
    if isinstance(node, dict) and len(node) == 1:
        (tag, body), = node.items()
        if tag == "tensor" and _is_int(body) and 0 <= body < len(entries):
            return
        if tag == "tuple" and isinstance(body, list):
            for i, v in enumerate(body):
                _check_tree(v, entries, fault, _join(name, i), depth + 1)
            return
        if tag == "dict" and isinstance(body, list) and all(
                isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], (str, int))
                for kv in body):
            for k, v in body:
                _check_tree(v, entries, fault, _join(name, k), depth + 1)
            return
        if tag == "float" and body in ("nan", "inf", "-inf"):
            return
        if tag == "sparse_rows" and isinstance(body, dict):
            _check_sparse_rows(body, entries, fault, where)
            return
    fault(f"{where} holds a node rill does not write: {_show(node)}")


def _check_sparse_rows(body, entries, fault, where) -> None:
    if set(body) != {"indices", "rows", "shape"}:
        fault(f"{where}: a sparse_rows node has the keys indices, rows and shape, this one "
              f"{', '.join(map(repr, body))}")
    refs = [body["indices"], body["rows"]]
    if not all(isinstance(r, dict) and set(r) == {"tensor"} and _is_int(r["tensor"])
               and 0 <= r["tensor"] < len(entries) for r in refs):
        fault(f"{where}: sparse_rows indices and rows should be tensors, got {_show(refs)}")
    shape = body["shape"]
    if not _is_shape(shape) or not shape:
        fault(f"{where}: sparse_rows shape should be a list of 1 to {MAX_NDIM} ints >= 0, "
              f"got {_show(shape)}")
    indices, rows = (entries[r["tensor"]] for r in refs)
    if indices.dtype is not _dt.int64 or len(indices.shape) != 1:
        fault(f"{where}: sparse_rows indices should be a 1-d int64 tensor, got "
              f"{indices.dtype.name} {indices.shape}")
    if rows.shape != (indices.shape[0], *shape[1:]):
        fault(f"{where}: sparse_rows rows should have shape {(indices.shape[0], *shape[1:])} "
              f"(one row per index, of the dense shape {tuple(shape)}), got {rows.shape}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_shape(value) -> bool:
    return isinstance(value, list) and len(value) <= MAX_NDIM and \
        all(_is_int(n) and n >= 0 for n in value)


def _kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _show(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_padding(f, path, n):
    # Every byte of a file is checked: padding must be zeros, as written. Read in pieces: a
    # crafted gap as large as the file should not take as much memory.
    while n > 0:
        piece = f.read(min(n, 1 << 20))
        if not piece:
            _Fault(path)("truncated inside the padding between buffers")
        if any(piece):
            _Fault(path)("the padding between buffers is corrupted (it should be zeros)")
        n -= len(piece)


def _read_tensor(f, path, e: _Entry, target) -> Tensor:
    fault = _Fault(path)
    disk = np.empty(math.prod(e.shape), dtype=_DISK[e.dtype.name])  # <= the file's size
    raw = disk.view(np.uint8)
    if f.readinto(raw) != e.length:
        fault(f"truncated inside {_label(e)}")
    if f"{zlib.crc32(raw):08x}" != e.crc32:
        fault(f"{_label(e)} ({e.dtype.name} {e.shape}) fails its CRC-32 check: "
              "the data is corrupted")
    if e.dtype is _dt.bfloat16:
        host = (disk.astype(np.uint32) << 16).view(np.float32)
    elif e.dtype is _dt.bool_:
        if raw.size and raw.max() > 1:  # any other byte would be a bool that is neither
            k = int(np.argmax(raw > 1))
            fault(f"{_label(e)} (tensors[{e.index}], bool) holds byte {raw[k]} at element {k}; "
                  "a bool is stored as 0 or 1")
        host = disk.view(np.bool_)
    else:
        host = disk.astype(e.dtype.storage, copy=False)  # a no-op on little-endian hosts
    cpu = _as_device("cpu")
    t = new_tensor(host.reshape(e.shape), e.dtype, cpu)
    if target is not None and target is not cpu:
        t = t.to(target)
    if e.requires_grad and e.dtype.is_inexact:
        t.requires_grad_()
    return t


def _label(e: _Entry) -> str:
    return f"tensor {e.name!r}" if e.name else "the tensor"


def _decode(node, tensors, fault, name=""):
    """The saved structure back from a tree that `_check_tree` accepted."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, tensors, fault, _join(name, i)) for i, v in enumerate(node)]
    (tag, body), = node.items()
    if tag == "tensor":
        return tensors[body]
    if tag == "tuple":
        return tuple(_decode(v, tensors, fault, _join(name, i)) for i, v in enumerate(body))
    if tag == "dict":
        return {k: _decode(v, tensors, fault, _join(name, k)) for k, v in body}
    if tag == "float":
        return float(body)
    # sparse_rows: shapes were checked with the manifest; the indices need the data.
    indices, rows = tensors[body["indices"]["tensor"]], tensors[body["rows"]["tensor"]]
    host = np.asarray(indices.numpy())
    if host.size and (host.min() < 0 or host.max() >= body["shape"][0]):
        bad = int(host[(host < 0) | (host >= body["shape"][0])][0])
        fault(f"the manifest's tree at '{name}': sparse_rows index {bad} is outside its dense "
              f"shape {tuple(body['shape'])}")
    return SparseRows(indices, rows, tuple(body["shape"]))
