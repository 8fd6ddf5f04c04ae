"""Primitive declarations, one module per family, and the composites built on them."""
from . import creation, elementwise, indexing, linalg, random, reduce, shape, sorting  # noqa: F401
from . import activation, checks, conv, normalization, pooling, rows, updates  # noqa: F401
from . import batch_norm, conversion, data_types, lstm_cell, prefix, searching, sets  # noqa: F401
from . import lstm_layer, lstm_sequence  # noqa: F401
from . import keywords

# PyTorch's keyword spellings (dim=, keepdim=, input=, ...) for every public function, before
# the functions are bound as Tensor methods and exported as rill's namespace.
for _family in (creation, elementwise, indexing, linalg, random, reduce, shape, sorting,
                activation, conv, normalization, pooling, conversion, data_types, searching,
                sets):
    keywords.install(_family)

from . import methods, torch_methods  # noqa: E402 - they bind the wrapped functions

methods.install()
torch_methods.install()  # PyTorch's meanings where a method means something else there
from . import view_spellings  # noqa: E402 - every function and method that returns a view
keywords.install(view_spellings)
view_spellings.install()
