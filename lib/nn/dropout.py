"""Dropout: zero a random fraction p of the inputs while training, scale the rest by
1 / (1 - p) so that expectations match evaluation, where it is the identity."""
from __future__ import annotations

from ..errors import check_number
from . import functional as F
from .module import Module


class Dropout(Module):
    """Zeroes each element with probability p in training mode; identity in eval mode.

    Draws from `generator` (the default generator when None), so a seeded generator
    repeats the same masks.

    >>> import rill
    >>> drop = rill.nn.Dropout(0.5, generator=rill.Generator(0))
    >>> y = drop(rill.ones(1000))
    >>> sorted(set(y.tolist())), 400 < int((y == 0).sum()) < 600
    ([0.0, 2.0], True)
    >>> drop.eval()(rill.ones(3))
    tensor([1., 1., 1.])
    """

    def __init__(self, p: float = 0.5, generator=None):
        super().__init__()
        check_number(p, "the dropout probability p", "Dropout", low=0, high=1)
        self.p, self.generator = p, generator

    def forward(self, x):
        return F.dropout(x, self.p, training=self.training, generator=self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"
