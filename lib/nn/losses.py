"""Losses as modules, with PyTorch's constructor arguments (the deprecated size_average and
reduce included, turned into the reduction they mean). Each is called as loss(input,
target) (or with the inputs its functional form takes); class weights are buffers, so they
follow `to()` and appear in `state_dict` as in PyTorch."""
from __future__ import annotations

from ..errors import ArgumentError, check_number
from . import functional as F
from .module import Module


class _Loss(Module):
    reductions = F.REDUCTIONS

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        name = type(self).__name__
        if size_average is not None or reduce is not None:
            reduction = F.legacy_reduction(size_average, reduce, "mean", name)
        if reduction not in self.reductions:
            raise ArgumentError(f"reduction must be one of {self.reductions}, got "
                                f"{reduction!r}", op=name)
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

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(size_average, reduce, reduction)
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

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
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
        super().__init__(reduction=reduction)
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

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, x, target):
        return F.binary_cross_entropy_with_logits(x, target, self.weight, self.pos_weight,
                                                  self.reduction)


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities in [0, 1] against targets, each log clamped at
    -100 (as PyTorch); `weight` scales each element. BCEWithLogitsLoss is the stable form
    for logits.

    >>> import rill
    >>> round(float(rill.nn.BCELoss()(rill.tensor([0.5]), rill.tensor([1.0]))), 4)
    0.6931
    """

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta beyond, for d = input - target."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = check_number(beta, "beta", "SmoothL1Loss", low=0)

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class KLDivLoss(_Loss):
    """KL divergence of the distribution target from input, input holding log-probabilities
    (and target too with `log_target`); reduction='batchmean' gives the divergence per
    sample, 'mean' (the default, as PyTorch) divides by the element count."""

    reductions = F.KL_REDUCTIONS

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class CosineEmbeddingLoss(_Loss):
    """1 - cos(x1, x2) for target 1, max(0, cos(x1, x2) - margin) for target -1."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = check_number(margin, "margin", "CosineEmbeddingLoss")

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, self.margin,
                                       reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """max(0, -target * (input1 - input2) + margin)."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = check_number(margin, "margin", "MarginRankingLoss")

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, self.margin,
                                     reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """max(d(anchor, positive) - d(anchor, negative) + margin, 0) with the pairwise
    p-distance d; `swap` uses the smaller of d(a, n) and d(p, n)."""

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = check_number(margin, "margin", "TripletMarginLoss", low=0, low_open=True)
        self.p, self.eps, self.swap = p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p,
                                     self.eps, self.swap, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    """log(1 + exp(-target * input)) for targets 1 and -1."""

    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Negative log-likelihood of target under N(input, var); called as
    loss(input, target, var)."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class PoissonNLLLoss(_Loss):
    """Negative log-likelihood of target under a Poisson law of rate exp(input)
    (`log_input`) or input; `full` adds Stirling's term."""

    def __init__(self, log_input: bool = True, full: bool = False, size_average=None,
                 eps: float = 1e-8, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                  reduction=self.reduction)
