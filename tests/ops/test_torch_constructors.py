"""PyTorch's legacy constructors and x.new_* with PyTorch's meanings, compared with torch.

rill.Tensor is also the class of every tensor: isinstance checks keep working.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "").replace("bool", "bool")


def same_kind(r, t):
    """Same shape and dtype (values are not set for sizes)."""
    assert tuple(r.shape) == tuple(t.shape)
    assert r.dtype.name == _name(t.dtype)


def same(r, t):
    same_kind(r, t)
    np.testing.assert_array_equal(r.numpy(), t.numpy())


SIZES = [(), (3,), (2, 5), (0,), (2, 0, 3), (np.int64(3),), (np.int32(2), 1)]


@pytest.mark.parametrize("sizes", SIZES, ids=str)
def test_tensor_of_sizes_is_float32_of_that_shape(sizes):
    same_kind(rill.Tensor(*sizes), torch.Tensor(*sizes))
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "ShortTensor",
                 "CharTensor", "ByteTensor", "BoolTensor", "HalfTensor"):
        same_kind(getattr(rill, name)(*sizes), getattr(torch, name)(*sizes))


DATA = [[1, 2, 3], [[1.5, 2.5], [3.5, -4.0]], [True, False], [], np.array([1, 2], np.int64),
        np.arange(6.0).reshape(2, 3), [[1, 2]], ((1.5, 2.0),)]


@pytest.mark.parametrize("data", DATA, ids=lambda d: repr(d)[:30])
def test_tensor_of_data_is_float32_whatever_the_data(data):
    same(rill.Tensor(data), torch.Tensor(data))
    same(rill.FloatTensor(data), torch.FloatTensor(data))
    same(rill.DoubleTensor(data), torch.DoubleTensor(data))
    same(rill.LongTensor(data), torch.LongTensor(data))
    same(rill.BoolTensor(data), torch.BoolTensor(data))


def test_typed_constructors_truncate_as_torch():
    same(rill.LongTensor([1.7, -2.7]), torch.LongTensor([1.7, -2.7]))
    same(rill.IntTensor([[3.9]]), torch.IntTensor([[3.9]]))


def test_tensor_of_a_tensor_is_a_view_keeping_its_dtype():
    for dtype, tdtype in ((rill.float32, torch.float32), (rill.int64, torch.int64)):
        r, t = rill.ones(2, 3, dtype=dtype), torch.ones(2, 3, dtype=tdtype)
        rv, tv = rill.Tensor(r), torch.Tensor(t)
        same(rv, tv)
        rv[0].add_(4)
        tv[0].add_(4)
        same(r, t)  # the write reached the base in both
    r, t = rill.ones(2), torch.ones(2)
    rf, tf = rill.FloatTensor(r), torch.FloatTensor(t)
    rf.mul_(3)
    tf.mul_(3)
    same(r, t)


def test_tensor_of_a_tensor_keeps_the_gradient_path():
    grads = []
    for lib in (rill, torch):
        x = lib.ones(3, requires_grad=True)
        y = lib.Tensor(x * 2)
        (y * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append(x.grad)
    same(*grads)


def test_what_torch_refuses_rill_refuses():
    for args in ((3.0,), (True,), (2, 3.0), (2, "a")):
        with pytest.raises(TypeError):
            torch.Tensor(*args)
        with pytest.raises(rill.ArgumentError):
            rill.Tensor(*args)
    with pytest.raises(TypeError):
        torch.LongTensor(torch.ones(2))
    with pytest.raises(rill.DTypeError, match="to\\(rill.int64\\)"):
        rill.LongTensor(rill.ones(2))
    with pytest.raises(RuntimeError):
        torch.Tensor(-1)
    with pytest.raises(rill.ShapeError):
        rill.Tensor(-1)


def test_a_tuple_of_ints_is_ambiguous_so_refused():
    # torch: a torch.Size is a shape, a tuple is data; rill's shapes are plain tuples
    assert torch.Tensor(torch.Size([2, 3])).shape == (2, 3)
    assert torch.Tensor((2, 3)).shape == (2,)
    with pytest.raises(rill.ArgumentError, match=r"rill.Tensor\(\*\(2, 3\)\)"):
        rill.Tensor((2, 3))
    with pytest.raises(rill.ArgumentError, match="shape"):
        rill.Tensor(rill.zeros(2, 3).shape)


def test_tensor_stays_the_class_of_every_tensor():
    x = rill.tensor([1, 2])
    assert isinstance(x, rill.Tensor) and type(rill.Tensor(2)) is rill.Tensor
    assert isinstance(rill.nn.Parameter(rill.zeros(2)), rill.Tensor)
    assert isinstance(rill.ones(2), rill.FloatTensor)
    assert not isinstance(rill.ones(2, dtype=rill.float64), rill.FloatTensor)
    assert isinstance(x, rill.LongTensor) and not isinstance(x, rill.IntTensor)
    assert not isinstance(np.ones(2), rill.FloatTensor)
    assert isinstance(torch.ones(2), torch.FloatTensor)  # the same meaning in torch
    assert rill.Tensor(2, 3, device="cpu:1").device == rill.device("cpu:1")
    assert rill.Tensor([1, 2], dtype=rill.int64).dtype is rill.int64  # rill's dtype= form
    assert rill.Tensor(2, requires_grad=True).requires_grad


# ---- x.new_* --------------------------------------------------------------------------------

BASES = [(torch.float32, rill.float32), (torch.float64, rill.float64), (torch.int64, rill.int64)]


@pytest.mark.parametrize("tdtype,rdtype", BASES, ids=lambda d: str(d))
def test_new_methods_follow_torch(tdtype, rdtype):
    t, r = torch.ones(2, dtype=tdtype), rill.ones(2, dtype=rdtype)
    for call in (
            lambda x: x.new_tensor([1.7, -2.5]),
            lambda x: x.new_tensor([[1, 2], [3, 4]]),
            lambda x: x.new_tensor([True, False]),
            lambda x: x.new_zeros(2, 3),
            lambda x: x.new_zeros((2, 3)),
            lambda x: x.new_zeros([4]),
            lambda x: x.new_ones(3),
            lambda x: x.new_ones((1, 2), dtype=x.dtype),
            lambda x: x.new_full((2, 2), 2.7),
            lambda x: x.new_full([3], -1),
            lambda x: x.new_zeros(2, 3, layout=None) if isinstance(x, rill.Tensor) else
            x.new_zeros(2, 3, layout=torch.strided),
            lambda x: x.new_ones(2, pin_memory=False),
    ):
        same(call(r), call(t))
    for call in (lambda x: x.new_empty(2, 3), lambda x: x.new_empty((4,)),
                 lambda x: x.new_empty(())):
        same_kind(call(r), call(t))


def test_new_methods_take_dtype_device_and_requires_grad():
    r, t = rill.ones(2), torch.ones(2)
    same(r.new_ones(2, dtype=rill.int32), t.new_ones(2, dtype=torch.int32))
    same(r.new_tensor([1, 2], dtype=rill.int64), t.new_tensor([1, 2], dtype=torch.int64))
    assert r.new_full((2,), 1.5, requires_grad=True).requires_grad
    assert r.new_zeros(2, requires_grad=True).requires_grad
    assert r.new_tensor([1.0], requires_grad=True).requires_grad
    assert r.new_empty(3, device="cpu:1").device == rill.device("cpu:1")


def test_new_tensor_copies():
    src = rill.ones(2)
    out = src.new_tensor(src)
    out.add_(1)
    assert src.tolist() == [1.0, 1.0]  # a copy, as torch's (which warns)


def test_new_full_needs_a_sequence_as_torch():
    with pytest.raises(TypeError):
        torch.ones(2).new_full(3, 1.0)
    with pytest.raises(rill.ArgumentError, match="size"):
        rill.ones(2).new_full(3, 1.0)
