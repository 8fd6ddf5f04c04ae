"""Function transforms, as in torch.func: vmap, jvp, vjp, jacrev, jacfwd, hessian, ..."""
from .vmap import FallbackWarning, vmap

__all__ = ["FallbackWarning", "vmap"]
