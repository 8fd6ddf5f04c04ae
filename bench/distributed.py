"""Distributed: the TensorFlow paper's synchronous coordination microbenchmark, all-reduce
overhead, and a straggler experiment, each a real rill-launch job on this machine.

Null-model steps (paper, Section 6.2, Figure 6), 1 parameter server and 1 to 3 synchronous
workers; a step is pull (fetch the variables) + push (send a gradient of the same size):
  scalar   one float32 variable
  dense    one 100 MB variable (25M float32)
  sparse   32 random rows of a 1 GB embedding table (2^20 x 256 float32), fetched and
           updated as rows
All-reduce: the step time of a small MLP (digits-sized) with AllReduce over 1-3 workers.
Stragglers: 3 synchronous workers, each step one of them (chosen at random) sleeps 20 ms
before pushing; step time with 0 and with 1 backup worker.

    python bench/distributed.py            # a few minutes; --quick for a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

PAPER_MS = {"scalar": "1.8 (1 worker)", "dense": "147", "sparse": "5-20"}
TARGET_MS = {"scalar": 0.2, "sparse": 1.0}


# ---- the job every rank runs ---------------------------------------------------------------

def job(case: str, steps: int, extra: str, quick: bool) -> None:
    import rill
    import rill.distributed as dist
    from rill import nn
    w = dist.init()

    class Null(nn.Module):
        def __init__(self, shape):
            super().__init__()
            self.v = nn.Parameter(rill.zeros(*shape))

    times = []
    if case in ("scalar", "dense", "sparse", "straggler"):
        if case == "sparse":
            model = nn.Module()
            model.table = nn.Embedding(1, 256)
            rows = 2 ** 12 if quick else 2 ** 20  # 1 GiB (lazily zero until written)
            model.table.weight = nn.Parameter(rill.zeros(rows, 256))
        else:
            dense = (2 ** 16 if quick else 25 * 2 ** 20 // 4,)  # 100 MB of float32
            model = Null(dense if case == "dense" else ())
        opt = rill.optim.SGD(model.parameters(), lr=0.0)
        backups = int(extra) if case == "straggler" else 0
        ps = dist.ParameterServer(model, opt, mode="sync", backup_workers=backups)
        if w.role == "ps":
            stats = ps.serve()
            print("STATS " + json.dumps(stats))
            return
        params = list(model.parameters())
        rng = np.random.default_rng(0)
        while True:
            t0 = time.perf_counter()
            if case == "sparse":
                ids = rng.integers(0, params[0].shape[0], size=32)
                ps.pull(rows={"table.weight": ids})
            else:
                ps.pull()
            if ps.step >= steps:
                break
            if case == "sparse":
                params[0].grad = rill.SparseRows(rill.tensor(ids), rill.zeros(32, 256),
                                                 params[0].shape)
            else:
                params[0].grad = rill.zeros_like(params[0])
            if case == "straggler":
                slow = np.random.default_rng(ps.step).integers(0, len(w.worker_ranks))
                if slow == w.task:
                    time.sleep(0.02)
            ps.push()
            times.append(time.perf_counter() - t0)
        ps.close()
    elif case == "allreduce":
        rill.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = rill.optim.SGD(model.parameters(), lr=0.01)
        ddp = dist.AllReduce(model)
        x, y = rill.randn(32, 64), rill.randint(0, 10, (32,))
        for _ in range(steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            ddp.backward(nn.functional.cross_entropy(model(x), y))
            opt.step()
            times.append(time.perf_counter() - t0)
    if w.chief:
        warm = times[min(5, len(times) // 2):]
        print("RESULT " + json.dumps({"median_ms": 1e3 * float(np.median(warm)),
                                      "min_ms": 1e3 * float(np.min(warm)), "n": len(warm)}))


# ---- the driver ----------------------------------------------------------------------------

def run(case: str, workers: int, steps: int, ps: int = 1, extra: str = "0",
        quick: bool = False) -> dict:
    cmd = [sys.executable, "-m", "rill.distributed.launch", "-n", str(workers + ps),
           "--ps", str(ps), "--timeout", "120", os.path.abspath(__file__), "--job", case,
           "--steps", str(steps), "--extra", extra] + (["--quick"] if quick else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "RILL_"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    result, stats = None, None
    for line in proc.stdout.splitlines():
        body = line.split(" | ", 1)[-1]
        if body.startswith("RESULT "):
            result = json.loads(body[7:])
        elif body.startswith("STATS "):
            stats = json.loads(body[6:])
    if proc.returncode or result is None:
        raise SystemExit(f"{case} with {workers} workers failed:\n{proc.stdout[-3000:]}"
                         f"{proc.stderr[-2000:]}")
    result["stats"] = stats
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: few steps, 1 worker, small tables (figures not meaningful)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--job", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--extra", default="0", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.job:
        return job(a.job, a.steps, a.extra, a.quick)
    from rich.console import Console
    from rich.table import Table
    console = Console()
    steps = {"scalar": 400, "dense": 20, "sparse": 100, "allreduce": 200, "straggler": 60}
    if a.quick:
        steps = {k: 8 for k in steps}
    counts = (1,) if a.quick else (1, 2, 3)
    results: dict = {}
    table = Table(title="null-model steps, 1 ps, synchronous: median ms (pull + push)")
    for col in ("case", *[f"{n} worker{'s' if n > 1 else ''}" for n in counts], "paper",
                "target"):
        table.add_column(col, justify="right")
    for case in ("scalar", "dense", "sparse"):
        row = [run(case, n, steps[case], quick=a.quick) for n in counts]
        results[case] = row
        target = TARGET_MS.get(case)
        verdict = "-" if target is None else \
            f"<= {target} ms: {'met' if row[0]['median_ms'] <= target else 'NOT met'}"
        table.add_row(case, *[f"{r['median_ms']:.3f}" for r in row], PAPER_MS[case], verdict)
    console.print(table)
    single = run("allreduce", 1, steps["allreduce"], ps=0)
    table = Table(title="all-reduce: MLP step (64-128-10, batch 32 per worker), median ms")
    for col in ("workers", "step ms", "overhead vs 1 worker"):
        table.add_column(col, justify="right")
    results["allreduce"] = [single]
    table.add_row("1", f"{single['median_ms']:.3f}", "-")
    for n in counts[1:]:
        r = run("allreduce", n, steps["allreduce"], ps=0)
        results["allreduce"].append(r)
        table.add_row(str(n), f"{r['median_ms']:.3f}", f"{r['median_ms'] - single['median_ms']:+.3f}")
    console.print(table)
    if not a.quick:
        table = Table(title="stragglers: 3 sync workers, one at random sleeps 20 ms a step")
        for col in ("backup workers", "median step ms", "dropped pushes"):
            table.add_column(col, justify="right")
        for b in (0, 1):
            r = run("straggler", 3, steps["straggler"], extra=str(b))
            results[f"straggler_b{b}"] = r
            table.add_row(str(b), f"{r['median_ms']:.2f}", str(r["stats"]["dropped"]))
        console.print(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
