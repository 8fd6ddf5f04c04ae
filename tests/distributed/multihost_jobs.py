"""Run under rill-launch over the network test bed (netbed.py); argv[1] is the set-up:

probe DIR      every rank all-reduces, says its host and pid, writes DIR/ready-<rank>, waits
               (at most 30 s) for DIR/go (the test looks at the sockets meanwhile, and sends
               garbage from outside), then all-reduces 1 MiB per rank and checks the sums
fault DIR      all-reduce training, 16 steps, the chief checkpointing every 4 (DIR/ckpt); in
               attempt 0 every rank pauses 1.5 s after step 9, the chief having written
               DIR/fault-now (the test breaks a host then); the last attempt ends equal to an
               uninterrupted run (checked by the chief)
steptime FILE STEPS BACKUPS [GATE]
               captured sync training, 1 ps, the workers step until the ps has applied STEPS
               steps (BACKUPS backup workers); each worker writes the wall time of each of its
               steps to FILE-worker<k>.json, with its host name. With GATE, each worker
               writes FILE-ready-<k> after its first step (capture and registration), then
               waits (at most 30 s) for the file GATE before it measures
"""
import json
import os
import socket
import sys
import time

import rill.distributed as dist

w = dist.init()
setup = sys.argv[1]
host = socket.gethostname()

if setup == "steptime":
    if w.role == "ps":
        print(f"ps stats {dist.serve()}")
        sys.exit(0)

import numpy as np  # noqa: E402

import rill  # noqa: E402
from rill import nn  # noqa: E402

if setup == "probe":
    out = sys.argv[2]
    total = dist.all_reduce(rill.tensor([float(w.rank)]))
    assert float(total) == sum(range(w.size)), total
    print(f"rank {w.rank} on {host} pid {os.getpid()} ready")
    open(os.path.join(out, f"ready-{w.rank}"), "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
        time.sleep(0.05)
    big = dist.all_reduce(rill.full((1 << 18,), float(w.rank + 1)))  # 1 MiB of float32
    assert np.all(big.numpy() == sum(range(1, w.size + 1))), big
    dist.barrier()
    print(f"probe ok on {host}")

elif setup == "fault":
    import copy
    from rill.train import Checkpoint, CheckpointManager
    out = sys.argv[2]
    STEPS, PAUSE_AFTER = 16, 9
    attempt = os.environ["RILL_ATTEMPT"]
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))
    initial = copy.deepcopy(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = CheckpointManager(Checkpoint(model=model, optimizer=opt),
                                os.path.join(out, "ckpt"), max_to_keep=2, every_n_steps=4)
    start = manager.restore_latest() or 0
    print(f"attempt {attempt} on {host} starts at step {start}")
    ddp = dist.AllReduce(model)

    def batch(step):
        rng = np.random.default_rng(step)
        return (rill.tensor(rng.normal(size=(12, 5)).astype(np.float32)),
                rill.tensor(rng.integers(0, 3, size=12)))

    share = 12 // w.size
    mine = slice(w.rank * share, (w.rank + 1) * share)
    for step in range(start, STEPS):
        x, y = batch(step)
        opt.zero_grad()
        ddp.backward(nn.functional.cross_entropy(model(x[mine]), y[mine]))
        opt.step()
        if w.chief:
            manager.maybe_save(step + 1)
        if attempt == "0" and step == PAUSE_AFTER:
            if w.chief:
                open(os.path.join(out, "fault-now"), "w").close()
            time.sleep(1.5)
    if w.chief:
        opt_ref = rill.optim.SGD(initial.parameters(), lr=0.1, momentum=0.9)
        for step in range(STEPS):
            x, y = batch(step)
            opt_ref.zero_grad()
            nn.functional.cross_entropy(initial(x), y).backward()
            opt_ref.step()
        for (name, p), q in zip(model.named_parameters(), initial.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
        print(f"attempt {attempt} finished at step {STEPS} equal to an uninterrupted run")

elif setup == "steptime":
    import graph_model  # noqa: E402 - beside this script
    result, steps, backups = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rill.manual_seed(0)
    data = np.random.default_rng(1)
    x_all = rill.tensor(data.normal(size=(48, 5)).astype(np.float32))
    y_all = rill.tensor(data.integers(0, 3, size=48))
    model = graph_model.mlp(5, 16, 3)
    dist.place_on_ps(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @dist.replicate(mode="sync", backup_workers=backups)
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    workers = len(w.worker_ranks)
    share = 48 // workers
    mine = slice(w.task * share, (w.task + 1) * share)
    step(x_all[mine], y_all[mine])  # the first: capture and registration
    if len(sys.argv) > 5:
        open(f"{result}-ready-{w.task}", "w").close()
        deadline = time.monotonic() + 30
        while not os.path.exists(sys.argv[5]) and time.monotonic() < deadline:
            time.sleep(0.02)
    times = []
    began = time.perf_counter()
    while dist.global_step() < steps:
        start = time.perf_counter()
        step(x_all[mine], y_all[mine])
        times.append(time.perf_counter() - start)
    with open(f"{result}-worker{w.task}.json", "w") as f:
        json.dump({"host": host, "worker": w.task, "steps_s": times,
                   "wall_s": time.perf_counter() - began, "global_step": dist.global_step()}, f)
    dist.close()
else:
    raise SystemExit(f"unknown set-up {setup!r}")
