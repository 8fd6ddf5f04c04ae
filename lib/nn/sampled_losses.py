"""Sampled softmax and NCE: losses over a few sampled classes instead of all of them, with
TensorFlow's arguments and meaning (tf.nn.sampled_softmax_loss, tf.nn.nce_loss; PyTorch has
neither).

Both score each example against its true classes and num_sampled classes drawn for the whole
batch (by `rill.random.log_uniform_candidate_sampler` unless `sampled_values` is given):
logit = inputs . w[class] + b[class] - log(expected count of class), the "logQ correction";
a sampled class that is one of the example's true classes (an accidental hit) gets the
dtype's most negative finite number added to its logit when remove_accidental_hits.

Only the rows of `weights` and `biases` at the true and sampled classes are read (a gather),
so their gradients are rill.SparseRows of those rows: a large `rill.nn.Embedding` table
updates sparsely.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import ArgumentError, DTypeError, ShapeError, reports_as
from ..ops import elementwise as E
from ..ops.activation import log_softmax
from ..ops.arguments import as_bool, as_int, as_tensor, describe
from ..ops.creation import arange, ones
from ..ops.indexing import take
from ..ops.linalg import matmul
from ..ops.reduce import any as _any, mean, sum as _sum
from ..ops.shape import concat, expand_dims, reshape, swapaxes
from ..ops.sorting import argsort
from ..random_candidates import check_classes, log_uniform_candidate_sampler
from ..eager.context import detached_value


@reports_as("sampled_softmax_loss")
def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled: int, num_classes: int,
                         num_true: int = 1, sampled_values=None,
                         remove_accidental_hits: bool = True, seed=None):
    """Per-example softmax cross-entropy over each example's true classes and num_sampled
    sampled ones, as tf.nn.sampled_softmax_loss: shape (batch,).

    weights: (num_classes, dim), or a list of tensors whose concatenation along rows is that
    table (TensorFlow 2's "div" partitioning); biases: (num_classes,); labels: integer
    (batch, num_true), each true class weighing 1/num_true; inputs: (batch, dim).
    sampled_values: a candidate sampler's triple, or None to draw with
    log_uniform_candidate_sampler(labels, num_true, num_sampled, unique=True, num_classes,
    seed). A training-time loss: evaluate with the full softmax.

    >>> import rill
    >>> w, b = rill.ones(5, 2), rill.zeros(5)
    >>> drawn = (rill.tensor([3, 4]), rill.full((1, 1), 0.5), rill.full((2,), 0.5))
    >>> loss = rill.nn.functional.sampled_softmax_loss(
    ...     w, b, rill.tensor([[0]]), rill.ones(1, 2), 2, 5, sampled_values=drawn)
    >>> round(float(loss[0]), 4)  # three equal logits: log 3
    1.0986
    """
    logits, num_true = _sampled_logits("sampled_softmax_loss", weights, biases, labels,
                                       inputs, num_sampled, num_classes, num_true,
                                       sampled_values, remove_accidental_hits, seed)
    # -sum(target * log_softmax) with target 1/num_true on each true column, 0 elsewhere
    return -mean(log_softmax(logits, axis=-1)[:, :num_true], axis=-1)


@reports_as("nce_loss")
def nce_loss(weights, biases, labels, inputs, num_sampled: int, num_classes: int,
             num_true: int = 1, sampled_values=None, remove_accidental_hits: bool = False):
    """Per-example noise-contrastive estimation loss, as tf.nn.nce_loss: the sigmoid
    cross-entropy of each true class (target 1/num_true) and each sampled class (target 0),
    summed per example; shape (batch,). Arguments as `sampled_softmax_loss`'s (note the
    default remove_accidental_hits=False, TensorFlow's).

    >>> import rill
    >>> w, b = rill.zeros(5, 2), rill.zeros(5)
    >>> drawn = (rill.tensor([3, 4]), rill.ones(1, 1), rill.ones(2))
    >>> loss = rill.nn.functional.nce_loss(w, b, rill.tensor([[0]]), rill.ones(1, 2), 2, 5,
    ...                                    sampled_values=drawn)
    >>> round(float(loss[0]), 4)  # three logits of 0: 3 log 2
    2.0794
    """
    logits, num_true = _sampled_logits("nce_loss", weights, biases, labels, inputs,
                                       num_sampled, num_classes, num_true, sampled_values,
                                       remove_accidental_hits, None)
    column = arange(logits.shape[1], device=logits.device)
    target = E.cast(E.where(column < num_true, 1.0 / num_true, 0.0), logits.dtype)
    # max(x, 0) - x t + log(1 + e^-|x|), spelled with softplus: t sp(-x) + (1 - t) sp(x)
    per_class = target * E.softplus(-logits) + (1.0 - target) * E.softplus(logits)
    return _sum(per_class, axis=-1)


# ---- the logits both losses share ----------------------------------------------------------

def _sampled_logits(op, weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                    sampled_values, remove_accidental_hits, seed):
    """((batch, num_true + num_sampled) logits, true classes first, then the sampled ones;
    num_true)."""
    num_classes = as_int(num_classes, "num_classes", op, low=1)
    num_true = as_int(num_true, "num_true", op, low=1)
    num_sampled = as_int(num_sampled, "num_sampled", op, low=1)
    remove_accidental_hits = as_bool(remove_accidental_hits, "remove_accidental_hits", op)
    weights = _table(weights, "weights", 2, num_classes, op)
    biases = _table(biases, "biases", 1, num_classes, op)
    inputs, labels = _inputs_and_labels(inputs, labels, weights[0].shape[1], num_true,
                                        num_classes, op)
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True,
                                                       num_classes, seed)
    sampled, true_count, sampled_count = _sampled_values(sampled_values, labels.shape[0],
                                                         num_true, num_sampled, num_classes,
                                                         op)
    batch, dim = inputs.shape
    true_w = reshape(_rows(weights, reshape(labels, (-1,))), (batch, num_true, dim))
    true_b = reshape(_rows(biases, reshape(labels, (-1,))), (batch, num_true))
    true_logits = _sum(expand_dims(inputs, 1) * true_w, axis=-1) + true_b
    sampled_logits = matmul(inputs, swapaxes(_rows(weights, sampled), 0, 1)) \
        + _rows(biases, sampled)
    if remove_accidental_hits:
        hits = _accidental_hits(labels, sampled)
        lowest = dt.finfo(sampled_logits.dtype).min
        sampled_logits = sampled_logits + E.cast(E.where(hits, lowest, 0.0),
                                                 sampled_logits.dtype)
    true_logits = true_logits - E.cast(E.log(true_count), true_logits.dtype)
    sampled_logits = sampled_logits - E.cast(E.log(sampled_count), sampled_logits.dtype)
    return concat([true_logits, sampled_logits], axis=1), num_true


def _rows(table, ids):
    """table[ids] for a table given as row partitions (their concatenation), one gather per
    partition so that each partition's gradient stays sparse rows."""
    if len(table) == 1:
        return take(table[0], ids, axis=0)
    out, start = None, 0
    for part in table:
        rows = part.shape[0]
        if rows:
            inside = (ids >= start) & (ids < start + rows)
            got = take(part, E.where(inside, ids - start, 0), axis=0)
            got = E.where(reshape(inside, inside.shape + (1,) * (part.ndim - 1)), got, 0.0)
            out = got if out is None else out + got
        start += rows
    return out


def _accidental_hits(labels, sampled):
    """(batch, num_sampled) bool: sampled[k] is one of the example's true classes. As
    TensorFlow's compute_accidental_hits, a class sampled more than once is marked at its
    last position only."""
    order = argsort(sampled, stable=True)
    in_order = take(sampled, order)
    last_in_order = concat([in_order[1:] != in_order[:-1],
                            ones(1, dtype=dt.bool_, device=sampled.device)])
    last = take(last_in_order, argsort(order, stable=True))
    hits = _any(expand_dims(labels, -1) == reshape(sampled, (1, 1, -1)), axis=1)
    return hits & reshape(last, (1, -1))


# ---- arguments -----------------------------------------------------------------------------

def _table(value, what, ndim, num_classes, op) -> list:
    """weights or biases as a list of row partitions, checked against num_classes."""
    parts = list(value) if isinstance(value, (list, tuple)) else [value]
    if not parts:
        raise ArgumentError(f"{what} is an empty list; pass a tensor or its row partitions",
                            op=op)
    parts = [as_tensor(p, what, op) for p in parts]
    shape = "(num_classes, dim)" if ndim == 2 else "(num_classes,)"
    for p in parts:
        if p.ndim != ndim or p.shape[1:] != parts[0].shape[1:]:
            raise ShapeError(f"{what} must be {shape} or row partitions of it, got "
                             f"{[q.shape for q in parts]}", op=op)
        if not p.dtype.is_floating:
            raise DTypeError(f"{what} must be floating, got {p.dtype}", op=op)
    rows = sum(p.shape[0] for p in parts)
    if rows != num_classes:
        raise ShapeError(f"{what} has {rows} rows for num_classes={num_classes}", op=op)
    return parts


def _inputs_and_labels(inputs, labels, dim, num_true, num_classes, op):
    inputs = as_tensor(inputs, "inputs", op)
    labels = detached_value(as_tensor(labels, "labels", op))
    if inputs.ndim != 2 or inputs.shape[1] != dim:
        raise ShapeError(f"inputs must be (batch, dim={dim}) for weights of {dim} columns, "
                         f"got shape {inputs.shape}", op=op)
    if not inputs.dtype.is_floating:
        raise DTypeError(f"inputs must be floating, got {inputs.dtype}", op=op)
    if labels.dtype.kind not in "iu":
        raise DTypeError(f"labels must be integer class ids, got {labels.dtype}", op=op)
    if labels.ndim != 2 or labels.shape != (inputs.shape[0], num_true):
        raise ShapeError(f"labels must be (batch={inputs.shape[0]}, num_true={num_true}), got "
                         f"shape {labels.shape}; a (batch,) tensor of labels reshapes with "
                         ".reshape(-1, 1)", op=op)
    check_classes(labels, num_classes, "labels", op)
    return inputs, E.cast(labels, dt.int64)


def _sampled_values(values, batch, num_true, num_sampled, num_classes, op):
    if not isinstance(values, (tuple, list)) or len(values) != 3:
        raise ArgumentError("sampled_values must be a candidate sampler's triple "
                            "(sampled_candidates, true_expected_count, "
                            f"sampled_expected_count), got {describe(values)}", op=op)
    names = ("sampled_candidates", "true_expected_count", "sampled_expected_count")
    sampled, true_count, sampled_count = (detached_value(as_tensor(v, f"sampled_values[{i}]",
                                                                   op))
                                          for i, v in enumerate(values))
    expected = ((num_sampled,), (batch, num_true), (num_sampled,))
    for name, value, shape in zip(names, (sampled, true_count, sampled_count), expected):
        if value.shape != shape:
            raise ShapeError(f"sampled_values' {name} must have shape {shape}, got "
                             f"{value.shape}", op=op)
    if sampled.dtype.kind not in "iu":
        raise DTypeError(f"sampled_candidates must be integer class ids, got {sampled.dtype}",
                         op=op)
    check_classes(sampled, num_classes, "sampled_candidates", op)
    return E.cast(sampled, dt.int64), true_count, sampled_count
