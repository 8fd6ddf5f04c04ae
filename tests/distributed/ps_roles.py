"""Run under rill-launch -n 2 --ps 1: a ps rank running worker code, or a worker serving,
must fail the job with a DistributedError naming the rank and the fix (argv[1]):
readme_swap       the README's snippet with `dist.ParameterServer(...)` for AllReduce: the
                  ps calls ps.backward() and optimizer.step() like the worker (which waits
                  before its own, refused, optimizer.step(), so the ps fails first)
eager_no_serve    the ps builds a ParameterServer and ends its script without serving
graph_step_on_ps  a captured, replicated step called on the ps (no dist.serve())
worker_serves     a worker calls ps.serve()
worker_optimizer  a worker's optimizer.step() and Checkpoint(optimizer=...) refuse (the ps
                  holds the slots); the job then ends normally
"""
import os
import sys
import tempfile

import rill
import rill.distributed as dist

case = sys.argv[1]
world = dist.init()
rill.manual_seed(0)
model = rill.nn.Linear(4, 2)
x, y = rill.randn(8, 4), rill.randint(0, 2, (8,))

if case == "readme_swap":
    opt = rill.optim.SGD(model.parameters(), lr=0.1)
    ddp = dist.ParameterServer(model, opt, mode="sync")
    opt.zero_grad()
    ddp.backward(rill.nn.functional.cross_entropy(model(x), y))
    if world.role == "worker":
        # The worker's opt.step() is refused too (the ps holds the slots); run as is, either
        # refusal may end the job first. The worker waits, so that the ps's, which comes at
        # once, is the one this case checks.
        import time
        time.sleep(5)
    opt.step()
elif case == "eager_no_serve":
    opt = rill.optim.SGD(model.parameters(), lr=0.1)
    ps = dist.ParameterServer(model, opt, mode="sync")
    if world.role == "worker":
        ps.pull()
        ps.backward(rill.nn.functional.cross_entropy(model(x), y))
        ps.close()
elif case == "graph_step_on_ps":
    dist.place_on_ps(model)
    opt = rill.optim.SGD(model.parameters(), lr=0.1)

    @dist.replicate(mode="sync")
    def step(x, y):
        opt.zero_grad()
        rill.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step(x, y)
    dist.close()
elif case in ("worker_serves", "worker_optimizer"):
    opt = rill.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ps = dist.ParameterServer(model, opt, mode="sync")
    if world.role == "ps":
        ps.serve()
        print(f"served until the worker closed; global step {ps.step}")
        sys.exit(0)
    if case == "worker_serves":
        ps.serve()
    ps.pull()
    ps.backward(rill.nn.functional.cross_entropy(model(x), y))
    for attempt in (opt.step, lambda: rill.train.Checkpoint(model=model, optimizer=opt).save(
            os.path.join(tempfile.mkdtemp(), "ckpt.rill"))):
        try:
            attempt()
        except rill.DistributedError as e:
            print(f"refused: {e}")
    ps.close()
