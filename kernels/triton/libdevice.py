"""Math functions beyond triton.language: CUDA's libdevice, or NumPy under the interpreter.

Triton reaches tan, tanh, expm1, atan2, ... through `triton.language.extra.libdevice`, whose
functions are calls into CUDA's math library and do not run in Triton's interpreter. When
interpreting, this module offers the same names computed by NumPy on the interpreter's
host arrays, so a kernel reads `libdevice.tanh(x)` either way.
"""
from __future__ import annotations

import numpy as np

from .launch import INTERPRET

_UNARY = {"tan": np.tan, "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
          "acos": np.arccos, "atan": np.arctan, "expm1": np.expm1, "log1p": np.log1p,
          "trunc": np.trunc, "rint": np.rint, "erf": None, "floor": np.floor, "ceil": np.ceil,
          "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "log10": np.log10,
          "signbit": np.signbit}
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
            if out.dtype == np.bool_:  # signbit: an int32 0/1, as libdevice's
                return tl.core.tensor(TensorHandle(out.astype(np.int32), tl.int32),
                                      first.type.with_element_ty(tl.int32))
            out = out.astype(data[0].dtype, copy=False)
            return tl.core.tensor(TensorHandle(out, first.dtype), first.type)
        fn.__name__ = np_fn.__name__
        return fn

    _UNARY["erf"] = _np_erf
    for _name, _fn in {**_UNARY, **_BINARY}.items():
        globals()[_name] = _lift(_fn)
else:
    from triton.language.extra.libdevice import (  # noqa: F401
        acos, acosh, asin, asinh, atan, atan2, atanh, ceil, copysign, cosh, erf, expm1, floor,
        hypot, log1p, log10, nextafter, pow, rint, signbit, sinh, tan, tanh, trunc)
