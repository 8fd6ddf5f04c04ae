"""Running a graph: compiled to one Python function, or scheduled on a thread pool.

`Program(graph)` turns the graph into straight-line Python source that calls each node's
kernel on device buffers and drops every buffer after its last use — no `bind`, no Tensor
objects, no tape between nodes, which is where a captured step saves eager mode's overhead.
With `parallel`, nodes instead run as their inputs become ready, independent ones at the same
time on a thread pool (NumPy releases the GIL inside large kernels).

A failing node is reported with the node, as the graph prints it, and the user's line that
made it.
"""
from __future__ import annotations

import functools
import itertools
import keyword
import math
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..dtypes import bfloat16
from ..eager.interpreter import CHECK_KERNELS, check_kernel_result, kernel_error
from ..errors import CaptureError
from ..tensor import new_tensor
from . import graph_ops
from .donation import ONE_LOCAL, donor, exclusive, row_update
from .ir import GRAPH_OPS, Graph, _Names, format_node
from ..ops.creation import as_tensor

_programs = itertools.count()
# Heavy nodes (elements read and written) worth a trip through the thread pool.
PARALLEL_MIN_ELEMENTS = 1 << 20


# "auto": calls timed each way before choosing, when the graph could overlap heavy nodes; the
# pool must win by PARALLEL_MARGIN, so that noise does not pick it where it only ties.
TRIAL_CALLS = 5
TRIAL_WARM_CALLS = 3
PARALLEL_MARGIN = 0.9
# ... and only with this many of rill's threads: the pool's schedule runs heavy nodes side by
# side, each on one core, where one node's kernels alone use every core (oneDNN, BLAS and the
# C passes on OpenMP's team). On two cores it lost: GoogLeNet's captured step took 350 ms on
# the pool against 245 straight, and after the pool's trial calls the straight-line step
# stayed at 290 ms. (Unmeasured on more cores: there the trials decide.)
TRIAL_MIN_THREADS = 4


# Set by rill.profiler while a profile records (its recorder's run_program, which runs the
# program node by node, timed); None otherwise. The profiler sits above capture and sets
# it; the executor never imports the profiler.
PROFILED_RUN = None


class Program:
    """graph -> callable(args) -> output buffers; args are the input buffers by position.

    `parallel`: False runs the straight-line code, True the thread-pool scheduler, "auto"
    the straight-line code unless two heavy nodes could overlap and rill runs on at least
    TRIAL_MIN_THREADS threads; then the first calls run both ways, timed, and the faster is
    kept. (Whether overlap pays depends on
    the machine: on two cores, memory-bound passes beside multithreaded BLAS lose to the
    straight line; on many cores they win.) Only host kernels overlap: a graph with a node
    on another device runs straight-line whatever `parallel` says (a GPU kernel's call is a
    launch onto the device's one stream, which threads cannot overlap, and Triton's
    interpreter runs one kernel at a time).
    """

    def __init__(self, graph: Graph, parallel: bool | str = "auto"):
        self.graph = graph
        self.steps = [_kernel_of(node, graph) for node in graph.nodes]
        self._compile()
        self._trials = None
        self._warm_calls = 0
        if not all(_on_host(node) for node in graph.nodes):
            parallel = False
        if parallel == "auto":
            self._trials = {True: [], False: []} if _threads() >= TRIAL_MIN_THREADS and \
                _worth_parallel(graph) else None
            parallel = False
        self.parallel = bool(parallel)
        if self.parallel or self._trials is not None:
            self._schedule = _Schedule(graph, self.steps)

    def __call__(self, args):
        if PROFILED_RUN is not None:  # one check per call, none per node
            return PROFILED_RUN(self, args)
        if self._trials is not None:
            return self._trial(args)
        if self.parallel:
            try:
                return self._run_parallel(args)
            finally:  # BLAS's thread count, if a kernel on a pool thread could not restore it
                from rill.kernels.numpy.parallel import settle_blas_threads
                settle_blas_threads()
        try:
            return self._run(args)
        except Exception as e:
            raise self._node_error(e, self._failed_node(e)) from e

    def _trial(self, args):
        """One call of the trials: TRIAL_WARM_CALLS untimed, then TRIAL_CALLS timed the
        straight-line way, then TRIAL_CALLS the pool's; then keep the faster. Not alternating:
        a call right after the other way's ran slower (AlexNet's captured step, straight-line:
        360-410 ms right after a pool call, 250-290 after its own), so alternated trials
        picked the pool, which then ran 10-15 % slower. Not from the first call: the first
        few ran 1.5-4x a warm one (first-time allocations, oneDNN's kernels built)."""
        trials = self._trials
        if self._warm_calls < TRIAL_WARM_CALLS:
            self._warm_calls += 1
            self._trials = None  # run as a plain (straight-line) call
            try:
                return self(args)
            finally:
                self._trials = trials
        way = len(trials[False]) >= TRIAL_CALLS
        self.parallel = way
        start = time.perf_counter()
        self._trials = None  # run as a plain call
        try:
            out = self(args)
        finally:
            self._trials = trials
        trials[way].append(time.perf_counter() - start)
        if min(map(len, trials.values())) >= TRIAL_CALLS:
            self.parallel = min(trials[True]) < PARALLEL_MARGIN * min(trials[False])
            self._trials = None
        return out

    # ---- straight-line code ----------------------------------------------------------------

    def _compile(self) -> None:
        """Straight-line source for the graph. By construction it holds only names rill makes
        (t<n> for values, K/A/C/G/F/S<n> for objects put in its scope, keywords as the
        primitives declare their attrs, input positions the input nodes checked as ints)
        and nothing from the graph's data: every attr value, kernel and variable reaches
        the code as an object in the scope, never as text, so a graph loaded from a file
        cannot inject code."""
        graph = self.graph
        names: dict = {}
        last_use: dict = {}
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                last_use[v] = i
        for v in graph.outputs:
            last_use[v] = len(graph.nodes)
        scope = {"check": check_kernel_result}
        lines = ["def run(args):"]
        self.lines: dict = {}
        # Planned values are written into buffers kept across calls (passes/memory.py).
        memory = _memory_plan(graph)
        self.memory = memory
        if memory is not None:
            arenas: list = []  # one set of slots per call running at this moment
            scope["take"] = lambda: arenas.pop() if arenas else memory.new_arena()
            scope["give"] = arenas.append
            lines += ["  R = take()", "  try:"]
        for i, (node, step) in enumerate(zip(graph.nodes, self.steps)):
            outs = [names.setdefault(v, f"t{len(names)}") for v in node.outputs]
            ins = ", ".join(names[v] for v in node.inputs)
            targets = ", ".join(outs) + ("," if len(outs) == 1 else "")
            slots = memory.slot_of.get(i) if memory is not None else None
            if row_update(graph, i, last_use):
                scope[f"K{i}"], call = _row_update_call(step, i, ins, node.attrs, scope)
                code = f"{outs[0]} = {call}"
            elif slots is not None:
                scope[f"K{i}"], call = _planned_call(node, step, i, ins, slots, scope)
                code = f"{targets} = {call}"
                for j, (v, name) in enumerate(zip(node.outputs, outs)):
                    if CHECK_KERNELS:
                        scope[f"P{i}"] = node.primitive
                        scope[f"S{i}_{j}"] = (v.shape, v.dtype)
                        code += f"; check(P{i}, {name}, S{i}_{j})"
            elif (given := donor(graph, i, last_use)) is not None:
                scope[f"K{i}"], call = _donating_call(node, step, i, ins, given, scope)
                code = f"{outs[0]} = {call}"
                if CHECK_KERNELS:
                    scope[f"P{i}"] = node.primitive
                    scope[f"S{i}_0"] = (node.outputs[0].shape, node.outputs[0].dtype)
                    code += f"; check(P{i}, {outs[0]}, S{i}_0)"
            elif node.op == "input":  # _input checked the index: an int >= 0
                code = f"{outs[0]} = args[{node.attrs['index']}]"
            elif node.op == "constant":  # the same buffer every call: one name in scope
                scope[f"C{i}"], = step(None, ())
                code = f"{outs[0]} = C{i}"
            elif node.op in GRAPH_OPS:
                scope[f"G{i}"] = step
                call = f"G{i}(args, ({ins}{',' if len(node.inputs) == 1 else ''}))"
                code = f"{targets} = {call}" if outs else call
            else:
                scope[f"K{i}"] = step
                call = f"K{i}({ins}{', ' if ins else ''}{_keywords(node, i, scope)})"
                code = f"{targets if node.primitive.multiple_results else outs[0]} = {call}"
                for j, (v, name) in enumerate(zip(node.outputs, outs)):
                    fix = _fixup(v)
                    if fix is not None:
                        scope[f"F{i}_{j}"] = fix
                        code += f"; {name} = F{i}_{j}({name})"
                    if CHECK_KERNELS:
                        scope[f"P{i}"] = node.primitive
                        scope[f"S{i}_{j}"] = (v.shape, v.dtype)
                        code += f"; check(P{i}, {name}, S{i}_{j})"
            dead = [names[v] for v in dict.fromkeys(node.inputs + node.outputs)
                    if last_use.get(v, -1) <= i and v not in graph.outputs]
            if dead:
                code += f"; del {', '.join(dead)}"
            self.lines[len(lines) + 1] = node
            lines.append("    " + code)
        outputs = ", ".join(names[v] for v in graph.outputs)
        lines.append(f"    return [{outputs}]")
        if memory is not None:
            lines.append("  finally:")
            lines.append("    give(R)")
        self.source = "\n".join(lines)
        self.filename = f"<rill graph #{next(_programs)}>"
        exec(compile(self.source, self.filename, "exec"), scope)
        self._run = scope["run"]

    def _failed_node(self, e: BaseException):
        tb = e.__traceback__
        found = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == getattr(self, "filename", None):
                found = self.lines.get(tb.tb_lineno)
            tb = tb.tb_next
        return found

    def _node_error(self, e: BaseException, node):
        if node is None:
            return e
        where = format_node(node, _names_of(self.graph))
        cause = kernel_error(e, node.op, node.device.kind)
        err = type(cause)(f"{cause.message}\n  while running {where}", op=cause.op or node.op)
        err.location = node.source
        return err

    # ---- scheduled on threads --------------------------------------------------------------

    def _run_parallel(self, args):
        graph, plan = self.graph, self._schedule
        env: dict = {}
        waiting = dict(plan.waiting)
        uses = dict(plan.uses)
        finished: queue.SimpleQueue = queue.SimpleQueue()
        step_of = plan.step_of

        def task(node):
            try:
                values = _execute(node, graph, step_of[node], [env[v] for v in node.inputs],
                                  args)
                for v, value in zip(node.outputs, values):
                    env[v] = value
                finished.put((node, None))
            except Exception as e:  # handed to the scheduling thread, which raises it
                finished.put((node, e))

        ready = list(plan.sources)
        in_flight = 0
        pool = _pool()
        while ready or in_flight:
            for node in ready:
                in_flight += 1
                if node in plan.heavy:
                    pool.submit(task, node)
                else:
                    task(node)
            ready = []
            node, error = finished.get()
            in_flight -= 1
            if error is not None:
                raise self._node_error(error, node) from error
            for v in node.inputs:  # a value no one else waits for: its buffer can go
                uses[v] -= 1
                if uses[v] == 0:
                    env.pop(v, None)
            for user in plan.users.get(node, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    ready.append(user)
        return [env[v] for v in graph.outputs]


class _Schedule:
    """What the thread-pool scheduler needs of a graph, worked out once: how many nodes each
    node waits for, who waits for it, how many nodes read each value (graph outputs count
    as one more, so they stay), and which nodes are heavy enough for a pool thread."""

    def __init__(self, graph: Graph, steps):
        self.step_of = dict(zip(graph.nodes, steps))
        self.waiting: dict = {}
        self.users: dict = {}
        self.uses: dict = {}
        for node in graph.nodes:
            before = {v.node for v in node.inputs} | set(node.after)
            self.waiting[node] = len(before)
            for b in before:
                self.users.setdefault(b, []).append(node)
            for v in node.inputs:
                self.uses[v] = self.uses.get(v, 0) + 1
        for v in graph.outputs:
            self.uses[v] = self.uses.get(v, 0) + 1
        self.sources = [n for n in graph.nodes if self.waiting[n] == 0]
        self.heavy = {n for n in graph.nodes if _is_heavy(n)}


def program_of(graph) -> Program:
    """The graph's straight-line Program, compiled once per graph and kept on it: how a node
    runs a subgraph it holds (control flow's bodies and branches, a fused group node by
    node)."""
    found = graph.__dict__.get("_program")
    if found is None:
        found = graph.__dict__["_program"] = Program(graph, parallel=False)
    return found


def _execute(node, graph, step, inputs, args):
    if node.op in GRAPH_OPS:
        return step(args, inputs)
    out = step(*inputs, **node.attrs)
    outs = out if node.primitive.multiple_results else (out,)
    fixed = []
    for v, o in zip(node.outputs, outs):
        backend = v.device.backend
        if type(o) is not np.ndarray:
            o = backend.as_buffer(o)
        if v.dtype is bfloat16:
            o = backend.round_to_bfloat16(o)
        if CHECK_KERNELS:
            check_kernel_result(node.primitive, o, (v.shape, v.dtype))
        fixed.append(o)
    return fixed


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 2,
                                   thread_name_prefix="rill-graph",
                                   initializer=_one_core_each)
    return _POOL


def _one_core_each() -> None:
    """A scheduler thread's kernels run on it alone, as in one of parallel.split's workers:
    the nodes beside it use the other cores (on all of them each, they would oversubscribe
    the machine), and no scheduler thread makes an OpenMP team of its own, which GNU OpenMP
    would keep for the thread's life."""
    from rill.kernels.numpy import parallel
    parallel._inside.active = True


_POOL = None


def _elements(node) -> int:
    total = 0
    for v in list(node.inputs) + node.outputs:
        n = 1
        for s in v.shape:
            n *= s
        total += n
    return total


def _on_host(node) -> bool:
    return node.device is None or node.device.kind == "cpu"


def _is_heavy(node) -> bool:
    return node.op not in GRAPH_OPS and \
        _elements(node) >= PARALLEL_MIN_ELEMENTS


def _threads() -> int:
    from rill.kernels.numpy import parallel
    return parallel.THREADS


def _worth_parallel(graph: Graph) -> bool:
    """True when two heavy nodes could run at once (neither needs the other)."""
    heavy = [n for n in graph.nodes if _is_heavy(n)]
    if len(heavy) < 2:
        return False
    position = {n: i for i, n in enumerate(graph.nodes)}
    ancestors: dict = {}  # node -> bit set of the positions of the nodes it needs
    for n in graph.nodes:
        bits = 0
        for p in {v.node for v in n.inputs} | set(n.after):
            bits |= ancestors[p] | (1 << position[p])
        ancestors[n] = bits
    return any(not (ancestors[b] >> position[a]) & 1
               for a, b in itertools.combinations(heavy, 2))


def _keywords(node, i: int, scope: dict) -> str:
    """A node's attrs as keyword arguments in its call's source: `axis=A3_0` (a keyword
    written out costs a third of what `**attrs` does: 50 ops of a small chain, 2 us a call).
    The values reach the code as objects in the scope; a name is written only when the
    primitive declares it (rill's own names, never ones only the graph has) and it is a
    plain identifier, else all the attrs pass as one dict."""
    declared = node.primitive.attrs or {}
    if not all(type(k) is str and k in declared and k.isidentifier() and
               not keyword.iskeyword(k) for k in node.attrs):
        scope[f"A{i}"] = node.attrs
        return f"**A{i}"
    words = []
    for j, (name, value) in enumerate(node.attrs.items()):
        scope[f"A{i}_{j}"] = value
        words.append(f"{name}=A{i}_{j}")
    return ", ".join(words)


def _kernel_of(node, graph):
    """What runs the node: a graph op's handler, or the primitive's kernel for its device."""
    if node.op in GRAPH_OPS:
        return graph_ops.handler(node, graph)
    prim = node.primitive
    kernel = prim.kernels.get(node.device.kind)
    if kernel is None:
        raise prim.missing_kernel(node.device.kind)
    if getattr(kernel, "reads_dtypes", False) and len(node.outputs) == 1 and \
            node.outputs[0].dtype is bfloat16:  # as the eager interpreter tells it
        kernel = functools.partial(kernel, dtypes=tuple(v.dtype for v in node.inputs))
    below = getattr(kernel, "ufunc_below", None)
    if below is not None and _static_size(node) < below:
        # The kernel is exactly its ufunc at this size (kernels/numpy/elementwise.py: `add`
        # leaves it only for OpenMP's team on large operands): the program calls the ufunc,
        # without the wrapper's checks, which cost a small op ~20 % of its call.
        return kernel.ufunc
    return kernel


def _static_size(node) -> float:
    """The elements of the node's largest output (every operand of an elementwise node has
    at most as many); inf where a dimension is not a number known when capturing."""
    sizes = [math.prod(v.shape) if all(isinstance(d, int) for d in v.shape) else math.inf
             for v in node.outputs]
    return max(sizes, default=math.inf)


def _memory_plan(graph):
    """The graph's memory plan when it is marked for one and runs on the host alone."""
    from .passes import memory
    if not memory.ENABLED or not graph.__dict__.get("plan_memory") or \
            not all(_on_host(n) for n in graph.nodes):
        return None
    found = memory.plan(graph)
    # Slots stay allocated through the call: a plan that would raise the peak is not used.
    return found if found.slot_of and found.peak_bytes <= found.unplanned_peak_bytes else None


def _planned_call(node, step, i: int, ins: str, slots, scope):
    """(callable, call text) computing node into its planned buffers R[slot]."""
    if node.op == "fused":
        scope[f"A{i}"] = node.attrs
        given = ", ".join("None" if s is None else f"R[{s}]" for s in slots)
        return step, f"K{i}({ins}, out=({given}{',' if len(slots) == 1 else ''}), **A{i})"
    from rill.kernels.numpy.fused import _ufunc_of
    ufunc = _ufunc_of(node)
    # Into the slot only from C-ordered inputs: NumPy would make a C-ordered result of them;
    # of others, a result in their order, which a later sum or GEMM would add up in.
    c_order = " and ".join(f"{name}.flags.c_contiguous" for name in ins.split(", "))
    return ufunc, f"(K{i}({ins}, out=R[{slots[0]}]) if {c_order} else K{i}({ins})),"


def _donating_call(node, step, i: int, ins: str, index: int, scope):
    """(callable, call text) computing node into the buffer of its input `index` when that
    buffer is the program's alone at run time (capture/donation.py), else as usual."""
    from rill.kernels.numpy.fused import _ufunc_of
    names = ins.split(", ")
    buffer = names[index]
    others = ", ".join(n for k, n in enumerate(names) if k != index)
    scope["exclusive"] = exclusive
    scope[f"U{i}"], scope[f"A{i}"] = _ufunc_of(node), node.attrs
    test = f"exclusive({buffer}, {ONE_LOCAL}{', ' if others else ''}{others})"
    return step, f"U{i}({ins}, out={buffer}) if {test} else K{i}({ins}, **A{i})"


def _row_update_call(step, i: int, ins: str, attrs, scope):
    """(callable, call text) adding a table's rows in the variable's own buffer when the
    variable's slot and the program's local are its only holders (donation.py:row_update),
    else index_add's kernel, which copies the table."""
    from rill.kernels.numpy.indexing import add_into
    scope["exclusive"], scope["add_into"], scope[f"A{i}"] = exclusive, add_into, attrs
    table, rest = ins.split(", ")[0], ", ".join(ins.split(", ")[1:])
    test = f"exclusive({table}, {ONE_LOCAL + 1}, {rest})"
    return step, f"add_into({ins}, **A{i}) if {test} else K{i}({ins}, **A{i})"


def _fixup(v):
    """What brings a kernel's raw result to the value's spec (None if nothing is needed)."""
    backend = v.device.backend
    if v.dtype is bfloat16:
        return lambda out: backend.round_to_bfloat16(backend.as_buffer(out))
    if v.shape == ():
        return backend.as_buffer  # reductions to 0-d may return NumPy scalars
    return None


def _names_of(graph) -> _Names:
    names = _Names()
    for node in graph.nodes:  # name values in print order, so messages match print(graph)
        for v in node.outputs:
            names[v]
    return names


# ---- partial execution ---------------------------------------------------------------------

def run(graph: Graph, fetches, feeds=None, args=()):
    """Run only what `fetches` need; a value in `feeds` is replaced by the given tensor (and
    what produced it does not run). Fetches and feed keys are Values or their printed names
    ("%7", "%x0"). `args` are the graph's inputs, needed only where the fetches reach them.
    Returns a Tensor per fetch (one Tensor for a single fetch)."""
    single = not isinstance(fetches, (list, tuple))
    lookup = _lookup(graph)
    fetch_values = [lookup(f) for f in ([fetches] if single else fetches)]
    fed = {lookup(k): v for k, v in (feeds or {}).items()}
    for value, given in fed.items():
        t = as_tensor(given)
        if (t.shape, t.dtype) != (value.shape, value.dtype):
            raise CaptureError(f"the feed for a value of {value.dtype}{list(value.shape)} is "
                               f"{t.dtype}{list(t.shape)}", op="run")
        fed[value] = t
    key = (tuple(map(id, fetch_values)), tuple(map(id, fed)))
    cache = graph.__dict__.setdefault("_partial", {})
    entry = cache.get(key)
    if entry is None:
        entry = cache[key] = _prune(graph, fetch_values, list(fed))
    program, needed_inputs = entry
    buffers = [fed[v]._data for v in fed]
    for index in needed_inputs:
        if index >= len(args):
            raise CaptureError(f"the fetches need input %x{index}: pass it in args", op="run")
        buffers.append(as_tensor(args[index])._data)
    outs = [new_tensor(b, v.dtype, v.device) for b, v in zip(program(buffers), fetch_values)]
    return outs[0] if single else outs


def _lookup(graph):
    names = {name: v for v, name in _names_of(graph).names.items()}

    def find(key):
        if isinstance(key, str):
            if key not in names:
                raise CaptureError(f"the graph has no value named {key}", op="run")
            return names[key]
        return key
    return find


def _prune(graph, fetches, fed):
    """A graph of the nodes the fetches need, fed values and needed inputs as its inputs."""
    keep, stack = set(), [v.node for v in fetches if v not in fed]
    while stack:
        node = stack.pop()
        if node in keep:
            continue
        keep.add(node)
        stack += [v.node for v in node.inputs if v not in fed] + list(node.after)
    sub = Graph(name=graph.name + "_partial", variables=graph.variables)
    sub.placed = graph.placed
    mapping: dict = {}
    for v in fed:
        mapping[v] = sub.add("input", (), {"index": len(mapping)}, ((v.shape, v.dtype),),
                             v.device).outputs[0]
    needed_inputs = []
    copies: dict = {}
    for node in graph.nodes:
        if node not in keep:
            continue
        if node.op == "input":
            index = node.attrs["index"]
            needed_inputs.append(index)
            attrs = {"index": len(fed) + len(needed_inputs) - 1}
        else:
            attrs = node.attrs
        copy = sub.add(node.op, [mapping[v] for v in node.inputs], attrs,
                       [(v.shape, v.dtype) for v in node.outputs], node.device, node.source,
                       [copies[a] for a in node.after])
        copy.constraint = node.constraint
        if copy.constraint is not None and copy.constraint.colocate is not None:
            from .ir import Constraint
            c = copy.constraint
            copy.constraint = Constraint(c.device, c.any_index, mapping.get(c.colocate))
        copies[node] = copy
        mapping.update(zip(node.outputs, copy.outputs))
    sub.outputs = [mapping[v] for v in fetches]
    # Pruned first, then placed and partitioned: only what the fetches need is spread.
    from .passes.pipeline import lower
    placed, parted = lower(sub.lint())
    if len(parted.devices()) > 1:
        from .partitioned import PartitionedProgram
        return PartitionedProgram(parted), needed_inputs
    return Program(placed, parallel=False), needed_inputs
