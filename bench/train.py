"""Eager training-step time: rill against PyTorch eager, with a hand-written NumPy floor.

Two models, each one full step as a user writes it (nn modules, cross-entropy, backward,
optimizer.step() of SGD):
    mlp   784-512-512-10 with ReLU, batch 128                       (floor: NumPy by hand)
    cnn   input 32x3x32x32; two [conv3x3 (32, 64 channels) + ReLU + maxpool2]; dense to 10
All frameworks start from the same float32 weights and data (the first losses of rill and
torch are checked equal). Each case runs in its own process, so neither framework's thread
pool spins beside the other's; blocks of consecutive steps rotate between the processes, so
machine noise falls on all alike. The table gives medians (ms per step) and the ratio of
each median to PyTorch's.

    python bench/train.py                   # both models, 60 timed steps each
    python bench/train.py --model cnn --repeats 50 --json train.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics

import numpy as np
from rich.console import Console
from rich.table import Table

# bench/harness.py: run as `python bench/train.py`, the script's folder is on sys.path
import harness
import rill
import rill.nn.functional as F

try:
    import torch
except ImportError:
    torch = None

LR = 0.01


def _weights(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32) for s in shapes]


def mlp_setup(batch=128):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    shapes = [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    return x, y, _weights(shapes)


def cnn_setup(batch=32):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    shapes = [(32, 3, 3, 3), (32,), (64, 32, 3, 3), (64,), (10, 64 * 8 * 8), (10,)]
    return x, y, _weights(shapes)


# ---- models: the same layers in both frameworks, loaded with the same weights -------------

def _layers(nn, model: str):
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def _state(model: str, ws) -> dict:
    names = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"] if model == "mlp" \
        else ["0.weight", "0.bias", "3.weight", "3.bias", "7.weight", "7.bias"]
    return dict(zip(names, ws))


def rill_step(model: str, device: str = "cpu"):
    """One step as a rill user writes it: nn modules, cross_entropy, rill.optim.SGD."""
    x, y, ws = (mlp_setup if model == "mlp" else cnn_setup)()
    x, y = rill.tensor(x, device=device), rill.tensor(y, device=device)
    net = _layers(rill.nn, model)
    net.load_state_dict({k: rill.tensor(v) for k, v in _state(model, ws).items()})
    net.to(device)
    opt = rill.optim.SGD(net.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def torch_step(model: str, device: str = "cpu"):
    x, y, ws = (mlp_setup if model == "mlp" else cnn_setup)()
    x, y = torch.tensor(x, device=device), torch.tensor(y, device=device)
    net = _layers(torch.nn, model)
    net.load_state_dict({k: torch.tensor(v) for k, v in _state(model, ws).items()})
    net.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


# ---- NumPy floor (MLP only) ----------------------------------------------------------------

def numpy_mlp_step():
    x, y, ws = mlp_setup()
    w1, b1, w2, b2, w3, b3 = ws
    onehot = np.eye(10, dtype=np.float32)[y]

    def step():
        nonlocal w1, b1, w2, b2, w3, b3
        h1 = np.maximum(x @ w1.T + b1, 0)
        h2 = np.maximum(h1 @ w2.T + b2, 0)
        z = h2 @ w3.T + b3
        z = z - z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        dz = (p - onehot) / len(y)
        dh2 = (dz @ w3) * (h2 > 0)
        dh1 = (dh2 @ w2) * (h1 > 0)
        grads = (dh1.T @ x, dh1.sum(0), dh2.T @ h1, dh2.sum(0), dz.T @ h2, dz.sum(0))
        w1, b1, w2, b2, w3, b3 = (w - LR * g for w, g in zip((w1, b1, w2, b2, w3, b3), grads))
    return step


CASES = {"rill": rill_step, "torch": torch_step, "numpy (floor)": lambda model: numpy_mlp_step()}


def labels_for(model: str) -> list[str]:
    out = ["rill"] + (["torch"] if torch is not None else [])
    return out + (["numpy (floor)"] if model == "mlp" else [])


# ---- one process per case (bench/harness.py) ----------------------------------------------

MODULES = {"rill": "rill", "torch": "torch", "numpy (floor)": "numpy"}
WARMUP_CALLS = 3           # caches, allocator, first-call imports


def setup(label: str, model: str):
    """Run in the case's worker: its step and its first loss (the NumPy floor returns none)."""
    step = CASES[label](model)
    return step, (None if label == "numpy (floor)" else float(step()))


def run(model: str, repeats: int, block: int) -> dict[str, list[float]]:
    """Each case in its own process; blocks of consecutive steps rotate between them, so
    machine noise falls on all cases alike while no two ever run at once."""
    modules = {label: MODULES[label] for label in labels_for(model)}
    procs, conns, _, _ = harness.start(modules, setup, WARMUP_CALLS)
    try:
        first = harness.set_up(conns, model)
        if "torch" in first and abs(first["rill"] - first["torch"]) > 1e-4 * abs(first["torch"]):
            raise SystemExit(f"{model}: rill and torch disagree on the first loss: {first}")
        return harness.time_in_rotation(conns, repeats, block, harness.SETTLE_S)
    finally:
        harness.stop(procs, conns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=60, help="timed steps per case")
    parser.add_argument("--block", type=int, default=20,
                        help="consecutive steps per case before rotating to the next")
    parser.add_argument("--json", help="write samples and medians to this file")
    args = parser.parse_args()
    console = Console()
    report = {"machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "numpy": np.__version__, "torch": getattr(torch, "__version__", None),
                          "cpus": os.cpu_count()}, "models": {}}
    for model in (("mlp", "cnn") if args.model == "both" else (args.model,)):
        samples = run(model, args.repeats, args.block)
        medians = {k: statistics.median(v) for k, v in samples.items()}
        table = Table(title=f"{model}: ms per training step (median of {args.repeats})")
        for col in ("case", "median ms", "min ms", "x torch"):
            table.add_column(col, justify="right" if col != "case" else "left")
        for label, vals in samples.items():
            ratio = f"{medians[label] / medians['torch']:.2f}" if "torch" in medians else "-"
            table.add_row(label, f"{medians[label]:.2f}", f"{min(vals):.2f}", ratio)
        console.print(table)
        report["models"][model] = {"samples_ms": samples, "median_ms": medians}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
