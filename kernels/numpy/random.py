"""Random CPU kernels: draws from the Generator named in the attrs, under its lock."""
from __future__ import annotations


from rill.ops.primitive import register_kernels


def _uniform(shape, dtype, device, generator, low, high):
    with generator.lock:
        draw = generator.numpy_generator().random(shape)
    if low != 0.0 or high != 1.0:  # (x * 1.0 + 0.0 is x for the draws in [0, 1): skipped)
        draw = draw * (high - low) + low
    return draw.astype(dtype.storage)


def _normal(shape, dtype, device, generator, mean, std):
    with generator.lock:
        draw = generator.numpy_generator().standard_normal(shape)
    return (draw * std + mean).astype(dtype.storage)


def _randint(shape, dtype, device, generator, low, high):
    with generator.lock:
        draw = generator.numpy_generator().integers(low, high, size=shape)
    return draw.astype(dtype.storage)


register_kernels("cpu", {"uniform": _uniform, "normal": _normal, "randint": _randint})
