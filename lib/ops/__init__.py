"""Primitive declarations, one module per family, and the composites built on them."""
from . import creation, elementwise, indexing, linalg, random, reduce, shape, sorting  # noqa: F401
from . import activation, checks, conv, normalization, pooling, updates  # noqa: F401
from . import methods

methods.install()
