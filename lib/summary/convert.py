"""What summaries are made of: numbers, arrays and images from rill tensors or NumPy."""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..tensor import Tensor


def as_array(value, what: str, op: str) -> np.ndarray:
    """A NumPy array of a rill tensor, a NumPy array, or numbers (nested lists too)."""
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "__array__") or isinstance(value, (list, tuple, int, float, np.number)):
        array = np.asarray(value)
        if array.dtype.kind in "biufc":
            return array
    raise ArgumentError(f"{what} must be a rill tensor, a NumPy array or numbers, got "
                        f"{type(value).__name__}", op=op)


def as_scalar(value, what: str, op: str) -> float:
    """A real number from a Python/NumPy number or a one-element tensor or array."""
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    array = as_array(value, what, op)
    if array.size != 1:
        raise ShapeError(f"{what} must be one number, got a tensor of shape "
                         f"{tuple(array.shape)}; log its mean, or each element under its "
                         "own tag", op=op)
    if array.dtype.kind == "c":
        raise DTypeError(f"{what} must be real, got {array.dtype}", op=op)
    return float(array.reshape(()))


def as_image(value, dataformats: str, op: str) -> np.ndarray:
    """A uint8 (height, width, channels) array from an image in `dataformats` layout (a
    permutation of "CHW", or of "HW"); floats are read as [0, 1] and scaled to [0, 255]
    (rounded, values outside clipped), uint8 is taken as is, bool as black and white."""
    fmt = dataformats.upper() if isinstance(dataformats, str) else dataformats
    if not isinstance(fmt, str) or sorted(fmt) not in (sorted("CHW"), sorted("HW")):
        raise ArgumentError(f"dataformats must be a permutation of 'CHW' or 'HW', got "
                            f"{dataformats!r}", op=op)
    image = as_array(value, "img_tensor", op)
    if image.ndim != len(fmt):
        raise ShapeError(f"img_tensor has shape {tuple(image.shape)}, which does not match "
                         f"dataformats {dataformats!r}; pass the layout it has "
                         "(e.g. dataformats='HWC')", op=op)
    if "C" not in fmt:
        image, fmt = image[..., None], fmt + "C"
    image = image.transpose([fmt.index(axis) for axis in "HWC"])
    if image.shape[2] not in (1, 3, 4):
        raise ShapeError(f"an image has 1 (gray), 3 (RGB) or 4 (RGBA) channels, got "
                         f"{image.shape[2]} (shape {tuple(image.shape)} read as HWC)", op=op)
    if image.dtype == np.uint8:
        return np.ascontiguousarray(image)
    if image.dtype.kind == "b":
        return image.astype(np.uint8) * 255
    if image.dtype.kind != "f":
        raise DTypeError(f"img_tensor must be floating (values in [0, 1]) or uint8 (values "
                         f"in [0, 255]), got {image.dtype}; cast it to one of them", op=op)
    scaled = np.nan_to_num(image.astype(np.float64) * 255.0, nan=0.0)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
