"""Parameter: a tensor that a Module registers as trainable state."""
from __future__ import annotations

from ..eager.bind import register_tensor_subclass
from ..tensor import Tensor


class Parameter(Tensor):
    """A tensor that requires grad and is found by `Module.parameters()`.

    Assigning a Parameter to a Module attribute registers it. It shares the buffer of the
    tensor it wraps (safe: buffers are never written in place).

    >>> import rill
    >>> w = rill.nn.Parameter(rill.zeros(2))
    >>> w.requires_grad, w.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = []
        source = data if isinstance(data, Tensor) else Tensor(data)
        for slot in Tensor.__slots__[:-1]:
            setattr(self, slot, getattr(source, slot))
        # A parameter is a fresh leaf: no history, no gradient, its own version counter.
        self._node, self._index, self.grad, self._version = None, 0, None, 0
        self.requires_grad = False
        self._retains_grad, self._origin, self._alias = False, None, None
        if requires_grad:
            self.requires_grad_()

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


register_tensor_subclass(Parameter)  # no slot of its own: the compiled bind takes it
