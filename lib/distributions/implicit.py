"""Implicit reparameterization of gamma draws (Figurnov et al. 2018, "Implicit
Reparameterization Gradients").

A Gamma(alpha, 1) draw is x = F^-1(u; alpha) for a uniform u, F the CDF. No closed form gives
F^-1, but holding u fixed, F(x(alpha); alpha) = u differentiates to
dx/dalpha = -(dF/dalpha)(x; alpha) / f(x; alpha), which needs only x and alpha. So a draw made
by any sampler (gamma_sampler.py's rejection sampler) can carry that gradient: `reparameterize`
returns the draw unchanged, and its backward multiplies the cotangent by dx/dalpha, which the
primitive `standard_gamma_grad` computes (kernel: kernels/numpy/gamma_grad.py). Gamma with a
rate, Beta and Dirichlet are arithmetic on such draws, which autodiff handles.
"""
from __future__ import annotations

from ..eager import context
from ..eager.bind import bind
from ..autodiff.custom_vjp import custom_vjp
from ..errors import DeviceError, DTypeError, GradientError, ShapeError
from ..ops import batching
from ..ops.primitive import primitive
from ..eager.context import detached_value
from .gamma_sampler import standard_gamma

_OP = "standard_gamma_grad"
_CPU_ONLY = ("a per-element series or continued fraction run until it converges (data-"
             "dependent trip counts); rill computes it with NumPy on the CPU")


def _infer(x, alpha):
    if x.shape != alpha.shape:
        raise ShapeError(f"x {x.shape} and alpha {alpha.shape} must have the same shape "
                         "(broadcast alpha to the draws first)", op=_OP)
    if x.dtype is not alpha.dtype or x.dtype.kind != "f":
        raise DTypeError(f"x and alpha must share one floating dtype, got {x.dtype} and "
                         f"{alpha.dtype}", op=_OP)
    return x.shape, x.dtype


def _vjp(g, out, x, alpha):
    # d2x/dalpha2 would need P's second derivatives in alpha; PyTorch has none either.
    raise GradientError("second derivatives of Gamma/Beta/Dirichlet rsample (through "
                        "dx/dalpha) are not implemented; differentiate rsample once",
                        op=_OP)


standard_gamma_grad_p = primitive(_OP, _infer, _vjp, cpu_only=_CPU_ONLY, attrs={},
                                  batch=batching.same_shapes)


def standard_gamma_grad(x, alpha):
    """dx/dalpha for draws x of Gamma(alpha, 1) (same shape and floating dtype), holding the
    draw's CDF value fixed. Positive wherever x > 0; 0 where x == 0."""
    return bind(standard_gamma_grad_p, x, alpha)


@custom_vjp
def reparameterize(x, alpha):
    """The draw x of Gamma(alpha, 1) (alpha broadcast to x's shape), carrying dx/dalpha."""
    return x


def _fwd(x, alpha):
    return x, (x, alpha)


def _bwd(residuals, g):
    x, alpha = residuals
    return None, g * standard_gamma_grad(x, alpha)


reparameterize.defvjp(_fwd, _bwd)


def rsample_standard_gamma(concentration, shape):
    """Gamma(concentration, 1) draws of `shape` (concentration broadcast to it already),
    differentiable in `concentration` by implicit reparameterization."""
    draws = standard_gamma(detached_value(concentration), shape)
    if not (context.is_grad_enabled() and concentration.requires_grad):
        return draws
    if concentration.device.kind != "cpu":
        raise DeviceError(f"gradients of gamma draws are computed on the CPU only ({_CPU_ONLY});"
                          " create the parameters on the cpu device, or use sample() for "
                          "draws without gradients", op="rsample")
    return reparameterize(draws, concentration)
