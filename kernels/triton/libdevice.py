"""Math functions beyond triton.language: CUDA's libdevice, or NumPy under the interpreter.

Triton reaches tan, tanh, expm1, atan2, ... through `triton.language.extra.libdevice`, whose
functions are calls into CUDA's math library and do not run in Triton's interpreter. When
interpreting, this module offers the same names computed by NumPy on the interpreter's
host arrays, so a kernel reads `libdevice.tanh(x)` either way.

Kernels import the name `libdevice` from here (`from .libdevice import libdevice`), never this
module itself: when compiling, Triton swaps `triton.language.extra.libdevice` for the
backend's implementation only when a kernel's global *is that module*; its functions reached
through any other module are bodiless stubs that return None.
"""
from __future__ import annotations

import types

import numpy as np

from .launch import INTERPRET

_UNARY = {"tan": np.tan, "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
          "acos": np.arccos, "atan": np.arctan, "expm1": np.expm1, "log1p": np.log1p,
          "trunc": np.trunc, "rint": np.rint, "erf": None, "floor": np.floor, "ceil": np.ceil,
          "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "log10": np.log10}
_BINARY = {"atan2": np.arctan2, "pow": np.power, "hypot": np.hypot, "copysign": np.copysign,
           "nextafter": np.nextafter, "fmod": np.fmod}

if INTERPRET:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from rill.kernels.numpy.special import erf as _np_erf

    def _lift(np_fn):
        def fn(*args):
            first = args[0]
            data = [a.handle.data for a in args]
            with np.errstate(all="ignore"):
                out = np.asarray(np_fn(*data))
            out = out.astype(data[0].dtype, copy=False)
            return tl.core.tensor(TensorHandle(out, first.dtype), first.type)
        fn.__name__ = np_fn.__name__
        return fn

    _UNARY["erf"] = _np_erf
    libdevice = types.SimpleNamespace(
        **{name: _lift(fn) for name, fn in {**_UNARY, **_BINARY}.items()})
else:
    from triton.language.extra import libdevice  # noqa: F401  (the module: see above)
