"""Checkpoint: save and restore the state of a training run (model, optimizer, step, ...).

A Checkpoint names the objects it tracks. Objects with `state_dict()` and
`load_state_dict(state)` (modules, optimizers) are saved through those; anything else (a step
count, a tensor, a dict of them) is held by the Checkpoint itself and read back as an
attribute. Every saved value has a dotted name: the object's name, then the path inside its
state (`model.layer.weight`, `optimizer.state.0.momentum`, `step`).

Restore compares the file with the live objects first and changes nothing unless all that
is asked for matches, so a failed restore never leaves a model half loaded.

In a distributed job, tensors held by other tasks (the variables of a captured step on a
parameter server) are saved and restored by those tasks, each its own shard; the file at
`path` is then the manifest, written last (lib/distributed/graphs/checkpoint.py).
"""
from __future__ import annotations

import os

from ..errors import ArgumentError, CheckpointError
from ..serialization import load, plan, write
from ..tensor import Tensor
from ..tree import flatten

_KIND = "rill.train.Checkpoint"
_MAX_LISTED = 20  # names per section of a mismatch message; the rest are counted


class Checkpoint:
    """The objects of a training run, saved and restored together.

    >>> import os, tempfile
    >>> from rill.train import Checkpoint
    >>> path = os.path.join(tempfile.mkdtemp(), "run.rill")
    >>> ckpt = Checkpoint(weights=rill.zeros(2), step=10)
    >>> _ = ckpt.save(path)
    >>> ckpt.weights, ckpt.step = rill.ones(2), 0
    >>> report = ckpt.restore(path)
    >>> ckpt.weights, ckpt.step
    (tensor([0., 0.]), 10)
    """

    def __init__(self, **objects):
        if not objects:
            raise ArgumentError("Checkpoint() needs at least one named object, e.g. "
                                "Checkpoint(model=model, optimizer=opt)", op="Checkpoint")
        object.__setattr__(self, "_objects", dict(objects))

    # Plain values are read and replaced as attributes: `ckpt.step += 1`.
    def __getattr__(self, name):
        objects = self.__dict__.get("_objects")
        if objects is None:  # copy/pickle probe a half-built instance
            raise AttributeError(name)
        if name in objects:
            return objects[name]
        raise AttributeError(f"Checkpoint has no object named {name!r}; it tracks "
                             f"{', '.join(objects)}")

    def __setattr__(self, name, value):
        if name not in self._objects:
            raise AttributeError(f"Checkpoint has no object named {name!r}; objects are named "
                                 "when the Checkpoint is made")
        self._objects[name] = value

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._objects)})"

    @property
    def names(self) -> list:
        return list(self._objects)

    def state(self) -> dict:
        """A snapshot of every object's state: {name: state_dict() or value}.

        Containers are copied and tensors are immutable, so later training does not change it.
        """
        state = {name: _state_of(obj) for name, obj in self._objects.items()}
        leaves, rebuild = flatten(state, is_leaf=lambda o: not isinstance(o, (dict, list, tuple)))
        return rebuild(leaves)

    def save(self, path, step=None) -> str:
        """Write every object's state to `path` (atomically); returns the path."""
        return self.write(self.snapshot(path, step), path)

    def snapshot(self, path=None, step=None):
        """The state to write, checked and fixed now; `write` it later from any thread.

        Tensors held by other tasks of a distributed job are not written from here (this
        process has only host copies of their initial values): each task that holds some
        writes its shard now, and the snapshot is the manifest listing the shards.
        """
        state = self.state()
        if _holds_remote(state):
            return _distributed().snapshot(state, path, step, _KIND)
        return plan({"kind": _KIND, "step": step, "objects": state}, path)

    @staticmethod
    def write(snapshot, path) -> str:
        return write(snapshot, path)

    def restore(self, path, strict: bool = True, include=None, exclude=None) -> "RestoreReport":
        """Load the state saved at `path` into the tracked objects.

        Only names under an `include` prefix (and under no `exclude` prefix) are considered;
        prefixes are whole dotted parts (`model.encoder` selects `model.encoder.w`, not
        `model.encoder2.w`). With `strict`, any selected name that is missing, unexpected or
        of another shape or dtype raises CheckpointError listing them all, and nothing is
        changed; without it, the names that match are loaded and the rest are reported.
        An empty dict or list in an object's current state (an optimizer's slots before its
        first step), and a None, take whatever the checkpoint holds there.
        """
        return self.apply(read(path), path, strict=strict, include=include, exclude=exclude)

    def apply(self, saved: dict, path, strict=True, include=None, exclude=None):
        """Restore from the contents of a file already `read` (see `restore`)."""
        shards = saved.get("shards")
        if shards is not None:  # a distributed checkpoint's manifest
            if include is not None or exclude is not None:
                raise ArgumentError("include=/exclude= cannot select in a distributed "
                                    "checkpoint: each task restores its whole shard",
                                    op="restore")
            objects, shards = _distributed().read_manifest(saved, path, HeldElsewhere)
            saved = dict(saved, objects=objects)
        select = _selector(include, exclude)
        report = RestoreReport(os.fspath(path), saved["step"])
        merged = {}
        for name, obj in self._objects.items():
            if name not in saved["objects"]:
                report.missing.extend(_specs(_state_of(obj), name, select, report))
                continue
            merged[name] = _merge(_state_of(obj), saved["objects"][name], name, select, report)
        for name, value in saved["objects"].items():
            if name not in self._objects:
                report.unexpected.extend(_specs(value, name, select, report))
        if strict and (report.missing or report.unexpected or report.mismatched):
            raise CheckpointError(report.mismatch_message(), op="restore")
        if shards is not None:  # each task holding values restores them, all at once
            _distributed().restore_shards(shards, path, saved["step"])
        self._load(merged, report)
        return report

    def _load(self, merged, report):
        touched = {n.split(".", 1)[0] for n in report.loaded}
        previous = {}  # name -> state before, to put back if a later object fails to load
        try:
            for name in merged:
                if name not in touched:
                    continue
                obj = self._objects[name]
                if hasattr(obj, "load_state_dict"):
                    previous[name] = obj.state_dict()
                    obj.load_state_dict(merged[name])
                else:
                    previous[name] = obj
                    self._objects[name] = merged[name]
        except BaseException:
            # All or nothing: objects already loaded get their previous state back.
            for name, state in previous.items():
                obj = self._objects[name]
                if hasattr(obj, "load_state_dict"):
                    try:
                        obj.load_state_dict(state)
                    except Exception:
                        pass
                else:
                    self._objects[name] = state
            raise


class RestoreReport:
    """What a restore loaded and what it skipped, by dotted name."""

    def __init__(self, path: str, step):
        self.path = path
        self.step = step
        self.loaded: list = []
        self.missing: list = []      # "name (spec)" in the objects, not in the checkpoint
        self.unexpected: list = []   # "name (spec)" in the checkpoint, not in the objects
        self.mismatched: list = []   # "name: checkpoint <spec> vs model <spec>"
        self.excluded: list = []     # names left out by include=/exclude=

    @property
    def skipped(self) -> list:
        return self.missing + self.unexpected + self.mismatched + self.excluded

    def _sections(self):
        return (("missing from the checkpoint", self.missing),
                ("unexpected in the checkpoint", self.unexpected),
                ("different shape, dtype or kind", self.mismatched),
                ("left out by include=/exclude=", self.excluded))

    def mismatch_message(self) -> str:
        lines = [f"{self.path} does not match the objects being restored:"]
        for title, names in self._sections()[:3]:
            if names:
                lines.append(f"  {title} ({len(names)}):")
                lines += [f"    {n}" for n in names[:_MAX_LISTED]]
                if len(names) > _MAX_LISTED:
                    lines.append(f"    ... and {len(names) - _MAX_LISTED} more")
        lines.append("Nothing was restored. restore(path, strict=False) loads the names that "
                     "match; include=/exclude= choose names by prefix.")
        return "\n".join(lines)

    def __str__(self) -> str:
        lines = [f"restored {len(self.loaded)} values from {self.path}"]
        for title, names in self._sections():
            if names:
                lines.append(f"  skipped, {title} ({len(names)}): " + ", ".join(
                    names[:_MAX_LISTED]) + (" ..." if len(names) > _MAX_LISTED else ""))
        return "\n".join(lines)

    __repr__ = __str__


def read(path) -> dict:
    """The contents of a Checkpoint file: {'kind', 'step', 'objects'}, fully verified."""
    saved = load(path)
    if not (isinstance(saved, dict) and saved.get("kind") == _KIND and
            isinstance(saved.get("objects"), dict)):
        raise CheckpointError(f"{os.fspath(path)} was not written by Checkpoint.save "
                              "(rill.load reads it as plain data)", op="restore")
    return saved


# ---- tensors other tasks hold --------------------------------------------------------------


class HeldElsewhere:
    """What a distributed checkpoint's manifest says in place of a tensor another task
    holds: that task restores it from its shard."""

    __slots__ = ("task", "name", "shape", "dtype")

    def __init__(self, task: str, name: str, shape: tuple, dtype):
        self.task, self.name, self.shape, self.dtype = task, name, shape, dtype

    def matches(self, t) -> bool:
        """Whether live tensor `t` is the one this stands for (as far as this process can
        tell: a tensor a captured step has used here is known by its name there)."""
        return isinstance(t, Tensor) and t.device.task == self.task and \
            (tuple(t.shape), t.dtype) == (self.shape, self.dtype) and \
            _distributed().held_name(t) in (None, self.name)

    def __repr__(self) -> str:
        return f"{self.shape} {self.dtype.name} held by {self.task} as {self.name}"


def _distributed():
    # rill.distributed loads when a job uses it, not with `import rill`
    from ..distributed.graphs import checkpoint
    return checkpoint


def _holds_remote(value) -> bool:
    """Whether a state holds a tensor of another task (a plain checkpoint's state holds
    none, and takes the path it always took)."""
    if isinstance(value, Tensor):
        return value.device.task is not None
    return _is_container(value) and any(_holds_remote(v) for _, v in _items(value))


def _leaf_names(value, name) -> list:
    if _is_container(value) and len(value):
        return [n for k, v in _items(value) for n in _leaf_names(v, _join(name, k))]
    return [name]


def _holds_elsewhere(value) -> bool:
    if isinstance(value, HeldElsewhere):
        return True
    return _is_container(value) and any(_holds_elsewhere(v) for _, v in _items(value))


# ---- comparing and merging states ---------------------------------------------------------


def _state_of(obj):
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


def _selector(include, exclude):
    include = [include] if isinstance(include, str) else list(include or [])
    exclude = [exclude] if isinstance(exclude, str) else list(exclude or [])

    def under(name, prefixes):
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    return lambda name: (not include or under(name, include)) and not under(name, exclude)


def _join(prefix, key) -> str:
    return f"{prefix}.{key}"


def _describe(value) -> str:
    if isinstance(value, Tensor):
        held = f" on {value.device.task}" if value.device.task is not None else ""
        return f"{tuple(value.shape)} {value.dtype.name}{held}"
    if isinstance(value, HeldElsewhere):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return type(value).__name__
    return type(value).__name__


def _is_container(value) -> bool:
    return isinstance(value, (dict, list, tuple))


def _items(container):
    return container.items() if isinstance(container, dict) else enumerate(container)


def _specs(value, name, select, report) -> list:
    """'name (spec)' of every selected leaf under `value`; unselected ones are excluded."""
    out = []
    if _is_container(value) and len(value):
        for k, v in _items(value):
            out += _specs(v, _join(name, k), select, report)
    elif select(name):
        out.append(f"{name} ({_describe(value)})")
    else:
        report.excluded.append(name)
    return out


def _take(saved, name, select, report):
    """The selected part of a saved subtree, for a place the live state leaves empty."""
    if _holds_elsewhere(saved):
        # Another task restores these values (an optimizer's slots for its variables);
        # this process makes its stand-ins when a captured step first runs, and the task
        # gives them the restored values then. Loading part of such an entry here would
        # leave the object half made, so none of it is.
        report.loaded += _leaf_names(saved, name)
        return _SKIP
    if _is_container(saved) and len(saved):
        kept = [(k, _take(v, _join(name, k), select, report)) for k, v in _items(saved)]
        kept = [(k, v) for k, v in kept if v is not _SKIP]
        if not kept:
            return _SKIP
        return dict(kept) if isinstance(saved, dict) else type(saved)(v for _, v in kept)
    if not select(name):
        report.excluded.append(name)
        return _SKIP
    report.loaded.append(name)
    return saved


_SKIP = object()


def _merge(current, saved, name, select, report):
    """`current` with the selected, matching leaves of `saved` put in; differences noted."""
    if _is_container(current) and not len(current) and _is_container(saved):
        taken = _take(saved, name, select, report)
        return current if taken is _SKIP else taken
    if isinstance(current, dict) and isinstance(saved, dict):
        out = {}
        for k, v in current.items():
            if k in saved:
                out[k] = _merge(v, saved[k], _join(name, k), select, report)
            else:
                report.missing += _specs(v, _join(name, k), select, report)
                out[k] = v
        for k, v in saved.items():
            if k not in current:
                report.unexpected += _specs(v, _join(name, k), select, report)
        return out
    if isinstance(current, (list, tuple)) and isinstance(saved, (list, tuple)):
        out = [_merge(c, s, _join(name, i), select, report) for i, (c, s) in
               enumerate(zip(current, saved))]
        for i in range(len(saved), len(current)):
            report.missing += _specs(current[i], _join(name, i), select, report)
        for i in range(len(current), len(saved)):
            report.unexpected += _specs(saved[i], _join(name, i), select, report)
        out += list(current[len(saved):])
        return type(current)(out) if type(current) in (list, tuple) else type(current)(*out)
    if current is None:  # an unset value takes whatever was saved
        taken = _take(saved, name, select, report)
        return current if taken is _SKIP else taken
    if not select(name):
        report.excluded.append(name)
        return current
    if isinstance(saved, HeldElsewhere) or \
            (isinstance(current, Tensor) and current.device.task is not None):
        # Restored by the task that holds it; a value from a file cannot reach it from here.
        if isinstance(saved, HeldElsewhere) and saved.matches(current):
            _distributed().adopt(current, saved.task, saved.name)  # a restart can fetch it
            report.loaded.append(name)
        else:
            report.mismatched.append(f"{name}: checkpoint {_describe(saved)} vs model "
                                     f"{_describe(current)}")
        return current
    if _is_container(current) or _is_container(saved) or \
            isinstance(current, Tensor) != isinstance(saved, Tensor) or \
            (isinstance(current, Tensor) and (current.shape != saved.shape or
                                              current.dtype is not saved.dtype)):
        report.mismatched.append(f"{name}: checkpoint {_describe(saved)} vs model "
                                 f"{_describe(current)}")
        return current
    if isinstance(saved, Tensor) and saved.device != current.device:
        saved = saved.to(current.device)
    report.loaded.append(name)
    return saved
