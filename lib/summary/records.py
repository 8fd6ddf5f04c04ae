"""TFRecord framing, the container of TensorBoard event files.

Each record is: its length (uint64, little-endian), the masked CRC-32C of those 8 bytes
(uint32), the data, the masked CRC-32C of the data (uint32). CRC-32C is the Castagnoli
polynomial (not zlib's CRC-32), computed here with a byte table: event records are small
(a scalar is ~40 bytes; an image is its PNG), so pure Python keeps up and rill needs no
compiled dependency to write them.
"""
from __future__ import annotations

import struct

_POLY = 0x82F63B78  # Castagnoli, bit-reversed


def _table() -> list:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The CRC as TFRecord stores it: rotated right by 15 bits plus a constant, so that a
    CRC computed over data that itself holds CRCs does not degenerate."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record holding `data`."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc(length)) + data
            + struct.pack("<I", masked_crc(data)))
