"""Values between the tasks of a job: one MPI message per value, matched by (sender, key, step).

Each process has one `Postbox`. A send posts wire.py's "tensor" message (a fixed header and
the value's raw bytes: nothing is pickled) as a non-blocking MPI send on the VALUE tag and
returns; `flush()` waits, with the job's deadline, until every posted send has completed.
A receiver asks for (sender rank, rendezvous key, step): whichever thread of the process
is waiting drains the arrived messages into a table (one thread at a time: MPI matching is
per process), so messages for other keys, steps or threads are kept until asked for.

Control messages (register, run, fetch, ..., on the CONTROL tag) and their answers (REPLY)
go through `post` and `wait_for`, with the same deadlines. A wait that runs past the job's
timeout raises DistributedError naming the task waited for, the key, and (under rill-launch)
what every rank was last doing; a task that fails sends an "error" message that wakes the
waits for it at once.
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

from ...errors import DistributedError
from .. import wire
from ..collectives import _yield, timeout_error
from ..world import World

CONTROL, REPLY, VALUE = 21, 22, 23  # MPI tags (the eager ParameterServer uses 11 and 12)
GLOBAL_STEP = "$global_step"        # the meta entry a ps's values carry


def task_rank(w: World, task: str) -> int:
    """The rank of a task ("ps:1" -> 1, "worker:0" -> the first worker's rank)."""
    job, _, number = task.partition(":")
    i = int(number)
    ranks = w.ps_ranks if job == "ps" else w.worker_ranks
    if not 0 <= i < len(ranks):
        raise DistributedError(f"task {task} does not exist in this job ({len(w.ps_ranks)} ps, "
                               f"{len(w.worker_ranks)} workers)", op="device")
    return ranks[i]


def task_of(w: World, rank: int) -> str:
    return f"ps:{rank}" if rank < w.num_ps else f"worker:{rank - w.num_ps}"


class Postbox:
    def __init__(self, w: World):
        self.world, self.comm = w, w.comm
        self.values: dict = {}       # (sender, key, step) -> array
        self.steps: dict = {}        # sender -> the latest global step it reported
        self.failed: dict = {}       # sender -> what it said failed
        self.replies: dict = {}      # sender -> [messages on REPLY]
        self.pending = deque()       # (request, buffer) of posted sends, oldest first
        self.probe = threading.Lock()
        self.sending = threading.Lock()
        self.sent_bytes = self.received_bytes = 0  # value bytes (payloads), for tests/benches

    # ---- sending -------------------------------------------------------------------------

    def post(self, dest: int, kind: str, step: int, entries, tag: int) -> None:
        from mpi4py import MPI
        self._note("send")
        buffer = wire.encode(kind, step, entries)
        with self.sending:
            self.pending.append((self.comm.Isend([buffer, MPI.BYTE], dest, tag), buffer))
            self._reap()
        if self.world.board is not None:  # posted, not waited for: back in its own code
            self.world.board.left()

    def send(self, dest: int, key: str, step: int, buffer, global_step: int | None = None):
        """Post `buffer` (a host array, or None for a go-ahead) as value `key` of `step`."""
        array = np.zeros(0, np.uint8) if buffer is None else np.asarray(buffer)
        entries = [("value", key, array)]
        if global_step is not None:
            entries.append(("meta", GLOBAL_STEP, np.int64(global_step)))
        self.sent_bytes += array.nbytes
        self.post(dest, "tensor", step, entries, VALUE)

    def _reap(self) -> None:
        """Let go of the sends that have completed, oldest first (they mostly complete in
        the order they were posted; a later one waits for the next reap)."""
        pending = self.pending
        while pending and pending[0][0].Test():
            pending.popleft()

    def flush(self, what: str = "send") -> None:
        """Wait until every posted send has completed (with the job's deadline)."""
        from mpi4py import MPI
        with self.sending:
            pending, self.pending = self.pending, deque()
        if pending:
            requests = [r for r, _ in pending]
            self._wait(lambda: MPI.Request.Testall(requests), what, None)

    # ---- receiving -----------------------------------------------------------------------

    def take(self, source: int, key: str, step: int, what: str):
        """The value `key` of `step` that rank `source` sends (waiting for it)."""
        want = (source, key, step)
        found = []
        self._note("recv")

        def arrived():
            if want in self.values:
                found.append(self.values.pop(want))
                return True
            if source in self.failed:
                raise DistributedError(f"{what}: {task_of(self.world, source)} failed: "
                                       f"{self.failed[source]}", op="recv")
            if self.probe.acquire(blocking=False):
                try:
                    self._drain()
                finally:
                    self.probe.release()
                if want in self.values:
                    found.append(self.values.pop(want))
                    return True
            return False

        self._wait(arrived, what, [source])
        return found[0]

    def wait_for(self, source: int, kinds, what: str) -> wire.Message:
        """The next message on the REPLY tag from `source` (one of `kinds`)."""
        from mpi4py import MPI
        status = MPI.Status()
        found = []
        self._note("recv")

        def arrived():
            msg = self.comm.Improbe(source, REPLY, status)
            if msg is None:
                return False
            found.append(self._read(msg, status))
            return True

        self._wait(arrived, what, [source])
        message = found[0]
        if message.kind == "error":
            text = error_text(message)
            raise DistributedError(f"{what}: {task_of(self.world, source)} refused: {text}",
                                   op="distributed")
        if message.kind not in kinds:
            raise DistributedError(f"{what}: {task_of(self.world, source)} answered with a "
                                   f"{message.kind} message", op="distributed")
        return message

    def poll_control(self):
        """(message, sender) of a CONTROL message that has arrived, or None (no waiting)."""
        from mpi4py import MPI
        status = MPI.Status()
        msg = self.comm.Improbe(MPI.ANY_SOURCE, CONTROL, status)
        if msg is None:
            return None
        return self._read(msg, status), status.Get_source()

    def collect(self) -> None:
        """Take in the values that have arrived, and let completed sends go."""
        with self.probe:
            self._drain()
        if self.pending:
            with self.sending:
                self._reap()

    def has_all(self, source: int, keys, step: int) -> bool:
        values = self.values
        return all((source, key, step) in values for key in keys)

    def discard(self, source: int, step: int) -> None:
        """Forget values of `source`'s `step` that nothing took (its go-aheads)."""
        for k in [k for k in self.values if k[0] == source and k[2] == step]:
            del self.values[k]

    def _read(self, msg, status) -> wire.Message:
        from mpi4py import MPI
        sender = status.Get_source()
        buffer = bytearray(status.Get_count(MPI.BYTE))
        try:
            msg.Recv([buffer, MPI.BYTE])
        except MPI.Exception as e:  # the sender's process went away while sending
            raise DistributedError(f"receiving a message from {task_of(self.world, sender)} "
                                   f"(rank {sender}) failed: {e.Get_error_string()}; did that "
                                   "task die?", op="recv") from None
        return wire.decode(buffer, f"rank {sender} ({task_of(self.world, sender)})")

    def _drain(self) -> None:
        """Move every arrived VALUE message into the table."""
        from mpi4py import MPI
        status = MPI.Status()
        while True:
            msg = self.comm.Improbe(MPI.ANY_SOURCE, VALUE, status)
            if msg is None:
                return
            sender = status.Get_source()
            message = self._read(msg, status)
            if message.kind == "error":
                self.failed[sender] = error_text(message)
                continue
            if message.kind != "tensor":
                raise DistributedError(f"rank {sender} sent a {message.kind} message where "
                                       "values travel; refused", op="recv")
            for field, name, array in message.entries:
                if field == "value":
                    self.received_bytes += array.nbytes
                    self.values[(sender, name, message.step)] = array
                elif name == GLOBAL_STEP and array.shape == () and array.dtype == np.int64:
                    self.steps[sender] = max(self.steps.get(sender, 0), int(array))

    def fail(self, dest: int, why: str) -> None:
        """Tell rank `dest` that this task failed (its waits for us end at once)."""
        self.post(dest, "error", 0, [("text", "error", np.frombuffer(
            why.encode("utf-8")[:60000], np.uint8))], VALUE)

    def _note(self, operation: str) -> None:
        """Say on the status board what this task last did (what a timeout elsewhere tells)."""
        if self.world.board is not None:
            self.world.board.note(operation, collective=False)

    def _wait(self, done, what: str, peers, deadline: float | None = None) -> None:
        start = time.monotonic()
        deadline = start + self.world.timeout if deadline is None else deadline
        pause = 2e-5
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise timeout_error(self.world, what, peers)
            if now - start < 2e-3:
                _yield()
            else:
                time.sleep(pause)
                pause = min(pause * 1.5, 1e-3)
        if self.world.board is not None:
            self.world.board.left()


def error_text(message) -> str:
    """What an "error" message says (its text entry; a sender's fault, not ours, if none)."""
    for field, _, array in message.entries:
        if field == "text" and array.dtype == np.uint8 and array.ndim == 1:
            return bytes(array).decode("utf-8", "replace")
    return "(an error message without its text)"


_POSTBOX: Postbox | None = None
_LOCK = threading.Lock()


def postbox(w: World) -> Postbox:
    """This process's postbox (made on first use)."""
    global _POSTBOX
    with _LOCK:
        if _POSTBOX is None:
            if w.comm is None:
                raise DistributedError("this graph places work on another task, but the "
                                       "process is not part of a distributed job: start it "
                                       "with rill-launch (or srun)", op="capture")
            _POSTBOX = Postbox(w)
            import atexit
            atexit.register(_POSTBOX.flush, "the last sends at exit")
        return _POSTBOX
