"""The processes a job leaves behind, found and ended (Linux; elsewhere these do nothing).

A rank may start processes of its own (data-loading workers, a subprocess, a shell); when
the rank dies they are orphaned and, without a subreaper, reparented to PID 1 — where they
go on using the job's cores, memory and shared-memory segments after the job is over.
rill-launch and each rank's watcher (bootstrap.py) therefore mark themselves as child
subreapers (PR_SET_CHILD_SUBREAPER): an orphan of the job is reparented to the nearest of
them instead, which can find it among its descendants and end it.
"""
from __future__ import annotations

import os
import signal
import sys
import time

_LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


def _prctl(option: int, value: int) -> bool:
    if not _LINUX:
        return False
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphaned descendants of this process become its children, not PID 1's."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def parent_death_signal(sig: int):
    """A function for Popen's preexec_fn: the child gets `sig` when this process dies, even
    by SIGKILL (PR_SET_PDEATHSIG). The prctl is looked up here, before the fork."""
    if not _LINUX:
        return None
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def child():
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    return child


def _parents() -> dict:
    """{pid: parent pid} of every process this one can see."""
    out = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    out[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return out


def descendants(pid: int | None = None) -> list:
    """Every live process descended from pid (default: this one), parents first; zombies
    (dead, waiting to be reaped) are left out."""
    pid = os.getpid() if pid is None else pid
    parents = _parents()
    children: dict = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        if state_of(p) not in (b"Z", b"X", None):
            out.append(p)
        todo.extend(children.get(p, []))
    return out


def state_of(pid: int):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"
    return text if len(text) <= 60 else text[:57] + "..."


def reap() -> None:
    """Collect the exit status of this process's children that have ended (orphans of the
    job that were reparented here), so that none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_descendants(grace: float, keep=(), patience: float = 0.0) -> list:
    """End every process descended from this one (but those in `keep`) that is still there
    after `patience` seconds (processes on their way out, such as watchers writing their
    rank's end, are let go): SIGTERM, then SIGKILL to those still there after `grace`
    seconds (a stopped process is continued so that it can take the SIGTERM). Returns
    [(pid, command line)] of the processes it had to end."""
    if not _LINUX:
        return []
    deadline = time.monotonic() + patience
    while True:
        reap()
        found = [p for p in descendants() if p not in keep]
        if not found or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if not found:
        reap()
        return []
    named = [(p, command_line(p)) for p in found]
    for p in found:
        _signal(p, signal.SIGTERM)
        _signal(p, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap()
        if not [p for p in descendants() if p not in keep]:
            return named
        time.sleep(0.02)
    for _ in range(50):  # new ones may appear as their parents die: until none is left
        left = [p for p in descendants() if p not in keep]
        if not left:
            break
        for p in left:
            _signal(p, signal.SIGKILL)
        time.sleep(0.02)
        reap()
    reap()
    return named


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
