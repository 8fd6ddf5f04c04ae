"""@rill.custom_vjp: a function with a hand-written gradient rule."""
from __future__ import annotations

import functools

from ..eager import context
from ..eager.context import detached_value
from ..eager.tape import record
from ..errors import GradientError
from ..ops.primitive import Primitive
from ..tensor import Tensor


class custom_vjp:
    """Give `fun` a gradient rule of your own (JAX's API).

    >>> import rill
    >>> @rill.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, None                     # output, residuals for bwd
    >>> def bwd(residuals, g):
    ...     return (rill.clip(g, -1.0, 1.0),)  # one cotangent per argument
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> rill.grad(lambda x: (3 * clip_gradient(x)).sum())(rill.ones(2))
    tensor([1., 1.])
    """

    def __init__(self, fun):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd = self.bwd = None
        name = f"custom_vjp[{getattr(fun, '__name__', 'fn')}]"
        self._prims = {multi: Primitive(name, None, self._vjp, multiple_results=multi)
                       for multi in (False, True)}

    def defvjp(self, fwd, bwd) -> None:
        """fwd(*args) -> (output, residuals); bwd(residuals, g) -> one cotangent per argument."""
        self.fwd, self.bwd = fwd, bwd

    def _vjp(self, g, out, *inputs, residuals, positions, n_args):
        cts = self.bwd(residuals, g)
        if not isinstance(cts, (tuple, list)) or len(cts) != n_args:
            raise GradientError(f"the bwd rule of {self.__name__} must return a tuple of "
                                f"{n_args} cotangents, one per argument", op="custom_vjp")
        return tuple(cts[i] for i in positions)

    def __call__(self, *args):
        if self.fwd is None:
            raise GradientError(f"{self.__name__}: call defvjp(fwd, bwd) before using it",
                                op="custom_vjp")
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in positions]
        if not (context.is_grad_enabled() and any(t.requires_grad for t in tensors)):
            return self.fun(*args)
        with context.no_grad():
            out, residuals = self.fwd(*args)
        multi = isinstance(out, (tuple, list))
        # Fresh handles: fwd may return an input itself, which must stay what it was.
        out = tuple(detached_value(o) for o in out) if multi else detached_value(out)
        record(self._prims[multi], tuple(tensors),
               dict(residuals=residuals, positions=positions, n_args=len(args)), out)
        return out
