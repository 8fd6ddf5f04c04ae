"""Schedulers whose rate cycles: CyclicLR (triangles, with momentum cycling the other way)
and CosineAnnealingWarmRestarts (cosine decays that restart), with torch's arithmetic."""
from __future__ import annotations

import math
import types

from ..errors import ArgumentError
from .schedulers import LRScheduler, _per_group, _positive_int
from .optimizer import Optimizer

_MODES = ("triangular", "triangular2", "exp_range")


class CyclicLR(LRScheduler):
    """The cyclical learning rate policy (Smith, 2017), as PyTorch's CyclicLR.

    The rate goes from `base_lr` up to `max_lr` over `step_size_up` steps and back down over
    `step_size_down` (default: the same), the height of each cycle scaled by `scale_fn`:
    1 for mode "triangular", halved each cycle for "triangular2", gamma ** step for
    "exp_range"; or a function of the cycle number (`scale_mode="cycle"`) or of the step
    ("iterations") given as `scale_fn`. Step it after every batch. Building it sets the
    rates to base_lr. With `cycle_momentum`, momentum (SGD, RMSprop) or beta1 (the Adam
    family) moves the other way, from `max_momentum` down to `base_momentum` and back.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0, momentum=0.9)
    >>> sched = rill.optim.CyclicLR(opt, base_lr=0.1, max_lr=0.5, step_size_up=2)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(round(sched.get_last_lr()[0], 6))
    ...     sched.step()
    >>> lrs
    [0.1, 0.3, 0.5, 0.3, 0.1]
    """

    _not_saved = LRScheduler._not_saved + ("_scale_fn_custom",)

    def __init__(self, optimizer, base_lr, max_lr, step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn=None, scale_mode: str = "cycle",
                 cycle_momentum: bool = True, base_momentum=0.8, max_momentum=0.9,
                 last_epoch: int = -1):
        name = "CyclicLR"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=name)
        groups = optimizer.param_groups
        base_lrs = _per_group(base_lr, groups, "base_lr", name)
        if last_epoch == -1:
            for group, lr in zip(groups, base_lrs):
                group["lr"] = lr
        self.max_lrs = _per_group(max_lr, groups, "max_lr", name)
        _positive_int(step_size_up, "step_size_up", name)
        if step_size_down is not None:
            _positive_int(step_size_down, "step_size_down", name)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if scale_fn is None and mode not in _MODES:
            raise ArgumentError(f"mode must be one of {_MODES} (or give scale_fn), got "
                                f"{mode!r}", op=name)
        if scale_fn is not None and not callable(scale_fn):
            raise ArgumentError(f"scale_fn must be a function, got {type(scale_fn).__name__}",
                                op=name)
        if scale_mode not in ("cycle", "iterations"):
            raise ArgumentError(f"scale_mode must be 'cycle' or 'iterations', got "
                                f"{scale_mode!r}", op=name)
        self.mode, self.gamma = mode, gamma
        self._scale_fn_custom = scale_fn
        # The built-in modes imply their scale_mode (torch's rule); a custom scale_fn keeps
        # the one given.
        self.scale_mode = scale_mode if scale_fn is not None else \
            ("iterations" if mode == "exp_range" else "cycle")
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ArgumentError(f"cycle_momentum needs an optimizer with momentum or betas; "
                                    f"{type(optimizer).__name__} has neither (pass "
                                    f"cycle_momentum=False)", op=name)
            self.use_beta1 = "betas" in optimizer.defaults
            self.base_momentums = _per_group(base_momentum, groups, "base_momentum", name)
            self.max_momentums = _per_group(max_momentum, groups, "max_momentum", name)
            if last_epoch == -1:
                for group, top, low in zip(groups, self.max_momentums, self.base_momentums):
                    self._set_momentum(group, top)
                    group["max_momentum"], group["base_momentum"] = top, low
        super().__init__(optimizer, last_epoch)
        # The cycle's floor is base_lr, even where an earlier scheduler left another
        # initial_lr (which the first step above used, as torch's does).
        self.base_lrs = base_lrs

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def scale_fn(self, x) -> float:
        """The height of the cycle at x (the cycle number, or the step: see scale_mode)."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        t = self.last_epoch
        cycle = math.floor(1 + t / self.total_size)
        x = 1.0 + t / self.total_size - cycle  # the position in this cycle, in [0, 1)
        if x <= self.step_ratio:
            rise = x / self.step_ratio
        else:
            rise = (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else t)
        lrs = [base + (top - base) * rise * scale
               for base, top in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for group, low, top in zip(self._groups(), self.base_momentums, self.max_momentums):
                self._set_momentum(group, top - (top - low) * rise * scale)
        return lrs

    def state_dict(self):
        state = super().state_dict()
        fn = self._scale_fn_custom
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) \
            else dict(fn.__dict__)
        return state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        saved = state_dict.get("_scale_fn_custom")
        if saved is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(saved)


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR (Loshchilov & Hutter): the rate anneals from its base to `eta_min` along half a
    cosine over `T_0` steps, then restarts, each period `T_mult` times the last.

    `step(epoch)` may be given a fractional epoch (epoch + batch / batches) to anneal
    within an epoch, as PyTorch's.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.CosineAnnealingWarmRestarts(opt, T_0=2)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(round(sched.get_last_lr()[0], 6))
    ...     sched.step()
    >>> lrs
    [1.0, 0.5, 1.0, 0.5, 1.0]
    """

    def __init__(self, optimizer, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1):
        name = "CosineAnnealingWarmRestarts"
        _positive_int(T_0, "T_0", name)
        if not isinstance(T_mult, int) or isinstance(T_mult, bool) or T_mult < 1:
            raise ArgumentError(f"T_mult must be an integer >= 1, got {T_mult!r}", op=name)
        if isinstance(eta_min, bool) or not isinstance(eta_min, (int, float)):
            raise ArgumentError(f"eta_min must be a number, got {eta_min!r}", op=name)
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch  # steps into the current period
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.T_cur /
                                                                  self.T_i)) / 2
                for b in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one step, or go to `epoch` (a number >= 0, fractions allowed)."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:  # a restart: the next period is T_mult times longer
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch < 0:
                raise ArgumentError(f"epoch must be a number >= 0, got {epoch!r}",
                                    op="CosineAnnealingWarmRestarts")
            if epoch < self.T_0:
                self.T_i, self.T_cur = self.T_0, epoch
            elif self.T_mult == 1:
                self.T_cur = epoch % self.T_0
            else:
                # The periods T_0 * T_mult**k end at T_0 * (T_mult**n - 1) / (T_mult - 1):
                # n periods lie wholly before epoch.
                n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                self.T_i = self.T_0 * self.T_mult ** n
        self._step_count += 1
        self.last_epoch = math.floor(epoch)
        self._set(self.get_lr())

    def closed_form_lr(self):
        # torch has no closed form here: a jump (SequentialLR's hand-over) keeps the period
        # where it is, and only last_epoch moves.
        return self.get_lr()
