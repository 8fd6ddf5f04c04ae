"""rill.nn.utils: gradient clipping and parameter/vector conversions, as torch.nn.utils.

The clipping functions are rill.optim's (one implementation, two names); `rnn` holds
`pad_sequence`; `place_layers` spreads a Sequential's layers over devices (rill's own).

>>> import rill
>>> w = rill.nn.Parameter(rill.ones(2, 2))
>>> v = rill.nn.utils.parameters_to_vector([w])
>>> v.shape
(4,)
"""
from ...optim.clip import (clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_,
                           get_total_norm)
from . import rnn
from .convert_parameters import parameters_to_vector, vector_to_parameters
from .placement import place_layers

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm",
           "parameters_to_vector", "vector_to_parameters", "place_layers", "rnn"]
