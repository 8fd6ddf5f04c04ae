"""rill-launch stopping its job when it is asked to stop (SIGTERM, SIGINT, SIGHUP).

A scheduler ends a job by signalling the process it started (Slurm, PBS and Kubernetes send
SIGTERM, then SIGKILL after a grace period); a user presses Ctrl-C (SIGINT) or closes the
terminal (SIGHUP). rill-launch runs the process manager in a session of its own, so that
only rill-launch receives these (a terminal's Ctrl-C reaches its foreground process group,
not the job), and stops the whole job itself:

1. it sends SIGTERM to the process manager (mpiexec or srun), which passes it to every rank's
   watcher; each watcher stops its rank (SIGTERM; SIGKILL after 5 s) and then the processes
   the rank started (bootstrap.py);
2. whatever of the job is still there KILL_AFTER_S seconds later — or at once, at a second
   signal (Ctrl-C twice) — is killed (SIGKILL), rill-launch's descendants all;
3. the job's MPICH shared-memory segments are removed, and rill-launch says for each rank
   who stopped it and why, then exits with 128 + the signal's number, as a shell would.

If rill-launch itself is killed (SIGKILL, which no process can catch), the process manager
gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and the job still stops; only its shared
memory is then left for the next rill-launch of a job of the same name to clear.
"""
from __future__ import annotations

import signal
import threading
import time

from .process_tree import descendants

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long the ranks get to stop after the first signal before everything left is killed:
# a watcher gives its rank 5 s after SIGTERM, then 1 s to the processes the rank started.
KILL_AFTER_S = 10.0


class JobStop:
    """The signal handlers of rill-launch, and what they did: `received` is the first stop
    signal (None while nobody asked), `killed` whether the job had to be killed."""

    def __init__(self, console):
        self.console = console
        self.received: int | None = None
        self.at = 0.0             # when (wall time)
        self.killed = False
        self.proc = None          # the running process manager
        self.timer: threading.Timer | None = None
        self.previous: dict = {}

    def install(self) -> "JobStop":
        for s in STOP_SIGNALS:
            self.previous[s] = signal.signal(s, self._handle)
        return self

    def restore(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received else ""

    def attach(self, proc) -> None:
        """The process manager just started; stop it at once if a signal came first."""
        self.proc = proc
        if self.received is not None:
            self._terminate()

    def detach(self) -> None:
        self.proc = None

    def _handle(self, signum, frame) -> None:
        # Runs in the main thread between two bytecodes (a wait it interrupts resumes after).
        if self.received is None:
            self.received, self.at = signum, time.time()
            self._terminate()
            self._say(f"rill-launch: {signal.Signals(signum).name} received: stopping the "
                      f"job (SIGTERM to every rank; SIGKILL to what is left after "
                      f"{KILL_AFTER_S:g} s or at a second signal)")
        else:
            self._say(f"rill-launch: {signal.Signals(signum).name} received again: killing "
                      "the job now")
            self._kill()

    def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.terminate()  # mpiexec and srun pass SIGTERM on to every rank's watcher
        except ProcessLookupError:
            pass
        if self.timer is None:
            self.timer = threading.Timer(KILL_AFTER_S, self._kill)
            self.timer.daemon = True
            self.timer.start()

    def _kill(self) -> None:
        """SIGKILL to every process of the job still there (rill-launch's descendants: the
        process manager, the watchers, the ranks, and orphans of the job reparented here)."""
        import os
        left = descendants()
        if left:
            self.killed = True
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc = self.proc
        if proc is not None and proc.poll() is None:  # srun's tasks are Slurm's to end
            try:
                proc.kill()
            except ProcessLookupError:
                pass

    def _say(self, text: str) -> None:
        # Not from the handler itself: it may have interrupted the console mid-write.
        threading.Thread(target=self.console.print, args=(text,),
                         kwargs=dict(markup=False, highlight=False, soft_wrap=True),
                         daemon=True).start()
