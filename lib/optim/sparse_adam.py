"""SparseAdam: lazy Adam for embedding tables, updating only the rows a gradient touches."""
from __future__ import annotations

from ..eager.context import current
from ..errors import ArgumentError, CaptureError
from ..ops.creation import zeros_like
from ..ops.elementwise import cast, sqrt, where
from ..ops.rows import add_rows_, per_row
from ..ops.sparse_rows import SparseRows
from .optimizer import Optimizer, scale, step_count


class SparseAdam(Optimizer):
    """Adam on the rows a sparse gradient touches, as PyTorch's SparseAdam.

    Gradients must be `SparseRows` (embedding lookups give them). The moments m and v of
    the touched rows are updated as Adam's, and those rows of p move by
    lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps), t being the number of
    steps this parameter has taken. Untouched rows of p, m and v are left exactly as they
    were. Dense gradients are refused (use Adam).

    >>> import rill
    >>> table = rill.nn.Parameter(rill.zeros(4, 2))
    >>> opt = rill.optim.SparseAdam([table], lr=0.1)
    >>> table[rill.tensor([2])].sum().backward()
    >>> opt.step()
    >>> [[round(x, 4) for x in row] for row in table.tolist()]
    [[0.0, 0.0], [0.0, 0.0], [-0.1, -0.1], [0.0, 0.0]]
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas) if isinstance(betas, (tuple, list)) else betas, eps=eps, maximize=maximize))

    def check_group(self, group):
        self._require(group, "lr", lambda v: v > 0, "> 0")
        self._require(group, "eps", lambda v: v > 0, "> 0")
        self._check_betas(group)

    tensor_hypers = ("lr", "betas")

    def update_group(self, group):
        eps, maximize = group["eps"], group["maximize"]
        hypers = self._hypers(group, "lr", "betas")
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            if not isinstance(g, SparseRows) and current().interpreter.capturing:
                raise CaptureError(
                    "SparseAdam updates only the rows a batch looked up, and this captured "
                    f"step gives a dense gradient (on {p.device}, gathers' gradients are dense "
                    "inside a capture; on the CPU they keep their rows). Use rill.optim.Adam "
                    "in a captured step there (the same update for rows a batch touches; "
                    "untouched rows' moments decay), or run SparseAdam's step eagerly",
                    op=self._name)
            if not isinstance(g, SparseRows):
                raise ArgumentError(f"SparseAdam takes sparse gradients only (SparseRows, from "
                                    f"embedding lookups); a parameter of shape {p.shape} has a "
                                    f"dense one: use rill.optim.Adam for it", op=self._name)
            state = self._state(p, lambda: {"step": step_count(device=p.device), "exp_avg": zeros_like(p),
                                            "exp_avg_sq": zeros_like(p)})
            state["step"] += 1
            step = state["step"]
            lr, (beta1, beta2) = hypers(p.device)
            # Not linear in g: one row per index (padding after them: zero rows, masked).
            indices, rows, valid = g.coalesced()
            rows = -rows if maximize else rows
            if rows.shape[0] == 0:
                continue
            key, mask = (indices,), per_row(valid, rows)
            m, v = state["exp_avg"], state["exp_avg_sq"]
            # old + (1 - beta) * (new - old): PyTorch's arithmetic, so the results agree; the
            # change is added in place (old + change is change + old, bit for bit).
            m_old = m[key]
            m_change = where(mask, scale(rows - m_old, 1.0 - beta1), 0.0)
            add_rows_(m, indices, m_change)
            v_old = v[key]
            v_change = where(mask, scale(rows * rows - v_old, 1.0 - beta2), 0.0)
            add_rows_(v, indices, v_change)
            m_rows, v_rows = m_change + m_old, v_change + v_old
            step_size = cast(sqrt(1.0 - beta2 ** step) * lr / (1.0 - beta1 ** step), p.dtype)
            add_rows_(p, indices, where(mask, m_rows / (sqrt(v_rows) + eps) * -step_size, 0.0))
