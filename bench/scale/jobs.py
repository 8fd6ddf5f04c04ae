"""The real jobs calibrate.py measures: each runs under rill-launch (1 ps + n workers on this
host) or, for the local ones, in a single process. Every job prints one line
`RESULT {json}` from the chief (the first worker), the step times in seconds after warm-up.

    null       the paper's null step, captured: one float32 variable of `size` elements on
               the ps; a worker's step pulls it whole and pushes a gradient of the same size
               (zero; SGD with lr 0), mode="sync"
    model      an MLP step, captured, mode="sync": the parameters on the ps, forward and
               backward on each worker, SGD applied on the ps (the validation job)
    pingpong   rank 0 and rank 1 send `size` float32 back and forth over MPI (mpi4py, what
               the postbox sends through): round-trip times
    compute    (local) the MLP's forward and backward alone, captured on this process: the
               per-step compute time of a worker
    apply      (local) SGD's update of `size` float32 elements: the ps's apply time

Run by calibrate.py; by hand: `rill-launch -n 3 --ps 1 bench/scale/jobs.py null --steps 50`.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

# The validation model: an MLP on flattened 28x28 inputs. 784-256-256-10, 270k parameters
# (1.08 MB float32): compute a few ms a step, messages large enough that their bytes count.
LAYERS = (784, 256, 256, 10)
BATCH = 64


def mlp():
    from rill import nn
    mods = []
    for i, (a, b) in enumerate(zip(LAYERS[:-1], LAYERS[1:])):
        mods.append(nn.Linear(a, b))
        if i < len(LAYERS) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def batch(seed: int = 0):
    import rill
    rng = np.random.default_rng(seed)
    x = rill.tensor(rng.normal(size=(BATCH, LAYERS[0])).astype(np.float32))
    y = rill.tensor(rng.integers(0, LAYERS[-1], size=BATCH))
    return x, y


def report(times: list, **extra) -> None:
    warm = times[min(5, len(times) // 2):]
    print("RESULT " + json.dumps({"times": [float(t) for t in warm], **extra}), flush=True)


def timed(fn, steps: int) -> list:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


# ---- jobs under rill-launch ----------------------------------------------------------------

def null_job(steps: int, size: int) -> None:
    import rill
    import rill.distributed as dist
    from rill import nn
    w = dist.init()
    if w.role == "ps":
        dist.serve()
        return
    model = nn.Module()
    model.v = nn.Parameter(rill.zeros(*((size,) if size > 1 else ())))
    dist.place_on_ps(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.0)

    @dist.replicate(mode="sync")
    def step(zero):
        opt.zero_grad()
        loss = model.v.to("cpu").sum() * zero
        loss.backward()
        opt.step()
        return loss

    zero = rill.zeros(())
    times = timed(lambda: step(zero), steps)
    dist.close()
    if w.chief:
        report(times)


def model_job(steps: int, backups: int = 0) -> None:
    import rill
    import rill.distributed as dist
    from rill import nn
    w = dist.init()
    if w.role == "ps":
        dist.serve()
        return
    rill.manual_seed(0)
    model = mlp()
    dist.place_on_ps(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.01)

    @dist.replicate(mode="sync", backup_workers=backups)
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x, y = batch(w.task)
    times = timed(lambda: step(x, y), steps)
    dist.close()
    if w.chief:
        report(times)


def pingpong_job(steps: int, size: int) -> None:
    import rill.distributed as dist
    w = dist.init()
    comm = w.comm
    buf = np.zeros(max(size, 1), np.float32)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        if w.rank == 0:
            comm.Send(buf, dest=1, tag=5)
            comm.Recv(buf, source=1, tag=5)
        elif w.rank == 1:
            comm.Recv(buf, source=0, tag=5)
            comm.Send(buf, dest=0, tag=5)
        times.append(time.perf_counter() - t0)
    if w.rank == 0:
        report(times)


# ---- local measurements (one process) ------------------------------------------------------

def compute_job(steps: int) -> None:
    """The worker's share of a model step: forward and backward, captured, nothing sent."""
    import rill
    rill.manual_seed(0)
    grads = captured_grads(mlp())
    x, y = batch()
    report(timed(lambda: grads(x, y), steps))


def captured_grads(model):
    """grads(x, y): `model`'s captured forward and backward (cross-entropy), its gradients."""
    import rill
    from rill import nn
    params = list(model.parameters())

    @rill.capture
    def grads(x, y):
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return [p.grad for p in params]
    return grads


def apply_job(steps: int, size: int) -> None:
    """SGD's update of `size` float32 elements: what a ps does per applied step."""
    import rill
    from rill import nn
    p = nn.Parameter(rill.zeros(size))
    opt = rill.optim.SGD([p], lr=0.01)
    p.grad = rill.ones(size)
    report(timed(opt.step, steps))


JOBS = {"null": null_job, "model": model_job, "pingpong": pingpong_job,
        "compute": compute_job, "apply": apply_job}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("job", choices=sorted(JOBS))
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--size", type=int, default=1, help="float32 elements (null, pingpong, "
                                                       "apply)")
    p.add_argument("--backups", type=int, default=0, help="backup workers (model)")
    a = p.parse_args(argv)
    kwargs = {"steps": a.steps}
    if a.job in ("null", "pingpong", "apply"):
        kwargs["size"] = a.size
    if a.job == "model":
        kwargs["backups"] = a.backups
    JOBS[a.job](**kwargs)


if __name__ == "__main__":
    main()
