"""Sampled softmax, NCE and the candidate samplers, against TensorFlow's definitions.

The losses are checked on given samples (sampled_values passed explicitly) against a NumPy
float64 reference written from tf.nn's definition, their gradients against finite
differences and PyTorch autograd of the same formula; the samplers' draws against their
distributions and TensorFlow's draw-until-distinct loop; the sampled softmax gradient, on
average, against the full softmax's.
"""
import numpy as np
import pytest

import rill
from rill.errors import ArgumentError, DTypeError, ShapeError

F = rill.nn.functional
LOG_UNIFORM = rill.random.log_uniform_candidate_sampler
UNIFORM = rill.random.uniform_candidate_sampler


# ---- the reference: TensorFlow's _compute_sampled_logits and the two losses ---------------

def reference_logits(w, b, labels, x, sampled, true_count, sampled_count, remove_hits):
    """(logits, targets) as tf.nn builds them, in float64."""
    true_logits = np.einsum("nd,ntd->nt", x, w[labels]) + b[labels]
    sampled_logits = x @ w[sampled].T + b[sampled]
    if remove_hits:
        sampled_logits = sampled_logits + hit_mask(labels, sampled) * np.finfo(np.float64).min
    logits = np.concatenate([true_logits - np.log(true_count),
                             sampled_logits - np.log(sampled_count)], axis=1)
    targets = np.zeros_like(logits)
    targets[:, :labels.shape[1]] = 1.0 / labels.shape[1]
    return logits, targets


def hit_mask(labels, sampled):
    """1.0 where a sampled class is one of the row's labels: compute_accidental_hits maps
    each class to its last position among the samples, so only that one is marked."""
    mask = np.zeros((len(labels), len(sampled)))
    position = {int(c): k for k, c in enumerate(sampled)}
    for i, row in enumerate(labels):
        for c in row:
            if int(c) in position:
                mask[i, position[int(c)]] = 1.0
    return mask


def reference_sampled_softmax(*args):
    logits, targets = reference_logits(*args)
    top = logits.max(axis=1, keepdims=True)
    log_p = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return -(targets * log_p).sum(axis=1)


def reference_nce(*args):
    x, z = reference_logits(*args)
    return (np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))).sum(axis=1)


C, D, N = 12, 5, 6
CASES = {  # name: (num_true, sampled candidates, remove_accidental_hits)
    "one_true": (1, [3, 0, 7, 11, 5], True),
    "two_true": (2, [3, 0, 7, 11, 5], True),
    "repeated_samples": (2, [3, 3, 0, 7, 3, 1, 0], True),
    "hits_kept": (2, [3, 3, 0, 7, 3, 1, 0], False),
}


def problem(name):
    num_true, sampled, hits = CASES[name]
    rng = np.random.default_rng(len(name))
    labels = rng.integers(0, C, size=(N, num_true))
    labels[0, 0], labels[1, -1] = 3, 0  # accidental hits, one on a repeated sample
    return dict(w=rng.normal(size=(C, D)), b=rng.normal(size=C), labels=labels,
                x=rng.normal(size=(N, D)), sampled=np.array(sampled),
                true_count=rng.uniform(0.1, 2, size=(N, num_true)),
                sampled_count=rng.uniform(0.1, 2, size=len(sampled)), hits=hits)


def reference_args(p):
    return (p["w"], p["b"], p["labels"], p["x"], p["sampled"], p["true_count"],
            p["sampled_count"], p["hits"])


def rill_loss(loss, p, w, b, x, partitions=1):
    table = w if partitions == 1 else [w[:4], w[4:8], w[8:]]  # TensorFlow's "div" split
    drawn = tuple(rill.tensor(p[k]) for k in ("sampled", "true_count", "sampled_count"))
    return loss(table, b, rill.tensor(p["labels"]), x, len(p["sampled"]), C,
                num_true=p["labels"].shape[1], sampled_values=drawn,
                remove_accidental_hits=p["hits"])


LOSSES = {"sampled_softmax": (F.sampled_softmax_loss, reference_sampled_softmax),
          "nce": (F.nce_loss, reference_nce)}


def dense(grad):
    return np.asarray(grad.to_dense().numpy() if isinstance(grad, rill.SparseRows)
                      else grad.numpy())


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("partitions", [1, 3])
def test_loss_matches_the_reference_on_given_samples(kind, name, partitions):
    p = problem(name)
    loss, reference = LOSSES[kind]
    got = rill_loss(loss, p, rill.tensor(p["w"]), rill.tensor(p["b"]), rill.tensor(p["x"]),
                    partitions)
    assert got.shape == (N,) and got.dtype == rill.float64
    np.testing.assert_allclose(got.numpy(), reference(*reference_args(p)), rtol=1e-12)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", LOSSES)
def test_gradients_match_finite_differences(kind, name):
    p = problem(name)
    loss, reference = LOSSES[kind]
    weight = np.arange(1.0, N + 1)  # a weighted sum, so per-example errors cannot cancel
    w, b, x = (rill.tensor(p[k], requires_grad=True) for k in ("w", "b", "x"))
    (rill_loss(loss, p, w, b, x) * rill.tensor(weight)).sum().backward()
    for key, analytic in (("w", w.grad), ("b", b.grad), ("x", x.grad)):
        numeric = np.zeros_like(p[key])
        for i in np.ndindex(p[key].shape):
            shifted = []
            for step in (1e-6, -1e-6):
                q = dict(p, **{key: p[key].copy()})
                q[key][i] += step
                shifted.append(weight @ reference(*reference_args(q)))
            numeric[i] = (shifted[0] - shifted[1]) / 2e-6
        np.testing.assert_allclose(dense(analytic), numeric, atol=1e-7, err_msg=key)


def torch_loss(torch, kind, w, b, labels, x, sampled, true_count, sampled_count, hits):
    """The same definition in PyTorch, for its autograd."""
    true_logits = (x[:, None, :] * w[labels]).sum(-1) + b[labels]
    sampled_logits = x @ w[sampled].T + b[sampled]
    if hits:
        lowest = torch.finfo(x.dtype).min
        mask = torch.tensor(hit_mask(labels.numpy(), sampled.numpy()), dtype=x.dtype)
        sampled_logits = sampled_logits + mask * lowest
    logits = torch.cat([true_logits - torch.log(true_count),
                        sampled_logits - torch.log(sampled_count)], 1)
    targets = torch.zeros_like(logits)
    targets[:, :labels.shape[1]] = 1.0 / labels.shape[1]
    if kind == "nce":
        return torch.nn.functional.binary_cross_entropy_with_logits(
            logits, targets, reduction="none").sum(1)
    return -(targets * torch.log_softmax(logits, 1)).sum(1)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_and_gradients_match_pytorch(kind, name, dtype):
    torch = pytest.importorskip("torch")
    p = problem(name)
    cast = {k: p[k].astype(dtype) for k in ("w", "b", "x", "true_count", "sampled_count")}
    tw, tb, tx = (torch.tensor(cast[k], requires_grad=True) for k in ("w", "b", "x"))
    expected = torch_loss(torch, kind, tw, tb, torch.tensor(p["labels"]), tx,
                          torch.tensor(p["sampled"]), torch.tensor(cast["true_count"]),
                          torch.tensor(cast["sampled_count"]), p["hits"])
    weight = np.arange(1.0, N + 1).astype(dtype)
    (expected * torch.tensor(weight)).sum().backward()
    w, b, x = (rill.tensor(cast[k], requires_grad=True) for k in ("w", "b", "x"))
    got = rill_loss(LOSSES[kind][0], dict(p, **cast), w, b, x)
    (got * rill.tensor(weight)).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), **tol)
    for mine, theirs in ((w.grad, tw.grad), (b.grad, tb.grad), (x.grad, tx.grad)):
        np.testing.assert_allclose(dense(mine), theirs.numpy(), **tol)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", LOSSES)
def test_values_and_gradients_match_tensorflow(kind, name):
    tf = pytest.importorskip("tensorflow")  # not a test dependency: runs where it is installed
    p = problem(name)
    tw, tb, tx = (tf.Variable(p[k]) for k in ("w", "b", "x"))
    their_loss = tf.nn.sampled_softmax_loss if kind == "sampled_softmax" else tf.nn.nce_loss
    with tf.GradientTape() as tape:
        expected = their_loss([tw[:4], tw[4:8], tw[8:]], tb, p["labels"], tx,
                              len(p["sampled"]), C, num_true=p["labels"].shape[1],
                              sampled_values=(p["sampled"], p["true_count"],
                                              p["sampled_count"]),
                              remove_accidental_hits=p["hits"])
    theirs = tape.gradient(expected, [tw, tb, tx])
    w, b, x = (rill.tensor(p[k], requires_grad=True) for k in ("w", "b", "x"))
    got = rill_loss(LOSSES[kind][0], p, w, b, x, partitions=3)
    got.sum().backward()
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10)
    for mine, their in zip((w.grad, b.grad, x.grad), theirs):
        np.testing.assert_allclose(dense(mine), tf.convert_to_tensor(their).numpy(),
                                   rtol=1e-10, atol=1e-12)


def test_an_accidental_hit_gets_no_probability_and_no_gradient():
    p = problem("one_true")  # example 0's label 3 is sampled first
    w, b, x = (rill.tensor(p[k], requires_grad=True) for k in ("w", "b", "x"))
    logits = x @ w.T + b
    drawn = (rill.tensor(p["sampled"]), rill.ones(N, 1, dtype=rill.float64),
             rill.ones(5, dtype=rill.float64))
    loss = F.sampled_softmax_loss(w, b, rill.tensor(p["labels"]), x, 5, C,
                                  sampled_values=drawn)
    # with unit expected counts it is a softmax over {label} + the other four samples
    others = [c for c in p["sampled"] if c != 3]
    expected = -logits[0, 3] + rill.logsumexp(logits[0, [3] + others], axis=0)
    np.testing.assert_allclose(float(loss[0]), float(expected), rtol=1e-12)
    loss[0].backward()
    # class 3 is looked up twice, as the label and as a sample; only the label's logit
    # passes a gradient: d loss / d b[3] = softmax(true) - 1
    true_share = float(rill.exp(-expected))
    np.testing.assert_allclose(dense(b.grad)[3], true_share - 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", LOSSES)
def test_the_loss_keeps_the_inputs_dtype(kind, dtype):
    dtype = getattr(rill, dtype)
    p = problem("repeated_samples")  # with accidental hits, which add the dtype's lowest
    w, b, x = (rill.tensor(p[k]).astype(dtype) for k in ("w", "b", "x"))
    got = rill_loss(LOSSES[kind][0], p, w, b, x)
    assert got.dtype == dtype
    rounded = {k: t.astype(rill.float64).numpy() for k, t in zip("wbx", (w, b, x))}
    expected = LOSSES[kind][1](*reference_args(dict(p, **rounded)))
    np.testing.assert_allclose(got.astype(rill.float64).numpy(), expected, rtol=0.05)


# ---- gradients are sparse rows; partitions ------------------------------------------------

def test_embedding_weight_gets_sparse_rows_of_true_and_sampled_classes():
    rill.manual_seed(0)
    emb = rill.nn.Embedding(1000, 8)
    bias = rill.nn.Parameter(rill.zeros(1000))
    labels = rill.tensor([[1], [500], [999], [7]])
    x = rill.randn(4, 8, requires_grad=True)
    rill.manual_seed(3)
    drawn = LOG_UNIFORM(labels, 1, 20, True, 1000)
    F.sampled_softmax_loss(emb.weight, bias, labels, x, 20, 1000,
                           sampled_values=drawn).sum().backward()
    for grad in (emb.weight.grad, bias.grad):
        assert isinstance(grad, rill.SparseRows)
        assert set(grad.indices.tolist()) == {1, 500, 999, 7} | set(drawn[0].tolist())
        assert grad.rows.shape[0] == 4 + 20  # rows, never the 1000-row table
    touched = np.zeros(1000, bool)
    touched[emb.weight.grad.indices.numpy()] = True
    assert not np.any(emb.weight.grad.to_dense().numpy()[~touched])


def test_partitioned_embeddings_each_get_sparse_rows():
    rill.manual_seed(0)
    parts = [rill.nn.Embedding(4, 3).weight, rill.nn.Embedding(4, 3).weight,
             rill.nn.Embedding(2, 3).weight]
    whole = rill.tensor(np.concatenate([q.numpy() for q in parts]), requires_grad=True)
    labels, x = rill.tensor([[0], [9], [5]]), rill.randn(3, 3)
    drawn = (rill.tensor([2, 6, 9]), rill.full((3, 1), 0.5), rill.full((3,), 0.25))
    split = F.nce_loss(parts, rill.zeros(10), labels, x, 3, 10, sampled_values=drawn)
    joined = F.nce_loss(whole, rill.zeros(10), labels, x, 3, 10, sampled_values=drawn)
    np.testing.assert_allclose(split.numpy(), joined.numpy(), rtol=1e-6)
    split.sum().backward()
    joined.sum().backward()
    assert all(isinstance(q.grad, rill.SparseRows) for q in parts)
    np.testing.assert_allclose(np.concatenate([dense(q.grad) for q in parts]),
                               dense(whole.grad), rtol=1e-6, atol=1e-7)


# ---- the samplers --------------------------------------------------------------------------

def log_uniform_p(classes, range_max):
    return np.log((classes + 2.0) / (classes + 1.0)) / np.log(range_max + 1.0)


@pytest.mark.parametrize("sampler", [LOG_UNIFORM, UNIFORM])
def test_draws_with_replacement_follow_the_distribution(sampler):
    stats = pytest.importorskip("scipy.stats")
    range_max, gen = 20, rill.Generator(11)
    draws = np.concatenate([sampler(rill.tensor([[0]]), 1, 1000, False, range_max,
                                    seed=gen)[0].numpy() for _ in range(20)])
    classes = np.arange(range_max)
    p = log_uniform_p(classes, range_max) if sampler is LOG_UNIFORM else np.full(20, 0.05)
    assert np.isclose(p.sum(), 1.0)
    counts = np.bincount(draws, minlength=range_max)
    assert counts.sum() == draws.size == 20000
    assert stats.chisquare(counts, p * draws.size).pvalue > 1e-3


@pytest.mark.parametrize("sampler", [LOG_UNIFORM, UNIFORM])
def test_expected_counts_without_unique_are_p_times_num_sampled(sampler):
    labels = rill.tensor([[0, 5], [19, 2]])
    sampled, true_count, sampled_count = sampler(labels, 2, 7, False, 20,
                                                 seed=rill.Generator(0))
    assert (sampled.dtype, true_count.dtype, sampled_count.dtype) == \
        (rill.int64, rill.float32, rill.float32)
    assert (sampled.shape, true_count.shape, sampled_count.shape) == ((7,), (2, 2), (7,))
    law = log_uniform_p if sampler is LOG_UNIFORM else (lambda c, n: np.full(c.shape, 1 / n))
    np.testing.assert_allclose(true_count.numpy(), 7 * law(labels.numpy(), 20), rtol=1e-6)
    np.testing.assert_allclose(sampled_count.numpy(), 7 * law(sampled.numpy(), 20),
                               rtol=1e-6)


def tensorflow_unique_loop(p, k, rng):
    """TensorFlow's RangeSampler with unique=True: draw with replacement until k distinct
    classes; (classes in the order first drawn, number of draws)."""
    found, tries = [], 0
    while len(found) < k:
        c = int(rng.choice(len(p), p=p))
        tries += 1
        if c not in found:
            found.append(c)
    return found, tries


def tries_from_counts(p, count, k):
    """The one num_tries the expected counts say (TensorFlow's formula, inverted), checked
    against every count."""
    if np.allclose(count, p * k, rtol=1e-6):
        return k
    tries = int(round(np.log1p(-count[np.argmin(p)]) / np.log1p(-p.min())))
    np.testing.assert_allclose(count, -np.expm1(tries * np.log1p(-p)), rtol=2e-5)
    assert tries > k
    return tries


@pytest.mark.parametrize("sampler", [LOG_UNIFORM, UNIFORM])
def test_unique_draws_match_tensorflows_loop_in_distribution(sampler):
    stats = pytest.importorskip("scipy.stats")
    range_max, k, runs = 10, 4, 2000
    classes = np.arange(range_max)
    p = log_uniform_p(classes, range_max) if sampler is LOG_UNIFORM else np.full(10, 0.1)
    rng, gen = np.random.default_rng(5), rill.Generator(5)
    mine, theirs = [], []
    for _ in range(runs):
        sampled, true_count, count = sampler(rill.tensor([[0], [9]]), 1, k, True, range_max,
                                             seed=gen)
        sampled = sampled.numpy()
        assert len(set(sampled.tolist())) == k
        tries = tries_from_counts(p[sampled], count.numpy(), k)
        np.testing.assert_allclose(  # the true classes' counts say the same num_tries
            true_count.numpy()[:, 0], tries_from_counts_formula(p[[0, 9]], tries, k),
            rtol=2e-5)
        mine.append((sampled, tries))
        theirs.append(tensorflow_unique_loop(p, k, rng))
    for position in range(k):  # which class comes j-th: the same law
        table = [np.bincount([s[position] for s, _ in draws], minlength=range_max)
                 for draws in (mine, theirs)]
        table = np.array(table)[:, np.array(table).sum(0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, position
    bins = [np.bincount(np.minimum([t for _, t in draws], 12) - k, minlength=9)
            for draws in (mine, theirs)]
    bins = np.array(bins)[:, np.array(bins).sum(0) > 0]
    assert stats.chi2_contingency(bins).pvalue > 1e-3  # how many draws it took


def tries_from_counts_formula(p, tries, k):
    return p * k if tries == k else -np.expm1(tries * np.log1p(-p))


def test_unique_can_draw_the_whole_range():
    sampled, _, count = LOG_UNIFORM(rill.tensor([[0]]), 1, 50, True, 50,
                                    seed=rill.Generator(2))
    assert sorted(sampled.tolist()) == list(range(50))
    assert np.all((count.numpy() > 0) & (count.numpy() <= 1))


def test_seeds_draw_from_a_repeatable_stream():
    labels = rill.tensor([[1]])
    first = LOG_UNIFORM(labels, 1, 8, True, 1000, seed=98765)[0].tolist()
    second = LOG_UNIFORM(labels, 1, 8, True, 1000, seed=98765)[0].tolist()
    assert first != second  # as TensorFlow's op seed: a stream, not one fixed draw
    replay = rill.Generator(98765)
    assert LOG_UNIFORM(labels, 1, 8, True, 1000, seed=replay)[0].tolist() == first
    assert LOG_UNIFORM(labels, 1, 8, True, 1000, seed=replay)[0].tolist() == second
    rill.manual_seed(4)
    a = UNIFORM(labels, 1, 8, False, 1000)[0].tolist()
    rill.manual_seed(4)
    assert UNIFORM(labels, 1, 8, False, 1000)[0].tolist() == a


# ---- in expectation, the full softmax ------------------------------------------------------

def test_sampled_softmax_gradient_approaches_the_full_softmax_gradient():
    rng = np.random.default_rng(0)
    classes = 50
    w0, b0, x0 = rng.normal(size=(classes, 8)) / 2, rng.normal(size=classes) / 2, \
        rng.normal(size=(4, 8))
    labels = rill.tensor([[0], [3], [17], [42]])

    def gradients(loss_of):
        w, b, x = (rill.tensor(v, requires_grad=True) for v in (w0, b0, x0))
        loss_of(w, b, x).sum().backward()
        return [dense(w.grad), dense(b.grad), dense(x.grad)]

    full = gradients(lambda w, b, x: F.cross_entropy(x @ w.T + b, labels[:, 0],
                                                     reduction="none"))

    def mean_error(num_sampled, unique, runs=200):
        rill.manual_seed(1)
        total = [0.0, 0.0, 0.0]
        for _ in range(runs):
            drawn = LOG_UNIFORM(labels, 1, num_sampled, unique, classes)
            g = gradients(lambda w, b, x: F.sampled_softmax_loss(
                w, b, labels, x, num_sampled, classes, sampled_values=drawn))
            total = [t + gi / runs for t, gi in zip(total, g)]
        return max(np.linalg.norm(t - f) / np.linalg.norm(f) for t, f in zip(total, full))

    few, many = mean_error(20, False), mean_error(500, False)
    assert many < 0.03 and few > 3 * many  # consistent: the error shrinks with samples
    assert mean_error(45, True, runs=50) < 0.03


# ---- captured == eager ---------------------------------------------------------------------

@pytest.mark.parametrize("unique", [True, False])
def test_a_captured_training_step_equals_eager(unique):
    def setup():
        rill.manual_seed(0)
        emb, bias = rill.nn.Embedding(300, 8), rill.nn.Parameter(rill.zeros(300))
        opt = rill.optim.SGD([emb.weight, bias], lr=0.5)

        def step(x, labels):
            opt.zero_grad()
            softmax = F.sampled_softmax_loss(emb.weight, bias, labels, x, 16, 300)
            drawn = UNIFORM(labels, 1, 16, unique, 300)
            nce = F.nce_loss(emb.weight, bias, labels, x, 16, 300, sampled_values=drawn)
            loss = (softmax + nce).mean()
            loss.backward()
            opt.step()
            return loss, drawn[0], drawn[2]
        return emb, step

    x, labels = rill.randn(4, 8), rill.tensor([[1], [2], [250], [7]])
    results = []
    for captured in (False, True):
        emb, step = setup()
        step = rill.capture(step) if captured else step
        rill.manual_seed(5)
        results.append(([[t.numpy() for t in step(x, labels)] for _ in range(3)],
                        emb.weight.numpy()))
    (eager, eager_w), (graph, graph_w) = results
    for one, other in zip(eager, graph):
        for a, b in zip(one, other):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    assert not np.array_equal(eager[0][1], eager[1][1])  # each step drew anew
    np.testing.assert_allclose(eager_w, graph_w, rtol=1e-5, atol=1e-6)


# ---- errors --------------------------------------------------------------------------------

def _args(**change):
    args = dict(weights=rill.ones(10, 3), biases=rill.zeros(10), labels=rill.tensor([[1], [2]]),
                inputs=rill.ones(2, 3), num_sampled=4, num_classes=10)
    args.update(change)
    return args


@pytest.mark.parametrize("change, error, words", [
    (dict(labels=rill.tensor([1, 2])), ShapeError, "reshape(-1, 1)"),
    (dict(labels=rill.tensor([[1], [10]])), ArgumentError, "class 10, outside [0, 10)"),
    (dict(labels=rill.tensor([[-1], [2]])), ArgumentError, "class -1"),
    (dict(labels=rill.tensor([[1.0], [2.0]])), DTypeError, "integer class ids"),
    (dict(inputs=rill.ones(2, 4)), ShapeError, "inputs must be (batch, dim=3)"),
    (dict(inputs=rill.ones(3, 3)), ShapeError, "labels must be (batch=3, num_true=1)"),
    (dict(weights=rill.ones(9, 3)), ShapeError, "9 rows for num_classes=10"),
    (dict(weights=[rill.ones(5, 3), rill.ones(5, 2)]), ShapeError, "row partitions"),
    (dict(biases=rill.zeros(10, 1)), ShapeError, "(num_classes,)"),
    (dict(num_sampled=11, weights=rill.ones(10, 3)), ArgumentError,
     "unique=True cannot draw num_sampled=11"),
    (dict(num_sampled=0), ArgumentError, "num_sampled"),
    (dict(sampled_values=(rill.tensor([1, 2]),)), ArgumentError, "triple"),
    (dict(sampled_values=(rill.tensor([1, 2, 3, 4]), rill.ones(2, 1), rill.ones(3))),
     ShapeError, "sampled_expected_count must have shape (4,)"),
    (dict(sampled_values=(rill.tensor([1, 2, 3, 12]), rill.ones(2, 1), rill.ones(4))),
     ArgumentError, "sampled_candidates holds class 12"),
])
@pytest.mark.parametrize("loss", [F.sampled_softmax_loss, F.nce_loss])
def test_bad_arguments_raise_rill_errors(loss, change, error, words):
    with pytest.raises(error) as info:
        loss(**_args(**change))
    assert words in str(info.value)
    assert loss.__name__ in str(info.value)


@pytest.mark.parametrize("call, error, words", [
    (lambda: LOG_UNIFORM(rill.tensor([[1]]), 1, 6, True, 5), ArgumentError,
     "num_sampled=6 distinct classes out of range_max=5"),
    (lambda: UNIFORM(rill.tensor([[1, 2]]), 1, 2, False, 5), ShapeError, "num_true=1"),
    (lambda: UNIFORM(rill.tensor([[7]]), 1, 2, False, 5), ArgumentError, "class 7"),
    (lambda: LOG_UNIFORM(rill.tensor([[1]]), 1, 2, False, 5, seed=1.5), ArgumentError,
     "seed must be"),
    (lambda: LOG_UNIFORM(rill.tensor([[1]]), 1, 2, False, 0), ArgumentError, "range_max"),
])
def test_bad_sampler_arguments_raise_rill_errors(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_labels_from_outside_a_capture_are_checked_in_the_graph():
    # Labels read from outside are graph state: their range is checked when the graph runs.
    w, b = rill.randn(10, 4), rill.zeros(10)
    labels = rill.tensor([[1], [2], [3]])
    step = rill.capture(lambda h: rill.nn.functional.sampled_softmax_loss(w, b, labels, h, 4,
                                                                          10))
    h = rill.randn(3, 4)
    assert step(h).shape == (3,)
    rill.ops.methods.assign(labels, rill.tensor([[1], [12], [3]]))
    with pytest.raises(rill.ArgumentError, match="outside"):
        step(h)
