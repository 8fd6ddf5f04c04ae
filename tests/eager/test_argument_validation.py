"""Wrongly typed or out-of-range arguments to public ops raise a rill.Error that names the op
and the user's line, never a bare TypeError, ValueError or OverflowError from inside rill,
and never a silent wrap or truncation (issue 14, finding 7). Mostly ArgumentError; a shape
of the wrong kind stays a ShapeError and an index an IndexingError, as before.

Each case is a one-line lambda, so the line the error must point at is the lambda's own.
"""
import math
import os

import numpy as np
import pytest

import rill
import rill.nn.functional as F

THIS_FILE = os.path.basename(__file__)

X = rill.ones(2, 3)
T = rill.tensor([0, 2, 1])
IMG = rill.ones(1, 1, 4, 4)
W = rill.ones(1, 1, 3, 3)


def case(fn, op, error=rill.ArgumentError, *mentions, id):
    return pytest.param(fn, op, error, mentions, id=id)


CASES = [
    # the repros of the issue
    case(lambda: rill.leaky_relu(X, "a"), "leaky_relu", id="leaky_relu-str"),
    case(lambda: rill.one_hot(T, "3"), "one_hot", id="one_hot-str"),
    case(lambda: rill.tile(X, 1.5), "tile", id="tile-float"),
    case(lambda: F.conv2d(IMG, None), "conv2d", id="conv2d-none-weight"),
    case(lambda: X[::0], "getitem", rill.IndexingError, "step", id="slice-step-0"),
    case(lambda: rill.tensor(2**70, dtype=rill.int8), "tensor", rill.ArgumentError, "int8",
         id="tensor-2**70-int8"),
    case(lambda: rill.arange(0, math.inf), "arange", id="arange-inf"),
    case(lambda: rill.zeros(2, dtype="x"), "zeros", rill.DTypeError, "'x'", id="zeros-dtype-x"),
    case(lambda: rill.triu(X, k=1.5), "triu", id="triu-float-k"),
    # integer overflow in creation is an error, not a wrap
    case(lambda: rill.tensor(300, dtype=rill.int8), "tensor", rill.ArgumentError, "int8",
         id="tensor-300-int8"),
    case(lambda: rill.tensor([1, -1], dtype=rill.uint8), "tensor", rill.ArgumentError, "uint8",
         id="tensor-negative-uint8"),
    case(lambda: rill.tensor(2**70), "tensor", rill.ArgumentError, "int64", id="tensor-2**70"),
    case(lambda: rill.tensor(1e10, dtype=rill.int32), "tensor", rill.ArgumentError, "int32",
         id="tensor-big-float-int32"),
    case(lambda: rill.full((2,), 300, dtype=rill.int8), "full", rill.ArgumentError, "int8",
         id="full-300-int8"),
    case(lambda: rill.full((2,), 2**70), "full", rill.ArgumentError, id="full-2**70"),
    case(lambda: rill.full((2,), math.nan, dtype=rill.int32), "full", id="full-nan-int32"),
    case(lambda: rill.arange(0, 300, dtype=rill.int8), "arange", rill.ArgumentError, "int8",
         id="arange-overflow-int8"),
    case(lambda: rill.arange(0, 2**70), "arange", id="arange-2**70"),
    case(lambda: rill.arange(math.nan), "arange", id="arange-nan"),
    case(lambda: rill.arange(0, 5, 1, dtype="x"), "arange", rill.DTypeError, id="arange-dtype-x"),
    case(lambda: rill.ones(2, dtype="float33"), "ones", rill.DTypeError, id="ones-dtype"),
    case(lambda: rill.full(2, 1.0, dtype=3), "full", rill.DTypeError, id="full-dtype-int"),
    case(lambda: rill.zeros(-1), "zeros", rill.ShapeError, id="zeros-negative"),
    case(lambda: rill.zeros(2.5), "zeros", rill.ShapeError, id="zeros-float-shape"),
    case(lambda: rill.zeros(2**70), "zeros", rill.ShapeError, id="zeros-huge-shape"),
    case(lambda: rill.eye(2.5), "eye", id="eye-float"),
    case(lambda: rill.linspace(0, 1, 2.5), "linspace", id="linspace-float-num"),
    case(lambda: rill.linspace("a", 1), "linspace", id="linspace-str-start"),
    case(lambda: rill.cast(X, "x"), "cast", rill.DTypeError, id="cast-dtype-x"),
    case(lambda: X.astype(None), "cast", rill.DTypeError, id="astype-none"),
    # axes of the wrong type: float, str, bool
    case(lambda: rill.sum(X, axis=1.5), "sum", id="sum-float-axis"),
    case(lambda: rill.sum(X, axis="0"), "sum", id="sum-str-axis"),
    case(lambda: rill.sum(X, axis=True), "sum", id="sum-bool-axis"),
    case(lambda: rill.mean(X, axis=(0, 1.0)), "mean", id="mean-float-in-tuple"),
    case(lambda: rill.max(X, axis=0.0), "max", id="max-float-axis"),
    case(lambda: rill.argmax(X, axis="1"), "argmax", id="argmax-str-axis"),
    case(lambda: rill.cumsum(X, axis=1.0), "cumsum", id="cumsum-float-axis"),
    case(lambda: rill.var(X, axis=0, correction="1"), "var", id="var-str-correction"),
    case(lambda: rill.sum(X, keepdims="yes"), "sum", id="sum-str-keepdims"),
    case(lambda: rill.sort(X, axis=0.5), "sort", id="sort-float-axis"),
    case(lambda: rill.topk(X, 1.5), "topk", id="topk-float-k"),
    case(lambda: rill.flip(X, axis=0.5), "flip", id="flip-float-axis"),
    case(lambda: rill.squeeze(X, axis="0"), "squeeze", id="squeeze-str-axis"),
    case(lambda: rill.expand_dims(X, 0.5), "expand_dims", id="expand_dims-float-axis"),
    case(lambda: rill.concat([X, X], axis=0.0), "concat", id="concat-float-axis"),
    case(lambda: rill.stack([X, X], axis="0"), "stack", id="stack-str-axis"),
    case(lambda: rill.split(X, 2.0), "split", id="split-float-sections"),
    case(lambda: rill.roll(X, 1.5), "roll", id="roll-float-shift"),
    case(lambda: rill.transpose(X, (0.0, 1)), "transpose", id="transpose-float-axes"),
    case(lambda: rill.moveaxis(X, 0.0, 1), "moveaxis", id="moveaxis-float"),
    case(lambda: rill.swapaxes(X, 0, "1"), "swapaxes", id="swapaxes-str"),
    case(lambda: rill.flatten(X, 0.0), "flatten", id="flatten-float"),
    case(lambda: rill.take(X, T, axis=1.0), "take", id="take-float-axis"),
    case(lambda: F.softmax(X, axis=1.5), "softmax", id="softmax-float-axis"),
    case(lambda: rill.reshape(X, (3, 2.0)), "reshape", id="reshape-float"),
    case(lambda: rill.reshape(X, "6"), "reshape", id="reshape-str"),
    case(lambda: rill.broadcast_to(X, (2, "3")), "broadcast_to", rill.ShapeError,
         id="broadcast_to-str"),
    case(lambda: rill.repeat(X, 1.5), "repeat", id="repeat-float"),
    case(lambda: rill.pad(X, 1.5), "pad", id="pad-float"),
    case(lambda: rill.tensordot(X, X, axes=1.5), "tensordot", id="tensordot-float-axes"),
    # scalars of the wrong type
    case(lambda: rill.elu(X, "a"), "elu", id="elu-str"),
    case(lambda: rill.leaky_relu(X, None), "leaky_relu", id="leaky_relu-none"),
    case(lambda: rill.tril(X, k="1"), "tril", id="tril-str-k"),
    case(lambda: rill.one_hot(T, 3.0), "one_hot", id="one_hot-float"),
    case(lambda: rill.one_hot(T, 2**70), "one_hot", id="one_hot-huge"),
    case(lambda: rill.tile(X, "2"), "tile", id="tile-str"),
    case(lambda: rill.tile(X, (2, 1.5)), "tile", id="tile-float-in-tuple"),
    case(lambda: rill.eye(3, k=0.5), "eye", id="eye-float-k"),
    case(lambda: rill.scaled_add(X, X, "a"), "scaled_add", id="scaled_add-str"),
    case(lambda: rill.norm(X, ord=None, axis=0.5), "norm", id="norm-float-axis"),
    case(lambda: rill.randint(0, 2.5, (2,)), "randint", id="randint-float"),
    case(lambda: rill.randint("a"), "randint", id="randint-str"),
    case(lambda: rill.rand(2, 1.5), "rand", rill.ShapeError, id="rand-float-shape"),
    case(lambda: rill.normal(0.0, "a", (2,)), "normal", id="normal-str-std"),
    case(lambda: rill.uniform("a", 1.0, (2,)), "uniform", id="uniform-str-low"),
    case(lambda: rill.clip(X, "a", 1.0), "clip", id="clip-str"),
    # tensors expected, something else given
    case(lambda: rill.add(X, None), "add", id="add-none"),
    case(lambda: rill.add(X, "a"), "add", id="add-str"),
    case(lambda: rill.exp(None), "exp", id="exp-none"),
    case(lambda: rill.matmul(X, "a"), "matmul", id="matmul-str"),
    case(lambda: rill.where(None, X, X), "where", id="where-none"),
    case(lambda: rill.concat([X, None]), "concat", id="concat-none"),
    case(lambda: rill.concat(None), "concat", id="concat-not-a-list"),
    case(lambda: rill.sum(None), "sum", id="sum-none"),
    case(lambda: rill.reshape(None, 2), "reshape", id="reshape-none"),
    case(lambda: rill.tile(None, 2), "tile", id="tile-none"),
    case(lambda: rill.one_hot(None, 3), "one_hot", id="one_hot-none"),
    case(lambda: rill.take(X, "a"), "take", id="take-str-indices"),
    case(lambda: rill.einsum("ij->ji", None), "einsum", id="einsum-none"),
    case(lambda: rill.einsum(3, X), "einsum", id="einsum-int-equation"),
    case(lambda: F.conv2d(None, W), "conv2d", id="conv2d-none-input"),
    case(lambda: F.conv2d(IMG, W, stride=1.5), "conv2d", id="conv2d-float-stride"),
    case(lambda: F.conv2d(IMG, W, groups=1.0), "conv2d", id="conv2d-float-groups"),
    case(lambda: F.conv1d(None, W), "conv1d", id="conv1d-none"),
    case(lambda: F.linear(X, None), "linear", id="linear-none"),
    case(lambda: F.max_pool2d(IMG, 1.5), "max_pool2d", id="max_pool2d-float-kernel"),
    case(lambda: F.avg_pool2d(None, 2), "avg_pool2d", id="avg_pool2d-none"),
    case(lambda: F.batch_norm(None), "batch_norm", id="batch_norm-none"),
    case(lambda: F.layer_norm(X, 3.0), "layer_norm", rill.ShapeError,
         id="layer_norm-float-shape"),
    case(lambda: F.layer_norm(None, 3), "layer_norm", id="layer_norm-none"),
    case(lambda: F.group_norm(IMG, 1.5), "group_norm", id="group_norm-float"),
    case(lambda: F.embedding(T, None), "embedding", id="embedding-none-weight"),
    case(lambda: F.dropout(X, "a"), "dropout", id="dropout-str"),
    case(lambda: F.mse_loss(X, None), "mse_loss", id="mse_loss-none"),
    case(lambda: F.cross_entropy(X, T[:2], reduction=3), "cross_entropy", id="xent-int-reduction"),
    case(lambda: F.cross_entropy(None, T), "cross_entropy", id="xent-none"),
    case(lambda: F.nll_loss(None, T), "nll_loss", id="nll_loss-none"),
    case(lambda: F.huber_loss(X, X, delta="a"), "huber_loss", id="huber-str-delta"),
    case(lambda: F.scaled_dot_product_attention(X, None, X), "scaled_dot_product_attention",
         id="sdpa-none"),
    case(lambda: F.softmax(None), "softmax", id="softmax-none"),
    case(lambda: F.gelu(X, approximate=None), "gelu", id="gelu-none"),
    # indexing
    case(lambda: X[1.5], "getitem", rill.IndexingError, id="float-index"),
    case(lambda: X["a"], "getitem", rill.IndexingError, id="str-index"),
    case(lambda: X[0:1.5], "getitem", rill.IndexingError, id="float-slice-bound"),
    case(lambda: X[::2**70], "getitem", rill.IndexingError, id="huge-slice-step"),
    case(lambda: X[2**70], "getitem", rill.IndexingError, id="huge-int-index"),
    case(lambda: rill.index_set(X, slice(None, None, 0), 1.0), "index_set", rill.IndexingError,
         id="index_set-step-0"),
]


@pytest.mark.parametrize("fn, op, error, mentions", CASES)
def test_bad_argument_is_a_rill_error_naming_the_op(fn, op, error, mentions):
    with pytest.raises(rill.Error) as info:
        fn()
    e = info.value
    text = str(e)
    assert isinstance(e, error), f"expected {error.__name__}, got {type(e).__name__}: {text}"
    assert e.op == op, text
    assert text.startswith(f"{op}:"), text
    assert e.location == f"{THIS_FILE}:{fn.__code__.co_firstlineno}", text
    for m in mentions:
        assert m in text, f"{m!r} not in {text!r}"


# ---- what must keep working ----------------------------------------------------------------


def test_numpy_scalars_and_lists_are_still_accepted():
    assert rill.sum(X, axis=np.int64(1)).shape == (2,)
    assert rill.sum(X, axis=[0, 1]).shape == ()
    assert rill.leaky_relu(X, np.float32(0.5)).shape == (2, 3)
    assert rill.leaky_relu(X, 1).shape == (2, 3)
    assert rill.tile(X, np.int64(2)).shape == (2, 6)
    assert rill.one_hot(T, np.int32(3)).shape == (3, 3)
    assert rill.triu(X, k=np.int64(1)).tolist() == [[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    assert rill.zeros(np.int64(2), dtype="float64").dtype is rill.float64
    assert rill.tensor(127, dtype=rill.int8).item() == 127
    assert rill.tensor(-128, dtype=rill.int8).item() == -128
    assert rill.tensor(1.9, dtype=rill.int8).item() == 1  # a float truncates, as a cast does
    assert rill.tensor(2**63 - 1).item() == 2**63 - 1
    assert rill.arange(0, 128, dtype=rill.int8).shape == (128,)
    assert rill.full((2,), 255, dtype=rill.uint8).tolist() == [255, 255]
    assert X[rill.tensor(1)].shape == (3,)
    assert X[np.int64(1), ::np.int64(2)].shape == (2,)
    assert rill.cast(X, "float64").dtype is rill.float64


def test_integer_overflow_in_arithmetic_keeps_wrapping():
    # Overflow in *creation* is refused; an op on int8 tensors wraps, as NumPy and PyTorch do.
    assert (rill.tensor([100], dtype=rill.int8) * 2).tolist() == [-56]
    assert rill.cast(rill.tensor([300]), rill.int8).tolist() == [44]
