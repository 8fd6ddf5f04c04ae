"""Device scopes and the placement pass: where tensors are created, where captured ops run,
the constraints the placer must honour (scopes, colocation, state beside its variable), its
cost-based choice for the rest, and the PlacementErrors for what cannot be met."""
from __future__ import annotations

import numpy as np
import pytest

import rill
from rill.capture.ir import Graph
from rill.capture.passes.cost import CostModel
from rill.capture.passes.place import place
from rill.devices import colocate_with  # also rill.colocate_with once exported
from rill.errors import PlacementError  # also PlacementError

CPU, CPU1 = rill.device("cpu"), rill.device("cpu:1")


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rill.tensor(rng.standard_normal(s)) for s in shapes]


# ---- eager scopes --------------------------------------------------------------------------

def test_tensors_created_in_a_scope_land_on_its_device():
    with rill.device("cpu:1"):
        assert rill.zeros(2).device is CPU1
        assert rill.tensor([1.0, 2.0]).device is CPU1
        assert rill.randn(3).device is CPU1
        assert rill.arange(4).device is CPU1
        assert rill.ones(2, device="cpu").device is CPU  # an explicit device wins
        with rill.device("cpu:2"):  # nested: the innermost
            assert rill.zeros(1).device is rill.device("cpu:2")
        assert rill.zeros(1).device is CPU1
        with rill.device(None):  # cleared
            assert rill.zeros(1).device is CPU
        layer = rill.nn.Linear(3, 2)
    assert all(p.device is CPU1 for p in layer.parameters())
    assert rill.zeros(1).device is CPU


def test_a_scope_never_copies_existing_tensors():
    x = rill.ones(3)
    with rill.device("cpu:1"):
        y = x * 2  # runs where its input is
        assert y.device is CPU
        with pytest.raises(rill.DeviceError, match="different devices"):
            x + rill.ones(3)  # a new tensor on cpu:1 beside one on cpu


def test_colocate_with_creates_beside_the_tensor():
    w = rill.zeros(3, device="cpu:1")
    with colocate_with(w):
        assert rill.ones(2).device is CPU1
    with pytest.raises(rill.DeviceError, match="takes a tensor"):
        colocate_with("cpu:1")


def test_scopes_are_per_thread():
    import threading
    seen = []
    with rill.device("cpu:1"):
        t = threading.Thread(target=lambda: seen.append(rill.zeros(1).device))
        t.start()
        t.join()
    assert seen == [CPU]


# ---- constraints while capturing -----------------------------------------------------------

def test_a_scope_while_capturing_places_the_recorded_ops():
    x, w = _arrays((4, 4), (4, 4))

    @rill.capture
    def f(x, w):
        h = x @ w
        with rill.device("cpu:1"):
            g = rill.tanh(h) @ w
        return g

    graph = f.graph_for(x, w)
    placed = [(n.op, n.device) for n in graph.nodes if n.op in ("matmul", "tanh")]
    assert placed == [("matmul", CPU), ("tanh", CPU1), ("matmul", CPU1)]
    assert graph.outputs[0].device is CPU  # results come back where the traced code had them
    assert "@cpu:1" in str(graph) and "to_device" in str(graph)
    np.testing.assert_array_equal(f(x, w).numpy(), (rill.tanh(x @ w) @ w).numpy())


def test_colocation_and_state_stay_with_their_variable():
    w = rill.tensor(np.ones((3, 3)), device="cpu:1")
    x, = _arrays((3, 3))

    @rill.capture
    def f(x):
        with colocate_with(w):
            y = x * 3.0  # x lives on cpu; the op goes beside w
        w.add_(1.0)      # the read and the assign stay where w lives
        return y

    graph = f.graph_for(x)
    assert [n.device for n in graph.nodes if n.op == "multiply"] == [CPU1]
    assert {n.device for n in graph.nodes if n.op in ("read", "assign")} == {CPU1}
    np.testing.assert_array_equal(f(x).numpy(), x.numpy() * 3.0)
    assert w.tolist()[0] == [2.0, 2.0, 2.0]


def test_two_independent_heavy_branches_go_to_two_devices():
    x, w1, w2 = _arrays((256, 256), (256, 256), (256, 256))

    def f(x, w1, w2):
        a, b = x, x
        for _ in range(4):
            a = a @ w1
            b = b @ w2
        return a + b

    captured = rill.capture(f, devices=["cpu:1"])
    graph = captured.graph_for(x, w1, w2)
    # traced alternately (a, b, a, b, ...): each chain whole on its own device
    assert [n.device for n in graph.nodes if n.op == "matmul"] == [CPU, CPU1] * 4
    np.testing.assert_array_equal(captured(x, w1, w2).numpy(), f(x, w1, w2).numpy())


def test_the_placer_splits_branches_of_a_hand_built_graph():
    g = Graph(name="branches")
    x = g.add("input", (), {"index": 0}, [((128, 128), rill.float64)], CPU).outputs[0]
    ends = []
    for _ in range(2):
        v = x
        for _ in range(3):
            v = g.add("matmul", (v, x), {}, [((128, 128), rill.float64)], CPU).outputs[0]
        ends.append(v)
    g.outputs = ends
    placed = place(g.lint(), devices=["cpu:1"]).lint()
    heavy = [n.device for n in placed.nodes if n.op == "matmul"]
    assert heavy[:3] == [CPU] * 3 and heavy[3:] == [CPU1] * 3
    # the input moves once to cpu:1 however many matmuls there use it
    assert sum(1 for n in placed.nodes if n.op == "to_device" and n.device is CPU1) == 1
    assert all(n.device is CPU for n in g.nodes)  # the pass left its input alone
    assert place(placed) is placed  # placing again changes nothing
    report = str(placed.placement_report())
    assert "cpu:1" in report and "matmul x3" in report and "128.0 kB" in report


def test_a_graph_on_one_device_is_left_as_it_is():
    g = Graph()
    x = g.add("input", (), {"index": 0}, [((2,), rill.float32)], CPU).outputs[0]
    g.outputs = [g.add("exp", (x,), {}, [((2,), rill.float32)], CPU).outputs[0]]
    assert place(g.lint()) is g


def test_measured_times_replace_the_estimates():
    g = Graph()
    x = g.add("input", (), {"index": 0}, [((8, 8), rill.float64)], CPU).outputs[0]
    a = g.add("matmul", (x, x), {}, [((8, 8), rill.float64)], CPU).outputs[0]
    b = g.add("exp", (x,), {}, [((8, 8), rill.float64)], CPU).outputs[0]
    g.outputs = [a, b]
    # by the estimates, the cheap exp waits for cpu rather than pay a transfer
    assert [n.device for n in place(g, devices=["cpu:1"]).nodes if n.op == "exp"] == [CPU]
    slow = CostModel({CostModel.key(g.nodes[1], "cpu"): 1.0})  # the matmul measured slow
    assert [n.device for n in place(g, devices=["cpu:1"], cost=slow).nodes
            if n.op == "exp"] == [CPU1]


# ---- what cannot be met --------------------------------------------------------------------

def test_an_op_with_no_kernel_on_the_scoped_device_is_a_placement_error():
    x = rill.tensor(np.eye(3) * 2.0)

    @rill.capture
    def f(x):
        with rill.device("gpu"):
            return rill.linalg.inv(x)  # no gpu kernel

    with pytest.raises(PlacementError, match=r"no gpu kernel.*inv") as info:
        f(x)
    assert "inv(%x0)" in info.value.message
    assert info.value.location.startswith("test_devices_placement.py:")
    assert info.value.node.op == "inv"


def test_colocation_with_a_value_pinned_elsewhere_is_a_placement_error():
    w = rill.ones(3)  # a variable on cpu

    @rill.capture
    def f(x):
        with rill.device("cpu:1"):
            with colocate_with(w):
                return x * w

    with pytest.raises(PlacementError, match="cannot both hold") as info:
        f(rill.ones(3))
    assert "multiply" in info.value.message
    assert info.value.location.startswith("test_devices_placement.py:")


def test_a_scope_inside_a_cond_branch_is_refused_with_the_reason():
    def branch(x):
        with rill.device("cpu:1"):
            return x * 2.0

    @rill.capture
    def f(p, x):
        return rill.cond(p, branch, lambda x: x + 1.0, x)

    with pytest.raises(PlacementError, match="cannot be split over devices"):
        f(rill.tensor(True), rill.ones(2))


def test_a_scope_around_a_whole_cond_moves_it():
    @rill.capture
    def f(p, x):
        with rill.device("cpu:1"):
            return rill.cond(p, lambda x: x * 2.0, lambda x: x + 1.0, x)

    x = rill.tensor([1.0, 3.0])
    graph = f.graph_for(rill.tensor(True), x)
    assert [n.device for n in graph.nodes if n.op == "switch"] == [CPU1]
    assert f(rill.tensor(True), x).tolist() == [2.0, 6.0]
    assert f(rill.tensor(False), x).tolist() == [2.0, 4.0]
