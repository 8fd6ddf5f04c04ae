"""A worker's part for another task, as a message: the saved-graph document, checked on arrival.

The worker encodes the part a ps runs as docs/GRAPH_FORMAT.md's graph document (the same
`encode_graph` a saved graph uses), with its send/recv nodes, every device named with its
task ("worker:1/cpu", "ps:0/cpu"), the variables it reads and writes by name, their initial
values and the part's constants as raw arrays. The ps reads it as it reads any saved graph:
field by field against the schema, ops looked up by primitive name, attrs checked against
their declared types, then the graph linted; nothing in it is code. A ps therefore runs no
model code and imports none of the user's modules.
"""
from __future__ import annotations

import json

import numpy as np

from ...capture import schema
from ...capture.ir import Graph, Variable
from ...capture.serialize import encode_graph
from ...errors import CheckpointError
from ...tensor import new_tensor

FORMAT, VERSION = "rill-partition", 1
MAX_DOCUMENT = 1 << 28


class Missing(Exception):
    """The registration names variables the ps does not hold and carries no values for."""

    def __init__(self, keys):
        super().__init__(", ".join(keys))
        self.keys = keys


def encode(part: Graph, task: str, ident: int, options: dict, values_for=()):
    """(entries of a "register" message, {variable index in part: its name on the ps}).
    The message carries the initial values of the variables named in `values_for` only:
    a ps asks for those it does not hold yet (a table of 1 GB crosses once, not once per
    worker)."""
    used = sorted({n.attrs["var"] for n in part.nodes if n.op in ("read", "assign")})
    index = {old: new for new, old in enumerate(used)}
    arrays: dict = {}
    doc = encode_graph(part, arrays)
    for node, entry in zip(part.nodes, doc["nodes"]):
        if node.op in ("read", "assign"):
            entry["attrs"]["var"] = index[node.attrs["var"]]
    _qualify(doc, task)
    variables, values = [], []
    for old in used:
        v = part.variables[old]
        variables.append({"name": v.name, "kind": v.kind, "shape": list(v.shape),
                          "dtype": v.dtype.name})
        if _key(v.name, v.kind) in values_for:
            owner = v.owner if v.kind == "value" else v.owner.grad
            value = np.zeros(v.shape, v.dtype.storage) if owner is None else \
                np.asarray(owner.device.backend.to_host(owner._data))
            values.append(("value", _key(v.name, v.kind), value))
    body = {"format": FORMAT, "version": VERSION, "id": ident, "options": options,
            "variables": variables, "graph": doc}
    text = json.dumps(body).encode("utf-8")
    entries = [("graph", "graph", np.frombuffer(text, np.uint8))] + values + \
        [("array", k, np.asarray(a)) for k, a in arrays.items()]
    return entries, {old: _key(part.variables[old].name, part.variables[old].kind)
                     for old in used}


def fingerprint(name: str, parts) -> int:
    """The step function's number, the same on every worker that runs the same step (so
    that their parts join one group of replicas on a ps, whatever order a worker traced its
    step functions in): a hash of its name and its parts' documents, written as every worker
    writes them before naming its own task."""
    import hashlib
    digest = hashlib.sha256(name.encode("utf-8"))
    for part in parts:
        arrays: dict = {}
        digest.update(json.dumps(encode_graph(part, arrays), sort_keys=True).encode("utf-8"))
        for key in sorted(arrays):
            digest.update(np.ascontiguousarray(arrays[key]).tobytes())
    return int.from_bytes(digest.digest()[:7], "little")  # < 2**56: a JSON and int64 number


def _key(name: str, kind: str) -> str:
    return name + (".grad" if kind == "grad" else "")


def _qualify(doc, task: str) -> None:
    """Every device this process calls local ("cpu") named with its task ("worker:0/cpu")."""
    def fix(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("device", "$device") and isinstance(v, str) and "/" not in v:
                    obj[k] = f"{task}/{v}"
                else:
                    fix(v)
        elif isinstance(obj, list):
            for v in obj:
                fix(v)
    fix(doc)


def decode(message, store: dict, sender: str, here: str):
    """(ident, options, Graph) of a "register" message from task `sender`, checked; the
    variables it names are taken from `store` ({name: holder Tensor}), and the ones not
    there yet made from the values the message carries."""
    from ... import devices
    entries = {(field, name): array for field, name, array in message.entries}
    raw = entries.get(("graph", "graph"))
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1 or len(raw) > MAX_DOCUMENT:
        raise CheckpointError("the registration carries no graph document", op="register")
    try:
        doc = json.loads(bytes(raw).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"the graph document is damaged: {e}", op="register") from None
    root = schema.Path("registration")
    schema.fields(doc, root, ("format", "version", "id", "options", "variables", "graph"))
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        schema.fail(root / "format", f"expected {FORMAT} version {VERSION}")
    ident = schema.expect(doc["id"], int, root / "id", "int")
    options = _options(doc["options"], root / "options")
    variables, missing = [], []
    for i, entry in enumerate(schema.expect(doc["variables"], list, root / "variables",
                                            "list")):
        at = root / "variables" / i
        schema.fields(entry, at, ("name", "kind", "shape", "dtype"))
        name = schema.text(entry["name"], at / "name")
        kind = entry["kind"]
        if kind not in ("value", "grad"):
            schema.fail(at / "kind", "expected 'value' or 'grad'")
        shape = schema.shape(entry["shape"], at / "shape")
        dtype = schema.dtype(entry["dtype"], at / "dtype")
        key = _key(name, kind)
        holder = store.get(key)
        if holder is None and ("value", key) not in entries:
            missing.append(key)
            continue
        if holder is None:
            value = entries.get(("value", key))
            if value.shape != shape or value.dtype != dtype.storage:
                schema.fail(at, f"its initial value is missing or is not {dtype}{list(shape)}")
            holder = store[key] = new_tensor(np.array(value), dtype, devices.cpu)
            if kind == "grad":
                holder = store[key] = _grad_holder(holder)
        target = holder if kind == "value" else holder.grad
        if (target.shape, target.dtype) != (shape, dtype):
            schema.fail(at, f"is {dtype}{list(shape)}; this ps holds {key} as "
                            f"{target.dtype}{list(target.shape)}")
        variables.append(Variable(holder, kind, name, shape, dtype, devices.cpu))
    if missing:
        raise Missing(missing)
    arrays = {name: np.asarray(a) for (field, name), a in entries.items() if field == "array"}
    graph = Graph(variables=variables, name=f"{sender}.{ident}")
    token = schema.PARTITION.set(True)
    here_is_local = schema.DEVICE_MAP.set({f"{here}/cpu": devices.cpu})
    try:
        schema.graph(doc["graph"], root / "graph", arrays, {}, into=graph)
    finally:
        schema.PARTITION.reset(token)
        schema.DEVICE_MAP.reset(here_is_local)
    graph.outputs = []
    for node in graph.nodes:
        if node.device.task is not None:
            raise CheckpointError(f"the part has a {node.op} node on {node.device}, not on "
                                  f"this task ({here})", op="register")
        if node.op == "input":
            raise CheckpointError("a ps's part takes no arguments", op="register")
        if node.op in ("send", "recv"):
            peer = node.attrs["to" if node.op == "send" else "from"]
            if peer.task != sender:
                raise CheckpointError(f"a {node.op} exchanges with {peer}; a part may only "
                                      f"exchange with the worker that registers it ({sender})",
                                      op="register")
    graph.lint()
    graph.placed = True
    return ident, options, graph


def _grad_holder(value):
    """A tensor whose .grad is `value`: how a graph's "grad" variable names its storage."""
    holder = new_tensor(np.zeros((), value.dtype.storage), value.dtype, value.device)
    holder.grad = value
    return holder


def _options(doc, path) -> dict:
    schema.fields(doc, path, ("mode", "workers", "backup_workers", "step"))
    if doc["mode"] not in ("sync", "async"):
        schema.fail(path / "mode", "expected 'sync' or 'async'")
    workers = schema.expect(doc["workers"], int, path / "workers", "int")
    backup = schema.expect(doc["backup_workers"], int, path / "backup_workers", "int")
    if not 0 <= backup < workers:
        schema.fail(path / "backup_workers", f"expected 0 <= backup_workers < {workers}")
    return {"mode": doc["mode"], "workers": workers, "backup_workers": backup,
            "step": schema.text(doc["step"], path / "step")}
