"""rill.nn.functional beyond the op table (tests/ops_table_nn.py):

- bad input raises a clear rill.Error: the right subclass, the message starting with the
  function the user called, naming what was wrong, located at the user's line;
- derivatives of order 2 and 3 of the fused primitives (conv, pooling, softmax) and a few
  composites, against PyTorch's create_graph=True;
- dropout, which is random: seeding, keep rate, scaling, eval mode, gradient;
- embedding's padding_idx gradient (the table cannot check it by finite differences).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import rill
import rill.nn.functional as F

TF = torch.nn.functional
THIS_FILE = os.path.basename(__file__)


def ones(*shape):
    return rill.ones(*shape, dtype=rill.float32)


def ints(*values):
    return rill.tensor(np.array(values, dtype=np.int64))


X4 = (1, 2, 4, 4)   # an image batch
W4 = (3, 2, 3, 3)   # a conv weight for it

# (id, call, error class, op the user called, texts the message must contain)
BAD_INPUTS = [
    # ---- conv2d ----
    ("conv2d_ndim", lambda: F.conv2d(ones(2, 4, 4), ones(*W4)), rill.ShapeError, "conv2d",
     ["(2, 4, 4)"]),
    ("conv2d_channels", lambda: F.conv2d(ones(1, 3, 4, 4), ones(*W4)), rill.ShapeError,
     "conv2d", ["(1, 3, 4, 4)", "2 input channels"]),
    ("conv2d_groups", lambda: F.conv2d(ones(1, 4, 4, 4), ones(3, 2, 3, 3), groups=2),
     rill.ShapeError, "conv2d", ["groups=2"]),
    ("conv2d_groups_zero", lambda: F.conv2d(ones(*X4), ones(*W4), groups=0),
     rill.ArgumentError, "conv2d", ["groups"]),
    ("conv2d_padding_string", lambda: F.conv2d(ones(*X4), ones(*W4), padding="full"),
     rill.ArgumentError, "conv2d", ["'full'"]),
    ("conv2d_negative_padding", lambda: F.conv2d(ones(*X4), ones(*W4), padding=-1),
     rill.ArgumentError, "conv2d", ["negative"]),
    ("conv2d_padding_triple", lambda: F.conv2d(ones(*X4), ones(*W4), padding=(1, 1, 1)),
     rill.ArgumentError, "conv2d", ["(1, 1, 1)"]),
    ("conv2d_same_strided", lambda: F.conv2d(ones(*X4), ones(*W4), stride=2, padding="same"),
     rill.ArgumentError, "conv2d", ["stride 1"]),
    ("conv2d_zero_stride", lambda: F.conv2d(ones(*X4), ones(*W4), stride=0),
     rill.ArgumentError, "conv2d", ["stride"]),
    ("conv2d_kernel_too_large", lambda: F.conv2d(ones(1, 2, 2, 2), ones(*W4)),
     rill.ShapeError, "conv2d", ["(3, 3)"]),
    ("conv2d_bias_shape", lambda: F.conv2d(ones(*X4), ones(*W4), ones(4)), rill.ShapeError,
     "conv2d", ["bias", "(4,)"]),
    ("conv2d_integer_input", lambda: F.conv2d(rill.tensor(np.ones(X4, np.int64)), ones(*W4)),
     rill.DTypeError, "conv2d", ["int64"]),
    ("conv2d_integer_weight",
     lambda: F.conv2d(ones(*X4), rill.tensor(np.ones(W4, np.int32))), rill.DTypeError,
     "conv2d", ["int32"]),
    # ---- conv1d ----
    ("conv1d_ndim", lambda: F.conv1d(ones(*X4), ones(*W4)), rill.ShapeError, "conv1d",
     ["(N, C, L)"]),
    ("conv1d_channels", lambda: F.conv1d(ones(1, 3, 5), ones(2, 2, 3)), rill.ShapeError,
     "conv1d", ["input channels"]),
    ("conv1d_padding_string", lambda: F.conv1d(ones(1, 2, 5), ones(2, 2, 3), padding="x"),
     rill.ArgumentError, "conv1d", ["'x'"]),
    ("conv1d_integer_input",
     lambda: F.conv1d(rill.tensor(np.ones((1, 2, 5), np.int64)), ones(2, 2, 3)),
     rill.DTypeError, "conv1d", ["int64"]),
    ("conv1d_negative_padding", lambda: F.conv1d(ones(1, 2, 5), ones(2, 2, 3), padding=-1),
     rill.ArgumentError, "conv1d", ["negative"]),
    # ---- conv_transpose2d ----
    ("conv_transpose2d_ndim", lambda: F.conv_transpose2d(ones(2, 4, 4), ones(2, 3, 3, 3)),
     rill.ShapeError, "conv_transpose2d", ["(2, 4, 4)"]),
    ("conv_transpose2d_channels", lambda: F.conv_transpose2d(ones(*X4), ones(3, 3, 3, 3)),
     rill.ShapeError, "conv_transpose2d", ["(1, 2, 4, 4)"]),
    ("conv_transpose2d_groups",
     lambda: F.conv_transpose2d(ones(1, 3, 4, 4), ones(3, 3, 3, 3), groups=2),
     rill.ShapeError, "conv_transpose2d", ["groups=2"]),
    ("conv_transpose2d_output_padding",
     lambda: F.conv_transpose2d(ones(*X4), ones(2, 3, 3, 3), stride=2, output_padding=2),
     rill.ArgumentError, "conv_transpose2d", ["output_padding"]),
    ("conv_transpose2d_negative_padding",
     lambda: F.conv_transpose2d(ones(*X4), ones(2, 3, 3, 3), padding=-1),
     rill.ArgumentError, "conv_transpose2d", ["negative"]),
    # (1 - 1) * 1 - 2 * 1 + 0 + 1 = -1 rows out; PyTorch: "Output size is too small".
    ("conv_transpose2d_padding_too_large",
     lambda: F.conv_transpose2d(ones(1, 2, 1, 1), ones(2, 3, 1, 1), padding=1),
     rill.ShapeError, "conv_transpose2d", ["output size", "(-1, -1)"]),
    ("conv_transpose2d_empty_output",
     lambda: F.conv_transpose2d(ones(1, 2, 2, 2), ones(2, 3, 1, 1), padding=1),
     rill.ShapeError, "conv_transpose2d", ["(0, 0)"]),
    ("conv_transpose2d_integer_input",
     lambda: F.conv_transpose2d(rill.tensor(np.ones(X4, np.int64)), ones(2, 3, 3, 3)),
     rill.DTypeError, "conv_transpose2d", ["int64"]),
    # ---- pooling ----
    ("max_pool2d_ndim", lambda: F.max_pool2d(ones(4, 4), 2), rill.ShapeError, "max_pool2d",
     ["(4, 4)"]),
    ("max_pool2d_padding", lambda: F.max_pool2d(ones(*X4), 2, padding=2), rill.ArgumentError,
     "max_pool2d", ["half the kernel"]),
    ("max_pool2d_negative_padding", lambda: F.max_pool2d(ones(*X4), 2, padding=-1),
     rill.ArgumentError, "max_pool2d", ["(-1, -1)"]),
    ("max_pool2d_window_too_large", lambda: F.max_pool2d(ones(*X4), 5), rill.ShapeError,
     "max_pool2d", ["(5, 5)"]),
    ("max_pool2d_zero_kernel", lambda: F.max_pool2d(ones(*X4), 0), rill.ArgumentError,
     "max_pool2d", ["kernel_size"]),
    ("max_pool2d_bad_kernel", lambda: F.max_pool2d(ones(*X4), "2"), rill.ArgumentError,
     "max_pool2d", ["kernel_size"]),
    ("avg_pool2d_ndim", lambda: F.avg_pool2d(ones(4, 4), 2), rill.ShapeError, "avg_pool2d",
     ["(4, 4)"]),
    ("avg_pool2d_padding", lambda: F.avg_pool2d(ones(*X4), 2, padding=2), rill.ArgumentError,
     "avg_pool2d", ["half the kernel"]),
    ("avg_pool2d_window_too_large", lambda: F.avg_pool2d(ones(*X4), 5), rill.ShapeError,
     "avg_pool2d", ["(5, 5)"]),
    ("avg_pool2d_integer_input", lambda: F.avg_pool2d(rill.tensor(np.ones(X4, np.int64)), 2),
     rill.DTypeError, "avg_pool2d", ["int64"]),
    ("adaptive_avg_pool2d_ndim", lambda: F.adaptive_avg_pool2d(ones(4, 4), 2),
     rill.ShapeError, "adaptive_avg_pool2d", ["(4, 4)"]),
    ("adaptive_avg_pool2d_zero", lambda: F.adaptive_avg_pool2d(ones(*X4), 0),
     rill.ArgumentError, "adaptive_avg_pool2d", ["positive"]),
    ("adaptive_avg_pool2d_integer_input",
     lambda: F.adaptive_avg_pool2d(rill.tensor(np.ones(X4, np.int64)), 2), rill.DTypeError,
     "adaptive_avg_pool2d", ["int64"]),
    # ---- softmax ----
    ("softmax_axis", lambda: F.softmax(ones(2, 3), axis=2), rill.ShapeError, "softmax",
     ["axis 2"]),
    ("log_softmax_axis", lambda: F.log_softmax(ones(2, 3), axis=-3), rill.ShapeError,
     "log_softmax", ["axis -3"]),
    # ---- normalization ----
    ("batch_norm_ndim", lambda: F.batch_norm(ones(3), training=True), rill.ShapeError,
     "batch_norm", ["(3,)"]),
    ("batch_norm_one_value_per_channel", lambda: F.batch_norm(ones(1, 3), training=True),
     rill.ShapeError, "batch_norm", ["more than one value"]),
    ("batch_norm_one_value_per_channel_4d",
     lambda: F.batch_norm(ones(1, 3, 1, 1), training=True), rill.ShapeError, "batch_norm",
     ["(1, 3, 1, 1)"]),
    ("batch_norm_eval_without_stats", lambda: F.batch_norm(ones(2, 3)), rill.ArgumentError,
     "batch_norm", ["running_mean"]),
    ("batch_norm_weight_shape", lambda: F.batch_norm(ones(2, 3), weight=ones(4), training=True),
     rill.ShapeError, "batch_norm", ["weight", "(4,)"]),
    ("batch_norm_running_mean_shape", lambda: F.batch_norm(ones(2, 3), ones(2), ones(3)),
     rill.ShapeError, "batch_norm", ["running_mean"]),
    ("layer_norm_shape", lambda: F.layer_norm(ones(2, 3), (4,)), rill.ShapeError,
     "layer_norm", ["(4,)"]),
    ("layer_norm_too_many_axes", lambda: F.layer_norm(ones(3), (2, 3)), rill.ShapeError,
     "layer_norm", ["(2, 3)"]),
    ("layer_norm_weight_shape", lambda: F.layer_norm(ones(2, 3), 3, ones(2)), rill.ShapeError,
     "layer_norm", ["weight"]),
    ("group_norm_groups", lambda: F.group_norm(ones(2, 6, 2), 4), rill.ArgumentError,
     "group_norm", ["6 channels", "4 groups"]),
    ("group_norm_zero_groups", lambda: F.group_norm(ones(2, 6, 2), 0), rill.ArgumentError,
     "group_norm", ["0 groups"]),
    ("group_norm_ndim", lambda: F.group_norm(ones(6), 2), rill.ShapeError, "group_norm",
     ["(6,)"]),
    ("group_norm_weight_shape", lambda: F.group_norm(ones(2, 6, 2), 2, ones(3)),
     rill.ShapeError, "group_norm", ["weight"]),
    # ---- losses ----
    ("nll_loss_float_target", lambda: F.nll_loss(ones(2, 3), rill.tensor([0.0, 1.0])),
     rill.DTypeError, "nll_loss", ["float32"]),
    ("nll_loss_target_shape", lambda: F.nll_loss(ones(2, 3), ints(0, 1, 2)), rill.ShapeError,
     "nll_loss", ["(3,)", "(2, 3)"]),
    ("nll_loss_class_out_of_range", lambda: F.nll_loss(ones(2, 3), ints(0, 3)),
     rill.ArgumentError, "nll_loss", ["[0, 3)"]),
    ("nll_loss_negative_class", lambda: F.nll_loss(ones(2, 3), ints(0, -2)),
     rill.ArgumentError, "nll_loss", ["[0, 3)"]),
    ("nll_loss_weight_shape", lambda: F.nll_loss(ones(2, 3), ints(0, 1), ones(2)),
     rill.ShapeError, "nll_loss", ["weight"]),
    ("nll_loss_reduction", lambda: F.nll_loss(ones(2, 3), ints(0, 1), reduction="avg"),
     rill.ArgumentError, "nll_loss", ["'avg'"]),
    ("cross_entropy_class_out_of_range", lambda: F.cross_entropy(ones(2, 3), ints(0, 5)),
     rill.ArgumentError, "cross_entropy", ["[0, 3)"]),
    ("cross_entropy_class_out_of_range_nd",
     lambda: F.cross_entropy(ones(2, 3, 4), rill.tensor(np.full((2, 4), 3))),
     rill.ArgumentError, "cross_entropy", ["[0, 3)"]),
    ("cross_entropy_label_smoothing_high",
     lambda: F.cross_entropy(ones(2, 3), ints(0, 1), label_smoothing=1.5), rill.ArgumentError,
     "cross_entropy", ["1.5"]),
    ("cross_entropy_label_smoothing_negative",
     lambda: F.cross_entropy(ones(2, 3), ints(0, 1), label_smoothing=-0.1),
     rill.ArgumentError, "cross_entropy", ["-0.1"]),
    ("cross_entropy_reduction", lambda: F.cross_entropy(ones(2, 3), ints(0, 1), reduction="x"),
     rill.ArgumentError, "cross_entropy", ["'x'"]),
    ("cross_entropy_prob_target_shape", lambda: F.cross_entropy(ones(2, 3), ones(2, 4)),
     rill.ShapeError, "cross_entropy", ["(2, 4)", "(2, 3)"]),
    ("cross_entropy_target_shape", lambda: F.cross_entropy(ones(2, 3), ints(0, 1, 1)),
     rill.ShapeError, "cross_entropy", ["(3,)"]),
    ("cross_entropy_scalar_logits", lambda: F.cross_entropy(rill.tensor(1.0), ints(0)[0]),
     rill.ShapeError, "cross_entropy", ["class axis"]),
    ("cross_entropy_weight_shape", lambda: F.cross_entropy(ones(2, 3), ints(0, 1), ones(4)),
     rill.ShapeError, "cross_entropy", ["weight"]),
    ("cross_entropy_weight_shape_prob_target",
     lambda: F.cross_entropy(ones(2, 3), ones(2, 3), ones(4)), rill.ShapeError,
     "cross_entropy", ["(4,)"]),
    ("cross_entropy_bool_target",
     lambda: F.cross_entropy(ones(2, 3), rill.tensor([True, False])), rill.DTypeError,
     "cross_entropy", ["bool"]),
    ("mse_loss_shapes", lambda: F.mse_loss(ones(2, 3), ones(3, 2)), rill.ShapeError,
     "mse_loss", ["(2, 3)", "(3, 2)"]),
    ("mse_loss_no_broadcasting", lambda: F.mse_loss(ones(2, 3), ones(3)), rill.ShapeError,
     "mse_loss", ["(3,)"]),
    ("mse_loss_reduction", lambda: F.mse_loss(ones(2, 3), ones(2, 3), "avg"),
     rill.ArgumentError, "mse_loss", ["'avg'"]),
    ("l1_loss_shapes", lambda: F.l1_loss(ones(2, 3), ones(3)), rill.ShapeError, "l1_loss",
     ["(3,)"]),
    ("l1_loss_reduction", lambda: F.l1_loss(ones(2, 3), ones(2, 3), "avg"),
     rill.ArgumentError, "l1_loss", ["'avg'"]),
    ("huber_loss_delta", lambda: F.huber_loss(ones(2, 3), ones(2, 3), delta=0.0),
     rill.ArgumentError, "huber_loss", ["delta"]),
    ("huber_loss_shapes", lambda: F.huber_loss(ones(2, 3), ones(3)), rill.ShapeError,
     "huber_loss", ["(3,)"]),
    ("huber_loss_reduction", lambda: F.huber_loss(ones(2, 3), ones(2, 3), "avg"),
     rill.ArgumentError, "huber_loss", ["'avg'"]),
    ("bce_with_logits_shapes", lambda: F.binary_cross_entropy_with_logits(ones(2, 3), ones(3)),
     rill.ShapeError, "binary_cross_entropy_with_logits", ["(3,)"]),
    ("bce_with_logits_reduction",
     lambda: F.binary_cross_entropy_with_logits(ones(2, 3), ones(2, 3), reduction="x"),
     rill.ArgumentError, "binary_cross_entropy_with_logits", ["'x'"]),
    ("bce_with_logits_pos_weight",
     lambda: F.binary_cross_entropy_with_logits(ones(2, 3), ones(2, 3), pos_weight=ones(4)),
     rill.ShapeError, "binary_cross_entropy_with_logits", ["(4,)"]),
    # ---- attention, linear, embedding, dropout ----
    ("sdpa_embedding_dims",
     lambda: F.scaled_dot_product_attention(ones(2, 3, 4), ones(2, 5, 3), ones(2, 5, 3)),
     rill.ShapeError, "scaled_dot_product_attention", ["(2, 5, 3)"]),
    ("sdpa_key_value_lengths",
     lambda: F.scaled_dot_product_attention(ones(2, 3, 4), ones(2, 5, 4), ones(2, 4, 3)),
     rill.ShapeError, "scaled_dot_product_attention", ["(2, 4, 3)"]),
    ("sdpa_ndim", lambda: F.scaled_dot_product_attention(ones(4), ones(4), ones(4)),
     rill.ShapeError, "scaled_dot_product_attention", ["(4,)"]),
    ("sdpa_mask_and_causal",
     lambda: F.scaled_dot_product_attention(ones(3, 4), ones(3, 4), ones(3, 4), ones(3, 3),
                                            is_causal=True),
     rill.ArgumentError, "scaled_dot_product_attention", ["is_causal"]),
    ("sdpa_mask_shape",
     lambda: F.scaled_dot_product_attention(ones(3, 4), ones(5, 4), ones(5, 4), ones(3, 4)),
     rill.ShapeError, "scaled_dot_product_attention", ["(3, 4)"]),
    ("linear_shapes", lambda: F.linear(ones(2, 3), ones(4, 5)), rill.ShapeError, "linear",
     ["(2, 3)", "(4, 5)"]),
    ("linear_weight_ndim", lambda: F.linear(ones(2, 3), ones(3)), rill.ShapeError, "linear",
     ["(3,)"]),
    ("linear_bias_shape", lambda: F.linear(ones(2, 3), ones(4, 3), ones(5)), rill.ShapeError,
     "linear", ["(5,)"]),
    ("embedding_float_indices", lambda: F.embedding(rill.tensor([0.0]), ones(3, 2)),
     rill.DTypeError, "embedding", ["float32"]),
    ("embedding_weight_ndim", lambda: F.embedding(ints(0), ones(3)), rill.ShapeError,
     "embedding", ["(3,)"]),
    ("embedding_index_out_of_range", lambda: F.embedding(ints(3), ones(3, 2)),
     rill.IndexingError, "embedding", ["3"]),
    # PyTorch: "Padding_idx must be within num_embeddings" (not taken modulo the rows).
    ("embedding_padding_idx_out_of_range",
     lambda: F.embedding(ints(0), ones(3, 2), padding_idx=5), rill.ArgumentError,
     "embedding", ["padding_idx", "5"]),
    ("embedding_padding_idx_too_negative",
     lambda: F.embedding(ints(0), ones(3, 2), padding_idx=-4), rill.ArgumentError,
     "embedding", ["-4"]),
    ("dropout_p_high", lambda: F.dropout(ones(3), 1.5), rill.ArgumentError, "dropout",
     ["1.5"]),
    ("dropout_p_negative", lambda: F.dropout(ones(3), -0.1), rill.ArgumentError, "dropout",
     ["-0.1"]),
]


def _params(cases):
    out = []
    for case in cases:
        if type(case) is tuple:
            out.append(pytest.param(*case[1:], id=case[0]))
        else:  # already a pytest.param carrying marks
            out.append(pytest.param(*case.values[1:], id=case.values[0], marks=case.marks))
    return out


@pytest.mark.parametrize("call,cls,op,mentions", _params(BAD_INPUTS))
def test_bad_input_raises_a_clear_error(call, cls, op, mentions):
    with pytest.raises(rill.Error) as info:
        call()
    e = info.value
    text = str(e)
    assert type(e) is cls, f"expected {cls.__name__}, got {type(e).__name__}: {text}"
    # The function the user called comes first; an inner op may follow in parentheses.
    assert e.op == op or e.op.startswith(f"{op} ("), text
    assert text.startswith(f"{e.op}: "), text
    assert e.location is not None and e.location.startswith(f"{THIS_FILE}:"), text
    for m in mentions:
        assert m in text, f"{m!r} not in {text!r}"


def test_bad_input_cases_cover_every_function():
    named = {(c[3] if type(c) is tuple else c.values[3]) for c in BAD_INPUTS}
    functions = {"conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
                 "adaptive_avg_pool2d", "softmax", "log_softmax", "linear", "embedding",
                 "dropout", "batch_norm", "layer_norm", "group_norm", "nll_loss",
                 "cross_entropy", "mse_loss", "l1_loss", "huber_loss",
                 "binary_cross_entropy_with_logits", "scaled_dot_product_attention"}
    assert functions <= named, sorted(functions - named)


# ---- higher-order derivatives against PyTorch ----------------------------------------------

def _nested_rill(fn, arrays, directions, cot):
    """Derivatives of order 1..len(directions): f_0 = sum(cot * fn(x)^2);
    f_{k+1}(x) = sum_i <grad_i f_k(x), directions[k][i]>. Returns each order's gradients."""
    argnums = tuple(range(len(arrays)))

    def base(*xs):
        return (fn(*xs) ** 2 * rill.tensor(cot)).sum()

    results, f = [], base
    for dirs in directions:
        g = rill.grad(f, argnums=argnums)
        results.append(g)

        def f(*xs, g=g, dirs=dirs):
            return sum((gi * rill.tensor(d)).sum() for gi, d in zip(g(*xs), dirs))
    xs = [rill.tensor(a) for a in arrays]
    return [[np.asarray(v) for v in g(*xs)] for g in results]


def _nested_torch(fn, arrays, directions, cot):
    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    f = (fn(*xs) ** 2 * torch.tensor(cot)).sum()
    results = []
    for dirs in directions:
        gs = torch.autograd.grad(f, xs, create_graph=True, allow_unused=True)
        gs = [torch.zeros_like(x) if g is None else g for x, g in zip(xs, gs)]
        results.append([g.detach().numpy() for g in gs])
        f = sum((g * torch.tensor(d)).sum() for g, d in zip(gs, dirs))
        if not f.requires_grad:  # every higher derivative is zero
            f = f + 0 * sum(x.sum() for x in xs)
    return results


def _distinct(rng, shape):
    return rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 1.0


LABELS = np.array([0, -1, 3, 2, -1, 4])
LABELS_ND = np.array([[0, 2, 1, 2], [1, 1, 0, 2]])
CLASS_WEIGHT = np.array([1.0, 2.0, 0.5])

HIGHER_ORDER = [
    # (id, rill fn, torch fn, input makers, order)
    ("conv2d_strided_grouped",
     lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2),
     lambda x, w: TF.conv2d(x, w, stride=2, padding=1, groups=2),
     [(1, 4, 5, 5), (4, 2, 3, 3)], 3),
    ("conv2d_same_dilated_bias",
     lambda x, w, b: F.conv2d(x, w, b, padding="same", dilation=2),
     lambda x, w, b: TF.conv2d(x, w, b, padding="same", dilation=2),
     [(2, 2, 4, 4), (3, 2, 2, 3), (3,)], 2),
    ("conv1d",
     lambda x, w: F.conv1d(x, w, stride=2, padding=1),
     lambda x, w: TF.conv1d(x, w, stride=2, padding=1), [(2, 2, 7), (3, 2, 3)], 2),
    # PyTorch's own third derivative fails with output_padding ("output_padding is not
    # supported for non-transposed convolutions"), so that case stops at order 2.
    ("conv_transpose2d_output_padding",
     lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
     lambda x, w: TF.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
     [(1, 2, 3, 3), (2, 3, 3, 3)], 2),
    ("conv_transpose2d_grouped_dilated",
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(1, 2), padding=1, groups=2,
                                        dilation=2),
     lambda x, w, b: TF.conv_transpose2d(x, w, b, stride=(1, 2), padding=1, groups=2,
                                         dilation=2),
     [(1, 4, 3, 3), (4, 1, 2, 3), (2,)], 3),
    ("max_pool2d",
     lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
     lambda x: TF.max_pool2d(x, 3, stride=2, padding=1), [("distinct", (2, 2, 5, 5))],
     3),  # order 3 is exactly 0 (y^2 is piecewise quadratic): both must say so
    ("max_pool2d_dilated",
     lambda x: F.max_pool2d(x, (2, 3), stride=1, padding=1, dilation=(1, 2)),
     lambda x: TF.max_pool2d(x, (2, 3), stride=1, padding=1, dilation=(1, 2)),
     [("distinct", (1, 2, 4, 4))], 2),
    ("softmax_last", lambda x: F.softmax(x, axis=-1), lambda x: torch.softmax(x, -1),
     [(3, 4)], 3),
    ("softmax_axis0", lambda x: F.softmax(x, axis=0), lambda x: torch.softmax(x, 0),
     [(3, 2, 2)], 2),
    ("log_softmax_last", lambda x: F.log_softmax(x, axis=-1),
     lambda x: torch.log_softmax(x, -1), [(3, 4)], 3),
    ("log_softmax_axis1", lambda x: F.log_softmax(x, axis=1),
     lambda x: torch.log_softmax(x, 1), [(2, 3, 2)], 2),
    ("avg_pool2d_excl_pad",
     lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
     lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(1, 2, 5, 5)], 2),
    ("layer_norm", lambda x, w: F.layer_norm(x, 4, w), lambda x, w: TF.layer_norm(x, (4,), w),
     [(3, 4), (4,)], 2),
    ("batch_norm_train", lambda x: F.batch_norm(x, training=True),
     lambda x: TF.batch_norm(x, None, None, training=True), [(4, 3)], 2),
    ("linear", F.linear, TF.linear, [(2, 3, 4), (5, 4), (5,)], 3),
    ("cross_entropy_smoothing_ignore",
     lambda x: F.cross_entropy(x, rill.tensor(LABELS), ignore_index=-1, label_smoothing=0.2),
     lambda x: TF.cross_entropy(x, torch.tensor(LABELS), ignore_index=-1,
                                label_smoothing=0.2), [(6, 5)], 3),
    ("cross_entropy_weighted_nd",
     lambda x: F.cross_entropy(x, rill.tensor(LABELS_ND), rill.tensor(CLASS_WEIGHT),
                               reduction="sum"),
     lambda x: TF.cross_entropy(x, torch.tensor(LABELS_ND), torch.tensor(CLASS_WEIGHT),
                                reduction="sum"), [(2, 3, 4)], 2),
    ("cross_entropy_probabilities",
     lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1),
     lambda x, p: TF.cross_entropy(x, p, label_smoothing=0.1), [(3, 4), (3, 4)], 2),
    ("sdpa", F.scaled_dot_product_attention, TF.scaled_dot_product_attention,
     [(2, 3, 4), (2, 4, 4), (2, 4, 2)], 2),
]


@pytest.mark.parametrize("fn,tfn,specs,order",
                         [pytest.param(*c[1:], id=c[0]) for c in HIGHER_ORDER])
def test_higher_order_gradients_match_pytorch(fn, tfn, specs, order):
    rng = np.random.default_rng(0)
    arrays = [_distinct(rng, s[1]) if s[0] == "distinct" else rng.uniform(-1, 1, size=s)
              for s in specs]
    out_shape = tfn(*[torch.tensor(a) for a in arrays]).shape
    cot = rng.uniform(-1, 1, size=tuple(out_shape))
    directions = [[rng.uniform(-1, 1, size=a.shape) for a in arrays] for _ in range(order)]
    got = _nested_rill(fn, arrays, directions, cot)
    expected = _nested_torch(tfn, arrays, directions, cot)
    for k, (g_order, e_order) in enumerate(zip(got, expected), start=1):
        for i, (g, e) in enumerate(zip(g_order, e_order)):
            np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-10,
                                       err_msg=f"order {k}, input {i}")


def test_second_derivative_of_max_pool_is_routed_to_the_winners():
    # d/dx of the gradient of sum(c * maxpool(x)^2) is 2 c at each window's winner: a
    # directional second derivative gathers the direction at the winners.
    rng = np.random.default_rng(1)
    x = _distinct(rng, (1, 1, 4, 4))
    c = rng.uniform(-1, 1, size=(1, 1, 2, 2))
    d = rng.uniform(-1, 1, size=x.shape)

    def first(t):
        return rill.grad(lambda u: (F.max_pool2d(u, 2) ** 2 * rill.tensor(c)).sum())(t)

    hess_d = rill.grad(lambda t: (first(t) * rill.tensor(d)).sum())(rill.tensor(x))
    _, idx = F.max_pool2d(rill.tensor(x), 2, return_indices=True)
    expected = np.zeros(16)
    for flat, cc in zip(idx.numpy().reshape(-1), c.reshape(-1)):
        expected[flat] = 2 * cc * d.reshape(-1)[flat]
    np.testing.assert_allclose(np.asarray(hess_d).reshape(-1), expected, rtol=1e-12)


# ---- dropout -------------------------------------------------------------------------------

def _uniform(shape, seed=0):
    return rill.tensor(np.random.default_rng(seed).uniform(0.5, 1.5, size=shape))


def test_dropout_same_seed_same_mask():
    x = _uniform((50, 40))
    a = F.dropout(x, 0.3, generator=rill.Generator(7)).numpy()
    b = F.dropout(x, 0.3, generator=rill.Generator(7)).numpy()
    c = F.dropout(x, 0.3, generator=rill.Generator(8)).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a != 0, c != 0)


def test_dropout_default_generator_follows_manual_seed():
    x = _uniform((30, 30))
    rill.manual_seed(11)
    a = F.dropout(x, 0.5).numpy()
    rill.manual_seed(11)
    b = F.dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keep_rate_and_scaling(p):
    n = 40000
    x = _uniform((n,))
    y = F.dropout(x, p, generator=rill.Generator(3)).numpy()
    kept = y != 0
    # The kept fraction is Binomial(n, 1-p)/n: within 5 standard deviations of 1-p.
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(y[kept], x.numpy()[kept] / (1 - p), rtol=1e-12)
    # Scaling keeps the expectation: E[y] = x.
    assert abs(y.mean() / x.numpy().mean() - 1) < 0.05


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_dropout_keeps_dtype(dtype):
    x = rill.ones(64, dtype=getattr(rill, dtype))
    y = F.dropout(x, 0.5, generator=rill.Generator(0))
    assert y.dtype is x.dtype
    assert set(np.unique(y.numpy().astype(np.float64))) <= {0.0, 2.0}


def test_dropout_eval_and_p0_are_identity():
    x = _uniform((5, 6))
    np.testing.assert_array_equal(F.dropout(x, 0.7, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(F.dropout(x, 0.0).numpy(), x.numpy())
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((5, 6)))


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_dropout_gradient_is_the_scaled_mask(p):
    x = _uniform((8, 9))
    c = np.random.default_rng(1).uniform(-1, 1, size=(8, 9))
    mask = F.dropout(x, p, generator=rill.Generator(5)).numpy() != 0
    g = rill.grad(lambda t: (F.dropout(t, p, generator=rill.Generator(5))
                             * rill.tensor(c)).sum())(x)
    np.testing.assert_allclose(np.asarray(g), c * mask / (1 - p), rtol=1e-12)
    # Outside training the gradient is the identity's.
    g_eval = rill.grad(lambda t: (F.dropout(t, p, training=False) * rill.tensor(c)).sum())(x)
    np.testing.assert_allclose(np.asarray(g_eval), c, rtol=0)


# ---- embedding padding_idx gradient --------------------------------------------------------

@pytest.mark.parametrize("padding_idx", [1, -1, None])
def test_embedding_padding_idx_gradient_matches_pytorch(padding_idx):
    idx = np.array([[1, 0, 4], [1, 4, 1]])
    w = np.random.default_rng(0).uniform(-1, 1, size=(5, 3))
    c = np.random.default_rng(1).uniform(-1, 1, size=(2, 3, 3))
    g = rill.grad(lambda t: (F.embedding(rill.tensor(idx), t, padding_idx=padding_idx)
                             * rill.tensor(c)).sum())(rill.tensor(w))
    assert isinstance(g, rill.SparseRows)
    tw = torch.tensor(w, requires_grad=True)
    (TF.embedding(torch.tensor(idx), tw, padding_idx=padding_idx) * torch.tensor(c)).sum(
    ).backward()
    np.testing.assert_allclose(np.asarray(g), tw.grad.numpy(), rtol=1e-12, atol=1e-15)
    if padding_idx is not None:
        assert not np.asarray(g)[padding_idx].any()


# ---- batch_norm statistics -----------------------------------------------------------------

def test_batch_norm_eval_leaves_running_stats_alone_and_training_updates_them():
    x = _uniform((6, 3, 2))
    rm, rv = rill.zeros(3, dtype=rill.float64), rill.ones(3, dtype=rill.float64)
    F.batch_norm(x, rm, rv)
    np.testing.assert_array_equal(rm.numpy(), np.zeros(3))
    np.testing.assert_array_equal(rv.numpy(), np.ones(3))
    # Two training steps follow PyTorch's running averages.
    trm, trv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    for step in range(2):
        xs = _uniform((6, 3, 2), seed=step)
        F.batch_norm(xs, rm, rv, training=True, momentum=0.2)
        TF.batch_norm(torch.tensor(xs.numpy()), trm, trv, training=True, momentum=0.2)
    np.testing.assert_allclose(rm.numpy(), trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv.numpy(), trv.numpy(), rtol=1e-12)


def test_batch_norm_training_gradient_does_not_flow_into_running_stats():
    x = _uniform((4, 3))
    rm, rv = rill.zeros(3, dtype=rill.float64), rill.ones(3, dtype=rill.float64)
    g = rill.grad(lambda t: F.batch_norm(t, rm, rv, training=True).sum())(x)
    # sum over a normalized channel is constant: its gradient vanishes.
    np.testing.assert_allclose(np.asarray(g), np.zeros((4, 3)), atol=1e-12)
    assert not rm.requires_grad and not rv.requires_grad
