"""The status board: what each rank is doing, readable by every other rank.

When an exchange times out, the waiting rank must say which ranks did not arrive and what
each was last doing — which MPI cannot tell it (a rank stuck in its own computation answers
no message). So every rank writes, before each exchange, its slot of a small memory-mapped
file that rill-launch creates: how many collectives it has entered, the current operation,
and when. Writing is a store to memory (no system call), cheap enough for every exchange.
On one machine the file is in a temporary directory; on a cluster, point RILL_STATUS_FILE at
a shared filesystem.

A slot also says which process runs the rank and how that process ended. A process killed
by SIGKILL cannot say so itself, so bootstrap.py runs each rank's process as the child of a
small watcher that waits for it and writes the exit code, or the signal that killed it:
rill-launch then names the rank, its role and the signal when a job fails. The slot also
names the machine the process runs on, so that a reader on the same machine can look the
process up in /proc: a rank stopped by SIGSTOP answers nothing and ends nothing, and only its
process state ('T') tells it from a slow one; and, for people, that machine's host name.

A rank whose exchange is late probes the ranks it is waiting with (collectives.py); which of
them answered is on the board too, so that rill-launch can say which host stopped answering.
"""
from __future__ import annotations

import mmap
import os
import signal
import socket
import struct
import time
import zlib
from typing import NamedTuple

# collectives entered, operation code, wall time it entered the operation, and when it
# left it (0.0 while inside: waiting in an exchange, not in its own code)
ACTIVITY = struct.Struct("<qqdd")
_TIME = struct.Struct("<d")  # ACTIVITY's last field alone: when the rank left its exchange
# pid, ending code, exit code or signal, wall time of the end, the machine (HOST)
PROCESS = struct.Struct("<qqqdq")
# Why a rank failed, in its own words: its sys.exit("message"), or its exception's first line
# (UTF-8, NUL-padded), which rill-launch shows even where the rank's output was cut short.
WORDS = 2000
# The host name of the machine (socket.gethostname(), UTF-8, NUL-padded), for messages.
NAME = 64
# The ranks this rank probed in its last late exchange, and those that answered: two bit sets
# of PROBE_RANKS bits (ranks beyond are not recorded).
PROBE_RANKS = 1024
PROBES = 2 * PROBE_RANKS // 8
SLOT = ACTIVITY.size + PROCESS.size + NAME + PROBES + WORDS
_AT_NAME = ACTIVITY.size + PROCESS.size
_AT_PROBES = _AT_NAME + NAME
_AT_WORDS = _AT_PROBES + PROBES
# "finalize": in the job's final barrier, before MPI shutdown (world.py); "finished": past it
OPERATIONS = ("starting", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
              "barrier", "send", "recv", "pull", "push", "finished", "failed", "finalize")
# The operations that wait for other ranks (the others say where a rank is in its script).
EXCHANGES = frozenset(OPERATIONS) - {"starting", "finished", "failed", "finalize"}
# How a rank's process ended. "killed": by a signal it was sent; "stopped": by its watcher,
# because the job was being stopped (another rank had failed, or the user interrupted it).
ENDINGS = ("running", "exited", "killed", "stopped")


class Row(NamedTuple):
    """One rank as the board shows it."""
    collectives: int
    operation: str
    ago: float | None       # seconds since it entered `operation`
    pid: int                # its process (0: not started)
    ending: str             # one of ENDINGS
    code: int               # the exit code, or the signal's number
    ended_ago: float | None
    host: int = 0           # the machine its process runs on (HOST of the watcher)
    words: str = ""         # why it failed, in its own words (StatusBoard.say)
    left_ago: float | None = None  # seconds since it left `operation` (None: still in it)
    hostname: str = ""      # the host name of its machine ("": not written yet)
    probed: frozenset = frozenset()    # the ranks it probed in its last late exchange
    answered: frozenset = frozenset()  # those of them that answered

    def doing(self, role: str) -> str:
        """"still in it" (waiting in the exchange it entered), "out of it for 6.1 s: in its
        own code" (for a ps: its serve loop), or "" (not an exchange)."""
        if self.operation not in EXCHANGES:
            return ""
        if self.left_ago is None:
            return "still in it"
        where = "its serve loop" if role.startswith("ps") else "its own code"
        return f"out of it for {self.left_ago:.1f} s: in {where}"

    def outcome(self) -> str:
        """'running', 'exit 0', 'killed by SIGKILL', 'stopped (SIGINT)', 'not started'."""
        if self.ending == "exited":
            return f"exit {self.code}"
        if self.ending in ("killed", "stopped"):
            name = signal_name(self.code)
            return f"killed by {name}" if self.ending == "killed" else f"stopped ({name})"
        return "running" if self.pid else "not started"


def _host_id() -> int:
    """Where this process's pids mean something, as an int: the machine's name, its boot, and
    the pid namespace (two containers of one machine share a boot id, and with host
    networking a name, but not their pids)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().strip()
    except OSError:
        boot = b""
    try:
        boot += os.readlink("/proc/self/ns/pid").encode()
    except OSError:
        pass
    return (zlib.crc32(socket.gethostname().encode()) << 31) | zlib.crc32(boot) >> 1


HOST = _host_id()
HOSTNAME = socket.gethostname()


def _bits(ranks) -> bytes:
    value = sum(1 << r for r in ranks if 0 <= r < PROBE_RANKS)
    return value.to_bytes(PROBE_RANKS // 8, "little")


def _ranks(data: bytes) -> frozenset:
    value = int.from_bytes(data, "little")
    return frozenset(r for r in range(PROBE_RANKS) if value >> r & 1) if value else frozenset()


def process_state(row: Row) -> str | None:
    """"stopped" (state T: SIGSTOP, SIGTSTP...), "gone" (no process left, nor an exit status
    on the board) or None (running, ended with an account on the board, or on another
    machine, where this process cannot look)."""
    if row.ending != "running" or not row.pid or row.host != HOST:
        return None
    try:
        with open(f"/proc/{row.pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return "stopped" if state == b"T" else "gone" if state in (b"Z", b"X") else None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class StatusBoard:
    def __init__(self, path: str, size: int, rank: int | None = None):
        """rank None: a reader (rill-launch, a rank's watcher), which notes no operation."""
        self.rank, self.size = rank, size
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SLOT * size:
                os.ftruncate(fd, SLOT * size)
            self.map = mmap.mmap(fd, SLOT * size)
        finally:
            os.close(fd)
        self.collectives = 0
        self.failed = False
        if rank is not None:
            at = SLOT * rank + ACTIVITY.size
            struct.pack_into("<q", self.map, at, os.getpid())
            struct.pack_into("<q", self.map, at + PROCESS.size - 8, HOST)
            self._name(rank)
            self.note("starting", collective=False)

    def note(self, operation: str, collective: bool = True) -> int:
        """Say that this rank now enters `operation`; returns its collective count. After
        "failed" the slot keeps saying so (exit handlers would write "finished")."""
        if self.failed:
            return self.collectives
        self.failed = operation == "failed"
        if collective:
            self.collectives += 1
        ACTIVITY.pack_into(self.map, SLOT * self.rank, self.collectives,
                           OPERATIONS.index(operation), time.time(), 0.0)
        return self.collectives

    def left(self) -> None:
        """Say that this rank's exchange is over: it is back in its own code."""
        _TIME.pack_into(self.map, SLOT * self.rank + ACTIVITY.size - 8, time.time())

    def started(self, rank: int, pid: int) -> None:
        """The watcher: `pid` now runs `rank`."""
        PROCESS.pack_into(self.map, SLOT * rank + ACTIVITY.size, pid, 0, 0, 0.0, HOST)
        self._name(rank)

    def _name(self, rank: int) -> None:
        at = SLOT * rank + _AT_NAME
        data = HOSTNAME.encode("utf-8")[:NAME - 1]
        self.map[at:at + NAME] = data.ljust(NAME, b"\0")

    def heard(self, probed, answered) -> None:
        """This rank probed `probed` (ranks) in a late exchange, and `answered` answered."""
        at = SLOT * self.rank + _AT_PROBES
        self.map[at:at + PROBES] = _bits(probed) + _bits(answered)

    def ended(self, rank: int, ending: str, code: int) -> None:
        """How rank's process ended. The first account stands: a rank that reported its own
        failure keeps that report when its watcher then stops it."""
        at = SLOT * rank + ACTIVITY.size
        pid, current, _, _, host = PROCESS.unpack_from(self.map, at)
        if current == 0:
            PROCESS.pack_into(self.map, at, pid, ENDINGS.index(ending), code, time.time(), host)

    def say(self, rank: int, text: str) -> None:
        """The rank's last words: why it is failing (cut to WORDS bytes, with …)."""
        data = text.encode("utf-8")
        if len(data) >= WORDS:
            data = data[:WORDS - 4].decode("utf-8", "ignore").encode("utf-8") + "…".encode()
        at = SLOT * rank + _AT_WORDS
        self.map[at:at + WORDS] = data.ljust(WORDS, b"\0")

    def read(self) -> list:
        """[Row] per rank."""
        now = time.time()
        out = []
        for r in range(self.size):
            count, code, when, left = ACTIVITY.unpack_from(self.map, SLOT * r)
            pid, ending, value, ended, host = PROCESS.unpack_from(self.map,
                                                                  SLOT * r + ACTIVITY.size)
            at = SLOT * r
            words = bytes(self.map[at + _AT_WORDS:at + _AT_WORDS + WORDS]).split(b"\0", 1)[0]
            name = bytes(self.map[at + _AT_NAME:at + _AT_NAME + NAME]).split(b"\0", 1)[0]
            half = PROBES // 2
            probes = bytes(self.map[at + _AT_PROBES:at + _AT_PROBES + PROBES])
            out.append(Row(count, OPERATIONS[code] if 0 <= code < len(OPERATIONS) else "?",
                           now - when if when else None, pid,
                           ENDINGS[ending] if 0 <= ending < len(ENDINGS) else "running",
                           value, now - ended if ended else None, host,
                           words.decode("utf-8", "replace"), now - left if left else None,
                           name.decode("utf-8", "replace"), _ranks(probes[:half]),
                           _ranks(probes[half:])))
        return out
