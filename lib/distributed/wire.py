"""The parameter servers' wire format: a fixed header, then typed entries of raw buffers.

A message between a worker and a ps is data, and the receiver reads it as data: nothing is
unpickled, so a peer that can reach a rank can at worst make it refuse a message (with a
DistributedError naming the sender and the fault). All integers are little-endian and every
part starts on an 8-byte boundary:

    header (24 bytes)  magic b"RLPS" | version u8 | kind u8 | 2 zero bytes | step i64 |
                       number of entries u32 | 4 zero bytes
    entry              field u8 | dtype u8 | ndim u8 | 1 zero byte | name length u32 |
                       ndim dimensions, u64 each | the name, UTF-8 | the array's bytes,
                       C order, little-endian (name and bytes each padded to 8)

Kinds and the fields each carries (an entry's name is a variable's name):

    pull   worker -> ps   wanted (variables to send back whole; an empty array),
                          indices (rows of an embedding table to send back)
    push   worker -> ps   value (a variable's gradient), indices + rows (a table's gradient)
    reply  ps -> worker   value (a variable), indices + rows (rows of a table)
    close  worker -> ps   nothing
    state     worker -> ps   nothing: asks for the ps's share of the training state
    snapshot  both ways      a ps's share of the training state (ps_state.py): value,
                             indices + rows, array (a tensor slot), meta (a number slot);
                             the step is the ps's global step

and for captured graphs whose partitions run on other tasks (lib/distributed/graphs/):

    register  worker -> ps   graph (the partition's document, UTF-8 JSON bytes), value
                             (its variables' initial values), array (its constants), meta
    run       worker -> ps   meta (which registered graph); the step is the worker's call
    tensor    both ways      value (named by its rendezvous key), meta (the global step)
    fetch     worker -> ps   wanted (variables whose current values to send back)
    ack       ps -> worker   meta;  error: text (what the ps refused, UTF-8)
    save, restore            text (the checkpoint directory), meta (the step)

>>> import numpy as np
>>> from rill.distributed import wire
>>> data = wire.encode("push", 3, [("value", "bias", np.ones(2, np.float32))])
>>> len(data), wire.decode(data, "rank 1").entries[0][:2]
(56, ('value', 'bias'))
"""
from __future__ import annotations

import math
import struct
from typing import NamedTuple

import numpy as np

from ..errors import DistributedError

MAGIC = b"RLPS"
VERSION = 3  # 2: the kinds of captured graphs across tasks; 3: state and snapshot
HEADER = struct.Struct("<4sBBHqII")
ENTRY = struct.Struct("<BBBBI")
KINDS = ("pull", "push", "reply", "close",          # coded as index + 1
         "register", "run", "tensor", "fetch", "ack", "error", "save", "restore",
         "state", "snapshot")
FIELDS = ("value", "wanted", "indices", "rows", "graph", "array", "meta", "text")
CARRIES = {"pull": {"wanted", "indices"}, "push": {"value", "indices", "rows"},
           "reply": {"value", "indices", "rows", "meta"}, "close": set(),
           # captured graphs across tasks (lib/distributed/graphs/)
           "register": {"graph", "value", "array", "meta"}, "run": {"meta"},
           "tensor": {"value", "meta"}, "fetch": {"wanted"}, "ack": {"meta"},
           "error": {"text"}, "save": {"text", "meta"}, "restore": {"text", "meta"},
           # a parameter-server job's training state (ps_state.py)
           "state": set(), "snapshot": {"value", "indices", "rows", "array", "meta"}}
# The NumPy dtypes of rill's host buffers (bfloat16 lives in float32), coded as index + 1.
DTYPES = tuple(np.dtype(t) for t in ("<?", "<i1", "<i2", "<i4", "<i8", "<u1", "<f2", "<f4",
                                     "<f8"))
MAX_NDIM = 64    # what NumPy allows
MAX_NAME = 4096  # bytes of a variable's name
_CODE = {d.newbyteorder("="): i + 1 for i, d in enumerate(DTYPES)}
_FIELD_CODE = {f: i + 1 for i, f in enumerate(FIELDS)}
_SHAPE = [struct.Struct(f"<{n}Q") for n in range(MAX_NDIM + 1)]
_CODE_OF: dict = {}  # dtype object -> its code (or None): newbyteorder costs a microsecond
_MAX_BYTES = np.iinfo(np.intp).max


class Message(NamedTuple):
    kind: str
    step: int
    entries: list  # [(field, name, array)]


def _padded(n: int) -> int:
    return n + (-n % 8)


def encode(kind: str, step: int, entries) -> bytearray:
    """One message as a single buffer, to send as MPI bytes."""
    if kind not in KINDS:
        raise DistributedError(f"no message kind {kind!r}; expected one of {KINDS}", op="wire")
    parts = []
    size = HEADER.size
    for field, name, array in entries:
        array = np.asarray(array)
        code = _CODE_OF.get(array.dtype)
        if code is None:  # first sight of this dtype object (a byte order spelled out)
            code = _CODE_OF[array.dtype] = _CODE.get(array.dtype.newbyteorder("="))
        if field not in CARRIES[kind] or code is None or array.ndim > MAX_NDIM:
            raise DistributedError(f"a {kind} message cannot carry {field!r} {name!r} as "
                                   f"{array.dtype}[{array.ndim} dims]", op="wire")
        raw_name = name.encode("utf-8")
        data = array if array.dtype is DTYPES[code - 1] and array.flags.c_contiguous else \
            array.astype(DTYPES[code - 1], order="C", copy=False)  # 0-d stays 0-d
        parts.append((_FIELD_CODE[field], code, data, raw_name))
        size += ENTRY.size + 8 * data.ndim + _padded(len(raw_name)) + _padded(data.nbytes)
    out = bytearray(size)
    HEADER.pack_into(out, 0, MAGIC, VERSION, KINDS.index(kind) + 1, 0, step, len(parts), 0)
    at = HEADER.size
    for field, code, data, raw_name in parts:
        ENTRY.pack_into(out, at, field, code, data.ndim, 0, len(raw_name))
        at += ENTRY.size
        _SHAPE[data.ndim].pack_into(out, at, *data.shape)
        at += 8 * data.ndim
        out[at:at + len(raw_name)] = raw_name
        at += _padded(len(raw_name))
        # small arrays as bytes (fewer calls); large ones copied once, through a view
        out[at:at + data.nbytes] = data.tobytes() if data.nbytes <= 4096 else \
            data.reshape(-1).view(np.uint8).data
        at += _padded(data.nbytes)
    return out


def decode(buffer, sender: str) -> Message:
    """Read a message, checking every field against the layout before it is used; arrays are
    views into `buffer`. Any fault raises DistributedError("malformed message from
    <sender>: ...")."""
    buffer = memoryview(buffer).cast("B")  # any bytes-like object, read as bytes
    n = len(buffer)

    def refuse(why):
        return DistributedError(f"malformed message from {sender}: {why}; refused", op="wire")

    if n < HEADER.size:
        raise refuse(f"{n} bytes, shorter than the {HEADER.size}-byte header")
    magic, version, kind, zero, step, count, zero2 = HEADER.unpack_from(buffer)
    if magic != MAGIC:
        raise refuse(f"it starts with {bytes(magic)!r}, not {MAGIC!r}: not a rill message")
    if version != VERSION:
        raise refuse(f"format version {version}; this rill reads version {VERSION}")
    if not 1 <= kind <= len(KINDS):
        raise refuse(f"unknown message kind {kind}")
    if zero or zero2 or step < 0:
        raise refuse("reserved header bytes are not zero" if zero or zero2 else
                     f"negative step {step}")
    kind = KINDS[kind - 1]
    carries = CARRIES[kind]
    entries, seen, at = [], set(), HEADER.size
    for i in range(count):  # (each message an error needs is made only when it is raised)
        if at + ENTRY.size > n:
            raise refuse(f"{_entry(i, count)} would start at byte {at}, past the end "
                         f"({n} bytes)")
        field, code, ndim, zero, name_length = ENTRY.unpack_from(buffer, at)
        if not 1 <= field <= len(FIELDS) or FIELDS[field - 1] not in carries:
            raise refuse(f"{_entry(i, count)}: field code {field} is not one a {kind} carries "
                         f"({sorted(carries)})")
        if not 1 <= code <= len(DTYPES) or ndim > MAX_NDIM or zero or name_length > MAX_NAME:
            raise refuse(f"{_entry(i, count)}: dtype code {code}, {ndim} dims, name of "
                         f"{name_length} bytes (at most {len(DTYPES)}, {MAX_NDIM}, {MAX_NAME})")
        at += ENTRY.size
        if at + 8 * ndim + name_length > n:
            raise refuse(f"{_entry(i, count)}: its shape and name run past the end "
                         f"({n} bytes)")
        shape = _SHAPE[ndim].unpack_from(buffer, at)
        at += 8 * ndim
        try:
            name = str(buffer[at:at + name_length], "utf-8")
        except UnicodeDecodeError:
            raise refuse(f"{_entry(i, count)}: its name is not UTF-8") from None
        at += _padded(name_length)
        dtype = DTYPES[code - 1]
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
        # NumPy refuses a shape whose nonzero dimensions would span more bytes than it can
        # address, even an empty one's ((0, 2**61) of float32): refused here first
        extent = nbytes or math.prod(d for d in shape if d) * dtype.itemsize
        if extent > _MAX_BYTES:
            raise refuse(f"{_entry(i, count)} ({name!r}): shape {shape} of {dtype.name} spans "
                         f"{extent} bytes, more than any array can ({_MAX_BYTES})")
        if at + _padded(nbytes) > n:
            raise refuse(f"{_entry(i, count)} ({name!r}): shape {shape} of {dtype.name} needs "
                         f"{nbytes} bytes, {max(n - at, 0)} are left")
        try:
            array = np.ndarray(shape, dtype, buffer, at)
        except (ValueError, TypeError) as e:  # whatever else this NumPy refuses to shape
            raise refuse(f"{_entry(i, count)} ({name!r}): shape {shape} of {dtype.name}: "
                         f"{e}") from None
        if dtype.kind == "b" and nbytes and array.view(np.uint8).max() > 1:
            raise refuse(f"{_entry(i, count)} ({name!r}): booleans other than 0 and 1")
        at += _padded(nbytes)
        field = FIELDS[field - 1]
        if (field, name) in seen:
            raise refuse(f"{_entry(i, count)}: {field} {name!r} a second time")
        seen.add((field, name))
        entries.append((field, name, array))
    if at != n:
        raise refuse(f"{n - at} bytes after the last of its {count} entries")
    return Message(kind, step, entries)


def _entry(i: int, count: int) -> str:
    return f"entry {i} of {count}"
