"""Protocol-buffer wire encoding, just what TensorBoard's messages need.

A message is the concatenation of its fields; a field is a key (field number << 3 | wire
type) then its payload: a varint (type 0), 8 little-endian bytes (type 1, double), a length
and bytes (type 2: strings, bytes, nested messages, packed repeated numbers) or 4 bytes
(type 5, float). Fields left at their default are simply not written, as proto3 does, so
every function here returns b"" for a default value unless asked to keep it.
"""
from __future__ import annotations

import struct

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    """An unsigned varint; a negative int64 is written as its 64-bit two's complement."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def uint(number: int, value: int, keep: bool = False) -> bytes:
    """An int32/int64/enum/bool field."""
    return key(number, VARINT) + varint(int(value)) if value or keep else b""


def double(number: int, value: float, keep: bool = False) -> bytes:
    return key(number, FIXED64) + struct.pack("<d", value) if value or keep else b""


def float32(number: int, value: float, keep: bool = False) -> bytes:
    return key(number, FIXED32) + struct.pack("<f", value) if value or keep else b""


def blob(number: int, data: bytes, keep: bool = False) -> bytes:
    """A bytes, string (UTF-8) or nested-message field."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return key(number, LENGTH) + varint(len(data)) + data if data or keep else b""


def message(number: int, data: bytes) -> bytes:
    """A nested message; written even when empty, since its presence can mean something
    (an empty TensorShapeProto.Dim is a dimension of size 0)."""
    return blob(number, data, keep=True)


def packed_doubles(number: int, values) -> bytes:
    values = list(values)
    return blob(number, struct.pack(f"<{len(values)}d", *values))


def packed_floats(number: int, values) -> bytes:
    values = list(values)
    return blob(number, struct.pack(f"<{len(values)}f", *values))


def packed_varints(number: int, values) -> bytes:
    return blob(number, b"".join(varint(int(v)) for v in values))
