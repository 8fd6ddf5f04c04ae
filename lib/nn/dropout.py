"""Dropout: zero a random fraction p of the inputs while training, scale the rest by
1 / (1 - p) so that expectations match evaluation, where it is the identity."""
from __future__ import annotations

from ..errors import ArgumentError, check_number
from . import functional as F
from .module import Module


class Dropout(Module):
    """Zeroes each element with probability p in training mode; identity in eval mode.

    Draws from `generator` (the default generator when None), so a seeded generator
    repeats the same masks. `inplace=True` gives the input tensor object the result (see
    rill.nn.functional's activations section for what that means for rill's tensors).

    >>> import rill
    >>> drop = rill.nn.Dropout(0.5, generator=rill.Generator(0))
    >>> y = drop(rill.ones(1000))
    >>> sorted(set(y.tolist())), 400 < int((y == 0).sum()) < 600
    ([0.0, 2.0], True)
    >>> drop.eval()(rill.ones(3))
    tensor([1., 1., 1.])
    """

    def __init__(self, p: float = 0.5, inplace: bool = False, generator=None):
        super().__init__()
        check_number(p, "the dropout probability p", "Dropout", low=0, high=1)
        if not isinstance(inplace, bool):
            raise ArgumentError(f"inplace must be True or False, got {inplace!r}", op="Dropout")
        self.p, self.inplace, self.generator = p, inplace, generator

    def forward(self, x):
        return F.dropout(x, self.p, training=self.training, inplace=self.inplace,
                         generator=self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}" + (", inplace=True" if self.inplace else "")
