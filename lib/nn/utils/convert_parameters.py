"""One flat vector from many parameters and back, as torch.nn.utils (used by optimizers
and methods that treat all weights as one point: line searches, natural gradients).

>>> import rill
>>> a, b = rill.nn.Parameter(rill.zeros(2)), rill.nn.Parameter(rill.zeros(1, 2))
>>> vector_to_parameters(rill.arange(4.0), [a, b])
>>> a, b.tolist()
(Parameter containing:
tensor([0., 1.], requires_grad=True), [[2.0, 3.0]])
"""
from __future__ import annotations

from ...eager.context import no_grad
from ...errors import ArgumentError, DeviceError, ShapeError
from ...ops.arguments import describe
from ...ops.methods import assign
from ...ops.shape import concat, reshape
from ...tensor import Tensor


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and concatenated, in order, into one 1-d tensor.

    Differentiable: a loss of the vector sends gradients back to the parameters.
    """
    params = _tensors(parameters, "parameters_to_vector")
    _same_device(params, "parameters_to_vector")
    return concat([reshape(p, (-1,)) for p in params])


def vector_to_parameters(vec, parameters) -> None:
    """Give each parameter, in order, its slice of the 1-d `vec` (as parameters_to_vector
    laid them out). The Parameter objects stay (modules and optimizers hold them); their
    values change, outside autodiff, as torch's `param.data = ...`."""
    op = "vector_to_parameters"
    if not isinstance(vec, Tensor):
        raise ArgumentError(f"expected a rill.Tensor, but got {describe(vec)}", op=op)
    params = _tensors(parameters, op)
    _same_device([vec] + params, op)
    need = sum(p.size for p in params)
    if vec.ndim != 1 or vec.shape[0] != need:
        raise ShapeError(f"vec must be 1-d with {need} elements (the parameters' total), got "
                         f"shape {vec.shape}", op=op)
    start = 0
    with no_grad():
        for p in params:
            assign(p, reshape(vec[start:start + p.size], p.shape))
            start += p.size


def _tensors(parameters, op: str) -> list:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for p in params:
        if not isinstance(p, Tensor):
            raise ArgumentError(f"parameters must be tensors, got {describe(p)}", op=op)
    return params


def _same_device(tensors: list, op: str) -> None:
    devices = {str(t.device) for t in tensors}
    if len(devices) > 1:
        raise DeviceError(f"all parameters must be on one device, got {sorted(devices)}; "
                          "move them with .to(device) first", op=op)
