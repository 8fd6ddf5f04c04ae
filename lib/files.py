"""Reading files a loader does not trust: regular files only, within a bound, under a budget.

Every loader of saved data (rill.load, rill.load_graph, training and distributed checkpoints)
opens its files through `open_regular`, because a path can name something that is not a
file of bytes: a symlink to /dev/zero reads forever, a FIFO blocks the open until some
writer comes, a device may be endless. So a file is opened with O_NONBLOCK (a FIFO opens at
once instead of waiting), O_NOFOLLOW where the format keeps its files side by side in one
directory (a link there is refused, not followed), then fstat-ed and refused unless it is a
regular file, and read no further than a limit the caller states.

Limits (the loaders' docstrings, docs/FORMAT.md and docs/GRAPH_FORMAT.md refer here):
- MAX_JSON: any JSON document a loader parses (a graph, a manifest) is at most 256 MiB;
  a real one is a few MiB, the large values live in binary files.
- the load budget (`load_budget`): the bytes a loaded file may make rill allocate, for its
  tensors or, for a saved graph, per call. By default the machine's physical memory;
  `RILL_LOAD_MAX_BYTES` (an int, or with a K/M/G/T suffix: 512M, 64G) or a loader's
  `max_bytes=` sets it. Data beyond it is refused with the bytes named, before anything of
  that size is allocated.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat

from .errors import ArgumentError, CheckpointError

MAX_JSON = 1 << 28
BUDGET_VARIABLE = "RILL_LOAD_MAX_BYTES"
_FALLBACK_BUDGET = 64 << 30  # where the OS will not say how much memory it has
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def open_regular(path, *, op: str, follow_symlinks: bool = True, max_bytes: int | None = None,
                 too_large: str | None = None, error: type = CheckpointError):
    """(binary file, size) of the regular file at `path`, opened for reading; anything else
    (missing, a directory, a FIFO, a device, a socket, a link when not `follow_symlinks`,
    more than `max_bytes` bytes) is an `error` (the loader's rill error class) naming the
    path and the fix. `too_large` ends the refusal of a file over `max_bytes` ("more than
    <too_large>"): what the limit is, and how to raise it where it can be raised."""
    path = os.fspath(path)
    nonblock = getattr(os, "O_NONBLOCK", 0)  # absent on Windows, which has no FIFOs to fear
    flags = os.O_RDONLY | nonblock | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    if not follow_symlinks:
        if not nofollow and os.path.islink(path):  # no O_NOFOLLOW here: the racy check
            _refuse_link(path, op, error)
        flags |= nofollow
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: no such file", op=op) from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks and os.path.islink(path):
            _refuse_link(path, op, error)
        raise error(f"{path}: cannot open: {e.strerror or e}", op=op) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(
                f"{path} is {_kind(info.st_mode)}, not a regular file: rill reads saved data "
                "only from regular files (a FIFO would wait for a writer, a device may never "
                "end); copy the data into a file and load that", op=op)
        if max_bytes is not None and info.st_size > max_bytes:
            limit = too_large or f"the {show_bytes(max_bytes)} such a file may hold"
            raise error(f"{path} holds {show_bytes(info.st_size)}, more than {limit}", op=op)
        if nonblock:
            os.set_blocking(fd, True)  # O_NONBLOCK was for the open; a file's reads never wait
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bounded(f, path, limit: int, *, op: str, error: type = CheckpointError) -> bytes:
    """All of `f` from where it is, refused if longer than `limit` bytes (a file that grew
    after its size was checked is caught here, without reading more than limit + 1). Read in
    pieces: `f.read(limit + 1)` would set aside limit + 1 bytes first, whatever the file."""
    pieces, size = [], 0
    try:
        while size <= limit:
            piece = f.read(min(1 << 24, limit + 1 - size))
            if not piece:
                break
            pieces.append(piece)
            size += len(piece)
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}", op=op) from None
    if size > limit:
        raise error(f"{path} is longer than the {show_bytes(limit)} it may be "
                    "(it grew while it was read, or it is not what it claims)", op=op)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def sha256(f, path, *, op: str) -> str:
    """The SHA-256 of `f` from where it is to its end, read in pieces (never whole)."""
    digest = hashlib.sha256()
    try:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}", op=op) from None
    return digest.hexdigest()


def load_budget(max_bytes=None, *, op: str) -> int:
    """The bytes a load may make rill allocate: `max_bytes` if given, else the environment's
    RILL_LOAD_MAX_BYTES, else the machine's physical memory."""
    if max_bytes is not None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ArgumentError(f"max_bytes must be an int >= 0 (bytes), got {max_bytes!r}",
                                op=op)
        return max_bytes
    text = os.environ.get(BUDGET_VARIABLE, "").strip()
    if text:
        found = re.fullmatch(r"([0-9]{1,20})\s*([KMGT]?)(i?B)?", text, re.IGNORECASE)
        if found is None:
            raise ArgumentError(f"{BUDGET_VARIABLE} must be a number of bytes, optionally with "
                                f"K, M, G or T (e.g. 64G), got {text[:40]!r}", op=op)
        return int(found.group(1)) * _UNITS[found.group(2).upper()]
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return _FALLBACK_BUDGET


def over_budget(budget: int) -> str:
    """The end of a refusal for data over the load budget: what the budget is and the fix."""
    return (f"this load's budget of {show_bytes(budget)} (RILL_LOAD_MAX_BYTES, or max_bytes= "
            "of the loader; by default the machine's memory). If the file is trusted and the "
            "memory is there, raise the budget")


def show_bytes(n: int) -> str:
    """Bytes as a refusal names them: rounded for the eye, exact for a budget to be set.

    >>> show_bytes(96 << 30)
    '96.0 GiB (103079215104 bytes)'
    """
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n} bytes)"
    return f"{n} bytes"


def _refuse_link(path: str, op: str, error: type = CheckpointError):
    raise error(f"{path} is a symbolic link: the files of a saved directory are "
                          "read only as themselves, never through a link; copy the file it "
                          "points to in its place", op=op)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"
