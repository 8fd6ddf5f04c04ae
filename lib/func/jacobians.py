"""vjp, and whole Jacobians and Hessians: jacrev (reverse mode, one row per output element),
jacfwd (forward mode, one column per input element), hessian. The rows or columns are not a
Python loop: the basis vectors are a batch, and vmap runs the one backward (or forward) pass
on all of them at once."""
from __future__ import annotations

import functools

from ..capture.graph_vjp import gradients_or_zeros
from ..eager import context
from ..autodiff.backward import taped_leaves
from ..autodiff.grad import differentiating, nested
from ..errors import ArgumentError
from ..tensor import Tensor
from ..eager.context import detached_value
from ..tree import flatten
from .forward import differentiable_input, jvp
from .vmap import vmap
from ..ops.creation import eye


def vjp(func, *primals, has_aux: bool = False):
    """(func(*primals), vjp_fn): vjp_fn(cotangents) is one gradient per primal, J^T·cotangents,
    as torch.func.vjp; it may be called more than once.

    >>> import rill
    >>> out, vjp_fn = rill.func.vjp(lambda x: x * x, rill.tensor([1.0, 2.0]))
    >>> vjp_fn(rill.ones(2))
    (tensor([2., 4.]),)
    """
    if not callable(func):
        raise ArgumentError(f"vjp needs a function, got {type(func).__name__}", op="vjp")
    outer = context.is_grad_enabled()
    structures = [flatten(p) for p in primals]
    xs = [[differentiable_input(leaf, outer, "vjp") for leaf in leaves]
          for leaves, _ in structures]
    with differentiating(), context.enable_grad():
        out = func(*[rebuild(x) for (_, rebuild), x in zip(structures, xs)])
    value, aux = out if has_aux else (out, None)
    outs, _ = flatten(value)
    flat_xs = [x for group in xs for x in group]
    # inside an enclosing transform, func may read what it differentiates; a closure may
    # read what the tape outside records (autodiff/grad.py)
    differentiated = outer and (nested() or any(isinstance(p, Tensor) and p.requires_grad
                                                for leaves, _ in structures for p in leaves)
                                or taped_leaves([o for o in outs if isinstance(o, Tensor)
                                                       and o.requires_grad], flat_xs))

    def vjp_fn(cotangents):
        cts = flatten(cotangents)[0]
        if len(cts) != len(outs):
            raise ArgumentError(f"vjp_fn: {len(cts)} cotangents for {len(outs)} outputs",
                                op="vjp")
        pairs = [(o, c) for o, c in zip(outs, cts) if o.requires_grad]
        create = outer and (differentiated or any(c.requires_grad for c in cts))
        with context.enable_grad():
            grads = gradients_or_zeros(pairs, flat_xs, create_graph=create, retain_graph=True)
        results, start = [], 0
        for (leaves, rebuild) in structures:
            results.append(rebuild(grads[start:start + len(leaves)]))
            start += len(leaves)
        return tuple(results)

    shown = value if differentiated else \
        flatten(value)[1]([detached_value(o) if isinstance(o, Tensor) else o for o in outs])
    return (shown, vjp_fn, aux) if has_aux else (shown, vjp_fn)


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None):
    """The Jacobian of func by reverse mode: out.shape + arg.shape per (output, argument),
    as torch.func.jacrev (a tuple over argnums when argnums is a tuple, over outputs when
    func returns a tuple).

    >>> import rill
    >>> rill.func.jacrev(lambda x: x ** 2)(rill.tensor([1.0, 3.0]))
    tensor([[2., 0.],
            [0., 6.]])
    """
    nums, single = _argnums(argnums, "jacrev")

    @functools.wraps(func)
    def jacobian(*args):
        chosen = [args[n] for n in _checked(nums, args, "jacrev")]

        def of_chosen(*xs):
            full = list(args)
            for n, x in zip(nums, xs):
                full[n] = x
            return func(*full)

        got = vjp(of_chosen, *chosen, has_aux=has_aux)
        out, vjp_fn = got[0], got[1]
        outs, rebuild_out = flatten(out)
        sizes = [o.size for o in outs]
        basis = _basis(outs, sum(sizes))
        rows = vmap(vjp_fn, chunk_size=chunk_size)(tuple(basis))  # per input: (N, *x.shape)
        per_output, start = [], 0
        for o, n in zip(outs, sizes):
            blocks = tuple(r[start:start + n].reshape(tuple(o.shape) + tuple(r.shape[1:]))
                           for r in rows)
            per_output.append(blocks[0] if single else blocks)
            start += n
        result = rebuild_out(per_output)
        return (result, got[2]) if has_aux else result

    return jacobian


def jacfwd(func, argnums=0, *, has_aux: bool = False, randomness: str = "error"):
    """The Jacobian of func by forward mode (out.shape + arg.shape, as jacrev), as
    torch.func.jacfwd: better than jacrev when the inputs are fewer than the outputs.

    >>> import rill
    >>> rill.func.jacfwd(lambda x: x.sum() * x)(rill.tensor([1.0, 2.0]))
    tensor([[4., 1.],
            [2., 5.]])
    """
    nums, single = _argnums(argnums, "jacfwd")

    @functools.wraps(func)
    def jacobian(*args):
        chosen = tuple(args[n] for n in _checked(nums, args, "jacfwd"))

        def of_chosen(*xs):
            full = list(args)
            for n, x in zip(nums, xs):
                full[n] = x
            return func(*full)

        sizes = [x.size for x in chosen]
        basis = _basis(chosen, sum(sizes))

        def column(*tangents):
            got = jvp(of_chosen, chosen, tangents, has_aux=has_aux)
            return (got[1], got[2]) if has_aux else got[1]

        out = vmap(column, randomness=randomness)(*basis)
        aux = None
        if has_aux:
            out, aux = out
            aux = flatten(aux)[1]([a[0] for a in flatten(aux)[0]])
        outs, rebuild_out = flatten(out)
        per_output = []
        for o in outs:  # o: (N, *out_shape)
            blocks, start = [], 0
            for x, n in zip(chosen, sizes):
                cols = o[start:start + n]
                cols = cols.reshape(tuple(x.shape) + tuple(o.shape[1:]))
                k, m = x.ndim, o.ndim - 1
                blocks.append(cols.permute(tuple(range(k, k + m)) + tuple(range(k))))
                start += n
            per_output.append(blocks[0] if single else tuple(blocks))
        result = rebuild_out(per_output)
        return (result, aux) if has_aux else result

    return jacobian


def hessian(func, argnums=0):
    """The Hessian of scalar-valued func: jacfwd of jacrev, as torch.func.hessian.

    >>> import rill
    >>> rill.func.hessian(lambda x: (x ** 3).sum())(rill.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)


def _basis(tensors, total):
    """One row of the identity per element of `tensors`, split and shaped as each of them:
    row i is a batch member that is 1 at element i and 0 elsewhere."""
    rows, start = [], 0
    for t in tensors:
        n = t.size
        block = eye(total, dtype=t.dtype, device=t.device)[:, start:start + n]
        rows.append(block.reshape((total,) + tuple(t.shape)))
        start += n
    return rows


def _argnums(argnums, op):
    if isinstance(argnums, int) and not isinstance(argnums, bool):
        return (argnums,), True
    if isinstance(argnums, tuple) and argnums and all(
            isinstance(n, int) and not isinstance(n, bool) for n in argnums):
        return argnums, False
    raise ArgumentError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}",
                        op=op)


def _checked(nums, args, op):
    for n in nums:
        if not -len(args) <= n < len(args):
            raise ArgumentError(f"argnums {n} is out of range for {len(args)} arguments", op=op)
        if not isinstance(args[n], Tensor):
            raise ArgumentError(f"argument {n} must be a tensor, got {type(args[n]).__name__}",
                                op=op)
    return nums
