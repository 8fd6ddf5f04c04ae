"""The status board: what each rank is doing, readable by every other rank.

When an exchange times out, the waiting rank must say which ranks did not arrive and what
each was last doing — which MPI cannot tell it (a rank stuck in its own computation answers
no message). So every rank writes, before each exchange, its slot of a small memory-mapped
file that rill-launch creates: how many collectives it has entered, the current operation,
and when. Writing is a store to memory (no system call), cheap enough for every exchange.
On one machine the file is in a temporary directory; on a cluster, point RILL_STATUS_FILE at
a shared filesystem.
"""
from __future__ import annotations

import mmap
import os
import struct
import time

SLOT = struct.Struct("<qqd")  # collectives entered, operation code, wall time
OPERATIONS = ("starting", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
              "barrier", "send", "recv", "pull", "push", "finished", "failed")


class StatusBoard:
    def __init__(self, path: str, size: int, rank: int | None = None):
        """rank None: a reader (rill-launch), which writes no slot."""
        self.rank, self.size = rank, size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOT.size * size:
                os.ftruncate(fd, SLOT.size * size)
            self.map = mmap.mmap(fd, SLOT.size * size)
        finally:
            os.close(fd)
        self.collectives = 0
        self.failed = False
        if rank is not None:
            self.note("starting", collective=False)

    def note(self, operation: str, collective: bool = True) -> int:
        """Say that this rank now enters `operation`; returns its collective count. After
        "failed" the slot keeps saying so (exit handlers would write "finished")."""
        if self.failed:
            return self.collectives
        self.failed = operation == "failed"
        if collective:
            self.collectives += 1
        SLOT.pack_into(self.map, SLOT.size * self.rank, self.collectives,
                       OPERATIONS.index(operation), time.time())
        return self.collectives

    def read(self) -> list:
        """[(collectives entered, operation, seconds ago)] per rank."""
        now = time.time()
        out = []
        for r in range(self.size):
            count, code, when = SLOT.unpack_from(self.map, SLOT.size * r)
            out.append((count, OPERATIONS[code] if 0 <= code < len(OPERATIONS) else "?",
                        now - when if when else None))
        return out
