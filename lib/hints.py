"""What to write instead: PyTorch names rill spells differently or does not have.

`rill.X` or `x.X` for an unknown X raises an AttributeError that is also a rill.Error; when X
is a PyTorch name, the message says what rill writes instead (Python's own "Did you mean"
guess compares spellings, not meanings).
"""
from __future__ import annotations

from .errors import Error

# PyTorch name -> what to write in rill.
NAMESPACE = {
    "cuda.FloatTensor": "rill.tensor(data, dtype=rill.float32, device='gpu')",
    "set_default_tensor_type": "pass dtype= where tensors are made",
    "set_grad_enabled": "rill.enable_grad() / rill.no_grad()",
    "jit": "@rill.capture, and rill.load_graph for saved graphs",
    "autograd": "rill.grad / rill.value_and_grad, or tensor.backward()",
    "nonzero_static": "rill.nonzero",
    "index_put": "x[index] = values (or rill.index_set)",
    "masked_scatter": "rill.where(mask, values, x)",
    "save_state_dict": "rill.save(module.state_dict(), path)",
}

TENSOR = {
    "storage": "x.numpy() for the values; rill tensors are values without a storage object",
    "data_ptr": "nothing: rill buffers are never written, so their address does not matter",
    "pin_memory": "nothing: host buffers are handed to the gpu directly",
    "share_memory_": "nothing: rill's data workers are threads, which share memory",
    "grad_fn": "x.is_leaf / x.requires_grad (rill keeps the tape to itself)",
    "register_hook": "rill.custom_vjp to change a gradient",
    "index_put_": "x[index] = values",
    "resize_": "x = x.reshape(shape) (a tensor's element count is fixed)",
    "set_": "x.copy_(other) or rill.nn.Module.load_state_dict",
}


class NameError_(Error, AttributeError):
    """An unknown attribute of rill or of a Tensor, with what to write instead."""


NameError_.__name__ = NameError_.__qualname__ = "AttributeError"


def missing(owner: str, name: str, table: dict) -> NameError_:
    instead = table.get(name)
    if instead is not None:
        return NameError_(f"{owner} has no {name!r} (a PyTorch name); in rill write {instead}")
    return NameError_(f"{owner} has no attribute {name!r}; docs/COMING_FROM_PYTORCH.md lists "
                      "PyTorch's names and rill's")
