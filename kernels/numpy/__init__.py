"""CPU kernels, NumPy only: one function per primitive, registered for device kind 'cpu'.

A kernel takes NumPy buffers and the op's attrs, and returns buffers of exactly the shape and
storage dtype the primitive's rule inferred (tests check this for every op). Buffers are
never written in place: a kernel that updates returns a new array.
"""
from . import creation, elementwise, indexing, linalg, random, reduce, shape, sorting  # noqa: F401
from . import activation, checks, conv, normalization, pooling, rows, updates  # noqa: F401
from . import decompositions  # noqa: F401
from . import attention  # noqa: F401
from . import batch_norm, lstm_cell, lstm_sequence, prefix  # noqa: F401
from . import gamma_grad  # noqa: F401
