"""Learning-rate schedulers: set each parameter group's "lr" once per step(), as torch's.

Each scheduler computes the next rates from the current ones (PyTorch's chainable form, and
PyTorch's arithmetic, so the sequences are the same floats), except where a closed form is
the definition (OneCycleLR, LinearWarmup). Building a scheduler records each group's
starting rate as "initial_lr" and applies the rate of step 0.
"""
from __future__ import annotations

import math
import types
from bisect import bisect_right

from ..errors import ArgumentError
from .optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses give `get_lr()`, the rates after `last_epoch` steps.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.zeros(1))
    >>> opt = rill.optim.SGD([w], lr=1.0)
    >>> sched = rill.optim.ExponentialLR(opt, gamma=0.5)
    >>> for _ in range(2):
    ...     opt.step()
    ...     sched.step()
    >>> sched.get_last_lr(), opt.param_groups[0]["lr"]
    ([0.25], 0.25)
    """

    _is_initial = False
    _not_saved = ("optimizer", "_is_initial")  # attributes that are not state

    def __init__(self, optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=type(self).__name__)
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise ArgumentError(f"resuming at last_epoch={last_epoch} needs 'initial_lr' "
                                        f"in every parameter group; group {i} has none (load the "
                                        f"optimizer's state first)", op=type(self).__name__)
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """The step a scheduler takes when built (SequentialLR repeats it for the scheduler
        it starts with): it sets the rates of step last_epoch + 1."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The rates for step `last_epoch`, from the groups' current rates."""
        raise NotImplementedError

    def closed_form_lr(self) -> list:
        """The rates for step `last_epoch`, from the base rates alone."""
        return self.get_lr()

    def step(self, epoch: int | None = None) -> None:
        """Advance one step and set every group's "lr" (call after optimizer.step()).

        `epoch` (deprecated in torch, kept for ports) jumps to that step instead, with the
        rates computed from the base rates."""
        self._step_count += 1
        self._update_lr(epoch)

    def _update_lr(self, epoch=None) -> None:
        if epoch is None:
            self.last_epoch += 1
            self._set(self.get_lr())
        else:
            self.last_epoch = epoch
            self._set(self.closed_form_lr())

    def restart(self) -> None:
        """Go back to step 0 (the base rates' schedule from its start), as torch's step(0)
        does inside SequentialLR (the step count is not advanced)."""
        self._update_lr(0)

    def _set(self, lrs) -> None:
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list:
        """The rates the last step set, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self) -> dict:
        """Everything but the optimizer: numbers, strings and lists (rill.save writes it)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items()
                if k not in self._not_saved}

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a `state_dict()` of a scheduler of the same kind."""
        own = LRScheduler.state_dict(self)  # this class's own keys (subclasses add nested ones)
        if not isinstance(state_dict, dict) or set(state_dict) - set(self._not_saved) != set(own):
            given = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise ArgumentError(f"expects the state_dict() of a {type(self).__name__}, with "
                                f"keys {sorted(own)}; got {given}",
                                op=f"{type(self).__name__}.load_state_dict")
        self.__dict__.update({k: list(v) if isinstance(v, (list, tuple)) else v
                              for k, v in state_dict.items() if k not in self._not_saved})

    def _groups(self):
        return self.optimizer.param_groups


def _non_negative_int(value, name, owner):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ArgumentError(f"{name} must be an integer >= 0, got {value!r}", op=owner)


def _positive_int(value, name, owner):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ArgumentError(f"{name} must be a positive integer, got {value!r}", op=owner)


def _lambdas(lr_lambda, optimizer, owner) -> list:
    """One function per parameter group: the one given for all, or a list of them."""
    groups = optimizer.param_groups if isinstance(optimizer, Optimizer) else []
    if isinstance(lr_lambda, (list, tuple)):
        if len(lr_lambda) != len(groups):
            raise ArgumentError(f"lr_lambda has {len(lr_lambda)} functions for "
                                f"{len(groups)} parameter groups", op=owner)
        lambdas = list(lr_lambda)
    else:
        lambdas = [lr_lambda] * len(groups)
    for fn in lambdas:
        if not callable(fn):
            raise ArgumentError(f"lr_lambda must be a function of the step (or one per "
                                f"group), got {type(fn).__name__}", op=owner)
    return lambdas


class _LambdaState:
    """state_dict() of a scheduler holding user functions: a plain function is not saved
    (it is code; the scheduler built again takes it), a callable object's attributes are."""

    _not_saved = LRScheduler._not_saved + ("lr_lambdas",)

    def state_dict(self):
        state = LRScheduler.state_dict(self)
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else
                               dict(fn.__dict__) for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        LRScheduler.load_state_dict(self, state_dict)
        for fn, saved in zip(self.lr_lambdas, state_dict.get("lr_lambdas") or []):
            if saved is not None:
                fn.__dict__.update(saved)


class LambdaLR(_LambdaState, LRScheduler):
    """The rate is the base rate times lr_lambda(step) (one function, or one per group).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.LambdaLR(opt, lr_lambda=lambda step: 1 / (step + 1))
    >>> lrs = []
    >>> for _ in range(3):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [1.0, 0.5, 0.3333333333333333]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _lambdas(lr_lambda, optimizer, "LambdaLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaState, LRScheduler):
    """Each step multiplies the rate by lr_lambda(step) (one function, or one per group).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.MultiplicativeLR(opt, lr_lambda=lambda step: 0.5)
    >>> sched.step(); sched.step()
    >>> sched.get_last_lr()
    [0.25]
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _lambdas(lr_lambda, optimizer, "MultiplicativeLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self._groups()
        if self._is_initial:
            return [g["lr"] for g in groups]
        return [g["lr"] * fn(self.last_epoch) for fn, g in zip(self.lr_lambdas, groups)]


class ConstantLR(LRScheduler):
    """The rate is `factor` times its base for the first `total_iters` steps, then the base.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.ConstantLR(opt, factor=0.5, total_iters=2)
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [0.5, 0.5, 1.0, 1.0]
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
                not 0 <= factor <= 1:
            raise ArgumentError(f"factor must be a number in [0, 1], got {factor!r}",
                                op="ConstantLR")
        _non_negative_int(total_iters, "total_iters", "ConstantLR")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self._groups()
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in groups]
        if self.last_epoch != self.total_iters:
            return [g["lr"] for g in groups]
        if self.factor == 0:  # no rate to divide back up: the base rate is the meaning
            return list(self.base_lrs)
        return [g["lr"] * (1.0 / self.factor) for g in groups]

    def closed_form_lr(self):
        done = self.last_epoch >= self.total_iters
        return [b * (self.factor + done * (1 - self.factor)) for b in self.base_lrs]


class PolynomialLR(LRScheduler):
    """The rate decays from its base to 0 over `total_iters` steps as
    (1 - step / total_iters) ** power, then stays 0.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.PolynomialLR(opt, total_iters=4, power=2.0)
    >>> lrs = []
    >>> for _ in range(6):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0]
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):
        _positive_int(total_iters, "total_iters", "PolynomialLR")
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self._groups()
        t, n = self.last_epoch, self.total_iters
        if self._is_initial or t > n:
            return [g["lr"] for g in groups]
        # The ratio of this step's factor to the last one's (torch's chainable form).
        decay = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power
        return [g["lr"] * decay for g in groups]

    def closed_form_lr(self):
        left = 1.0 - min(self.total_iters, self.last_epoch) / self.total_iters
        return [b * left ** self.power for b in self.base_lrs]


class StepLR(LRScheduler):
    """Multiply the rate by `gamma` every `step_size` steps.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.StepLR(opt, step_size=2, gamma=0.5)
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [1.0, 1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        _positive_int(step_size, "step_size", "StepLR")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [g["lr"] for g in self._groups()]
        return [g["lr"] * self.gamma for g in self._groups()]

    def closed_form_lr(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by `gamma` at each milestone step (twice if listed twice).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.MultiStepLR(opt, milestones=[1, 3], gamma=0.5)
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [1.0, 0.5, 0.5, 0.25]
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(milestones)  # a sorted list: repeats count, and it saves
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        times = self.milestones.count(self.last_epoch)
        if not times:
            return [g["lr"] for g in self._groups()]
        return [g["lr"] * self.gamma ** times for g in self._groups()]

    def closed_form_lr(self):
        return [b * self.gamma ** bisect_right(self.milestones, self.last_epoch)
                for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the rate by `gamma` every step.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.ExponentialLR(opt, gamma=0.5)
    >>> sched.step()
    >>> sched.get_last_lr()
    [0.5]
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return [g["lr"] for g in self._groups()]
        return [g["lr"] * self.gamma for g in self._groups()]

    def closed_form_lr(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal the rate from its base to `eta_min` along half a cosine over `T_max` steps
    (and back up over the next T_max, as PyTorch's, if stepped on).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.CosineAnnealingLR(opt, T_max=2)
    >>> lrs = []
    >>> for _ in range(3):
    ...     lrs.append(round(sched.get_last_lr()[0], 6))
    ...     sched.step()
    >>> lrs
    [1.0, 0.5, 0.0]
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        _positive_int(T_max, "T_max", "CosineAnnealingLR")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t, T, eta_min = self.last_epoch, self.T_max, self.eta_min
        groups = self._groups()
        if self._is_initial:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and t > 0:
            return [eta_min + (b - eta_min) * (1 + math.cos(t * math.pi / T)) / 2
                    for b in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [g["lr"] + (b - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) *
                (g["lr"] - eta_min) + eta_min for g in groups]

    def closed_form_lr(self):
        return [self.eta_min + (b - self.eta_min) *
                (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2 for b in self.base_lrs]


class LinearLR(LRScheduler):
    """PyTorch's LinearLR: the rate's factor goes linearly from `start_factor` to
    `end_factor` over `total_iters` steps, then stays.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [0.5, 0.75, 1.0, 1.0]
    """

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1:
            raise ArgumentError(f"start_factor must be in (0, 1], got {start_factor!r}",
                                op="LinearLR")
        if not 0 <= end_factor <= 1:
            raise ArgumentError(f"end_factor must be in [0, 1], got {end_factor!r}",
                                op="LinearLR")
        _positive_int(total_iters, "total_iters", "LinearLR")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        groups = self._groups()
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [g["lr"] for g in groups]
        rise = self.end_factor - self.start_factor
        factor = 1.0 + rise / (self.total_iters * self.start_factor +
                               (self.last_epoch - 1) * rise)
        return [g["lr"] * factor for g in groups]

    def closed_form_lr(self):
        rise = self.end_factor - self.start_factor
        return [b * (self.start_factor + rise * min(self.total_iters, self.last_epoch) /
                     self.total_iters) for b in self.base_lrs]


class LinearWarmup(LRScheduler):
    """Warm up: the rate rises linearly from `start_factor` times its base to the base over
    `warmup_steps` steps; then the scheduler `then` (if given) runs from its own start.

    Build `then` first, on the same optimizer. The sequence equals PyTorch's
    SequentialLR([LinearLR(start_factor, total_iters=warmup_steps), then], [warmup_steps]),
    with the warmup rates computed from the base (start_factor 0 is allowed).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> decay = rill.optim.StepLR(opt, step_size=1, gamma=0.5)
    >>> sched = rill.optim.LinearWarmup(opt, warmup_steps=4, then=decay)
    >>> lrs = []
    >>> for _ in range(7):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [0.0, 0.25, 0.5, 0.75, 1.0, 0.5, 0.25]
    """

    _not_saved = LRScheduler._not_saved + ("then",)

    def __init__(self, optimizer, warmup_steps: int, start_factor: float = 0.0, then=None,
                 last_epoch: int = -1):
        _positive_int(warmup_steps, "warmup_steps", "LinearWarmup")
        if not 0 <= start_factor <= 1:
            raise ArgumentError(f"start_factor must be in [0, 1], got {start_factor!r}",
                                op="LinearWarmup")
        if then is not None and (not isinstance(then, LRScheduler) or
                                 then.optimizer is not optimizer):
            raise ArgumentError("then must be a scheduler of the same optimizer",
                                op="LinearWarmup")
        self.warmup_steps, self.start_factor, self.then = warmup_steps, start_factor, then
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        t = self.last_epoch
        if t >= self.warmup_steps:
            return list(self.base_lrs)
        factor = self.start_factor + (1.0 - self.start_factor) * t / self.warmup_steps
        return [b * factor for b in self.base_lrs]

    def step(self):
        if self.then is None or self.last_epoch + 1 < self.warmup_steps:
            return super().step()
        self._step_count += 1
        self.last_epoch += 1
        if self.last_epoch == self.warmup_steps:
            self.then.restart()
        else:
            self.then.step()
        self._last_lr = self.then.get_last_lr()

    def state_dict(self):
        state = super().state_dict()
        if self.then is not None:
            state["then"] = self.then.state_dict()
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        then = state.pop("then", None)
        super().load_state_dict(state)
        if then is not None:
            self.then.load_state_dict(then)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin), as PyTorch's OneCycleLR: the rate rises from
    max_lr / div_factor to `max_lr` over the first `pct_start` of `total_steps`, then
    anneals to that start / final_div_factor; momentum (or Adam's beta1) cycles inversely
    between `max_momentum` and `base_momentum`. Step at most `total_steps` times.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0, momentum=0.9)
    >>> sched = rill.optim.OneCycleLR(opt, max_lr=1.0, total_steps=10)
    >>> lrs = []
    >>> for _ in range(10):
    ...     lrs.append(round(sched.get_last_lr()[0], 4))
    ...     sched.step()
    >>> lrs
    [0.04, 0.52, 1.0, 0.9505, 0.8117, 0.6113, 0.3887, 0.1883, 0.0495, 0.0]
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        name = "OneCycleLR"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=name)
        if total_steps is not None:
            _positive_int(total_steps, "total_steps", name)
        elif epochs is not None and steps_per_epoch is not None:
            _positive_int(epochs, "epochs", name)
            _positive_int(steps_per_epoch, "steps_per_epoch", name)
            total_steps = epochs * steps_per_epoch
        else:
            raise ArgumentError("give total_steps, or epochs and steps_per_epoch", op=name)
        if not 0 <= pct_start <= 1:
            raise ArgumentError(f"pct_start must be in [0, 1], got {pct_start!r}", op=name)
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(f"anneal_strategy must be 'cos' or 'linear', got "
                                f"{anneal_strategy!r}", op=name)
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        up = float(pct_start * total_steps) - 1
        if three_phase:
            # (end step, start lr, end lr, start momentum, end momentum): group keys
            self.phases = [
                [up, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr",
                 "base_momentum", "max_momentum"],
                [total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"]]
        else:
            self.phases = [
                [up, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"]]
        groups = optimizer.param_groups
        if last_epoch == -1:
            for group, top in zip(groups, _per_group(max_lr, groups, "max_lr")):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ArgumentError(f"cycle_momentum needs an optimizer with momentum or betas; "
                                    f"{type(optimizer).__name__} has neither (pass "
                                    f"cycle_momentum=False)", op=name)
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for group, top, low in zip(groups, _per_group(max_momentum, groups, "max_momentum"),
                                           _per_group(base_momentum, groups, "base_momentum")):
                    self._set_momentum(group, top)
                    group["max_momentum"], group["base_momentum"] = top, low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, value):
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        t = self.last_epoch
        if t > self.total_steps:
            raise ArgumentError(f"stepped {t} times, but total_steps is {self.total_steps}",
                                op="OneCycleLR")
        lrs = []
        for group in self._groups():
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
                if t <= end or i == len(self.phases) - 1:
                    pct = (t - start) / (end - start)
                    lrs.append(self._anneal(group[lr0], group[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                start = end
        return lrs


def _per_group(value, groups, name, owner="OneCycleLR"):
    if isinstance(value, (list, tuple)):
        if len(value) != len(groups):
            raise ArgumentError(f"{name} has {len(value)} values for {len(groups)} parameter "
                                f"groups", op=owner)
        return list(value)
    return [value] * len(groups)
