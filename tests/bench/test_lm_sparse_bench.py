"""bench/lm_sparse.py, the paper's language-model experiment in miniature (issue 34, item 4):
its code paths once each with a tiny vocabulary, and the pieces it relies on: the sampled
loss over looked-up rows equals rill's sampled_softmax_loss over the whole table, and a ps
answers two lookups of one step (the second's ids sent after the first's rows came back)."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
import rill
from rill.distributed.graphs import replicas

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "lm_sparse.py"


def bench():
    spec = importlib.util.spec_from_file_location("lm_sparse", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = ["--vocab", "60", "--dim", "8", "--batch", "4", "--unroll", "5", "--warmup", "1",
        "--samples", "16", "--lr", "0.5"]


def test_the_word_stream_is_zipf_with_successors():
    words = np.concatenate([np.concatenate([x, y[:, -1:]], 1) for x, y in
                            bench().word_batches(1000, 64, 50, 4)])
    assert words.min() >= 0 and words.max() < 1000
    follows = np.mean(words[:, 1:] == words[:, :-1] + 1)
    assert 0.45 < follows < 0.6       # half the words succeed the one before (+ chance)
    counts = np.bincount(words.ravel(), minlength=1000)
    assert counts[0] > counts[9] > counts[99] > counts[999]  # frequency falls with rank


def test_sampled_loss_over_looked_up_rows_equals_the_whole_tables():
    lm = bench()
    vocab, dim, n, s = 50, 6, 7, 12
    rng = np.random.default_rng(1)
    table = rng.normal(size=(vocab, dim + 1)).astype(np.float32)
    h = rng.normal(size=(n, dim)).astype(np.float32)
    labels = np.array([0, 1, 1, 3, 2, 49, 0])  # frequent words: accidental hits are likely
    got_rows = rill.tensor(table).requires_grad_()
    got_h = rill.tensor(h).requires_grad_()
    rill.manual_seed(3)
    loss = lm.sampled_loss_over_rows(lambda ids: got_rows[ids], got_h, rill.tensor(labels),
                                     s, vocab)
    loss.backward()
    rill.manual_seed(3)  # the same draw, for rill's loss over the whole table
    drawn = rill.random.log_uniform_candidate_sampler(rill.tensor(labels).reshape(n, 1), 1, s,
                                                      True, vocab)
    assert set(labels) & set(drawn[0].tolist())  # some label was drawn: hits are removed
    w = rill.tensor(table[:, :dim]).requires_grad_()
    b = rill.tensor(table[:, dim]).requires_grad_()
    want_h = rill.tensor(h).requires_grad_()
    want = rill.nn.functional.sampled_softmax_loss(w, b, rill.tensor(labels).reshape(n, 1),
                                                   want_h, s, vocab, sampled_values=drawn)
    want.mean().backward()
    np.testing.assert_allclose(float(loss), float(want.mean()), rtol=1e-6)
    np.testing.assert_allclose(got_h.grad.numpy(), want_h.grad.numpy(), rtol=1e-5, atol=1e-7)
    grad = got_rows.grad.to_dense().numpy()
    np.testing.assert_allclose(grad[:, :dim], w.grad.to_dense().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad[:, dim], b.grad.to_dense().numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("softmax,samples", [("full", 0), ("sampled", 16)])
def test_one_process_steps_run_and_the_loss_falls(softmax, samples):
    lm = bench()
    args = lm.parse(TINY + ["--steps", "100", "--full-steps", "100"])
    r = lm.run_local(args, softmax, samples)
    assert r["steps"] == 100 and r["words_per_s"] > 0
    first, last = np.mean(r["losses"][:10]), np.mean(r["losses"][-10:])
    assert last < first - 0.3, (first, last)
    before, after = r["full_loss_before_after"]  # the full softmax's loss on held-out words
    assert after < before, (before, after)


def test_a_ps_answers_each_of_a_steps_lookups_as_its_ids_arrive():
    embed = rill.distributed.ShardedEmbedding(100, 4, shards=["ps:0/cpu"])
    out = rill.distributed.ShardedEmbedding(100, 4, shards=["ps:0/cpu"])
    opt = rill.optim.SGD(list(embed.parameters()) + list(out.parameters()), lr=0.1)

    @rill.capture
    def step(x, y):
        opt.zero_grad()
        # the worker sends y's ids after x's rows came back (its part runs in this order)
        (embed(x) * out(y)).sum().backward()
        opt.step()
    part = step.partitions_for(rill.tensor([1, 2]), rill.tensor([3, 4]))["ps:0/cpu"]
    _, serve, _, _ = replicas.split(part, "async")
    rounds = replicas.rounds(serve)
    assert len(rounds) == 2 and sum(g.count("send") for g in rounds) == serve.count("send")
    keys = [{n.attrs["key"] for n in g.nodes if n.op == "recv"} for g in rounds]
    assert keys[0] and keys[1] and not keys[0] & keys[1]
    for g in rounds:
        g.lint()


def test_a_job_with_two_ps_runs_the_sharded_lm(tmp_path):
    pytest.importorskip("mpi4py")
    lm = bench()
    args = lm.parse(TINY + ["--steps", "4", "--full-steps", "2"])
    r = lm.run_ps(args, 2, "sampled", 16)
    assert r["steps"] == 4 and r["words_per_s"] > 0 and len(r["ps_ms"]) == 2
    assert all(np.isfinite(r["losses"]))
    assert 0 < r["mb_per_step"] < 1  # rows and their gradients, never whole tables
