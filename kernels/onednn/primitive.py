"""One oneDNN primitive made ready to run on NumPy arrays in the layouts rill keeps them in.

A primitive is created with `format_tag_any` for its tensors, so oneDNN chooses the layout its
fastest implementation reads (for a convolution: channels in blocks of 16, the weights
blocked on both channel axes). Each array the caller passes is described by its own shape and
strides ("user" layout); where the primitive's layout differs, the array is reordered into a
scratch buffer before the call (inputs) or out of one after it (outputs), by reorder
primitives made once with the primitive. Scratch space (oneDNN's scratchpad and those
buffers) is allocated per call, so one Prepared may run on several threads at once.
"""
from __future__ import annotations

import threading

import numpy as np

from rill.kernels.numpy import parallel
from rill.kernels.onednn import library
from rill.kernels.onednn.library import ARG_FROM, ARG_SCRATCHPAD, ARG_TO, OneDNNError

_ALIGN = 64  # bytes: a cache line, what oneDNN's own allocations use


def aligned_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of uninitialised memory starting on a cache line."""
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start:start + nbytes]


def threads() -> int:
    """OpenMP threads for a call: rill's count; one inside a split pass's worker (the
    caller's cores are already busy), or in a child forked after this process ran a team of
    threads (library.py says why)."""
    if getattr(parallel._inside, "active", False) or library.forked_after_teams():
        return 1
    return parallel.THREADS


def contiguous_strides(shape) -> tuple:
    """The strides, in elements, of a C-ordered array of `shape`."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def user_md(lib, array_shape, array_strides_bytes, itemsize=4):
    """A plain layout: the array's shape and strides (in bytes, whole elements)."""
    if any(s % itemsize or s < 0 for s in array_strides_bytes):
        raise OneDNNError("strides that are not whole, non-negative elements")
    return lib.plain_md(array_shape, [s // itemsize for s in array_strides_bytes])


class _Runner:
    """A primitive and the scratchpad it asks for (its desc kept: the layouts queried from it
    live as long as it does)."""

    def __init__(self, lib, pd):
        self.lib, self.pd = lib, pd
        self.primitive = lib.make("dnnl_primitive_create", pd)
        self.scratch_md = lib.query_md(pd, ARG_SCRATCHPAD)
        self.scratch_bytes = lib.md_size(self.scratch_md) if self.scratch_md else 0

    def run(self, args: dict, memories: list) -> None:
        lib = self.lib
        if self.scratch_bytes:
            buffer = aligned_buffer(self.scratch_bytes)
            memories.append((buffer, lib.memory(self.scratch_md, buffer.ctypes.data)))
            args = {**args, ARG_SCRATCHPAD: memories[-1][1]}
        lib.execute(self.primitive, args)

    def __del__(self):
        self.lib.destroy("primitive", getattr(self, "primitive", None))
        self.lib.destroy("primitive_desc", getattr(self, "pd", None))


class Prepared:
    """A primitive desc `pd` with its arguments: {arg id: (user md, is_output)}.
    Calling it with {arg id: array} runs it; outputs are written into the arrays given.

    The memory objects over the caller's arrays are made once per thread and pointed at each
    call's arrays (dnnl_memory_set_data_handle): creating and destroying them per call cost
    ~10 us of a product's ~25 us of overhead."""

    def __init__(self, lib, pd, arguments: dict):
        self.lib = lib
        self.main = _Runner(lib, pd)
        self.arguments = {}
        self._user_mds = []
        self._local = threading.local()  # {arg id: memory} of this thread
        self._all_memories: list = []  # every thread's, destroyed with this
        self._memories_lock = threading.Lock()
        for arg, (md, is_output) in arguments.items():
            self._user_mds.append(md)
            inner = lib.query_md(pd, arg)
            reorder = None
            if not lib.md_equal(md, inner):
                src, dst = (inner, md) if is_output else (md, inner)
                reorder = _Runner(lib, lib.make("dnnl_reorder_primitive_desc_create", src,
                                                lib.engine, dst, lib.engine, lib.attr))
            self.arguments[arg] = (md, inner, lib.md_size(inner), reorder, is_output)
        self.implementation = lib.impl_name(pd)
        self.reorders = any(entry[3] is not None for entry in self.arguments.values())

    def _user_memory(self, arg, md, array):
        """This thread's memory object for argument `arg`, pointed at `array`."""
        mine = getattr(self._local, "memories", None)
        if mine is None:
            mine = self._local.memories = {}
        memory = mine.get(arg)
        if memory is None:
            memory = mine[arg] = self.lib.memory(md, array.ctypes.data)
            with self._memories_lock:
                self._all_memories.append(memory)
        else:
            self.lib.point(memory, array.ctypes.data)
        return memory

    def __call__(self, arrays: dict) -> None:
        lib, memories, args, after = self.lib, [], {}, []
        try:
            for arg, array in arrays.items():
                md, inner, nbytes, reorder, is_output = self.arguments[arg]
                user = self._user_memory(arg, md, array)
                if reorder is None:
                    args[arg] = user
                    continue
                buffer = aligned_buffer(nbytes)
                memories.append((buffer, lib.memory(inner, buffer.ctypes.data)))
                args[arg] = memories[-1][1]
                if is_output:
                    after.append((reorder, {ARG_FROM: args[arg], ARG_TO: user}))
                else:
                    reorder.run({ARG_FROM: user, ARG_TO: args[arg]}, memories)
            self.main.run(args, memories)
            for reorder, reorder_args in after:
                reorder.run(reorder_args, memories)
        finally:
            for _, memory in memories:
                lib.destroy("memory", memory)

    def __del__(self):
        for memory in getattr(self, "_all_memories", ()):
            self.lib.destroy("memory", memory)
        for md in getattr(self, "_user_mds", ()):
            self.lib.destroy("memory_desc", md)


class Cache:
    """Prepared primitives by key and thread count (a primitive runs on the number of threads
    it was created for), at most `size` (the oldest dropped first); None remembered for a
    key oneDNN cannot run, so it is asked once. `get` also sets this thread's OpenMP count
    for the call that follows."""

    def __init__(self, size: int = 256):
        self.size, self._items, self._lock = size, {}, threading.Lock()

    def get(self, lib, key, make):
        count = threads()
        lib.use_threads(count)
        key = key + (count,)
        with self._lock:
            if key in self._items:
                return self._items[key]
        try:
            made = make()
        except OneDNNError:  # no implementation takes the case: the caller's kernel runs
            made = None
        with self._lock:
            if len(self._items) >= self.size:
                self._items.pop(next(iter(self._items)))
            self._items[key] = made
        return made
