"""The partition pass: every cross-device edge a send/recv pair, one per (value, destination);
control edges across devices as zero-byte pairs that keep their order; per-device subgraphs
that stand alone; partial runs pruned before they are placed and partitioned."""
from __future__ import annotations

import numpy as np
import pytest

import rill
from rill.capture.executor import Program
from rill.capture.ir import Graph, Variable
from rill.capture.partitioned import PartitionedProgram
from rill.capture.passes.partition import partition, split
from rill.capture.passes.place import place

CPU, CPU1, CPU2 = rill.device("cpu"), rill.device("cpu:1"), rill.device("cpu:2")
F64 = rill.float64


def _input(g, index, device, shape=(4, 4)):
    return g.add("input", (), {"index": index}, [(shape, F64)], device).outputs[0]


def _op(g, op, inputs, device, shape=(4, 4), after=()):
    return g.add(op, inputs, {}, [(shape, F64)], device, after=after).outputs[0]


def _copy(g, v, device):
    return g.add("to_device", (v,), {"device": device, "source": v.device}, [(v.shape, F64)],
                 device).outputs[0]


def _pairs(graph):
    sends = [n for n in graph.nodes if n.op == "send"]
    recvs = [n for n in graph.nodes if n.op == "recv"]
    return sends, recvs


def test_one_pair_per_value_and_destination():
    g = Graph(name="fan_out")
    x = _input(g, 0, CPU)
    a = _op(g, "exp", (x,), CPU)
    outs = []
    for dest in (CPU1, CPU1, CPU1, CPU2):  # a is used three times on cpu:1, once on cpu:2
        outs.append(_op(g, "neg", (_copy(g, a, dest),), dest))
    g.outputs = [_copy(g, v, CPU) for v in outs]
    g.placed = True
    parted = partition(g.lint()).lint()
    sends, recvs = _pairs(parted)
    # a -> cpu:1 once, a -> cpu:2 once, and the four results back to cpu
    assert len(sends) == len(recvs) == 2 + 4
    from_a = [s for s in sends if s.inputs[0].node.op == "exp"]
    assert sorted(str(s.attrs["to"]) for s in from_a) == ["cpu:1", "cpu:2"]
    assert {s.attrs["key"] for s in sends} == {r.attrs["key"] for r in recvs}
    assert not any(n.op == "to_device" for n in parted.nodes)
    for n in parted.nodes:  # no edge crosses devices any more
        assert all(v.device is n.device for v in n.inputs)
    assert partition(parted) is not g and all(n.op != "send" for n in g.nodes)  # input intact


def test_placement_makes_one_copy_per_destination_however_many_users():
    g = Graph()
    x = _input(g, 0, CPU)
    a = _op(g, "exp", (x,), CPU)
    g.outputs = [a]
    uses = [g.add("neg", (a,), {}, [((4, 4), F64)], CPU) for _ in range(3)]
    from rill.capture.ir import Constraint
    for n in uses:
        n.constraint = Constraint(CPU1)
    g.outputs = [a] + [n.outputs[0] for n in uses]
    placed = place(g.lint()).lint()
    assert sum(1 for n in placed.nodes if n.op == "to_device" and n.device is CPU1) == 1
    sends, recvs = _pairs(partition(placed))
    assert len([s for s in sends if s.attrs["to"] is CPU1]) == 1
    assert len([s for s in sends if s.attrs["to"] is CPU]) == 3  # the three results back


def test_every_recv_comes_after_its_send_and_each_part_stands_alone():
    g = Graph(name="zigzag")
    x = _input(g, 0, CPU)
    v = x
    for i in range(6):
        dest = (CPU, CPU1)[i % 2]
        v = _op(g, "exp" if i % 3 else "neg", (_copy(g, v, dest) if v.device is not dest
                                                     else v,), dest)
    g.outputs = [_copy(g, v, CPU)]
    g.placed = True
    parted = partition(g.lint()).lint()
    position = {n: i for i, n in enumerate(parted.nodes)}
    sends = {n.attrs["key"]: n for n in parted.nodes if n.op == "send"}
    for n in parted.nodes:
        if n.op == "recv":
            assert position[sends[n.attrs["key"]]] < position[n]
    parts = split(parted)
    assert set(parts) == {CPU, CPU1}
    for d, part in parts.items():
        part.lint()
        assert all(n.device is d for n in part.nodes)
    assert len(parts[CPU].outputs) == 1 and not parts[CPU1].outputs


def _control_graph(slow=4):
    """cpu:1 runs a slow chain; cpu assigns a variable, ordered after the chain's end."""
    g = Graph(name="ordered")
    owner = rill.zeros(3)
    g.variables.append(Variable(owner, "value", "v", (3,), rill.float32, CPU))
    x = _input(g, 0, CPU1, (300, 300))
    v = x
    for _ in range(slow):
        v = _op(g, "matmul", (v, x), CPU1, (300, 300))
    last = v.node
    c = g.add("constant", (), {"value": np.ones(3, np.float32)}, [((3,), rill.float32)],
              CPU).outputs[0]
    g.add("assign", (c,), {"var": 0}, (), CPU, after=(last,))
    g.outputs = [v]
    g.placed = True
    return g.lint(), owner


def test_a_control_edge_across_devices_becomes_a_zero_byte_pair():
    g, _ = _control_graph()
    parted = partition(g).lint()
    sends, recvs = _pairs(parted)
    go = [s for s in sends if not s.inputs]
    assert len(go) == 1 and go[0].after[0].op == "matmul" and go[0].device is CPU1
    waits = [r for r in recvs if not r.outputs]
    assert len(waits) == 1 and waits[0].device is CPU
    assign = next(n for n in parted.nodes if n.op == "assign")
    assert assign.after == waits


def test_the_order_across_devices_holds_when_run():
    # Fails if the control pair is dropped: the assign would run at once, long before the
    # slow chain on cpu:1 ends.
    g, owner = _control_graph(slow=6)
    program = PartitionedProgram(partition(g), timeline=True)
    x = np.random.default_rng(0).standard_normal((300, 300)) / 300
    for _ in range(3):
        program([x])
        timeline = program.last_timeline
        chain_end = max(e.end for e in timeline if e.node.op == "matmul")
        assign = next(e for e in timeline if e.node.op == "assign")
        assert assign.start >= chain_end
    assert owner.tolist() == [1.0, 1.0, 1.0]


def test_dot_draws_devices_and_pairs():
    g, _ = _control_graph(slow=1)
    dot = partition(g).to_dot()
    assert 'label="cpu:1"' in dot and "subgraph cluster_1" in dot
    assert "color=red" in dot and "send 1:cpu:1->cpu" in dot


def test_feeds_and_fetches_prune_before_placement():
    @rill.capture
    def f(x):
        a = x * 2.0
        with rill.device("cpu:1"):
            b = rill.exp(x) @ x
        return a, b

    x = rill.tensor(np.random.default_rng(1).standard_normal((4, 4)))
    traced = f.graph_for(x, optimized=False)  # constraints recorded, nothing placed yet
    a, b = traced.outputs
    np.testing.assert_array_equal(traced.run(a, args=[x]).numpy(), x.numpy() * 2.0)
    np.testing.assert_array_equal(traced.run(b, args=[x]).numpy(),
                                  np.exp(x.numpy()) @ x.numpy())
    programs = {key: p for key, (p, _) in traced._partial.items()}
    kinds = sorted(type(p).__name__ for p in programs.values())
    # only the fetch that needs cpu:1 was spread over two devices
    assert kinds == ["PartitionedProgram", "Program"]
    # feeding the exp's value cuts cpu:1's input transfer; still one pair back for b
    e = next(n for n in traced.nodes if n.op == "exp").outputs[0]
    got = traced.run(b, feeds={e: rill.ones((4, 4), dtype=rill.float64)}, args=[x])
    np.testing.assert_array_equal(got.numpy(), np.ones((4, 4)) @ x.numpy())


def test_partitions_for_gives_a_graph_per_device():
    @rill.capture
    def f(x):
        with rill.device("cpu:1"):
            y = rill.tanh(x) * 3.0
        return y + x

    x = rill.ones((2, 2))
    parts = f.partitions_for(x)
    assert set(parts) == {"cpu", "cpu:1"}
    for part in parts.values():
        part.lint()
    ops = {name: [n.op for n in g.nodes] for name, g in parts.items()}
    assert "send" in ops["cpu"] and "recv" in ops["cpu:1"] and "tanh" in ops["cpu:1"]
    one = rill.capture(lambda x: x * 2.0)
    assert list(one.partitions_for(x)) == ["cpu"]
    assert isinstance(one.variants[next(iter(one.variants))].program, Program)


def test_a_partitioned_graph_cannot_be_loaded_from_a_file():
    from rill.capture import schema
    doc = {"nodes": [{"op": "recv", "inputs": [], "attrs": {}, "outputs": [],
                      "device": "cpu", "after": [], "source": None}], "outputs": []}
    with pytest.raises(rill.CheckpointError, match="made when a graph is loaded"):
        schema.graph(doc, schema.Path(), {}, {}, into=Graph())
