"""Functional autodiff: rill.grad and rill.value_and_grad (JAX-style transformations)."""
from __future__ import annotations

import contextlib
import contextvars
import functools

from ..eager import context
from ..eager.context import detached_value
from ..errors import ArgumentError, DTypeError, GradientError
from ..ops.creation import ones_like, tensor, zeros_like
from ..tensor import Tensor
from ..tree import flatten
from .backward import gradients, not_differentiable, taped_leaves
from .custom_vjp import custom_vjp

# How many differentiating transforms (grad, vjp, jvp and the Jacobians built on them) are
# running their function in this context. Inside one, a transform's own derivative is taped
# whatever its arguments are: the function may read a tensor the enclosing transform
# differentiates without taking it as an argument (a closure, `grad(lambda w: loss(x, w))`
# inside a grad over x), and an untaped inner derivative would be a constant to the outer
# one: a zero, silently.
_enclosing = contextvars.ContextVar("rill_differentiating_transforms", default=0)


def nested() -> bool:
    """Whether an enclosing differentiating transform is running its function."""
    return _enclosing.get() > 0


@contextlib.contextmanager
def differentiating():
    """Around a transform's call of its function: transforms inside it are nested()."""
    token = _enclosing.set(_enclosing.get() + 1)
    try:
        yield
    finally:
        _enclosing.reset(token)


def value_and_grad(f, argnums=0, has_aux: bool = False):
    """A function returning (f(*args), df/d args[argnums]).

    f must return a one-element float tensor (or (value, aux) with has_aux). Arguments that
    are differentiated may be tensors or nested tuples/lists/dicts of tensors; the gradient
    has the same structure. Nested grad works: grad(grad(f)) is the second derivative.

    >>> import rill
    >>> rill.value_and_grad(lambda x: (x ** 3).sum())(rill.tensor([2.0]))
    (tensor(8.), tensor([12.]))
    """
    if not callable(f):
        raise ArgumentError(f"f must be a function, got {type(f).__name__}", op="grad")
    single = isinstance(argnums, int) and not isinstance(argnums, bool)
    nums = (argnums,) if single else tuple(argnums) if isinstance(argnums, (tuple, list)) \
        else None
    if nums is None or not all(isinstance(n, int) and not isinstance(n, bool) for n in nums):
        raise ArgumentError(f"argnums must be an int or a tuple of ints, got {argnums!r}",
                            op="grad")

    @functools.wraps(f)
    def run(*args, **kwargs):
        outer_recording = context.is_grad_enabled()
        args = list(args)
        structures, inputs = [], []
        create_graph = outer_recording and nested()
        for n in nums:
            if n >= len(args):
                raise GradientError(f"argnums {n} is out of range for {len(args)} arguments",
                                    op="grad")
            leaves, rebuild = flatten(args[n])
            # An enclosing grad differentiates through these: tape this gradient computation.
            create_graph |= outer_recording and any(isinstance(x, Tensor) and x.requires_grad
                                                    for x in leaves)
            fresh = [_differentiable(leaf, outer_recording) for leaf in leaves]
            args[n] = rebuild(fresh)
            structures.append((rebuild, len(fresh)))
            inputs.extend(fresh)
        with differentiating(), context.enable_grad():
            out = f(*args, **kwargs)
        value, aux = (out if has_aux else (out, None))
        if not isinstance(value, Tensor) or value.size != 1 or not value.dtype.is_floating:
            raise GradientError("grad needs f to return a one-element float tensor, got "
                                f"{_describe(value)}", op="grad")
        closure = []
        if value.requires_grad:
            if outer_recording and not create_graph:
                # f read tensors the tape outside records (a closure): so is its gradient
                closure = taped_leaves([value], inputs)
                create_graph = bool(closure)
            try:
                found = gradients([value], [ones_like(value)], targets=inputs,
                                  create_graph=create_graph, retain_graph=create_graph)
            except GradientError as refused:
                if not closure or not getattr(refused, "higher_order", False):
                    raise
                # a loop or branch on the way has no higher-order rule yet: the gradient, and
                # a tape node that refuses, with this error, to be differentiated further
                found = gradients([value], [ones_like(value)], targets=inputs)
                found = {k: (t, _refusing(g, closure, refused)) for k, (t, g) in found.items()}
                create_graph = False
        elif value._origin is not None:
            raise not_differentiable(value, "grad")
        else:
            found = {}
        grads = [_grad_or_zeros(found, x) for x in inputs]
        results, start = [], 0
        for rebuild, count in structures:
            results.append(rebuild(grads[start:start + count]))
            start += count
        result = results[0] if single else tuple(results)
        value = value if create_graph else detached_value(value)
        return ((value, aux), result) if has_aux else (value, result)

    return run


def grad(f, argnums=0, has_aux: bool = False):
    """The gradient function of scalar-valued f (see value_and_grad).

    >>> import rill
    >>> d3 = rill.grad(rill.grad(rill.grad(rill.tanh)))   # third derivative of tanh
    >>> round(float(d3(rill.tensor(0.0))), 6)
    -2.0
    """
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def run(*args, **kwargs):
        out, g = vg(*args, **kwargs)
        return (g, out[1]) if has_aux else g

    return run


# A gradient that the tape outside cannot differentiate (see value_and_grad): g itself, on a
# tape node that reaches the leaves the function read and whose rule raises the refusal met
# when taping it (the message, not the exception: its traceback would keep frames alive).
@custom_vjp
def _refused(g, why: str, op: str, *closure):
    return g


def _raise_refusal(residuals, ct):
    why, op = residuals
    raise GradientError(why, op=op)


_refused.defvjp(lambda g, why, op, *closure: (g, (why, op)), _raise_refusal)


def _refusing(g, closure, error: GradientError) -> Tensor:
    return _refused(g, str(error.args[0]), error.op, *closure)


def _differentiable(x, outer_recording: bool) -> Tensor:
    if not isinstance(x, Tensor):
        x = tensor(x)
    if not x.dtype.is_inexact:
        raise DTypeError(f"grad differentiates floating and complex tensors only, got {x.dtype}",
                         op="grad")
    if outer_recording and x.requires_grad:
        return x  # an enclosing grad is differentiating through this argument
    return detached_value(x).requires_grad_()


def _grad_or_zeros(found, x):
    entry = found.get(id(x))
    if entry is not None:
        return entry[1]
    return zeros_like(x)


def _describe(value) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of dtype {value.dtype} and shape {value.shape}"
    return type(value).__name__
