"""The worker's side of a captured step over tasks: register the parts, run the step.

`capture` hands a partitioned graph that has parts on other tasks to `TaskProgram`. On the
first call it registers each other task's part with that task (registration.py; the task
answers once it has checked it), then every call sends each such task a "run" message and
runs this process's own parts as any partitioned program does, one thread per local
device; a send or recv whose other end is on another task goes through the postbox (MPI),
tagged with the call's number, the rest through the in-process rendezvous.
"""
from __future__ import annotations

import threading

import numpy as np

from ...capture.partitioned import PartitionedProgram, register_task_program
from ...capture.passes.partition import split_results
from ...capture.transport import Rendezvous, Transport
from ...errors import ArgumentError, DistributedError
from ..roles import expect_serve, worker_only
from ..world import world
from . import registration
from .postbox import CONTROL, postbox, task_rank
from ...nn.module import Module
from ...tensor import Tensor, new_tensor
from ...devices import cpu
from ...capture.function import CapturedFunction

_HELD: dict = {}                   # id(tensor) -> (task, name on that task, tensor)
_PEERS: set = set()                # ranks of the tasks this process has registered with
_ADOPTED: dict = {}                # id(buffer) -> (task, name there, tensor): from a restore


class TaskTransport(Transport):
    """A step's transport on the worker: the rendezvous between its own devices, the
    postbox to and from other tasks."""

    def __init__(self, local: Rendezvous, box, step: int):
        self.local, self.box, self.step = local, box, step

    @property
    def error(self):
        return self.local.error

    def send(self, key, buffer, source, dest):
        if dest.task is None:
            return self.local.send(key, buffer, source, dest)
        host = None if buffer is None else source.backend.to_host(buffer)
        self.box.send(task_rank(self.box.world, dest.task), key, self.step, host)

    def recv(self, key, source, dest):
        if source.task is None:
            return self.local.recv(key, source, dest)
        array = self.box.take(task_rank(self.box.world, source.task), key, self.step,
                              f"recv of {key!r} on {self.box.world.task_name} from "
                              f"{source.task} (call {self.step})")
        return dest.backend.from_host(array, dest) if dest.kind != "cpu" else array

    def abort(self, device, error):
        self.local.abort(device, error)

    def finished(self, device):
        self.local.finished(device)


class TaskProgram(PartitionedProgram):
    """partitioned graph with parts on other tasks -> callable(args) -> output buffers."""

    def __init__(self, graph, *, name: str, replicas: dict | None = None):
        parts, where = split_results(graph)
        remote = {d: g for d, g in parts.items() if d.task is not None}
        for d, _ in where:
            if d.task is not None:
                raise DistributedError(
                    f"{name} returns a value held by task {d.task}; a captured step returns "
                    "values computed here. Return a computed value, or read variables with "
                    "rill.distributed.fetch()", op="capture")
        tasks: dict = {}
        for d, g in remote.items():
            if d.task in tasks:
                raise DistributedError(f"{name} places work on two devices of task {d.task} "
                                       f"({tasks[d.task][0]} and {d}); a task runs one part",
                                       op="capture")
            tasks[d.task] = (d, g)
        local = {d: g for d, g in parts.items() if d.task is None}
        super().__init__(graph, parts=(local, where))
        self.remote = tasks
        self.name = name
        w = world()
        self.options = {"mode": "async", "backup_workers": 0, **(replicas or {}),
                        "workers": len(w.worker_ranks), "step": name}
        self.ident = registration.fingerprint(name, [g for _, g in tasks.values()])
        self.calls = 0
        self.registered = False
        self.lock = threading.Lock()
        self.global_step = 0

    def _register(self) -> None:
        w = world()
        box = postbox(w)
        for task, (device, part) in self.remote.items():
            rank = task_rank(w, task)
            wanted = ()
            for attempt in range(2):  # the ps names the variables it lacks; then they go
                entries, names = registration.encode(part, w.task_name, self.ident,
                                                     self.options, wanted)
                box.post(rank, "register", 0, entries, CONTROL)
                ack = box.wait_for(rank, ("ack",), f"registering {self.name} with {task}")
                wanted = {name for field, name, _ in ack.entries
                          if field == "meta" and name != "id"}
                if not wanted:
                    break
            else:
                raise DistributedError(f"{task} still lacks {sorted(wanted)[:3]} after they "
                                       f"were sent, registering {self.name}", op="capture")
            if not _PEERS:
                import atexit
                atexit.register(_left_without_close)
            _PEERS.add(rank)
            for i, key in names.items():
                v = part.variables[i]
                if v.kind == "value":
                    _HELD[id(v.owner)] = (task, key, v.owner)
        self.registered = True

    def _transport(self):
        return TaskTransport(Rendezvous(self.recv_timeout, self.keys), self.box, self.step)

    def __call__(self, args):
        with self.lock:  # one step of a step function at a time: calls are numbered
            w = world()
            self.box = postbox(w)
            if not self.registered:
                self._register()
            self.calls += 1
            self.step = self.calls
            ident = np.int64(self.ident)
            for task in self.remote:
                self.box.post(task_rank(w, task), "run", self.step, [("meta", "id", ident)],
                              CONTROL)
            # The sends complete on their own (the postbox keeps their buffers until then
            # and reaps them as it posts more; close() and fetch() wait for the rest).
            results = super().__call__(args) if self.devices else []
            steps = [self.box.steps.get(task_rank(w, t), 0) for t in self.remote]
            self.global_step = max(steps, default=0)
            return results

    def __repr__(self) -> str:
        return (f"<captured step {self.name} over this process and "
                f"{', '.join(self.remote)}>")


register_task_program(TaskProgram)  # capture runs steps over tasks through it

def fetch(obj):
    """The current values of tensors held by other tasks (parameter servers), as local
    tensors: a Module gives {name: tensor} like state_dict(), a tensor a tensor, a list or
    dict the same structure. Waits until this worker's earlier steps have been applied. A
    tensor held here is returned as it is.

    A tensor on another task that no captured step of this process has used is refused:
    its value there is not known here.
    """
    worker_only(world(), "fetch", "dist.serve()")
    if isinstance(obj, Module):
        named = dict(obj.named_parameters())
        named.update(obj.named_buffers())
    elif isinstance(obj, Tensor):
        named = {"": obj}
    elif isinstance(obj, dict):
        named = dict(obj)
    else:
        named = dict(enumerate(obj))
    wanted: dict = {}  # task -> {name on the task: our key}
    for key, t in named.items():
        if t.device.task is None:
            continue
        held = _HELD.get(id(t)) or _ADOPTED.get(id(t._data))
        if held is None:
            raise DistributedError(
                f"{key or 'the tensor'} is on {t.device}, but no captured step of this process "
                "has used it, nor did a checkpoint restored here name it, so its name there "
                "is not known here", op="fetch")
        wanted.setdefault(held[0], {})[held[1]] = key
    w = world()
    got = {}
    if wanted:
        box = postbox(w)
        for task, names in wanted.items():
            box.post(task_rank(w, task), "fetch", 0,
                     [("wanted", n, np.zeros(0, np.uint8)) for n in names], CONTROL)
        for task, names in wanted.items():
            reply = box.wait_for(task_rank(w, task), ("reply",), f"fetch from {task}")
            for field, name, array in reply.entries:
                if field == "value" and name in names:
                    t = named[names[name]]
                    got[names[name]] = new_tensor(np.array(array), t.dtype, cpu)
    out = {k: got.get(k, t) for k, t in named.items()}
    if isinstance(obj, Tensor):
        return out[""]
    if isinstance(obj, (Module, dict)):
        return out
    return type(obj)(out[i] for i in range(len(out))) if isinstance(obj, tuple) else \
        [out[i] for i in range(len(out))]


def adopt(t, task: str, name: str) -> None:
    """Know tensor `t` as `name` on `task` before any captured step of this process has
    used it: what restoring a distributed checkpoint learns from its manifest, so that a job
    restarted at its last checkpoint, which runs no step, can still fetch()."""
    # By buffer: a checkpoint restores into state_dict()'s detached tensors, which share
    # their buffer (the host copy of the variable's initial value) with the parameter.
    _ADOPTED.setdefault(id(t._data), (task, name, t))


def global_step() -> int:
    """How many steps the parameter servers had applied when they last sent this worker
    values (the largest a ps reported; 0 before the first captured step)."""
    w = world()
    if w.comm is None:
        return 0
    return max(postbox(w).steps.values(), default=0)


def close() -> None:
    """Tell every task this process has sent steps to that it is done (their serve()
    returns once all workers have closed). A worker with nothing registered tells every
    parameter server."""
    w = world()
    if w.comm is None:
        return
    worker_only(w, "close", "dist.serve()")
    box = postbox(w)
    for rank in sorted(_PEERS or set(w.ps_ranks)):
        box.post(rank, "close", 0, [], CONTROL)
    box.flush("close")
    _PEERS.clear()


def _left_without_close() -> None:
    """At exit, a worker that has not closed tells the tasks it registered with, which
    would otherwise wait for its close() forever (their serve() ends with an error naming
    it)."""
    if not _PEERS:
        return
    w = world()
    box = postbox(w)
    try:
        for rank in sorted(_PEERS):
            box.fail(rank, f"{w.task_name} (rank {w.rank}) exited without calling "
                           "rill.distributed.close()")
        box.flush("telling the parameter servers this worker exited without close()")
    except DistributedError:
        pass  # they are gone already: nothing waits for this worker there
    _PEERS.clear()


def replicate(fn=None, *, mode: str = "async", backup_workers: int = 0, **capture_options):
    """Capture a training step for between-graph replication (the paper's §4.4): every
    worker captures its own copy; variables held by parameter servers are read, and updated
    by the optimizer, there.

    mode="async": each worker's update is applied as it arrives. mode="sync": a step is
    applied once the first n - backup_workers workers have contributed to it (n workers),
    as the mean of their values; later contributions to it are dropped and counted.

    >>> import rill.distributed as dist
    >>> step = dist.replicate(lambda x: x * 2, mode="sync")   # doctest: +SKIP
    """
    if mode not in ("async", "sync"):
        raise ArgumentError(f"mode must be 'async' or 'sync', got {mode!r}", op="replicate")
    n = len(world().worker_ranks)
    if not 0 <= backup_workers < max(n, 1) or (backup_workers and mode != "sync"):
        raise ArgumentError(f"backup_workers={backup_workers} needs mode='sync' and fewer than "
                            f"the job's {n} workers", op="replicate")

    class ReplicatedStep(CapturedFunction):
        """A worker's step: a ps rank serves it (dist.serve()), never calls it."""

        def __call__(self, *args, **kwargs):
            worker_only(world(), f"calling the replicated step {self.name}()", "dist.serve()",
                        op="replicate")
            return super().__call__(*args, **kwargs)

    expect_serve(world(), "dist.replicate(...)", "dist.serve()")

    def wrap(f):
        return ReplicatedStep(f, replicas={"mode": mode, "backup_workers": backup_workers},
                              **capture_options)
    return wrap if fn is None else wrap(fn)
