"""Drawing a graph: Graphviz DOT, and SVG through the `dot` program for notebooks.

`to_dot(graph)` draws every node (op, result names and specs), dataflow edges, dashed control
edges; a box (cluster) per device when the graph spans several, send/recv pairs as red edges;
a dashed box per control-flow body (cond branches, loop bodies), drawn inside the node's
device box and joined to the node that runs it.

A large graph is collapsed: nodes made by one line of the user's code (a layer call, say)
become one box naming the line, its code when it can be found, and its ops. Nodes have no
module path in the IR, so the user's line is the unit; `collapse=False` expands.

`to_svg` runs Graphviz `dot`; without it, a CaptureError says how to install it, and a
notebook's `_repr_svg_` returns None so that Jupyter shows the text form instead.
"""
from __future__ import annotations

import linecache
import os
import shutil
import subprocess
import sys
from collections import Counter
from ..errors import CaptureError

# A graph with more nodes than this (inputs not counted) is drawn collapsed unless told not to.
COLLAPSE_ABOVE = 40


def _q(text: str) -> str:
    """Text inside a DOT double-quoted string."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _label(*lines) -> str:
    return "\\n".join(_q(line) for line in lines if line)


def to_dot(graph, collapse: bool | None = False) -> str:
    """The graph in DOT. `collapse`: True groups nodes by the user's line, None does so for
    graphs of more than COLLAPSE_ABOVE nodes, False (the default) draws every node."""
    if collapse is None:
        collapse = graph.count() > COLLAPSE_ABOVE
    out = [f'digraph "{_q(graph.name)}" {{', "  compound=true;",
           "  node [shape=box, fontname=monospace];"]
    if collapse:
        _collapsed(graph, out)
    else:
        _Drawer(out).graph(graph, "n", "  ", top=True)
    out.append("}")
    return "\n".join(out)


class _Drawer:
    """Writes the nodes and edges of a graph (and, nested, of its control-flow bodies)."""

    def __init__(self, out):
        self.out = out
        self.clusters = 0

    def graph(self, graph, prefix, indent, top=False):
        from .ir import GRAPH_OPS, _Names, _spec
        names = _Names()
        ids = {n: f"{prefix}{i}" for i, n in enumerate(graph.nodes)}
        out = self.out

        def declare(n, pad):
            label = n.op
            if n.op in ("read", "assign"):
                label += " " + graph.variables[n.attrs["var"]].name
            if n.op in ("send", "recv"):
                label += " " + str(n.attrs.get("key"))
            specs = ", ".join(f"{names[v]}: {_spec(v)}" for v in n.outputs)
            shape = ', shape=ellipse' if n.op in GRAPH_OPS else ''
            if n.op in ("send", "recv"):
                shape = ', shape=cds, style=filled, fillcolor="#f4cccc"'
            out.append(f'{pad}{ids[n]} [label="{_label(label, specs)}"{shape}];')
            for name, sub in n.subgraphs.items():
                self.body(n, ids[n], name, sub, pad)

        devices = graph.devices()
        if top and len(devices) > 1:
            for i, d in enumerate(devices):
                out.append(f'{indent}subgraph cluster_{i} {{\n{indent}  label="{_q(d)}"; '
                           "style=rounded;")
                for n in graph.nodes:
                    if n.device is d:
                        declare(n, indent + "  ")
                out.append(f"{indent}}}")
        else:
            for n in graph.nodes:
                declare(n, indent)
        sends = {n.attrs.get("key"): n for n in graph.nodes if n.op == "send"}
        for n in graph.nodes:
            for v in n.inputs:
                out.append(f"{indent}{ids[v.node]} -> {ids[n]};")
            for a in n.after:
                out.append(f"{indent}{ids[a]} -> {ids[n]} [style=dashed];")
            if n.op == "recv" and n.attrs.get("key") in sends:
                out.append(f"{indent}{ids[sends[n.attrs['key']]]} -> {ids[n]} "
                           "[color=red, penwidth=2];")

    def body(self, node, node_id, name, sub, pad):
        """A control-flow body as a dashed box, joined to the node that runs it."""
        self.clusters += 1
        cluster = f"cluster_body_{self.clusters}"
        prefix = f"{node_id}_{self.clusters}_"
        self.out.append(f'{pad}subgraph {cluster} {{\n{pad}  label="{_q(node.op)} {_q(name)}"; '
                        "style=dashed;")
        self.graph(sub, prefix, pad + "  ")
        self.out.append(f"{pad}}}")
        if sub.nodes:
            self.out.append(f"{pad}{prefix}{len(sub.nodes) - 1} -> {node_id} "
                            f"[ltail={cluster}, style=dotted, arrowhead=odot];")


# ---- collapsed by the user's line -------------------------------------------------------------

def groups(graph) -> dict:
    """{node: group key}: nodes of one user line and device share a key; graph inputs keep
    their own; a read or constant joins the group of the node that first uses it, an assign
    the group of what it stores."""
    key: dict = {}
    users = graph.users()
    for n in graph.nodes:
        if n.source and n.op != "input":
            key[n] = (n.source, n.device)
    for n in graph.nodes:
        if n in key:
            continue
        if n.op in ("read", "constant") and n.outputs:
            first = next((u for u in users.get(n.outputs[0], ()) if u in key), None)
            if first is not None:
                key[n] = key[first]
                continue
        if n.op == "assign" and n.inputs and n.inputs[0].node in key:
            key[n] = key[n.inputs[0].node]
            continue
        key[n] = n  # a group of its own
    return key


def line_text(source) -> str | None:
    """The code at a node's "file:line", when a file of that name is loaded or cached."""
    try:
        name, line = str(source).rsplit(":", 1)
        line = int(line)
    except ValueError:
        return None
    candidates = [f for f in list(linecache.cache) if os.path.basename(f) == name]
    candidates += [m.__file__ for m in list(sys.modules.values())
                   if isinstance(getattr(m, "__file__", None), str)
                   and os.path.basename(m.__file__) == name]
    for path in candidates:
        text = linecache.getline(path, line).strip()
        if text:
            return text if len(text) <= 60 else text[:57] + "..."
    return None


def _collapsed(graph, out) -> None:
    from .ir import _Names, _spec
    key = groups(graph)
    members: dict = {}
    for n in graph.nodes:
        members.setdefault(key[n], []).append(n)
    ids = {k: f"g{i}" for i, k in enumerate(members)}
    names = _Names()

    def declare(k, nodes, pad):
        if len(nodes) == 1:
            n = nodes[0]
            specs = ", ".join(f"{names[v]}: {_spec(v)}" for v in n.outputs)
            out.append(f'{pad}{ids[k]} [label="{_label(n.op, specs)}"'
                       f'{", shape=ellipse" if n.op in ("input", "read", "constant") else ""}];')
            return
        source = k[0]
        ops = Counter(n.op for n in nodes if n.op not in ("read", "constant", "assign"))
        shown = ", ".join(op if c == 1 else f"{op} x{c}" for op, c in ops.most_common(4))
        if len(ops) > 4:
            shown += ", ..."
        out.append(f'{pad}{ids[k]} [label="{_label(source, line_text(source), shown)}", '
                   f'tooltip="{len(nodes)} nodes", style="rounded,filled", '
                   'fillcolor="#e8eef7"];')

    devices = graph.devices()
    if len(devices) > 1:
        for i, d in enumerate(devices):
            out.append(f'  subgraph cluster_{i} {{\n    label="{_q(d)}"; style=rounded;')
            for k, nodes in members.items():
                if nodes[0].device is d:
                    declare(k, nodes, "    ")
            out.append("  }")
    else:
        for k, nodes in members.items():
            declare(k, nodes, "  ")
    edges: dict = {}
    for n in graph.nodes:
        for v in n.inputs:
            a, b = key[v.node], key[n]
            if a != b:
                edges.setdefault((a, b), dict.fromkeys(()))[v] = None
        for p in n.after:
            if key[p] != key[n]:
                edges.setdefault((key[p], key[n]), {})
    for (a, b), values in edges.items():
        label = f' [label="{_q(_spec(next(iter(values))))}"]' if len(values) == 1 else \
            "" if values else " [style=dashed]"
        out.append(f"  {ids[a]} -> {ids[b]}{label};")


# ---- SVG ---------------------------------------------------------------------------------

def dot_program() -> str | None:
    """The path of Graphviz's `dot`, or None when it is not installed."""
    return shutil.which("dot")


def to_svg(graph, collapse: bool | None = None) -> str:
    """The graph drawn by Graphviz as SVG text (collapsed when large, see to_dot)."""
    program = dot_program()
    if program is None:
        raise CaptureError("drawing a graph needs Graphviz's dot program, which is not on the "
                           "PATH: install it (apt-get install graphviz, brew install graphviz, "
                           "conda install graphviz), or use graph.to_dot() / print(graph)",
                           op="to_svg")
    done = subprocess.run([program, "-Tsvg"], input=to_dot(graph, collapse), text=True,
                          capture_output=True, timeout=60, check=False)
    if done.returncode != 0:
        raise CaptureError(f"Graphviz dot failed: {done.stderr.strip()[:500]}", op="to_svg")
    svg = done.stdout
    start = svg.find("<svg")  # Jupyter wants the element, not the XML prologue
    return svg[start:] if start >= 0 else svg
