"""A PNG encoder for 8-bit images, in the standard library's zlib.

Images in event files are PNG bytes. PNG without filtering or interlacing is a signature, an
IHDR chunk (size, bit depth, color type), the rows each prefixed by filter byte 0 and
deflated as one IDAT chunk, and IEND. Pillow would do it too, but it is not one of rill's
dependencies, and these images are small enough that the better compression of PNG's row
filters is not worth the code.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> gray, gray+alpha, RGB, RGBA


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def encode_png(pixels: np.ndarray) -> bytes:
    """PNG bytes of a uint8 array of shape (height, width, channels), channels 1 to 4."""
    height, width, channels = pixels.shape
    header = struct.pack(">IIBBBBB", width, height, 8, _COLOR_TYPES[channels], 0, 0, 0)
    rows = np.zeros((height, 1 + width * channels), np.uint8)  # column 0: filter "none"
    rows[:, 1:] = pixels.reshape(height, width * channels)
    return (_SIGNATURE + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + _chunk(b"IEND", b""))
