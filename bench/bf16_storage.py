"""bfloat16 storage: rill's float32 carrier (values rounded to bfloat16 after each kernel)
against real 2-byte bfloat16 arrays from ml_dtypes, on a matmul and an elementwise add.

    python bench/bf16_storage.py

ml_dtypes' arrays are computed three ways: NumPy's own loops on the bfloat16 dtype (no BLAS),
widened to float32 for the kernel and narrowed after (float32 accumulation, what rill's
results equal), and rill's carrier as it runs today (float32 kernel + round_to_bfloat16).
Prints milliseconds (best of 5) and bytes held per result; checks that the widened route
gives the carrier's bits.
"""
import time

import numpy as np

import ml_dtypes
from rill.dtypes import round_to_bfloat16

BF16 = ml_dtypes.bfloat16


def best(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main():
    rng = np.random.default_rng(0)
    n, size = 512, 1 << 22
    a32 = round_to_bfloat16(rng.normal(size=(n, n)).astype(np.float32))
    b32 = round_to_bfloat16(rng.normal(size=(n, n)).astype(np.float32))
    x32 = round_to_bfloat16(rng.normal(size=size).astype(np.float32))
    y32 = round_to_bfloat16(rng.normal(size=size).astype(np.float32))
    a16, b16, x16, y16 = (v.astype(BF16) for v in (a32, b32, x32, y32))

    carrier_mm = lambda: round_to_bfloat16(a32 @ b32)  # noqa: E731
    widened_mm = lambda: (a16.astype(np.float32) @ b16.astype(np.float32)).astype(BF16)  # noqa
    native_mm = lambda: a16[:128, :128] @ b16[:128, :128]  # noqa: E731 - 64x fewer MACs
    carrier_add = lambda: round_to_bfloat16(x32 + y32)  # noqa: E731
    widened_add = lambda: (x16.astype(np.float32) + y16.astype(np.float32)).astype(BF16)  # noqa
    native_add = lambda: x16 + y16  # noqa: E731

    same_mm = np.array_equal(carrier_mm().view(np.uint32) >> 16,
                             widened_mm().view(np.uint16).astype(np.uint32))
    same_add = np.array_equal(carrier_add().view(np.uint32) >> 16,
                              widened_add().view(np.uint16).astype(np.uint32))
    print(f"matmul {n}x{n} (ms): float32 carrier {best(carrier_mm):.2f}, ml_dtypes widened "
          f"{best(widened_mm):.2f}, ml_dtypes native 128x128 {best(native_mm):.2f} "
          f"(x64 for {n}: {64 * best(native_mm):.0f}); bits equal: {same_mm}")
    print(f"add {size} elements (ms): float32 carrier {best(carrier_add):.2f}, ml_dtypes "
          f"widened {best(widened_add):.2f}, ml_dtypes native {best(native_add):.2f}; bits "
          f"equal: {same_add}")
    print(f"bytes per {n}x{n} result: carrier {a32.nbytes}, ml_dtypes {a16.nbytes}; per "
          f"{size}-element result: {x32.nbytes} vs {x16.nbytes}")


if __name__ == "__main__":
    main()
