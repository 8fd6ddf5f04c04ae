"""Devices, after the paper's device abstraction: allocate, run a kernel, copy to/from host.

`cpu` buffers are NumPy arrays. `cpu:1`, `cpu:2`, ... are virtual CPU devices with the same
buffers, so that placement and mixed-device errors are testable on one machine. `gpu:N`
buffers are CuPy arrays (or host arrays under RILL_TRITON_INTERPRET=1; see rill.gpu); the gpu
backend is built the first time a gpu device is asked for, and asking for one where it cannot
be built says what is missing.

Device scopes: `with rill.device("cpu:1"):` makes tensors created inside (creation and random
ops given no device) land on cpu:1, and, while a capture records, asks the placer to run the
recorded ops there. Ops on existing tensors still run eagerly where their inputs are: scopes
never copy. `rill.colocate_with(t)` asks for t's device; `rill.device(None)` clears both.
"""
from __future__ import annotations

import threading
from contextvars import ContextVar

import numpy as np

from . import cpu_memory  # noqa: F401  (tunes the CPU allocator once, at import)
from .dtypes import round_to_bfloat16
from .errors import DeviceError


class Backend:
    """What a device kind must provide. Kernels are registered per kind on each primitive."""

    kind = "?"

    def from_host(self, array: np.ndarray, device: "Device"):
        raise NotImplementedError

    def to_host(self, buffer) -> np.ndarray:
        raise NotImplementedError


class CpuBackend(Backend):
    kind = "cpu"
    xp = np

    def from_host(self, array, device):
        return array

    def to_host(self, buffer):
        return buffer

    as_buffer = staticmethod(np.asarray)
    round_to_bfloat16 = staticmethod(round_to_bfloat16)


_BACKENDS: dict[str, Backend] = {"cpu": CpuBackend()}


def register_backend(backend: Backend) -> None:
    _BACKENDS[backend.kind] = backend


class Device:
    """A place where buffers live and kernels run. Interned: compare with `is` or `==`.

    `task` is None for this process's own devices, or the task of a distributed job that
    holds the device ("ps:0", "worker:1"): such a device is another process's, named so
    that a captured graph can place state and work there (lib/distributed/graphs/)."""

    __slots__ = ("kind", "index", "backend", "task")

    def __init__(self, kind: str, index: int, backend: Backend, task: str | None = None):
        self.kind = kind
        self.index = index
        self.backend = backend
        self.task = task

    @property
    def type(self) -> str:
        """The kind ('cpu' or 'gpu'), under PyTorch's name."""
        return self.kind

    def __repr__(self) -> str:
        return f"device('{self}')"

    def __str__(self) -> str:
        local = self.kind if self.index == 0 and self.kind == "cpu" else \
            f"{self.kind}:{self.index}"
        return local if self.task is None else f"{self.task}/{local}"

    def __reduce__(self):
        return (device, (str(self),))

    # `with rill.device("cpu:1"):` -- a scope; see the module docstring.
    def __enter__(self):
        any_index = getattr(_spelled, "last", None) == (self, True)
        _spelled.last = None
        _push(Scope(self, any_index=any_index))
        return self

    def __exit__(self, *exc):
        _pop()
        return False


_DEVICES: dict[tuple, Device] = {}
# Devices are interned, so `device("gpu")` and `device("gpu:0")` are one object; whether the
# spec a `with` is about to enter named an index is remembered here, per thread, by the parse
# that made it (the `with` statement enters right after evaluating `rill.device(...)`).
_spelled = threading.local()


# PyTorch programs say "cuda" for the accelerator rill calls "gpu".
_SPELLINGS = {"cuda": "gpu"}


def device(spec="cpu") -> Device:
    """Parse 'cpu', 'cpu:1', 'gpu', 'gpu:0' (or pass a Device through); 'cuda' and 'cuda:0'
    are PyTorch's names for 'gpu'. In a distributed job a task may come first: 'ps:0' (that
    task's cpu), 'worker:1/cpu', 'ps:1/cpu:0'; this process's own task names its local
    devices.

    A device is also a scope: inside `with rill.device("cpu:1"):` new tensors land on
    cpu:1, and a capture places the ops it records there. A spec with no index ("gpu")
    scopes to any device of that kind; `rill.device(None)` is a scope that clears them.

    >>> import rill
    >>> with rill.device("cpu:1"):
    ...     rill.zeros(2).device
    device('cpu:1')
    """
    if spec is None:
        return _CLEAR
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise DeviceError(f"expected a device name like 'cpu' or 'gpu:0', got {spec!r}",
                          op="device")
    task, spec = _task_of(spec)
    kind, _, index_text = spec.partition(":")
    kind = _SPELLINGS.get(kind, kind)
    try:
        index = int(index_text) if index_text else 0
    except ValueError:
        raise DeviceError(f"bad device index in {spec!r}", op="device") from None
    if index < 0:
        raise DeviceError(f"bad device index in {spec!r}", op="device")
    key = (kind, index, task)
    found = _DEVICES.get(key)
    if found is not None:
        _spelled.last = (found, not index_text)
        return found
    backend = _BACKENDS.get(kind)
    if task is not None and kind == "cpu":
        # Another process's device: its tensors here are host copies of what that task
        # holds (their initial values), made by the same code on every process.
        backend = _BACKENDS["cpu"]
    if backend is None and kind == "gpu":
        from . import gpu
        try:
            backend = gpu.backend()
        except DeviceError as e:
            raise DeviceError(e.message.replace("'gpu'", repr(spec), 1), op="device") from None
        register_backend(backend)
    if backend is None:
        raise DeviceError(f"unknown device kind {kind!r}; expected 'cpu' or 'gpu'"
                          f"{'' if task else ', optionally after a task (ps:0/cpu)'}",
                          op="device")
    if task is not None and kind == "gpu":
        raise DeviceError(f"{task}/{spec}: placing work on another task's gpu is not "
                          f"supported yet; use '{task}/cpu' (parameter servers hold their "
                          "variables in host memory)", op="device")
    found = _DEVICES[key] = Device(kind, index, backend, task)
    _spelled.last = (found, not index_text)
    return found


# The jobs of a distributed job's tasks (rill-launch --ps P: "ps:0" .. , "worker:0" ..).
TASK_JOBS = ("ps", "worker")


def _task_of(spec: str):
    """(task or None, the device part) of "ps:0", "worker:1/gpu:0", "cpu:1". A task that is
    this process itself (rill.distributed.init() named it) is no task: its devices are the
    local ones."""
    job, colon, rest = spec.partition(":")
    if job not in TASK_JOBS or not colon:
        return None, spec
    number, _, local = rest.partition("/")
    if not number.isdigit() or len(number) > 6:
        raise DeviceError(f"bad task in device {spec!r}: expected '{job}:<number>' as in "
                          f"'{job}:0/cpu'", op="device")
    task = f"{job}:{int(number)}"
    local = local or "cpu"
    if _task_of(local)[0] is not None:
        raise DeviceError(f"device {spec!r} names two tasks", op="device")
    if task == _this_task:
        return None, local
    return task, local


_this_task: str | None = None  # the task this process runs, once rill.distributed.init says


def set_this_task(name: str | None) -> None:
    """Called by rill.distributed.init: devices naming this task ("worker:0/cpu") are this
    process's own. (The distributed layer tells the devices; they never ask it.)"""
    global _this_task
    _this_task = name


cpu = device("cpu")


# ---- scopes --------------------------------------------------------------------------------

class Scope:
    """One `with` level: a device asked for (any index of its kind when `any_index`), a
    tensor to colocate with, or neither (`rill.device(None)`: clears the levels outside)."""

    __slots__ = ("device", "any_index", "colocate")

    def __init__(self, device=None, any_index=False, colocate=None):
        self.device, self.any_index, self.colocate = device, any_index, colocate

    def __enter__(self):
        _push(self)
        return self

    def __exit__(self, *exc):
        _pop()
        return False

    def __repr__(self) -> str:
        if self.colocate is not None:
            return "colocate_with(...)"
        if self.device is None:
            return "device(None)"
        return f"device('{self.device.kind if self.any_index else self.device}')"


_CLEAR = Scope()
_SCOPES: ContextVar[tuple] = ContextVar("rill_device_scopes", default=())


def _push(scope: Scope) -> None:
    _SCOPES.set(_SCOPES.get() + (scope,))


def _pop() -> None:
    _SCOPES.set(_SCOPES.get()[:-1])


def colocate_with(tensor):
    """A scope in which new tensors land on `tensor`'s device and a capture places the ops it
    records beside `tensor` (its variable, or the op that makes it).

    >>> import rill
    >>> from rill.devices import colocate_with
    >>> w = rill.zeros(3, device="cpu:1")
    >>> with colocate_with(w):
    ...     rill.ones(3).device
    device('cpu:1')
    """
    if not hasattr(tensor, "device") or not hasattr(tensor, "_data"):
        raise DeviceError(f"colocate_with takes a tensor, got {type(tensor).__name__}",
                          op="colocate_with")
    return Scope(tensor.device, colocate=tensor)


def requested():
    """(device scope, colocation scope) in force: the innermost of each up to the innermost
    `device(None)`, or None for either. A capture records them on each node as constraints."""
    found_device = found_colocate = None
    for scope in reversed(_SCOPES.get()):
        if scope is _CLEAR or (scope.device is None and scope.colocate is None):
            break
        if scope.colocate is not None:
            found_colocate = found_colocate or scope
        elif found_device is None:
            found_device = scope
    return found_device, found_colocate


def default_device() -> Device:
    """Where a tensor created with no device lands: the innermost scope's device, or cpu."""
    scopes = _SCOPES.get()
    if scopes:
        found = scopes[-1].device
        if found is not None:
            return found
    return cpu


# ---- operands on two devices (bind calls these only when devices differ) --------------------

def operands_on_two_devices(args, first: Device, other: Device, capturing: bool):
    """(args, device) for an op whose inputs are on `first` and `other`. While a capture
    records, values held by another task of a distributed job (a parameter server's
    variables) are read where the op runs: the recorded graph moves them there (placement
    and partition make that a send/recv over MPI). Anything else is the user's to move."""
    local = [a.device for a in args if a.device.task is None]
    if capturing and local and all(d is local[0] for d in local):
        return [a if a.device.task is None else a.to(local[0]) for a in args], local[0]
    check_read(first, other, capturing)
    check_read(other, first, capturing)
    raise DeviceError(f"inputs are on different devices: {first} and {other}; move one with "
                      ".to(device)")


def check_read(held: Device, where: Device, capturing: bool) -> None:
    """Refuses, eagerly, an op on `where` that reads a tensor another task holds (`held` of a
    task): only a captured step reads across tasks (the graph's send/recv)."""
    if held.task is not None and not capturing:
        raise DeviceError(f"inputs are on {held} and {where}: a tensor on {held} is held by "
                          f"task {held.task}, and is read across tasks only inside a "
                          "captured step (@rill.capture or rill.distributed.replicate); "
                          "eagerly, rill.distributed.fetch(module_or_tensors) returns the "
                          "values that task holds now, as local tensors (the tensor "
                          "here keeps the value it was made with)")
