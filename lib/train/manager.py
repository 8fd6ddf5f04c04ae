"""CheckpointManager: numbered checkpoints in a directory, written on a schedule.

Files are `ckpt-<step>.rill`, written atomically (see rill.serialization), so a directory
only ever holds complete checkpoints and the temp files of interrupted writes, whose names
(`.ckpt-<step>.rill.<pid>.<random>.tmp`) never match; the manager ignores them and, when it
starts, removes those whose writing process is gone.

With `background=True` the state is taken on the caller's thread (cheap: tensors are
immutable, so holding references is a snapshot) and written by one writer thread while
training goes on. At most one write is in flight: a save while one is running waits for it,
which bounds the memory held by snapshots to one extra copy of the state.
"""
from __future__ import annotations

import os
import re
import sys
import time
import weakref
import warnings
from concurrent.futures import ThreadPoolExecutor

from ..errors import ArgumentError, CheckpointError, check_number
from ..serialization import TEMP_SUFFIX
from .checkpoint import Checkpoint, read

_NAME = re.compile(r"^ckpt-(\d+)\.rill$")
# A distributed checkpoint's shards (lib/distributed/graphs/checkpoint.py), by step.
_SHARD = re.compile(r"^shard-[a-z]+\d+\.ckpt-(\d+)\.[0-9a-f]{8}\.rill$")
_TEMP = re.compile(r"^\.ckpt-\d+\.rill\.(\d+)\..*" + re.escape(TEMP_SUFFIX) + "$")


class CheckpointManager:
    """Save `checkpoint` as `directory/ckpt-<step>.rill`, keeping the newest `max_to_keep`.

    `maybe_save(step)` saves when `every_n_steps` steps or `every_seconds` seconds (by
    `clock`) have passed since the last save. `restore_latest()` loads the newest checkpoint;
    if that file is damaged it raises, unless `fallback=True`, which warns and tries the
    next older one.

    >>> import os, tempfile
    >>> from rill.train import Checkpoint, CheckpointManager
    >>> ckpt = Checkpoint(w=rill.zeros(3))
    >>> manager = CheckpointManager(ckpt, tempfile.mkdtemp(), max_to_keep=2, every_n_steps=10)
    >>> for step in range(1, 41):
    ...     ckpt.w = ckpt.w + 1
    ...     _ = manager.maybe_save(step)
    >>> [os.path.basename(p) for p in manager.checkpoints]
    ['ckpt-30.rill', 'ckpt-40.rill']
    >>> manager.restore_latest(), ckpt.w
    (40, tensor([40., 40., 40.]))
    """

    def __init__(self, checkpoint: Checkpoint, directory, max_to_keep: int | None = 5,
                 every_n_steps: int | None = None, every_seconds: float | None = None,
                 background: bool = False, clock=time.monotonic):
        if max_to_keep is not None:  # None keeps all
            check_number(max_to_keep, "max_to_keep", "CheckpointManager", integer=True, low=1)
        if every_n_steps is not None:
            check_number(every_n_steps, "every_n_steps", "CheckpointManager", integer=True,
                         low=1)
        if every_seconds is not None:
            check_number(every_seconds, "every_seconds", "CheckpointManager", low=0,
                         low_open=True)
        self.checkpoint = checkpoint
        self.directory = os.fspath(directory)
        self.max_to_keep = max_to_keep
        self.every_n_steps = every_n_steps
        self.every_seconds = every_seconds
        self.background = background
        self.last_restore = None  # the RestoreReport of the last restore_latest()
        self._clock = clock
        self._last_time = clock()
        os.makedirs(self.directory, exist_ok=True)
        self._remove_stale_temp_files()
        self._last_step = self._steps()[-1] if self._steps() else None
        self._executor = None
        # The Future of the write in flight (its error is raised by wait()), in a list that
        # the exit hook shares without keeping the manager alive.
        self._inflight = [None]

    # ---- the files ---------------------------------------------------------------------------

    def path_for(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{int(step)}.rill")

    def _steps(self) -> list:
        steps = []
        for name in os.listdir(self.directory):
            m = _NAME.match(name)
            if m:
                steps.append(int(m.group(1)))
        return sorted(steps)

    @property
    def checkpoints(self) -> list:
        """Paths of the checkpoints on disk, oldest first (a save in flight is not listed)."""
        return [self.path_for(s) for s in self._steps()]

    @property
    def latest(self) -> str | None:
        """Path of the newest checkpoint on disk, or None."""
        steps = self._steps()
        return self.path_for(steps[-1]) if steps else None

    def _remove_stale_temp_files(self):
        for name in os.listdir(self.directory):
            m = _TEMP.match(name)
            # The writer's pid is in the name: a live writer's file is not stale.
            if m and not _alive(int(m.group(1))):
                try:
                    os.unlink(os.path.join(self.directory, name))
                except OSError:
                    pass

    def _prune(self):
        if self.max_to_keep is None:
            return
        for step in self._steps()[:-self.max_to_keep]:
            try:
                os.unlink(self.path_for(step))
            except FileNotFoundError:
                pass
        # Shards go with their manifest; those of a save that never wrote its manifest (the
        # job died first) go once no kept checkpoint has their step. Only the chief writes
        # here, after the save's own shards exist, so no save in flight loses any.
        kept = set(self._steps())
        for name in os.listdir(self.directory):
            m = _SHARD.match(name)
            if m and int(m.group(1)) not in kept:
                try:
                    os.unlink(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    # ---- saving ------------------------------------------------------------------------------

    def save(self, step: int) -> str:
        """Write the checkpoint for `step` now, or hand it to the writer thread.

        In the background, a failure of the previous write is raised here (and this save
        is not made).
        """
        self.wait()
        steps = self._steps()
        if steps and step < steps[-1]:
            # Files are kept and pruned by step; an older step saved now would be pruned at
            # once (or would prune the newer run's files). A restarted run must resume.
            raise CheckpointError(f"{self.directory} already holds ckpt-{steps[-1]}, newer than "
                                  f"step {step}: call restore_latest() to resume from it, or "
                                  f"use a fresh directory", op="CheckpointManager.save")
        path = self.path_for(step)
        snapshot = self.checkpoint.snapshot(path, step)  # on the caller's thread, always
        self._last_step, self._last_time = step, self._clock()
        if not self.background:
            self._write(snapshot, path)
            return path
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rill-ckpt")
            # A write still in flight when the interpreter exits must not fail unseen.
            weakref.finalize(self, _report_unfinished, self._executor, self._inflight)
        self._inflight[0] = self._executor.submit(self._write, snapshot, path)
        return path

    def _write(self, snapshot, path):
        Checkpoint.write(snapshot, path)
        self._prune()

    def due(self, step: int) -> bool:
        """Whether `maybe_save(step)` would save."""
        if self.every_n_steps is None and self.every_seconds is None:
            raise ArgumentError("maybe_save needs every_n_steps= or every_seconds= on the "
                                "CheckpointManager; call save(step) to save unconditionally",
                                op="CheckpointManager.maybe_save")
        if step == self._last_step:
            return False
        if self.every_n_steps is not None and \
                step - (self._last_step or 0) >= self.every_n_steps:
            return True
        return self.every_seconds is not None and \
            self._clock() - self._last_time >= self.every_seconds

    def maybe_save(self, step: int) -> str | None:
        """Save if due (by steps or by time); the path written, or None."""
        return self.save(step) if self.due(step) else None

    def wait(self) -> None:
        """Block until the write in flight is on disk; raise its error if it failed."""
        pending, self._inflight[0] = self._inflight[0], None
        error = pending.exception() if pending is not None else None
        # Raised anew so that the error points at the caller's line, not the writer thread.
        if isinstance(error, CheckpointError):
            raise CheckpointError(error.message, op=error.op) from error
        if error is not None:
            raise CheckpointError(f"a background checkpoint write failed: "
                                  f"{type(error).__name__}: {error}",
                                  op="CheckpointManager") from error

    def close(self) -> None:
        """Finish pending writes and stop the writer thread."""
        try:
            self.wait()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except CheckpointError as write_error:  # keep the body's error; mention the write's
            exc.add_note(f"also, a background checkpoint write failed: {write_error}")

    # ---- restoring ---------------------------------------------------------------------------

    def restore_latest(self, strict: bool = True, include=None, exclude=None,
                       fallback: bool = False) -> int | None:
        """Restore the newest checkpoint; the step it was saved at, or None if there is none.

        A damaged newest file raises CheckpointError, since silently resuming from an older
        step would redo work without saying so; `fallback=True` instead warns and tries
        older files. A checkpoint that does not match the objects always raises.
        """
        self.wait()
        steps = self._steps()
        for i, step in enumerate(reversed(steps)):
            path = self.path_for(step)
            try:
                saved = read(path)
            except CheckpointError as e:
                if not fallback or i == len(steps) - 1:
                    raise
                warnings.warn(f"skipping a damaged checkpoint: {e.message}", RuntimeWarning,
                              stacklevel=2)
                continue
            self.last_restore = self.checkpoint.apply(saved, path, strict=strict,
                                                      include=include, exclude=exclude)
            restored = saved["step"] if isinstance(saved["step"], int) else step
            self._last_step, self._last_time = restored, self._clock()
            return restored
        return None


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if not hasattr(os, "getpgid"):  # not POSIX: os.kill(pid, 0) would not be a probe
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, under another user
    return True


def _report_unfinished(executor, inflight) -> None:
    """At exit (or collection): wait for the last background write and say if it failed."""
    future = inflight[0]
    executor.shutdown(wait=True)
    error = future.exception() if future is not None else None
    if error is not None:
        print(f"rill: a background checkpoint write failed and was never reported: "
              f"{type(error).__name__}: {error}", file=sys.stderr)
