"""Forward mode: jvp and linearize, derived from the vjp rules by transposition.

A vjp rule computes u -> J^T u, which is linear in u. Differentiating it with respect to u
(a second reverse pass, through the tape that create_graph keeps of the first) gives
t -> (J^T)^T t = J t: the Jacobian-vector product. So every primitive whose vjp is written
in differentiable rill ops (all of them: that is what makes grad of grad work) has forward
mode without a second rule to write and keep in step with the first. The price is one more
reverse pass than a forward-mode rule would need; for the Jacobians and Hessians of the
small functions forward mode is used for, that is the better trade than 160 jvp rules.
"""
from __future__ import annotations

import functools

from ..eager import context
from ..autodiff.backward import gradients, taped_leaves
from ..autodiff.grad import differentiating, nested
from ..errors import ArgumentError, ShapeError
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor
from ..eager.context import detached_value
from ..tree import flatten
from ..ops.creation import zeros_like


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """(func(*primals), J·tangents): the output and its directional derivative along
    `tangents`, as torch.func.jvp. primals and tangents are tuples (of tensors or nests of
    them) of one structure, shapes and dtypes.

    >>> import rill
    >>> out, d = rill.func.jvp(lambda x: x ** 3, (rill.tensor(2.0),), (rill.tensor(1.0),))
    >>> float(out), float(d)
    (8.0, 12.0)
    """
    if strict:
        raise ArgumentError("strict=True is not supported (as in torch.func.jvp); outputs that "
                            "do not depend on the primals get zero tangents", op="jvp")
    out, linear, aux = _linearized(func, primals, has_aux, "jvp")
    result = (out, linear(tangents, keep=False))
    return result + (aux,) if has_aux else result


def linearize(func, *primals):
    """(func(*primals), jvp_fn): jvp_fn(*tangents) is J·tangents at these primals, computed
    from the graph of this one call (func is not run again), as torch.func.linearize.

    >>> import rill
    >>> out, jvp_fn = rill.func.linearize(rill.sin, rill.tensor(0.0))
    >>> float(jvp_fn(rill.tensor(2.0)))
    2.0
    """
    out, linear, _ = _linearized(func, primals, False, "linearize")

    @functools.wraps(func)
    def jvp_fn(*tangents):
        return linear(tangents, keep=True)

    return out, jvp_fn


def _linearized(func, primals, has_aux, op):
    """Run func once with a tape, and the first (transposed) pass: (output, linear, aux),
    where linear(tangents, keep) is the second pass."""
    if not callable(func):
        raise ArgumentError(f"{op} needs a function, got {type(func).__name__}", op=op)
    if not isinstance(primals, tuple):
        raise ArgumentError(f"primals must be a tuple, got {type(primals).__name__}", op=op)
    leaves, rebuild = flatten(primals)
    outer = context.is_grad_enabled()
    xs = [differentiable_input(p, outer, op) for p in leaves]
    with differentiating(), context.enable_grad():
        out = func(*rebuild(xs))
    value, aux = out if has_aux else (out, None)
    outs, rebuild_out = flatten(value)
    for o in outs:
        if not isinstance(o, Tensor):
            raise ArgumentError(f"{op}: the function must return tensors, got "
                                f"{type(o).__name__}", op=op)
    wired = [i for i, o in enumerate(outs) if o.requires_grad]
    with context.enable_grad():
        probes = [zeros_like(outs[i]).requires_grad_() for i in wired]
        found = gradients([outs[i] for i in wired], probes, targets=xs, create_graph=True,
                          retain_graph=True) if wired else {}
    # J^T u for each input, as functions of the probes u
    transposed = []
    for k, x in enumerate(xs):
        entry = found.get(id(x))
        if entry is not None:
            g = entry[1].to_dense() if isinstance(entry[1], SparseRows) else entry[1]
            if g.requires_grad:
                transposed.append((k, g))
    # inside an enclosing transform, func may read what it differentiates; a closure may
    # read what the tape outside records (autodiff/grad.py)
    keep_value = outer and (nested() or any(isinstance(p, Tensor) and p.requires_grad
                                            for p in leaves)
                            or taped_leaves([o for o in outs if o.requires_grad], xs))

    def linear(tangents, keep):
        ts = _tangents(tangents, leaves, op)
        create = outer and (keep_value or any(t.requires_grad for t in ts))
        with context.enable_grad():
            back = gradients([g for _, g in transposed], [ts[k] for k, _ in transposed],
                             targets=probes, create_graph=create,
                             retain_graph=keep or create) if transposed else {}
        results = []
        for i, o in enumerate(outs):
            j = wired.index(i) if i in wired else None
            entry = back.get(id(probes[j])) if j is not None else None
            results.append(entry[1] if entry is not None else zeros_like(o))
        return rebuild_out(results)

    shown = value if keep_value else rebuild_out([detached_value(o) for o in outs])
    return shown, linear, aux


def differentiable_input(p, outer_recording: bool, op: str) -> Tensor:
    """The tensor func is differentiated at: p itself when an enclosing transform is
    differentiating through it (so its tape continues), else a fresh leaf holding p's value."""
    if not isinstance(p, Tensor):
        raise ArgumentError(f"{op}: primals must be tensors, got {type(p).__name__}", op=op)
    if not p.dtype.is_inexact:
        raise ArgumentError(f"{op} differentiates floating and complex tensors only, got "
                            f"{p.dtype}", op=op)
    if outer_recording and p.requires_grad:
        return p
    return detached_value(p).requires_grad_()


def _tangents(tangents, primals, op):
    if not isinstance(tangents, tuple):
        raise ArgumentError(f"tangents must be a tuple, got {type(tangents).__name__}", op=op)
    ts = flatten(tangents)[0]
    if len(ts) != len(primals):
        raise ArgumentError(f"{op}: {len(ts)} tangents for {len(primals)} primals", op=op)
    for t, p in zip(ts, primals):
        if not isinstance(t, Tensor):
            raise ArgumentError(f"{op}: tangents must be tensors, got {type(t).__name__}",
                                op=op)
        if tuple(t.shape) != tuple(p.shape) or t.dtype is not p.dtype:
            raise ShapeError(f"{op}: a tangent of {t.dtype}{list(t.shape)} for a primal of "
                             f"{p.dtype}{list(p.shape)}; they must match", op=op)
    return ts
