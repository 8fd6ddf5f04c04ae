"""Losses as modules: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, HuberLoss,
BCEWithLogitsLoss. Each is called as loss(input, target); class weights are buffers, so
they follow `to()` and appear in `state_dict` as in PyTorch."""
from __future__ import annotations

from ..errors import ArgumentError
from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in F.REDUCTIONS:
            raise ArgumentError(f"reduction must be one of {F.REDUCTIONS}, got {reduction!r}",
                                op=type(self).__name__)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}" if self.reduction != "mean" else ""


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits (N, C, ...) against class indices (N, ...) or class
    probabilities; optional per-class `weight`, `ignore_index`, `label_smoothing`.

    >>> import rill
    >>> loss = rill.nn.CrossEntropyLoss()
    >>> round(float(loss(rill.tensor([[2.0, 0.0, 0.0]]), rill.tensor([0]))), 4)
    0.2395
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, logits, target):
        return F.cross_entropy(logits, target, self.weight, self.ignore_index, self.reduction,
                               self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities (N, C, ...) at class indices (N, ...).

    >>> import rill
    >>> logp = rill.log(rill.tensor([[0.5, 0.25, 0.25]]))
    >>> round(float(rill.nn.NLLLoss()(logp, rill.tensor([1]))), 4)
    1.3863
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, log_probs, target):
        return F.nll_loss(log_probs, target, self.weight, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    """Squared error, averaged (or summed, or per element).

    >>> import rill
    >>> rill.nn.MSELoss(reduction="sum")(rill.tensor([1.0, 3.0]), rill.tensor([0.0, 1.0]))
    tensor(5.)
    """

    def forward(self, x, target):
        return F.mse_loss(x, target, self.reduction)


class L1Loss(_Loss):
    """Absolute error, averaged (or summed, or per element).

    >>> import rill
    >>> rill.nn.L1Loss()(rill.tensor([1.0, 3.0]), rill.tensor([0.0, 1.0]))
    tensor(1.5)
    """

    def forward(self, x, target):
        return F.l1_loss(x, target, self.reduction)


class HuberLoss(_Loss):
    """Squared error for |error| < delta, linear beyond (robust to outliers).

    >>> import rill
    >>> rill.nn.HuberLoss(delta=1.0)(rill.tensor([0.5, 3.0]), rill.tensor([0.0, 0.0]))
    tensor(1.3125)
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, x, target):
        return F.huber_loss(x, target, self.reduction, self.delta)

    def extra_repr(self) -> str:
        return ", ".join(filter(None, [super().extra_repr(), f"delta={self.delta}"]))


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits against targets in [0, 1], computed stably;
    `weight` scales each element, `pos_weight` the positive term (per class).

    >>> import rill
    >>> loss = rill.nn.BCEWithLogitsLoss()
    >>> round(float(loss(rill.tensor([0.0]), rill.tensor([1.0]))), 4)
    0.6931
    """

    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__(reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, x, target):
        return F.binary_cross_entropy_with_logits(x, target, self.weight, self.pos_weight,
                                                  self.reduction)
