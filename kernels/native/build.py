"""Compile a kernel's C source into a CPython extension module, once per machine, and load it.

The module is built with the C compiler CPython was built with (`sysconfig`'s CC, or $CC)
for this CPU (`-march=native`), into $RILL_CACHE_DIR/native (else ~/.cache/rill/native),
under a name that hashes everything the binary depends on: the source and headers, the
compiler and its version, the flags, the Python ABI and the CPU's model and feature flags.
A later process (or another rank of a distributed job) loads it from there: ~1 ms instead
of ~0.4 s of compiling.

Loading a file runs its code, so (kernels/cache.py) the cache folder is used only where no
other user can change anything on the way to it: a $RILL_CACHE_DIR that fails this, or that
cannot be made, is a CacheError naming the fix at the kernel's call; the default folder is
refused with a CacheWarning, once, and the NumPy kernels run. A
cached file is loaded only if it is a regular file (never a link), this user's, and no one
else may write it. Each build runs in a private temporary folder (0700) that this process
made, which holds the generated source and the compiler's output until the finished module
is renamed into place: no other user can swap the source the compiler reads, and processes
that build at the same time never load a half-written file. The hash is also compiled into
the module's init function (PyInit_<name>_h<hash>), so a file renamed or copied from another
build fails to load under this name instead of running another kernel.

Where there is no compiler, the build fails, or $RILL_NATIVE was 0 at import (or
`build.ENABLED` is set False), `load` returns None and the caller runs its NumPy kernel. A
failed build is remembered for the process (and its compiler output kept for `why_not`), so
it is tried once.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rill.kernels import cache

SOURCE_DIR = Path(__file__).parent

# -fno-math-errno lets the compiler call glibc's vector math functions (libmvec) for the
# loops marked `omp simd`; -fno-trapping-math lets it turn a comparison that picks a value
# into a vector select (a max-pool's 2x2 window: 1.5 ms of branches -> vector code), as no
# kernel reads the floating-point exception flags; -ffp-contract=off keeps `a * b + c` two
# roundings, as NumPy's separate passes compute it (the kernels match the NumPy ones bit for
# bit except where a libmvec function differs from NumPy's in the last bits). No -ffast-math:
# NaN, infinity and signed zeros keep IEEE meanings.
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
         "-fopenmp", "-fPIC", "-shared", "-fvisibility=hidden")

_failures: dict[str, str] = {}


def _enabled_by_environment() -> bool:
    return os.environ.get("RILL_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


# Read once, at import ($RILL_NATIVE=0 turns compiled kernels off): a kernel asks per call,
# and reading os.environ costs ~0.8 us. Tests set this attribute.
ENABLED = _enabled_by_environment()


def cache_dir() -> Path:
    """The checked, private folder of the built modules (kernels/cache.py); a CacheError if
    it is not this user's alone."""
    return cache.private_folder("native")


def load(name: str):
    """The extension module built from `<name>.c` beside this file, or None (no compiler, a
    failed build, RILL_NATIVE=0, or a default cache folder refused, which a CacheWarning
    said once): the caller then runs its NumPy kernel. A $RILL_CACHE_DIR refused raises
    CacheError, naming the fix."""
    if not ENABLED or name in _failures:
        return None
    return _load(name)


def load_quietly(name: str):
    """`load(name)`, or None without a word where the cache folder is refused (the kernels
    say so at their first call): rill/__init__.py's compiled bind, loaded at import."""
    try:
        cache_dir()
    except (cache.CacheError, OSError):
        return None
    return load(name)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def for_arrays(name: str, *arrays):
    """`load(name)` where its kernels can take these arrays: NumPy arrays, all C-contiguous,
    the first float32 or float64 (the element types the modules are built for); else None."""
    if arrays[0].dtype not in _FLOATS or \
            not all(type(a) is np.ndarray and a.flags.c_contiguous for a in arrays):
        return None
    return load(name)


def why_not(name: str) -> str | None:
    """Why `load(name)` returns None, if it does: the compiler's message or the setting."""
    if not ENABLED:
        return "RILL_NATIVE=0"
    return _failures.get(name)


@functools.lru_cache(maxsize=None)
def _load(name: str):
    pending = _prefetched.get(name)
    if pending is not None and not pending.cancel():  # queued: built here, now
        pending.result()  # started: its file is there once it ends (a failure: found below)
    return _build(name, (SOURCE_DIR / f"{name}.c").read_bytes(), SOURCE_DIR / f"{name}.c")


# A captured step knows, before its first call runs a kernel, which modules its kernels may
# load (prefetch, called with kernels/native/__init__.py:modules_for). Missing from the cache
# (a machine's first run), they are built on background threads, one per core, instead of
# one after another as each kernel first needs one: a conv net's first call built six in a
# row (3.2 s, gcc 12 on 2 cores). A `load` waits for its module's build if it has started,
# else takes it from the queue and builds it at once.
_prefetched: dict = {}
_prefetch_lock = threading.Lock()
_prefetch_pool: ThreadPoolExecutor | None = None


def prefetch(names) -> None:
    """Start building the modules among `names` that are not built yet, in the background."""
    global _prefetch_pool
    if not ENABLED:
        return
    with _prefetch_lock:
        for name in dict.fromkeys(names):
            path = SOURCE_DIR / f"{name}.c"
            if name in _prefetched or name in _failures or not path.exists():
                continue
            try:
                built = os.path.lexists(_target(name, path.read_bytes())[1])
            except cache.CacheError:  # an unsafe folder: `load` raises it at the kernel's call
                return
            if built:
                _prefetched[name] = None  # built: not looked at again by a later trace
                continue
            if _prefetch_pool is None:
                _prefetch_pool = ThreadPoolExecutor(os.cpu_count() or 1,
                                                    thread_name_prefix="rill-build")
            _prefetched[name] = _prefetch_pool.submit(_compile_quietly, name, path)


def _compile_quietly(name: str, path: Path) -> None:
    """Build one module's file (a failure is found again, and kept, when it is loaded)."""
    try:
        command, target = _target(name, path.read_bytes())
        if not os.path.lexists(target):
            _compile(command, path, target)
    except (OSError, subprocess.SubprocessError, cache.CacheError):
        pass


def load_generated(name: str, source: str):
    """The module built from C source that rill generated (kernels/native/fused.py: a fused
    group's loop, made only of identifiers and literals rill wrote), cached like the others
    under a hash of the source; None where `load` would give None (why_not says why, an
    unsafe cache folder included: the caller's NumPy function runs instead)."""
    if not ENABLED or name in _failures:
        return None
    try:
        return _build(name, source.encode(), None)
    except cache.CacheError as exc:  # a $RILL_CACHE_DIR refused: NumPy runs the group
        _failures[name] = f"writing the source into the cache: {exc}"
        return None


def _target(name: str, source_bytes: bytes) -> tuple[list, Path]:
    """(compile command, cached file) of a module: the file's name hashes everything the
    binary depends on."""
    # the module's source and the headers it may include
    source = b"\0".join([source_bytes] + [p.read_bytes() for p in sorted(SOURCE_DIR.glob("*.h"))])
    compiler = _compiler()
    command = compiler + list(FLAGS) + ["-I", sysconfig.get_paths()["include"],
                                        "-I", str(SOURCE_DIR)]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    depends_on = [source, " ".join(command).encode(), _compiler_version(tuple(compiler)),
                  suffix.encode(), _cpu_identity()]
    key = hashlib.sha256(b"\0".join(depends_on)).hexdigest()[:20]
    # the init function carries the hash (common.h's RILL_MODULE): see the module docstring
    return command + [f"-DRILL_BUILD=h{key}"], cache_dir() / f"{name}-{key}{suffix}"


def _module_name(name: str, target: Path) -> str:
    """The name the module was built under: `<name>_h<hash>`, the hash from its file name."""
    return f"{name}_h{target.name[len(name) + 1:].split('.')[0]}"


def _build(name: str, source_bytes: bytes, source_path: Path | None):
    """Build (where not cached) and load one module; `source_path` None: `source_bytes` is
    generated source, written into the build's private folder."""
    try:
        command, target = _target(name, source_bytes)
    except cache.CacheError as exc:
        if cache.configured_by_user():
            raise
        _failures[name] = str(exc)
        _warn_once(exc)
        return None
    if not os.path.lexists(target):
        try:
            _compile(command, source_bytes if source_path is None else source_path, target)
        except (OSError, subprocess.SubprocessError) as exc:
            _failures[name] = f"{' '.join(command)}: {exc}"
            return None
    refused = cache.untrusted_file(target)
    if refused:
        _failures[name] = f"not loading {target}: {refused}"
        return None
    try:
        spec = importlib.util.spec_from_file_location(_module_name(name, target), target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:  # another build's file under this name, or another libc's
        _failures[name] = f"not loading {target}: {exc}"
        return None
    return module


_warned: list = []


def _warn_once(exc: Exception) -> None:
    if not _warned:
        _warned.append(exc)
        warnings.warn(f"rill runs its NumPy kernels instead of compiled ones: {exc}",
                      cache.CacheWarning, stacklevel=2)


def _compile(command: list[str], source, target: Path) -> None:
    """Compile `source` (a path, or generated source as bytes) into `target`, by way of a
    temporary folder only this process uses."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as private:
        if isinstance(source, bytes):
            # beside nothing but itself: its #include "common.h" finds rill's, from -I
            path = os.path.join(private, "generated.c")
            with open(path, "xb") as f:
                f.write(source)
            source = path
        built = os.path.join(private, target.name)
        done = subprocess.run(command + [str(source), "-o", built, "-lm"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip()[-2000:] or
                                             f"exit status {done.returncode}")
        os.chmod(built, 0o755)  # whatever the umask: see cache.untrusted_file
        os.replace(built, target)


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


@functools.lru_cache(maxsize=None)
def _compiler_version(compiler: tuple) -> bytes:
    try:
        return subprocess.run(list(compiler) + ["--version"], capture_output=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return b""


@functools.lru_cache(maxsize=None)
def _cpu_identity() -> bytes:
    """The CPU's model and feature flags: -march=native code is for this CPU only."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor().encode() + platform.machine().encode()
    wanted = [line for line in lines if line.startswith(("model name", "flags"))][:2]
    return "\n".join(wanted).encode() + platform.machine().encode()
