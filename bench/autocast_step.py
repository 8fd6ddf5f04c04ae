"""The minGPT training step (bench/gpt_step.py) in float32 and under rill.autocast(bfloat16):
median step time and the step's peak allocation (tracemalloc, which sees NumPy's buffers),
in one process, alternating blocks of steps.

rill carries bfloat16 in float32 buffers rounded after each kernel (docs/benchmarks-history.md, "bfloat16
storage"), so autocast on the CPU is expected to cost time and save no memory: this says how
much, to weigh against a 2-byte storage.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/autocast_step.py
"""
from __future__ import annotations

import contextlib
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

import rill

sys.path.insert(0, str(Path(__file__).parent))
import gpt_step as gpt  # noqa: E402


def main(blocks: int = 5, per_block: int = 4):
    step, x, y = gpt.gpt_step(rill, rill.nn.utils.clip_grad_norm_)
    modes = {"float32": contextlib.nullcontext,
             "autocast bfloat16": lambda: rill.autocast("cpu", dtype=rill.bfloat16)}
    times = {m: [] for m in modes}
    for _ in range(2):  # warm-up, both ways
        for make in modes.values():
            with make():
                step(x, y)
    for _ in range(blocks):
        for mode, make in modes.items():
            with make():
                for _ in range(per_block):
                    start = time.perf_counter()
                    step(x, y)
                    times[mode].append(time.perf_counter() - start)
    peaks = {}
    for mode, make in modes.items():
        tracemalloc.start()
        with make():
            step(x, y)
        peaks[mode] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    base = np.median(times["float32"])
    print("| mode | ms per step (median) | / float32 | peak MB in a step |")
    print("|---|---:|---:|---:|")
    for mode in modes:
        t = np.median(times[mode])
        print(f"| {mode} | {t * 1e3:.1f} | {t / base:.2f} | {peaks[mode] / 1e6:.1f} |")


if __name__ == "__main__":
    main()
