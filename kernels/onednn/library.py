"""oneDNN (Intel's deep-learning primitives library), loaded through its C API with ctypes.

Why a library here: oneDNN's convolutions are JIT-compiled, register-blocked loops over
channel-blocked layouts, the kernels PyTorch's CPU convolutions run; on the Table 1 models
and ResNet-18 they run a layer's three passes 1.0-1.4x faster than rill's im2col + OpenBLAS
and C loops, and the training steps 1.1-1.5x faster (docs/benchmarks-history.md). It is an optional extra
(`pip install rill[onednn]`: the `onednn-cpu-gomp` wheel, its CPU-only build threaded by GNU
OpenMP); `import rill` loads nothing of it, and without it the NumPy/C kernels run.

Only the C API's stable surface is used: opaque handles, plain layouts described by strides
(no format-tag enums, which grow between versions), `format_tag_any` (1) to let a primitive
choose its own layout, and the numeric constants below, fixed across oneDNN 3.x (the ABI
this module accepts; checked against the loaded library's version). `RILL_ONEDNN=0` turns
it off at import; tests set ENABLED.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from pathlib import Path

# dnnl_common_types.h / dnnl_types.h (oneDNN 3.x)
F32 = 3
FORMAT_ANY = 1
CPU = 1
RUNTIME_SEQUENTIAL, RUNTIME_OPENMP = 1, 2  # dnnl_config.h: DNNL_RUNTIME_SEQ, DNNL_RUNTIME_OMP
FORWARD_TRAINING, FORWARD_INFERENCE, BACKWARD_DATA, BACKWARD_WEIGHTS = 64, 96, 160, 192
CONVOLUTION_DIRECT = 0x1
QUERY_IMPL_INFO, QUERY_EXEC_ARG_MD = 8, 255
SCRATCHPAD_USER = 1
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_SCRATCHPAD = 1, 17, 33, 41, 80
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS = 129, 145, 161
ARG_FROM, ARG_TO = ARG_SRC, ARG_DST
# the RNN primitives (LSTM: kernels/onednn/lstm.py)
U8 = 6
BACKWARD = 128
VANILLA_LSTM = 0x2fff
LEFT2RIGHT, RIGHT2LEFT = 1, 2
RNN_DIFF_WEIGHTS_OVERWRITE = 0x1
ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_DST_ITER, ARG_DST_ITER_C = 2, 3, 18, 19
ARG_WEIGHTS_ITER, ARG_WORKSPACE, ARG_DIFF = 34, 64, 128  # ARG_DIFF + arg: its gradient
MAX_NDIMS = 12

Dims = ctypes.c_int64 * MAX_NDIMS
handle = ctypes.c_void_p


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", handle)]


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                ("gpu_runtime", ctypes.c_uint)]


class OneDNNError(RuntimeError):
    """A oneDNN call failed (its status code named); the caller falls back to NumPy kernels
    where the call only asked whether oneDNN can run a shape."""


_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented",
           4: "last implementation reached", 5: "runtime error", 6: "not required",
           7: "invalid graph", 8: "invalid graph op", 9: "invalid shape", 10: "invalid data type"}


def _enabled_by_environment() -> bool:
    return os.environ.get("RILL_ONEDNN", "1").strip().lower() not in ("0", "false", "no", "off")


ENABLED = _enabled_by_environment()


def _candidates():
    """Where pip puts the wheel's library (its data files go under the environment's prefix),
    then the system's search path."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        for name in ("libdnnl.so.3", "libdnnl.so"):
            path = Path(prefix) / "lib" / name
            if path.exists():
                yield str(path)
    yield "libdnnl.so.3"


_SIGNATURES = {  # name: argument types (every function returns a dnnl_status_t)
    "dnnl_engine_create": (ctypes.POINTER(handle), ctypes.c_int, ctypes.c_size_t),
    "dnnl_stream_create": (ctypes.POINTER(handle), handle, ctypes.c_uint),
    "dnnl_stream_wait": (handle,),
    "dnnl_memory_desc_create_with_strides": (ctypes.POINTER(handle), ctypes.c_int,
                                             ctypes.POINTER(Dims), ctypes.c_int,
                                             ctypes.POINTER(Dims)),
    "dnnl_memory_desc_create_with_tag": (ctypes.POINTER(handle), ctypes.c_int,
                                         ctypes.POINTER(Dims), ctypes.c_int, ctypes.c_int),
    "dnnl_memory_desc_clone": (ctypes.POINTER(handle), handle),
    "dnnl_memory_desc_destroy": (handle,),
    "dnnl_primitive_desc_destroy": (handle,),
    "dnnl_primitive_create": (ctypes.POINTER(handle), handle),
    "dnnl_primitive_destroy": (handle,),
    "dnnl_primitive_execute": (handle, handle, ctypes.c_int, ctypes.POINTER(ExecArg)),
    "dnnl_primitive_desc_query": (handle, ctypes.c_int, ctypes.c_int, ctypes.c_void_p),
    "dnnl_memory_create": (ctypes.POINTER(handle), handle, handle, handle),
    "dnnl_memory_destroy": (handle,),
    "dnnl_memory_set_data_handle": (handle, ctypes.c_void_p),
    "dnnl_reorder_primitive_desc_create": (ctypes.POINTER(handle), handle, handle, handle,
                                           handle, handle),
    "dnnl_primitive_attr_create": (ctypes.POINTER(handle),),
    "dnnl_primitive_attr_set_scratchpad_mode": (handle, ctypes.c_int),
    "dnnl_convolution_forward_primitive_desc_create": (
        (ctypes.POINTER(handle), handle, ctypes.c_int, ctypes.c_int) + (handle,) * 4 +
        (ctypes.POINTER(Dims),) * 4 + (handle,)),
    "dnnl_convolution_backward_data_primitive_desc_create": (
        (ctypes.POINTER(handle), handle, ctypes.c_int) + (handle,) * 3 +
        (ctypes.POINTER(Dims),) * 4 + (handle, handle)),
    "dnnl_convolution_backward_weights_primitive_desc_create": (
        (ctypes.POINTER(handle), handle, ctypes.c_int) + (handle,) * 4 +
        (ctypes.POINTER(Dims),) * 4 + (handle, handle)),
    "dnnl_matmul_primitive_desc_create": (ctypes.POINTER(handle), handle) + (handle,) * 5,
    "dnnl_lstm_forward_primitive_desc_create": (
        (ctypes.POINTER(handle), handle, ctypes.c_int, ctypes.c_int) + (handle,) * 11 +
        (ctypes.c_uint, handle)),
    "dnnl_lstm_backward_primitive_desc_create": (
        (ctypes.POINTER(handle), handle, ctypes.c_int, ctypes.c_int) + (handle,) * 22 +
        (ctypes.c_uint, handle, handle)),
}


class Library:
    """The loaded libdnnl: its functions (each call checked), one CPU engine and stream."""

    def __init__(self, path: str):
        self.path = path
        self._dll = ctypes.CDLL(path)  # CDLL: every call releases the GIL
        self._dll.dnnl_version.restype = ctypes.POINTER(Version)
        v = self._dll.dnnl_version().contents
        self.version = (v.major, v.minor, v.patch)
        if v.major != 3:
            raise OneDNNError(f"{path} is oneDNN {v.major}.{v.minor}; rill reads the 3.x API")
        if v.cpu_runtime not in (RUNTIME_SEQUENTIAL, RUNTIME_OPENMP):
            # a TBB or thread-pool build: its thread count and its fork safety are not the
            # OpenMP ones this module manages (use_threads, forked_after_teams)
            raise OneDNNError(f"{path} runs on CPU runtime {v.cpu_runtime}; rill drives "
                              "oneDNN's OpenMP or sequential builds (onednn-cpu-gomp)")
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self._dll, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self._dll.dnnl_memory_desc_get_size.argtypes = (handle,)
        self._dll.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        self._dll.dnnl_memory_desc_equal.argtypes = (handle, handle)
        self._dll.dnnl_memory_desc_equal.restype = ctypes.c_int
        self._dll.dnnl_primitive_desc_query_md.argtypes = (handle, ctypes.c_int, ctypes.c_int)
        self._dll.dnnl_primitive_desc_query_md.restype = handle
        self.engine = self._make(self._dll.dnnl_engine_create, CPU, 0)
        self._streams = threading.local()  # a stream is not shared between threads
        self.attr = self._make(self._dll.dnnl_primitive_attr_create)
        # scratch buffers are passed in (per call), so primitives can run on two threads
        self.call("dnnl_primitive_attr_set_scratchpad_mode", self.attr, SCRATCHPAD_USER)
        # omp_set_num_threads of the OpenMP runtime the library was linked with: looked up
        # through its handle, which searches the libraries it depends on
        self._set_threads = getattr(self._dll, "omp_set_num_threads", None) \
            if v.cpu_runtime == RUNTIME_OPENMP else None
        if self._set_threads is not None:
            self._set_threads.argtypes, self._set_threads.restype = (ctypes.c_int,), None

    def call(self, name: str, *args) -> None:
        status = getattr(self._dll, name)(*args)
        if status != 0:
            raise OneDNNError(f"{name}: {_STATUS.get(status, f'status {status}')}")

    def _make(self, fn, *args):
        out = handle()
        status = fn(ctypes.byref(out), *args)
        if status != 0:
            raise OneDNNError(f"{fn.__name__}: {_STATUS.get(status, f'status {status}')}")
        return out

    def make(self, name: str, *args):
        """Calls a `dnnl_*_create(&out, ...)` function and returns `out`."""
        return self._make(getattr(self._dll, name), *args)

    def plain_md(self, shape, strides_in_elements):
        n = len(shape)
        return self.make("dnnl_memory_desc_create_with_strides", n, ctypes.byref(dims(shape)),
                         F32, ctypes.byref(dims(strides_in_elements)))

    def any_md(self, shape):
        return self.make("dnnl_memory_desc_create_with_tag", len(shape),
                         ctypes.byref(dims(shape)), F32, FORMAT_ANY)

    def query_md(self, pd, arg: int):
        """The layout a primitive chose for its argument `arg` (an ARG_* id), owned by the
        primitive desc; NULL where it takes no such argument."""
        return self._dll.dnnl_primitive_desc_query_md(pd, QUERY_EXEC_ARG_MD, arg)

    def md_size(self, md) -> int:
        return self._dll.dnnl_memory_desc_get_size(md)

    def md_equal(self, a, b) -> bool:
        return bool(self._dll.dnnl_memory_desc_equal(a, b))

    def impl_name(self, pd) -> str:
        out = ctypes.c_char_p()
        self.call("dnnl_primitive_desc_query", pd, QUERY_IMPL_INFO, 0, ctypes.byref(out))
        return out.value.decode()

    def memory(self, md, data_pointer: int):
        return self.make("dnnl_memory_create", md, self.engine, handle(data_pointer))

    def point(self, memory, data_pointer: int) -> None:
        """Points a memory object at other data (of the same layout)."""
        self.call("dnnl_memory_set_data_handle", memory, data_pointer)

    def use_threads(self, threads: int) -> None:
        """OpenMP threads for the primitives this thread creates next (a primitive keeps the
        count it was created with) and the reorders it runs; OpenMP keeps it per thread."""
        global _teams_started
        if self._set_threads is not None:
            self._set_threads(threads)
        _teams_started = _teams_started or threads > 1

    def execute(self, primitive, args: dict) -> None:
        """Runs `primitive` on {arg id: memory}, waiting for it."""
        stream = getattr(self._streams, "stream", None)
        if stream is None:
            stream = self._streams.stream = self.make("dnnl_stream_create", self.engine, 1)
        pairs = (ExecArg * len(args))(*args.items())
        self.call("dnnl_primitive_execute", primitive, stream, len(args), pairs)
        self.call("dnnl_stream_wait", stream)

    def destroy(self, kind: str, h) -> None:
        if h:
            getattr(self._dll, f"dnnl_{kind}_destroy")(h)


def dims(values) -> Dims:
    return Dims(*[int(v) for v in values])


_lock = threading.Lock()
_why_not: list = []

# GNU OpenMP's worker threads do not survive fork(), but its record of them does: a child
# whose parent had run a team of threads hangs at its first parallel region. So a child
# forked after the parent's first team runs its oneDNN calls on one thread (PyTorch does
# the same for its own OpenMP).
_teams_started = False
_forked_after_teams = False


def _after_fork_in_child() -> None:
    global _forked_after_teams
    _forked_after_teams = _forked_after_teams or _teams_started


os.register_at_fork(after_in_child=_after_fork_in_child)


def forked_after_teams() -> bool:
    return _forked_after_teams


def teams_started() -> bool:
    """Whether this process has run a oneDNN call on more than one thread (so GNU OpenMP's
    workers exist, and spin after each call)."""
    return _teams_started


@functools.lru_cache(maxsize=1)
def _load() -> Library | None:
    errors = []
    for path in _candidates():
        try:
            return Library(path)
        except (OSError, AttributeError, OneDNNError) as exc:
            errors.append(f"{path}: {exc}")
    _why_not.append("; ".join(errors) or "libdnnl not found")
    return None


def library() -> Library | None:
    """The loaded library, or None (not installed, another major version, RILL_ONEDNN=0)."""
    if not ENABLED:
        return None
    with _lock:
        return _load()


def why_not() -> str | None:
    """Why `library()` is None, if it is."""
    if not ENABLED:
        return "RILL_ONEDNN=0 (or library.ENABLED set False)"
    if library() is None:
        return _why_not[-1] if _why_not else "not loaded"
    return None
