"""rill.train.Checkpoint and CheckpointManager: restore checks, subsets, schedules, crashes."""
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import rill
from rill import serialization
from rill.train import Checkpoint, CheckpointManager


class Model:
    """Stands in for rill.nn.Module: a flat state_dict of named tensors."""

    def __init__(self, n_in=3, n_out=4, head=False, seed=0):
        g = np.random.default_rng(seed)
        self.params = {"layer.weight": rill.tensor(g.standard_normal((n_in, n_out)),
                                                   dtype=rill.float32),
                       "layer.bias": rill.zeros(n_out)}
        if head:
            self.params["head.weight"] = rill.ones(n_out, 2)
        self.loads = 0

    def state_dict(self):
        return dict(self.params)

    def load_state_dict(self, state, strict=True):
        assert set(state) == set(self.params), "Checkpoint must hand over a complete state"
        self.params = dict(state)
        self.loads += 1


class Optimizer:
    """Stands in for rill.optim: slots created lazily, int keys, nested param groups."""

    def __init__(self, lr=0.1):
        self.state = {}
        self.groups = [{"lr": lr, "params": [0, 1]}]

    def step(self, model):
        for i, name in enumerate(sorted(model.params)):
            m = self.state.get(i, {"momentum": rill.zeros_like(model.params[name])})["momentum"]
            self.state[i] = {"momentum": m + 1}

    def state_dict(self):
        return {"state": {i: dict(s) for i, s in self.state.items()},
                "param_groups": [dict(g) for g in self.groups]}

    def load_state_dict(self, state, strict=True):
        self.state = {i: dict(s) for i, s in state["state"].items()}
        self.groups = [dict(g) for g in state["param_groups"]]


def values(t):
    return np.asarray(t.numpy()).tolist()


def test_save_and_restore_model_optimizer_and_plain_values(tmp_path):
    model, opt = Model(seed=1), Optimizer(lr=0.5)
    opt.step(model)
    ckpt = Checkpoint(model=model, optimizer=opt, step=7, scale=rill.tensor(2.0))
    path = ckpt.save(tmp_path / "a.rill")
    weight = values(model.params["layer.weight"])

    model2, opt2 = Model(seed=2), Optimizer(lr=0.1)  # a fresh run: no optimizer slots yet
    ckpt2 = Checkpoint(model=model2, optimizer=opt2, step=0, scale=rill.tensor(1.0))
    report = ckpt2.restore(path)
    assert values(model2.params["layer.weight"]) == weight
    assert values(opt2.state[0]["momentum"]) == [1.0] * 4 and list(opt2.state) == [0, 1]
    assert opt2.groups == [{"lr": 0.5, "params": [0, 1]}]
    assert ckpt2.step == 7 and float(ckpt2.scale) == 2.0
    assert "model.layer.weight" in report.loaded and "optimizer.state.0.momentum" in report.loaded
    assert report.skipped == []


def test_with_rill_nn_and_rill_optim(tmp_path):
    def run(seed):
        rill.manual_seed(seed)
        model = rill.nn.Linear(3, 2)
        return model, rill.optim.Adam(model.parameters(), lr=0.01)

    model, opt = run(0)
    model(rill.ones(4, 3)).square().mean().backward()
    opt.step()
    path = Checkpoint(model=model, optimizer=opt, step=1).save(tmp_path / "a.rill")

    model2, opt2 = run(1)
    weight = model2.weight  # restored in place: the Parameter object stays the same
    ckpt = Checkpoint(model=model2, optimizer=opt2, step=0)
    ckpt.restore(path)
    assert model2.weight is weight and values(weight) == values(model.weight)
    assert values(opt2.state[weight]["exp_avg"]) == values(opt.state[model.weight]["exp_avg"])
    assert ckpt.step == 1


def test_state_is_a_snapshot(tmp_path):
    model = Model()
    ckpt = Checkpoint(model=model, history=[1, 2])
    snap = ckpt.snapshot(tmp_path / "s.rill", step=1)
    model.params["layer.bias"] = rill.ones(4)
    ckpt.history.append(3)
    Checkpoint.write(snap, tmp_path / "s.rill")
    saved = rill.serialization.load(tmp_path / "s.rill")["objects"]
    assert values(saved["model"]["layer.bias"]) == [0.0] * 4 and saved["history"] == [1, 2]


def test_mismatch_is_refused_before_anything_changes(tmp_path):
    path = Checkpoint(model=Model(3, 4, head=False), step=5).save(tmp_path / "a.rill")
    other = Model(4, 4, head=True, seed=3)
    before = values(other.params["layer.weight"])
    ckpt = Checkpoint(model=other, step=0, extra=1)
    with pytest.raises(rill.CheckpointError) as info:
        ckpt.restore(path)
    message = str(info.value)
    assert "model.layer.weight: checkpoint (3, 4) float32 vs model (4, 4) float32" in message
    assert "missing from the checkpoint (2)" in message
    assert "model.head.weight ((4, 2) float32)" in message and "extra (int)" in message
    assert "Nothing was restored" in message and os.fspath(path) in message
    # Nothing changed, not even the parts that matched.
    assert other.loads == 0 and values(other.params["layer.weight"]) == before
    assert ckpt.step == 0


def test_unexpected_names_and_dtype_mismatch_are_listed(tmp_path):
    saved = Model(head=True)
    saved.params["layer.bias"] = rill.zeros(4, dtype=rill.float16)
    path = Checkpoint(model=saved, old=3).save(tmp_path / "a.rill")
    with pytest.raises(rill.CheckpointError) as info:
        Checkpoint(model=Model()).restore(path)
    message = str(info.value)
    assert "unexpected in the checkpoint (2)" in message
    assert "model.head.weight ((4, 2) float32)" in message and "old (int)" in message
    assert "model.layer.bias: checkpoint (4,) float16 vs model (4,) float32" in message


def test_non_strict_restore_loads_what_matches_and_reports_the_rest(tmp_path):
    path = Checkpoint(model=Model(3, 4, seed=1), step=9).save(tmp_path / "a.rill")
    target = Model(5, 4, head=True, seed=2)
    ckpt = Checkpoint(model=target, step=0)
    report = ckpt.restore(path, strict=False)
    assert sorted(report.loaded) == ["model.layer.bias", "step"]
    assert report.mismatched == ["model.layer.weight: checkpoint (3, 4) float32 vs "
                                 "model (5, 4) float32"]
    assert report.missing == ["model.head.weight ((4, 2) float32)"]
    assert target.params["layer.weight"].shape == (5, 4) and ckpt.step == 9
    assert "skipped" in str(report) and "model.head.weight" in str(report)


def test_include_and_exclude_select_names_by_dotted_prefix(tmp_path):
    src = Model(head=True, seed=1)
    src.params["layer2.weight"] = rill.full((2,), 7.0)
    path = Checkpoint(model=src, step=4).save(tmp_path / "a.rill")

    dst = Model(head=True, seed=2)
    dst.params["layer2.weight"] = rill.zeros(2)
    dst.params["new.weight"] = rill.zeros(1)  # only in the target, outside the selection
    ckpt = Checkpoint(model=dst, step=0)
    report = ckpt.restore(path, include="model.layer", exclude=["model.layer.bias"])
    assert report.loaded == ["model.layer.weight"]  # not layer2: prefixes are whole parts
    assert values(dst.params["layer.weight"]) == values(src.params["layer.weight"])
    assert values(dst.params["layer.bias"]) == [0.0] * 4 and values(dst.params["layer2.weight"]) \
        == [0.0, 0.0]
    assert ckpt.step == 0
    assert set(report.excluded) >= {"model.layer.bias", "model.layer2.weight", "step",
                                    "model.new.weight"}

    # Strict still applies inside the selection.
    with pytest.raises(rill.CheckpointError, match="model.new.weight"):
        ckpt.restore(path, include="model.new")


def test_a_failing_load_state_dict_rolls_back_the_others(tmp_path):
    path = Checkpoint(a=Model(seed=1), step=5, b=Model(seed=1)).save(tmp_path / "a.rill")
    a, b = Model(seed=2), Model(seed=2)
    before = values(a.params["layer.weight"])

    def broken(state, strict=True):
        raise RuntimeError("disk on fire")

    b.load_state_dict = broken
    ckpt = Checkpoint(a=a, step=0, b=b)
    with pytest.raises(RuntimeError):
        ckpt.restore(path)
    assert values(a.params["layer.weight"]) == before and ckpt.step == 0


def test_an_unset_value_takes_what_was_saved(tmp_path):
    path = Checkpoint(best={"loss": 0.5, "w": rill.ones(2)}).save(tmp_path / "a.rill", step=3)
    ckpt = Checkpoint(best=None)
    report = ckpt.restore(path)
    assert report.step == 3 and sorted(report.loaded) == ["best.loss", "best.w"]
    assert ckpt.best["loss"] == 0.5 and values(ckpt.best["w"]) == [1.0, 1.0]


def test_a_plain_file_is_not_a_checkpoint(tmp_path):
    path = rill.serialization.save({"w": rill.ones(2)}, tmp_path / "plain.rill")
    with pytest.raises(rill.CheckpointError, match="not written by Checkpoint.save"):
        Checkpoint(w=rill.ones(2)).restore(path)


# ---- CheckpointManager ---------------------------------------------------------------------------


def names(manager):
    return [os.path.basename(p) for p in manager.checkpoints]


def test_manager_keeps_the_newest_n(tmp_path):
    ckpt = Checkpoint(step=0)
    manager = CheckpointManager(ckpt, tmp_path, max_to_keep=3)
    assert manager.latest is None and manager.restore_latest() is None
    for step in (5, 10, 20, 30, 100):
        ckpt.step = step
        manager.save(step)
    assert names(manager) == ["ckpt-20.rill", "ckpt-30.rill", "ckpt-100.rill"]  # by step
    assert manager.latest == os.path.join(str(tmp_path), "ckpt-100.rill")
    ckpt.step = -1
    assert manager.restore_latest() == 100 and ckpt.step == 100


def test_a_step_older_than_the_newest_file_is_refused(tmp_path):
    # A run restarted from scratch in the same directory would otherwise have its new
    # checkpoints pruned at once (they sort before the old run's).
    ckpt = Checkpoint(step=0)
    CheckpointManager(ckpt, tmp_path, max_to_keep=1).save(100)
    manager = CheckpointManager(ckpt, tmp_path, max_to_keep=1)
    with pytest.raises(rill.CheckpointError, match="ckpt-100.*restore_latest"):
        manager.save(20)
    assert names(manager) == ["ckpt-100.rill"]
    assert manager.save(100).endswith("ckpt-100.rill")  # the same step again: replaced


def test_every_n_steps(tmp_path):
    manager = CheckpointManager(Checkpoint(x=1), tmp_path, max_to_keep=None, every_n_steps=3)
    saved = [step for step in range(10) if manager.maybe_save(step)]
    assert saved == [3, 6, 9] and names(manager) == ["ckpt-3.rill", "ckpt-6.rill", "ckpt-9.rill"]
    # A new manager on the same directory counts from the newest checkpoint.
    again = CheckpointManager(Checkpoint(x=1), tmp_path, every_n_steps=3)
    assert [s for s in range(9, 14) if again.maybe_save(s)] == [12]


def test_every_seconds_with_a_fake_clock(tmp_path):
    now = [100.0]
    manager = CheckpointManager(Checkpoint(x=1), tmp_path, every_seconds=60,
                                clock=lambda: now[0])
    saved = []
    for step in range(1, 11):
        now[0] += 25  # each step takes 25 s
        if manager.maybe_save(step):
            saved.append(step)
    assert saved == [3, 6, 9]  # at 75 s, 150 s, 225 s
    assert not manager.maybe_save(9)  # never twice for one step


def test_maybe_save_needs_a_schedule(tmp_path):
    with pytest.raises(rill.ArgumentError, match="every_n_steps"):
        CheckpointManager(Checkpoint(x=1), tmp_path).maybe_save(1)


def test_background_save_writes_the_state_taken_at_save_time(tmp_path, monkeypatch):
    gate = threading.Event()
    threads = []
    real_write = serialization.write

    def slow_write(plan, path):
        threads.append(threading.current_thread().name)
        assert gate.wait(5)
        return real_write(plan, path)

    monkeypatch.setattr("rill.train.checkpoint.write", slow_write)
    ckpt = Checkpoint(w=rill.zeros(3))
    manager = CheckpointManager(ckpt, tmp_path, background=True)
    manager.save(1)
    ckpt.w = rill.ones(3)  # training goes on while the write is held up
    assert manager.latest is None
    gate.set()
    manager.wait()
    assert threads[0].startswith("rill-ckpt")
    assert names(manager) == ["ckpt-1.rill"]
    ckpt.w = rill.full((3,), 5.0)
    assert manager.restore_latest() == 1 and values(ckpt.w) == [0.0] * 3
    manager.close()


def test_background_errors_are_raised_at_the_next_save_or_wait(tmp_path, monkeypatch):
    def failing(plan, path):
        raise OSError("disk gone")

    ckpt = Checkpoint(x=1)
    with CheckpointManager(ckpt, tmp_path, background=True) as manager:
        monkeypatch.setattr("rill.train.checkpoint.write", failing)
        manager.save(1)  # returns at once; the failure comes later
        with pytest.raises(rill.CheckpointError, match="background checkpoint write failed.*"
                                                        "disk gone"):
            manager.save(2)
        monkeypatch.undo()
        manager.save(3)
        manager.wait()  # nothing pending, no error left over
        assert names(manager) == ["ckpt-3.rill"]


def test_unsavable_state_is_reported_on_the_callers_thread(tmp_path):
    manager = CheckpointManager(Checkpoint(x=np.ones(2)), tmp_path, background=True)
    with pytest.raises(rill.CheckpointError, match="numpy.ndarray at 'objects.x'"):
        manager.save(1)
    manager.close()


def corrupt(path):
    raw = bytearray(Path(path).read_bytes())
    raw[-1] ^= 0xFF
    with open(path, "wb") as f:
        f.write(raw)


def test_a_damaged_newest_checkpoint_raises_unless_fallback(tmp_path):
    ckpt = Checkpoint(step=0)
    manager = CheckpointManager(ckpt, tmp_path)
    for step in (1, 2):
        ckpt.step = step
        manager.save(step)
    corrupt(manager.latest)
    with pytest.raises(rill.CheckpointError, match="ckpt-2.rill"):
        manager.restore_latest()
    with pytest.warns(RuntimeWarning, match="skipping a damaged checkpoint.*ckpt-2.rill"):
        assert manager.restore_latest(fallback=True) == 1
    assert ckpt.step == 1


def test_a_mismatch_never_falls_back(tmp_path):
    CheckpointManager(Checkpoint(w=rill.ones(2)), tmp_path).save(1)
    manager = CheckpointManager(Checkpoint(w=rill.ones(3)), tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(rill.CheckpointError, match=r"w: checkpoint \(2,\) float32"):
            manager.restore_latest(fallback=True)


CRASHING_WRITER = r"""
import os, signal, sys
import rill
from rill import serialization
from rill.train import Checkpoint, CheckpointManager

real_open = open
class Dies:
    # A write that kills the process halfway: no cleanup of any kind can run.
    def __init__(self, *args):
        self.f = real_open(*args)
        self.left = 20000
    def write(self, data):
        n = memoryview(data).nbytes
        if n > self.left:
            self.f.write(bytes(memoryview(data).cast("B")[:self.left]))
            self.f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        self.left -= n
        return self.f.write(data)
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()

serialization.open = Dies
manager = CheckpointManager(Checkpoint(w=rill.ones(10000)), sys.argv[1])
manager.save(2)
"""


def test_a_crash_mid_write_leaves_the_previous_checkpoint(tmp_path):
    ckpt = Checkpoint(w=rill.zeros(10000))
    CheckpointManager(ckpt, tmp_path).save(1)
    run = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(tmp_path)],
                         capture_output=True, timeout=60)
    assert run.returncode == -9, run.stderr.decode()
    leftovers = sorted(os.listdir(tmp_path))
    assert leftovers[0].startswith(".ckpt-2.rill.") and leftovers[1:] == ["ckpt-1.rill"]
    assert os.path.getsize(tmp_path / leftovers[0]) == 20000  # the half-written temp file

    manager = CheckpointManager(ckpt, tmp_path)  # starting up removes stale temp files
    assert os.listdir(tmp_path) == ["ckpt-1.rill"]
    assert names(manager) == ["ckpt-1.rill"]
    ckpt.w = rill.ones(10000)
    assert manager.restore_latest() == 1 and values(ckpt.w) == [0.0] * 10000


def test_a_background_write_failing_at_exit_is_reported(tmp_path):
    import subprocess
    import sys
    code = (
        "import rill, time\n"
        "import rill.train.checkpoint as C\n"
        "from rill.train import Checkpoint, CheckpointManager\n"
        f"m = CheckpointManager(Checkpoint(step=0), {str(tmp_path)!r}, background=True)\n"
        "def fail(*a, **k):\n"
        "    time.sleep(0.2)\n"
        "    raise OSError('disk full')\n"
        "C.Checkpoint.write = staticmethod(fail)\n"
        "m.save(1)\n")  # the script ends with the write still in flight
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert "background checkpoint write failed" in proc.stderr
    assert "disk full" in proc.stderr
