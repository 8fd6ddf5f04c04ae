"""Probes for the GPU kernels' tuning knobs, one table each (a GPU session's measurements,
not a benchmark beside a peer): the reduction split target behind "sum over columns" and
"max, all" in bench/gpu.py, the tf32 and bfloat16 matmuls' tile configs, and the
time of bench/train.py's training steps eager and captured, by op.

    python bench/gpu_probe.py                    # every probe, on a machine with a GPU
    python bench/gpu_probe.py tf32 steps         # some
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import rill
from rill.kernels.triton import linalg, reduce, tuning


def median_ms(fn, repeats=7, inner=10):
    fn()
    rill.gpu.synchronize()
    samples = []
    for _ in range(repeats):
        rill.gpu.synchronize()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        rill.gpu.synchronize()
        samples.append((time.perf_counter() - start) * 1e3 / inner)
    return statistics.median(samples)


def probe_splits():
    x = rill.tensor(np.random.default_rng(0).standard_normal((1 << 14, 1 << 14),
                                                             dtype=np.float32), device="gpu")
    gb = x.numel() * 4 / 1e9
    print("split programs | sum(axis=0) GB/s | max() GB/s | sum(axis=1) GB/s")
    for split in (512, 1024, 2048, 4096, 8192):
        reduce.SPLIT_PROGRAMS = split
        cols = median_ms(lambda: rill.sum(x, axis=0))
        whole = median_ms(lambda: rill.max(x))
        rows = median_ms(lambda: rill.sum(x, axis=1))
        print(f"{split:14d} | {gb / cols * 1e3:16.0f} | {gb / whole * 1e3:10.0f} | "
              f"{gb / rows * 1e3:16.0f}")
    reduce.SPLIT_PROGRAMS = 512


def _time_configs(a, b, configs, size, suffix=""):
    """a @ b timed at each config (TFLOP/s printed; a config the chip cannot hold, such as
    one needing more shared memory, printed as failed), then the tuner's choice restored."""
    chosen = tuning.config_for
    try:
        for config in configs:
            tuning.config_for = lambda *args, _c=config, **kw: _c
            try:
                ms = median_ms(lambda: a @ b, repeats=5, inner=5)
                print(f"{tuple(config)}{suffix} | {2 * size ** 3 / ms / 1e9:.1f}")
            except Exception as e:  # noqa: BLE001 - reported, and the next config tried
                print(f"{tuple(config)}{suffix} | failed: {type(e).__name__}: {str(e)[:80]}")
    finally:
        tuning.config_for = chosen


def probe_tf32(size=4096):
    """TFLOP/s of each tile config (B copied K-contiguous first, as linalg.contract does for
    large tf32 products); then two with B read in place, N-contiguous."""
    rng = np.random.default_rng(0)
    a, b = (rill.tensor(rng.standard_normal((size, size), dtype=np.float32), device="gpu")
            for _ in range(2))
    linalg.ALLOW_TF32 = True
    relayout = linalg.TF32_RELAYOUT_MIN_FLOPS
    print("tf32 config (bm, bn, bk, group, warps, stages) | TFLOP/s")
    print("heuristic:", tuple(tuning.heuristic("dot", "float32-tf32", size, size, size)))
    C = tuning.Config
    try:
        # float32 tiles are twice float16's bytes: BLOCK_K 32 keeps 128 bytes a row
        extra = (C(128, 128, 32, 8, 8, 3), C(128, 128, 32, 8, 8, 4), C(128, 256, 32, 8, 8, 3),
                 C(256, 128, 32, 8, 8, 3), C(128, 128, 16, 8, 8, 5), C(64, 256, 32, 8, 8, 4),
                 C(128, 256, 32, 8, 8, 4))
        _time_configs(a, b, tuning.DOT_CANDIDATES + extra, size)
        linalg.TF32_RELAYOUT_MIN_FLOPS = float("inf")  # B read in place, N-contiguous
        _time_configs(a, b, (C(256, 128, 32, 8, 8, 3), C(128, 256, 32, 8, 8, 3)), size,
                      ", B read in place")
    finally:
        linalg.ALLOW_TF32 = False
        linalg.TF32_RELAYOUT_MIN_FLOPS = relayout


def probe_bf16(size=4096):
    """TFLOP/s of tile configs for bfloat16 products (float32 buffers whose tiles the kernel
    casts to bfloat16 before tl.dot)."""
    rng = np.random.default_rng(0)
    a, b = (rill.tensor(rng.standard_normal((size, size), dtype=np.float32),
                        dtype=rill.bfloat16, device="gpu") for _ in range(2))
    print("bfloat16 config (bm, bn, bk, group, warps, stages) | TFLOP/s")
    print("heuristic:", tuple(tuning.heuristic("dot", "bfloat16", size, size, size)))
    C = tuning.Config
    _time_configs(a, b, (C(128, 128, 32, 8, 8, 4), C(128, 128, 64, 8, 8, 3),
                         C(128, 256, 32, 8, 8, 3), C(256, 128, 32, 8, 8, 3),
                         C(128, 256, 64, 8, 8, 3), C(256, 128, 64, 8, 8, 3),
                         C(128, 128, 64, 8, 4, 3), C(128, 256, 64, 8, 8, 2)), size)


def probe_steps(calls=60):
    """bench/train.py's steps, eager and captured, ms per step (synchronized) in rotation;
    then where each one's host time goes (rill.profiler, by op)."""
    import sys
    import warnings
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import train
    for model in ("mlp", "cnn"):
        eager = train.rill_step(model, "gpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", rill.CaptureWarning)
            captured = rill.capture(train.rill_step(model, "gpu"))
        for _ in range(3):
            eager(), captured()
        ways = {"eager": eager, "captured": captured}
        times = {k: [] for k in ways}
        for _ in range(calls // 5):
            for label, step in ways.items():
                rill.gpu.synchronize()
                start = time.perf_counter()
                for _ in range(5):
                    step()
                rill.gpu.synchronize()
                times[label].append((time.perf_counter() - start) * 1e3 / 5)
        (variant,) = captured.variants.values()
        print(f"{model}: captured graph of {len(variant.program.graph.nodes)} nodes")
        for label, t in times.items():
            print(f"  {label:10s} {statistics.median(t):7.3f} ms a step")
        for label, step in ways.items():
            with rill.profiler.profile() as prof:
                for _ in range(5):
                    step()
                rill.gpu.synchronize()
            print(f"  {model} {label}, 5 steps:")
            print(prof.table(sort_by="self_time", group_by="op", limit=12))


PROBES = {"splits": probe_splits, "tf32": probe_tf32, "bf16": probe_bf16,
          "steps": probe_steps}

if __name__ == "__main__":
    import sys
    print("device:", tuning.device_name())
    for name in sys.argv[1:] or PROBES:
        PROBES[name]()
