"""The promotion table, pairwise against PyTorch's; weak Python scalars; bfloat16 rounding."""
import itertools

import numpy as np
import pytest
import torch

import rill
from rill import dtypes as dt

TORCH = {dt.bool_: torch.bool, dt.int8: torch.int8, dt.int16: torch.int16, dt.int32: torch.int32,
         dt.int64: torch.int64, dt.uint8: torch.uint8, dt.float16: torch.float16,
         dt.bfloat16: torch.bfloat16, dt.float32: torch.float32, dt.float64: torch.float64}
BY_TORCH = {v: k for k, v in TORCH.items()}
# The dtypes PyTorch promotes (it refuses uint16/32/64; complex is checked in
# tests/ops/test_dtypes_complex.py against the Array API standard's table).
PAIRS = list(itertools.product(TORCH, TORCH))


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda d: d.name)
def test_promotion_table_matches_pytorch(a, b):
    assert rill.promote_types(a, b) is BY_TORCH[torch.promote_types(TORCH[a], TORCH[b])]


@pytest.mark.parametrize("a,b", PAIRS, ids=lambda d: d.name)
def test_add_result_dtype_follows_the_table(a, b):
    x, y = rill.ones(2, dtype=a), rill.zeros(2, dtype=b)
    if a is dt.bool_ and b is dt.bool_:
        assert (x + y).dtype is dt.bool_
        return
    assert (x + y).dtype is rill.promote_types(a, b)


def test_table_is_symmetric_and_idempotent():
    for a, b in itertools.product(dt.ALL, dt.ALL):
        if dt.PROMOTION_TABLE[a, b] is None:  # uint64 with a signed type: refused
            assert dt.PROMOTION_TABLE[b, a] is None
            continue
        assert dt.promote_types(a, b) is dt.promote_types(b, a)
        assert dt.promote_types(a, a) is a


@pytest.mark.parametrize("tensor_dtype,scalar,expected", [
    (dt.float32, 2.0, dt.float32), (dt.float16, 2.0, dt.float16), (dt.bfloat16, 1, dt.bfloat16),
    (dt.int8, 1, dt.int8), (dt.uint8, 3, dt.uint8), (dt.int32, 2.5, dt.float32),
    (dt.bool_, 1, dt.int64), (dt.bool_, 1.5, dt.float32), (dt.bool_, True, dt.bool_),
    (dt.float64, 1, dt.float64), (dt.int16, True, dt.int16),
])
def test_python_scalars_are_weak(tensor_dtype, scalar, expected):
    x = rill.ones(3, dtype=tensor_dtype)
    assert (x * scalar).dtype is expected
    assert (scalar * x).dtype is expected
    t = torch.ones(3, dtype=TORCH[tensor_dtype])
    assert BY_TORCH[(t * scalar).dtype] is expected


def test_scalars_alone_take_default_dtypes():
    assert rill.add(1, 2).dtype is dt.int64
    assert rill.add(1.0, 2).dtype is dt.float32
    assert rill.tensor(True).dtype is dt.bool_


def test_scalar_that_does_not_fit_is_a_dtype_error():
    with pytest.raises(rill.DTypeError, match="does not fit"):
        rill.ones(2, dtype=rill.int8) + 1000


def test_defaults():
    assert rill.tensor([1.0]).dtype is rill.float32
    assert rill.tensor([1]).dtype is rill.int64
    assert rill.zeros(2).dtype is rill.float32
    assert rill.arange(3).dtype is rill.int64
    assert rill.exp(rill.tensor([1, 2])).dtype is rill.float32  # ints compute in float32
    assert (rill.tensor([1, 2]) / 2).dtype is rill.float32


def test_as_dtype_accepts_names_numpy_and_python_types():
    assert dt.as_dtype("float64") is rill.float64
    assert dt.as_dtype(np.int16) is rill.int16
    assert dt.as_dtype(float) is rill.float32
    assert dt.as_dtype(bool) is rill.bool
    assert dt.as_dtype("complex64") is dt.complex64
    with pytest.raises(rill.DTypeError):
        dt.as_dtype("complex32")


def test_bfloat16_rounds_to_nearest_even_like_pytorch(rng):
    values = rng.standard_normal(1000).astype(np.float32) * 100
    ours = rill.tensor(values, dtype=rill.bfloat16).numpy()
    theirs = torch.tensor(values).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_bfloat16_arithmetic_rounds_every_result():
    x = rill.tensor([1.0], dtype=rill.bfloat16)
    y = x + 2.0 ** -9  # below bfloat16's resolution at 1.0
    assert y.dtype is rill.bfloat16 and float(y) == 1.0
    t = torch.tensor([1.0], dtype=torch.bfloat16) + 2.0 ** -9
    assert float(t) == 1.0


def test_cast_float_to_int_truncates_toward_zero():
    x = rill.tensor([-1.7, 1.7, 2.5])
    np.testing.assert_array_equal(x.astype(rill.int32).numpy(), [-1, 1, 2])
