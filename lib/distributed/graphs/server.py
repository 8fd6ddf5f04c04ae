"""A parameter server for captured graphs: `rill.distributed.serve()`.

A ps task holds variables and runs the parts of workers' steps placed on it; it runs no
model code. The loop answers control messages until every worker has closed:

    register  a worker's part (registration.py), checked like any loaded graph, cut into
              pull / contribute / apply (replicas.py), its variables made on first sight
    run       a step of a registered part: queued to that worker's executor thread
    fetch     the current values of variables (after the worker's earlier steps)
    save / restore  this task's variables to / from its shard of a checkpoint
    close     the worker is done

Each worker has an executor thread, so that the ps serves several workers' steps at once (a
step waits for its worker's values); updates to the variables apply one step at a time.
"""
from __future__ import annotations

import queue
import sys
import threading
import traceback

import numpy as np

from ...capture.executor import Program
from ...capture.transport import Transport
from ...errors import DistributedError, Error
from ..world import world
from . import registration, replicas
from .postbox import CONTROL, REPLY, GLOBAL_STEP, postbox, task_of, task_rank


class Registered:
    """One worker's registered part: its three programs and the replicas it belongs to."""

    def __init__(self, graph, group, mode: str):
        pull, serve, contribute, apply = replicas.split(graph, mode)
        self.graph, self.group = graph, group
        self.parts = {"pull": pull, "serve": serve, "contribute": contribute, "apply": apply}
        for kind, g in self.parts.items():
            setattr(self, kind, Program(g.lint(), parallel=False) if g.nodes else None)
        self.names = sorted(n.attrs["name"] for g in (serve, contribute) for n in g.nodes
                            if n.op == "accumulate")


class PsStepArgs(list):
    """What a ps's programs for one step of a worker need: its transport, the replicas'
    accumulators (take) and the worker's contribution (accumulate)."""

    __slots__ = ("transport", "accumulators", "contribution")


class ToWorker(Transport):
    """The transport of a ps's step for one worker: everything goes to or comes from it."""

    def __init__(self, box, worker: int, step: int, global_step: int):
        self.box, self.worker, self.step, self.global_step = box, worker, step, global_step
        self.who = task_of(box.world, worker)

    def send(self, key, buffer, source, dest):
        self.box.send(self.worker, key, self.step, buffer, self.global_step)

    def recv(self, key, source, dest):
        return self.box.take(self.worker, key, self.step,
                             f"recv of {key!r} from {self.who} (step {self.step})")

    def abort(self, device, error):
        pass


class GraphServer:
    def __init__(self, w=None):
        self.world = w = w or world()
        if w.role != "ps":
            raise DistributedError(f"serve() runs on a parameter server; this is {w.name}",
                                   op="serve")
        self.box = postbox(w)
        self.here = w.task_name
        self.store: dict = {}       # variable name -> its tensor (grads: a holder of .grad)
        self.parts: dict = {}       # (worker rank, graph id) -> Registered
        self.groups: dict = {}      # graph id -> Replicas shared by the workers' parts
        self.queues: dict = {}      # worker rank -> its executor's queue
        self.threads: list = []
        self.failure = None

    def run(self) -> dict:
        """Serve until every worker has closed; returns the counts per step function (by
        the name its capture gave it)."""
        open_workers = set(self.world.worker_ranks)
        while open_workers:
            # Between requests a ps idles as long as the workers compute: no deadline (a
            # worker that fails stops the whole job; the exchanges of a step have theirs).
            message, sender = self.box.next_control(f"serve on {self.here} (waiting for "
                                                    "any worker)", float("inf"))
            kind = message.kind
            if kind == "close":
                open_workers.discard(sender)
                self._executor(sender).put(None)
            elif kind == "register":
                self._register(message, sender)
            elif kind in ("run", "fetch", "save", "restore"):
                self._executor(sender).put((kind, message))
            else:
                raise DistributedError(f"a {kind} message from {task_of(self.world, sender)} "
                                       "on the control channel; refused", op="serve")
        for t in self.threads:
            t.join()
        self.box.flush("the last replies")
        if self.failure is not None:
            raise self.failure
        counts = {}
        for ident, g in self.groups.items():
            name = g.name if g.name not in counts else f"{g.name}#{ident:x}"
            counts[name] = dict(g.stats, global_step=g.global_step)
        return counts

    # ---- registration ------------------------------------------------------------------

    def _register(self, message, sender: int) -> None:
        task = task_of(self.world, sender)
        try:
            ident, options, graph = registration.decode(message, self.store, task, self.here)
            group = self.groups.get(ident)
            part = Registered(graph, group, options["mode"])
            if group is None:
                group = self.groups[ident] = replicas.Replicas(
                    options["mode"], options["workers"], options["backup_workers"],
                    part.names, self.world.timeout)
                group.name = options["step"]
            elif (group.mode, group.workers, group.backup) != (
                    options["mode"], options["workers"], options["backup_workers"]) or \
                    frozenset(part.names) != group.names:
                raise DistributedError(
                    f"{task} registers step function {ident} with {options} and contributions "
                    f"{part.names[:4]}..., but another worker registered it with mode "
                    f"{group.mode!r}, {group.workers} workers, {group.backup} backups and "
                    f"{sorted(group.names)[:4]}...: every worker must run the same step",
                    op="register")
            part.group = group
            self.parts[(sender, ident)] = part
        except registration.Missing as e:  # asked again, with these variables' values
            self.box.post(sender, "ack", 0, [("meta", "id", np.int64(message.step))] +
                          [("meta", key, np.int64(0)) for key in e.keys], REPLY)
            return
        except Error as e:
            self._refuse(sender, f"{type(e).__name__}: {e.message}")
            return
        self.box.post(sender, "ack", 0, [("meta", "id", np.int64(ident))], REPLY)

    def _refuse(self, worker: int, why: str) -> None:
        self.box.post(worker, "error", 0, [("text", "error", np.frombuffer(
            why.encode("utf-8")[:60000], np.uint8))], REPLY)

    # ---- each worker's requests, in order, on its own thread ---------------------------

    def _executor(self, worker: int) -> queue.SimpleQueue:
        found = self.queues.get(worker)
        if found is None:
            found = self.queues[worker] = queue.SimpleQueue()
            t = threading.Thread(target=self._serve_worker, args=(worker, found),
                                 name=f"rill-serve-{task_of(self.world, worker)}", daemon=True)
            t.start()
            self.threads.append(t)
        return found

    def _serve_worker(self, worker: int, requests) -> None:
        from . import checkpoint
        while True:
            item = requests.get()
            if item is None:
                for group in self.groups.values():
                    group.close(worker)
                return
            kind, message = item
            try:
                if kind == "run":
                    self._step(worker, message)
                elif kind == "fetch":
                    self._fetch(worker, message)
                else:
                    checkpoint.serve(self, worker, kind, message)
            except Exception as e:  # noqa: BLE001 - told to the worker, then raised here
                text = e.message if isinstance(e, Error) else f"{type(e).__name__}: {e}"
                print(f"{self.here}: {kind} for {task_of(self.world, worker)} failed: {text}",
                      file=sys.stderr)
                traceback.print_exc()
                if kind == "run":  # the worker waits for values
                    self.box.fail(worker, text)
                else:              # the worker waits for a reply
                    self._refuse(worker, text)
                self.failure = self.failure or e

    def _step(self, worker: int, message) -> None:
        ident = _meta(message, "id")
        part = self.parts.get((worker, ident))
        if part is None:
            raise DistributedError(f"{task_of(self.world, worker)} asked to run step "
                                   f"function {ident}, which it has not registered", op="serve")
        group, step = part.group, message.step
        what = f"step {step} of {task_of(self.world, worker)}"
        s = group.wait_turn(worker, what)
        args = PsStepArgs()
        args.transport = ToWorker(self.box, worker, step, s)
        args.accumulators = group
        args.contribution = replicas.Contribution(worker, s)
        for phase in (part.pull, part.serve, part.contribute):
            if phase is not None:
                phase(args)
        if part.apply is not None:
            group.commit(args.contribution, lambda g: part.apply(args))
        self.box.flush(what)

    def _fetch(self, worker: int, message) -> None:
        wanted = [name for field, name, _ in message.entries if field == "wanted"]
        for group in self.groups.values():
            group.wait_turn(worker, f"fetch for {task_of(self.world, worker)}")
        entries = []
        for name in wanted:
            holder = self.store.get(name)
            if holder is None:
                raise DistributedError(f"{task_of(self.world, worker)} fetches {name!r}, which "
                                       f"{self.here} does not hold", op="fetch")
            t = holder.grad if name.endswith(".grad") else holder
            entries.append(("value", name, np.asarray(t._data)))
        steps = [g.global_step for g in self.groups.values()]
        entries.append(("meta", GLOBAL_STEP, np.int64(max(steps, default=0))))
        self.box.post(worker, "reply", 0, entries, REPLY)


def _meta(message, name: str) -> int:
    for field, n, array in message.entries:
        if field == "meta" and n == name and array.shape == () and array.dtype == np.int64:
            return int(array)
    raise DistributedError(f"a {message.kind} message without its {name!r}", op="serve")


def serve() -> dict:
    """Run this process as a parameter server for captured steps, until every worker has
    closed (`rill.distributed.close()`); returns {step function: counts} (applied steps,
    contributions, dropped stale contributions, the global step).

    The workers send the parts of their steps placed here; this process runs no model code.
    """
    return GraphServer().run()


def rank_of(task: str) -> int:
    return task_rank(world(), task)


__all__ = ["serve", "GraphServer", "CONTROL"]
