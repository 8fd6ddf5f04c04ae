"""Check the step model (simulate.py) against real jobs on the multi-host test bed
(tests/distributed/netbed.py: network namespaces joined by veth pairs, TCP between them) at
2-6 hosts: the ps alone on host 0, one worker on each other host, synchronous.

Measured here, as root (the bed makes and removes its own namespaces):
  link     netbed.measure_link: ping-pong between two hosts -> latency, bandwidth
  mlp784   jobs.py `model` (784-256-256-10, batch 64, 1.08 MB each way per worker step)
  mlp5     multihost_jobs.py `steptime` (5-16-3, what `netbed.py measure` runs: 600 B)
  compute  each model's forward and backward alone, in this process (jobs.py `compute`,
           and the same for the small MLP), with the machine's background
Each job runs `--rounds` times, the hosts in turn; a job's figure is the median step of its
chief (mlp784) or of every worker (mlp5), and the figure kept is the median over rounds.
While each job runs the other busy processes of the machine are sampled (`Background`).

Simulated (calibrate.validate_on_bed) with the one-host calibration (results/
calibration.json: per-message and per-step costs, spin, handoff), the bed's link, and:
  dedicated     every host a machine of its own (cores=inf): what validate_on_bed assumed
  one machine   the hosts share this machine's cores (shared_cpu), beside the background
                measured during that job, with the compute measured alone; and the same with
                the compute scaled by the in-job factor fitted on one host (calibration.json)
  net fitted    and the network stack's CPU per message and per byte between hosts fitted
                at the fewest hosts (small MLP -> net_msg, large -> net_byte), then predicted

    sudo python bench/scale/bed_validate.py [--hosts 2,3,4,5,6] [--rounds 2]
writes results/bed_validation.json and prints the table docs/benchmarks-history.md shows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, replace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "distributed"))
import calibrate  # noqa: E402
import jobs  # noqa: E402
import netbed  # noqa: E402


# Measured on the bed (2026-11-29 17:23, 2-6 hosts, 60 steps a job, load 2.9-3.7, the other
# busy processes 0.0-1.0; docs/benchmarks-history.md), each rank's main thread timed by its thread clock
# and /proc/thread-self/schedstat at every wait's ends (a worker's Postbox._wait, a ps
# event-loop pass that moved nothing):
#   bed_spin  a waiting worker's CPU per second of wait over a busy rank's share of a core
#             then: 0.19-0.30 at 3-6 hosts, both models (the ps's idle passes: 0.3-0.6)
#   net_msg   the ps's busy CPU per worker step of the small MLP (0.27-0.41 ms at 3-6
#             hosts), less its two handlings (ps_msg), over the three messages it ends
#   net_byte  the large MLP's ps CPU per worker step (1.74-2.02 ms) less the small one's,
#             over the 2 x 1.08 MB it ends, less the copies (byte_cpu)
MEASURED = {"bed_spin": 0.25, "net_msg": 9e-5, "net_byte": 5.3e-10}


def small_mlp():
    from rill import nn
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def small_traffic() -> list:
    """multihost_jobs.py steptime's step, read from its partitioned graph."""
    import rill
    return calibrate.model_traffic(small_mlp(), rill.randn(24, 5), rill.randint(0, 3, (24,)),
                                   lr=0.1, momentum=0.9)


def small_compute(batch: int, steps: int = 300) -> dict:
    """The small MLP's captured forward and backward alone (a worker's batch of 48 split
    over its workers), timed here beside the background."""
    import rill
    grads = jobs.captured_grads(small_mlp())
    x, y = rill.randn(batch, 5), rill.randint(0, 3, (batch,))
    with calibrate.Background() as background:
        times = jobs.timed(lambda: grads(x, y), steps)
    times = np.asarray(times[10:])
    return {"times": times, "median": float(np.median(times)), "background": background.mean}


def run_on_bed(model: str, hosts: int, steps: int) -> dict:
    """One job on a fresh bed of `hosts` hosts: {median (s), background, load}."""
    with netbed.Bed(hosts) as bed:
        env = bed.env(**calibrate.ONE_THREAD)
        with calibrate.Background() as background:
            if model == "mlp784":
                rc, out = bed.launch([1] * hosts, "--ps", 1, "--timeout", 60, calibrate.JOBS,
                                     "model", "--steps", steps, timeout=300, env=env)
            else:
                result = bed.tmp / "steps"
                rc, out = bed.launch([1] * hosts, "--ps", 1, "--timeout", 60,
                                     netbed.HERE / "multihost_jobs.py", "steptime", result,
                                     steps, 0, timeout=300, env=env)
        if rc != 0:
            raise SystemExit(f"{model} on {hosts} hosts failed:\n{out[-3000:]}")
        if model == "mlp784":
            line = next(t for t in out.splitlines() if "RESULT " in t)
            times = json.loads(line.split("RESULT ", 1)[1])["times"]
        else:
            times = [t for p in sorted(bed.tmp.glob("steps-worker*"))
                     for t in json.loads(p.read_text())["steps_s"][5:]]
    return {"median": float(np.median(times)), "background": background.mean,
            "load": os.getloadavg()[0], "steps": len(times)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", default="2,3,4,5,6")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--refit", action="store_true",
                   help="simulate again from the measurements in bed_validation.json")
    a = p.parse_args(argv)
    why = netbed.unavailable()
    if why:
        raise SystemExit(f"no bed here: {why}")
    hosts = [int(h) for h in a.hosts.split(",")]
    started, load0 = time.strftime("%Y-%m-%d %H:%M:%S"), os.getloadavg()
    with open(os.path.join(calibrate.RESULTS, "calibration.json")) as f:
        calibration = json.load(f)
    params = calibration["params"]
    in_job = calibration["validation"][0]["compute_scale"]
    saved = os.path.join(calibrate.RESULTS, "bed_validation.json")
    if a.refit:
        with open(saved) as f:
            old = json.load(f)
        started, load0, link = old["started"], old["uptime_load_before"], old["link"]
        load1 = old.get("uptime_load_after")  # the measuring run's, not the refit's
        runs = {m: {int(n): rs for n, rs in v.items()} for m, v in old["measured"].items()}
        hosts = sorted(runs["mlp784"])
    else:
        with netbed.Bed(2) as bed:
            link = netbed.measure_link(bed)
        runs = {m: {n: [] for n in hosts} for m in ("mlp784", "mlp5")}
        for r in range(a.rounds):
            for n in hosts if r % 2 == 0 else hosts[::-1]:
                for model in ("mlp784", "mlp5"):
                    runs[model][n].append(run_on_bed(model, n, a.steps))
                    print(f"round {r} {model} {n} hosts: {runs[model][n][-1]}", flush=True)
        load1 = os.getloadavg()  # when the jobs ended, not after the simulation
        with open(saved, "w") as f:  # kept first: the simulation below may be redone
            json.dump({"started": started, "uptime_load_before": load0, "link": link,
                       "measured": runs, "uptime_load_after": load1}, f, indent=1)
    computes = {"mlp784": calibrate.measure("compute", steps=150)}
    traffic = {"mlp784": calibrate.mlp_traffic(), "mlp5": small_traffic()}
    out = {"started": started, "uptime_load_before": load0, "cores": os.cpu_count(),
           "link": link, "in_job_compute_scale": in_job, "params": params, "models": {},
           "measured": runs}
    measured, background, compute = {}, {}, {}
    for model in ("mlp784", "mlp5"):
        measured[model] = {n: statistics.median(r["median"] for r in rs)
                           for n, rs in runs[model].items()}
        background[model] = {n: float(np.mean([r["background"] for r in rs]))
                             for n, rs in runs[model].items()}
        for n in hosts:  # mlp5: each worker's share of the 48 examples
            c = computes["mlp784"] if model == "mlp784" else \
                computes.setdefault(("mlp5", n), small_compute(48 // (n - 1)))
            compute[model, n] = (c, calibrate.compute_of(c, params["cores"]))

    def bed(model, n, p, scale=in_job, shared=True):
        c = compute[model, n][1]
        c = replace(c, scale=c.scale * scale)
        if not shared:
            return calibrate.validate_on_bed(link["bandwidth_Bps"], link["latency_s"],
                                             {n: measured[model][n]}, p, c, traffic[model])[0]
        return calibrate.validate_on_bed(link["bandwidth_Bps"], link["latency_s"],
                                         {n: measured[model][n]}, p, c, traffic[model],
                                         cores=p["cores"], shared_cpu=True,
                                         background=background[model])[0]

    # The network stack's CPU per message and per byte (net_msg, net_byte), fitted at the
    # fewest hosts: the small MLP's step sets the first, the large one's the second.
    fitted, first = dict(params), hosts[0]
    for _ in range(3):
        fitted["net_msg"] = calibrate._solve(
            lambda x: bed("mlp5", first, dict(fitted, net_msg=x))["simulated_ms"] / 1e3,
            measured["mlp5"][first], 1e-8, 1e-2)
        fitted["net_byte"] = calibrate._solve(
            lambda x: bed("mlp784", first, dict(fitted, net_byte=x))["simulated_ms"] / 1e3,
            measured["mlp784"][first], 1e-14, 1e-7)
    out["net_fit"] = {"hosts": first, "net_msg": fitted["net_msg"],
                      "net_byte": fitted["net_byte"]}
    # The measured variant: spin and the network stack's CPU from the ranks' own clocks;
    # overlap (how much of a receiver's CPU streams beside the sender's) is not pinned by
    # those measurements, so both ends of its range are simulated.
    measured_params = {o: dict(params, overlap=o, **MEASURED) for o in (0.0, 1.0)}
    out["measured_params"] = MEASURED
    for model in ("mlp784", "mlp5"):
        rows_by = {}
        for n in hosts:
            rows_by[n] = {"dedicated": bed(model, n, params, 1.0, shared=False),
                          "one_machine": bed(model, n, params, 1.0),
                          "one_machine_in_job": bed(model, n, params),
                          "net_fitted": bed(model, n, fitted),
                          "measured_cpu": bed(model, n, measured_params[0.0]),
                          "measured_cpu_streamed": bed(model, n, measured_params[1.0])}
            c = compute[model, n][0]
            rows_by[n].update(background=background[model][n], compute_ms=1e3 * c["median"],
                              rounds_ms=[1e3 * r["median"] for r in runs[model][n]],
                              load=[r["load"] for r in runs[model][n]])
        out["models"][model] = {"traffic": [asdict(t) for t in traffic[model]],
                                "rows": rows_by}
    # a refit keeps the load of the measuring run (the load now says nothing about it)
    out["uptime_load_after"] = load1 or os.getloadavg()
    with open(saved, "w") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"link: latency {1e6 * link['latency_s']:.1f} us one way, "
          f"{link['bandwidth_Bps'] / 1e9:.2f} GB/s; load {load0[0]:.2f} -> "
          f"{os.getloadavg()[0]:.2f}; in-job compute factor {in_job:.2f}; fitted at "
          f"{first} hosts: net_msg {1e6 * fitted['net_msg']:.1f} us, net_byte "
          f"{1e9 * fitted['net_byte']:.3f} ns")
    for model, m in out["models"].items():
        print(f"{model}: hosts  measured ms (rounds)  dedicated  one machine  "
              "one machine x in-job  + net fitted  measured CPU  + streamed  background")
        for n, row in m["rows"].items():
            cells = "  ".join(f"{row[k]['simulated_ms']:7.2f} ({100 * row[k]['error']:+5.1f}%)"
                              for k in ("dedicated", "one_machine", "one_machine_in_job",
                                        "net_fitted", "measured_cpu",
                                        "measured_cpu_streamed"))
            rounds = "/".join(f"{t:.2f}" for t in row["rounds_ms"])
            print(f"  {n}  {row['one_machine']['measured_ms']:6.2f} ({rounds})  {cells}  "
                  f"{row['background']:.2f}")


if __name__ == "__main__":
    main()
