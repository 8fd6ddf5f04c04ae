"""The math of a synchronous step of two workers, in one process: the reference the job
scripts compare a distributed run with (graph_fault.py, ps_resume.py)."""
from __future__ import annotations

import numpy as np

import rill
from rill import nn


def two_worker_sgd(model, batch, halves, steps: int, lr: float = 0.1,
                   momentum: float = 0.9) -> None:
    """Train `model` in place for `steps`: each worker's gradient on its half of batch(i), their
    float32 mean (what the ps applies for a sync step of two workers), then SGD with momentum.
    A table's sparse gradient counts as its dense form."""
    opt = rill.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for i in range(steps):
        x, y = batch(i)
        grads = []
        for half in halves:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[half]), y[half]).backward()
            grads.append([p.grad.to_dense().numpy() if hasattr(p.grad, "to_dense") else
                          p.grad.numpy().copy() for p in model.parameters()])
        for p, g0, g1 in zip(model.parameters(), *grads):
            p.grad = rill.tensor(np.mean([g0, g1], axis=0, dtype=np.float32))
        opt.step()
