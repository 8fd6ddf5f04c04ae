"""Block configurations for the GEMM-shaped kernels (matmul, einsum, linear, convolutions).

A Config is what a tiled GEMM kernel is compiled with: the tile (BLOCK_M x BLOCK_N, stepping
BLOCK_K along the reduction), GROUP_M (how many row tiles share a column sweep, for L2 reuse),
num_warps and num_stages (software pipelining depth).

    config_for(op, dtype, m, n, k, ...)   the config to launch with: the tuned one from the
                                          cache, else (RILL_AUTOTUNE=1 on a real GPU) tune
                                          now, else the heuristic default for the shape
    tune(key, run, ...)                   time every candidate, keep the fastest, save it
    heuristic(...)                        the default chosen from the problem shape

Tuned configs live in a JSON file under $RILL_CACHE_DIR (or ~/.cache/rill/), in tuning/, keyed
by device name, op, dtype and a bucket of (M, N, K) (each rounded up to a power of two); the
file is read once, at import, and only as kernels/cache.py allows (this user's alone, never
through a link): a file another user could have written is ignored with a warning. Under
Triton's interpreter nothing is ever timed: the heuristic picks few, large tiles, which the
interpreter runs fastest. No kernels here: no bytes moved, no FLOPs.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

from rill import files
from rill.kernels import cache

from .launch import INTERPRET, triton

CACHE_VERSION = 1


class Config(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


# Tensor-core path (float16, bfloat16-as-float32, float32 through tl.dot).
DOT_CANDIDATES = (
    Config(128, 128, 32, 8, 4, 4), Config(128, 128, 64, 8, 8, 3), Config(128, 256, 64, 8, 8, 3),
    Config(256, 128, 64, 8, 8, 3), Config(128, 64, 32, 8, 4, 4), Config(64, 128, 32, 8, 4, 4),
    Config(64, 64, 32, 8, 4, 4), Config(64, 64, 64, 8, 4, 3), Config(64, 32, 32, 8, 4, 5),
    Config(32, 64, 32, 8, 4, 5), Config(32, 32, 32, 8, 2, 4), Config(16, 64, 64, 8, 2, 4),
)
# Multiply-and-sum path (float64, integers): the (BM, BK, BN) product lives in registers.
FMA_CANDIDATES = (
    Config(32, 32, 8, 8, 4, 2), Config(64, 32, 8, 8, 4, 2), Config(32, 64, 8, 8, 4, 2),
    Config(64, 64, 4, 8, 4, 2), Config(64, 64, 8, 8, 8, 2), Config(16, 32, 16, 8, 2, 2),
    Config(32, 32, 4, 8, 2, 3), Config(16, 16, 16, 8, 1, 2),
)


def candidates(path: str) -> tuple:
    return DOT_CANDIDATES if path == "dot" else FMA_CANDIDATES


def _pow2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


def _clamp(n: int, low: int, high: int) -> int:
    return max(low, min(high, _pow2(n)))


def heuristic(path: str, dtype: str, m: int, n: int, k: int, batch: int = 1) -> Config:
    """The default config for an (M, N, K) problem, `batch` times over."""
    if INTERPRET:
        # One NumPy step per tile: cover the problem in as few tiles as memory allows.
        if path == "dot":
            return Config(_clamp(m, 16, 128), _clamp(n, 16, 128), _clamp(k, 16, 128), 8, 4, 1)
        # The (BM, BK, BN) product is materialized: keep it near 64K elements.
        return Config(_clamp(m, 16, 64), _clamp(n, 16, 64), _clamp(k, 16, 16), 8, 4, 1)
    if path != "dot":
        big = m >= 64 and n >= 64
        return Config(64 if big else 32, 32, 8, 8, 4, 2)
    wide = 64 if dtype == "float16" else 32  # 128 bytes of K per row either way
    bm = 128 if m > 64 else _clamp(m, 16, 64)
    bn = 128 if n > 64 else _clamp(n, 16, 64)
    # Too few tiles to fill the GPU: smaller tiles (split-K covers the rest).
    while bm * bn > 64 * 64 and batch * -(-m // bm) * -(-n // bn) < sm_count():
        if bm >= bn:
            bm //= 2
        else:
            bn //= 2
    warps = 8 if bm * bn >= 128 * 128 else 4
    stages = 3 if wide == 64 and bm * bn >= 128 * 128 else 4
    if dtype == "float32-tf32" and bm == bn == 128 and n > 128 and \
            -(-m // 128) * -(-n // 256) * batch >= sm_count():
        # tf32 on an H200 at 4096^3 with both operands K-contiguous (linalg.contract copies
        # them so; bench/gpu_probe.py tf32): 128 x 256 x 32, 3 stages, 293 TFLOP/s; 256 x 128
        # 249, 128 x 128 240 (with B N-contiguous, 256 x 128 126 and 128 x 128 77)
        return Config(128, 256, 32, 8, 8, 3)
    return Config(bm, bn, wide, 8, warps, stages)


# ---- device facts ---------------------------------------------------------------------------

_DEVICE: dict = {}


def device_name() -> str:
    """The GPU's name (part of the cache key: a config tuned on one card is not another's)."""
    if "name" not in _DEVICE:
        if INTERPRET:
            _DEVICE["name"] = "triton-interpreter"
        else:
            import cupy
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            name = props["name"]
            _DEVICE["name"] = name.decode() if isinstance(name, bytes) else str(name)
    return _DEVICE["name"]


def sm_count() -> int:
    """Streaming multiprocessors: how many tiles run at once (1 under the interpreter)."""
    if "sms" not in _DEVICE:
        if INTERPRET:
            _DEVICE["sms"] = 1
        else:
            import cupy
            _DEVICE["sms"] = int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    return _DEVICE["sms"]


# ---- the on-disk cache ----------------------------------------------------------------------

def cache_path() -> Path:
    return cache.root() / "tuning" / "gemm_tuning.json"


# A tuning file holds a few hundred small entries; anything larger is not one of rill's.
MAX_CACHE_BYTES = 1 << 20


def make_key(op: str, dtype: str, m: int, n: int, k: int, device: str | None = None) -> str:
    bucket = "x".join(str(_pow2(v)) for v in (m, n, k))
    return f"{device or device_name()}|{op}|{dtype}|{bucket}"


class TuningCache:
    """Tuned configs by key, mirrored in a JSON file (read when made, rewritten on put)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.entries: dict[str, Config] = {}
        self._read()

    def _read(self) -> None:
        try:
            text = self._checked_text()
        except FileNotFoundError:
            return
        except (OSError, cache.CacheError) as e:
            warnings.warn(f"rill: not reading the tuning cache {self.path}: {e}; using defaults")
            return
        try:
            data = json.loads(text)
            if data.get("version") != CACHE_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {CACHE_VERSION}")
            self.entries = {str(key): Config(*(int(v) for v in value))
                            for key, value in data["entries"].items()}
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            self.entries = {}
            warnings.warn(f"rill: ignoring the corrupt tuning cache {self.path} ({e}); it will "
                          "be rewritten when something is tuned")

    def _checked_text(self) -> str:
        """The file's text, read only from a folder and a file that are this user's alone."""
        if not self.path.parent.exists():
            raise FileNotFoundError(self.path)
        path = cache.check_private(self.path.parent) / self.path.name
        if not os.path.lexists(path):
            raise FileNotFoundError(path)
        refused = cache.untrusted_file(path)
        if refused:
            raise cache.CacheError(f"{refused}; delete it, or set RILL_CACHE_DIR to a folder of "
                                   "yours")
        f, _ = files.open_regular(path, op="tuning", follow_symlinks=False,
                                  max_bytes=MAX_CACHE_BYTES, error=cache.CacheError)
        with f:
            data = files.read_bounded(f, path, MAX_CACHE_BYTES, op="tuning",
                                      error=cache.CacheError)
        return data.decode("utf-8", errors="replace")

    def get(self, key: str) -> Config | None:
        return self.entries.get(key)

    def put(self, key: str, config: Config) -> None:
        with self._lock:
            self.entries[key] = Config(*config)
            data = {"version": CACHE_VERSION,
                    "entries": {k: list(v) for k, v in sorted(self.entries.items())}}
            try:
                os.makedirs(self.path.parent, 0o700, exist_ok=True)
                folder = cache.check_private(self.path.parent)
                # Written beside, then renamed: a reader never sees half a file.
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gemm_tuning.")
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1)
                os.replace(tmp, folder / self.path.name)
            except (OSError, cache.CacheError) as e:
                warnings.warn(f"rill: cannot write the tuning cache {self.path}: {e}")


CACHE = TuningCache(cache_path())


def autotune_enabled() -> bool:
    return os.environ.get("RILL_AUTOTUNE", "") not in ("", "0") and not INTERPRET


def _default_timer(fn: Callable[[], None]) -> float:
    """Milliseconds per call of fn, by CUDA events (CuPy's: no PyTorch needed on the GPU)."""
    import cupy
    fn()  # compiles
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    once = cupy.cuda.get_elapsed_time(start, end)
    reps = max(3, min(100, int(25.0 / max(once, 1e-3))))  # about 25 ms of work
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def tune(key: str, run: Callable[[Config], None], path: str = "dot",
         timer: Callable[[Callable[[], None]], float] | None = None,
         configs=None, cache: TuningCache | None = None) -> Config | None:
    """Time `run(config)` for every candidate, store the fastest under `key`, return it.

    `timer(fn)` returns milliseconds (CUDA events by default, only on a real GPU: under the
    interpreter, without an explicit timer, nothing is timed and None is returned).
    Candidates that fail to compile or launch (too much shared memory) are skipped."""
    if timer is None:
        if INTERPRET:
            return None
        timer = _default_timer
    cache = CACHE if cache is None else cache
    best, best_ms = None, float("inf")
    for config in configs or candidates(path):
        try:
            ms = timer(lambda: run(config))
        except Exception:  # out of resources for this tile: not a candidate here
            continue
        if ms < best_ms:
            best, best_ms = config, ms
    if best is not None:
        cache.put(key, best)
    return best


def config_for(op: str, path: str, dtype: str, m: int, n: int, k: int, batch: int = 1,
               run: Callable[[Config], None] | None = None) -> Config:
    """The config for this problem: tuned (cached, or tuned now when RILL_AUTOTUNE=1 and a
    `run` is given), else the heuristic default."""
    if INTERPRET:
        return heuristic(path, dtype, m, n, k, batch)
    key = make_key(op, dtype, m, n, k)
    found = CACHE.get(key)
    if found is None and run is not None and autotune_enabled():
        found = tune(key, run, path)
    return found or heuristic(path, dtype, m, n, k, batch)
