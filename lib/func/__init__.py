"""Function transforms, named as in torch.func: vmap, jvp, linearize, vjp, jacrev, jacfwd,
hessian, grad, grad_and_value, functional_call. Each works eagerly, nests, composes with the
others and records into one graph under rill.capture."""
from ..autodiff.grad import grad as _grad, value_and_grad as _value_and_grad
from .forward import jvp, linearize
from .functional_call import functional_call
from .jacobians import hessian, jacfwd, jacrev, vjp
from .vmap import FallbackWarning, vmap


def grad(func, argnums=0, has_aux: bool = False):
    """The gradient of scalar-valued func (torch.func.grad; the same as rill.grad)."""
    return _grad(func, argnums, has_aux)


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """(gradient, value) of scalar-valued func, as torch.func.grad_and_value (rill.value_and_grad
    returns them the other way round, as JAX does)."""
    vg = _value_and_grad(func, argnums, has_aux)

    def run(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return g, value

    return run


__all__ = ["FallbackWarning", "functional_call", "grad", "grad_and_value", "hessian", "jacfwd",
           "jacrev", "jvp", "linearize", "vjp", "vmap"]
