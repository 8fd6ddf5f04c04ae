"""LBFGS: limited-memory BFGS on all parameters as one flat vector, as torch.optim.LBFGS."""
from __future__ import annotations

import math

from ..eager.context import current, enable_grad, no_grad
from ..errors import ArgumentError, CaptureError
from ..ops.creation import zeros
from ..ops.elementwise import cast, scaled_add
from ..ops.methods import assign
from ..ops.shape import concat
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor
from ..eager.context import detached_value
from .line_search import dot, strong_wolfe
from .optimizer import Optimizer

# Slots holding flat vectors (one number per parameter element), or lists of them.
_VECTORS = ("d", "prev_flat_grad")
_VECTOR_LISTS = ("old_dirs", "old_stps")


class LBFGS(Optimizer):
    """L-BFGS (Nocedal & Wright, algorithm 7.4), with PyTorch's iteration, stopping tests,
    defaults and state, so that both follow the same iterates.

    `step(closure)` runs up to `max_iter` iterations (and `max_eval` closure calls): the
    direction comes from the two-loop recursion over the last `history_size` steps and
    gradient changes, scaled by the latest curvature estimate; the step length is `lr`
    (min(1, 1 / |g|_1) * lr on the very first iteration), or is found by a strong-Wolfe
    line search with `line_search_fn="strong_wolfe"`. It stops early when the largest
    gradient entry is <= `tolerance_grad`, or when the step, the slope along it or the
    change of the loss falls below `tolerance_change`. `closure` clears the gradients,
    computes the loss, calls backward() and returns the loss; step() returns the loss of
    its first call. History and counters (`func_evals`, `n_iter`) carry over to the next
    step(), and through state_dict().

    All parameters form one group (no per-group options). The step runs eagerly only: it
    calls the closure a data-dependent number of times, so a captured function may not
    call it.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.tensor([3.0, -1.0], dtype=rill.float64))
    >>> opt = rill.optim.LBFGS([w], line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = ((w - rill.tensor([1.0, 2.0], dtype=rill.float64)) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> float(opt.step(closure))
    13.0
    >>> [round(x, 6) for x in w.tolist()]
    [1.0, 2.0]
    """

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None):
        if max_eval is None and _is_int(max_iter):
            max_eval = max_iter * 5 // 4  # torch's default
        super().__init__(params, dict(
            lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change, history_size=history_size,
            line_search_fn=line_search_fn))

    def add_param_group(self, param_group: dict) -> None:
        if self.param_groups:
            raise ArgumentError("LBFGS treats all its parameters as one vector and takes "
                                "one parameter group (no per-group options); build it with "
                                "all the parameters instead", op=self._name)
        super().add_param_group(param_group)

    def check_group(self, group):
        super().check_group(group)
        for key in ("max_iter", "max_eval", "history_size"):
            if not _is_int(group[key]) or group[key] <= 0:
                raise ArgumentError(f"invalid {key} {group[key]!r}: it must be a positive "
                                    f"integer", op=self._name)
        self._require(group, "tolerance_grad", lambda v: v >= 0, ">= 0")
        self._require(group, "tolerance_change", lambda v: v >= 0, ">= 0")
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ArgumentError(f"line_search_fn must be None or 'strong_wolfe', got "
                                f"{group['line_search_fn']!r}", op=self._name)

    @property
    def _params(self) -> list:
        return self.param_groups[0]["params"]

    # ---- the flat vector ------------------------------------------------------------------

    def _flat_grad(self) -> Tensor:
        """Every parameter's gradient, flattened and concatenated (zeros where none)."""
        parts = []
        for p in self._params:
            g = p.grad
            if g is None:
                g = zeros(_numel(p), dtype=p.dtype, device=p.device)
            elif isinstance(g, SparseRows):
                g = g.to_dense()
            parts.append(g.reshape(-1))
        return concat(parts) if len(parts) > 1 else parts[0]

    def _move(self, t: float, d: Tensor) -> None:
        """Parameters += t * d (d flat)."""
        offset = 0
        for p in self._params:
            n = _numel(p)
            assign(p, scaled_add(p, d[offset:offset + n].reshape(p.shape), 1.0, t))
            offset += n

    def _snapshot(self) -> list:
        return [detached_value(p) for p in self._params]  # values: later assigns leave them be

    def _restore(self, values) -> None:
        for p, x in zip(self._params, values):
            assign(p, x)

    # ---- stepping -------------------------------------------------------------------------

    def step(self, closure=None):
        """Run up to max_iter L-BFGS iterations; returns the loss closure() gave first."""
        if current().interpreter.capturing:
            raise CaptureError(
                "LBFGS.step cannot run inside a captured function: it calls the closure a "
                "number of times that depends on the losses (line search and stopping "
                "tests), which a graph of fixed shape cannot hold. Run the step eagerly: "
                "call opt.step(closure) outside the @rill.capture function", op=self._name)
        if closure is None or not callable(closure):
            raise ArgumentError("LBFGS.step needs a closure: a function that clears the "
                                "gradients, computes the loss, calls backward() and returns "
                                "the loss (it is called several times per step)",
                                op=self._name)
        with no_grad():
            return self._step(closure)

    def _evaluate(self, closure) -> tuple:
        with enable_grad():
            loss = closure()
        return loss, float(loss), self._flat_grad()

    def _step(self, closure):
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size, line_search = group["history_size"], group["line_search_fn"]
        state = self._state(self._params[0], lambda: {"func_evals": 0, "n_iter": 0})

        first_loss, loss, flat_grad = self._evaluate(closure)
        evals = 1
        state["func_evals"] += 1
        if _largest(flat_grad) <= tolerance_grad:  # already optimal
            return first_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:  # the very first iteration: steepest descent
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1.0
            else:
                d, H_diag = _direction(flat_grad, flat_grad - prev_flat_grad, d * t, old_dirs,
                                       old_stps, ro, H_diag, history_size)
            prev_flat_grad, prev_loss = flat_grad, loss

            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr
            else:
                t = lr
            gtd = dot(flat_grad, d)  # the slope along d
            if gtd > -tolerance_change:  # not a descent direction (to tolerance)
                break

            if line_search == "strong_wolfe":
                start = self._snapshot()

                def along(step):  # the loss and gradient at start + step * d
                    self._move(step, d)
                    _, value, grad = self._evaluate(closure)
                    self._restore(start)
                    return value, grad

                loss, flat_grad, t, ls_evals = strong_wolfe(along, t, d, loss, flat_grad, gtd)
                self._move(t, d)
                optimal = _largest(flat_grad) <= tolerance_grad
            else:
                self._move(t, d)
                ls_evals = 0
                optimal = False
                if n_iter != max_iter:  # the last iteration's loss is the next step's first
                    _, loss, flat_grad = self._evaluate(closure)
                    optimal = _largest(flat_grad) <= tolerance_grad
                    ls_evals = 1
            evals += ls_evals
            state["func_evals"] += ls_evals

            if n_iter == max_iter or evals >= max_eval or optimal:
                break
            if _largest(d * t) <= tolerance_change:  # the step is too small
                break
            if abs(loss - prev_loss) < tolerance_change:  # the loss has stopped changing
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return first_loss

    # ---- state_dict -----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """As Optimizer.state_dict(), the history lists copied (later steps change them)."""
        saved = super().state_dict()
        for slots in saved["state"].values():
            for key in _VECTOR_LISTS + ("ro",):
                if isinstance(slots.get(key), list):
                    slots[key] = [detached_value(v) if isinstance(v, Tensor) else v
                                  for v in slots[key]]
        return saved

    def _loaded_slot(self, p, key, name, value):
        size = sum(_numel(q) for q in self._params)
        if name in _VECTORS and value is not None:
            return self._loaded_vector(name, value, size)
        if name in _VECTOR_LISTS and value is not None:
            return [self._loaded_vector(name, v, size) for v in value]
        if name == "ro" and value is not None:
            return [float(v) for v in value]
        if isinstance(value, Tensor):  # a number torch keeps as a 0-d tensor
            return float(value)
        return value

    def _loaded_vector(self, name, value, size):
        p = self._params[0]
        if not isinstance(value, Tensor) or value.shape != (size,):
            raise ArgumentError(f"slot {name!r} of the state dict must be a flat vector of "
                                f"{size} numbers (all the parameters), got "
                                f"{getattr(value, 'shape', type(value).__name__)}",
                                op=f"{self._name}.load_state_dict")
        if value.device is not p.device:
            value = value.to(p.device)
        if value.dtype is not p.dtype:
            value = cast(value, p.dtype)
        return detached_value(value)


def _direction(flat_grad, y, s, old_dirs, old_stps, ro, H_diag, history_size):
    """The L-BFGS direction -H g by the two-loop recursion (Nocedal & Wright, algorithm
    7.4), after taking the newest pair (s, y) into the history if its curvature y.s is
    positive enough to keep H positive definite. old_dirs holds the y's, old_stps the s's,
    ro their 1 / y.s (the lists are updated in place). Returns (d, H_diag)."""
    ys = dot(y, s)
    if ys > 1e-10:
        if len(old_dirs) == history_size:  # forget the oldest pair
            del old_dirs[0], old_stps[0], ro[0]
        old_dirs.append(y)
        old_stps.append(s)
        ro.append(1.0 / ys)
        H_diag = ys / dot(y, y)  # the initial Hessian guess: gamma of N&W eq. 7.20
    alphas = [0.0] * len(old_dirs)
    q = -flat_grad
    for i in range(len(old_dirs) - 1, -1, -1):
        alphas[i] = dot(old_stps[i], q) * ro[i]
        q = scaled_add(q, old_dirs[i], 1.0, -alphas[i])
    r = q * H_diag
    for i in range(len(old_dirs)):
        beta = dot(old_dirs[i], r) * ro[i]
        r = scaled_add(r, old_stps[i], 1.0, alphas[i] - beta)
    return r, H_diag


def _largest(x: Tensor) -> float:
    return float(x.abs().max())


def _numel(p) -> int:
    return math.prod(p.shape)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
