"""Where ops are timed: eager ops through an interpreter that wraps the current one, graph
nodes by running a compiled program node by node.

Eager: `bind` calls `current().interpreter.apply(...)` for every op. A profile puts a
`ProfilingInterpreter` (wrapping whichever interpreter was current) into that context for the
thread that opened it, so profiling adds nothing to `bind`: with no profile open, the eager
interpreter is called directly, as before.

Graphs: a compiled `Program` (lib/capture/executor.py) checks `state.ACTIVE` once per call;
while a profile is open it is run here instead, one node at a time, timed, buffers dropped
after their last use as the compiled code does. The check is global, not per thread, because
a partitioned graph runs each device's part on that device's own executor thread.

A gpu op is timed between two stream synchronizations, so that its time is its kernel's, not
its launch's (this slows the profiled run, as any synchronizing profiler does).
"""
from __future__ import annotations

import os
import sys
import threading
import weakref
from time import perf_counter

from ..eager.wrapping import WrappingInterpreter
from ..errors import is_framework_file
from . import state

_framework: dict = {}  # code object -> whether it is rill's own (is_framework_file is slow)


def _is_framework(code) -> bool:
    found = _framework.get(code)
    if found is None:
        found = _framework[code] = is_framework_file(code.co_filename)
    return found


def _synchronize(device) -> None:
    sync = getattr(device.backend, "synchronize", None)
    if sync is not None:
        sync()


class ProfilingInterpreter(WrappingInterpreter):
    """Runs each op with `inner` (the interpreter that was current) and records it."""

    def __init__(self, inner, profile):
        super().__init__(inner)
        self.profile = profile

    def apply(self, prim, args, attrs, avals, device):
        on_host = device.kind == "cpu"
        if not on_host:
            _synchronize(device)
        start = perf_counter()
        outs = self.inner.apply(prim, args, attrs, avals, device)
        if not on_host:
            _synchronize(device)
        end = perf_counter()
        self.profile._record_eager(prim, args, outs, device, start, end)
        return outs


# ---- what an eager op records besides its time ------------------------------------------------

def frames_of_user(stack_depth: int, want_module: bool):
    """(source, stack, module path) of the op being recorded: the user's innermost line, the
    `stack_depth` innermost user frames ("file:line in function"), and the nn.Module path
    ("Net.block.fc1") of the forward calls it is inside (None outside any)."""
    frame = sys._getframe(2)
    source, stack, modules = None, [], []
    while frame is not None:
        code = frame.f_code
        if not _is_framework(code):
            if source is None:
                source = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
            if len(stack) < stack_depth:
                stack.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} "
                             f"in {code.co_name}")
            elif not want_module:
                break
        if want_module and code.co_name == "forward" and code.co_varnames[:1] == ("self",):
            owner = frame.f_locals.get("self")
            if owner is not None and (not modules or modules[-1] is not owner):
                modules.append(owner)
        frame = frame.f_back
    return source, tuple(stack), _module_path(modules[::-1]) if modules else None


def _module_path(modules) -> str:
    """Outermost module's class name, then each inner module's attribute name in its parent."""
    path = [type(modules[0]).__name__]
    for parent, child in zip(modules, modules[1:]):
        children = parent.__dict__.get("_modules") or {}
        name = next((k for k, m in children.items() if m is child), None)
        path.append(name if name is not None else type(child).__name__)
    return ".".join(path)


def fresh_bytes(buffer, inputs) -> int:
    """Bytes a kernel newly allocated for `buffer`: none when it is a view of an input."""
    nbytes = getattr(buffer, "nbytes", 0)
    if nbytes and getattr(buffer, "base", None) is not None:
        import numpy as np
        for other in inputs:
            if isinstance(other, np.ndarray) and isinstance(buffer, np.ndarray) and \
                    np.may_share_memory(buffer, other):
                return 0
    return int(nbytes)


class Frees:
    """Tells a profile when the eager tensors it saw allocated are collected (weak references
    with a callback; none are kept once the profile closes)."""

    def __init__(self, profile):
        self.profile = profile
        self.refs: dict = {}

    def watch(self, tensor, nbytes, device) -> None:
        def collected(ref, nbytes=nbytes, device=device):
            if self.refs.pop(id(ref), None) is not None:
                self.profile._record_free(perf_counter(), nbytes, device)
        ref = weakref.ref(tensor, collected)
        self.refs[id(ref)] = ref

    def close(self) -> None:
        self.refs.clear()


# ---- a compiled graph, node by node -----------------------------------------------------------

class _Plan:
    """What timing a program needs, worked out once per program: input shapes per node and
    the values each node is the last to use (dropped after it, as the compiled code does)."""

    def __init__(self, graph):
        last: dict = {}
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                last[v] = i
            for v in node.outputs:
                last.setdefault(v, i)
        keep = set(graph.outputs)
        self.dead = [[] for _ in graph.nodes]
        for v, i in last.items():
            if v not in keep:
                self.dead[i].append(v)
        self.shapes = [tuple(tuple(v.shape) for v in node.inputs) for node in graph.nodes]


def run_program(program, args):
    """Run a compiled Program's graph node by node, recording each node in every open
    profile; returns what the program returns."""
    # Imported here: capture's transport (and the partitioned programs) load only for jobs
    # that run over tasks, not with `import rill`.
    from ..capture.executor import _execute
    from ..capture.ir import GRAPH_OPS
    from ..capture.transport import Aborted
    graph = program.graph
    plan = program.__dict__.get("_profile_plan")
    if plan is None:
        plan = program.__dict__["_profile_plan"] = _Plan(graph)
    profiles = list(state.ACTIVE)
    thread = threading.get_ident()
    for p in profiles:
        p._thread_seen(thread)
    env: dict = {}
    owned: dict = {}  # value -> bytes its node allocated (freed at its last use)
    for i, (node, step) in enumerate(zip(graph.nodes, program.steps)):
        inputs = [env[v] for v in node.inputs]
        on_host = node.device is None or node.device.kind == "cpu"
        if not on_host:
            _synchronize(node.device)
        start = perf_counter()
        try:
            outs = _execute(node, graph, step, inputs, args)
        except Aborted:
            raise
        except Exception as e:
            raise program._node_error(e, node) from e
        if not on_host:
            _synchronize(node.device)
        end = perf_counter()
        allocated = 0
        if node.op not in GRAPH_OPS:
            for v, buffer in zip(node.outputs, outs):
                n = fresh_bytes(buffer, inputs)
                if n:
                    owned[v] = n
                    allocated += n
        env.update(zip(node.outputs, outs))
        freed = 0
        for v in plan.dead[i]:
            env.pop(v, None)
            freed += owned.pop(v, 0)
        for p in profiles:
            p._record_node(node, thread, start, end, plan.shapes[i], allocated, freed)
    return [env[v] for v in graph.outputs]
