"""Sharded embeddings (issue 19, part 5): to_device_prefix, and ShardedEmbedding's lookups
(Part -> Gather on each shard's device -> Stitch) against PyTorch's embedding of the whole
table, eager and captured; only the looked-up ids and rows cross devices; and a real job
(rill-launch, 2 ps + 2 workers) that counts the bytes of every step."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
import rill
import torch
from rill.capture.passes import cost
from rill.capture.transport import Rendezvous
from rill.distributed.graphs.embedding import ShardedEmbedding, shard_select
from rill.ops.prefix import to_device_prefix

SCRIPTS = pathlib.Path(__file__).parent  # the job scripts beside this file
CPU, CPU1, CPU2 = rill.device("cpu"), rill.device("cpu:1"), rill.device("cpu:2")


def table(emb) -> np.ndarray:
    return np.concatenate([p.numpy() for p in emb.shards])


def dense_grads(emb) -> np.ndarray:
    return np.concatenate([p.grad.to_dense().numpy() for p in emb.shards])


# ---- to_device_prefix --------------------------------------------------------------------

@pytest.mark.parametrize("count", [0, 2, 5, 7])
def test_prefix_copy_keeps_the_first_count_rows_and_their_gradient(count):
    data = np.random.default_rng(0).normal(size=(5, 3))
    x = rill.tensor(data).requires_grad_()
    y = to_device_prefix(x, rill.tensor(count), CPU1)
    keep = np.arange(5)[:, None] < count
    assert y.device == CPU1
    np.testing.assert_array_equal(y.numpy(), np.where(keep, data, 0.0))
    weights = rill.tensor(np.arange(15.0).reshape(5, 3), device=CPU1)
    (y * weights).sum().backward()
    assert x.grad.device == CPU
    np.testing.assert_array_equal(x.grad.numpy(), np.where(keep, weights.numpy(), 0.0))
    # captured: a prefix send/recv pair, the same values
    f = rill.capture(lambda a, c: (to_device_prefix(a * 1.0, c, CPU1) + 1.0).to(CPU))
    got = f(rill.tensor(data), rill.tensor(count))
    np.testing.assert_array_equal(got.numpy(), np.where(keep, data, 0.0) + 1.0)
    parts = f.partitions_for(rill.tensor(data), rill.tensor(count))
    send = next(n for n in parts["cpu"].nodes if n.op == "send" and n.attrs.get("prefix"))
    recv = next(n for n in parts["cpu:1"].nodes if n.op == "recv")
    assert len(send.inputs) == 2 and recv.attrs["prefix"] is True
    assert recv.outputs[0].shape == (5, 3)


def test_prefix_copy_refuses_a_bad_count():
    x = rill.ones((4, 2))
    with pytest.raises(rill.DTypeError, match="0-d int64"):
        to_device_prefix(x, rill.tensor(2.0), CPU1)
    with pytest.raises(rill.DTypeError, match="0-d int64"):
        to_device_prefix(x, rill.tensor([2]), CPU1)
    with pytest.raises(rill.DeviceError, match="x's device"):
        to_device_prefix(x, rill.tensor(2, device=CPU1), CPU1)
    with pytest.raises(rill.ShapeError, match="at least one dimension"):
        to_device_prefix(rill.tensor(1.0), rill.tensor(1), CPU1)


def test_shard_select_parts_the_ids_in_order():
    ids = rill.tensor([7, 1, 5, 9, 5, 0])
    local, count, positions = shard_select(ids, 5, 10)
    assert int(count) == 4
    assert local.tolist() == [2, 0, 4, 0, 0, 0] and positions.tolist() == [0, 2, 3, 4, 6, 6]


# ---- ShardedEmbedding against PyTorch ------------------------------------------------------

def test_the_table_starts_as_nn_embedding_with_the_same_seed():
    rill.manual_seed(3)
    emb = ShardedEmbedding(11, 4, shards=["cpu", "cpu:1", "cpu:2"])
    rill.manual_seed(3)
    ref = rill.nn.Embedding(11, 4)
    assert [p.shape for p in emb.shards] == [(4, 4), (4, 4), (3, 4)]
    assert [p.device for p in emb.shards] == [CPU, CPU1, CPU2]
    np.testing.assert_array_equal(table(emb), ref.weight.numpy())
    assert [name for name, _ in emb.named_parameters()] == ["shard0", "shard1", "shard2"]


@pytest.mark.parametrize("dtype", [rill.float64, rill.float32])
@pytest.mark.parametrize("shards", [["cpu", "cpu:1"], ["cpu:1", "cpu:2", "cpu"]])
def test_forward_and_gradient_equal_torch_on_the_whole_table(dtype, shards):
    emb = ShardedEmbedding(11, 3, shards=shards, dtype=dtype)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 11, size=(4, 5))
    ids[0, :3] = [10, 10, 0]  # repeats, and both ends of the table
    scale = rng.normal(size=(4, 5, 3))
    out = emb(rill.tensor(ids))
    weight = torch.tensor(table(emb), requires_grad=True)
    want = torch.nn.functional.embedding(torch.tensor(ids), weight)
    assert out.shape == (4, 5, 3) and out.dtype == dtype and out.device == CPU
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    (out * rill.tensor(scale, dtype=dtype)).sum().backward()
    (want * torch.tensor(scale, dtype=want.dtype)).sum().backward()
    assert all(isinstance(p.grad, rill.SparseRows) for p in emb.shards)
    tol = 1e-12 if dtype is rill.float64 else 1e-5
    np.testing.assert_allclose(dense_grads(emb), weight.grad.numpy(), rtol=tol, atol=tol)


def _training(model, opt):
    def step(ids, target):
        opt.zero_grad()
        loss = ((model(ids) - target) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return step


def _batches():
    rng = np.random.default_rng(2)
    return [(rill.tensor(rng.integers(0, 12, size=(3, 4))),
             rill.tensor(rng.normal(size=(3, 4, 5)).astype(np.float32))) for _ in range(3)]


def test_captured_sgd_steps_equal_nn_embedding_eager():
    rill.manual_seed(0)
    emb = ShardedEmbedding(12, 5, shards=["cpu", "cpu:1"])
    rill.manual_seed(0)
    ref = rill.nn.Embedding(12, 5)
    step = rill.capture(_training(emb, rill.optim.SGD(emb.parameters(), lr=0.5)))
    ref_step = _training(ref, rill.optim.SGD(ref.parameters(), lr=0.5))
    forward = rill.capture(lambda ids: emb(ids))
    for ids, target in _batches():
        np.testing.assert_allclose(forward(ids).numpy(), ref(ids).numpy(), rtol=1e-6)
        np.testing.assert_allclose(float(step(ids, target)), float(ref_step(ids, target)),
                                   rtol=1e-6)
        np.testing.assert_allclose(table(emb), ref.weight.numpy(), rtol=1e-6, atol=1e-7)
    assert not np.array_equal(table(emb)[:6], table(emb)[6:])  # it did train both shards


def test_the_partitioned_step_carries_prefixes(monkeypatch):
    monkeypatch.setitem(cost.LINKS, ("cpu", "cpu"), (1.0, None))  # see the next test
    emb = ShardedEmbedding(12, 5, shards=["cpu", "cpu:1"])
    step = rill.capture(_training(emb, rill.optim.SGD(emb.parameters(), lr=0.5)))
    ids, target = _batches()[0]
    parts = step.partitions_for(ids, target)
    here = [n for n in parts["cpu"].nodes if n.op == "send" and n.attrs.get("prefix")]
    there = [n for n in parts["cpu:1"].nodes if n.op == "send" and n.attrs.get("prefix")]
    # ids and gradient rows out, rows back: each the batch's full static length
    assert sorted(str(n.inputs[0].dtype) for n in here) == ["float32", "int64"]
    assert [n.inputs[0].shape for n in here] == [(12,), (12, 5)]
    assert [n.inputs[0].shape for n in there] == [(12, 5)]
    recvs = [n for g in parts.values() for n in g.nodes if n.op == "recv" and
             n.attrs.get("prefix")]
    assert len(recvs) == 3 and all(r.outputs[0].shape[0] == 12 for r in recvs)


def test_only_the_looked_up_ids_and_rows_cross(monkeypatch):
    # Two cpus of one process share memory, so the placer counts a move between them as a
    # hand-over and may spread cheap work over both; a link as slow as a network makes it
    # move only what must move, as a job's placement does for a ps's variables.
    monkeypatch.setitem(cost.LINKS, ("cpu", "cpu"), (1.0, None))
    sent = []
    send = Rendezvous.send

    def counting(self, key, buffer, source, dest):
        sent.append(0 if buffer is None else buffer.nbytes)
        return send(self, key, buffer, source, dest)
    monkeypatch.setattr(Rendezvous, "send", counting)
    emb = ShardedEmbedding(12, 5, shards=["cpu", "cpu:1"])   # rows 6-11 on cpu:1
    step = rill.capture(_training(emb, rill.optim.SGD(emb.parameters(), lr=0.5)))
    target = _batches()[0][1]
    for chosen in ([[0, 7, 7, 1], [11, 2, 3, 6], [5, 5, 9, 0]], [[1] * 4] * 3):
        before = table(emb)
        del sent[:]
        step(rill.tensor(chosen), target)
        c = int(np.sum(np.array(chosen) >= 6))
        # ids (8 bytes) and a count out; rows (5 float32) and a count back; gradient rows out
        assert sum(sent) == 8 * c + 8 + 20 * c + 8 + 20 * c, (c, sent)
        looked_up = np.unique(chosen)
        unchanged = np.setdiff1d(np.arange(12), looked_up)
        np.testing.assert_array_equal(table(emb)[unchanged], before[unchanged])


def test_bad_input_is_refused():
    emb = ShardedEmbedding(6, 2, shards=["cpu", "cpu:1"])
    with pytest.raises(rill.IndexingError, match=r"ids must be in \[0, 6\)"):
        emb(rill.tensor([1, 6]))
    with pytest.raises(rill.IndexingError, match=r"ids must be in \[0, 6\)"):
        emb(rill.tensor([-1, 2]))
    with pytest.raises(rill.Error, match=r"ids must be in \[0, 6\)"):
        rill.capture(lambda ids: emb(ids))(rill.tensor([0, 9]))
    with pytest.raises(rill.DTypeError, match="integer ids"):
        emb(rill.tensor([1.0, 2.0]))
    with pytest.raises(rill.ArgumentError, match="each shard needs at least one row"):
        ShardedEmbedding(2, 2, shards=["cpu", "cpu:1", "cpu:2"])
    with pytest.raises(rill.ArgumentError, match="non-empty list of devices"):
        ShardedEmbedding(2, 2, shards=[])
    with pytest.raises(rill.DistributedError, match="--ps P"):
        ShardedEmbedding(4, 2)  # no parameter servers in a process of its own


# ---- a real job ----------------------------------------------------------------------------

def test_a_job_moves_only_looked_up_rows_and_trains(tmp_path):
    pytest.importorskip("mpi4py")
    from launching import launch
    rc, out = launch("-n", 4, "--ps", 2, "--timeout", 60, SCRIPTS / "graph_embedding.py",
                     tmp_path, timeout=180)
    assert rc == 0, out
    assert out.count("bytes per step checked") == 2, out
    assert out.count("'applied': 120, 'contributions': 120, 'dropped': 0") == 2, out
    for k in range(2):  # a ps runs the lookups without the model's code (nor torch's)
        modules = (tmp_path / f"ps{k}_imports.txt").read_text().split()
        assert "rill" in modules and not [m for m in modules if m.startswith("torch")]
