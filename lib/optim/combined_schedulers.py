"""Schedulers made of schedulers: SequentialLR (one after another, at milestones) and
ChainedScheduler (all at once, each scaling the rate the others set), as torch's."""
from __future__ import annotations

from bisect import bisect_right

from ..errors import ArgumentError
from .optimizer import Optimizer
from .plateau_scheduler import ReduceLROnPlateau
from .schedulers import LRScheduler


def _check_parts(schedulers, optimizer, owner) -> list:
    if isinstance(schedulers, LRScheduler) or not isinstance(schedulers, (list, tuple)) \
            or not schedulers:
        raise ArgumentError(f"{owner} takes a non-empty list of schedulers, got "
                            f"{type(schedulers).__name__}", op=owner)
    for i, scheduler in enumerate(schedulers):
        if not isinstance(scheduler, LRScheduler):
            raise ArgumentError(f"schedulers[{i}] is a {type(scheduler).__name__}, not a "
                                f"rill.optim scheduler", op=owner)
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ArgumentError(f"schedulers[{i}] is a ReduceLROnPlateau, whose step() needs "
                                f"the metric; step it yourself beside {owner}", op=owner)
        if scheduler.optimizer is not optimizer:
            raise ArgumentError(f"schedulers[{i}] ({type(scheduler).__name__}) schedules "
                                f"another optimizer; all must schedule the same one", op=owner)
    return list(schedulers)


class _Combined(LRScheduler):
    """state_dict() holds the parts' state dicts, under "_schedulers"."""

    _not_saved = LRScheduler._not_saved + ("_schedulers",)

    def state_dict(self):
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        parts = state_dict.get("_schedulers") if isinstance(state_dict, dict) else None
        if not isinstance(parts, list) or len(parts) != len(self._schedulers):
            raise ArgumentError(f"expects the state_dict() of a {type(self).__name__} of "
                                f"{len(self._schedulers)} schedulers",
                                op=f"{type(self).__name__}.load_state_dict")
        super().load_state_dict(state_dict)
        for scheduler, saved in zip(self._schedulers, parts):
            scheduler.load_state_dict(saved)

    def restart(self) -> None:
        # (torch cannot either: its parts have no rates of their own to restart from)
        raise ArgumentError(f"a {type(self).__name__} cannot be a later part of a "
                            f"SequentialLR (it has no schedule of its own to restart at a "
                            f"milestone); list its parts in the SequentialLR instead",
                            op="SequentialLR")


class SequentialLR(_Combined):
    """Run `schedulers` one after another: the first until `milestones[0]`, the next from
    its own start at that step, and so on. Build the parts first, on the same optimizer;
    building SequentialLR undoes their first steps and starts the first one afresh.

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> warm = rill.optim.LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> decay = rill.optim.ExponentialLR(opt, gamma=0.5)
    >>> sched = rill.optim.SequentialLR(opt, [warm, decay], milestones=[2])
    >>> lrs = []
    >>> for _ in range(5):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [0.5, 0.75, 1.0, 0.5, 0.25]
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        name = "SequentialLR"
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=name)
        schedulers = _check_parts(schedulers, optimizer, name)
        milestones = list(milestones)
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(f"{len(schedulers)} schedulers need {len(schedulers) - 1} "
                                f"milestones (the steps where the next one takes over), got "
                                f"{len(milestones)}", op=name)
        self._schedulers, self._milestones = schedulers, milestones
        self.optimizer = optimizer
        self.last_epoch = last_epoch + 1
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        _undo_first_step(self)
        first = self._schedulers[bisect_right(milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        i = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[i]
        if i > 0 and self._milestones[i - 1] == self.last_epoch:
            scheduler.restart()  # its schedule from step 0
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()



def _undo_first_step(scheduler) -> None:
    """Step counters back by the one step building a scheduler takes (into nested parts)."""
    for part in getattr(scheduler, "_schedulers", ()):
        _undo_first_step(part)
    if not hasattr(scheduler, "_schedulers"):
        scheduler.last_epoch -= 1


class ChainedScheduler(_Combined):
    """Step all `schedulers` together on every step(): each scales the rate the ones before
    it set (multiplicative schedulers compose).

    >>> import rill
    >>> opt = rill.optim.SGD([rill.nn.Parameter(rill.zeros(1))], lr=1.0)
    >>> sched = rill.optim.ChainedScheduler([rill.optim.ConstantLR(opt, 0.5, total_iters=2),
    ...                                      rill.optim.ExponentialLR(opt, gamma=0.5)])
    >>> lrs = []
    >>> for _ in range(4):
    ...     lrs.append(sched.get_last_lr()[0])
    ...     sched.step()
    >>> lrs
    [0.5, 0.25, 0.25, 0.125]
    """

    def __init__(self, schedulers, optimizer=None):
        name = "ChainedScheduler"
        if isinstance(schedulers, (list, tuple)) and schedulers and optimizer is None:
            optimizer = getattr(schedulers[0], "optimizer", None)
        elif not isinstance(schedulers, (list, tuple)) or not schedulers:
            _check_parts(schedulers, optimizer, name)  # says what is wrong with them
        if not isinstance(optimizer, Optimizer):
            raise ArgumentError(f"a scheduler needs a rill.optim optimizer, got "
                                f"{type(optimizer).__name__}", op=name)
        self._schedulers = _check_parts(schedulers, optimizer, name)
        self.optimizer = optimizer
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self) -> None:
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]
