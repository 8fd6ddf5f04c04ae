"""The paper's scaling experiments (Abadi et al., OSDI 2016, §6.2-6.4) projected by the step
model (simulate.py), with rill's per-message and per-byte costs from calibrate.py's run on
this machine (results/calibration.json; built-in guesses, said so, when it is missing).

  throughput  training throughput vs workers (1-200), synchronous with 0, 5 and 10 % backup
              workers, and asynchronous, for an Inception-v3-like model
  null        the null step (scalar, synchronous, 1 ps) vs workers: the paper's Figure 6
  embedding   sparse vs dense embedding steps vs workers: 32 rows of a 1 GiB table looked
              up and updated as rows (ShardedEmbedding), against the whole table moved
              (an nn.Embedding on the ps), bytes read from both steps' partitioned graphs

The cluster is an assumption, not a measurement: every task on a machine of its own, links
of --bandwidth and --latency. The Inception-like model's defaults (flags): 24M float32
parameters (~95 MB, Inception-v3's size) over 16 ps tasks, 0.3 s of compute per step and
worker (batch 32 on a GPU of the paper's time), a lognormal spread of 10 % and 2 % of steps
3x slower (a shared cluster's stragglers); none of these numbers is from the paper.

    python bench/scale/project.py            # about a minute; results/ gets json and svg
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from plots import line_plot  # noqa: E402
from simulate import Compute, Link, Setup, Traffic, simulate  # noqa: E402

RESULTS = os.path.join(HERE, "results")
# When calibration.json is missing: rill's costs as measured in earlier sessions on this
# machine (docs/benchmarks-history.md, captured null step ~0.08 ms at 1 worker), rounded.
GUESSED = {"step_overhead": 3e-5, "ps_msg": 3e-5, "byte_cpu": 1e-10, "apply_fixed": 0.0,
           "apply_rate": 1e10}
WORKERS = (1, 2, 5, 10, 25, 50, 100, 150, 200)


def rill_costs() -> tuple:
    """(costs, where they come from): the calibrated per-message/byte costs of rill."""
    path = os.path.join(RESULTS, "calibration.json")
    if not os.path.exists(path):
        return dict(GUESSED), "guessed (no calibration.json)"
    with open(path) as f:
        cal = json.load(f)
    p = cal["params"]
    return ({k: p[k] for k in GUESSED}, f"calibration.json ({cal['started']})")


def cluster(a, costs: dict, **fields) -> Setup:
    return Setup(network=Link(a.latency, a.bandwidth), **costs, **fields)


def throughput(a, costs: dict) -> dict:
    params = a.params * 4 / a.ps
    traffic = [Traffic(pull_bytes=params, push_bytes=params, apply_bytes=2 * params)] * a.ps
    compute = Compute(median=a.compute, sigma=a.sigma, slow_prob=a.slow_prob,
                      slow_factor=a.slow_factor)
    curves = {}
    for label, mode, share in (("sync", "sync", 0.0), ("sync + 5% backups", "sync", 0.05),
                               ("sync + 10% backups", "sync", 0.10), ("async", "async", 0)):
        rows = []
        for n in WORKERS:
            b = min(round(share * n), n - 1)
            steps = a.steps if mode == "sync" else a.steps * n
            r = simulate(cluster(a, costs, workers=n, traffic=traffic, compute=compute,
                                 mode=mode, backups=b, batch=a.batch, seed=n), steps)
            rows.append({"workers": n, "backups": b, "examples_per_s": r.throughput,
                         "median_step_s": r.median_step, "dropped": r.dropped})
        curves[label] = rows
    return curves


def null_steps(a, costs: dict) -> dict:
    scalar = [Traffic(pull_bytes=4, push_bytes=4, apply_bytes=4)]
    curves = {}
    for label, link in ((f"network {1e6 * a.latency:.0f} us", Link(a.latency, a.bandwidth)),
                        ("shared memory, this host's link", Link(2e-6, 6e9))):
        rows = []
        for n in (1, 2, 5, 10, 25, 50, 100):
            r = simulate(Setup(workers=n, traffic=scalar, network=link, **costs), a.steps * 4)
            rows.append({"workers": n, "median_step_ms": 1e3 * r.median_step})
        curves[label] = rows
    return curves


def embedding(a, costs: dict) -> dict:
    import calibrate  # reads the partitioned graphs (imports rill)
    rows, dim, ids = 2 ** 20, 256, 32
    kinds = {"sparse: 32 rows of 1 GiB": calibrate.embedding_traffic(rows, dim, ids, True),
             "dense: the whole 1 GiB table": calibrate.embedding_traffic(rows, dim, ids, False)}
    curves = {}
    for label, traffic in kinds.items():
        out = []
        for n in (1, 2, 5, 10, 25, 50, 100):
            if "dense" in label and n > 10:
                break  # minutes of simulated transfers per step: the point is made by then
            r = simulate(cluster(a, costs, workers=n, traffic=[traffic]), 10)
            out.append({"workers": n, "median_step_ms": 1e3 * r.median_step})
        curves[label] = {"traffic": asdict(traffic), "rows": out}
    return curves


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bandwidth", type=float, default=1.25e9,
                   help="bytes/s per NIC and direction (default 10 Gbit/s)")
    p.add_argument("--latency", type=float, default=1e-4, help="one-way, s (default 100 us)")
    p.add_argument("--params", type=float, default=24e6, help="float32 parameters")
    p.add_argument("--ps", type=int, default=16, help="parameter-server tasks")
    p.add_argument("--compute", type=float, default=0.3, help="median s per worker step")
    p.add_argument("--sigma", type=float, default=0.1, help="lognormal spread of compute")
    p.add_argument("--slow-prob", type=float, default=0.02, help="share of straggling steps")
    p.add_argument("--slow-factor", type=float, default=3.0, help="how much slower they are")
    p.add_argument("--batch", type=int, default=32, help="examples per worker step")
    p.add_argument("--steps", type=int, default=20, help="simulated steps per point")
    p.add_argument("--only", choices=("throughput", "null", "embedding"))
    a = p.parse_args(argv)
    costs, source = rill_costs()
    os.makedirs(RESULTS, exist_ok=True)
    out = {"made": time.strftime("%Y-%m-%d %H:%M:%S"), "rill_costs": costs,
           "rill_costs_from": source, "cluster": {k: v for k, v in vars(a).items()}}
    t0 = time.perf_counter()
    if a.only in (None, "throughput"):
        curves = out["throughput"] = throughput(a, costs)
        line_plot(os.path.join(RESULTS, "throughput.svg"),
                  "Inception-like training throughput (simulated)", "workers",
                  "examples / s", {k: ([r["workers"] for r in v],
                                       [r["examples_per_s"] for r in v])
                                   for k, v in curves.items()}, logx=True, logy=True)
    if a.only in (None, "null"):
        curves = out["null"] = null_steps(a, costs)
        line_plot(os.path.join(RESULTS, "null_step.svg"),
                  "Null step, scalar, synchronous, 1 ps (simulated)", "workers",
                  "median step ms", {k: ([r["workers"] for r in v],
                                         [r["median_step_ms"] for r in v])
                                     for k, v in curves.items()},
                  logx=True, logy=True, marks={"paper, 1 worker: 1.8 ms": (1, 1.8)})
    if a.only in (None, "embedding"):
        curves = out["embedding"] = embedding(a, costs)
        line_plot(os.path.join(RESULTS, "embedding.svg"),
                  "Embedding steps, 1 ps, synchronous (simulated)", "workers",
                  "median step ms", {k: ([r["workers"] for r in v["rows"]],
                                         [r["median_step_ms"] for r in v["rows"]])
                                     for k, v in curves.items()},
                  logx=True, logy=True)
    name = "projection.json" if a.only is None else f"projection_{a.only}.json"
    with open(os.path.join(RESULTS, name), "w") as f:
        json.dump(out, f, indent=1)
    print(f"rill's costs from {source}; {time.perf_counter() - t0:.0f} s")
    for key in ("throughput", "null", "embedding"):
        for label, v in (out.get(key) or {}).items():
            rows = v["rows"] if isinstance(v, dict) else v
            col = "examples_per_s" if key == "throughput" else "median_step_ms"
            print(f"{key:10s} {label:32s} " + "  ".join(
                f"{r['workers']}:{r[col]:.3g}" for r in rows))


if __name__ == "__main__":
    main()
