"""bfloat16 crosses DLPack both ways, as PyTorch's own tensors do: rill -> torch and
torch -> rill keep every bit (specials, subnormals, strides, 0-d, empty), always as a copy
(rill holds bfloat16 in float32), so copy=False is refused as the standard asks.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")


def _bits(t):
    return t.contiguous().view(torch.int16).numpy()


def _every_bfloat16():
    """All 65536 bfloat16 bit patterns (NaNs included) as a torch tensor."""
    return torch.from_numpy(np.arange(-2**15, 2**15, dtype=np.int16)).view(torch.bfloat16)


def test_torch_to_rill_keeps_every_bit_pattern():
    t = _every_bfloat16()
    x = rill.from_dlpack(t)
    assert x.dtype is rill.bfloat16 and x.shape == (65536,)
    want = t.to(torch.float32).numpy()
    np.testing.assert_array_equal(x.numpy(), want)  # NaN == NaN here; -0.0 checked below
    np.testing.assert_array_equal(np.signbit(x.numpy()), np.signbit(want))


def test_rill_to_torch_keeps_every_bit_pattern():
    t = _every_bfloat16()
    nan = torch.isnan(t)
    x = rill.tensor(t.to(torch.float32).numpy()).astype(rill.bfloat16)
    back = torch.from_dlpack(x)
    assert back.dtype == torch.bfloat16
    np.testing.assert_array_equal(_bits(back)[~nan.numpy()], _bits(t)[~nan.numpy()])
    assert torch.isnan(back[nan]).all()


@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (2, 3, 4)])
def test_round_trip_through_torch_with_strides(shape):
    x = rill.randn(*shape).astype(rill.bfloat16) if shape else rill.tensor(1.5).astype(
        rill.bfloat16)
    reverse = tuple(reversed(range(len(shape))))
    views = [x] if len(shape) < 2 else [x, rill.permute_dims(x, reverse), x[..., ::2]]
    for v in views:
        t = torch.from_dlpack(v)
        assert t.dtype == torch.bfloat16 and tuple(t.shape) == v.shape
        np.testing.assert_array_equal(t.to(torch.float32).numpy(), v.numpy())
        strided = t.transpose(0, -1) if t.ndim >= 2 else t
        back = rill.from_dlpack(strided)
        np.testing.assert_array_equal(back.numpy(), strided.to(torch.float32).numpy())


def test_exports_are_copies_that_torch_may_write():
    x = rill.tensor([1.0, 2.0], dtype=rill.bfloat16)
    t = torch.from_dlpack(x)
    t.mul_(4)
    assert x.tolist() == [1.0, 2.0]
    s = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    y = rill.from_dlpack(s)
    s.mul_(4)
    assert y.tolist() == [1.0, 2.0]


def test_legacy_capsules_and_asarray():
    x = rill.tensor([0.5, -3.0], dtype=rill.bfloat16)
    t = torch.utils.dlpack.from_dlpack(x.__dlpack__())  # DLPack 0.x: no max_version
    assert t.dtype == torch.bfloat16 and t.tolist() == [0.5, -3.0]
    y = rill.asarray(torch.tensor([0.25], dtype=torch.bfloat16))
    assert y.dtype is rill.bfloat16 and y.tolist() == [0.25]


def test_copy_false_is_refused_both_ways():
    x = rill.tensor([1.0], dtype=rill.bfloat16)
    with pytest.raises(BufferError, match="copy=False"):
        x.__dlpack__(max_version=(1, 0), copy=False)
    with pytest.raises(rill.ArgumentError, match="copy=False"):
        rill.from_dlpack(torch.tensor([1.0], dtype=torch.bfloat16), copy=False)


def test_numpy_still_refuses_bfloat16_as_it_does_torchs():
    x = rill.tensor([1.0], dtype=rill.bfloat16)
    for exported in (x, torch.tensor([1.0], dtype=torch.bfloat16)):
        with pytest.raises(Exception, match="(?i)dtype"):
            np.from_dlpack(exported)


def test_other_dtypes_still_go_through_unchanged():
    t = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    x = rill.from_dlpack(t)
    assert x.dtype is rill.float16 and x.tolist() == t.tolist()
    with pytest.raises(rill.ArgumentError, match="DLPack"):
        rill.from_dlpack(torch.tensor([1.0]).to(torch.float8_e4m3fn))
