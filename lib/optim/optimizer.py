"""Optimizer: parameter groups, per-parameter state, step/zero_grad, state_dict.

Updates are rill ops whose results are written back into the *same* tensor objects
(`rill.ops.methods.assign`): the model's Parameters and the optimizer's slots keep their
identity and take new buffers. So code holding a parameter sees it train, a snapshot
taken with `detach()` keeps its old value, and a captured training step sees the optimizer's
writes as assignments to state, like any other in-place op.

Hyper-parameters under capture (issue 15). A captured step must see what a training loop
changes between steps. The values schedulers change (`tensor_hypers`: lr, and momentum or
betas) are graph state: each `ParamGroup` keeps them, besides its plain Python numbers, in
0-d float64 tensors that every write updates in place, and a step being traced reads those
(`_hypers`), cast to the parameter's dtype where the eager step lets a Python number round to
it, so the captured arithmetic is the eager one. Every other value a trace bakes in (eps,
weight_decay, nesterov, which groups and how many parameters, ...) is guarded
(`rill.capture_guard`): changing it traces again and says why. Eager steps use the Python
numbers and the fused ops as before.

torch's implementation flags. Each optimizer takes the keywords its torch namesake takes, in
the same places, and keeps them in its groups as torch does. `foreach`, `fused` and
`capturable` choose among torch's implementations of one update (a loop over tensors,
multi-tensor kernels, one fused kernel, state kept on the device for CUDA graphs): rill has
one implementation per device, whose steps a `@rill.capture` function may always call, so
they are accepted and change nothing. `differentiable=True` (gradients through the update
itself) is refused: rill's updates run with grad recording off and write in place.
"""
from __future__ import annotations

from .. import cpu_memory
from ..capture.guards import guard
from ..capture.holders import holds_optimizer_state
from ..dtypes import bfloat16, float32, float64
from ..eager.context import current, enable_grad, no_grad, outside_capture, set_grad
from ..errors import ArgumentError, CaptureError
from ..ops.creation import tensor, zeros_like
from ..ops.elementwise import cast, scaled_add
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor
from ..eager.context import detached_value
from ..ops.methods import assign


def scale(x: Tensor, factor) -> Tensor:
    """x * factor. factor is a Python number (a weak scalar: rounded to x's dtype) or a 0-d
    float64 tensor (a hyper-parameter a captured step reads), cast to x's dtype first, so
    that both give the same bits."""
    if isinstance(factor, Tensor):
        factor = cast(factor, x.dtype)
    return x * factor


def add_scaled(x: Tensor, y: Tensor, alpha, beta) -> Tensor:
    """alpha * x + beta * y: one `scaled_add` for Python numbers; for 0-d tensors the same
    arithmetic as separate ops (scaled_add takes its factors as constants), in the kernel's
    precision. A factor 1.0 is left out, as the kernel does."""
    if not isinstance(alpha, Tensor) and not isinstance(beta, Tensor):
        return scaled_add(x, y, alpha, beta)
    if x.dtype is bfloat16:  # the kernel works in the float32 storage and rounds once
        return cast(add_scaled(cast(x, float32), cast(y, float32), alpha, beta), bfloat16)
    one = lambda f: type(f) is float and f == 1.0  # noqa: E731
    return (x if one(alpha) else scale(x, alpha)) + (y if one(beta) else scale(y, beta))


def lerp(start: Tensor, end: Tensor, weight, complement=None, *, small=None) -> Tensor:
    """start + weight * (end - start), in the form torch's lerp picks for this weight (the
    one that keeps the result exact at weight 0 or 1): start + (end - start) * weight below
    0.5, else end - (end - start) * complement, complement being 1 - weight unless given.
    Tensor weights (read by a captured step) need `small`, the Python answer to
    weight < 0.5, which the caller guards."""
    if small is None:
        small = weight < 0.5
    if small:
        return start + scale(end - start, weight)
    return end - scale(end - start, 1.0 - weight if complement is None else complement)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class ParamGroup(dict):
    """One parameter group: "params" and hyper-parameters as plain Python values, as torch's,
    for user code and schedulers to read and write.

    The keys its optimizer reads as tensors under capture (`Optimizer.tensor_hypers`) also
    live in 0-d float64 tensors, one per number, made on the parameters' devices when a
    trace first asks for them; every later write of the key updates them in place (same
    tensor objects, new buffers), so a captured step that reads them sees the new value on
    its next call. Writing a hyper-parameter while a capture traces is refused: that Python
    would run once, while tracing. Copies and pickles are groups without tensors.
    """

    _tensor_keys: frozenset = frozenset()
    _hyper_keys: frozenset = frozenset()
    _label = "a parameter group"

    def __init__(self, values: dict, label: str, tensor_keys, hyper_keys):
        super().__init__(values)
        self._label = label
        self._tensor_keys, self._hyper_keys = frozenset(tensor_keys), frozenset(hyper_keys)
        self._tensors: dict = {}  # key -> {device: tuple of 0-d tensors}
        self._changed: set = set()  # tensor keys written with a new value since made

    def __setitem__(self, key, value):
        if key in self._hyper_keys and current().interpreter.capturing:
            raise CaptureError(
                f"{self._label}['{key}'] is set while a captured function is being traced. "
                "That Python code (a scheduler's step(), a manual change) would run once, "
                "while tracing, and never on later calls. Change hyper-parameters outside the "
                "captured function, between calls: the captured step reads them on every "
                "call", op="capture")
        if key in self._tensor_keys:
            old = dict.get(self, key)
            if key not in self or not _same(old, value):
                self._changed.add(key)
            held = self._tensors.get(key)
            if held:  # a trace reads them: they take the new value (one set per device)
                numbers = _numbers(self._label, key, value)
                if len(numbers) != len(next(iter(held.values()))):
                    raise ArgumentError(f"{self._label}['{key}'] was {old!r} and cannot "
                                        f"become {value!r}: a captured step reads it as "
                                        f"{len(next(iter(held.values())))} number(s)",
                                        op="param_groups")
                with no_grad(), outside_capture():
                    for tensors in held.values():
                        for t, x in zip(tensors, numbers):
                            _write(t, x)
        dict.__setitem__(self, key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce_ex__(self, protocol):
        return (_remake_group, (dict(self), self._label, self._tensor_keys, self._hyper_keys))

    def tensors(self, key: str, device):
        """The 0-d float64 tensor(s) holding self[key] on `device` (a tuple for a sequence
        value such as betas), made now if they are not yet (eagerly, even while tracing:
        they outlive the trace, which reads them by reference)."""
        held = self._tensors.setdefault(key, {})
        tensors = held.get(device)
        value = self[key]
        if tensors is None:
            from ..dtypes import float64
            from ..ops.creation import tensor
            with outside_capture():
                tensors = held[device] = tuple(tensor(x, dtype=float64, device=device)
                                               for x in _numbers(self._label, key, value))
        return tensors if isinstance(value, (tuple, list)) else tensors[0]


def _remake_group(values, label, tensor_keys, hyper_keys):
    return ParamGroup(values, label, tensor_keys, hyper_keys)


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 (a tensor, an odd object: count it as changed)
        return False


def _numbers(label, key, value) -> tuple:
    parts = value if isinstance(value, (tuple, list)) else (value,)
    try:
        return tuple(float(x) for x in parts)
    except (TypeError, ValueError):
        raise ArgumentError(f"{label}['{key}'] must be a number (or numbers), got {value!r}",
                            op="param_groups") from None


def _write(t: Tensor, x: float) -> None:
    """t takes the value x in place (t keeps its identity; graphs read its new buffer)."""
    assign(t, tensor(x, dtype=t.dtype, device=t.device))


class _Layout(tuple):
    """Which group objects an optimizer steps, and how many parameters each has: a traced
    step updates those parameters and reads those groups' tensors."""

    @classmethod
    def of(cls, groups) -> "_Layout":
        return cls((id(g), len(g["params"])) for g in groups)

    def __repr__(self) -> str:
        return "[" + ", ".join(f"a group at {g:#x} of {_count(n, 'parameter')}"
                               for g, n in self) + "]"


def _value(groups, i, key):
    try:
        return groups[i].get(key)
    except (IndexError, AttributeError):
        return None


@holds_optimizer_state
class Optimizer:
    """Base class of rill's optimizers: holds parameter groups and per-parameter state.

    A subclass passes its hyperparameter defaults, checks a group's values in
    `check_group`, and updates one group's parameters in `update_group` (called with grad
    recording off). `params` is an iterable of tensors, or of dicts that each hold
    `"params"` and any hyperparameters that differ from the defaults.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([1.0, 2.0]))
    >>> b = rill.nn.Parameter(rill.tensor([0.5]))
    >>> opt = rill.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    >>> [group["lr"] for group in opt.param_groups]
    [0.1, 0.5]
    >>> (w.sum() + b.sum()).backward()
    >>> opt.step()
    >>> w, b
    (Parameter containing:
    tensor([0.9, 1.9], requires_grad=True), Parameter containing:
    tensor([0.], requires_grad=True))
    """

    # Hyper-parameters a captured step reads as tensors (what schedulers change); the
    # others in `defaults` are guarded. See the module docstring.
    tensor_hypers: tuple = ("lr",)

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.state: dict = {}  # parameter -> {slot name: tensor or number}
        self.param_groups: list = []
        if isinstance(params, (Tensor, dict)):
            raise ArgumentError(f"params must be an iterable of tensors or of dicts, got a single "
                                f"{type(params).__name__}; wrap it in a list", op=self._name)
        try:
            groups = list(params)
        except TypeError:
            raise ArgumentError(f"params must be an iterable of tensors or of dicts, got "
                                f"{type(params).__name__}", op=self._name) from None
        if not groups:
            raise ArgumentError("the optimizer got an empty parameter list", op=self._name)
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    @property
    def _name(self) -> str:
        return type(self).__name__

    # ---- groups ----------------------------------------------------------------------------

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, with hyperparameters that default to the optimizer's."""
        if not isinstance(param_group, dict):
            raise ArgumentError(f"a parameter group must be a dict, got "
                                f"{type(param_group).__name__}", op=self._name)
        if "params" not in param_group:
            raise ArgumentError("a parameter group needs a 'params' entry", op=self._name)
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise ArgumentError("a group's params must be an ordered sequence, not a set: the "
                                "order is how state_dict() names parameters", op=self._name)
        else:
            params = list(params)
        index = len(self.param_groups)
        seen = {id(p): i for i, g in enumerate(self.param_groups) for p in g["params"]}
        for k, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise ArgumentError(f"parameter {k} of group {index} is a {type(p).__name__}, "
                                    f"not a rill tensor", op=self._name)
            if not p.dtype.is_floating:
                raise ArgumentError(f"parameter {k} of group {index} is {p.dtype}; only floating "
                                    f"tensors can be optimized", op=self._name)
            if id(p) in seen:
                where = "this group" if seen[id(p)] == index else f"group {seen[id(p)]}"
                raise ArgumentError(f"parameter {k} of group {index} is given twice (it is "
                                    f"already in {where})", op=self._name)
            seen[id(p)] = index
        group = {**self.defaults, **param_group, "params": params}
        self.check_group(group)
        self.param_groups.append(self._group(group, index))

    def _group(self, values: dict, index: int) -> ParamGroup:
        return ParamGroup(values, f"{self._name}.param_groups[{index}]", self.tensor_hypers,
                          self.defaults)

    def check_group(self, group: dict) -> None:
        """Raise ArgumentError for a hyperparameter out of range (subclasses extend this)."""
        self._require(group, "lr", lambda v: v >= 0, ">= 0")
        self._check_flags(group)

    def _check_flags(self, group) -> None:
        """torch's implementation flags (see the module docstring): the performance ones are
        accepted as torch accepts them and ignored; differentiable must be False."""
        for key in ("foreach", "fused"):
            if group.get(key) not in (None, True, False):
                raise ArgumentError(f"{key} must be None, True or False, got {group[key]!r}",
                                    op=self._name)
        if group.get("fused") and group.get("foreach"):
            raise ArgumentError("fused=True and foreach=True cannot be given together (torch "
                                "refuses the pair too); leave one at None", op=self._name)
        for key in ("capturable", "differentiable"):
            if group.get(key, False) not in (True, False):
                raise ArgumentError(f"{key} must be True or False, got {group[key]!r}",
                                    op=self._name)
        if group.get("differentiable"):
            raise ArgumentError(
                "differentiable=True is not supported: rill's optimizer steps run with grad "
                "recording off and update the parameters in place, so no gradient flows "
                "through an update. Leave differentiable=False, or write the update in rill "
                "ops on tensors that require grad (p - lr * g) to differentiate through it",
                op=self._name)

    def _require(self, group, key, ok, expected):
        value = group[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            raise ArgumentError(f"invalid {key} {value!r}: it must be a number {expected}",
                                op=self._name)

    def _check_betas(self, group):
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ArgumentError(f"betas must be a pair (beta1, beta2), got {betas!r}",
                                op=self._name)
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ArgumentError(f"invalid beta{i + 1} {beta!r} in betas {tuple(betas)}: it "
                                    f"must be in [0, 1)", op=self._name)

    # ---- stepping --------------------------------------------------------------------------

    def step(self, closure=None):
        """Update every parameter that has a gradient; returns closure()'s loss if given.

        `closure` re-evaluates the model and returns the loss (it runs with grad recording
        on, before the update).
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            if current().interpreter.capturing:
                self._guard_groups()
            for group in self.param_groups:
                self.update_group(group)
        return loss

    def update_group(self, group: dict) -> None:
        """Update the parameters of one group from their `.grad` (grad recording is off).

        Read the hyper-parameters that may be tensors with `_hypers`; branch on Python
        values only (group[key]), and `_guard` each branch on a key `_hypers` may give as a
        tensor."""
        raise NotImplementedError

    # ---- hyper-parameters under capture ---------------------------------------------------

    def _tensor_keys(self, group) -> frozenset:
        """The keys of `group` a traced step reads as tensors: `tensor_hypers` that the
        group keeps in step (a plain dict put in param_groups has none: it is guarded)."""
        if isinstance(group, ParamGroup):
            return group._tensor_keys.intersection(self.tensor_hypers)
        return frozenset()

    def _hypers(self, group, *keys):
        """A function device -> [group[key] for each key] as an update uses them: the Python
        values eagerly; while a capture traces, the group's 0-d float64 tensors on `device`
        for the keys it holds as tensors (so that later changes reach the graph), and the
        Python values (guarded by step()) for the others."""
        if not current().interpreter.capturing:
            values = [group[k] for k in keys]
            return lambda device: values
        held = self._tensor_keys(group)
        return lambda device: [group.tensors(k, device) if k in held else group[k]
                               for k in keys]

    def hyper_tensors(self) -> list:
        """[(name, tensor)]: the 0-d tensors captured steps read hyper-parameters from, named
        as in param_groups ("param_groups[0].lr", "param_groups[0].betas.0")."""
        named = []
        for i, group in enumerate(self.param_groups):
            for key, held in getattr(group, "_tensors", {}).items():
                for tensors in held.values():
                    for k, t in enumerate(tensors):
                        suffix = f".{k}" if isinstance(group.get(key), (tuple, list)) else ""
                        named.append((f"param_groups[{i}].{key}{suffix}", t))
        return named

    def _where(self, group) -> str:
        i = next((i for i, g in enumerate(self.param_groups) if g is group), None)
        return f"{self._name}.param_groups[{i}]" if i is not None else \
            f"a {self._name} parameter group"

    def _guard(self, group, what: str, read, key: str) -> None:
        """While tracing: the graph took a branch on read(), a function of group[key]. Only
        needed where key is read as a tensor; step() guards the other values whole."""
        if current().interpreter.capturing and key in self._tensor_keys(group):
            guard(f"{self._where(group)}{what}", read)

    def _guard_groups(self) -> None:
        """While tracing: the graph updates these groups' parameters and bakes in every
        hyper-parameter it does not read as a tensor; a change of either traces again."""
        guard(f"{self._name}.param_groups", lambda: _Layout.of(self.param_groups))
        for i, group in enumerate(self.param_groups):
            for key in sorted(set(self.defaults) - self._tensor_keys(group)):
                guard(f"{self._name}.param_groups[{i}]['{key}']",
                      lambda i=i, key=key: _value(self.param_groups, i, key))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (the default), or to zeros."""
        eager = not current().interpreter.capturing
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if set_to_none:
                    set_grad(p, None)  # even if None now: a captured step must know it is
                    if eager and isinstance(g, Tensor):
                        # its buffer kept for the next step's gradient if nothing else holds
                        # it (cpu_memory: a large one page-faulted in anew every step)
                        data, g = g._data, None
                        cpu_memory.give(data)
                        del data
                elif g is None:
                    continue
                elif isinstance(g, SparseRows):
                    set_grad(p, SparseRows(g.indices[:0], g.rows[:0], g.shape))
                else:
                    set_grad(p, zeros_like(g))

    def _dense_updates(self, group, *slots):
        """(p, g, state) for each parameter of `group` that has a gradient, for optimizers
        whose state moves every row (Adam's moments decay everywhere): g dense (a sparse
        gradient as the dense one it stands for: exactly the dense result) and negated if
        `maximize`; state created with a step count and the zero `slots`, the step counted.
        SparseAdam, Adagrad and plain SGD keep sparse gradients sparse instead."""
        made_now, stepped_from = object(), {}  # cohorts of this call (see _step_cohort)
        counted = {}  # (cohort, device) -> a count of it already counted in this call
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if isinstance(g, SparseRows):
                g = g.to_dense()
            made = p not in self.state
            state = self._state(p, lambda: {"step": step_count(device=p.device),
                                            **{name: zeros_like(p) for name in slots}})
            old = None if made else self._step_cohort(state)
            cohort = made_now if made else stepped_from.setdefault(old, object()) \
                if old is not None else object()
            done = counted.get((cohort, p.device))
            if done is None:
                state["step"] += 1
                counted[cohort, p.device] = state["step"]
            else:  # an equal count, counted already: take its value (one op, not three)
                assign(state["step"], done)
            self._set_cohort(state["step"], cohort)
            if group.get("maximize"):
                g = -g
            yield p, g, state
        if current().interpreter.capturing:
            # The graph counts (and Adam corrects) once per cohort as this step left them:
            # it holds while the group's cohorts are those (see _step_cohort).
            params = group["params"]
            guard(f"{self._where(group)} step counts known equal",
                  lambda: self._cohort_labels(params))

    # Step counts known equal ("cohorts"). Every parameter keeps its own step count, as
    # torch's state_dict has it, but the parameters of a group usually step together, so
    # their counts are equal: a step counts one of them (the others take its value) and
    # computes bias corrections (Adam's: 8 scalar ops) once for all. Which counts are equal
    # is known without reading them (a captured step cannot: its counts live in the graph):
    # counts made in one step() of one group start equal; counts that were equal and all
    # step stay equal; a count that steps while others of its cohort do not leaves it. A
    # step count this bookkeeping has not seen (replaced by the user) is a cohort of its
    # own; one changed in place by the user is not noticed. A traced step guards the
    # group's cohorts as it left them: a replay keeps them as they are, since it steps the
    # same parameters; a call that finds others traces again.

    def _step_cohort(self, state):
        """A token for state["step"]: equal tokens mean equal counts; None if not known."""
        step = state.get("step")
        held = getattr(self, "_cohorts", {}).get(id(step))
        return held[1] if held is not None and held[0] is step else None

    def _cohort_labels(self, params) -> tuple:
        """Which of `params` have counts known equal, as first-seen labels: (0, 0, 1) says
        the first two are; -1 for a parameter without state."""
        # (_step_cohort inlined: a captured step runs this before every call)
        labels: dict = {}
        out = []
        states, cohorts = self.state, self.__dict__.get("_cohorts", {})
        for p in params:
            state = states.get(p)
            if state is None:
                out.append(-1)
                continue
            step = state.get("step")
            held = cohorts.get(id(step))
            token = held[1] if held is not None and held[0] is step else object()
            out.append(labels.setdefault(token, len(labels)))
        return tuple(out)

    def _set_cohort(self, step, token) -> None:
        cohorts = self.__dict__.setdefault("_cohorts", {})
        if len(cohorts) > 2 * len(self.state) + 16:  # forget counts no state holds now
            alive = {id(s.get("step")) for s in self.state.values()}
            for key in [k for k in cohorts if k not in alive]:
                del cohorts[key]
        cohorts[id(step)] = (step, token)  # the count itself: its id stays its own

    def _state(self, p, make) -> dict:
        """p's state, made by make() at first use. Made eagerly even inside a capture: the
        slots outlive the trace, and a captured step reads and updates them by reference."""
        state = self.state.get(p)
        if state is None:
            with outside_capture():
                state = self.state[p] = make()
        return state

    def _zero_slot(self, state: dict, name: str, p) -> Tensor:
        """state[name], made as zeros like p at first use (eagerly: see _state)."""
        slot = state.get(name)
        if slot is None:
            with outside_capture():
                slot = state[name] = zeros_like(p)
        return slot

    # ---- state_dict ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """{"state": {index: slots}, "param_groups": [group without tensors]}, as torch's.

        Parameters are named by their position across the groups in order. Slots are
        tensors and numbers; the tensors are snapshots (training on does not change them),
        and the whole is a plain nest of dicts, lists, tuples, numbers and tensors that
        `rill.save` writes.
        """
        index: dict = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {}
        for p, slots in self.state.items():
            if id(p) in index:
                state[index[id(p)]] = {k: detached_value(v) if isinstance(v, Tensor) else v
                                       for k, v in slots.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Take the hyperparameters and slots of `state_dict` (from `state_dict()`).

        The groups must match this optimizer's: as many groups, as many parameters in each,
        and slots shaped like their parameters; otherwise ArgumentError says what differs.
        """
        if not isinstance(state_dict, dict) or "state" not in state_dict or \
                "param_groups" not in state_dict:
            raise ArgumentError("a state dict holds 'state' and 'param_groups' (as state_dict() "
                                "returns it)", op=f"{self._name}.load_state_dict")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ArgumentError(f"the state dict has {_count(len(saved_groups), 'parameter group')}"
                                f", this optimizer has {len(self.param_groups)}",
                                op=f"{self._name}.load_state_dict")
        by_index = {}
        op = f"{self._name}.load_state_dict"
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if not isinstance(saved, dict) or not isinstance(saved.get("params"), (list, tuple)):
                raise ArgumentError(f"parameter group {i} of the state dict has no 'params' list",
                                    op=op)
            unknown = set(saved) - set(self.defaults) - {"params"} - set(group)
            if unknown:
                # Another optimizer's state dict (SGD's into Adam, ...) would otherwise load
                # and fail at the next step() on a missing hyperparameter.
                raise ArgumentError(f"parameter group {i} of the state dict has settings "
                                    f"{sorted(unknown)} that {self._name} does not take; is it "
                                    f"another optimizer's?", op=op)
            if len(saved["params"]) != len(group["params"]):
                raise ArgumentError(f"parameter group {i} has "
                                    f"{_count(len(saved['params']), 'parameter')} in the state "
                                    f"dict, {len(group['params'])} in this optimizer",
                                    op=f"{self._name}.load_state_dict")
            by_index.update(zip(saved["params"], group["params"]))
        state = {}
        for key, slots in state_dict["state"].items():
            try:
                p = by_index.get(int(key))
            except (TypeError, ValueError):
                raise ArgumentError(f"the state dict's state is keyed by parameter index, got "
                                    f"{key!r}", op=op) from None
            if p is None:
                raise ArgumentError(f"the state dict holds state for parameter {key}, which no "
                                    f"parameter group lists", op=f"{self._name}.load_state_dict")
            state[p] = {name: self._loaded_slot(p, key, name, v) for name, v in slots.items()}
        groups = []
        for group, saved in zip(self.param_groups, saved_groups):
            loaded = {**self.defaults, **{k: tuple(v) if isinstance(group.get(k), tuple) else v
                                          for k, v in saved.items() if k != "params"}}
            loaded["params"] = group["params"]
            self.check_group(loaded)  # bad values are refused before anything changes
            groups.append(loaded)
        self.state = state
        self._cohorts = {}
        for group in self.param_groups:  # loaded counts: equal values in a group, one cohort
            tokens: dict = {}
            for p in group["params"]:
                step = state.get(p, {}).get("step")
                if isinstance(step, Tensor):
                    self._set_cohort(step, tokens.setdefault(step.item(), object()))
        for i, (group, loaded) in enumerate(zip(self.param_groups, groups)):
            if not isinstance(group, ParamGroup):
                self.param_groups[i] = self._group(loaded, i)
                continue
            # The same group objects take the values: their tensors, which a captured step
            # reads, follow (and code holding a group sees the loaded values).
            for key in [k for k in group if k not in loaded]:
                del group[key]
            group.update(loaded)

    def _loaded_slot(self, p, key, name, value):
        if name == "step":  # a count (a number in torch's older state dicts)
            return step_count(value.item() if isinstance(value, Tensor) else value, p.device)
        if not isinstance(value, Tensor):
            return value
        if value.ndim and value.shape != p.shape:
            raise ArgumentError(f"slot {name!r} of parameter {key} has shape {value.shape} in the "
                                f"state dict, but the parameter has shape {p.shape}",
                                op=f"{self._name}.load_state_dict")
        if value.device is not p.device:
            value = value.to(p.device)
        if value.dtype is not p.dtype and value.dtype.is_floating:
            value = cast(value, p.dtype)
        return detached_value(value)  # our own handle: updating it must not touch the caller's dict

    def __repr__(self) -> str:
        lines = [f"{self._name} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        return "\n".join(lines + [")"])


def step_count(value: float = 0.0, device=None) -> Tensor:
    """An optimizer's step count: a float64 0-d tensor on the parameter's device, so that a
    captured step counts it in the graph (a Python number would be frozen into the graph at
    capture time)."""
    with outside_capture():
        return tensor(float(value), dtype=float64, device=device)
