"""Jobs for tests/distributed/test_hardening_round2.py, one per finding (the first argument):

    stop_after_last   every rank all-reduces once, then rank 2 stops itself (SIGSTOP)
    finish_apart      every rank all-reduces once, then rank 2 works on (sleeps) for twice
                      the job's timeout before it ends: a slow rank, not a stuck one
    graph_no_close    a captured async step over ps:0; worker:1 ends without close()
    graph_vanish      the same, but worker:1's process ends at once (os._exit: no atexit)
    graph_stop        a captured sync step; worker:1 stops itself (SIGSTOP) before step 3
    restart_at_end    a captured sync step, checkpointed every 2 steps up to the last (4);
                      attempt 0 fails after the last checkpoint, attempt 1 resumes there,
                      runs no step, and fetches (second argument: the checkpoint directory)
"""
import os
import signal
import sys

import rill.distributed as dist

mode = sys.argv[1]
w = dist.init()
if mode == "stop_after_last":
    import rill
    dist.all_reduce(rill.ones(3))
    print("last exchange done", flush=True)
    if w.rank == 2:
        os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(0)

if mode == "finish_apart":
    import time

    import rill
    dist.all_reduce(rill.ones(3))
    if w.rank == 2:
        time.sleep(2 * w.timeout)
    print(f"rank {w.rank} done", flush=True)
    sys.exit(0)

if w.role == "ps":  # a ps imports no user module
    dist.serve()
    sys.exit(0)

import rill  # noqa: E402
from rill import nn  # noqa: E402

rill.manual_seed(0)
model = nn.Linear(3, 2)
dist.place_on_ps(model)
opt = rill.optim.SGD(model.parameters(), lr=0.1)


@dist.replicate(mode="async" if mode.startswith("graph_no") or mode == "graph_vanish"
                else "sync")
def step(x):
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()
    return loss


if mode == "restart_at_end":
    from rill.train import Checkpoint, CheckpointManager
    attempt = os.environ["RILL_ATTEMPT"]
    manager = CheckpointManager(Checkpoint(model=model, optimizer=opt), sys.argv[2],
                                every_n_steps=2)
    start = manager.restore_latest() or 0
    print(f"attempt {attempt} starts at step {start}", flush=True)
    for i in range(start, 4):
        step(rill.ones((2, 3)))
        if w.chief:
            manager.maybe_save(i + 1)
    params = dist.fetch(model)
    print(f"attempt {attempt} worker{w.task} fetched at step {start}: weight "
          f"{params['weight'].numpy().ravel().tolist()}", flush=True)
    if attempt == "0" and w.chief:
        raise SystemExit("failing after the last checkpoint")
    dist.close()
    sys.exit(0)

for i in range(6):
    if mode == "graph_stop" and w.task == 1 and i == 3:
        print("worker1 stops itself", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    step(rill.ones((2, 3)))
print(f"worker{w.task} done", flush=True)
if w.task == 1 and mode == "graph_no_close":
    sys.exit(0)
if w.task == 1 and mode == "graph_vanish":
    os._exit(0)
dist.close()
