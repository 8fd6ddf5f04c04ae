"""How rill-launch starts a rank: label its output, then run the user's script as __main__.

Each line the rank prints, traceback included, becomes "worker1 | ..." written whole in
one call, so that lines of different ranks interleave but do not mix. (mpiexec forwards a
rank's output in chunks, so a line over ~1 KB may still reach the launcher in pieces with
another rank's lines between them: machine-read results belong in files.)

On Linux the process mpiexec starts becomes a watcher: it forks the rank's process, waits
for it, and writes on the status board how it ended — the exit code, or the signal that
killed it, which a process killed by SIGKILL cannot write itself. The watcher passes a
request to stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT: mpiexec stopping the job) on to the rank
as SIGTERM (SIGKILL at a second request, or after 5 s); the rank dies with its watcher, and
the watcher stops the rank if mpiexec dies. Processes the rank started and left running
(reparented to the watcher, a child subreaper) are ended when the rank ends (process_tree.py).

Under Hydra's mpiexec (over hosts: rill-launch sets RILL_WATCH_APART) the process mpiexec
starts is only a stand-in for the watcher, which it forks into a process group of its own:
when a host fails, the proxies on the other hosts SIGKILL the processes they started, and a
watcher killed so could not say how its rank ended, leaving the lost host's ranks looking
like everyone else's. With the stand-in killed instead, each surviving watcher stops its rank
and writes "stopped", and the ranks left without an account are those of the lost host.

A rank that fails says why on the board as well as in its output (its last words: the text
of `sys.exit("message")`, or its exception's first line), so that rill-launch can name the
reason even when the output was cut short by the job's end.
"""
from __future__ import annotations

import io
import os
import runpy
import signal
import sys

from .launch import role_of
from .status import StatusBoard

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class LabelledLines(io.TextIOBase):
    """A text stream that writes complete lines, each prefixed with a label."""

    def __init__(self, stream, label: str):
        self.stream, self.label, self.pending = stream, label, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            *lines, self.pending = self.pending.split("\n")
            self.stream.write("".join(f"{self.label} | {line}\n" for line in lines))
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def close_line(self) -> None:
        if self.pending:
            self.write("\n")


def watch(path: str, rank: int, size: int) -> None:
    """Fork; return in the child, which runs the rank. The parent waits for it, writes how it
    ended on the status board, and ends the same way (never returns)."""
    from .process_tree import become_subreaper
    launcher, parent = os.getppid(), os.getpid()
    become_subreaper()  # the rank's own processes come here when it dies (_end_leftovers)
    child = os.fork()
    if child == 0:
        _die_with(parent, signal.SIGKILL)
        return
    board = StatusBoard(path, size)
    board.started(rank, child)
    stops = []
    sent = set()  # the signals this watcher sent the rank

    def send(sig):
        sent.add(sig)
        _kill(child, sig)

    def stop(signum, frame):
        stops.append(signum)
        send(signal.SIGTERM if len(stops) == 1 else signal.SIGKILL)
        if len(stops) == 1:
            signal.alarm(5)

    signal.signal(signal.SIGALRM, lambda signum, frame: send(signal.SIGKILL))
    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    _die_with(launcher, signal.SIGHUP)  # mpiexec gone (even by SIGKILL): stop the rank
    _, status = os.waitpid(child, 0)  # handlers run in between; the wait resumes after them
    signal.alarm(0)
    late = os.WIFSIGNALED(status) and not stops and \
        os.WTERMSIG(status) in STOP_SIGNALS and _stop_follows(stops)
    for s in STOP_SIGNALS:  # from here on a stop request is only noted
        signal.signal(s, lambda signum, frame: stops.append(signum))
    if not os.WIFSIGNALED(status):
        code = os.waitstatus_to_exitcode(status)
        board.ended(rank, "exited", code)
        _end_leftovers()
        os._exit(code)
    killed_by = os.WTERMSIG(status)
    # Stopped: it died of a signal this watcher sent, or of a stop signal sent to the whole
    # job at once (srun signals every process of the step: the rank may die before its
    # watcher's own request arrives). A signal from elsewhere (a SIGKILL racing mpiexec's
    # stop request to the watcher, a user's kill of the rank alone) is what killed it.
    if stops and (killed_by in sent or late):
        board.ended(rank, "stopped", stops[0])
        _end_leftovers()
        os._exit(128 + stops[0])
    board.ended(rank, "killed", killed_by)
    _end_leftovers()
    # End as the rank did, so that mpiexec reports and handles it as before (no core file:
    # the rank has written its own if it was going to).
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    if killed_by not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(killed_by, signal.SIG_DFL)
    os.kill(os.getpid(), killed_by)
    os._exit(128 + killed_by)


def stand_in() -> None:
    """Fork; return in the child, the watcher-to-be, in a process group of its own. The
    parent passes stop requests (and its own launcher's death, as SIGHUP) on to it, waits
    for it, and ends as it ended (never returns)."""
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)
        return  # watch() makes this process die with its parent's death as a SIGHUP
    for s in STOP_SIGNALS:
        signal.signal(s, lambda signum, frame: _kill(child, signum))
    _die_with(os.getppid(), signal.SIGHUP)
    _, status = os.waitpid(child, 0)
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status))
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    killed_by = os.WTERMSIG(status)
    if killed_by not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(killed_by, signal.SIG_DFL)
    os.kill(os.getpid(), killed_by)
    os._exit(128 + killed_by)


# How long the processes a rank left behind get to end on SIGTERM before SIGKILL.
LEFTOVER_GRACE_S = 1.0


def _end_leftovers() -> None:
    """End the processes the rank started and left running (reparented to this watcher,
    its subreaper): they belong to the job, which is over for this rank."""
    from .process_tree import end_descendants
    end_descendants(LEFTOVER_GRACE_S)


# How long a watcher whose rank died of a stop signal it did not send waits for a stop
# request of its own before calling the death a kill.
STOP_GRACE_S = 1.0


def _stop_follows(stops: list) -> bool:
    """Wait up to STOP_GRACE_S for a stop request to this watcher, noting it in `stops` (and
    sending nothing: the rank is gone, and its pid may be another process's by now)."""
    import time
    for s in STOP_SIGNALS:
        signal.signal(s, lambda signum, frame: stops.append(signum))
    deadline = time.monotonic() + STOP_GRACE_S
    while not stops and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(stops)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _die_with(parent: int, sig: int) -> None:
    """Get `sig` when `parent` dies (Linux's PR_SET_PDEATHSIG): the rank's process dies with
    its watcher, and the watcher stops the rank when mpiexec is gone."""
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it was gone before that took effect
        os.kill(os.getpid(), sig)


# How long a failing rank waits for mpiexec to read what it printed before it aborts the job.
DRAIN_S = 3.0


def _let_output_drain() -> None:
    """Wait (at most DRAIN_S) until mpiexec has read what this rank wrote to its stdout and
    stderr pipes. MPI's Abort makes mpiexec end the job at once, and what it had not read yet
    is lost: a failing rank's traceback used to be cut off mid-line, its message with it."""
    import fcntl
    import stat
    import struct
    import termios
    import time
    deadline = time.monotonic() + DRAIN_S
    for fd in (1, 2):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue  # a terminal answers FIONREAD with what was typed, not written
        except OSError:
            continue
        while time.monotonic() < deadline:
            try:  # bytes still in the pipe (Linux answers FIONREAD on either end)
                waiting = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
            except OSError:
                break  # not a pipe, or closed: nothing to wait for
            if not waiting:
                break
            time.sleep(0.01)


def _first_line(e: BaseException) -> str:
    """"ValueError: the first line of its message", as a traceback ends."""
    import traceback
    text = "".join(traceback.format_exception_only(type(e), e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


def main() -> None:
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    size = int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    num_ps = int(os.environ.get("RILL_NUM_PS", "0"))
    board_path = os.environ.get("RILL_STATUS_FILE")
    if board_path and sys.platform.startswith("linux"):
        if os.environ.get("RILL_WATCH_APART"):
            stand_in()
        watch(board_path, rank, size)
    width = max(len(role_of(r, num_ps)) for r in range(size))
    label = role_of(rank, num_ps).ljust(width)
    streams = [LabelledLines(sys.stdout, label), LabelledLines(sys.stderr, label)]
    sys.stdout, sys.stderr = streams
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code, words = 0, ""
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            words = str(e.code)  # Python prints it on the way out; it is ours to print now
            print(words, file=sys.stderr)
    except BaseException as e:  # noqa: BLE001 - reported here, then the whole job is stopped
        sys.excepthook(*sys.exc_info())  # rill hides its own frames there
        code, words = 1, _first_line(e)
    for s in streams:
        s.close_line()
    if code and board_path:
        StatusBoard(board_path, size).say(rank, words)
    if code:
        # One failed rank fails the job: the others may be waiting for it in an exchange,
        # so MPI stops them all now (rill-launch may then start the job again).
        from .world import joined
        if joined() is not None and joined().board is not None:
            joined().board.note("failed", collective=False)
        if board_path:
            StatusBoard(board_path, size).ended(rank, "exited", code)
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            _let_output_drain()  # the traceback must reach the launcher before Abort
            mpi.COMM_WORLD.Abort(code)
        sys.exit(code)


if __name__ == "__main__":
    main()
