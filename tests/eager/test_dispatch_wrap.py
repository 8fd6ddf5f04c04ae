"""The eager interpreter's `wrap` makes a kernel's result a Tensor with tensor.new_tensor's
body inlined (a call less on every op): both must make the same tensor, slot for slot, so
that a slot added to Tensor cannot be left unset on the eager path."""
from __future__ import annotations

import numpy as np

import rill
from rill.eager.interpreter import wrap
from rill.ops.elementwise import P
from rill.tensor import Tensor, new_tensor


def _slots(t):
    return {name: getattr(t, name) for name in Tensor.__slots__ if name != "__weakref__"}


def test_wrap_sets_every_slot_as_new_tensor_does():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    device = rill.ones(1).device
    wrapped = wrap(P["add"], data, ((2, 3), rill.float32), device)
    made = new_tensor(data, rill.float32, device)
    assert _slots(wrapped).keys() == _slots(made).keys()
    for name, value in _slots(made).items():
        assert getattr(wrapped, name) is value or getattr(wrapped, name) == value, name


def test_an_ops_result_is_a_fresh_leaf():
    x = rill.ones(3, requires_grad=True)
    with rill.no_grad():
        y = x + 1
    assert type(y) is Tensor and y.shape == (3,) and y.dtype is rill.float32
    assert not y.requires_grad and y.grad is None and y._node is None and y._version == 0
