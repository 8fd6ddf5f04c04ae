"""rill's on-disk cache ($RILL_CACHE_DIR, else ~/.cache/rill): where it is, and the checks that
keep another user's files out of it.

Two things live there: C modules compiled on this machine (native/build.py), which are code
this process loads and runs, and tuned GEMM configurations (triton/tuning.py). A folder that
another user owns or may write lets that user swap a file between its check and its use, so
rill uses a cache folder only when no one but this user (and root) can change anything on the
way to it:

- every folder from `/` down to the cache root is owned by this user or root, and no one else
  may write it, unless its sticky bit is set (as /tmp's: others may then add entries but not
  rename or remove this user's);
- the cache's own folders are this user's alone: owned by this user and no one else may write
  them (rill makes them 0700, one level at a time, whatever the umask);
- "no one else": a group that is this user's private group (its only member, as the user
  groups of Debian and Ubuntu, whose umask 002 makes folders group-writable) is the user;
- symbolic links are resolved once, up front, and the resolved path is the one used, so a link
  that changes later does not move the cache; a file inside is used only if it is a regular
  file (`lstat`: a link is never followed), owned by this user and writable by no one else.
"""
from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

from rill.errors import Error


class CacheError(Error):
    """rill's cache folder is not this user's alone, so nothing is loaded from it."""


class CacheWarning(UserWarning):
    """The default cache folder cannot be used: compiled kernels are off, NumPy's run."""


def root() -> Path:
    """The cache root as configured: $RILL_CACHE_DIR, else ~/.cache/rill."""
    return Path(os.environ.get("RILL_CACHE_DIR") or Path.home() / ".cache" / "rill")


def configured_by_user() -> bool:
    """Whether $RILL_CACHE_DIR names the cache: a folder the user chose, whose refusal the
    user should hear as an error (the default's is a warning, and NumPy kernels run)."""
    return bool(os.environ.get("RILL_CACHE_DIR"))


def private_folder(name: str) -> Path:
    """`root()/name`, made (0700) where missing and checked as the module docstring says;
    the returned path has no symbolic link in it. Raises CacheError naming the fix."""
    configured = root()
    base = Path(os.path.realpath(configured))
    folder = base / name
    first_private = base / Path(name).parts[0]
    _check(folder, first_private, configured, only_existing=True)  # before writing anything
    _make(folder, configured)
    _check(folder, first_private, configured)
    return folder


def check_private(folder: Path) -> Path:
    """`folder` (which exists) resolved, after checking that it is this user's alone and that
    no one else can change the folders above it; a CacheError if not."""
    resolved = Path(os.path.realpath(folder))
    _check(resolved, resolved, folder)
    return resolved


def untrusted_file(path: Path) -> str | None:
    """Why a cached file may not be used, or None: it must be a regular file (a link is not
    followed), owned by this user, and no one else may write it."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"cannot read it: {exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"it is a symbolic link (to {os.readlink(path)}), which rill never follows"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if info.st_uid != os.getuid():
        return f"it belongs to user {info.st_uid}, not to this one ({os.getuid()})"
    if _writable_by_others(info):
        return f"others may write it (mode {info.st_mode & 0o777:o})"
    return None


def _writable_by_others(info) -> bool:
    return bool(info.st_mode & 0o002) or bool(info.st_mode & 0o020) and \
        not _private_group(info.st_gid)


@functools.lru_cache(maxsize=None)
def _private_group(gid: int) -> bool:
    """Whether group `gid` is this user's alone: its primary group, with no other member
    and no other account's primary group."""
    import grp
    import pwd
    me = os.getuid()
    try:
        name = pwd.getpwuid(me).pw_name
        members = grp.getgrgid(gid).gr_mem
    except KeyError:  # an account or group the system cannot name: not known to be private
        return False
    return gid == os.getgid() and set(members) <= {name} and \
        all(p.pw_gid != gid or p.pw_uid == me for p in pwd.getpwall())


def _make(folder: Path, configured: Path) -> None:
    """`folder` and the folders above it that are missing, each made 0700 (os.makedirs
    would give those above the umask's mode)."""
    missing = [f for f in [folder, *folder.parents] if not os.path.lexists(f)]
    try:
        for f in reversed(missing):
            try:
                os.mkdir(f, 0o700)
            except FileExistsError:  # made meanwhile (another rank): checked like the rest
                pass
    except OSError as exc:
        raise CacheError(f"cannot make the cache folder {folder} (RILL_CACHE_DIR or "
                         f"~/.cache/rill: {configured}): {exc}. Set RILL_CACHE_DIR to a folder "
                         "of yours, or RILL_NATIVE=0 to run no compiled kernel") from None


def _check(folder: Path, first_private: Path, configured: Path,
           only_existing: bool = False) -> None:
    """Every folder from `/` down to `folder`: those above `first_private` on the way (this
    user's or root's, sticky where others may write), the rest this user's alone."""
    for on_path in reversed([folder, *folder.parents]):
        if only_existing and not os.path.lexists(on_path):
            break
        if on_path == first_private or first_private in on_path.parents:
            _check_mine(on_path, configured)
        else:
            _check_on_the_way(on_path, configured)


def _check_on_the_way(folder: Path, configured: Path) -> None:
    """A folder on the way to the cache root (or the root itself, when it exists already):
    this user's or root's, and writable by no one else unless sticky."""
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise CacheError(f"the cache root {configured} is not a folder ({folder} is not one)")
    me = os.getuid()
    if info.st_uid not in (me, 0):
        raise _refusal(configured, folder, f"it belongs to user {info.st_uid}")
    if _writable_by_others(info) and not info.st_mode & stat.S_ISVTX:
        raise _refusal(configured, folder, f"others may write it (mode {info.st_mode & 0o777:o}) "
                                           "and it has no sticky bit")


def _check_mine(folder: Path, configured: Path) -> None:
    """One of the cache's own folders: this user's alone."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _refusal(configured, folder, "it is not a folder (a symbolic link, or a file)")
    if info.st_uid != os.getuid():
        raise _refusal(configured, folder, f"it belongs to user {info.st_uid}, not to this one "
                                           f"({os.getuid()})")
    if _writable_by_others(info):
        raise _refusal(configured, folder, f"others may write it (mode {info.st_mode & 0o777:o})")


def _refusal(configured: Path, folder: Path, why: str) -> CacheError:
    return CacheError(
        f"refusing the cache folder {configured}: {folder} is not safe, {why}, so another user "
        "could replace what rill loads from it (compiled code among it). Set RILL_CACHE_DIR "
        "to a folder "
        f"only you can write (e.g. ~/.cache/rill), or `chmod go-w {folder}` if it is yours; "
        "RILL_NATIVE=0 runs no compiled kernel")
