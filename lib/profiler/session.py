"""`rill.profiler.profile`: record every op run inside a `with` block.

    with rill.profiler.profile(record_shapes=True, profile_memory=True) as prof:
        loss = step(x, y)
    print(prof.table(sort_by="self_time", group_by="op", limit=10))
    prof.export_chrome_trace("step.json")        # chrome://tracing or ui.perfetto.dev

Eager ops are recorded on the thread that opened the profile; the nodes of captured
functions on every thread (the per-device executors of a partitioned graph included). See
recorder.py for how, and why it costs nothing while no profile is open.
"""
from __future__ import annotations

import threading
from collections import namedtuple
from time import perf_counter

from ..errors import ArgumentError, CaptureError
from ..capture import executor
from . import state
from .events import Event, assign_children
from .recorder import Frees, ProfilingInterpreter, frames_of_user, fresh_bytes, run_program
from ..eager.context import current, use_interpreter
from ..devices import device as as_device
from ..capture.passes.cost import CostModel

# A graph node's record in the form the placement cost model reads (as f.last_timeline()).
_Timed = namedtuple("_Timed", "device node start end")


class profile:  # noqa: N801 - PyTorch's name (torch.profiler.profile)
    """Records the ops run while it is open: name, device, the user's file:line, input shapes
    (`record_shapes`), time, bytes allocated and freed (`profile_memory`), and the user's
    innermost `stack_depth` frames (`with_stack`).

    Use as a context manager, or call `start()` and `stop()`. Afterwards: `table()`,
    `key_averages()`, `events()`, `export_chrome_trace(path)`, `memory_timeline()`,
    `cost_model()`; `str(prof)` is the table as plain text.
    """

    def __init__(self, *, record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, stack_depth: int = 1):
        if type(stack_depth) is not int or stack_depth < 1:
            raise ArgumentError(f"stack_depth must be a positive int, got {stack_depth!r}",
                                op="profile")
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.stack_depth = stack_depth
        self._events: list = []
        self._frees: list = []  # (time, bytes, device) of buffers seen allocated, then dropped
        self._threads: dict = {}  # ident -> thread name, for the trace's track names
        self._switch = None
        self._watch = None
        self._stopped = False
        self._sorted = False
        self.started = self.stopped = None

    # ---- opening and closing ---------------------------------------------------------------

    def start(self) -> "profile":
        if self._switch is not None or self._stopped:
            raise ArgumentError("this profile was already started; make a new one",
                                op="profile")
        interpreter = current().interpreter
        if interpreter.capturing:
            raise CaptureError("a profile cannot open inside a captured function (it would "
                               "time the trace, not the run): profile the call instead",
                               op="profile")
        self._thread_seen(threading.get_ident())
        self._watch = Frees(self) if self.profile_memory else None
        self._switch = use_interpreter(ProfilingInterpreter(interpreter, self))
        self._switch.__enter__()
        state.ACTIVE.append(self)
        executor.PROFILED_RUN = run_program  # compiled graphs run timed, node by node
        self.started = perf_counter()
        return self

    def stop(self) -> None:
        if self._switch is None:
            raise ArgumentError("this profile is not running: call start() first",
                                op="profile")
        self.stopped = perf_counter()
        state.ACTIVE.remove(self)
        if not state.ACTIVE:
            executor.PROFILED_RUN = None
        switch, self._switch = self._switch, None
        switch.__exit__(None, None, None)
        if self._watch is not None:
            self._watch.close()
        self._stopped = True

    def __enter__(self) -> "profile":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- recording (called by recorder.py) -----------------------------------------------

    def _thread_seen(self, ident) -> None:
        if ident not in self._threads:
            self._threads[ident] = threading.current_thread().name

    def _record_eager(self, prim, args, outs, device, start, end) -> None:
        source, stack, module = frames_of_user(self.stack_depth, True)
        results = outs if prim.multiple_results else (outs,)
        inputs = [a._data for a in args]
        allocated = 0
        for t in results:
            n = fresh_bytes(t._data, inputs)
            allocated += n
            if n and self._watch is not None:
                self._watch.watch(t, n, device)
        self._events.append(Event(
            prim.name, "eager", device, threading.get_ident(), start, end,
            tuple(tuple(a.shape) for a in args) if self.record_shapes else None, source,
            module, stack if self.with_stack else None, allocated))

    def _record_node(self, node, thread, start, end, shapes, allocated, freed) -> None:
        self._events.append(Event(node.op, "graph", node.device, thread, start, end,
                                  shapes if self.record_shapes else None, node.source,
                                  None, None, allocated, node))
        if freed and self.profile_memory:
            self._frees.append((end, freed, node.device))

    def _record_free(self, when, nbytes, device) -> None:
        self._frees.append((when, nbytes, device))

    # ---- reading ---------------------------------------------------------------------------

    def events(self) -> list:
        """Every recorded Event, in order of start (self times worked out)."""
        self._need_stopped("events")
        if not self._sorted:
            assign_children(self._events)
            self._events.sort(key=lambda e: (e.start, -e.end))
            self._sorted = True
        return list(self._events)

    def key_averages(self, group_by: str = "op", group_by_input_shape: bool = False):
        """Events grouped by op name ("op"), by the user's line ("source") or by nn.Module
        path ("module"), as `KeyAverages` (a list of rows; `.table()` renders it)."""
        from .table import key_averages
        return key_averages(self.events(), group_by, group_by_input_shape)

    def table(self, sort_by: str = "self_time", group_by: str = "op", limit: int | None = 20,
              group_by_input_shape: bool = False):
        """The grouped events as a table: `print()` it for plain text, `rich.print()` it (or
        show it in a notebook) for a rich table. `sort_by`: "self_time", "total_time",
        "calls", "allocated" (descending)."""
        return self.key_averages(group_by, group_by_input_shape).table(sort_by=sort_by,
                                                                       row_limit=limit)

    def export_chrome_trace(self, path) -> None:
        """Write the events as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev):
        a track per thread and device, send->recv arrows, and the live bytes as a counter."""
        from .trace import write_chrome_trace
        write_chrome_trace(self, path)

    def memory_timeline(self, device=None) -> list:
        """[(seconds since start, bytes live)], one sample per allocation or free seen while
        the profile was open (needs profile_memory=True). Counts only buffers that ops made
        inside the profile, so it starts at 0. `device` keeps one device's buffers."""
        self._need_stopped("memory_timeline")
        if not self.profile_memory:
            raise ArgumentError("memory was not recorded: open the profile with "
                                "profile_memory=True", op="memory_timeline")
        wanted = None if device is None else as_device(device)
        changes = [(e.end, e.allocated) for e in self._events
                   if e.allocated and (wanted is None or e.device is wanted)]
        changes += [(t, -n) for t, n, d in self._frees if wanted is None or d is wanted]
        changes.sort(key=lambda c: c[0])
        live, samples = 0, [(0.0, 0)]
        for when, delta in changes:
            live += delta
            samples.append((max(when - self.started, 0.0), live))
        return samples

    def cost_model(self):
        """A placement cost model (rill.capture.passes.cost.CostModel) that uses the times
        measured here for the nodes of captured functions (the fastest of repeats)."""
        return CostModel.from_timeline(
            [_Timed(e.device, e.node, e.start, e.end) for e in self.events()
             if e.kind == "graph"])

    def _need_stopped(self, what: str) -> None:
        if not self._stopped:
            raise ArgumentError(f"{what}() reads a finished profile: call it after the with "
                                "block (or stop())", op="profile")

    def __str__(self) -> str:
        if not self._stopped:
            return "<rill.profiler.profile (recording)>"
        return str(self.table())

    def __repr__(self) -> str:
        state_ = "recording" if self._switch is not None else \
            f"{len(self._events)} events" if self._stopped else "not started"
        return f"<rill.profiler.profile ({state_})>"
