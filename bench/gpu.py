"""GPU kernels: rill's Triton kernels against PyTorch on the same GPU, in the same run.

    (a) bandwidth   large elementwise ops and reductions, as a fraction of the measured
                    device-to-device copy bandwidth (target >= 85%)
    (b) matmul      4096 x 4096 x 4096 in bfloat16, float16 and tf32: TFLOP/s against
                    torch.matmul (target >= 0.9x)
    (c) fused       softmax, layer_norm, cross-entropy against PyTorch (target >= 1.0x)
    (d) training    the MLP and CNN steps of bench/train.py, eager and captured, against
                    PyTorch eager (<= 1.3x)

Each case is timed as the median of --repeats samples; a sample is --inner calls between two
device synchronizations (both frameworks' queues), rill and torch alternating sample by
sample so that clock and thermal drift fall on both alike.

    python bench/gpu.py                       # on a machine with a GPU (CuPy, Triton, torch)
    python bench/gpu.py --json gpu.json
    RILL_TRITON_INTERPRET=1 python bench/gpu.py --smoke   # tiny shapes, any machine: checks
                                                           # that every case runs and agrees
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

import harness  # bench/harness.py: the script's folder is on sys.path
import rill
import rill.nn.functional as F
import train

TORCH_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def synchronize():
    rill.gpu.synchronize()
    if TORCH_DEVICE == "cuda":
        torch.cuda.synchronize()


def time_pair(fns: dict, repeats: int, inner: int) -> dict[str, float]:
    """Median ms per call of each fn, samples alternating between the fns."""
    samples = {k: [] for k in fns}
    for fn in fns.values():  # warm up: compile, allocate, tune
        fn()
        fn()
    synchronize()
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize()
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            synchronize()
            samples[name].append((time.perf_counter() - start) * 1e3 / inner)
    return {k: statistics.median(v) for k, v in samples.items()}


def gpu_tensor(array):
    return rill.tensor(array, device="gpu"), torch.tensor(array, device=TORCH_DEVICE)


def _close(a, b, what, rtol):
    a = a.numpy().astype(np.float64)
    b = b.detach().float().cpu().numpy().astype(np.float64)
    if not np.allclose(a, b, rtol=rtol, atol=rtol):
        raise SystemExit(f"{what}: rill and torch disagree (max abs diff {np.abs(a - b).max()})")


def _same_product(a, b, what, limit=1e-2):
    """Both compute the same product: elementwise checks do not fit tf32, whose two roundings
    (Triton's and cuBLAS's) differ by up to ~0.3 on entries of size ~64 (K = 4096); each
    is ~3e-4 from the exact product in norm."""
    a = a.numpy().astype(np.float64)
    b = b.detach().float().cpu().numpy().astype(np.float64)
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    if not rel <= limit:
        raise SystemExit(f"{what}: rill and torch disagree (relative difference {rel:.3g})")


# ---- (a) bandwidth -------------------------------------------------------------------------

def bandwidth_cases(n: int, rows: int):
    rng = np.random.default_rng(0)
    x, tx = gpu_tensor(rng.standard_normal(n, dtype=np.float32))
    y, ty = gpu_tensor(rng.standard_normal(n, dtype=np.float32))
    m, tm = gpu_tensor(rng.standard_normal((rows, n // rows), dtype=np.float32))
    copy_out = torch.empty_like(tx)
    nbytes = 4 * n
    return {
        # name: (rill fn, torch fn, bytes moved per call)
        "copy (torch, device to device)": (None, lambda: copy_out.copy_(tx), 2 * nbytes),
        "add x + y": (lambda: x + y, lambda: tx + ty, 3 * nbytes),
        "exp": (lambda: rill.exp(x), lambda: torch.exp(tx), 2 * nbytes),
        "x * 2 + 1 (two kernels)": (lambda: x * 2.0 + 1.0, lambda: tx * 2.0 + 1.0, 4 * nbytes),
        "sum over rows": (lambda: rill.sum(m, axis=1), lambda: tm.sum(1), nbytes),
        "sum over columns": (lambda: rill.sum(m, axis=0), lambda: tm.sum(0), nbytes),
        "max, all": (lambda: rill.max(x), lambda: tx.max(), nbytes),
    }


def bench_bandwidth(n, rows, repeats, inner, console, report):
    cases = bandwidth_cases(n, rows)
    copy_ms = time_pair({"torch": cases["copy (torch, device to device)"][1]}, repeats,
                        inner)["torch"]
    copy_gbs = cases["copy (torch, device to device)"][2] / copy_ms / 1e6
    table = Table(title=f"(a) bandwidth, float32, {n:,} elements: GB/s and fraction of the "
                        f"copy's {copy_gbs:.0f} GB/s")
    for col in ("kernel", "rill GB/s", "torch GB/s", "rill / copy", "torch / copy"):
        table.add_column(col, justify="left" if col == "kernel" else "right")
    for name, (ours, theirs, nbytes) in cases.items():
        if ours is None:
            continue
        ms = time_pair({"rill": ours, "torch": theirs}, repeats, inner)
        gbs = {k: nbytes / v / 1e6 for k, v in ms.items()}
        table.add_row(name, f"{gbs['rill']:.0f}", f"{gbs['torch']:.0f}",
                      f"{gbs['rill'] / copy_gbs:.2f}", f"{gbs['torch'] / copy_gbs:.2f}")
        report[name] = {"ms": ms, "gb_per_s": gbs, "copy_gb_per_s": copy_gbs}
    console.print(table)


# ---- (b) matmul ----------------------------------------------------------------------------

def bench_matmul(size, repeats, inner, console, report):
    from rill.kernels.triton import linalg
    table = Table(title=f"(b) matmul {size} x {size} x {size}: TFLOP/s")
    for col in ("dtype", "rill", "torch", "rill / torch"):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    for name, rdt, tdt in (("bfloat16", rill.bfloat16, torch.bfloat16),
                           ("float16", rill.float16, torch.float16),
                           ("tf32", rill.float32, torch.float32)):
        ra, rb = (rill.tensor(v, dtype=rdt, device="gpu") for v in (a, b))
        ta, tb = (torch.tensor(v, device=TORCH_DEVICE).to(tdt) for v in (a, b))
        tf32 = name == "tf32"
        linalg.ALLOW_TF32 = tf32
        if TORCH_DEVICE == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            _same_product(ra @ rb, ta @ tb, f"matmul {name}")
            ms = time_pair({"rill": lambda: ra @ rb, "torch": lambda: ta @ tb}, repeats, inner)
        finally:
            linalg.ALLOW_TF32 = False
        tflops = {k: 2 * size ** 3 / v / 1e9 for k, v in ms.items()}
        table.add_row(name, f"{tflops['rill']:.1f}", f"{tflops['torch']:.1f}",
                      f"{tflops['rill'] / tflops['torch']:.2f}")
        report[f"matmul {name}"] = {"ms": ms, "tflops": tflops}
    console.print(table)


# ---- (c) fused kernels ---------------------------------------------------------------------

def bench_fused(rows, cols, classes, repeats, inner, console, report):
    rng = np.random.default_rng(0)
    x, tx = gpu_tensor(rng.standard_normal((rows, cols), dtype=np.float32))
    w, tw = gpu_tensor(rng.standard_normal(cols, dtype=np.float32))
    b, tb = gpu_tensor(rng.standard_normal(cols, dtype=np.float32))
    z, tz = gpu_tensor(rng.standard_normal((rows, classes), dtype=np.float32))
    labels, tlabels = gpu_tensor(rng.integers(0, classes, rows))
    tf = torch.nn.functional
    cases = {
        "softmax": (lambda: F.softmax(x, axis=-1), lambda: torch.softmax(tx, -1)),
        "log_softmax": (lambda: F.log_softmax(x, axis=-1), lambda: torch.log_softmax(tx, -1)),
        "layer_norm": (lambda: F.layer_norm(x, (cols,), w, b),
                       lambda: tf.layer_norm(tx, (cols,), tw, tb)),
        f"cross_entropy ({classes} classes)": (lambda: F.cross_entropy(z, labels),
                                               lambda: tf.cross_entropy(tz, tlabels)),
    }
    table = Table(title=f"(c) fused kernels, float32, {rows} rows of {cols}: ms per call")
    for col in ("op", "rill ms", "torch ms", "torch / rill"):
        table.add_column(col, justify="left" if col == "op" else "right")
    for name, (ours, theirs) in cases.items():
        _close(ours(), theirs(), name, rtol=1e-4)
        ms = time_pair({"rill": ours, "torch": theirs}, repeats, inner)
        table.add_row(name, f"{ms['rill']:.3f}", f"{ms['torch']:.3f}",
                      f"{ms['torch'] / ms['rill']:.2f}")
        report[name] = {"ms": ms}
    console.print(table)


# ---- (d) training steps --------------------------------------------------------------------

def bench_training(models, repeats, console, report):
    table = Table(title="(d) training steps of bench/train.py: ms per step")
    for col in ("model", "rill ms", "rill captured ms", "torch ms", "rill / torch",
                "captured / torch"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for model in models:
        ours, theirs = train.rill_step(model, "gpu"), train.torch_step(model, TORCH_DEVICE)
        with warnings.catch_warnings():  # it reads x and y from outside: as meant here
            warnings.simplefilter("ignore", rill.CaptureWarning)
            captured = rill.capture(train.rill_step(model, "gpu"))  # its own net, optimizer
        first = float(ours()), float(captured()), float(theirs())
        for name, loss in (("rill", first[0]), ("rill captured", first[1])):
            if abs(loss - first[2]) > 1e-3 * abs(first[2]):
                raise SystemExit(f"{model}: {name} and torch disagree on the first loss: "
                                 f"{first}")
        ms = time_pair({"rill": ours, "rill captured": captured, "torch": theirs}, repeats, 1)
        table.add_row(model, f"{ms['rill']:.2f}", f"{ms['rill captured']:.2f}",
                      f"{ms['torch']:.2f}", f"{ms['rill'] / ms['torch']:.2f}",
                      f"{ms['rill captured'] / ms['torch']:.2f}")
        report[f"train {model}"] = {"ms": ms}
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21, help="samples per case")
    parser.add_argument("--inner", type=int, default=10, help="calls per sample")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes, one sample: check that every case runs")
    parser.add_argument("--json", help="write the medians to this file")
    parser.add_argument("--sections", default="abcd",
                        help="which of (a) bandwidth (b) matmul (c) fused (d) training")
    args = parser.parse_args()
    console = Console()
    if not rill.gpu.is_available():
        raise SystemExit("no gpu device: " + "; ".join(rill.gpu.missing_parts()))
    interpreted = rill.gpu.interpreted()
    if interpreted and not args.smoke:
        raise SystemExit("the interpreter's timings mean nothing; use --smoke without a GPU")
    device_name = (torch.cuda.get_device_name() if TORCH_DEVICE == "cuda" else
                   "Triton interpreter on the CPU (smoke run; times are not GPU times)")
    console.print(f"[bold]device:[/] {device_name}")
    report = {"device": device_name, "machine": harness.machine(), "cases": {}}
    repeats, inner = (1, 1) if args.smoke else (args.repeats, args.inner)
    if args.smoke:
        bench_bandwidth(4096, 16, repeats, inner, console, report["cases"])
        bench_matmul(64, repeats, inner, console, report["cases"])
        bench_fused(16, 128, 100, repeats, inner, console, report["cases"])
        bench_training(("mlp",), repeats, console, report["cases"])
    else:
        cases = report["cases"]
        sections = {"a": lambda: bench_bandwidth(1 << 28, 1 << 14, repeats, inner, console, cases),
                    "b": lambda: bench_matmul(4096, repeats, inner, console, cases),
                    "c": lambda: bench_fused(8192, 4096, 32768, repeats, inner, console, cases),
                    "d": lambda: bench_training(("mlp", "cnn"), repeats, console, cases)}
        for section in args.sections:
            sections[section]()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
