"""Distributed checkpoints of captured graphs (issue 19, part 6): each ps saves and restores
its own shard through save/restore graph ops; the chief writes the manifest last; a job
whose ps is killed resumes every task from the same step and ends where an uninterrupted
run would. The ps side is also driven in process (a stand-in server, no MPI) to check that
damaged or mismatched shards are refused and change nothing."""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

import rill
from rill import serialization
from rill.distributed import wire
from rill.distributed.graphs import checkpoint as shards
from rill.distributed.graphs.registration import _grad_holder
from rill.train import Checkpoint
from rill.train.checkpoint import HeldElsewhere

SCRIPTS = pathlib.Path(__file__).parent  # the job scripts beside this file


from launching import launch  # noqa: E402


def test_a_killed_ps_restarts_every_task_from_the_last_distributed_checkpoint(tmp_path):
    rc, out = launch("-n", 3, "--ps", 1, "--max-restarts", 1, "--timeout", 30,
                     SCRIPTS / "graph_fault.py", tmp_path / "ckpt", timeout=150)
    assert rc == 0, out
    assert "rank 0 (ps0) was killed by SIGKILL" in out, out
    assert "starting it again (1 of 1 restarts)" in out
    for worker in ("worker0", "worker1"):  # the same step for every task
        assert f"{worker} | attempt 1 starts at step 8" in out, out
    assert "finished at step 12: the parameters equal an uninterrupted run's bit for bit" \
        in out, out
    files = sorted(os.listdir(tmp_path / "ckpt"))
    assert files[:2] == ["ckpt-12.rill", "ckpt-8.rill"] and len(files) == 4, files
    assert [f.split(".")[:2] for f in files[2:]] == [["shard-ps0", "ckpt-12"],
                                                      ["shard-ps0", "ckpt-8"]], files
    manifest = serialization.load(tmp_path / "ckpt" / "ckpt-12.rill")
    assert manifest["step"] == 12 and [s["file"] for s in manifest["shards"]] == [files[2]]
    assert manifest["shards"][0]["sha256"] == shards.sha256_of(str(tmp_path / "ckpt" /
                                                                   files[2]))
    assert manifest["objects"]["model"]["0.weight"] == {shards.MARKER: {
        "task": "ps:0", "name": "model.0.weight", "shape": [16, 5], "dtype": "float32"}}


# ---- the ps's side, in process --------------------------------------------------------------


class Box:
    def __init__(self):
        self.posted = []

    def post(self, dest, kind, step, entries, tag):
        self.posted.append((dest, kind, {n: a for _, n, a in entries}))


class Server:
    """What checkpoint.serve uses of a GraphServer."""

    def __init__(self, store, here="ps:0"):
        self.store, self.here, self.groups, self.box = store, here, {}, Box()

    def _refuse(self, worker, why):
        self.box.posted.append((worker, "error", why))

    def answer(self):
        dest, kind, body = self.box.posted.pop()
        if kind == "error":
            raise rill.CheckpointError(body, op="test")
        return body


def text(s):
    return np.frombuffer(s.encode(), np.uint8)


def request(kind, **fields):
    entries = [("meta" if isinstance(v, int) else "text", k,
                np.int64(v) if isinstance(v, int) else text(v)) for k, v in fields.items()]
    return wire.decode(wire.encode(kind, 0, entries), "test")


def held_store():
    """A ps's store: two variables (float32, bfloat16), an int step, a gradient."""
    rng = np.random.default_rng(0)
    w = rill.tensor(rng.normal(size=(3, 4)).astype(np.float32))
    return {"model.w": w,
            "model.b": rill.tensor(rng.normal(size=4).astype(np.float32)).to(rill.bfloat16),
            "opt.step": rill.tensor(np.int64(7)),
            "model.w.grad": _grad_holder(rill.tensor(rng.normal(size=(3, 4)).astype(
                np.float32)))}


def values_of(store):
    return {k: (v.grad if k.endswith(".grad") else v).numpy().copy() for k, v in store.items()}


def save_shard(tmp_path, store=None, step=8, token="ckpt-8.0123abcd"):
    server = Server(held_store() if store is None else store)
    shards.serve(server, 1, "save", request("save", directory=str(tmp_path), token=token,
                                             step=step))
    body = server.answer()
    return server, bytes(body["file"]).decode(), bytes(body["sha256"]).hex()


def restore(server, tmp_path, file, sha, step=8):
    shards.serve(server, 1, "restore", request("restore", directory=str(tmp_path), file=file,
                                               sha256=sha, step=step))
    return int(server.answer()["count"])


@pytest.fixture(autouse=True)
def fresh_applied():
    shards._APPLIED.clear()
    yield
    shards._APPLIED.clear()


def test_a_ps_saves_its_variables_with_a_graph_and_a_fresh_ps_restores_them_exactly(tmp_path):
    server, file, sha = save_shard(tmp_path)
    assert file == "shard-ps0.ckpt-8.0123abcd.rill"
    assert sha == shards.sha256_of(str(tmp_path / file))
    saved = serialization.load(tmp_path / file)
    assert (saved["kind"], saved["task"], saved["step"]) == (shards.SHARD_KIND, "ps:0", 8)
    expect = values_of(server.store)
    assert sorted(saved["values"]) == sorted(expect)
    assert saved["values"]["model.b"].dtype is rill.bfloat16

    fresh = Server({})  # a restarted ps holds nothing: the shard makes its variables
    assert restore(fresh, tmp_path, file, sha) == 4
    got = values_of(fresh.store)
    assert sorted(got) == sorted(expect)
    for name in expect:
        np.testing.assert_array_equal(got[name], expect[name], err_msg=name)
    assert fresh.store["model.b"].dtype is rill.bfloat16
    assert fresh.store["model.w.grad"].grad.shape == (3, 4)  # a holder of .grad, as registered


def test_the_save_and_restore_graphs_are_graph_ops_that_lint_and_print():
    store = held_store()
    g = shards.save_graph(store, "/tmp/x.rill", "ps:0", 3)
    assert [n.op for n in g.nodes] == ["read"] * 4 + ["save"]
    assert g.nodes[-1].attrs["names"] == ("model.b", "model.w", "model.w.grad", "opt.step")
    g.lint()
    assert "save(" in str(g)
    values = {k: (v.grad if k.endswith(".grad") else v) for k, v in store.items()}
    r = shards.restore_graph(dict(store), values)
    assert [n.op for n in r.nodes] == ["restore"] + ["assign"] * 4
    r.lint()


def test_restore_is_applied_once_per_checkpoint_however_many_workers_ask(tmp_path):
    server, file, sha = save_shard(tmp_path)
    fresh = Server({})
    assert restore(fresh, tmp_path, file, sha) == 4
    fresh.store["model.w"] = fresh.store["model.w"] + 1  # a step applied since
    before = fresh.store["model.w"].numpy().copy()
    assert restore(fresh, tmp_path, file, sha) == -1  # the second worker: acknowledged only
    np.testing.assert_array_equal(fresh.store["model.w"].numpy(), before)


def refused(server, tmp_path, file, sha, match, step=8):
    before = values_of(server.store)
    with pytest.raises(rill.CheckpointError, match=match):
        restore(server, tmp_path, file, sha, step)
    after = values_of(server.store)
    assert sorted(after) == sorted(before)
    for name in before:  # a refused restore changes nothing
        np.testing.assert_array_equal(after[name], before[name])


def test_a_damaged_shard_is_refused_by_its_sha256_and_then_by_its_crcs(tmp_path):
    server, file, sha = save_shard(tmp_path)
    path = tmp_path / file
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x10
    path.write_bytes(bytes(data))
    refused(server, tmp_path, file, sha, "its sha256 is .* the manifest says")
    # A manifest that agrees with the damaged bytes: rill's own checks still catch it.
    refused(server, tmp_path, file, shards.sha256_of(str(path)), "CRC-32")
    refused(Server({}), tmp_path, "shard-ps0.ckpt-9.0123abcd.rill", sha, "no such file")


def test_a_shard_of_another_task_or_step_is_refused(tmp_path):
    server, file, sha = save_shard(tmp_path)
    refused(server, tmp_path, file, sha, r"at step 8; the manifest asks ps:0 for step 12",
            step=12)
    other, _, _ = save_shard(tmp_path)
    other.here = "ps:1"
    refused(other, tmp_path, file, sha, "restores its own shard")
    # ps:1's file, renamed to look like ps:0's: the file says whose it is.
    ps1 = Server(held_store(), "ps:1")
    shards.serve(ps1, 1, "save", request("save", directory=str(tmp_path),
                                          token="ckpt-8.89abcdef", step=8))
    theirs = bytes(ps1.answer()["file"]).decode()
    os.replace(tmp_path / theirs, tmp_path / "shard-ps0.ckpt-8.89abcdef.rill")
    refused(Server({}), tmp_path, "shard-ps0.ckpt-8.89abcdef.rill",
            shards.sha256_of(str(tmp_path / "shard-ps0.ckpt-8.89abcdef.rill")),
            "holds the state of 'ps:1'")


def test_a_shard_that_does_not_match_what_the_ps_holds_is_refused(tmp_path):
    _, file, sha = save_shard(tmp_path)
    wider = held_store()
    wider["model.w"] = rill.zeros(3, 5)
    refused(Server(wider), tmp_path, file, sha,
            r"model.w: shard float32\[3, 4\] vs held float32\[3, 5\]")
    more = held_store()
    more["model.extra"] = rill.zeros(2)
    refused(Server(more), tmp_path, file, sha, "model.extra: held here, not in the shard")
    retyped = held_store()
    retyped["opt.step"] = rill.tensor(np.int32(7))
    refused(Server(retyped), tmp_path, file, sha, "opt.step: shard int64.* vs held int32")


def test_a_file_that_is_not_a_shard_is_refused(tmp_path):
    path = tmp_path / "shard-ps0.ckpt-8.0123abcd.rill"
    serialization.save({"kind": "something else", "values": {}}, path)
    refused(Server({}), tmp_path, path.name, shards.sha256_of(str(path)), "is not a shard")
    serialization.save({"kind": shards.SHARD_KIND, "version": 1, "task": "ps:0", "step": 8,
                        "values": {"w": 3}}, path)
    refused(Server({}), tmp_path, path.name, shards.sha256_of(str(path)),
            r"its values are not \{name: tensor\}")


@pytest.mark.parametrize("file, sha, why", [
    ("../shard-ps0.ckpt-8.0123abcd.rill", "0" * 64, "restores its own shard"),
    ("shard-ps1.ckpt-8.0123abcd.rill", "0" * 64, "restores its own shard"),
    ("ckpt-8.rill", "0" * 64, "restores its own shard"),
    ("shard-ps0.ckpt-8.0123abcd.rill", "xyz", "is not 64 lowercase hex digits"),
])
def test_restore_requests_naming_other_files_are_refused(tmp_path, file, sha, why):
    refused(Server(held_store()), tmp_path, file, sha, why)


def test_save_requests_are_checked(tmp_path):
    server = Server(held_store())
    for directory, token, why in [("relative/dir", "ckpt-1.0123abcd", "absolute path"),
                                  (str(tmp_path / "missing"), "ckpt-1.0123abcd",
                                   "existing directory"),
                                  (str(tmp_path), "../../etc.0123abcd", "is not <name>"),
                                  (str(tmp_path), "ckpt-1", "is not <name>")]:
        shards.serve(server, 1, "save", request("save", directory=directory, token=token,
                                                 step=1))
        with pytest.raises(rill.CheckpointError, match=why):
            server.answer()
    assert os.listdir(tmp_path) == []


def test_save_and_restore_nodes_check_their_attrs():
    from rill.capture.executor import Program
    g = shards.save_graph(held_store(), "/tmp/x.rill", "ps:0", 3)
    g.nodes[-1].attrs["names"] = ("only-one",)
    with pytest.raises(rill.CheckpointError, match="names 1 values and has 4"):
        Program(g, parallel=False)
    g.nodes[-1].attrs["names"] = ["a", "b", "c", "d"]
    with pytest.raises(rill.CheckpointError, match="distinct str names"):
        Program(g, parallel=False)
    g = shards.save_graph(held_store(), "relative.rill", "ps:0", 3)
    with pytest.raises(rill.CheckpointError, match="absolute str path"):
        Program(g, parallel=False)


# ---- the worker's side, in process ----------------------------------------------------------


SHARD = {"task": "ps:0", "file": "shard-ps0.ckpt-8.0123abcd.rill", "sha256": "ab" * 32}


def marker(shape, name="model.w", task="ps:0", dtype="float32"):
    return {shards.MARKER: {"task": task, "name": name, "shape": list(shape), "dtype": dtype}}


def manifest(tmp_path, objects, shard_list=(SHARD,), step=8):
    path = tmp_path / "ckpt-8.rill"
    serialization.save({"kind": "rill.train.Checkpoint", "step": step, "objects": objects,
                        "shards": list(shard_list)}, path)
    return path


@pytest.fixture
def asked(monkeypatch):
    """The restore requests a worker sends the ps (recorded instead of sent)."""
    calls = []
    monkeypatch.setattr(shards, "restore_shards", lambda s, path, step: calls.append((s, step)))
    return calls


def test_a_worker_restores_its_own_state_and_asks_each_ps_for_its_shard(tmp_path, asked):
    w = rill.zeros(3, 4, device="ps:0")  # a host copy: ps:0 holds the value
    ckpt = Checkpoint(w=w, slots={}, lr=0.5)
    path = manifest(tmp_path, {"w": marker((3, 4)), "slots": {0: {"m": marker((3, 4),
                                                                              "model.w.m")}},
                               "lr": 0.1})
    report = ckpt.restore(path)
    assert asked == [([SHARD], 8)]
    assert ckpt.w is w and ckpt.lr == 0.1
    # An optimizer's slots before its first step stay empty: the ps gives the stand-ins
    # their restored values when a captured step first runs.
    assert ckpt.slots == {}
    assert sorted(report.loaded) == ["lr", "slots.0.m", "w"] and report.step == 8


def test_a_manifest_that_does_not_match_changes_nothing_and_asks_no_ps(tmp_path, asked):
    ckpt = Checkpoint(w=rill.zeros(3, 4, device="ps:0"), local=rill.ones(2), lr=0.5)
    path = manifest(tmp_path, {"w": marker((3, 5)), "local": marker((2,), "x"), "lr": 0.1})
    with pytest.raises(rill.CheckpointError) as e:
        ckpt.restore(path)
    assert "w: checkpoint (3, 5) float32 held by ps:0 as model.w vs model (3, 4) float32 " \
           "on ps:0" in e.value.message
    assert "local: checkpoint (2,) float32 held by ps:0 as x vs model (2,) float32" \
        in e.value.message
    assert asked == [] and ckpt.lr == 0.5
    # a plain checkpoint's value cannot reach a tensor another task holds
    plain = tmp_path / "plain.rill"
    Checkpoint(w=rill.ones(3, 4)).save(plain)
    with pytest.raises(rill.CheckpointError, match=r"w: checkpoint \(3, 4\) float32 vs model "
                                                   r"\(3, 4\) float32 on ps:0"):
        Checkpoint(w=rill.zeros(3, 4, device="ps:0")).restore(plain)


@pytest.mark.parametrize("shard_list, objects, why", [
    ([dict(SHARD, sha256="zz")], {}, "list of shards is damaged"),
    ([dict(SHARD, file="../evil.rill")], {}, "list of shards is damaged"),
    ([SHARD, SHARD], {}, "list of shards is damaged"),
    ([{"task": "ps:0"}], {}, "list of shards is damaged"),
    ([SHARD], {"w": marker((3, 4), task="ps:1")}, "names a task with no shard"),
    ([SHARD], {"w": marker((3, 4), dtype="float99")}, "marker is damaged"),
    ([SHARD], {"w": marker((-1, 4))}, "marker is damaged"),
])
def test_a_damaged_manifest_is_refused(tmp_path, asked, shard_list, objects, why):
    path = manifest(tmp_path, objects, shard_list)
    with pytest.raises(rill.CheckpointError, match=why):
        Checkpoint(w=rill.zeros(3, 4, device="ps:0")).restore(path)
    assert asked == []


def test_a_distributed_checkpoint_outside_its_job(tmp_path):
    t = rill.zeros(3, device="ps:0")
    with pytest.raises(rill.DistributedError, match="not part of a distributed job"):
        Checkpoint(w=t).save(tmp_path / "a.rill")
    assert os.listdir(tmp_path) == []  # no manifest of a checkpoint that was not taken
    path = manifest(tmp_path, {"w": marker((3,))})
    with pytest.raises(rill.DistributedError, match="restore it in the job's processes"):
        Checkpoint(w=t).restore(path)
    with pytest.raises(rill.ArgumentError, match="include=/exclude= cannot select"):
        Checkpoint(w=t).restore(path, include="w")


def test_a_checkpoint_without_tensors_of_other_tasks_is_unchanged(tmp_path):
    path = tmp_path / "plain.rill"
    Checkpoint(w=rill.arange(3.0), step=4).save(path)
    saved = serialization.load(path)
    assert sorted(saved) == ["kind", "objects", "step"]  # no shards, no markers
    ckpt = Checkpoint(w=rill.zeros(3), step=0)
    ckpt.restore(path)
    np.testing.assert_array_equal(ckpt.w.numpy(), [0.0, 1.0, 2.0])
    assert ckpt.step == 4


def test_held_elsewhere_matches_by_task_and_spec():
    held = HeldElsewhere("ps:0", "model.w", (2,), rill.float32)
    assert held.matches(rill.zeros(2, device="ps:0"))
    assert not held.matches(rill.zeros(2, device="ps:1"))
    assert not held.matches(rill.zeros(2))
    assert not held.matches(rill.zeros(2, device="ps:0", dtype=rill.float64))


def test_the_manager_prunes_shards_with_their_manifests_and_those_no_manifest_lists(tmp_path):
    from rill.train import CheckpointManager
    for name in ("shard-ps0.ckpt-1.0123abcd.rill", "shard-ps1.ckpt-1.0123abcd.rill",
                 "shard-ps0.ckpt-2.89abcdef.rill",   # a save that died before its manifest
                 "shard-ps0.notes.0123abcd.rill"):   # not a manager's: left alone
        (tmp_path / name).write_bytes(b"")
    manager = CheckpointManager(Checkpoint(w=rill.zeros(2)), tmp_path, max_to_keep=2)
    manager.save(1)
    assert "shard-ps0.ckpt-1.0123abcd.rill" in os.listdir(tmp_path)
    manager.save(3)
    manager.save(4)
    assert sorted(os.listdir(tmp_path)) == ["ckpt-3.rill", "ckpt-4.rill",
                                            "shard-ps0.notes.0123abcd.rill"]
