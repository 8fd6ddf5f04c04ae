"""How a send hands a value to its recv: the one interface the per-device executors use.

`Transport` is all a partitioned step needs: `send(key, buffer, source, dest)`,
`recv(key, source, dest) -> buffer` (blocking, with a deadline), `abort(device, error)` (a
partition failed: wake every waiting recv), `finished(device)` (a partition ran to its end).
`Rendezvous` is the in-process implementation: a per-step table of one-shot slots, one per
key. Another implementation (processes over MPI) can run the same partitions unchanged;
nothing else knows which one runs.

A recv whose send never comes raises DistributedError when its deadline passes, naming the
key and the devices, and whether the sending device's partition had already finished (then
the send is missing from it) or is still running (then it is slower than the deadline).
"""
from __future__ import annotations

import os
import threading
import time

from ..errors import DistributedError

# Seconds a recv waits before it gives up (RILL_RECV_TIMEOUT overrides; a step that
# legitimately takes longer between a send and its recv needs a larger value).
RECV_TIMEOUT = float(os.environ.get("RILL_RECV_TIMEOUT", "60"))


class Transport:
    """What a send/recv pair needs of the step it runs in (see the module docstring)."""

    def send(self, key: str, buffer, source, dest) -> None:
        raise NotImplementedError

    def recv(self, key: str, source, dest):
        raise NotImplementedError

    def abort(self, device, error: BaseException) -> None:
        raise NotImplementedError

    def finished(self, device) -> None:
        pass


class Aborted(Exception):
    """A recv woken because another partition of the step failed (not the cause itself)."""


class _Slot:
    """One key's hand-over: `full` is held until the send (or an abort) releases it."""

    __slots__ = ("full", "buffer", "source", "released")

    def __init__(self):
        self.full = threading.Lock()
        self.full.acquire()
        self.buffer = self.source = None
        self.released = False


def move(buffer, source, dest):
    """A buffer of `source` as a buffer of `dest`: handed over as is between two devices
    of one kind that share memory (the cpus of one process), through the host otherwise."""
    if buffer is None or source.kind == dest.kind == "cpu":
        return buffer
    return dest.backend.from_host(source.backend.to_host(buffer), dest)


class Rendezvous(Transport):
    """The in-process transport of one step: a table of slots keyed by rendezvous key.

    `keys` (the graph's send keys, when known) makes their slots up front, so the step's
    sends and recvs find them without taking the table's lock; `reset()` readies the table
    for another step after a clean one, so a program reuses its slots instead of making a
    lock per pair per step (a step's hand-offs are on its critical path)."""

    def __init__(self, timeout: float | None = None, keys=()):
        self.timeout = RECV_TIMEOUT if timeout is None else timeout
        self.slots: dict = {key: _Slot() for key in keys}
        self.lock = threading.Lock()
        self.error = None        # (device, error) of the first partition that failed
        self.done: set = set()   # devices whose partition ran to its end

    def reset(self) -> bool:
        """Ready the table for another step; False (unusable) unless the last step ended
        cleanly, every send met by its recv (so each slot's lock is held again)."""
        if self.error is not None or not all(s.released and s.full.locked()
                                             for s in self.slots.values()):
            return False
        for slot in self.slots.values():
            slot.buffer = slot.source = None
            slot.released = False
        self.done.clear()
        return True

    def _slot(self, key: str) -> _Slot:
        slot = self.slots.get(key)  # made up front: no lock (dict reads are atomic)
        if slot is not None:
            return slot
        with self.lock:
            slot = self.slots.get(key)
            if slot is None:
                slot = self.slots[key] = _Slot()
                if self.error is not None:  # the step failed: a later recv must not wait
                    slot.released = True
                    slot.full.release()
            return slot

    def _release(self, slot: _Slot) -> None:
        with self.lock:
            if slot.released:
                return
            slot.released = True
        slot.full.release()

    def send(self, key, buffer, source, dest) -> None:
        slot = self._slot(key)
        slot.buffer, slot.source = buffer, source
        self._release(slot)

    def recv(self, key, source, dest):
        slot = self._slot(key)
        if not slot.full.acquire(timeout=self.timeout):
            with self.lock:
                finished = source in self.done
            state = ("its partition finished without sending it (the graph has no send for "
                     "this key)" if finished else
                     "its partition is still running: raise RILL_RECV_TIMEOUT if a step "
                     "legitimately takes longer")
            raise DistributedError(f"recv of {key!r} on {dest} got nothing from {source} "
                                   f"within {self.timeout:g} s: {state}", op="recv")
        if self.error is not None and slot.source is None:
            raise Aborted(f"partition on {self.error[0]} failed")
        return move(slot.buffer, slot.source, dest)

    def abort(self, device, error) -> None:
        with self.lock:
            if self.error is None:
                self.error = (device, error)
            slots = list(self.slots.values())
        for slot in slots:  # woken with no source: a waiting recv raises Aborted
            self._release(slot)

    def finished(self, device) -> None:
        with self.lock:
            self.done.add(device)


def now() -> float:
    return time.perf_counter()
