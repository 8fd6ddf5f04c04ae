"""Graph views: DOT with device and control-flow clusters, collapsing by the user's line, SVG
through Graphviz `dot` (skipped without it), and the fallback when `dot` is missing."""
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

import rill
import rill.nn as nn
from rill.capture import views

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz dot is not installed (apt-get install graphviz)")


class Deep(nn.Module):
    def __init__(self, width=8, depth=12):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x):
        for layer in self.layers:
            x = rill.tanh(layer(x))
        return x.sum()


def deep_graph():
    net = Deep()
    return rill.capture(net).graph_for(rill.ones(4, 8))


def branchy_graph():
    @rill.capture
    def f(x):
        y = rill.exp(x)
        z = rill.cond(y.sum() > 1.0, lambda a: a * 2.0, lambda a: a - 1.0, y)
        return rill.fori_loop(0, 3, lambda i, v: rill.tanh(v), z)
    return f.graph_for(rill.ones(3))


def two_device_graph():
    @rill.capture
    def f(x):
        a = rill.exp(x)
        with rill.device("cpu:1"):
            b = rill.tanh(a) * 2.0
        return b + 1.0
    return f.graph_for(rill.ones(3))


def clusters(dot):
    """{cluster name: label} of the subgraph boxes a DOT text declares."""
    return dict(re.findall(r'subgraph (cluster_\w+) \{\s*label="([^"]*)"', dot))


def test_control_flow_bodies_are_dashed_clusters_joined_to_their_node():
    dot = branchy_graph().to_dot()
    labels = clusters(dot)
    ops = {label.split()[0] for label in labels.values()}
    assert len(labels) >= 3  # two cond branches and the loop body
    assert any("branches[0]" in label for label in labels.values())
    assert any("body" in label for label in labels.values()), labels
    assert len(ops) == 2, labels
    for name in labels:
        assert f"ltail={name}" in dot
    # the branches' own nodes are drawn inside them
    assert dot.count('label="tanh') >= 1 and dot.count('label="multiply') >= 1


def test_device_clusters_hold_their_nodes():
    graph = two_device_graph()
    dot = graph.to_dot()
    labels = clusters(dot)
    assert sorted(labels.values()) == ["cpu", "cpu:1"]
    body = dot.split("subgraph cluster_1 {")[1].split("}")[0]
    assert "tanh" in body and "exp" not in body


def test_large_graphs_collapse_by_the_users_line_and_expand_on_request():
    graph = deep_graph()
    assert graph.count() > views.COLLAPSE_ABOVE
    full = graph.to_dot()
    collapsed = graph.to_dot(collapse=True)
    assert graph.to_dot(collapse=None) == collapsed
    assert full.count("[label=") > graph.count()
    boxes = re.findall(r'^\s*(g\d+) \[label="([^"]*)"', collapsed, re.M)
    grouped = [label for _, label in boxes if "x = rill.tanh(layer(x))" in label]
    assert len(grouped) == 1  # one line of user code: one box
    assert "linear x12" in grouped[0] and "tanh x12" in grouped[0]
    assert len(boxes) < 6
    # a small graph stays expanded by default
    small = rill.capture(lambda x: rill.exp(x) + 1.0).graph_for(rill.ones(2))
    assert small.to_dot(collapse=None) == small.to_dot()


def test_groups_put_reads_with_their_user():
    graph = deep_graph()
    key = views.groups(graph)
    reads = [n for n in graph.nodes if n.op == "read"]
    assert reads and all(isinstance(key[n], tuple) for n in reads)
    assert len({key[n] for n in graph.nodes if n.op == "linear"}) == 1


@needs_dot
def test_svg_renders_with_dot():
    for graph in (branchy_graph(), two_device_graph(), deep_graph()):
        svg = graph._repr_svg_()
        assert svg.startswith("<svg")
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg")
        texts = "".join(root.itertext())
        assert graph.name in texts or "input" in texts
    expanded = deep_graph().to_svg(collapse=False)
    assert expanded.count("linear") >= 12


@needs_dot
def test_captured_function_graph_renders_in_a_notebook():
    f = rill.capture(lambda x: rill.exp(x) * 2.0)
    graph = f.graph_for(rill.ones(2))
    assert "exp" in graph._repr_svg_() and "multiply" in graph._repr_svg_()


def test_without_dot_the_notebook_falls_back_and_to_svg_says_how_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert shutil.which("dot") is None
    graph = two_device_graph()
    assert graph._repr_svg_() is None
    assert "exp" in graph._repr_html_()
    with pytest.raises(rill.Error, match="apt-get install graphviz"):
        graph.to_svg()


def test_dot_errors_are_rill_errors(monkeypatch, tmp_path):
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(rill.CaptureError, match="Graphviz dot failed: syntax error"):
        two_device_graph().to_svg()


def test_labels_are_quoted():
    graph = two_device_graph()
    graph.name = 'a "quoted" name'
    assert 'digraph "a \\"quoted\\" name"' in graph.to_dot()
