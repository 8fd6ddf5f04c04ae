"""Errors a user can cause, and where in the user's code they were caused.

Every such error is a `rill.Error`. Its message names the op, what was expected and what was
given, and the user's file and line. Framework frames are dropped from printed tracebacks
unless the environment sets RILL_TRACEBACK=full.
"""
from __future__ import annotations

import os
import sys
import types


class Error(Exception):
    """Base class of every error a user of rill can cause.

    >>> import rill
    >>> try:
    ...     rill.ones((2, 3)) + rill.ones((4,))
    ... except rill.ShapeError as e:
    ...     print(e.op)
    add
    """

    def __init__(self, message: str, *, op: str | None = None):
        super().__init__(message)
        self.message = message
        self.op = op
        self.location = user_location()

    def __str__(self) -> str:
        text = f"{self.op}: {self.message}" if self.op else self.message
        if self.location:
            text += f"  [at {self.location}]"
        return text


class ShapeError(Error, ValueError):
    """Shapes that do not fit the op: broadcasting, axes, sizes."""


class DTypeError(Error, TypeError):
    """A dtype the op does not accept, or a cast that would lose the value's kind."""


class DeviceError(Error):
    """Mixed devices, or a device that is not available."""


class IndexingError(Error, IndexError):
    """An index out of range or of an unsupported kind."""


class ArgumentError(Error, ValueError):
    """An attribute of an op with a bad value (a mode, a count, ...)."""


class GradientError(Error):
    """A gradient that cannot be computed as asked."""


class CheckpointError(Error):
    """A checkpoint or saved file that is missing, truncated, corrupted, or does not match."""


class DistributedError(Error):
    """A distributed exchange failed or timed out: the message names the ranks that did not
    arrive and what each was last doing."""


class DataError(Error):
    """An input pipeline failed: a worker raised, a queue was closed or timed out."""


class CaptureError(Error):
    """Code that cannot be captured as written (Python control flow on a graph value, a
    graph value that escaped its capture), or a node of a captured graph that failed."""


class PlacementError(CaptureError):
    """A device constraint of a captured graph that cannot be met: an op pinned to a device
    that has no kernel for it, or things colocated that are pinned to different devices.
    `node` is the node at fault; the location is the user's line that recorded it."""


class KernelError(Error):
    """A kernel failed on values its shape/dtype rule could not check (e.g. int ** -1)."""


class OutOfMemoryError(KernelError, MemoryError):
    """A kernel could not allocate its result: the message names the op and the bytes. Also
    a MemoryError, so code that catches that keeps working."""


class DifferenceWarning(UserWarning):
    """A call whose meaning in rill differs from PyTorch's, said once where it happens."""


def reports_as(op: str):
    """Decorator for public functions built from other ops: errors name `op`, the function
    the user called, and keep the inner op in parentheses when it differs."""
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Error as e:
                if e.op is None:
                    e.op = op
                elif not e.op.startswith(op):
                    e.op = f"{op} ({e.op})"
                raise
        return run
    return wrap


# ---- where the user is ---------------------------------------------------------------------

_framework_roots: tuple[str, ...] | None = None


def _roots() -> tuple[str, ...]:
    # lib/ and kernels/ may be installed apart (editable installs keep both source folders).
    global _framework_roots
    if _framework_roots is None:
        here = os.path.dirname(os.path.abspath(__file__))
        roots = {here + os.sep}
        kernels = sys.modules.get("rill.kernels")
        if kernels is not None and getattr(kernels, "__file__", None):
            roots.add(os.path.dirname(os.path.abspath(kernels.__file__)) + os.sep)
        import contextlib  # `with rill.no_grad():` frames are not the user's either
        roots.add(os.path.abspath(contextlib.__file__))
        _framework_roots = tuple(roots)
    return _framework_roots


def is_framework_file(filename: str) -> bool:
    filename = os.path.abspath(filename)
    return filename.startswith(_roots())


def user_stacklevel() -> int:
    """warnings.warn's stacklevel for the innermost frame outside rill (the user's line), as
    seen from the caller of this function."""
    frame, level = sys._getframe(2), 2
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def user_location() -> str | None:
    """'file:line' of the innermost frame outside rill, or None if there is none."""
    frame = sys._getframe(1)
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


# ---- tracebacks without framework frames ---------------------------------------------------

def strip_framework_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The same traceback with rill's own frames removed (the user's frames stay)."""
    kept = []
    while tb is not None:
        if not is_framework_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    new = None
    for entry in reversed(kept):
        new = types.TracebackType(new, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return new


def _want_full_traceback() -> bool:
    return os.environ.get("RILL_TRACEBACK", "").lower() == "full"


def install_traceback_filter() -> None:
    """Hide rill frames when a rill.Error reaches the top level (terminal and IPython)."""
    previous = sys.excepthook
    if getattr(previous, "_rill", False):
        return

    def hook(etype, value, tb):
        if isinstance(value, Error) and not _want_full_traceback():
            tb = strip_framework_frames(tb) or tb
            value = value.with_traceback(tb)  # the default hook prints value.__traceback__
        previous(etype, value, tb)

    hook._rill = True
    sys.excepthook = hook

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is not None:
        def show(self, etype, value, tb, tb_offset=None):
            if not _want_full_traceback():
                tb = strip_framework_frames(tb) or tb
            self.showtraceback((etype, value, tb), tb_offset=tb_offset)
        shell.set_custom_exc((Error,), show)


def check_number(value, what: str, op: str, *, integer: bool = False, low=None, high=None,
                 low_open: bool = False):
    """value if it is a number (an int when `integer`) in [low, high] (or (low, high] when
    `low_open`); else ArgumentError naming `what` and the op. For constructor arguments."""
    kind = "an int" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ArgumentError(f"{what} must be {kind}, got {value!r}", op=op)
    if (low is not None and (value <= low if low_open else value < low)) or \
            (high is not None and value > high):
        bounds = f"{'(' if low_open else '['}{low if low is not None else '-inf'}, " \
                 f"{high if high is not None else 'inf'}]"
        raise ArgumentError(f"{what} must be {kind} in {bounds}, got {value!r}", op=op)
    return value
