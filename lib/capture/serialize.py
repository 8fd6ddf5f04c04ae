"""Saving a captured graph with its state and signature; loading it back with no source.

A saved graph is a directory (docs/GRAPH_FORMAT.md):
  manifest.json        written last, atomically: names the two files below and their SHA-256
  graph.<token>.json   the graph document: signature, variables, nodes (op, inputs, attrs,
                       output specs, device, control predecessors, user's source line)
  state.<token>.rill   the variables' values and the large constants, in rill.save's format
Each save writes new files under fresh names and then swaps the manifest, so a crash at any
moment leaves the old save or the new one, never a mix. Loading checks both checksums, then
the document against its schema (lib/capture/schema.py) before building anything. No Python
code or pickle is stored or run: ops are primitive names, looked up when loading.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets

import numpy as np

from .. import dtypes as dt
from ..devices import Device, device as as_device
from ..errors import CaptureError, CheckpointError, DeviceError
from ..files import (MAX_JSON, load_budget, open_regular, over_budget, read_bounded, sha256,
                     show_bytes)
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor, new_tensor
from . import schema
from .ir import GRAPH_OPS, Graph, Variable
from ..serialization import load_from, save, write_atomically
from ..tree import flatten

FORMAT = "rill-graph"
VERSION = 2
MANIFEST = "manifest.json"
MAX_MANIFEST = 1 << 16
MAX_VARIANTS = 64
MAX_DOCUMENT = MAX_JSON
_FILE = re.compile(r"(graph\.[0-9a-f]{16}\.json|state\.[0-9a-f]{16}\.rill)")
_LEGACY = ("graph.json", "state.rill")  # format 1's names, replaced by a format-2 save
# What a save cut short leaves: write_atomically's temporary files for the names above.
_TEMP = re.compile(r"\.(graph\.[0-9a-f]{16}\.json|state\.[0-9a-f]{16}\.rill|manifest\.json)"
                   r"\.[0-9]+\.[0-9a-f]+\.tmp")


# ---- argument and result structure ---------------------------------------------------------

def describe(obj, counter: list):
    """obj's nesting in JSON, tensors numbered in order (counter[0] counts them)."""
    if isinstance(obj, Tensor):
        counter[0] += 1
        return {"$tensor": counter[0] - 1}
    if isinstance(obj, SparseRows):
        counter[0] += 2
        return {"$sparse": counter[0] - 2, "shape": list(obj.shape)}
    if isinstance(obj, (tuple, list)):
        return {"$" + ("tuple" if isinstance(obj, tuple) else "list"):
                [describe(v, counter) for v in obj]}
    if isinstance(obj, dict):
        return {"$dict": [[_static(k), describe(v, counter)] for k, v in obj.items()]}
    return {"$static": _static(obj)}


def _static(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    raise CaptureError(f"cannot save a graph whose arguments or results include "
                       f"{type(v).__name__} {v!r}; only tensors, numbers, strings and None",
                       op="save")


def rebuild(desc, values):
    """The structure `desc` describes, with values[i] for tensor i."""
    if "$tensor" in desc:
        return values[desc["$tensor"]]
    if "$sparse" in desc:
        i = desc["$sparse"]
        return SparseRows(values[i], values[i + 1], tuple(desc["shape"]))
    if "$tuple" in desc:
        return tuple(rebuild(d, values) for d in desc["$tuple"])
    if "$list" in desc:
        return [rebuild(d, values) for d in desc["$list"]]
    if "$dict" in desc:
        return {k: rebuild(d, values) for k, d in desc["$dict"]}
    return desc["$static"]


# ---- attrs ---------------------------------------------------------------------------------

def encode_attr(value, arrays: dict, where: str):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, tuple):
        return {"$tuple": [encode_attr(v, arrays, where) for v in value]}
    if isinstance(value, list):
        return [encode_attr(v, arrays, where) for v in value]
    if isinstance(value, dict):
        return {"$dict": [[encode_attr(k, arrays, where), encode_attr(v, arrays, where)]
                          for k, v in value.items()]}
    if isinstance(value, dt.DType):
        return {"$dtype": value.name}
    if isinstance(value, Device):
        return {"$device": str(value)}
    if isinstance(value, Graph):  # a branch or loop body
        return {"$graph": encode_graph(value, arrays)}
    if isinstance(value, slice):
        return {"$slice": [encode_attr(v, arrays, where)
                           for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(value, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = value
        return {"$array": key, "dtype": value.dtype.name}  # as the loader compares it
    if hasattr(value, "get_state"):  # a Generator: saved at its current state
        return {"$generator": value.get_state()}
    raise CaptureError(f"cannot save attribute {where} of type {type(value).__name__}",
                       op="save")


# ---- graphs --------------------------------------------------------------------------------

def encode_graph(graph: Graph, arrays: dict) -> dict:
    """{"name", "nodes", "outputs"}: the nodes in order, inputs as [node, output] pairs. A
    branch or loop body (an attr holding a Graph) is encoded the same way, nested."""
    index = {node: i for i, node in enumerate(graph.nodes)}
    nodes = []
    for node in graph.nodes:
        attrs = {}
        for k, v in node.attrs.items():
            if node.op == "constant" and k == "value":
                # Host arrays of bf16 are float32 storage; the spec says which dtype it is.
                v = np.asarray(v)
            attrs[k] = encode_attr(v, arrays, f"{k!r} of {node.op}")
        nodes.append({
            "op": node.op,
            "inputs": [[index[v.node], v.index] for v in node.inputs],
            "attrs": attrs,
            "outputs": [{"shape": list(v.shape), "dtype": v.dtype.name} for v in node.outputs],
            "device": str(node.device),
            "after": [index[a] for a in node.after],
            "source": node.source,
        })
    return {"name": graph.name, "nodes": nodes,
            "outputs": [[index[v.node], v.index] for v in graph.outputs]}


# ---- saving --------------------------------------------------------------------------------

def save_graph(path, variants, name: str) -> None:
    """Write `variants` — (graph, signature, result) each, one per traced signature — with
    their state to the directory `path`, atomically (see the module docstring)."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    arrays: dict = {}
    keys: dict = {}      # (id(owner), kind) -> its unique key in the state file
    values: dict = {}    # key -> tensor
    docs = []
    for graph, signature, result in variants:
        body = encode_graph(graph, arrays)
        entries = []
        for v in graph.variables:
            unique = keys.get((id(v.owner), v.kind))
            if unique is None:  # variants share parameters; two different tensors never a name
                suffix = ".grad" if v.kind == "grad" else ""
                unique = v.name
                while unique + suffix in values:
                    unique = f"{v.name}#{len(values)}"
                keys[(id(v.owner), v.kind)] = unique
                values[unique + suffix] = _value_of(v)
            entries.append({"name": unique, "kind": v.kind, "shape": list(v.shape),
                            "dtype": v.dtype.name, "device": str(v.device)})
        docs.append({"signature": signature, "result": result, "variables": entries,
                     "nodes": body["nodes"], "outputs": body["outputs"]})
    doc = {"format": FORMAT, "version": VERSION, "name": name, "variants": docs}
    state = {"variables": values,
             "arrays": {k: new_tensor(a, _dtype_of(a), as_device("cpu"))
                        for k, a in arrays.items()}}
    token = secrets.token_hex(8)  # fresh names: the files the old manifest names stay whole
    files = {"graph": f"graph.{token}.json", "state": f"state.{token}.rill"}
    text = json.dumps(doc, indent=1).encode()
    write_atomically(os.path.join(path, files["graph"]), lambda f: f.write(text), op="save")
    save(state, os.path.join(path, files["state"]))  # atomic, fsynced, as every rill.save
    manifest = {"format": FORMAT, "version": VERSION,
                **{part: {"file": file, "sha256": _sha256(os.path.join(path, file))}
                   for part, file in files.items()}}
    manifest_text = json.dumps(manifest, indent=1).encode()
    # The commit point: before this rename the old save is what loads, after it the new one.
    write_atomically(os.path.join(path, MANIFEST), lambda f: f.write(manifest_text), op="save")
    _remove_stale(path, keep=set(files.values()))


def _remove_stale(path: str, keep: set) -> None:
    """Drop graph/state files no manifest names (older saves, saves cut short by a crash)."""
    for entry in os.listdir(path):
        if entry not in keep and (_FILE.fullmatch(entry) or _TEMP.fullmatch(entry) or
                                  entry in _LEGACY):
            try:
                os.unlink(os.path.join(path, entry))
            except OSError:
                pass


def _sha256(file: str) -> str:
    with open(file, "rb") as f:  # the file this save just wrote
        return sha256(f, file, op="save")


def _key(v: Variable) -> str:
    return v.name + (".grad" if v.kind == "grad" else "")


def _value_of(v: Variable) -> Tensor:
    t = v.owner if v.kind == "value" else v.owner.grad
    if t is None:
        from ..ops.creation import zeros
        return zeros(*v.shape, dtype=v.dtype)
    return t.to("cpu") if str(t.device) != "cpu" else t


def _dtype_of(a: np.ndarray):
    return dt.as_dtype(a.dtype.name) if a.dtype.name in dt._BY_NAME else dt.float32


# ---- loading -------------------------------------------------------------------------------

def load_graph(path, device_map=None, *, max_bytes=None):
    """A callable that runs the graph saved at `path` by `f.save(path)`.

    It needs none of the model's code: the graph names primitives, the state file holds
    the values. Its arguments must match the saved signature (structure, shapes, dtypes).
    Everything read is checked before it is used (see docs/GRAPH_FORMAT.md, "Trust"); any
    fault is a CheckpointError naming the file and the field.

    The directory's files are read only as regular files, never through a link, and within
    bounds: the manifest 64 KiB, the graph document MAX_DOCUMENT, the state the load budget.
    The budget, `max_bytes` (default: RILL_LOAD_MAX_BYTES, else the machine's memory; see
    rill.files), also bounds what a call may need: the variables and constants plus the
    most bytes the graph's values hold at once, from the checked specs, before anything of
    that size is allocated.

    A graph saved over several devices keeps its placement and runs partitioned, one thread
    per device. `device_map` ({saved device: device here}, e.g. {"gpu:0": "cpu:1"}) moves
    nodes, variables and arguments saved on one device to another; a saved device this
    machine lacks and the map does not move is refused, naming it.
    """
    mapping = _device_map(device_map)
    budget = load_budget(max_bytes, op="load_graph")
    path = os.fspath(path)
    manifest = _read_manifest(path)
    graph_file = os.path.join(path, manifest["graph"]["file"])
    doc = _parse(_checked_bytes(graph_file, manifest["graph"]["sha256"]), graph_file)
    state_file = os.path.join(path, manifest["state"]["file"])
    state = _checked_state(state_file, manifest["state"]["sha256"], budget)
    token = schema.DEVICE_MAP.set(mapping)
    try:
        variants = _build(doc, state, budget)
    except CheckpointError as e:
        raise CheckpointError(f"{graph_file}: {e.message}", op="load_graph") from None
    finally:
        schema.DEVICE_MAP.reset(token)
    return LoadedGraph(variants)


def _device_map(device_map) -> dict:
    """{canonical saved device name: Device here}, checked."""
    if device_map is None:
        return {}
    if not isinstance(device_map, dict):
        raise DeviceError(f"device_map must be a dict like {{'gpu:0': 'cpu'}}, got "
                          f"{type(device_map).__name__}", op="load_graph")
    found = {}
    for saved, here in device_map.items():
        name = str(saved) if isinstance(saved, Device) else saved
        if not isinstance(name, str) or not schema._DEVICE.fullmatch(
                name.replace("cuda", "gpu")):
            raise DeviceError(f"device_map keys are device names like 'gpu:0', got {saved!r}",
                              op="load_graph")
        found[schema.device_name(name.replace("cuda", "gpu"))] = as_device(here)
    return found


def _read_manifest(path: str) -> dict:
    file = os.path.join(path, MANIFEST)
    if not os.path.lexists(file):  # a link, even a broken one, is refused when opened
        if os.path.exists(os.path.join(path, "graph.json")):
            raise CheckpointError(f"{path!r} was saved by an older rill (graph format 1, which "
                                  "has no checksums and cannot be checked): save it again "
                                  "with this one", op="load_graph")
        raise CheckpointError(f"no saved graph at {path!r} (manifest.json is missing)",
                              op="load_graph")
    f, _ = open_regular(file, op="load_graph", follow_symlinks=False, max_bytes=MAX_MANIFEST,
                        too_large=f"the {show_bytes(MAX_MANIFEST)} a manifest may hold (it "
                                  "names two files): this is not one rill wrote")
    with f:
        doc = _parse(read_bounded(f, file, MAX_MANIFEST, op="load_graph"), file)
    where = schema.Path(file)
    try:
        schema.fields(doc, where, ("format", "version", "graph", "state"))
        _check_format(doc, file)
        for part in ("graph", "state"):
            schema.fields(doc[part], where / part, ("file", "sha256"))
            name = schema.text(doc[part]["file"], where / part / "file")
            if not _FILE.fullmatch(name) or not name.startswith(part + "."):
                schema.fail(where / part / "file", f"not a {part} file name: {name[:40]!r}")
            if not re.fullmatch(r"[0-9a-f]{64}", str(doc[part]["sha256"])):
                schema.fail(where / part / "sha256", "expected 64 hex digits")
    except CheckpointError as e:
        raise CheckpointError(e.message, op="load_graph") from None
    return doc


def _check_format(doc: dict, file: str) -> None:
    if doc.get("format") != FORMAT:
        raise CheckpointError(f"{file} is not a saved rill graph", op="load_graph")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{file} has format version {str(doc.get('version'))[:20]}; this "
                              f"rill reads version {VERSION}", op="load_graph")


def _checked_bytes(file: str, digest: str) -> bytes:
    f, _ = open_regular(file, op="load_graph", follow_symlinks=False, max_bytes=MAX_DOCUMENT,
                        too_large=f"the {show_bytes(MAX_DOCUMENT)} a graph document may "
                                  "hold (large values live in the state file)")
    with f:
        data = read_bounded(f, file, MAX_DOCUMENT, op="load_graph")
    if hashlib.sha256(data).hexdigest() != digest:
        _checksum_differs(file)
    return data


def _checked_state(file: str, digest: str, budget: int):
    """The state file's contents, read from the one open file whose SHA-256 was checked."""
    f, _ = open_regular(file, op="load_graph", follow_symlinks=False, max_bytes=budget,
                        too_large=over_budget(budget))
    with f:
        if sha256(f, file, op="load_graph") != digest:
            _checksum_differs(file)
        f.seek(0)
        return load_from(f, file, max_bytes=budget)


def _checksum_differs(file: str):
    raise CheckpointError(f"{file} does not match the checksum manifest.json records: the "
                          "file was changed or damaged after it was saved", op="load_graph")


def _parse(data: bytes, file: str):
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{file} is damaged: {e}", op="load_graph") from None
    except RecursionError:
        raise CheckpointError(f"{file} is nested too deeply to be a saved graph",
                              op="load_graph") from None
    except MemoryError:  # under the size cap, yet more objects than this machine can hold
        raise CheckpointError(f"{file} holds more JSON than there is memory to parse it "
                              "(a saved graph's document is a few MiB)", op="load_graph") from None


def _build(doc, state, budget: int) -> list:
    """[(Graph, signature, result)] per saved variant, from the checked document and state,
    refused if a call would need more than `budget` bytes."""
    root = schema.Path()
    schema.fields(doc, root, ("format", "version", "name", "variants"))
    _check_format(doc, "the document")
    name = schema.text(doc["name"], root / "name")
    if not isinstance(state, dict) or set(state) != {"variables", "arrays"} or \
            not all(isinstance(state[k], dict) for k in state):
        schema.fail("state.rill", "expected {'variables': {...}, 'arrays': {...}}")
    arrays = {}
    for key, t in state["arrays"].items():
        if not isinstance(t, Tensor):
            schema.fail(f"state.rill: arrays.{str(key)[:40]}", "expected a tensor")
        arrays[key] = np.asarray(t.numpy())
    variants = schema.expect(doc["variants"], list, root / "variants", "list")
    if not 1 <= len(variants) <= MAX_VARIANTS:
        schema.fail(root / "variants", f"expected 1 to {MAX_VARIANTS} variants")
    owners: dict = {}  # state key -> Variable owner, shared by the variants that use it
    paths: dict = {}   # node -> its place in the document, for errors found after building
    built = [_build_variant(entry, root / "variants" / i, name, state["variables"], arrays,
                            owners, paths) for i, entry in enumerate(variants)]
    _check_budget([graph for graph, _, _ in built], paths, budget)
    return built


def _build_variant(doc, root, name, values, arrays, owners, paths):
    schema.fields(doc, root, ("signature", "result", "variables", "nodes", "outputs"))
    counts = [[0], [0]]
    schema.structure(doc["signature"], root / "signature", counts[0])
    schema.structure(doc["result"], root / "result", counts[1])
    graph = Graph(name=name)
    variables = schema.expect(doc["variables"], list, root / "variables", "list")
    for i, entry in enumerate(variables):
        graph.variables.append(_variable(entry, root / "variables" / i, values, owners))
    schema.graph(doc, root, arrays, paths, into=graph)
    n_inputs = len(graph.inputs)
    if counts[0][0] != n_inputs:
        schema.fail(root / "signature", f"numbers {counts[0][0]} tensors; the graph has "
                                        f"{n_inputs} inputs")
    if counts[1][0] != len(graph.outputs):
        schema.fail(root / "result", f"numbers {counts[1][0]} tensors; the graph returns "
                                     f"{len(graph.outputs)}")
    _check_constants(graph, paths)
    try:
        graph.lint()
    except CaptureError as e:  # the file's specs are not what its nodes compute
        where = paths.get(getattr(e, "node", None), str(root / "nodes"))
        schema.fail(where, e.message.replace("graph lint: ", ""))
    return graph, doc["signature"], doc["result"]


def _variable(entry, path, values: dict, owners: dict) -> Variable:
    schema.fields(entry, path, ("name", "kind", "shape", "dtype", "device"))
    name = schema.text(entry["name"], path / "name")
    kind = entry["kind"]
    if kind not in ("value", "grad"):
        schema.fail(path / "kind", f"expected 'value' or 'grad', got {str(kind)[:40]!r}")
    shape = schema.shape(entry["shape"], path / "shape")
    dtype = schema.dtype(entry["dtype"], path / "dtype")
    device = schema.device(entry["device"], path / "device")
    key = name + (".grad" if kind == "grad" else "")
    owner = values.get(key)
    if not isinstance(owner, Tensor):
        schema.fail(path, f"state.rill holds no tensor {key[:60]!r}")
    if (owner.shape, owner.dtype) != (shape, dtype):
        schema.fail(path, f"is {dtype}{list(shape)} but state.rill holds "
                          f"{owner.dtype}{list(owner.shape)}")
    if key in owners:
        return Variable(owners[key], kind, name, shape, dtype, device)
    if owner.device != device:
        owner = owner.to(device)
    if kind == "grad":  # the graph writes a parameter's .grad: give it one
        holder = new_tensor(owner._data, owner.dtype, owner.device)
        holder.grad = owner
        owner = holder
    owners[key] = owner
    return Variable(owner, kind, name, shape, dtype, device)


def _check_constants(graph: Graph, paths: dict) -> None:
    """A constant's stored array must be what its spec says (bfloat16 is float32 storage)."""
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            _check_constants(sub, paths)
        if node.op == "constant":
            value, v = node.attrs["value"], node.outputs[0] if node.outputs else None
            if v is None or len(node.outputs) != 1 or value.shape != v.shape or \
                    value.dtype != v.dtype.storage:
                schema.fail(paths[node], "its stored array does not match its output spec")


def _check_budget(graphs: list, paths: dict, budget: int) -> None:
    """Refuse graphs a call of which needs more than `budget` bytes: what the state holds
    (variables, constants) plus the most bytes one variant's values hold at once. The specs
    were checked against each op's rule, so shape-valued attrs (full, tile, reshape, ...)
    are counted as the values they would make."""
    held: dict = {}
    for graph in graphs:
        for v in graph.variables:
            held[_key(v)] = _nbytes(v)
        held.update(_constants(graph))
    resident = sum(held.values())
    for graph in graphs:
        peak, node = _peak_bytes(graph)
        if resident + peak <= budget:
            continue
        if node is None:
            schema.fail("variants", f"its variables and constants take "
                                    f"{show_bytes(resident)}, more than {over_budget(budget)}")
        made = ", ".join(f"{v.dtype.name}{list(v.shape)}" for v in node.outputs)
        schema.fail(paths.get(node, "variants"),
                    f"a call needs {show_bytes(resident + peak)} at this {node.op} node, which "
                    f"makes {made} ({show_bytes(resident)} of variables and constants, "
                    f"{show_bytes(peak)} of values live at once), more than "
                    f"{over_budget(budget)}")


def _nbytes(v) -> int:
    return math.prod(v.shape) * np.dtype(v.dtype.storage).itemsize


def _constants(graph: Graph) -> dict:
    """{id of a constant's array: its bytes}, subgraphs included."""
    found = {}
    for node in graph.nodes:
        for sub in node.subgraphs.values():
            found.update(_constants(sub))
        if node.op == "constant":
            found[id(node.attrs["value"])] = node.attrs["value"].nbytes
    return found


def _peak_bytes(graph: Graph):
    """(the most bytes that values made by a call of `graph` hold at once, the node where
    that is reached). Nodes run in order; a value lives from its node to its last use (a
    result to the end); a node holding subgraphs adds their peak while it runs (a fused
    node's body too: its NumPy path makes those values). Inputs, reads and constants are
    buffers from before the call, not counted."""
    last = {v: i for i, node in enumerate(graph.nodes) for v in node.inputs}
    results = set(graph.outputs)
    owned: dict = {}
    live = peak = 0
    at = None
    for i, node in enumerate(graph.nodes):
        if node.op in GRAPH_OPS:
            continue
        made = sum(_nbytes(v) for v in node.outputs)
        owned.update((v, _nbytes(v)) for v in node.outputs)
        live += made
        inner, inner_at = max((_peak_bytes(sub) for sub in node.subgraphs.values()),
                              key=lambda found: found[0], default=(0, None))
        if at is None or live + inner > peak:
            peak = live + inner
            at = inner_at if inner_at is not None and inner > made else node
        for v in list(dict.fromkeys(node.inputs)) + node.outputs:
            if last.get(v, -1) <= i and v not in results:
                live -= owned.pop(v, 0)
    return peak, at


def _program(graph):
    """A saved graph was placed before it was saved: it runs as one program, or partitioned
    when its nodes are on several devices."""
    from .executor import Program
    from .passes.partition import partition
    graph.placed = True
    graph.plan_memory = True  # as the pipeline's memory pass marks a captured graph
    if len(graph.devices()) > 1:
        from .partitioned import PartitionedProgram
        return PartitionedProgram(partition(graph).lint())
    return Program(graph)


class LoadedGraph:
    """A saved captured function, callable like the original: each call runs the saved
    variant whose signature its arguments match (structure, shapes, dtypes, devices)."""

    def __init__(self, variants):
        self.variants = [(graph, signature, result, _program(graph))
                         for graph, signature, result in variants]
        self.graph, self.signature, self.result, self.program = self.variants[0]
        self.name = self.graph.name

    def __call__(self, *args, **kwargs):
        given = _shape_of(describe((list(args), kwargs), [0]))
        tensors = [t for t in flatten((args, kwargs), is_leaf=lambda o: isinstance(o, Tensor))[0]
                   if isinstance(t, Tensor)]
        specs = [(t.shape, t.dtype, t.device) for t in tensors]
        for graph, signature, result, program in self.variants:
            if given == _shape_of(signature) and specs == [
                    (v.shape, v.dtype, v.device) for v in graph.inputs]:
                buffers = program([t._data for t in tensors])
                return rebuild(result, [new_tensor(b, v.dtype, v.device)
                                        for b, v in zip(buffers, graph.outputs)])
        raise CaptureError(self._mismatch(given, specs), op=self.name)

    def _mismatch(self, given: str, specs) -> str:
        """Why no saved variant takes these arguments, as precisely as the closest one."""
        same = [(g, s) for g, s, _, _ in self.variants if _shape_of(s) == given]
        if not same:
            saved = " or ".join(_show(s) for _, s, _, _ in self.variants)
            return (f"{self.name} was saved for arguments shaped like {saved}, got "
                    f"{_show(json.loads(given))}")
        graph = same[0][0]
        for i, (spec, v) in enumerate(zip(specs, graph.inputs)):
            if spec != (v.shape, v.dtype, v.device):
                shape, dtype, device = spec
                also = f" (or {len(same) - 1} other saved variant(s))" if len(same) > 1 else ""
                return (f"tensor argument {i} of {self.name} must be {v.dtype}{list(v.shape)} "
                        f"on {v.device}{also}, got {dtype}{list(shape)} on {device}")
        return f"no saved variant of {self.name} takes these arguments"

    def partitions(self) -> dict:
        """{device name: Graph} of the first saved variant, as it runs here (one device: the
        whole graph)."""
        from .passes.partition import partition, split
        return {str(d): g for d, g in split(partition(self.graph)).items()}

    def state_dict(self) -> dict:
        """{name: tensor} of the graph's variables (their current values)."""
        return {_key(v): (v.owner if v.kind == "value" else v.owner.grad)
                for graph, *_ in self.variants for v in graph.variables}

    def __repr__(self) -> str:
        return f"<loaded graph {self.name}: {len(self.variants)} variant(s), " \
               f"{self.graph.count()} nodes, {len(self.graph.variables)} variables>"


def _shape_of(desc):
    """The structure with tensor numbering kept and static values kept (what must match)."""
    return json.dumps(desc, sort_keys=True)


def _show(desc) -> str:
    if "$tensor" in desc:
        return "T"
    if "$tuple" in desc or "$list" in desc:
        items = desc.get("$tuple", desc.get("$list"))
        return "(" + ", ".join(_show(d) for d in items) + ")"
    if "$dict" in desc:
        return "{" + ", ".join(f"{k!r}: {_show(d)}" for k, d in desc["$dict"]) + "}"
    if "$sparse" in desc:
        return "SparseRows"
    return repr(desc["$static"])
