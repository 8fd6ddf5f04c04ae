"""Eager per-op dispatch overhead: one 10-element float32 add, in microseconds per call.

At 10 elements the arithmetic is negligible, so what is timed is the cost of getting an op
from Python to its kernel and back: NumPy as the floor, rill with and without the tape,
and PyTorch (optional) with and without requires_grad as the reference. The target is rill
with tape no slower than torch with requires_grad.

    python bench/dispatch.py                     # defaults: 15 repeats x 20000 calls
    python bench/dispatch.py --repeats 25 --number 50000 --json dispatch.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import timeit

import numpy as np
from rich.console import Console
from rich.table import Table

import rill

try:
    import torch
except ImportError:
    torch = None

N = 10


def cases() -> dict[str, tuple[str, dict, bool]]:
    """Label -> (statement, namespace, under no_grad). Operands are built once, untimed."""
    a = np.ones(N, np.float32)
    b = np.ones(N, np.float32)
    x, y = rill.ones(N), rill.ones(N)
    w = rill.ones(N, requires_grad=True)
    out = {
        "numpy": ("a + b", {"a": a, "b": b}, False),
        "rill": ("x + y", {"x": x, "y": y}, False),
        "rill, tape": ("w + y", {"w": w, "y": y}, False),
        # no_grad wraps the whole timed loop: entering it per call would time the context
        # manager, not the op.
        "rill, tape-capable, no_grad": ("w + y", {"w": w, "y": y}, True),
    }
    if torch is not None:
        tx, ty = torch.ones(N), torch.ones(N)
        tw = torch.ones(N, requires_grad=True)
        out["torch"] = ("tx + ty", {"tx": tx, "ty": ty}, False)
        out["torch, requires_grad"] = ("tw + ty", {"tw": tw, "ty": ty}, False)
    return out


def run(repeats: int, number: int) -> dict[str, list[float]]:
    timers = {label: (timeit.Timer(stmt, globals=ns), no_grad)
              for label, (stmt, ns, no_grad) in cases().items()}
    samples = {label: [] for label in timers}
    for label, (t, no_grad) in timers.items():  # warm-up: caches, lazy imports, allocator
        _time(t, no_grad, max(1, number // 10))
    labels = list(timers)
    for r in range(repeats):
        # Round-robin within a repeat, rotating the start, so drift and noise (clock boost,
        # other tenants) land on every case alike instead of on whichever ran last.
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            t, no_grad = timers[label]
            samples[label].append(_time(t, no_grad, number) / number * 1e6)
    return samples


def _time(timer: timeit.Timer, no_grad: bool, number: int) -> float:
    # timeit switches the cyclic GC off for every case alike; neither rill's tape nor
    # torch's graph makes reference cycles here, so the ratios do not move with it on.
    if no_grad:
        with rill.no_grad():
            return timer.timeit(number)
    return timer.timeit(number)


def summarize(samples: dict[str, list[float]]) -> dict:
    stats = {k: {"median_us": statistics.median(v), "min_us": min(v), "samples_us": v}
             for k, v in samples.items()}
    ratios = {}
    if torch is not None:
        med = {k: s["median_us"] for k, s in stats.items()}
        ratios["rill, tape / torch, requires_grad"] = med["rill, tape"] / med["torch, requires_grad"]
        ratios["rill / torch"] = med["rill"] / med["torch"]
    return {"results": stats, "ratios": ratios}


def machine() -> dict:
    """bench/harness.py's description of the machine, and torch's version if present."""
    import harness  # bench/, on sys.path when run as `python bench/dispatch.py`
    return {**harness.machine(), "torch": getattr(torch, "__version__", None)}


def report(summary: dict, repeats: int, number: int) -> None:
    console = Console()
    table = Table(title=f"10-element float32 add: us per call ({repeats} x {number:,} calls)")
    table.add_column("case")
    table.add_column("median us", justify="right")
    table.add_column("min us", justify="right")
    for label, s in summary["results"].items():
        table.add_row(label, f"{s['median_us']:.3f}", f"{s['min_us']:.3f}")
    console.print(table)
    if torch is None:
        console.print("torch is absent: its rows and the ratios are skipped")
    for name, value in summary["ratios"].items():
        console.print(f"{name} (medians): [bold]{value:.3f}[/bold]")
    if "rill, tape / torch, requires_grad" in summary["ratios"]:
        met = summary["ratios"]["rill, tape / torch, requires_grad"] <= 1.0
        console.print(f"target (rill, tape <= torch, requires_grad): {'met' if met else 'NOT met'}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15, help="timing rounds per case")
    p.add_argument("--number", type=int, default=20000, help="calls per round")
    p.add_argument("--json", metavar="PATH", help="also write the figures and machine info here")
    args = p.parse_args(argv)
    summary = summarize(run(args.repeats, args.number))
    report(summary, args.repeats, args.number)
    if args.json:
        payload = {"repeats": args.repeats, "number": args.number, "machine": machine(), **summary}
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)


if __name__ == "__main__":
    main()
