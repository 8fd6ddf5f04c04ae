"""multinomial and bernoulli (torch.multinomial / torch.bernoulli): frequencies against the
probabilities, distinct draws without replacement, seeds, capture, and refused input."""
import numpy as np
import pytest
import torch

import rill
from rill.ops.random import bernoulli, multinomial

N = 20000


def _within(freq, probs, n):
    """Each frequency within 5 standard errors of its probability."""
    probs = np.asarray(probs)
    np.testing.assert_array_less(np.abs(freq - probs), 5 * np.sqrt(probs * (1 - probs) / n)
                                 + 1e-12)


@pytest.mark.parametrize("dtype", [rill.float64, rill.float32])
def test_with_replacement_frequencies(dtype):
    weights = np.array([[1.0, 2.0, 0.0, 7.0], [5.0, 0.0, 5.0, 0.0]])  # unnormalized
    rill.manual_seed(0)
    draws = multinomial(rill.tensor(weights, dtype=dtype), N, replacement=True).numpy()
    assert draws.shape == (2, N) and draws.dtype == np.int64
    for row, w in zip(draws, weights):
        _within(np.bincount(row, minlength=4) / N, w / w.sum(), N)
    one_d = multinomial(rill.tensor(weights[0], dtype=dtype), 7, replacement=True)
    assert one_d.shape == (7,)
    assert torch.multinomial(torch.tensor(weights[0]), 7, True).shape == one_d.shape


def test_without_replacement_gives_distinct_indices_and_the_right_first_draw():
    weights = np.array([[0.1, 0.2, 0.3, 0.4, 0.0], [3.0, 1.0, 1.0, 1.0, 4.0]])
    rill.manual_seed(1)
    trials = 4000
    firsts, seconds = [], []
    for _ in range(trials // 500):
        batch = np.repeat(weights, 500, axis=0)  # 500 independent rows of each
        draws = multinomial(rill.tensor(batch), 4, replacement=False).numpy()
        assert all(len(set(row)) == 4 for row in draws)
        assert not (draws[:500] == 4).any()  # zero weight never drawn
        firsts.append(draws[:, 0].reshape(2, 500))
        seconds.append(draws[:, :2].reshape(2, 500, 2))
    first = np.concatenate(firsts, axis=1)
    for row, w in zip(first, weights):
        _within(np.bincount(row, minlength=5) / trials, w / w.sum(), trials)
    # second draw of row 0 given the first was 3 (p=0.4): the rest renormalized
    pairs = np.concatenate(seconds, axis=1)[0]
    after3 = pairs[pairs[:, 0] == 3, 1]
    _within(np.bincount(after3, minlength=5) / len(after3), [1 / 6, 2 / 6, 3 / 6, 0, 0],
            len(after3))
    everything = multinomial(rill.tensor([1.0, 1.0, 1.0]), 3).numpy()
    assert sorted(everything) == [0, 1, 2]


def test_reproducible_under_manual_seed_and_generators():
    w = rill.tensor([[0.2, 0.3, 0.5], [1.0, 1.0, 1.0]])
    rill.manual_seed(5)
    a = multinomial(w, 10, replacement=True).numpy()
    b = multinomial(w, 3).numpy()
    c = bernoulli(rill.full((8,), 0.5)).numpy()
    rill.manual_seed(5)
    np.testing.assert_array_equal(multinomial(w, 10, replacement=True).numpy(), a)
    np.testing.assert_array_equal(multinomial(w, 3).numpy(), b)
    np.testing.assert_array_equal(bernoulli(rill.full((8,), 0.5)).numpy(), c)
    g1, g2 = rill.Generator(seed=9), rill.Generator(seed=9)
    np.testing.assert_array_equal(multinomial(w, 50, True, generator=g1).numpy(),
                                  multinomial(w, 50, True, generator=g2).numpy())
    assert not np.array_equal(multinomial(w, 50, True, generator=g1).numpy(),
                              multinomial(w, 50, True, generator=g1).numpy())


def test_bernoulli_frequencies_shape_and_dtype():
    probs = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    rill.manual_seed(2)
    draws = bernoulli(rill.tensor(np.tile(probs, (N, 1)))).numpy()
    assert draws.dtype == np.float64 and draws.shape == (N, 5)
    assert set(np.unique(draws)) <= {0.0, 1.0}
    _within(draws.mean(0), probs, N)
    x = rill.zeros(N, dtype=rill.float32)
    fixed = bernoulli(x, p=0.25).numpy()
    assert fixed.dtype == np.float32
    _within(fixed.mean(), 0.25, N)
    assert torch.bernoulli(torch.zeros(3), p=0.25).dtype == torch.float32


def test_no_gradient_flows_and_capture_runs():
    p = rill.tensor([0.3, 0.7], requires_grad=True)
    assert not bernoulli(p).requires_grad

    @rill.capture
    def draw(w):
        return multinomial(w, 2), bernoulli(w)

    rill.manual_seed(0)
    index, coins = draw(rill.tensor([[1.0, 0.0, 1.0]]))
    assert index.shape == (1, 2) and sorted(index.numpy()[0]) == [0, 2]
    assert coins.shape == (1, 3) and coins.numpy()[0, 1] == 0.0


BAD = [
    pytest.param(lambda: multinomial(rill.tensor([0.5, -0.1, 0.6]), 1), rill.ArgumentError,
                 "non-negative", id="negative"),
    pytest.param(lambda: multinomial(rill.tensor([[1.0, 1.0], [0.0, 0.0]]), 1, True),
                 rill.ArgumentError, "positive entry", id="zero-row"),
    pytest.param(lambda: multinomial(rill.tensor([1.0, float("nan")]), 1), rill.ArgumentError,
                 "finite", id="nan"),
    pytest.param(lambda: multinomial(rill.tensor([1.0, 1.0]), 3), rill.ArgumentError,
                 "without replacement; pass replacement=True", id="too-many"),
    pytest.param(lambda: multinomial(rill.tensor([1.0, 0.0, 1.0]), 3), rill.ArgumentError,
                 "only 2", id="too-few-positive"),
    pytest.param(lambda: multinomial(rill.tensor([1.0, 1.0]), 0), rill.ArgumentError,
                 "num_samples", id="zero-samples"),
    pytest.param(lambda: multinomial(rill.ones(2, 2, 2), 1), rill.ArgumentError, "1-d or 2-d",
                 id="3-d"),
    pytest.param(lambda: multinomial(rill.tensor([1, 2]), 1), rill.DTypeError, "floating",
                 id="int"),
    pytest.param(lambda: multinomial(rill.tensor([1.0]), 1, generator=3), rill.ArgumentError,
                 "rill.Generator", id="generator"),
    pytest.param(lambda: bernoulli(rill.tensor([0.5, 1.5])), rill.ArgumentError, r"\[0, 1\]",
                 id="bern-probs"),
    pytest.param(lambda: bernoulli(rill.zeros(2), p=-0.1), rill.ArgumentError, r"\[0, 1\]",
                 id="bern-p"),
    pytest.param(lambda: bernoulli(rill.tensor([0, 1])), rill.DTypeError, "floating",
                 id="bern-int"),
]


@pytest.mark.parametrize("call, error, message", BAD)
def test_bad_input_raises_rill_errors(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert info.value.op.startswith(("multinomial", "bernoulli"))
