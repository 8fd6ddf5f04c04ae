"""probs= or logits=: the two spellings of Bernoulli's and Categorical's parameter."""
from __future__ import annotations

from ..errors import ArgumentError


def probs_or_logits(probs, logits, op: str):
    """The one given, by name; ArgumentError unless exactly one is."""
    if (probs is None) == (logits is None):
        raise ArgumentError("pass exactly one of probs= or logits=", op=op)
    return ("probs", probs) if probs is not None else ("logits", logits)
