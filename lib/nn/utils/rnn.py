"""Padding variable-length sequences into one tensor, as torch.nn.utils.rnn.

>>> import rill
>>> pad_sequence([rill.tensor([1, 2, 3]), rill.tensor([4])], batch_first=True)
tensor([[1, 2, 3],
        [4, 0, 0]])
"""
from __future__ import annotations

from ...errors import ShapeError
from ...ops.arguments import as_bool, as_choice, as_tensors
from ...ops.shape import pad, stack
from ...tensor import Tensor


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack sequences of shapes (L_i, *) into one tensor, each padded with
    `padding_value` to the longest length L: shape (L, B, *), or (B, L, *) with
    `batch_first`. `padding_side` "left" puts the padding before each sequence.

    Differentiable in every sequence (the padding gets no gradient). A single tensor is
    taken as a batch of sequences along its first axis, as torch does.
    """
    op = "pad_sequence"
    batch_first = as_bool(batch_first, "batch_first", op)
    padding_side = as_choice(padding_side, "padding_side", op, ("right", "left"))
    if isinstance(sequences, Tensor):
        sequences = [sequences[i] for i in range(sequences.shape[0])] if sequences.ndim else []
    sequences = as_tensors(list(sequences), "sequences", op)  # refuses an empty list
    trailing = {s.shape[1:] for s in sequences if s.ndim}
    if any(s.ndim == 0 for s in sequences) or len(trailing) > 1:
        shapes = ", ".join(str(s.shape) for s in sequences)
        raise ShapeError(f"sequences must have shape (length, *) with the same trailing "
                         f"dimensions, got shapes {shapes}", op=op)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        gap = longest - s.shape[0]
        width = (0, gap) if padding_side == "right" else (gap, 0)
        padded.append(pad(s, (width,) + ((0, 0),) * (s.ndim - 1), value=padding_value)
                      if gap else s)
    return stack(padded, axis=0 if batch_first else 1)
