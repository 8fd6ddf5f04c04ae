"""@rill.capture: a Python function, method or Module recorded once per signature into a
graph, optimized, and run as a compiled program on each call.

>>> import rill
>>> @rill.capture
... def f(x, y):
...     return rill.tanh(x @ y) * 2.0
>>> out = f(rill.ones((2, 3)), rill.ones((3, 2)))
>>> print(f.graph_for(rill.ones((2, 3)), rill.ones((3, 2))))  # doctest: +ELLIPSIS
f(%x0, %x1):
  %0 : f32[2,2] = matmul(%x0, %x1)...
"""
from __future__ import annotations

import functools
import inspect
import threading
import warnings
import weakref
from collections import OrderedDict

from ..eager.context import current, use_interpreter
from ..errors import CaptureError
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor, new_tensor
from ..tree import flatten
from . import escape, guards, python_reads
from .evaluate import evaluate
from .holders import is_module, is_optimizer
from .executor import Program
from .serialize import describe
from .signature import _readable, explain, leaf_key, leaves_with_paths, structure
from .tracer import Tracer


class CaptureWarning(UserWarning):
    """A captured function traced again, or dropped a variant: worth knowing, not an error."""


class Variant:
    """One traced signature: its graph (as traced and as optimized) and compiled program."""

    def __init__(self, traced, graph, program, template, rebuild, grad_guards, checks,
                 differentiable):
        self.traced, self.graph, self.program = traced, graph, program
        self.template, self.rebuild = template, rebuild
        self.grad_guards, self.checks = grad_guards, checks
        self.guarded = bool(grad_guards or checks)
        self.earlier: list = []  # same key, other guarded values (see _variant)
        self.cleared: list = []  # tensors whose .grad the function leaves None
        self.differentiable = differentiable

    def guard_failure(self, name: str) -> str | None:
        for check in self.checks:
            why = check.failure()
            if why is not None:
                return f"{name} is traced again because {why}"
        for owner, grad_was_none in self.grad_guards:
            if (owner.grad is None) != grad_was_none:
                state = "None" if grad_was_none else "set"
                hint = ("; if the function clears gradients itself, use zero_grad(), which a "
                        "capture sees (p.grad = None written directly is invisible to it, so "
                        "every call retraces)") if grad_was_none else ""
                return (f"{name} is traced again because a .grad it accumulates into was "
                        f"{state} when traced and is {'set' if grad_was_none else 'None'} now"
                        f"{hint}")
        return None


class CapturedFunction:
    """A function recorded into graphs, one per call signature. See `capture`."""

    def __init__(self, fn, *, name: str | None = None, optimize: bool = True,
                 parallel: bool | str = "auto", max_variants: int = 8, module=None,
                 devices=None, timeline: bool = False, replicas: dict | None = None,
                 memory_budget: int | None = None):
        self.fn = fn
        self.memory_budget = memory_budget  # bytes; passes/remat.py
        self.replicas = replicas  # set by rill.distributed.replicate
        self.devices = tuple(devices or ())
        self.timeline = timeline
        self._last_program = None
        self.module = module
        self.name = name or getattr(fn, "__name__", None) or type(fn).__name__
        self.optimize = optimize
        self.parallel = parallel
        self.max_variants = max_variants
        self.variants: OrderedDict = OrderedDict()
        self.retraces: list[str] = []
        self._said: set = set()
        self._lock = threading.RLock()
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        try:
            target = fn.forward if module is not None else fn
            self._arg_names = [p for p in inspect.signature(target).parameters]
        except (TypeError, ValueError):
            self._arg_names = []
        functools.update_wrapper(self, fn if module is None else module.forward, updated=())

    # ---- calling ---------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        ctx = current()
        if ctx.interpreter.reruns_python:  # a transform (vmap) interprets each op itself
            return self.fn(*args, **kwargs)
        key, tensors = _key(args, kwargs, ctx.grad_enabled)
        variant = self.variants.get(key)
        # A guarded variant whose guards hold runs as an unguarded one does (neither moves in
        # the variants' order here); a failing guard is judged again under the lock
        if variant is None or variant.guarded and variant.guard_failure(self.name) is not None:
            variant = self._variant(key, args, kwargs, variant)
        if ctx.interpreter.capturing:
            guards.inherit(variant.checks)
        if ctx.interpreter.capturing or (ctx.grad_enabled and variant.differentiable):
            outs = evaluate(variant.graph, tensors)
        else:
            self._last_program = variant.program
            buffers = variant.program([t._data for t in tensors])
            outs = [new_tensor(b, v.dtype, v.device)
                    for b, v in zip(buffers, variant.graph.outputs)]
        for owner in variant.cleared:  # the graph has no "None": set after it ran
            owner.grad = None
        return variant.rebuild(outs)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            bound = self._bound[instance] = CapturedFunction(
                self.fn.__get__(instance, owner), name=self.name, optimize=self.optimize,
                parallel=self.parallel, max_variants=self.max_variants, devices=self.devices,
                timeline=self.timeline, replicas=self.replicas,
                memory_budget=self.memory_budget)
        return bound

    def graph_for(self, *args, optimized: bool = True, **kwargs):
        """The graph these arguments run (traced now if they have not been seen)."""
        key, _ = _key(args, kwargs, current().grad_enabled)
        variant = self._variant(key, args, kwargs, self.variants.get(key))
        return variant.graph if optimized else variant.traced

    def partitions_for(self, *args, **kwargs) -> dict:
        """{device name: Graph}: the per-device subgraphs these arguments run, their
        cross-device edges `send` and `recv` nodes (one device: the whole graph)."""
        from .passes.partition import split
        key, _ = _key(args, kwargs, current().grad_enabled)
        variant = self._variant(key, args, kwargs, self.variants.get(key))
        return {str(d): g for d, g in split(variant.partitioned).items()}

    def last_timeline(self) -> list:
        """What the last compiled call ran where and when: [TimelineEntry(device, node,
        start, end)], seconds from the start of the step. Needs `capture(..., timeline=True)`
        (timing each node costs a little on every call)."""
        if not self.timeline:
            raise CaptureError(f"{self.name} keeps no timeline: capture it with "
                               "rill.capture(fn, timeline=True)", op="last_timeline")
        program = self._last_program
        if program is None or program.last_timeline is None:
            raise CaptureError(f"{self.name} has not run a compiled step yet (a call that "
                               "records gradients runs through evaluate and is not timed)",
                               op="last_timeline")
        return list(program.last_timeline)

    def save(self, path, *args, **kwargs) -> None:
        """Write every traced variant (or, given example arguments, the one for them), its
        state and its signature to the directory `path`; `rill.load_graph(path)` runs it with
        none of this code present, choosing the variant by its arguments as this function
        does. See docs/GRAPH_FORMAT.md."""
        from .serialize import save_graph
        if args or kwargs:
            key, _ = _key(args, kwargs, current().grad_enabled)
            chosen = [self._variant(key, args, kwargs, self.variants.get(key))]
        else:
            chosen = list(self.variants.values())
        if not chosen:
            raise CaptureError(f"{self.name} has not been traced yet: call it once, or pass "
                               "example arguments to save()", op="save")
        if any(v.signature is None for v in chosen):
            raise CaptureError(f"{self.name} takes or returns values other than tensors, "
                               "numbers, strings and None, which a saved graph cannot hold",
                               op="save")
        save_graph(path, [(v.graph, *v.signature) for v in chosen], self.name)

    # ---- tracing ---------------------------------------------------------------------------

    def _variant(self, key, args, kwargs, variant):
        with self._lock:
            earlier: list = []  # variants of this key whose guards failed, newest first
            if variant is not None:
                why = variant.guard_failure(self.name)
                if why is None:
                    self.variants.move_to_end(key)
                    return variant
                earlier = [variant] + variant.earlier
                for other in earlier[1:]:  # e.g. back to train() after eval(): traced before
                    if other.guard_failure(self.name) is None:
                        other.earlier = [v for v in earlier if v is not other]
                        variant.earlier = []
                        self.variants[key] = other
                        return other
                self._say(why)
            elif self.variants:
                last = next(reversed(self.variants))
                self._say(explain(self.name, _describe(last), _describe(key), self._arg_names))
            variant = self._trace(args, kwargs)
            variant.earlier = earlier[: self.max_variants - 1]
            for v in earlier:
                v.earlier = []
            self.variants[key] = variant
            if len(self.variants) > self.max_variants:
                self.variants.popitem(last=False)
                self._say(f"{self.name} has more than max_variants={self.max_variants} traced "
                          "variants; the oldest is dropped. Arguments that change on every call "
                          "(Python numbers, shapes) cause this: pass numbers as tensors")
            return variant

    def _say(self, message: str) -> None:
        self.retraces.append(message)
        if message not in self._said:
            self._said.add(message)
            warnings.warn(message, CaptureWarning, stacklevel=4)

    def _trace(self, args, kwargs) -> Variant:
        tracer = Tracer(self.name, _variable_names(self, args, kwargs))
        flat, rebuild_args = flatten((args, kwargs), is_leaf=lambda o: isinstance(o, Tensor))
        paths = {id(leaf): path for path, leaf in leaves_with_paths((args, kwargs))
                 if isinstance(leaf, Tensor) and leaf.requires_grad}
        traced_args = []
        for leaf in flat:
            if isinstance(leaf, Tensor):
                # Inputs are the first nodes, so their count so far is this one's index.
                node = tracer._add("input", (), {"index": len(tracer.graph.nodes)},
                                   ((leaf.shape, leaf.dtype),), leaf.device)
                t = new_tensor(node.outputs[0], leaf.dtype, leaf.device)
                t.requires_grad = leaf.requires_grad
                if leaf.requires_grad:  # backward must not reach it (see _argument_reached)
                    path = paths.get(id(leaf))
                    name = _readable(path, self._arg_names) if path else "a tensor argument"
                    tracer.arguments[id(t)] = (name, leaf._node is not None)
                leaf = t
            traced_args.append(leaf)
        a, kw = rebuild_args(traced_args)
        try:
            with use_interpreter(tracer), guards.collecting() as collected, \
                    python_reads.watching(self.fn, collected, self.name):
                result = self.fn(*a, **kw)
                out_flat, rebuild_out = flatten(result, is_leaf=lambda o: isinstance(o, Tensor))
                template, values, differentiable = [], [], False
                for leaf in out_flat:
                    if isinstance(leaf, Tensor):
                        values.append(tracer.value_of(leaf))
                        template.append(_SLOT)
                        differentiable |= leaf.requires_grad and (
                            leaf._node is None or leaf._node.inputs is not None)
                    elif isinstance(leaf, SparseRows):  # two graph values and a shape
                        values += [tracer.value_of(leaf.indices), tracer.value_of(leaf.rows)]
                        template.append(SparseSlot(leaf.shape))
                    else:
                        template.append(leaf)
                tracer.finish()
        except BaseException:
            tracer.restore()
            raise
        escape.find(self.name, _roots(self, args, kwargs), tracer.own)
        if not any(isinstance(leaf, Tensor) for leaf in flat):
            self._warn_about_read_only_tensors(tracer.graph, _variable_names(self, args, kwargs))
        graph = tracer.graph
        graph.outputs = values
        late = _variable_names(self, args, kwargs)  # slots made during the trace, by name
        for var in graph.variables:
            if var.name == f"v{graph.variables.index(var)}" and id(var.owner) in late:
                var.name = late[id(var.owner)]
        graph.lint()
        # a machine's first run: the C modules the step's kernels load, built meanwhile
        from rill.kernels.native import build as native_build, modules_for
        native_build.prefetch(modules_for(graph))
        optimized = graph
        if self.optimize or self.memory_budget is not None:
            from .passes.pipeline import optimize
            optimized = optimize(graph, None if self.optimize else [],
                                 memory_budget=self.memory_budget)
        from .passes.pipeline import lower
        optimized, partitioned = lower(optimized, self.devices)
        if any(d.task is not None for d in partitioned.devices()):
            from .partitioned import task_program  # parts on other tasks: rill.distributed's
            program = task_program(partitioned, name=self.name, replicas=self.replicas)
        elif len(partitioned.devices()) > 1 or self.timeline:
            from .partitioned import PartitionedProgram
            program = PartitionedProgram(partitioned, timeline=self.timeline)
        else:
            program = Program(optimized, self.parallel)

        def rebuild(outs):
            it = iter(outs)
            return rebuild_out([next(it) if x is _SLOT else
                                SparseRows(next(it), next(it), x.shape)
                                if type(x) is SparseSlot else x for x in template])

        state = [v for v in graph.variables if v.kind == "value"]
        reads = python_reads.relabel(collected.reads, _object_paths(self, args, kwargs),
                                     collected.modules)
        checks = collected.guards + ([guards.RequiresGrad(state)] if state else []) + \
            ([python_reads.Reads(reads)] if reads else [])
        variant = Variant(graph, optimized, program, (template, rebuild_out), rebuild,
                          tracer.grad_guards, checks, differentiable)
        variant.cleared = list(tracer.cleared)
        variant.partitioned = partitioned
        try:  # the argument and result structure, for save()
            variant.signature = (describe((list(args), kwargs), [0]), describe(result, [0]))
        except CaptureError:
            variant.signature = None
        return variant

    def _warn_about_read_only_tensors(self, graph, state_names: dict) -> None:
        """A function with no tensor arguments that only reads outside tensors which are not
        parameters, buffers or optimizer state most likely reads data a loop makes anew (a
        list refilled each episode): the graph would keep reading the first ones."""
        assigned = {n.attrs["var"] for n in graph.nodes if n.op == "assign"}
        suspects = [v for i, v in enumerate(graph.variables)
                    if v.kind == "value" and i not in assigned and id(v.owner) not in state_names]
        if suspects:
            shown = ", ".join(f"{v.name} ({v.dtype}{list(v.shape)})" for v in suspects[:5])
            warnings.warn(
                f"{self.name} takes no tensor arguments and reads {len(suspects)} tensor(s) made "
                f"outside it that are not parameters, buffers or optimizer state: {shown}. The "
                "graph reads these same tensor objects on every call; if your code makes new "
                "ones between calls, pass them as arguments instead. (Python side effects in "
                "the function, such as list appends, happen once, while tracing.)",
                CaptureWarning, stacklevel=5)

    def __repr__(self) -> str:
        return f"<captured {self.name}: {len(self.variants)} variant(s)>"


_SLOT = object()


class SparseSlot:
    """Where a SparseRows output goes: its indices and rows are the next two outputs."""

    def __init__(self, shape):
        self.shape = tuple(shape)


def _key(args, kwargs, grad_enabled):
    """(cache key, the tensors in order): the hot path of every call, kept lean."""
    if not kwargs and all(isinstance(a, Tensor) for a in args):
        tensors = list(args)
        return (("flat", tuple((a.shape, a.dtype, a.device, a.requires_grad) for a in args)),
                grad_enabled), tensors
    leaves = leaves_with_paths((args, kwargs))
    tensors = [leaf for _, leaf in leaves if isinstance(leaf, Tensor)]
    return ((structure((args, kwargs)), tuple((p, leaf_key(leaf)) for p, leaf in leaves)),
            grad_enabled), tensors


def _describe(key):
    """A key in the (structure, [(path, leaf key)], grad) form `explain` reads."""
    body, grad = key
    if body[0] == "flat":
        leaves = [(f"[0][{i}]", ("tensor",) + spec) for i, spec in enumerate(body[1])]
        return ("flat", len(body[1])), leaves, grad
    return body[0], list(body[1]), grad


def _roots(captured, args, kwargs) -> list:
    """[(name prefix, object)] the captured function reaches: its module or bound object, its
    closure cells, the globals it names, and its arguments."""
    roots: list = []
    fn = captured.fn
    if captured.module is not None:
        roots.append(("", captured.module))
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        roots.append(("self.", owner))
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        func = getattr(fn, "__func__", fn)
        for name, cell in zip(code.co_freevars, func.__closure__ or ()):
            try:
                roots.append((name + ".", cell.cell_contents))
            except ValueError:
                pass
        for name in code.co_names:
            if name in func.__globals__:
                roots.append((name + ".", func.__globals__[name]))
    for i, a in enumerate(list(args) + list(kwargs.values())):
        roots.append((f"arg{i}.", a))
    return roots


def _object_paths(captured, args, kwargs) -> dict:
    """{id(module): its path} for the modules in reach, to name their settings."""
    paths: dict = {}
    for prefix, obj in _roots(captured, args, kwargs):
        if is_module(obj):
            base = prefix.rstrip(".") or type(obj).__name__  # a captured Module: its class
            for n, m in obj.named_modules():
                paths.setdefault(id(m), f"{base}.{n}" if n else base)
    return paths


def _variable_names(captured, args, kwargs) -> dict:
    """{id(tensor): readable name} for parameters, buffers and optimizer slots in reach."""
    roots = _roots(captured, args, kwargs)
    names: dict = {}
    optimizers = []
    for prefix, obj in roots:
        if is_module(obj):
            for n, p in obj.named_parameters():
                names.setdefault(id(p), prefix + n)
            for n, b in obj.named_buffers():
                names.setdefault(id(b), prefix + n)
        elif is_optimizer(obj):
            optimizers.append((prefix, obj))
    for prefix, opt in optimizers:
        for name, t in opt.hyper_tensors():  # lr, momentum, betas read by reference
            names.setdefault(id(t), prefix + name)
        for i, (p, state) in enumerate(opt.state.items()):
            base = names.get(id(p), f"{prefix}param{i}")
            for slot, value in state.items():
                if isinstance(value, Tensor):
                    names.setdefault(id(value), f"{base}.{slot}")
    used: dict = {}
    for k, n in list(names.items()):  # unique names, for printing and saving
        count = used.get(n, 0)
        used[n] = count + 1
        if count:
            names[k] = f"{n}_{count}"
    return names


def capture(fn=None, *, optimize: bool = True, parallel: bool | str = "auto",
            max_variants: int = 8, name: str | None = None, devices=None,
            timeline: bool = False, memory_budget: int | None = None):
    """Record `fn` (a function, a method, or a Module) into a dataflow graph per signature.

    Parameters, buffers and optimizer state used inside become graph state read by
    reference; in-place updates become assigns, so a whole training step (forward,
    backward, optimizer) is one graph. Graphs are linted, optimized (`optimize=False`
    skips the passes) and compiled; `parallel` runs independent nodes on a thread pool
    (True, False, or "auto": when two large nodes could overlap). `f.graph_for(*args)`
    shows the graph; `f.save(path)` writes it for `rill.load_graph`.

    Ops recorded inside `with rill.device(...)` / `rill.colocate_with(t)` are placed there;
    the rest go where a cost model says they finish first, among the devices the graph
    names plus `devices`. A graph over several devices runs one thread per device, joined
    by send/recv pairs (`f.partitions_for(*args)` shows the parts); `timeline=True` keeps
    what ran where and when (`f.last_timeline()`). `memory_budget` (bytes) recomputes forward
    values in the backward pass until the step's peak fits it (passes/remat.py; the graph's
    `memory_plan().remat` says what was recomputed).

    >>> import rill
    >>> model = rill.nn.Linear(3, 2)
    >>> fast = rill.capture(model)
    >>> fast(rill.ones((4, 3))).shape
    (4, 2)
    """
    if fn is None:
        return functools.partial(capture, optimize=optimize, parallel=parallel,
                                 max_variants=max_variants, name=name, devices=devices,
                                 timeline=timeline, memory_budget=memory_budget)
    if memory_budget is not None and (isinstance(memory_budget, bool) or
                                      not isinstance(memory_budget, int) or memory_budget < 0):
        raise CaptureError(f"memory_budget must be a number of bytes (an int >= 0) or None, "
                           f"got {memory_budget!r}", op="capture")
    if is_module(fn):
        return CapturedFunction(fn, name=name or type(fn).__name__, optimize=optimize,
                                parallel=parallel, max_variants=max_variants, module=fn,
                                devices=devices, timeline=timeline,
                                memory_budget=memory_budget)
    if not callable(fn):
        raise CaptureError(f"capture needs a function, method or Module, got {fn!r}",
                           op="capture")
    return CapturedFunction(fn, name=name, optimize=optimize, parallel=parallel,
                            max_variants=max_variants, devices=devices, timeline=timeline,
                            memory_budget=memory_budget)
