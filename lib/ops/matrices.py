"""Two pieces of matrix code that the view ops (views.py, view_spellings.py) and rill.linalg
share, kept here below both: the check that a tensor is a stack of matrices, and a matrix
diagonal as one strided slice of the flattened matrices (a value, not a view: the view op
`diagonal` builds on it)."""
from __future__ import annotations

from ..errors import ShapeError, reports_as
from .arguments import as_int, as_tensor


def stack_of_matrices(x, op: str) -> None:
    """Refuses a tensor of fewer than 2 dims where `op` wants (a stack of) matrices."""
    if x.ndim < 2:
        raise ShapeError(f"expected a matrix or a stack of matrices (at least 2-d), got shape "
                         f"{tuple(x.shape)}", op=op)


@reports_as("diagonal")
def diagonal(x, /, *, offset: int = 0):
    """The diagonal of each matrix in the last two axes: (..., M, N) -> (..., K); offset > 0
    is above the main diagonal, < 0 below (an empty result when it lies outside).

    >>> from rill.ops.matrices import diagonal
    >>> diagonal(rill.tensor([[1., 2.], [3., 4.]]), offset=1)
    tensor([2.])
    """
    from .shape import reshape
    x = as_tensor(x, "x", "diagonal")
    offset = as_int(offset, "offset", "diagonal")
    stack_of_matrices(x, "diagonal")
    *batch, n, m = x.shape
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    # Row-major, element (i, i + offset) of the flattened matrix is m + 1 after (i-1, ...):
    # one strided slice, whose gradient the slice op already scatters back.
    flat = reshape(x, tuple(batch) + (n * m,))
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start:start + (length - 1) * (m + 1) + 1:m + 1]
