"""TensorFlow's candidate samplers: draw a few classes out of [0, range_max) and say how
often each class was expected to be drawn, the `sampled_values` triple that
`rill.nn.functional.sampled_softmax_loss` and `nce_loss` take.

PyTorch has no candidate samplers; these follow tf.random's (names, arguments, the returned
triple, the expected-count formulas). Reached as `rill.random.log_uniform_candidate_sampler`
and `rill.random.uniform_candidate_sampler`.

Expected counts, as TensorFlow computes them, with p the probability of one draw and
num_tries the number of draws made: p * num_sampled when num_tries == num_sampled (always
so with unique=False), else 1 - (1 - p)^num_tries.

unique=True: TensorFlow draws with replacement until it has num_sampled distinct classes and
counts the draws. rill makes the same random outcome with a fixed amount of work, so that it
captures into a graph: the distinct classes in the order first drawn are an exponential race
(class c finishes at E_c / p_c, E_c ~ Exp(1); the first num_sampled to finish, in order),
and the repeated draws between the j-th new class and the next are geometric with the mass
already drawn as their probability. That costs one uniform draw per class of the range
(O(range_max) per call, where TensorFlow's loop costs O(num_tries)).
"""
from __future__ import annotations

import math
import threading

import numpy as np

from . import dtypes as dt
from .eager.context import current
from .errors import ArgumentError, DTypeError, ShapeError, reports_as
from .ops import elementwise as E
from .ops.arguments import as_bool, as_int, as_tensor, describe
from .ops.creation import arange
from .ops.random import _concrete, randint, uniform
from .ops.reduce import cumsum, sum as _sum
from .ops.sorting import topk
from . import random as _random_module
from .random import Generator, default_generator
from .eager.context import detached_value

_streams: dict[int, Generator] = {}
_streams_lock = threading.Lock()


@reports_as("log_uniform_candidate_sampler")
def log_uniform_candidate_sampler(true_classes, num_true: int, num_sampled: int, unique: bool,
                                  range_max: int, seed=None):
    """num_sampled classes from the log-uniform (Zipfian) distribution over [0, range_max):
    P(c) = log((c + 2) / (c + 1)) / log(range_max + 1), for classes sorted by decreasing
    frequency. Returns TensorFlow's triple (sampled_candidates int64 [num_sampled],
    true_expected_count float32 [batch, num_true], sampled_expected_count float32
    [num_sampled]); unique=True draws distinct classes.

    `seed`: None draws from rill's default generator (`rill.manual_seed` repeats it); a
    `rill.Generator` draws from it; an int draws from a stream kept for that seed, so that,
    as TensorFlow's op seed, repeated calls differ and a program's run repeats (inside a
    captured function too, which keeps drawing from the same stream).

    >>> import rill
    >>> labels = rill.tensor([[0], [7]])
    >>> s, t, e = rill.random.log_uniform_candidate_sampler(labels, 1, 4, True, 10,
    ...                                                      seed=rill.Generator(0))
    >>> s.shape, s.dtype, len(set(s.tolist())), t.shape
    ((4,), rill.int64, 4, (2, 1))
    """
    return _sample("log_uniform_candidate_sampler", _log_uniform, true_classes, num_true,
                   num_sampled, unique, range_max, seed)


@reports_as("uniform_candidate_sampler")
def uniform_candidate_sampler(true_classes, num_true: int, num_sampled: int, unique: bool,
                              range_max: int, seed=None):
    """num_sampled classes drawn uniformly from [0, range_max), as
    `log_uniform_candidate_sampler` (same arguments, same triple, same `seed`).

    >>> import rill
    >>> s, t, e = rill.random.uniform_candidate_sampler(rill.tensor([[1, 2]]), 2, 3, False,
    ...                                                  4, seed=rill.Generator(0))
    >>> t.tolist(), e.tolist()
    ([[0.75, 0.75]], [0.75, 0.75, 0.75])
    """
    return _sample("uniform_candidate_sampler", _uniform, true_classes, num_true,
                   num_sampled, unique, range_max, seed)


# ---- the two distributions: one draw with replacement, and P(one draw gives c) ------------

class _log_uniform:
    @staticmethod
    def draw(n, range_max, device, generator):
        # floor(exp(u log(range_max + 1))) - 1 has the log-uniform law; the remainder keeps a
        # value that rounding put on range_max inside the range, as TensorFlow's does.
        u = uniform(0.0, 1.0, (n,), dt.float64, device, generator)
        value = E.cast(E.floor(E.exp(u * math.log(range_max + 1))), dt.int64) - 1
        return E.remainder(value, range_max)

    @staticmethod
    def probability(classes, range_max):
        c = E.cast(classes, dt.float64)
        return E.log1p(1.0 / (c + 1.0)) / math.log(range_max + 1)


class _uniform:
    @staticmethod
    def draw(n, range_max, device, generator):
        return randint(0, range_max, (n,), dt.int64, device, generator)

    @staticmethod
    def probability(classes, range_max):
        return E.cast(classes, dt.float64) * 0.0 + 1.0 / range_max


# ---- the sampler ---------------------------------------------------------------------------

def _sample(op, law, true_classes, num_true, num_sampled, unique, range_max, seed):
    range_max = as_int(range_max, "range_max", op, low=1)
    true_classes = _true_classes(true_classes, num_true, range_max, op)
    num_sampled = as_int(num_sampled, "num_sampled", op, low=1)
    unique = as_bool(unique, "unique", op)
    if unique and num_sampled > range_max:
        raise ArgumentError(f"unique=True cannot draw num_sampled={num_sampled} distinct "
                            f"classes out of range_max={range_max}; lower num_sampled or "
                            "pass unique=False", op=op)
    generator = _generator(seed, op)
    device = true_classes.device
    if unique:
        sampled, num_tries = _distinct(law, num_sampled, range_max, device, generator)
    else:
        sampled, num_tries = law.draw(num_sampled, range_max, device, generator), None
    true_count = _expected_count(law.probability(true_classes, range_max), num_tries,
                                 num_sampled)
    sampled_count = _expected_count(law.probability(sampled, range_max), num_tries,
                                    num_sampled)
    return detached_value(sampled), true_count, sampled_count


def _distinct(law, num_sampled, range_max, device, generator):
    """(num_sampled distinct classes in the order draws with replacement would first give
    them, the number of draws that took as a float64 0-d tensor)."""
    p = law.probability(arange(range_max, dtype=dt.int64, device=device), range_max)
    u = uniform(0.0, 1.0, (range_max,), dt.float64, device, generator)
    finish = E.log(-E.log1p(-u)) - E.log(p)           # log(E_c / p_c), E_c ~ Exp(1)
    sampled = E.cast(topk(finish, num_sampled, largest=False)[1], dt.int64)
    drawn = cumsum(law.probability(sampled, range_max), exclusive=True)
    # Draws between finding the j-th class and the (j+1)-th repeat one of the j found, each
    # with probability drawn[j]: a geometric count, P(count >= m) = drawn[j]^m.
    v = uniform(0.0, 1.0, (num_sampled,), dt.float64, device, generator)
    found = drawn > 0.0
    repeats = E.floor(E.log1p(-v) / E.log(E.where(found, drawn, 0.5)))
    num_tries = _sum(E.where(found, repeats, 0.0)) + float(num_sampled)
    return sampled, num_tries


def _expected_count(p, num_tries, num_sampled):
    """TensorFlow's: p * num_sampled when every draw was kept, 1 - (1 - p)^num_tries else."""
    every_draw = p * float(num_sampled)
    if num_tries is None:
        return E.cast(every_draw, dt.float32)
    some_repeated = -E.expm1(num_tries * E.log1p(-p))
    return E.cast(E.where(num_tries == float(num_sampled), every_draw, some_repeated),
                  dt.float32)


# ---- arguments -----------------------------------------------------------------------------

def _true_classes(true_classes, num_true, range_max, op):
    true_classes = detached_value(as_tensor(true_classes, "true_classes", op))
    num_true = as_int(num_true, "num_true", op, low=1)
    if true_classes.dtype.kind not in "iu":
        raise DTypeError(f"true_classes must be integer class ids, got {true_classes.dtype}",
                         op=op)
    if true_classes.ndim != 2 or true_classes.shape[1] != num_true:
        raise ShapeError(f"true_classes must be (batch, num_true={num_true}), got shape "
                         f"{true_classes.shape}; a (batch,) tensor of labels reshapes with "
                         ".reshape(-1, 1)", op=op)
    check_classes(true_classes, range_max, "true_classes", op)
    return true_classes


def check_classes(classes, num_classes: int, what: str, op: str) -> None:
    """ArgumentError when a class id lies outside [0, num_classes): at once eagerly; in a
    captured graph, a check node that raises when the graph runs on such data."""
    if not classes.size:
        return
    if current().interpreter.capturing or not _concrete(classes):
        from .ops.checks import check
        ok = (classes >= 0) & (classes < num_classes)
        check(ok, classes, f"{what} holds a class outside [0, {num_classes})", op=op)
        return
    host = np.asarray(classes.numpy())
    low, high = int(host.min()), int(host.max())
    if low < 0 or high >= num_classes:
        bad = low if low < 0 else high
        raise ArgumentError(f"{what} holds class {bad}, outside [0, {num_classes})", op=op)


def _generator(seed, op) -> Generator:
    if seed is None:
        return default_generator
    if isinstance(seed, Generator):
        return seed
    if isinstance(seed, bool) or not hasattr(type(seed), "__index__"):
        raise ArgumentError(f"seed must be None, an int >= 0 or a rill.Generator, got "
                            f"{describe(seed)}", op=op)
    seed = as_int(seed, "seed", op, low=0)
    with _streams_lock:
        stream = _streams.get(seed)
        if stream is None:
            stream = _streams[seed] = Generator(seed)
        return stream


# rill.random.<name>, as tf.random spells them: this module imports rill.random (below it),
# never the other way round.
_random_module.log_uniform_candidate_sampler = log_uniform_candidate_sampler
_random_module.uniform_candidate_sampler = uniform_candidate_sampler
