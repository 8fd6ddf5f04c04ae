"""GradScaler: dynamic loss scaling, so that float16 gradients neither underflow nor stay
overflowed.

The loss is multiplied by a scale before backward(); `unscale_` divides the gradients by it
and notes whether any is inf or NaN; `step` runs the optimizer only when none is; `update`
halves the scale after an overflow (backoff_factor) and doubles it after growth_interval
clean steps (growth_factor). The scale, the count of clean steps and the overflow flag are
0-d tensors updated in place, so a captured training step reads and writes them as graph
state, and decides the skip in the graph: the optimizer's update is computed, then every
tensor it wrote is set back with `rill.where(found_inf, old, new)` (a Python `if` on a graph
value would be baked in at trace time).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..capture.guards import guard
from ..eager.context import current, no_grad, outside_capture, set_grad
from ..errors import ArgumentError
from ..ops import elementwise as E
from ..ops.creation import tensor
from ..ops.methods import assign
from ..ops.shape import stack
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """Dynamic loss scaling for mixed-precision training, as torch.amp.GradScaler.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.ones(2))
    >>> opt = rill.optim.SGD([w], lr=0.1)
    >>> scaler = rill.amp.GradScaler(init_scale=1024.0)
    >>> scaler.scale((w * 3).sum()).backward()
    >>> scaler.step(opt); scaler.update()
    >>> w.tolist(), scaler.get_scale()
    ([0.699999988079071, 0.699999988079071], 1024.0)
    """

    def __init__(self, device: str | None = None, init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        if device is not None and device not in ("cpu", "cuda", "gpu"):
            raise ArgumentError(f"device must be 'cpu' or 'cuda', got {device!r} (the scale "
                                "lives on the device of the loss it scales)", op="GradScaler")
        for name, value, ok, rule in (
                ("init_scale", init_scale, lambda v: v > 0, "positive"),
                ("growth_factor", growth_factor, lambda v: v > 1.0, "above 1"),
                ("backoff_factor", backoff_factor, lambda v: 0.0 < v < 1.0, "in (0, 1)")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ArgumentError(f"{name} must be a number {rule}, got {value!r}",
                                    op="GradScaler")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or \
                growth_interval <= 0:
            raise ArgumentError(f"growth_interval must be a positive int, got "
                                f"{growth_interval!r}", op="GradScaler")
        if not isinstance(enabled, bool):
            raise ArgumentError(f"enabled must be a bool, got {enabled!r}", op="GradScaler")
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._enabled = enabled
        self._init_tracker = 0
        self._scale = self._growth_tracker = self._found_inf = None  # made at first use
        self._stages: dict = {}   # id(optimizer) -> stage of this step
        self._found: dict = {}    # id(optimizer) -> its 0-d overflow flag (1.0: inf or NaN)

    # ---- state ---------------------------------------------------------------------------

    def _state(self, device):
        """The 0-d state tensors, made eagerly at first use (a trace reads them as state)."""
        if self._scale is None:
            with outside_capture():
                self._scale = tensor(self._init_scale, dtype=dt.float32, device=device)
                self._growth_tracker = tensor(self._init_tracker, dtype=dt.int64,
                                              device=device)
                self._found_inf = tensor(0.0, dtype=dt.float32, device=device)
        if current().interpreter.capturing:  # the Python numbers a trace bakes in
            guard("GradScaler settings", lambda: (self._growth_factor, self._backoff_factor,
                                                  self._growth_interval, self._enabled))
        return self._scale

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    # ---- the step --------------------------------------------------------------------------

    def scale(self, outputs):
        """outputs (a tensor, or a list / tuple of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._state(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ArgumentError(f"scale takes a tensor or a list / tuple of tensors, got "
                            f"{type(outputs).__name__}", op="GradScaler.scale")

    def unscale_(self, optimizer) -> None:
        """Divide optimizer's gradients by the scale (in place) and note any inf / NaN; call
        it before clipping gradients, at most once per step."""
        if not self._enabled:
            return
        stage = self._stages.get(id(optimizer), _READY)
        if stage == _UNSCALED:
            raise ArgumentError("unscale_() was already called on this optimizer since the "
                                "last update()", op="GradScaler.unscale_")
        if stage == _STEPPED:
            raise ArgumentError("unscale_() is called before step(), not after",
                                op="GradScaler.unscale_")
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if self._scale is None:
            if not params:
                raise ArgumentError("nothing to unscale: no gradient, and scale() was never "
                                    "called", op="GradScaler.unscale_")
            self._state(params[0].device)
        with no_grad():
            inv = E.reciprocal(E.cast(self._scale, dt.float64)).astype(dt.float32)
            finite = []
            for p in params:
                g = p.grad
                if isinstance(g, SparseRows):
                    rows = g.rows * inv.astype(g.rows.dtype)
                    set_grad(p, SparseRows(g.indices, rows, g.shape))
                    finite.append(E.isfinite(rows).all())
                else:
                    g = g * inv.astype(g.dtype)
                    set_grad(p, g)
                    finite.append(E.isfinite(g).all())
            found = E.logical_not(stack(finite).all()).astype(dt.float32) if finite else \
                E.multiply(self._scale, 0.0)
            self._found[id(optimizer)] = found
            assign(self._found_inf, E.maximum(self._found_inf, found))
        self._stages[id(optimizer)] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless a gradient is inf or NaN (unscaling first if
        unscale_ was not called). Eagerly the step is skipped; in a captured step it runs and
        is undone in the graph. Returns what optimizer.step returns (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise ArgumentError("closure use is not supported with GradScaler (the loss "
                                "must be scaled before its backward)", op="GradScaler.step")
        if self._stages.get(id(optimizer)) == _STEPPED:
            raise ArgumentError("step() was already called on this optimizer since the last "
                                "update()", op="GradScaler.step")
        if self._stages.get(id(optimizer), _READY) == _READY:
            self.unscale_(optimizer)
        found = self._found[id(optimizer)]
        self._stages[id(optimizer)] = _STEPPED
        if not current().interpreter.capturing:
            return None if float(found) else optimizer.step(*args, **kwargs)
        return _step_undone_in_graph(optimizer, found, args, kwargs)

    def update(self, new_scale=None) -> None:
        """After each step: back off after an overflow, grow after growth_interval clean
        steps; or set the scale to `new_scale` (a float or a 0-d tensor)."""
        if not self._enabled or self._scale is None:
            return
        with no_grad():
            if new_scale is not None:
                if isinstance(new_scale, Tensor):
                    assign(self._scale, new_scale.astype(dt.float32))
                else:
                    assign(self._scale, tensor(float(new_scale), dtype=dt.float32,
                                               device=self._scale.device))
            else:
                found = self._found_inf > 0.0
                clean = self._growth_tracker + 1
                grow = clean >= self._growth_interval
                assign(self._scale, E.where(
                    found, self._scale * self._backoff_factor,
                    E.where(grow, self._scale * self._growth_factor, self._scale)))
                assign(self._growth_tracker,
                       E.where(E.logical_or(found, grow), clean * 0, clean))
            assign(self._found_inf, self._found_inf * 0.0)
        self._stages.clear()
        self._found.clear()

    # ---- saving ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Python numbers, as torch's: scale, factors, interval and the clean-step count."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._init_tracker if self._growth_tracker is None else
                int(self._growth_tracker)}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise ArgumentError("the state_dict is empty: it was saved from a disabled "
                                "GradScaler", op="GradScaler.load_state_dict")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval",
                   "_growth_tracker"} - set(state_dict)
        if missing:
            raise ArgumentError(f"state_dict lacks {sorted(missing)}",
                                op="GradScaler.load_state_dict")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            with no_grad():
                device = self._scale.device
                assign(self._scale, tensor(self._init_scale, dtype=dt.float32, device=device))
                assign(self._growth_tracker, tensor(self._init_tracker, dtype=dt.int64,
                                                    device=device))


def _step_undone_in_graph(optimizer, found, args, kwargs):
    """optimizer.step() in a trace, then every tensor it wrote set back where `found`."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    had_state = tuple(p in optimizer.state for p in params)
    # A step that makes the optimizer's state (its first) restores that state to the values
    # it was made with; once state exists, the next call traces again and restores from
    # reads taken before the step, as every later step does.
    guard("whether each parameter has optimizer state (GradScaler's undo of a skipped step)",
          lambda: tuple(p in optimizer.state for p in params))
    with no_grad():
        before = {}
        for p in params:
            before[id(p)] = (p, p * 1)
            for value in optimizer.state.get(p, {}).values():
                if isinstance(value, Tensor):
                    before[id(value)] = (value, value * 1)
        made = _recording_new_state(optimizer)
        try:
            out = optimizer.step(*args, **kwargs)
        finally:
            del optimizer._state  # the method again
        for p, was in zip(params, had_state):
            for name, value in optimizer.state.get(p, {}).items():
                if isinstance(value, Tensor) and id(value) not in before:
                    initial = made.get(id(value))
                    if initial is None:
                        raise ArgumentError(
                            f"{type(optimizer).__name__} made state {name!r} outside its "
                            "state constructor; GradScaler cannot undo a skipped step of it "
                            "in a captured step", op="GradScaler.step")
                    before[id(value)] = (value, initial)
        skip = found > 0.0
        for t, old in before.values():
            assign(t, E.where(skip, old, t))
    return out


def _recording_new_state(optimizer) -> dict:
    """Wrap optimizer._state (the one place optimizers make per-parameter state) for one
    step: {id(tensor): an eager copy of the value it was made with}."""
    made: dict = {}
    original = optimizer._state

    def state(p, make):
        def recorded():
            slots = make()
            for value in slots.values():
                if isinstance(value, Tensor):
                    made[id(value)] = value * 1  # eager here: _state makes it outside capture
            return slots
        return original(p, recorded)
    optimizer._state = state
    return made
