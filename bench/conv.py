"""Eager convolution and max-pooling on the CPU: rill against PyTorch eager, and against
rill's kernels as they were at an earlier commit (the baseline), in the same run.

Cases (float32, batch 32, 3x3 kernels with padding 1, 2x2 max-pool):
    conv 3->32 32x32     forward, and forward+backward (the image needs no gradient)
    conv 32->64 32x32    forward, and forward+backward (image, weight and bias gradients)
    maxpool 32x32x32     forward+backward
    cnn step             bench/train.py --model cnn: one SGD training step
Each variant runs in its own process (bench/harness.py), so no framework's threads spin
beside another's; blocks of a few calls rotate between them (A B C A B C ...), so machine
noise falls on all alike, and the table gives the medians and the ratios of medians.
PyTorch gets as many threads as NumPy's BLAS has (threadpoolctl). The baseline variant
loads kernels/numpy/conv.py and pooling.py from a git revision (`git show`) and registers
them over today's: the old kernels stay callable without a copy of their code here.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/conv.py
    python bench/conv.py --cases step --repeats 200 --baseline HEAD~3 --json conv.json
    python bench/conv.py --cases step --hold-small-gemms     # + the variant HOLD below
    python bench/conv.py --cases layers --baseline 60da1c8 --repeats 20   # issue 31's layers

`--baseline 4a5a1aa` compares with the whole-batch im2col kernels as they were just before
the per-image ones (kernels/numpy/conv_per_image.py). Each case calls with the same image
every time, so the whole-batch forward finds its columns cached from the call before (its
"fwd" rows are a little flattering; a training step's later layers see new images).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import types

import numpy as np
from rich.console import Console
from rich.table import Table

import harness  # bench/ is on sys.path when run as `python bench/conv.py`
import train

# The last commit with the kernels as they were before issue 20's convolution work.
BASELINE = "eeb83ffb18"
KERNEL_FILES = ("kernels/numpy/conv.py", "kernels/numpy/pooling.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = {  # name: (what, x shape, out channels or None for pooling, image needs a gradient
    #               [, kernel, stride, padding: 3, 1, 1 where left out])
    "conv3-32 fwd": ("forward", (32, 3, 32, 32), 32, False),
    "conv3-32 fwd+bwd": ("backward", (32, 3, 32, 32), 32, False),
    "conv32-64 fwd": ("forward", (32, 32, 32, 32), 64, True),
    "conv32-64 fwd+bwd": ("backward", (32, 32, 32, 32), 64, True),
    "maxpool fwd": ("forward", (32, 32, 32, 32), None, True),
    "maxpool fwd+bwd": ("backward", (32, 32, 32, 32), None, True),
    "cnn step": ("step", None, None, None),
    # Layers of the TensorFlow paper's Table 1 models and ResNet-18 (issue 31), at the
    # batches of bench/models.py: where the kernels' choice among direct loops, per-image
    # GEMMs and the batch's columns matters most
    "alexnet conv1 fwd+bwd": ("backward", (8, 3, 224, 224), 64, False, 11, 4, 2),
    "alexnet conv2 fwd+bwd": ("backward", (8, 64, 27, 27), 192, True, 5, 1, 2),
    "alexnet conv3 fwd+bwd": ("backward", (8, 192, 13, 13), 384, True),
    "alexnet conv4 fwd+bwd": ("backward", (8, 384, 13, 13), 256, True),
    "overfeat conv5 fwd+bwd": ("backward", (4, 512, 12, 12), 1024, True),
    "vgg conv7 fwd+bwd": ("backward", (2, 512, 14, 14), 512, True),
    "resnet 56x56 fwd+bwd": ("backward", (4, 64, 56, 56), 64, True),
    "resnet 14x14 fwd+bwd": ("backward", (4, 256, 14, 14), 256, True),
    "resnet 7x7 fwd+bwd": ("backward", (4, 512, 7, 7), 512, True),
}
LAYERS = [name for name in CASES if name.startswith(("alexnet", "overfeat", "vgg", "resnet"))]


def blas_threads() -> int:
    from threadpoolctl import threadpool_info
    return max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"),
               default=1)


def _load_baseline(revision: str) -> None:
    """Registers the CPU kernels of `revision` over today's (in this worker process only)."""
    for path in KERNEL_FILES:
        source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        module = types.ModuleType(f"baseline_{os.path.basename(path)[:-3]}")
        exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)


def _arrays(shape, out_channels, k=3, stride=1, pad=1):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    if out_channels is None:
        return x, None, None, rng.standard_normal(
            shape[:2] + tuple(s // 2 for s in shape[2:])).astype(np.float32)
    w = (rng.standard_normal((out_channels, shape[1], k, k)) / np.sqrt(k * k * shape[1])) \
        .astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    out = tuple((s + 2 * pad - k) // stride + 1 for s in shape[2:])
    g = rng.standard_normal((shape[0], out_channels) + out).astype(np.float32)
    return x, w, b, g


def _rill_case(what, shape, out_channels, image_grad, k=3, stride=1, pad=1):
    import rill
    import rill.nn.functional as F
    x, w, b, g = (None if a is None else rill.tensor(a)
                  for a in _arrays(shape, out_channels, k, stride, pad))
    x.requires_grad = image_grad and what == "backward"
    for p in (w, b):
        if p is not None:
            p.requires_grad = what == "backward"

    def forward():
        return F.max_pool2d(x, 2) if w is None else F.conv2d(x, w, b, stride, pad)
    if what == "forward":
        return lambda: forward(), lambda: float(forward().sum())

    def call():
        for p in (x, w, b):
            if p is not None:
                p.grad = None
        forward().backward(g)
        return [p.grad for p in (x, w, b) if p is not None and p.requires_grad]
    return call, lambda: [float(t.sum()) for t in call()]


def _torch_case(what, shape, out_channels, image_grad, k=3, stride=1, pad=1):
    import torch
    import torch.nn.functional as F
    x, w, b, g = (None if a is None else torch.tensor(a)
                  for a in _arrays(shape, out_channels, k, stride, pad))
    x.requires_grad_(image_grad and what == "backward")
    for p in (w, b):
        if p is not None:
            p.requires_grad_(what == "backward")

    def forward():
        return F.max_pool2d(x, 2) if w is None else F.conv2d(x, w, b, stride, pad)
    if what == "forward":
        def call():
            with torch.no_grad():
                return forward()
        return call, lambda: float(call().sum())

    def call():
        for p in (x, w, b):
            if p is not None:
                p.grad = None
        forward().backward(g)
        return [p.grad for p in (x, w, b) if p is not None and p.requires_grad]
    return call, lambda: [float(t.sum()) for t in call()]


_loaded = []
# The variant that runs the linear layers' GEMMs (small in these cases) with BLAS held at
# one thread: an experiment for the linear-algebra kernels, which thread every GEMM from
# 2^18 multiply-adds and leave a BLAS worker spinning afterwards, beside the conv kernels'
# own threads (kernels/numpy/parallel.py, SMALL_GEMM).
HOLD = "rill, small GEMMs 1 BLAS thread"
MULTIPLY_ADDS = {  # kernel: its GEMM's multiply-adds, from its first two arguments
    "matmul": lambda a, b: a.size * b.shape[-1],          # (..., M, K) @ (..., K, N)
    "linear": lambda x, w: x.size * w.shape[0],           # x (..., I), w (O, I)
    "linear_weight_grad": lambda g, x: g.size * x.shape[-1],  # g^T (O, B) @ x (B, I)
}


def _hold_small_gemms() -> None:
    from rill.kernels.numpy import parallel
    from rill.ops.primitive import PRIMITIVES

    def held(kernel, multiply_adds):
        def run(*args, **attrs):
            if multiply_adds(*args[:2]) >= parallel.SMALL_GEMM:
                return kernel(*args, **attrs)
            with parallel.blas_at_one_thread():
                return kernel(*args, **attrs)
        return run
    for name, multiply_adds in MULTIPLY_ADDS.items():
        PRIMITIVES[name].kernels["cpu"] = held(PRIMITIVES[name].kernels["cpu"], multiply_adds)


def setup(label: str, what):
    """In the variant's worker: the call to time, and what to check across variants."""
    case, revision = what
    if label == "torch":
        import torch
        torch.set_num_threads(blas_threads())
    elif label == HOLD:
        if not _loaded:
            _hold_small_gemms()
            _loaded.append(label)
    elif label != "rill" and not _loaded:
        _load_baseline(revision)
        _loaded.append(revision)
    kind, *layer = CASES[case]
    if kind == "step":
        step = (train.torch_step if label == "torch" else train.rill_step)("cnn")
        return step, float(step())
    call, first = (_torch_case if label == "torch" else _rill_case)(kind, *layer)
    return call, first()


def _agree(a, b) -> bool:
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-2 * np.sqrt(np.abs(b).max() + 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=[c for c in CASES if c not in LAYERS],
                        help=f"any of: {', '.join(repr(c) for c in CASES)} (or 'step', or "
                             "'layers' for the Table 1 models' and ResNet-18's layers)")
    parser.add_argument("--repeats", type=int, default=100, help="timed calls per variant")
    parser.add_argument("--block", type=int, default=5, help="calls per turn in the rotation")
    parser.add_argument("--baseline", default=BASELINE,
                        help="git revision whose CPU conv/pool kernels are the baseline")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--hold-small-gemms", action="store_true",
                        help=f"add the variant {HOLD!r}")
    parser.add_argument("--json", help="write samples and medians to this file")
    args = parser.parse_args()
    cases = [case for c in args.cases
             for case in (LAYERS if c == "layers" else ["cnn step" if c == "step" else c])]
    from threadpoolctl import threadpool_info
    blas = [{k: p.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for p in threadpool_info() if p["user_api"] == "blas"]
    console = Console()
    console.print(f"BLAS: {blas}; torch threads = {blas_threads()}; "
                  f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    before = f"rill {args.baseline}"
    modules = {"rill": "rill", "torch": "torch"}
    if args.hold_small_gemms:
        modules = {"rill": "rill", HOLD: "rill", "torch": "torch"}
    if not args.no_baseline:
        modules = {before: "rill", **modules}
    report = {"machine": harness.machine(), "blas": blas, "baseline": args.baseline,
              "cases": {}}
    table = Table(title=f"ms per call, median of {args.repeats} (rotated in blocks of "
                        f"{args.block})")
    for col in ("case", *modules, "rill / torch", *(("held / torch",) if HOLD in modules else ()),
                *(("before / torch", "before / rill")
                                                    if before in modules else ())):
        table.add_column(col, justify="left" if col == "case" else "right")
    procs, conns, skipped, _ = harness.start(modules, setup, train.WARMUP_CALLS)
    if skipped:
        raise SystemExit(f"variants that did not start: {skipped}")
    try:
        for case in cases:
            first = harness.set_up(conns, (case, args.baseline))
            for label, value in first.items():
                if not _agree(value, first["torch"]):
                    raise SystemExit(f"{case}: {label} disagrees with torch: {first}")
            samples = harness.time_in_rotation(conns, args.repeats, args.block, 0.05)
            med = {k: statistics.median(v) for k, v in samples.items()}
            row = [case, *(f"{med[k]:.2f}" for k in modules),
                   f"{med['rill'] / med['torch']:.2f}"]
            if HOLD in med:
                row.append(f"{med[HOLD] / med['torch']:.2f}")
            if before in med:
                row += [f"{med[before] / med['torch']:.2f}", f"{med[before] / med['rill']:.2f}"]
            table.add_row(*row)
            report["cases"][case] = {"samples_ms": samples, "median_ms": med}
    finally:
        harness.stop(procs, conns)
    console.print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
