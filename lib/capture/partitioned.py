"""Running a partitioned graph: one executor thread per device, joined by a transport.

`PartitionedProgram(graph)` takes the output of the partition pass, splits it per device,
and compiles each part into an ordinary straight-line `Program`. A call runs the first
device's part on the calling thread and every other part on that device's own thread (one
per device, kept for the process), all at once: NumPy and BLAS release the GIL, so the parts
overlap in time. Sends and recvs meet in the step's `Rendezvous` (lib/capture/transport.py);
a part that fails wakes every waiting recv, and the call raises the first failure (the node
as printed, the user's line), never hangs.

With `timeline=True` the parts run node by node instead, timed: `last_timeline` is then a
list of `TimelineEntry(device, node, start, end)` (seconds from the start of the step), what
ran where and when.
"""
from __future__ import annotations

import queue
import threading
from collections import namedtuple

from .executor import Program, _execute
from .passes.partition import split_results
from .transport import Aborted, Rendezvous, now


class TimelineEntry(namedtuple("TimelineEntry", "device node start end")):
    """One node of an executed step: the Device it ran on, the graph Node, and its start and
    end in seconds from the start of the step."""

    __slots__ = ()

    def __str__(self) -> str:
        where = f"  # {self.node.source}" if self.node.source else ""
        return (f"{str(self.device):>6} {self.start * 1e3:9.3f} ms  +{(self.end - self.start) * 1e6:9.1f} us"
                f"  {self.node.op}{where}")


class StepArgs(list):
    """A step's input buffers, plus what its send/recv handlers need."""

    __slots__ = ("transport", "timeline", "start")


class _Worker:
    """A device's executor thread: runs what it is handed, in order, and releases the lock
    handed with it when done. (A bare queue and lock: a step's hand-offs are on its critical
    path, and a futures pool costs several times more per hand-off.)"""

    def __init__(self, device):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name=f"rill-{device}", daemon=True).start()

    def _loop(self):
        while True:
            fn, arg, done = self.queue.get()
            try:
                fn(arg)
            finally:
                done.release()

    def submit(self, fn, arg):
        """Run fn(arg) on this thread; returns a lock that is released when it is done."""
        done = threading.Lock()
        done.acquire()
        self.queue.put((fn, arg, done))
        return done


_WORKERS: dict = {}
_WORKERS_LOCK = threading.Lock()


def _worker(device) -> _Worker:
    """The thread of a device (one per device for the process)."""
    with _WORKERS_LOCK:
        found = _WORKERS.get(device)
        if found is None:
            found = _WORKERS[device] = _Worker(device)
        return found


# How a graph partitioned over the tasks of a distributed job runs: registered by
# rill.distributed (its TaskProgram, a PartitionedProgram whose other tasks' parts run
# there). capture sits below distributed and never imports it.
_task_program = None


def register_task_program(make) -> None:
    """make(partitioned_graph, *, name, replicas) -> the program of a step over tasks."""
    global _task_program
    _task_program = make


def task_program(graph, *, name: str, replicas):
    """The program of a graph with parts on other tasks, from the registered maker."""
    if _task_program is None:
        from ..errors import CaptureError
        raise CaptureError("this step places ops on other tasks of a distributed job (ps:0, "
                           "worker:1, ...), which run through rill.distributed: import "
                           "rill.distributed (pip install 'rill[distributed]') and run the "
                           "step in a rill-launch job", op="capture")
    return _task_program(graph, name=name, replicas=replicas)


class PartitionedProgram:
    """partitioned graph -> callable(args) -> output buffers, one thread per device."""

    def __init__(self, graph, *, timeline: bool = False, recv_timeout: float | None = None,
                 transport=Rendezvous, parts=None):
        self.graph = graph
        self.parts, self.where = parts or split_results(graph)
        self.programs = {d: Program(g.lint(), parallel=False) for d, g in self.parts.items()}
        self.devices = list(self.parts)
        self.timeline = timeline
        self.recv_timeout = recv_timeout
        self.transport = transport
        self.last_timeline = None
        self.keys = [n.attrs["key"] for g in self.parts.values() for n in g.nodes
                     if n.op == "send"]
        self._tables: list = []  # Rendezvous tables of clean steps, ready for reuse

    def _transport(self):
        if self.transport is not Rendezvous:
            return self.transport(self.recv_timeout)
        try:
            return self._tables.pop()  # atomic: concurrent calls never share a table
        except IndexError:
            return Rendezvous(self.recv_timeout, self.keys)

    def __call__(self, args):
        step = StepArgs(args)
        step.transport = self._transport()
        step.timeline = [] if self.timeline else None
        step.start = now()
        results: dict = {}

        def run(d):
            try:
                results[d] = self._run_part(d, step)
            except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
                step.transport.abort(d, e)
            finally:
                step.transport.finished(d)

        pending = [_worker(d).submit(run, d) for d in self.devices[1:]]
        run(self.devices[0])
        for done in pending:
            done.acquire()
        if step.timeline is not None:
            self.last_timeline = sorted(step.timeline, key=lambda e: (e.start, str(e.device)))
        failed = getattr(step.transport, "error", None)
        if failed is not None:
            raise failed[1]
        if isinstance(step.transport, Rendezvous) and step.transport.reset():
            self._tables.append(step.transport)
        return [results[d][i] for d, i in self.where]

    def _run_part(self, d, step):
        program = self.programs[d]
        if step.timeline is None:
            return program(step)
        graph, record = program.graph, step.timeline
        env: dict = {}
        for node, fn in zip(graph.nodes, program.steps):
            start = now()
            try:
                outs = _execute(node, graph, fn, [env[v] for v in node.inputs], step)
            except Aborted:
                raise
            except Exception as e:
                raise program._node_error(e, node) from e
            record.append(TimelineEntry(d, node, start - step.start, now() - step.start))
            env.update(zip(node.outputs, outs))
        return [env[v] for v in graph.outputs]

    def __repr__(self) -> str:
        return f"<partitioned program over {', '.join(map(str, self.devices))}>"
