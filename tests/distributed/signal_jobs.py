"""Jobs for tests/distributed/test_launcher_signals.py (the first argument names the job):

    train DIR         every rank starts processes of its own (a child, a grandchild in a
                      session of its own, an orphan handed to the rank's watcher), writes
                      their pids and its own to DIR/<rank>.pids, then all-reduces every
                      0.1 s for at most 60 s, until the test stops the job
    deaf DIR          the same, but every rank ignores SIGTERM
    exit_message      rank 1 ends with sys.exit("...") after the first all-reduce
    raises            rank 1 raises a ValueError after the first all-reduce
    leave_children    every rank starts a process that ignores SIGTERM and outlives it, and
                      ends normally
    graph_busy        a captured synchronous step over ps:0; worker:1 works (sleeps) in its
                      own code before step 3 for longer than the job's timeout
"""
import os
import signal
import subprocess
import sys
import time

import rill.distributed as dist

SLEEPER = "import time; time.sleep(120)"
mode = sys.argv[1]
w = dist.init()


def own_processes():
    """A child, a grandchild in its own session, and an orphan (its parent exits at once)."""
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    session = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True)
    orphan = subprocess.run(["sh", "-c", f"{sys.executable} -c '{SLEEPER}' >/dev/null 2>&1 "
                             "</dev/null & echo $!"],
                            capture_output=True, text=True, check=True)
    return [child.pid, session.pid, int(orphan.stdout.strip())]


if mode in ("train", "deaf"):
    import rill
    if mode == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids = [os.getpid(), *own_processes()]
    dist.all_reduce(rill.ones(3))
    path = os.path.join(sys.argv[2], f"{w.rank}.pids")
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.replace(path + ".tmp", path)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        dist.all_reduce(rill.ones(3))
        time.sleep(0.1)
    sys.exit(0)

if mode in ("exit_message", "raises"):
    import rill
    dist.all_reduce(rill.ones(3))
    if w.rank == 1:
        if mode == "exit_message":
            sys.exit("worker1 gives up: its shard of the data set is empty")
        raise ValueError("worker1 found a NaN in its batch")
    dist.all_reduce(rill.ones(3))
    sys.exit(0)

if mode == "leave_children":
    import rill
    keeps_on = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(120)")
    child = subprocess.Popen([sys.executable, "-c", keeps_on], start_new_session=True)
    print(f"left pid {child.pid}", flush=True)
    dist.all_reduce(rill.ones(3))
    sys.exit(0)

if mode == "graph_busy":
    if w.role == "ps":  # a ps imports no user module
        dist.serve()
        sys.exit(0)
    import rill
    from rill import nn
    rill.manual_seed(0)
    model = nn.Linear(3, 2)
    dist.place_on_ps(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.1)

    @dist.replicate(mode="sync")
    def step(x):
        opt.zero_grad()
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss

    for i in range(4):
        if i == 2 and w.task == 1:
            time.sleep(30)  # its own work, far past the job's timeout
        step(rill.ones((2, 3)))
    dist.close()
    sys.exit(0)

raise SystemExit(f"unknown job {mode!r}")
