"""Checkpoints of a distributed job: each task saves and restores the variables it holds.

Once a captured step has run, a ps holds the variables placed on it (and their optimizer
slots); the worker's tensors for them are host copies of their initial values. So a
`rill.train.Checkpoint` whose objects hold tensors of other tasks is written in shards:

    the chief   asks every ps it has registered with to save (all requests posted, then
                every answer awaited: the ps write in parallel), then writes the manifest
                itself, last and atomically: its own objects' state, each tensor of
                another task replaced by a marker (task, name there, spec), and for each
                ps its shard file, that file's sha256 and the step. A crash before the
                manifest is renamed into place leaves no checkpoint, only stray shards.
    a ps        ("save") runs [read(v) for each variable it holds -> save(names)], whose
                save node writes `shard-<task>.<token>.rill` (rill's own format) atomically
                in the directory, and answers with the file's name and sha256.
                ("restore") checks the shard named in the request (its sha256 against the
                manifest's, then rill's CRCs, its task, step, names, shapes and dtypes
                against what the ps holds), then runs [restore(names) -> assign(v) ...].
                Values it does not hold yet (a restarted ps holds nothing) are made; the
                worker's registration adopts them. Several workers restore one checkpoint:
                a ps applies a shard once (per directory and file) and acknowledges again.
    a worker    restoring reads the manifest, asks each ps named there to restore its shard,
                and loads its own objects from the manifest; the step is the manifest's.

A ps saves every variable it holds, and the ".grad" variables too (a step may read them
before writing them). Requests run on the worker's executor thread of the ps (server.py),
after that worker's earlier steps; the ps also waits until those steps were applied (sync
replicas apply a step once every worker contributed) and holds the replicas' locks while it
reads or assigns, so a shard is the state after one whole step.
"""
from __future__ import annotations

import os
import re
import secrets
import threading

import numpy as np

from ... import files
from ...capture import graph_ops
from ...errors import ArgumentError, CheckpointError, DistributedError, Error
from ...serialization import load_from, plan, save
from ...tensor import new_tensor, Tensor
from ...capture.ir import Graph, Variable
from ...capture.executor import Program

SHARD_KIND, SHARD_VERSION = "rill.distributed.Shard", 1
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,80}\.[0-9a-f]{8}$")
_SHARD = re.compile(r"^shard-(ps|worker)(\d+)\.([A-Za-z0-9_-]{1,80}\.[0-9a-f]{8})\.rill$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_TASK = re.compile(r"^(ps|worker):(\d+)$")
MARKER = "$held_by_task"   # a manifest's stand-in for a tensor another task holds
NO_STEP = -1               # the wire's step for a checkpoint saved without one


def shard_name(task: str, token: str) -> str:
    """'ps:0', 'ckpt-8.1a2b3c4d' -> 'shard-ps0.ckpt-8.1a2b3c4d.rill'."""
    return f"shard-{task.replace(':', '')}.{token}.rill"


def sha256_of(path: str) -> str:
    """The SHA-256 of the shard file at `path`, read as a regular file (never a link: a
    shard lies beside its manifest as itself)."""
    f = _open_shard(path)
    with f:
        return files.sha256(f, path, op="restore")


def _open_shard(path: str):
    try:
        f, _ = files.open_regular(path, op="restore", follow_symlinks=False)
    except CheckpointError:
        if not os.path.lexists(path):
            raise CheckpointError(f"{path}: no such file (a shard of a distributed checkpoint)",
                                  op="restore") from None
        raise
    return f


# ==== the graph ops ==========================================================================


def handler(node, graph):
    """run(args, inputs) for a save or restore node, its attrs checked once (see graph_ops)."""
    names = node.attrs.get("names")
    if type(names) is not tuple or not all(type(n) is str for n in names) or \
            len(set(names)) != len(names):
        raise CheckpointError(f"a {node.op} node needs distinct str names, got {names!r}",
                              op=node.op)
    count = len(node.inputs if node.op == "save" else node.outputs)
    if count != len(names):
        raise CheckpointError(f"a {node.op} node names {len(names)} values and has {count}",
                              op=node.op)
    return (_save_handler if node.op == "save" else _restore_handler)(node, names)


def _save_handler(node, names):
    path, task, step = node.attrs.get("path"), node.attrs.get("task"), node.attrs.get("step")
    if type(path) is not str or not os.path.isabs(path) or type(task) is not str or \
            type(step) is not int:
        raise CheckpointError(f"a save node needs an absolute str path, a str task and an int "
                              f"step, got {path!r}, {task!r}, {step!r}", op="save")
    specs = [(v.dtype, v.device) for v in node.inputs]

    def run(args, inputs):
        values = {name: new_tensor(buffer, dtype, device)
                  for name, buffer, (dtype, device) in zip(names, inputs, specs)}
        save({"kind": SHARD_KIND, "version": SHARD_VERSION, "task": task, "step": step,
              "values": values}, path)
        args.written = (path, sha256_of(path))
        return ()
    return run


def _restore_handler(node, names):
    specs = [(v.shape, v.dtype) for v in node.outputs]

    def run(args, inputs):
        # args.shard: the shard's values, read and checked before this graph was built
        out = []
        for name, (shape, dtype) in zip(names, specs):
            t = args.shard.get(name)
            if t is None or t.shape != shape or t.dtype is not dtype:
                raise CheckpointError(f"the shard's {name} is not {dtype.name}{list(shape)}",
                                      op="restore")
            out.append(t._data)
        return tuple(out)
    return run


class ShardArgs:
    """What a save or restore graph's nodes need: the shard read (restore), and where the
    save node puts the file it wrote and its sha256."""

    def __init__(self, shard=None):
        self.shard, self.written = shard, None


# ==== the ps's side ==========================================================================


_APPLIED: set = set()  # (directory, shard file) restored by this process: applied once
_RESTORING = threading.Lock()  # workers' executor threads restore one at a time


def serve(server, worker: int, kind: str, message) -> None:
    """Answer a worker's "save" or "restore" request (on that worker's executor thread)."""
    from .postbox import REPLY
    try:
        entries = (_save if kind == "save" else _restore)(server, worker, message)
    except Exception as e:
        text = f"{type(e).__name__}: {e.message}" if isinstance(e, Error) else \
            f"{type(e).__name__}: {e}"
        server._refuse(worker, text)   # the worker waits on the reply tag: tell it there
        if isinstance(e, Error):
            return                     # the request was refused; the ps serves on
        raise
    server.box.post(worker, "ack", 0, entries, REPLY)


def _save(server, worker: int, message) -> list:
    directory, token = _directory(message), _text(message, "token")
    if not _TOKEN.match(token):
        raise DistributedError(f"a save request's token {token[:90]!r} is not "
                               "<name>.<8 hex digits>", op="save")
    step = _int(message, "step")
    path = os.path.join(directory, shard_name(server.here, token))
    args = ShardArgs()
    with _quiet(server):
        graph = save_graph(server.store, path, server.here, step)
        _program(graph)(args)
    written, digest = args.written
    return [("meta", "file", _bytes(os.path.basename(written))),
            ("meta", "sha256", np.frombuffer(bytes.fromhex(digest), np.uint8)),
            ("meta", "count", np.int64(len(graph.variables)))]


def _restore(server, worker: int, message) -> list:
    directory, file = _directory(message), _text(message, "file")
    expected, step = _text(message, "sha256"), _int(message, "step")
    found = _SHARD.match(file)
    if found is None or f"{found.group(1)}:{int(found.group(2))}" != server.here:
        raise CheckpointError(f"{server.here} restores its own shard "
                              f"({shard_name(server.here, '<token>')}), not {file[:120]!r}",
                              op="restore")
    if not _HEX.match(expected):
        raise CheckpointError(f"a restore request's sha256 {expected[:70]!r} is not 64 "
                              "lowercase hex digits", op="restore")
    key = (os.path.realpath(directory), file)
    with _RESTORING:  # several workers ask for the same shard; the first applies it
        if key in _APPLIED:
            return [("meta", "count", np.int64(-1))]
        path = os.path.join(directory, file)
        values = read_shard(path, expected, server.here, step)
        check_against(values, server.store, server.here, path)
        with _quiet(server):
            graph = restore_graph(server.store, values)
            _program(graph)(ShardArgs(values))
        _APPLIED.add(key)
    return [("meta", "count", np.int64(len(values)))]


def read_shard(path: str, sha256: str, task: str, step: int) -> dict:
    """{name: tensor} of a shard file, after checking its sha256 against the manifest's,
    then everything in it (rill's CRCs; kind, task, step, names)."""
    with _open_shard(path) as f:  # one open file: what is loaded is what was hashed
        digest = files.sha256(f, path, op="restore")
        if digest != sha256:
            raise CheckpointError(f"{path}: its sha256 is {digest[:16]}..., the manifest says "
                                  f"{sha256[:16]}...: the shard was damaged or replaced after "
                                  "the checkpoint was written; restore an older checkpoint",
                                  op="restore")
        f.seek(0)
        doc = load_from(f, path)
    if not isinstance(doc, dict) or doc.get("kind") != SHARD_KIND or \
            set(doc) != {"kind", "version", "task", "step", "values"}:
        raise CheckpointError(f"{path} is not a shard of a distributed checkpoint "
                              f"({SHARD_KIND})", op="restore")
    if doc["version"] != SHARD_VERSION:
        raise CheckpointError(f"{path}: shard format version {doc['version']!r}; this rill "
                              f"reads version {SHARD_VERSION}", op="restore")
    if doc["task"] != task or doc["step"] != step:
        raise CheckpointError(f"{path} holds the state of {doc['task']!r} at step "
                              f"{doc['step']!r}; the manifest asks {task} for step {step}",
                              op="restore")
    values = doc["values"]
    if not isinstance(values, dict) or not all(
            type(k) is str and isinstance(v, Tensor) for k, v in values.items()):
        raise CheckpointError(f"{path}: its values are not {{name: tensor}}", op="restore")
    return values


def check_against(values: dict, store: dict, here: str, path: str) -> None:
    """Refuse a shard that does not match what this ps holds (names, shapes, dtypes): a
    restarted ps holds nothing yet and takes the shard as it is."""
    mismatched = []
    for name, holder in store.items():
        held = holder.grad if name.endswith(".grad") else holder
        t = values.get(name)
        if t is None:
            mismatched.append(f"{name}: held here, not in the shard")
        elif held is not None and (t.shape, t.dtype) != (held.shape, held.dtype):
            mismatched.append(f"{name}: shard {t.dtype.name}{list(t.shape)} vs held "
                              f"{held.dtype.name}{list(held.shape)}")
    if mismatched:
        raise CheckpointError(f"{path} does not match the variables {here} holds: " +
                              "; ".join(mismatched[:10]) +
                              (f" and {len(mismatched) - 10} more" if len(mismatched) > 10
                               else "") + ". Nothing was restored", op="restore")


def save_graph(store: dict, path: str, task: str, step: int):
    """[read(v) for every variable in `store` -> save(names)]."""
    from ... import devices
    graph = Graph(name=f"{task}.save")
    values, names = [], []
    for key in sorted(store):
        variable = _variable(key, store[key])
        if variable is None:
            continue
        graph.variables.append(variable)
        read = graph.add("read", (), {"var": len(graph.variables) - 1},
                         [(variable.shape, variable.dtype)], devices.cpu)
        values.append(read.outputs[0])
        names.append(key)
    graph.add("save", values, {"names": tuple(names), "path": path, "task": task,
                               "step": step}, (), devices.cpu)
    return graph


def restore_graph(store: dict, values: dict):
    """[restore(names) -> assign(v) for each], making in `store` the variables it lacks."""
    from ... import devices
    from .registration import _grad_holder
    graph = Graph(name="restore")
    names = sorted(values)
    for key in names:
        t = values[key]
        made = new_tensor(np.zeros(t.shape, t.dtype.storage), t.dtype, devices.cpu)
        if key not in store:  # a later registration adopts it (registration.decode)
            store[key] = _grad_holder(made) if key.endswith(".grad") else made
        elif key.endswith(".grad") and store[key].grad is None:
            store[key].grad = made
        graph.variables.append(_variable(key, store[key]))
    restore = graph.add("restore", (), {"names": tuple(names)},
                        [(values[k].shape, values[k].dtype) for k in names], devices.cpu)
    for i, v in enumerate(restore.outputs):
        graph.add("assign", (v,), {"var": i}, (), devices.cpu)
    return graph


def _variable(key: str, holder):
    from ... import devices
    kind = "grad" if key.endswith(".grad") else "value"
    target = holder.grad if kind == "grad" else holder
    if target is None or not hasattr(target, "_data"):
        return None
    name = key[:-5] if kind == "grad" else key
    return Variable(holder, kind, name, target.shape, target.dtype, devices.cpu)


def _program(graph):
    return Program(graph.lint(), parallel=False)


class _quiet:
    """Every replica group's lock held: no step applies while a shard is read or assigned.
    The server starts a checkpoint request only once the worker's earlier steps have been
    applied (GraphServer._advance)."""

    def __init__(self, server):
        self.groups = [server.groups[k] for k in sorted(server.groups)]

    def __enter__(self):
        for group in self.groups:
            group.lock.acquire()

    def __exit__(self, *exc):
        for group in reversed(self.groups):
            group.lock.release()


def _directory(message) -> str:
    directory = _text(message, "directory")
    if not os.path.isabs(directory) or not os.path.isdir(directory):
        raise CheckpointError(f"{directory[:200]!r} is not an existing directory given by its "
                              "absolute path (every task must see the checkpoint directory)",
                              op=message.kind)
    return directory


def _text(message, name: str) -> str:
    for field, n, array in message.entries:
        if n == name and field in ("text", "meta") and array.dtype == np.uint8 and \
                array.ndim == 1:
            try:
                return bytes(array).decode("utf-8")
            except UnicodeDecodeError:
                break
    raise DistributedError(f"a {message.kind} message without its {name!r} text",
                           op=message.kind)


def _int(message, name: str) -> int:
    for field, n, array in message.entries:
        if field == "meta" and n == name and array.shape == () and array.dtype == np.int64:
            return int(array)
    raise DistributedError(f"a {message.kind} message without its {name!r}", op=message.kind)


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8)


# ==== the worker's side ======================================================================


def held_name(t) -> str | None:
    """The name a tensor of another task has there, once a captured step of this process
    has used it (None before)."""
    found = _held_index().get(id(t._data))
    return None if found is None else found[1]


def adopt(t, task: str, name: str) -> None:
    """Know `t` as `name` on `task` (program.adopt): a restore that matched it to the
    manifest's entry, so that fetch() finds it before any step has run here."""
    from .program import adopt as know
    know(t, task, name)


def _held_index() -> dict:
    """id(buffer) -> (task, name there) of every tensor of another task a captured step of
    this process has used. By buffer, not by tensor: a state_dict() holds detached tensors,
    which share their buffer with the parameter (on a worker, the host copy of a remote
    variable's initial value, which no step changes here). A buffer two of them share
    names neither."""
    from .program import _HELD
    index: dict = {}
    for task, name, owner in list(_HELD.values()):
        key = id(owner._data)
        index[key] = None if key in index and index[key] != (task, name) else (task, name)
    return {k: v for k, v in index.items() if v is not None}


def snapshot(state: dict, path, step, kind: str):
    """The manifest of a distributed checkpoint, planned for `path` once every ps holding
    one of `state`'s tensors has written its shard (see the module's docstring)."""
    from ..world import world
    from .postbox import CONTROL, postbox, task_of
    from .program import _PEERS
    if path is None:
        raise ArgumentError("a checkpoint holding tensors of other tasks needs a path: its "
                            "shards are written beside it", op="Checkpoint.save")
    w = world()
    if w.comm is None:
        raise DistributedError("the checkpoint holds tensors of other tasks, but this process "
                               "is not part of a distributed job", op="Checkpoint.save")
    if not w.chief:
        raise DistributedError(
            f"{w.name} saves a checkpoint holding tensors of other tasks; only the chief "
            "(worker 0) writes one (its shards and manifest), so save on the chief: "
            "`if rill.distributed.init().chief: manager.maybe_save(step)`",
            op="Checkpoint.save")
    if step is not None and (type(step) is not int or step < 0):
        raise ArgumentError(f"a distributed checkpoint's step is an int >= 0 or None, got "
                            f"{step!r}", op="Checkpoint.save")
    path = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(path)
    stem = re.sub(r"[^A-Za-z0-9_-]", "_", os.path.basename(path).removesuffix(".rill"))[:80]
    token = f"{stem}.{secrets.token_hex(4)}"
    objects = _marked(state, _held_index(), "")
    ranks = sorted(_PEERS)
    box = postbox(w)
    request = [("text", "directory", _bytes(directory)), ("text", "token", _bytes(token)),
               ("meta", "step", np.int64(NO_STEP if step is None else step))]
    for rank in ranks:             # every ps writes at once...
        box.post(rank, "save", 0, request, CONTROL)
    shards = []
    for rank in ranks:             # ...and the manifest waits for all of them
        task = task_of(w, rank)
        reply = box.wait_for(rank, ("ack",), f"saving {task}'s shard of {path}")
        fields = {n: a for field, n, a in reply.entries if field == "meta"}
        file = _reply_text(fields.get("file"), task)
        if file != shard_name(task, token):
            raise DistributedError(f"{task} wrote {file!r} for {path}; expected "
                                   f"{shard_name(task, token)!r}", op="Checkpoint.save")
        digest = fields.get("sha256")
        if digest is None or digest.dtype != np.uint8 or digest.shape != (32,):
            raise DistributedError(f"{task} answered a save without the shard's sha256",
                                   op="Checkpoint.save")
        shards.append({"task": task, "file": file, "sha256": bytes(digest).hex()})
    return plan({"kind": kind, "step": step, "objects": objects, "shards": shards}, path)


def _reply_text(array, task: str) -> str:
    if array is None or array.dtype != np.uint8 or array.ndim != 1:
        raise DistributedError(f"{task} answered a save without the shard's file name",
                               op="Checkpoint.save")
    return bytes(array).decode("utf-8", "replace")


def _marked(node, held: dict, name: str):
    """`node` with each tensor of another task replaced by a marker: {MARKER: {task, name
    there, shape, dtype}}. A tensor no captured step of this process has used is refused:
    its task does not hold it yet, and its value here is only where it started."""
    if isinstance(node, Tensor):
        if node.device.task is None:
            return node
        found = held.get(id(node._data))
        if found is None:
            raise DistributedError(
                f"{name} is on {node.device}, but no captured step of this process has used "
                f"it, so {node.device.task} does not hold it and its value here is only its "
                "initial one. Run a captured step before saving, or keep it on this task",
                op="Checkpoint.save")
        return {MARKER: {"task": found[0], "name": found[1], "shape": list(node.shape),
                         "dtype": node.dtype.name}}
    if isinstance(node, dict):
        return {k: _marked(v, held, f"{name}.{k}" if name else str(k)) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        out = [_marked(v, held, f"{name}.{i}") for i, v in enumerate(node)]
        return out if type(node) is list else tuple(out) if type(node) is tuple else \
            type(node)(*out)
    return node


def read_manifest(saved: dict, path: str, held_type):
    """(objects with each marker made a `held_type`, [shard entries]) of a distributed
    checkpoint's manifest, checked."""
    from ... import dtypes
    path = os.fspath(path)
    shards = saved["shards"]
    if not isinstance(shards, list) or not all(
            isinstance(s, dict) and set(s) == {"task", "file", "sha256"} and
            isinstance(s["task"], str) and _TASK.match(s["task"]) and
            isinstance(s["file"], str) and _SHARD.match(s["file"]) and
            isinstance(s["sha256"], str) and _HEX.match(s["sha256"]) for s in shards) or \
            len({s["task"] for s in shards}) != len(shards):
        raise CheckpointError(f"{path}: its list of shards is damaged (each needs a task, a "
                              "shard file and a sha256, one per task)", op="restore")
    tasks = {s["task"] for s in shards}
    by_name = {d.name: d for d in dtypes.ALL}

    def unmark(node, name):
        if isinstance(node, dict) and set(node) == {MARKER}:
            m = node[MARKER]
            if not (isinstance(m, dict) and set(m) == {"task", "name", "shape", "dtype"} and
                    m["task"] in tasks and isinstance(m["name"], str) and
                    isinstance(m["shape"], list) and
                    all(type(s) is int and s >= 0 for s in m["shape"]) and
                    m["dtype"] in by_name):
                raise CheckpointError(f"{path}: {name} stands for a tensor of another task, "
                                      "but its marker is damaged or names a task with no "
                                      "shard", op="restore")
            return held_type(m["task"], m["name"], tuple(m["shape"]),
                             by_name[m["dtype"]])
        if isinstance(node, dict):
            return {k: unmark(v, f"{name}.{k}") for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(unmark(v, f"{name}.{i}") for i, v in enumerate(node))
        return node

    objects = {k: unmark(v, k) for k, v in saved["objects"].items()}
    return objects, shards


def restore_shards(shards: list, path, step) -> None:
    """Ask every ps named in a manifest to restore its shard (all at once), and wait."""
    from ..world import world
    from .postbox import CONTROL, postbox, task_rank
    path = os.path.abspath(os.fspath(path))
    w = world()
    if w.comm is None:
        raise DistributedError(f"{path} is a distributed checkpoint (shards on "
                               f"{', '.join(s['task'] for s in shards)}); restore it in the "
                               "job's processes (rill-launch --ps ...)", op="restore")
    ranks = []
    for s in shards:
        try:
            ranks.append(task_rank(w, s["task"]))
        except DistributedError:
            raise CheckpointError(f"{path} has a shard for {s['task']}, which this job does "
                                  f"not have ({len(w.ps_ranks)} ps, {len(w.worker_ranks)} "
                                  "workers): restore it in a job of the same layout",
                                  op="restore") from None
    box = postbox(w)
    for s, rank in zip(shards, ranks):
        box.post(rank, "restore", 0, [
            ("text", "directory", _bytes(os.path.dirname(path))),
            ("text", "file", _bytes(s["file"])), ("text", "sha256", _bytes(s["sha256"])),
            ("meta", "step", np.int64(NO_STEP if step is None else step))], CONTROL)
    refused = None
    for s, rank in zip(shards, ranks):  # every answer is awaited, refusals included
        try:
            box.wait_for(rank, ("ack",), f"restoring {s['task']}'s shard {s['file']} of "
                                         f"{path}")
        except DistributedError as e:
            if " refused: " not in e.message:
                raise                   # no answer: the job is broken, not the checkpoint
            refused = refused or CheckpointError(e.message, op="restore")
    if refused is not None:
        raise refused


graph_ops.register_handler("save", handler)  # capture runs these nodes through this module
graph_ops.register_handler("restore", handler)
