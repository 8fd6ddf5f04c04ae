"""ReduceLROnPlateau: cut the rate when a watched metric stops improving, as torch's."""
from __future__ import annotations

import math

from ..errors import ArgumentError
from ..tensor import Tensor
from .optimizer import Optimizer
from .schedulers import LRScheduler


class ReduceLROnPlateau(LRScheduler):
    """Multiply every group's rate by `factor` when the metric passed to `step(metrics)` has
    not improved for more than `patience` steps; then wait `cooldown` steps before counting
    again. A rate never goes below `min_lr` (one number, or one per group), and a cut
    smaller than `eps` is skipped.

    Improving means, in `mode` "min", a metric below best * (1 - threshold)
    (`threshold_mode` "rel") or below best - threshold ("abs"); in mode "max", above
    best * (1 + threshold) or best + threshold.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    >>> for loss in [3.0, 2.0, 2.0, 2.0, 2.0, 2.0]:
    ...     sched.step(loss)
    >>> sched.get_last_lr()
    [0.25]
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0, eps: float = 1e-8):
        name = "ReduceLROnPlateau"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=name)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor >= 1.0:
            raise ArgumentError(f"factor must be a number < 1 (the rate is multiplied by it), "
                                f"got {factor!r}", op=name)
        if mode not in ("min", "max"):
            raise ArgumentError(f"mode must be 'min' or 'max', got {mode!r}", op=name)
        if threshold_mode not in ("rel", "abs"):
            raise ArgumentError(f"threshold_mode must be 'rel' or 'abs', got "
                                f"{threshold_mode!r}", op=name)
        for key, value in (("patience", patience), ("cooldown", cooldown)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ArgumentError(f"{key} must be an integer >= 0, got {value!r}", op=name)
        groups = optimizer.param_groups
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != len(groups):
                raise ArgumentError(f"min_lr has {len(min_lr)} values for {len(groups)} "
                                    f"parameter groups", op=name)
            self.default_min_lr, self.min_lrs = None, list(min_lr)
        else:
            self.default_min_lr, self.min_lrs = min_lr, [min_lr] * len(groups)
        self.optimizer = optimizer
        self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in groups]
        self._reset()

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        """Whether metric a improves on best by more than the threshold."""
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                        else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel"
                    else best + self.threshold)

    def step(self, metrics, epoch=None) -> None:
        """Take this step's metric (a number or a 0-d tensor) and cut the rates if due."""
        try:
            current = float(metrics.item() if isinstance(metrics, Tensor) else metrics)
        except (TypeError, ValueError, AttributeError):
            raise ArgumentError(f"ReduceLROnPlateau.step takes the metric to watch (a number "
                                f"or a 0-d tensor), got {type(metrics).__name__}",
                                op="ReduceLROnPlateau") from None
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad steps in the cooldown do not count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ArgumentError(f"the optimizer has {len(groups)} parameter groups, but "
                                    f"min_lr was given for {len(self.min_lrs)} (a group was "
                                    f"added since); set the scheduler's min_lrs to one value "
                                    f"per group", op="ReduceLROnPlateau")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, min_lr in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                group["lr"] = new

    def get_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]
