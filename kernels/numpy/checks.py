"""The kernel of `check`: raise the named rill error unless every element holds."""
from __future__ import annotations

import numpy as np

from rill import errors
from rill.ops.primitive import register_kernels


def check(ok, value, message, error, op):
    if not np.all(ok):
        raise getattr(errors, error)(message, op=op)
    return value


register_kernels("cpu", {"check": check})
