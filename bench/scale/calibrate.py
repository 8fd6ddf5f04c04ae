"""Calibrate the step model (simulate.py) on this machine with real rill-launch jobs, then
check it: simulated against measured step times at 2, 3 and 4 processes (1 ps + 1-3 workers).

What is measured (jobs.py), and what it sets:
  pingpong 8 B and 4 MiB   MPI round trips between two ranks -> the local link's latency
                           and bandwidth (shared memory: this host is not the multi-host bed)
  apply 64 Ki, 4 Mi elems  SGD's update alone -> apply_fixed, apply_rate
  compute                  the validation MLP's forward and backward alone -> the workers'
                           compute distribution (the measured times, bootstrapped)
  null scalar, 1-3 workers captured null steps -> step_overhead (= ps_msg: a message's
                           handling in Python), spin and handoff, fitted
  null 1 Mi elements       a 4 MiB null step, 1 worker -> byte_cpu (copies per byte)
  background               while each job runs, the other processes of the machine that
                           want a core (state R), sampled every 20 ms (`background`)
Message sizes are read from the partitioned graph of the captured step (`traffic_of`): the
ps's part cut by rill's own replicas.split into pull / serve / contribute / apply.

Validation: the MLP step (jobs.py `model`, sync) at 1-3 workers, median step time measured
against simulated with the calibrated parameters and the background measured before it.

This is one host with 2 cores shared with other work: every rank's waits compete with the
others' compute, which the model's processor sharing stands for. It is not the multi-host bed;
`validate_on_bed` is what the bed calls with its measured link and step times at 2-6 hosts.

    python bench/scale/calibrate.py          # about 2 minutes; writes results/*.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from simulate import Compute, Link, Setup, Traffic, simulate  # noqa: E402

RESULTS = os.path.join(HERE, "results")
JOBS = os.path.join(HERE, "jobs.py")
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---- message sizes from the partitioned graph ----------------------------------------------

def _bytes(values) -> float:
    return float(sum(math.prod(v.shape) * v.dtype.itemsize for v in values))


def traffic_of(step, *args, mode: str = "async") -> list:
    """[Traffic per ps] of a captured step whose variables are on ps tasks: each ps's part
    of the partitioned graph, cut as a ps cuts it (replicas.split): its pull's sends and
    serve's sends go to the worker, serve's and contribute's recvs come from it, apply's
    assigns (or row updates) are what its update writes. A prefix send (a sharded lookup's
    rows) counts its static shape, the most it can send."""
    from rill.distributed.graphs import replicas
    out = {}
    for device, part in step.partitions_for(*args).items():
        if not device.startswith("ps:"):
            continue
        pull, serve, contribute, apply = replicas.split(part, mode)
        sends = [v for g in (pull, serve) for n in g.nodes if n.op == "send" for v in n.inputs]
        request = [v for n in serve.nodes if n.op == "recv" for v in n.outputs]
        push = [v for n in contribute.nodes if n.op == "recv" for v in n.outputs]
        written = [n.inputs[0] for n in apply.nodes if n.op in ("assign", "add_rows")]
        task = int(device.split("/")[0].split(":")[1])
        out[task] = Traffic(request_bytes=_bytes(request), pull_bytes=_bytes(sends),
                            push_bytes=_bytes(push),
                            apply_bytes=_bytes(written))
    return [out[k] for k in sorted(out)]


def mlp_traffic(ps: int = 1) -> list:
    """The validation MLP's step (jobs.py) with its parameters on `ps` tasks."""
    import jobs
    return model_traffic(jobs.mlp(), *jobs.batch(), ps=ps, lr=0.01)


def model_traffic(model, x, y, ps: int = 1, **sgd) -> list:
    """The bytes of a synchronous SGD step (`sgd`: its settings) of `model` on (x, y), its
    parameters on `ps` tasks, read from the partitioned graph."""
    import rill
    import rill.distributed as dist
    from rill import nn
    dist.place_on_ps(model, ps_tasks=ps)
    opt = rill.optim.SGD(model.parameters(), **sgd)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return traffic_of(step, x, y, mode="sync")


def embedding_traffic(rows: int, dim: int, batch: int, sparse: bool) -> Traffic:
    """A step that looks up `batch` ids in a rows x dim float32 table on one ps and updates
    it: sparse through ShardedEmbedding (ids go, their rows come back, row gradients go),
    dense as an nn.Embedding on the ps (the table comes whole, a dense gradient goes back).
    Read from graphs of small tables (1024 and 2048 rows) and extended linearly to `rows`
    (each byte count is affine in the table's rows: the two readings fix the line)."""
    import rill
    import rill.distributed as dist
    from rill import nn
    from rill.distributed.graphs.embedding import ShardedEmbedding

    def read(n):
        if sparse:
            table = ShardedEmbedding(n, dim, shards=["ps:0/cpu"])
        else:
            table = nn.Embedding(n, dim)
            dist.place_on_ps(table, ps_tasks=1)
        opt = rill.optim.SGD(table.parameters(), lr=0.1)

        @rill.capture
        def step(ids):
            opt.zero_grad()
            loss = table(ids).sum()  # returned: the rows themselves are needed, not only
            loss.backward()          # their gradient (which is ones, whatever they hold)
            opt.step()
            return loss
        ids = rill.tensor(np.arange(batch) % n)
        return asdict(traffic_of(step, ids, mode="async")[0])

    a, b = read(1024), read(2048)
    return Traffic(**{k: a[k] + (b[k] - a[k]) * (rows - 1024) / 1024 for k in a})


# ---- running the jobs ----------------------------------------------------------------------

class Background:
    """Counts, every `period` s while a job runs, the processes of the machine that want a
    core (state R in /proc/PID/stat) and are not this process or its descendants (the job):
    the mean is the other work our ranks shared the cores with (`background` in the model).
    Taken during the job, since on a shared machine the load before it says little."""

    def __init__(self, period: float = 0.02):
        self.period, self.counts, self.stop = period, [], threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        me = os.getpid()
        while not self.stop.wait(self.period):
            parent, running = {}, []
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                try:
                    with open(f"/proc/{name}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                pid = int(name)
                parent[pid] = int(fields[1])
                if fields[0] == "R":
                    running.append(pid)

            def ours(pid):
                for _ in range(64):
                    if pid == me:
                        return True
                    if pid not in parent or pid <= 1:
                        return False
                    pid = parent[pid]
                return False
            self.counts.append(sum(not ours(p) for p in running))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    @property
    def mean(self) -> float:
        return float(np.mean(self.counts)) if self.counts else 0.0


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "RILL_"))}
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    env.update(ONE_THREAD)
    return env


def measure(job: str, workers: int = 0, steps: int = 100, **options) -> dict:
    """Step times (s) of a jobs.py job: under rill-launch with 1 ps + `workers` (0: local,
    one process; pingpong: 2 ranks, no ps), with the background measured meanwhile."""
    args = [JOBS, job, "--steps", str(steps)] + \
        [x for k, v in options.items() for x in (f"--{k}", str(v))]
    if job == "pingpong":
        cmd = [sys.executable, "-m", "rill.distributed.launch", "-n", "2", "--timeout", "60"]
    elif workers:
        cmd = [sys.executable, "-m", "rill.distributed.launch", "-n", str(workers + 1),
               "--ps", "1", "--timeout", "60"]
    else:
        cmd = [sys.executable]
    with Background() as background:
        proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=300,
                              env=_env())
    for line in proc.stdout.splitlines():
        body = line.split(" | ", 1)[-1]
        if body.startswith("RESULT "):
            times = np.asarray(json.loads(body[7:])["times"])
            return {"job": job, "workers": workers, "options": options, "times": times,
                    "median": float(np.median(times)), "background": background.mean,
                    "load": os.getloadavg()[0]}
    raise SystemExit(f"{job} ({workers} workers) failed:\n{proc.stdout[-2000:]}"
                     f"{proc.stderr[-2000:]}")


# ---- the fit -------------------------------------------------------------------------------

def one_host(params: dict, workers: int, traffic: list, compute: Compute,
             background: float) -> Setup:
    """The model of a job on this host: 1 ps + `workers`, all on host 0, sync."""
    return Setup(workers=workers, traffic=traffic, compute=compute, mode="sync",
                 local=Link(params["latency"], params["bandwidth"]),
                 step_overhead=params["step_overhead"], ps_msg=params["ps_msg"],
                 byte_cpu=params["byte_cpu"], apply_fixed=params["apply_fixed"],
                 apply_rate=params["apply_rate"], hosts=[0] * (workers + 1),
                 cores=params["cores"], background=background, spin=params["spin"],
                 handoff=params["handoff"])


def _rate(cores: float, background: float) -> float:
    """The share of a core one busy process gets beside `background` busy ones."""
    return min(1.0, cores / (1.0 + background))


def _solve(f, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with f(x) ~ target, f increasing (bisection on a log scale)."""
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return math.sqrt(lo * hi)


def fit(m: dict, steps: int = 60) -> dict:
    """The model's parameters from the measurements `m` (see the module docstring)."""
    small, big = m["ping_small"], m["ping_big"]
    params = {"cores": float(os.cpu_count() or 1), "byte_cpu": 0.0,
              "latency": small["median"] / 2,
              "bandwidth": 2 * 4 * 2 ** 20 / max(big["median"] - small["median"], 1e-9)}
    a0, a1 = m["apply_small"], m["apply_big"]
    n0, n1 = 4 * 2 ** 16, 4 * 2 ** 22
    w0 = a0["median"] * _rate(params["cores"], a0["background"])
    w1 = a1["median"] * _rate(params["cores"], a1["background"])
    params["apply_rate"] = (n1 - n0) / max(w1 - w0, 1e-9)
    params["apply_fixed"] = max(w0 - n0 / params["apply_rate"], 0.0)
    scalar = [Traffic(pull_bytes=4, push_bytes=4, apply_bytes=4)]
    nothing = Compute()
    best = None
    for spin in (0.0, 0.25, 0.5, 1.0):
        trial = dict(params, spin=spin)

        def null(overhead, handoff, n):
            p = dict(trial, step_overhead=overhead, ps_msg=overhead, handoff=handoff)
            run = m["null"][n]
            return simulate(one_host(p, n, scalar, nothing, run["background"]),
                            steps).median_step

        for handoff in (0.0, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4):
            overhead = _solve(lambda o: null(o, handoff, 1), m["null"][1]["median"], 1e-8,
                              1e-1)
            error = sum(math.log(null(overhead, handoff, n) / m["null"][n]["median"]) ** 2
                        for n in (1, 2, 3))
            if best is None or error < best[0]:
                best = (error, dict(trial, step_overhead=overhead, ps_msg=overhead,
                                    handoff=handoff))
    params = best[1]
    dense = m["null_dense"]
    size = 4 * 2 ** 20
    traffic = [Traffic(pull_bytes=size, push_bytes=size, apply_bytes=size)]

    def with_bytes(byte_cpu):
        p = dict(params, byte_cpu=byte_cpu)
        return simulate(one_host(p, 1, traffic, nothing, dense["background"]), 20).median_step
    floor = with_bytes(0.0)
    params["byte_cpu"] = 0.0 if dense["median"] <= floor else \
        _solve(with_bytes, dense["median"], 1e-13, 1e-7)
    return params


def compute_of(run: dict, cores: float) -> Compute:
    """A worker's compute as core-seconds: the measured times, scaled to what one process
    with a core of its own would take (they were measured beside `background`)."""
    return Compute(samples=tuple(run["times"]), scale=_rate(cores, run["background"]))


def validate(params: dict, compute_run: dict, model_runs: dict, traffic: list) -> list:
    """[{processes, measured_ms, simulated_ms, error, ...}] of the MLP step at 1-3 workers,
    twice: `simulated_ms` predicts from the local compute measurement alone;
    `refit_ms` first scales the compute so that 1 worker (2 processes) matches, then
    predicts 3 and 4 processes (what a step costs inside a job beyond its kernels: the
    worker's partitioned program, its threads, decoding the pulled values)."""
    compute = compute_of(compute_run, params["cores"])

    def median(n, scale=1.0):
        c = replace(compute, scale=compute.scale * scale)
        return simulate(one_host(params, n, traffic, c, model_runs[n]["background"]),
                        200).median_step
    first = min(model_runs)
    in_job = _solve(lambda k: median(first, k), model_runs[first]["median"], 0.1, 20.0)
    rows = []
    for n, run in sorted(model_runs.items()):
        plain, refit = median(n), median(n, in_job)
        rows.append({"processes": n + 1, "workers": n, "measured_ms": 1e3 * run["median"],
                     "simulated_ms": 1e3 * plain, "error": plain / run["median"] - 1,
                     "refit_ms": 1e3 * refit, "refit_error": refit / run["median"] - 1,
                     "compute_scale": in_job, "background_procs": run["background"],
                     "load": run["load"]})
    return rows


def validate_on_bed(bandwidth: float, latency: float, measured: dict, params: dict,
                    compute: Compute, traffic: list, cores: float = math.inf,
                    mode: str = "sync", backups: int = 0, shared_cpu: bool = False,
                    background: dict | None = None) -> list:
    """For the multi-host bed: `measured` is {hosts: median step seconds} of a sync step
    with the ps on host 0 and one worker on each other host, over links of the bed's
    measured `bandwidth` (bytes/s) and one-way `latency` (s). The per-message and per-step
    costs come from this host's calibration (`params`, calibration.json), the compute from
    `compute`. The bed's hosts are namespaces of one machine: `shared_cpu` with `cores` (the
    machine's) and `background` ({hosts: other busy processes during that job}) model them
    as such, with the calibration's spin and handoff; the defaults model dedicated machines.
    `params` may carry net_msg and net_byte (the network stack's CPU per message and byte
    between hosts), overlap (the receiver's share of a message's CPU that streams beside
    the sender's) and bed_spin (a waiting rank's CPU weight on the bed), as bed_validate.py
    measures or fits them.
    Returns [{hosts, measured_ms, simulated_ms, error}]; the issue asks |error| <= 15 %."""
    rows = []
    for hosts, seconds in sorted(measured.items()):
        workers = hosts - 1
        setup = Setup(workers=workers, traffic=traffic, compute=compute, mode=mode,
                      backups=backups, network=Link(latency, bandwidth),
                      local=Link(params["latency"], params["bandwidth"]),
                      step_overhead=params["step_overhead"], ps_msg=params["ps_msg"],
                      byte_cpu=params["byte_cpu"], apply_fixed=params["apply_fixed"],
                      apply_rate=params["apply_rate"], hosts=list(range(hosts)), cores=cores,
                      shared_cpu=shared_cpu, net_msg=params.get("net_msg", 0.0),
                      net_byte=params.get("net_byte", 0.0),
                      overlap=params.get("overlap", 0.0),
                      background=(background or {}).get(hosts, 0.0),
                      spin=params.get("bed_spin", params["spin"]) if shared_cpu else 0.0,
                      handoff=params["handoff"] if shared_cpu else 0.0)
        sim = simulate(setup, 200).median_step
        rows.append({"hosts": hosts, "measured_ms": 1e3 * seconds, "simulated_ms": 1e3 * sim,
                     "error": sim / seconds - 1})
    return rows


# ---- the driver ----------------------------------------------------------------------------

def run_all(quick: bool) -> dict:
    s = 20 if quick else 1
    m = {"ping_small": measure("pingpong", steps=400 // s, size=2),
         "ping_big": measure("pingpong", steps=60 // s + 5, size=2 ** 20),
         "apply_small": measure("apply", steps=200 // s + 5, size=2 ** 16),
         "apply_big": measure("apply", steps=40 // s + 5, size=2 ** 22),
         "null": {n: measure("null", n, steps=300 // s + 10) for n in (1, 2, 3)},
         "null_dense": measure("null", 1, steps=60 // s + 10, size=2 ** 20)}
    m["compute"] = measure("compute", steps=100 // s + 10)
    m["model"] = {n: measure("model", n, steps=100 // s + 10) for n in (1, 2, 3)}
    return m


def _measurements(saved: dict) -> dict:
    """calibration.json's "measured" back as run_all made it (arrays, int worker keys)."""
    def run(r):
        return dict(r, times=np.asarray(r["times"]))
    return {k: ({int(n): run(r) for n, r in v.items()} if "times" not in v else run(v))
            for k, v in saved.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few steps (figures not meaningful)")
    p.add_argument("--refit", action="store_true",
                   help="fit and validate again from the measurements in calibration.json")
    a = p.parse_args(argv)
    started, load0 = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()
    if a.refit:
        with open(os.path.join(RESULTS, "calibration.json")) as f:
            old = json.load(f)
        started, load0 = old["started"], old["uptime_load_before"]
        load1 = old.get("uptime_load_after")  # the measuring run's, not the refit's
        m = _measurements(old["measured"])
    else:
        m = run_all(a.quick)
        load1 = None
    params = fit(m)
    traffic = mlp_traffic()
    rows = validate(params, m["compute"], m["model"], traffic)
    os.makedirs(RESULTS, exist_ok=True)

    def plain(run):
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in run.items()}
    measured = {k: ({n: plain(r) for n, r in v.items()} if isinstance(v, dict) and 1 in v
                    else plain(v)) for k, v in m.items()}
    out = {"started": started, "uptime_load_before": load0, "uptime_load_after":
           load1 or os.getloadavg(), "cores": os.cpu_count(), "quick": a.quick, "params": params,
           "traffic_mlp": [asdict(t) for t in traffic], "validation": rows,
           "compute_ms": {"median": 1e3 * m["compute"]["median"],
                          "fit": asdict(replace(Compute.fit(m["compute"]["times"])))},
           "measured": measured}
    with open(os.path.join(RESULTS, "calibration.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"load average before {load0[0]:.2f}, after {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} cores)")
    print("params: " + ", ".join(f"{k}={v:.3g}" for k, v in params.items()))
    print("null scalar medians ms: " + ", ".join(
        f"{n}w {1e3 * r['median']:.3f}" for n, r in m["null"].items()))
    print(f"MLP traffic per step (ps 0): {asdict(traffic[0])}")
    print(f"compute scaled x{rows[0]['compute_scale']:.2f} in the refit (matched at 2 "
          "processes)")
    print("processes  measured ms  simulated ms  error  refit ms  error  background procs")
    for r in rows:
        print(f"{r['processes']:9d}  {r['measured_ms']:11.2f}  {r['simulated_ms']:12.2f}  "
              f"{100 * r['error']:+5.1f}%  {r['refit_ms']:8.2f}  {100 * r['refit_error']:+5.1f}%"
              f"  {r['background_procs']:.2f}")


if __name__ == "__main__":
    main()
