"""DLPack exports of a rill tensor are never a writable alias of its buffer (rill's buffers
are immutable: a tape may hold one for backward). NumPy, which honours DLPack 1.0's
read-only flag, gets the buffer itself, read-only; PyTorch, which ignores the flag, and
consumers of DLPack before 1.0 get a copy.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")


def test_torch_gets_a_copy_so_its_in_place_ops_leave_rill_alone():
    x = rill.tensor([1.0, 2.0, 3.0])
    t = torch.from_dlpack(x)
    t.mul_(100.0)
    assert x.tolist() == [1.0, 2.0, 3.0]
    assert t.tolist() == [100.0, 200.0, 300.0]


def test_a_tensor_saved_for_backward_survives_a_torch_in_place_op():
    grads = []
    for lib in (rill, torch):
        w = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
        y = w * w  # saves w for backward
        exported = torch.from_dlpack(w.detach()) if lib is torch else torch.from_dlpack(w)
        if lib is torch:
            exported = exported.clone()  # torch's own tensor: the reference without aliasing
        exported.mul_(100.0)
        y.sum().backward()
        grads.append(np.asarray(w.grad.tolist()))
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_array_equal(grads[0], [2.0, -4.0, 6.0])


def test_numpy_gets_the_buffer_read_only():
    x = rill.arange(6.0).reshape(2, 3)
    a = np.from_dlpack(x)
    assert np.shares_memory(a, x.numpy())  # no copy
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0, 0] = 5.0
    assert float(x[0, 0]) == 0.0


def test_copy_true_gives_writable_copies():
    x = rill.tensor([1.0, 2.0])
    a = np.from_dlpack(x, copy=True)
    a[0] = 9.0
    t = torch.from_dlpack(x, copy=True)
    t[1] = 9.0
    assert x.tolist() == [1.0, 2.0] and a.tolist() == [9.0, 2.0] and t.tolist() == [1.0, 9.0]


def test_copy_false_where_a_copy_is_needed_is_a_buffer_error():
    x = rill.tensor([1.0, 2.0])
    with pytest.raises(BufferError, match="torch ignores"):
        torch.from_dlpack(x, copy=False)
    with pytest.raises(BufferError, match="before 1.0"):
        x.__dlpack__(copy=False)
    assert not np.from_dlpack(x, copy=False).flags.writeable  # NumPy needs no copy


def test_an_unversioned_capsule_holds_a_copy():
    x = rill.tensor([1.0, 2.0])
    t = torch.utils.dlpack.from_dlpack(x.__dlpack__())  # DLPack before 1.0: no flag to set
    t.add_(1.0)
    assert x.tolist() == [1.0, 2.0]


def test_a_view_exports_its_own_values():
    x = rill.arange(6.0).reshape(2, 3)
    v = x.T
    np.testing.assert_array_equal(np.from_dlpack(v), np.arange(6.0).reshape(2, 3).T)
    t = torch.from_dlpack(v)
    t.zero_()
    assert float(x.sum()) == 15.0
