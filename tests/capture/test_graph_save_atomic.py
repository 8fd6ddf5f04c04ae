"""A saved graph survives a crash at any moment of `f.save(dir)` (issue 14, finding 3).

The directory holds model A; a forked child saves model B (another architecture, the same
signature) into it and is SIGKILLed at one os-level step of the save (each step in turn), or
after a random delay. Afterwards the directory must load, and compute exactly A or exactly B:
never B's weights beside A's graph, never an error.
"""
from __future__ import annotations

import builtins
import os
import random
import shutil
import signal

import numpy as np
import pytest

import rill
from rill import nn

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

X = rill.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))


def _captured(kind: str):
    rill.manual_seed(1 if kind == "A" else 2)
    if kind == "A":
        model = nn.Linear(4, 3)
    else:
        model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    f = rill.capture(model)
    expected = f(X).numpy()
    return f, expected


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    a, want_a = _captured("A")
    b, want_b = _captured("B")
    template = tmp_path_factory.mktemp("saved") / "model"
    a.save(template)
    return template, b, want_a, want_b


class _Killer:
    """Counts the os-level steps of a save and SIGKILLs this process at step `at`."""

    def __init__(self, at: int):
        self.at, self.step = at, 0

    def tick(self):
        if self.step == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.step += 1

    def install(self):
        for name in ("replace", "rename", "fsync", "unlink", "makedirs", "open"):
            original = getattr(os, name)
            setattr(os, name, self._wrap(original))
        real_open = builtins.open
        killer = self

        def counted_open(*args, **kwargs):
            killer.tick()
            f = real_open(*args, **kwargs)
            if "w" in str(args[1] if len(args) > 1 else kwargs.get("mode", "r")) or \
                    "x" in str(args[1] if len(args) > 1 else kwargs.get("mode", "r")):
                write = f.write

                def counted_write(data):
                    killer.tick()
                    n = write(data[: len(data) // 2])  # a torn write, then the rest
                    killer.tick()
                    return n + write(data[len(data) // 2:])
                f.write = counted_write
            return f
        builtins.open = counted_open

    def _wrap(self, fn):
        def wrapped(*args, **kwargs):
            self.tick()
            return fn(*args, **kwargs)
        return wrapped


def _save_in_child(directory, model, at=None):
    """Fork; the child saves `model` into `directory` (killed at step `at`, if given) and
    exits 0 when the save finished. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            if at is not None:
                _Killer(at).install()
            model.save(directory)
            os._exit(0)
        except BaseException:
            os._exit(3)
    return pid


def _outcome(directory, want_a, want_b) -> str:
    loaded = rill.load_graph(directory)
    got = loaded(X).numpy()
    if got.shape == want_a.shape and np.array_equal(got, want_a):
        return "old"
    if got.shape == want_b.shape and np.array_equal(got, want_b):
        return "new"
    raise AssertionError(f"{directory} computes neither the old model nor the new one")


def _fresh(template, tmp_path, i):
    directory = tmp_path / f"run{i}"
    shutil.copytree(template, directory)
    return directory


@pytest.mark.timeout(120)
def test_kill_at_every_step_of_a_save_leaves_old_or_new(models, tmp_path):
    template, b, want_a, want_b = models
    seen = []
    for at in range(500):
        directory = _fresh(template, tmp_path, at)
        _, status = os.waitpid(_save_in_child(directory, b, at), 0)
        if os.WIFEXITED(status):  # the save finished before step `at`: every step was tried
            assert os.WEXITSTATUS(status) == 0
            assert _outcome(directory, want_a, want_b) == "new"
            break
        assert os.WTERMSIG(status) == signal.SIGKILL
        seen.append(_outcome(directory, want_a, want_b))
    else:
        raise AssertionError("the save never finished")
    assert len(seen) >= 10, f"only {len(seen)} steps: the step counter sees too little"
    assert seen[0] == "old" and seen[-1] == "new" and "old" in seen and "new" in seen
    print(f"{len(seen)} kill points: {seen.count('old')} old, {seen.count('new')} new")


@pytest.mark.timeout(120)
def test_kill_at_random_moments_leaves_old_or_new(models, tmp_path):
    template, b, want_a, want_b = models
    rng = random.Random(0)
    start = os.times().elapsed
    _, status = os.waitpid(_save_in_child(_fresh(template, tmp_path, "timing"), b), 0)
    duration = max(os.times().elapsed - start, 0.005)
    outcomes = []
    for i in range(60):
        directory = _fresh(template, tmp_path, i)
        pid = _save_in_child(directory, b)
        _sleep(rng.uniform(0, duration * 1.2))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        outcomes.append(_outcome(directory, want_a, want_b))
    assert set(outcomes) <= {"old", "new"}
    print(f"60 random kills: {outcomes.count('old')} old, {outcomes.count('new')} new")


def _sleep(seconds: float) -> None:
    import time
    time.sleep(seconds)


def test_a_save_cut_short_is_cleaned_up_by_the_next(models, tmp_path):
    template, b, want_a, want_b = models
    directory = _fresh(template, tmp_path, "clean")
    before = set(os.listdir(directory))
    _save_in_child(directory, b, at=8)
    os.wait()
    b.save(directory)
    after = set(os.listdir(directory))
    assert len(after) == 3 and "manifest.json" in after and not (after & before - {"manifest.json"})
    assert _outcome(directory, want_a, want_b) == "new"
