"""Gradient clipping: by the total norm of all gradients, or by value, as torch's.

Both give each parameter a new `.grad` rather than writing into the old one: a gradient
tensor may be held elsewhere too, and rill tensors have value semantics anyway. Sparse
gradients (`SparseRows`) are clipped as the dense gradients they stand for.

A threshold may be a Python number or a 0-d tensor. Inside a captured function a Python
number is part of the graph, like any number the function computes; a tensor is read on
every call, so a threshold that changes between calls should be one (`rill.tensor(1.0)`,
changed in place). Its value is rounded to the gradients' dtype either way.
"""
from __future__ import annotations

from ..eager.context import no_grad
from ..errors import GradientError
from ..ops.creation import tensor
from ..dtypes import float32, float64
from ..ops.elementwise import cast, clip, isfinite, minimum, sqrt
from ..ops.linalg import matmul
from ..ops.reduce import norm
from ..ops.shape import concat, reshape, stack
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor


def _threshold(value, dtype):
    """A Python number as it is (a weak scalar), or a tensor cast to `dtype`, read as a tensor
    (float() of it would freeze its value into a captured graph)."""
    return cast(value, dtype) if isinstance(value, Tensor) else value


def _with_grads(parameters):
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


def _scattered_if_small(g):
    """A SparseRows whose table has no more rows than were looked up (a GPT's 65-token
    vocabulary, 1024 lookups a step), as its dense gradient: scattering the rows costs less
    than coalescing them (a sort), and the dense tensor joins its neighbours' norm."""
    if isinstance(g, SparseRows) and g.shape[0] <= g.indices.shape[0]:
        return g.to_dense()
    return g


def _values(g, ord):
    """The entries a norm of the dense gradient sees."""
    if not isinstance(g, SparseRows):
        return g
    if ord <= 0:  # the untouched (zero) rows decide these norms
        return g.to_dense()
    return g.coalesced()[1]  # repeated indices add up first (padding rows are zero)


# Gradients joined into one vector for their total norm up to this many entries in all: the
# copy then costs less than an op per gradient (a small model's step, where op overhead
# dominates); above it, per-gradient norms spare a second copy of all gradients.
JOIN_MAX_ELEMENTS = 1 << 20


def _joined_groups(tensors, ord):
    """(groups, rest): the dense tensors whose entries may be joined into one vector each
    group (one dtype and device, 2+ tensors, few enough entries that the copy is cheap), and
    the tensors normed one by one (SparseRows, lone tensors; everything for p <= 0, where
    the norm of norms counts tensors, not entries). A GPT's sparse embedding gradient no
    longer keeps its 52 dense neighbours from joining (53 norms a step, 1.6 ms, before)."""
    if not ord > 0:
        return [], list(tensors)
    by_kind: dict = {}
    rest = []
    for t in tensors:
        if isinstance(t, Tensor):
            by_kind.setdefault((t.dtype, t.device), []).append(t)
        else:
            rest.append(t)
    groups = []
    for group in by_kind.values():
        if len(group) >= 2 and sum(t.size for t in group) <= JOIN_MAX_ELEMENTS:
            groups.append(group)
        else:
            rest.extend(group)
    return groups, rest


def _joined_norm(group, ord):
    """One norm over all entries of `group`: the norm of their norms (a p-norm of p-norms is
    the p-norm of all the entries; inf: the largest of the largest), within rounding, in 3
    ops and a reshape per tensor of 2+ dims instead of 2 ops a tensor."""
    flat = concat([g if g.ndim == 1 else reshape(g, (-1,)) for g in group])
    if ord == 2.0 and flat.dtype in (float32, float64) and flat.device.kind == "cpu":
        # sqrt of a dot product: one BLAS pass (norm's kernel takes three; 6 against 60 us
        # for the GPT bench's 112k float32 entries), summed in the dtype as norm's kernel
        # sums. Other dtypes keep norm (it sums float16 in float32).
        return sqrt(matmul(flat, flat))
    return norm(flat, ord=ord)


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach=None, *, _op: str = "get_total_norm") -> Tensor:
    """The `norm_type`-norm of all `tensors` together (a tensor or an iterable of them;
    SparseRows count as the dense gradients they stand for): the norm of their norms, for
    inf the largest magnitude. A 0-d tensor; 0. for no tensors. With
    `error_if_nonfinite`, a nan or inf norm raises GradientError. `foreach` is accepted
    for torch's signature; rill computes the same either way.

    >>> import rill
    >>> rill.optim.clip.get_total_norm([rill.tensor([3.0]), rill.tensor([4.0])])
    tensor(5.)
    """
    tensors = [tensors] if isinstance(tensors, (Tensor, SparseRows)) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        tensors = [_scattered_if_small(g) for g in tensors]
        groups, rest = _joined_groups(tensors, norm_type)
        norms = [_joined_norm(group, norm_type) for group in groups]
        norms += [norm(_values(g, norm_type), ord=norm_type) for g in rest]
        if len(norms) == 1 and norm_type > 0:
            total = norms[0]  # a p-norm of one nonnegative entry is that entry
        else:
            total = norm(stack(norms), ord=norm_type)
    if error_if_nonfinite and not bool(isfinite(total)):
        raise GradientError(f"the total {norm_type:g}-norm of the gradients is {float(total)}, "
                            "so they cannot be clipped; pass error_if_nonfinite=False to "
                            "scale them by it anyway", op=_op)
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm, foreach=None) -> None:
    """Multiply every parameter's gradient by min(1, max_norm / (total_norm + 1e-6)): the
    second half of `clip_grad_norm_`, for a `total_norm` computed by `get_total_norm`
    (perhaps over more gradients than these). `foreach` as in get_total_norm.
    """
    params = _with_grads(parameters)
    if not isinstance(max_norm, Tensor):
        max_norm = float(max_norm)
    if not params:
        return
    with no_grad():
        total_norm = total_norm if isinstance(total_norm, Tensor) else tensor(total_norm)
        scale = minimum(_threshold(max_norm, total_norm.dtype) / (total_norm + 1e-6), 1.0)
        for p in params:
            g = p.grad
            if isinstance(g, SparseRows):
                p.grad = SparseRows(g.indices, g.rows * scale, g.shape)
            else:
                p.grad = g * scale


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale all gradients together so that their total `norm_type`-norm is at most
    `max_norm`; returns the total norm before clipping (a 0-d tensor).

    The total norm is the norm of the per-gradient norms (for inf: the largest entry;
    `norm_type` may also be the string 'inf'); gradients are multiplied by
    min(1, max_norm / (total + 1e-6)). With `error_if_nonfinite`, a nan or inf total
    raises GradientError instead. `foreach` is accepted for torch's signature and changes
    nothing. The same function is `rill.nn.utils.clip_grad_norm_`.

    >>> import rill
    >>> w = rill.nn.Parameter(rill.zeros(2))
    >>> w.grad = rill.tensor([3.0, 4.0])
    >>> rill.optim.clip_grad_norm_([w], max_norm=1.0)
    tensor(5.)
    >>> [round(x, 4) for x in w.grad.tolist()]
    [0.6, 0.8]
    """
    params = _with_grads(parameters)
    total = get_total_norm([p.grad for p in params], norm_type, error_if_nonfinite,
                           _op="clip_grad_norm_")
    clip_grads_with_norm_(params, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient entry into [-clip_value, clip_value] (`foreach`: accepted for
    torch's signature, changes nothing).

    >>> import rill
    >>> w = rill.nn.Parameter(rill.zeros(3))
    >>> w.grad = rill.tensor([-3.0, 0.5, 2.0])
    >>> rill.optim.clip_grad_value_([w], 1.0)
    >>> w.grad
    tensor([-1. ,  0.5,  1. ])
    """
    if not isinstance(clip_value, Tensor):
        clip_value = float(clip_value)
    with no_grad():
        for p in _with_grads(parameters):
            g = p.grad
            bound = _threshold(clip_value, g.dtype)
            if isinstance(g, SparseRows):
                # clamp the sums of repeated indices, not their parts (padding rows are 0)
                indices, rows, _ = g.coalesced()
                p.grad = SparseRows(indices, clip(rows, -bound, bound), g.shape)
            else:
                p.grad = clip(g, -bound, bound)
