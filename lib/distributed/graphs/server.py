"""A parameter server for captured graphs: `rill.distributed.serve()`.

A ps task holds variables and runs the parts of workers' steps placed on it; it runs no
model code. The loop answers control messages until every worker has closed:

    register  a worker's part (registration.py), checked like any loaded graph, cut into
              pull / contribute / apply (replicas.py), its variables made on first sight
    run       a step of a registered part: its phases run as its values arrive
    fetch     the current values of variables (after the worker's earlier steps)
    save / restore  this task's variables to / from its shard of a checkpoint
    close     the worker is done

One thread serves every worker, as an event loop (GraphServer.run): a request never waits
inside a program; each phase of a step runs once the values it needs have arrived, so the
steps of several workers interleave, and updates apply one step at a time.
"""
from __future__ import annotations

import sys
import time
import traceback
from collections import deque

import numpy as np

from ...capture.executor import Program
from ...capture.transport import Transport
from ...errors import DistributedError, Error
from ..world import world
from . import registration, replicas
from ..collectives import _yield
from .postbox import GLOBAL_STEP, REPLY, postbox, task_of


class Registered:
    """One worker's registered part: its three programs and the replicas it belongs to."""

    def __init__(self, graph, group, mode: str):
        pull, serve, contribute, apply = replicas.split(graph, mode)
        self.graph, self.group = graph, group
        self.parts = {"pull": pull, "serve": serve, "contribute": contribute, "apply": apply}
        for kind, g in self.parts.items():
            setattr(self, kind, Program(g.lint(), parallel=False) if g.nodes else None)
        # the serve phase in independent rounds, each run once its own values are here
        self.rounds = [(Program(g.lint(), parallel=False),
                        [n.attrs["key"] for n in g.nodes if n.op == "recv"])
                       for g in replicas.rounds(serve)]
        self.names = sorted(n.attrs["name"] for g in (serve, contribute) for n in g.nodes
                            if n.op == "accumulate")
        # the worker's values each phase needs before it runs (keys of its recvs)
        self.waits_for = {kind: [n.attrs["key"] for n in g.nodes if n.op == "recv"]
                          for kind, g in self.parts.items()}


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


class StepRun:
    """A worker's "run" request in progress: which phase it is in, and its step args."""

    def __init__(self, part, step: int, global_step: int, args):
        self.part, self.step, self.global_step, self.args = part, step, global_step, args
        self.phase = 0  # index into PHASES
        self.served: set = set()  # the serve rounds run so far


PHASES = ("pull", "serve", "contribute")


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
        self.requests = {r: deque() for r in w.worker_ranks}  # each worker's, in order
        self.running: dict = {}     # worker rank -> its StepRun
        self.since: dict = {}       # worker rank -> when its first request began to wait
        self.leaving: dict = {}     # worker rank -> when it was first seen gone or stopped
        self.looked = 0.0           # when the board was last read for workers that left
        self.failure = None

    def run(self) -> dict:
        """Serve until every worker has closed; returns the counts per step function (by
        the name its capture gave it).

        One thread does everything, as an event loop: it takes control messages and values
        as they arrive, and moves each worker's oldest request on as far as what has
        arrived allows (a step's pull once the barrier lets it, its serve and contribute
        phases once the worker's values for them are here, then the update). No request
        waits inside a program, so no thread hands work to another, and a ps with several
        workers polls MPI from one thread only."""
        open_workers = set(self.world.worker_ranks)
        start = time.monotonic()
        pause = 0.0
        while open_workers or any(self.requests.values()):
            moved = self._take_control(open_workers)
            self.box.collect()
            self._check_left(open_workers)
            for worker in self.world.worker_ranks:
                while self.requests[worker] and self._advance(worker):
                    moved = True
            if moved:
                pause, start = 0.0, time.monotonic()
            elif time.monotonic() - start < 2e-3:
                _yield()  # most exchanges end within a few milliseconds
            else:  # then idle, so that a ps waiting for slow workers leaves them the cores
                pause = min(max(pause * 1.5, 2e-5), 1e-3)
                time.sleep(pause)
        self.box.flush("the last replies")
        if self.failure is not None:
            raise self.failure
        counts = {}
        for ident, g in self.groups.items():
            name = g.name if g.name not in counts else f"{g.name}#{ident:x}"
            counts[name] = dict(g.stats, global_step=g.global_step)
        return counts

    def _take_control(self, open_workers) -> bool:
        """Queue each control message that has arrived (a registration is answered now)."""
        moved = False
        while True:
            found = self.box.poll_control()
            if found is None:
                return moved
            message, sender = found
            moved = True
            kind = message.kind
            if kind == "register":
                self._register(message, sender)
            elif kind in ("run", "fetch", "save", "restore", "close"):
                self.requests[sender].append((kind, message))
                if kind == "close":
                    open_workers.discard(sender)
            else:
                raise DistributedError(f"a {kind} message from {task_of(self.world, sender)} "
                                       "on the control channel; refused", op="serve")

    def _check_left(self, open_workers) -> None:
        """Raise DistributedError naming a worker that will never close: it said at exit
        that it had not (program.py), or, under rill-launch (about every 0.2 s), the status
        board shows it in MPI shutdown or its process ended or gone for longer than a grace
        for its close to arrive, or its process stopped (SIGSTOP) for longer than the job's
        timeout. Without this, serve() would wait for its close() forever."""
        for worker in sorted(open_workers):
            why = self.box.failed.get(worker)
            if why is not None:
                raise self._left(worker, f"it said so at exit: {why}")
        now = time.monotonic()
        board = self.world.board
        if board is None or now - self.looked < 0.2 or not open_workers:
            return
        from ..collectives import describe
        from ..status import process_state
        self.looked = now
        rows = board.read()
        for worker in sorted(open_workers):
            row = rows[worker]
            state = process_state(row)
            if state is None and row.ending == "running" and \
                    row.operation not in ("finalize", "finished"):
                self.leaving.pop(worker, None)
                continue
            waited = now - self.leaving.setdefault(worker, now)
            # a close() sent just before the process ended may still be on its way
            limit = self.world.timeout if state == "stopped" else min(2.0, self.world.timeout)
            if waited > limit:
                raise self._left(worker, describe(self.world, worker, row))

    def _left(self, worker: int, why: str) -> DistributedError:
        return DistributedError(
            f"serve() on {self.here} waits for every worker to close, but "
            f"{task_of(self.world, worker)} (rank {worker}) will not: {why}. Each worker "
            "calls rill.distributed.close() when it is done", op="serve")

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
                    part.names)
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

    # ---- each worker's requests, in order -----------------------------------------------

    def _advance(self, worker: int) -> bool:
        """Move the worker's oldest request on; True if it finished (the next may start)."""
        kind, message = self.requests[worker][0]
        try:
            if kind == "run":
                done = self._step(worker, message)
            elif kind == "close":
                for group in self.groups.values():
                    group.close(worker)
                done = True
            elif not all(g.ready(worker) for g in self.groups.values()):
                done = False  # a fetch or checkpoint waits for the worker's earlier steps
            elif kind == "fetch":
                self._fetch(worker, message)
                done = True
            else:
                from . import checkpoint
                checkpoint.serve(self, worker, kind, message)
                done = True
        except Exception as e:  # noqa: BLE001 - told to the worker, then raised here
            self._failed(worker, kind, e)
            done = True
        if done:
            self.requests[worker].popleft()
            self.running.pop(worker, None)
            self.since.pop(worker, None)
            return True
        # The worker's own deadline (the job's timeout) tells the user which value it was
        # waiting for; this guard, twice as long, only keeps a ps from holding a request
        # whose worker is gone.
        waited = time.monotonic() - self.since.setdefault(worker, time.monotonic())
        if waited > 2 * self.world.timeout:
            self.requests[worker].popleft()
            self.running.pop(worker, None)
            self.since.pop(worker, None)
            self._failed(worker, kind, DistributedError(
                f"{kind} for {task_of(self.world, worker)} on {self.here} waited "
                f"{2 * self.world.timeout:g} s: {self._waiting_for(worker, kind)}",
                op="serve"))
        return False

    def _step(self, worker: int, message) -> bool:
        """Run the parts of a step whose inputs are here; True once the step is done."""
        run = self.running.get(worker)
        if run is None:
            ident = _meta(message, "id")
            part = self.parts.get((worker, ident))
            if part is None:
                raise DistributedError(f"{task_of(self.world, worker)} asked to run step "
                                       f"function {ident}, which it has not registered",
                                       op="serve")
            if not part.group.ready(worker):
                return False  # sync: its last contribution is not applied yet
            args = PsStepArgs()
            s = part.group.global_step
            args.transport = ToWorker(self.box, worker, message.step, s)
            args.accumulators = part.group
            args.contribution = replicas.Contribution(worker, s)
            run = self.running[worker] = StepRun(part, message.step, s, args)
        while run.phase < len(PHASES):
            phase = PHASES[run.phase]
            if phase == "serve":
                if not self._serve(worker, run):
                    return False
            else:
                if not self.box.has_all(worker, run.part.waits_for[phase], run.step):
                    return False
                program = getattr(run.part, phase)
                if program is not None:
                    program(run.args)
            run.phase += 1
        if run.part.apply is not None:
            run.part.group.commit(run.args.contribution, lambda g: run.part.apply(run.args))
        self.box.discard(worker, run.step)  # go-aheads nobody waits for
        return True

    def _serve(self, worker: int, run) -> bool:
        """Run each serve round whose values have arrived, in whatever order they come;
        True once every round has run."""
        for i, (program, keys) in enumerate(run.part.rounds):
            if i not in run.served and self.box.has_all(worker, keys, run.step):
                program(run.args)
                run.served.add(i)
        return len(run.served) == len(run.part.rounds)

    def _waiting_for(self, worker: int, kind: str) -> str:
        run = self.running.get(worker)
        if run is None:
            return ("the worker's earlier steps to be applied (a step still lacks "
                    "contributions from other workers)")
        phase = PHASES[run.phase]
        missing = [k for k in run.part.waits_for[phase]
                   if (worker, k, run.step) not in self.box.values]
        return f"the worker's values {missing[:3]} of step {run.step} ({phase})"

    def _failed(self, worker: int, kind: str, e: Exception) -> None:
        text = e.message if isinstance(e, Error) else f"{type(e).__name__}: {e}"
        print(f"{self.here}: {kind} for {task_of(self.world, worker)} failed: {text}",
              file=sys.stderr)
        if not isinstance(e, Error):
            traceback.print_exc()
        if kind == "run":  # the worker waits for values
            self.box.fail(worker, text)
        else:              # the worker waits for a reply
            self._refuse(worker, text)
        self.failure = self.failure or e

    def _fetch(self, worker: int, message) -> None:
        wanted = [name for field, name, _ in message.entries if field == "wanted"]
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
    from ..roles import ps_only, served
    ps_only(world(), "serve")
    served(world())
    return GraphServer().run()


__all__ = ["serve", "GraphServer"]
