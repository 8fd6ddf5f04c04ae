"""rill.onnx.load against hostile files: each test builds the attack with onnx.helper and
checks that it ends in a rill error naming the file (and the node), within a few seconds,
without allocating past the budget (issue 30, hardening round 2)."""
import os
import tracemalloc

import numpy as np
import pytest

import rill

onnx = pytest.importorskip("onnx")
import rill.onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

Limits, ONNXError, ONNXBudgetError = rill.onnx.Limits, rill.onnx.ONNXError, \
    rill.onnx.ONNXBudgetError
PEAK = 64 << 20  # bytes any refused attack may allocate on the way (tracemalloc's peak)


def vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs=(), outputs=("y",), inits=(), functions=(), opset=17):
    outs = [o if not isinstance(o, str) else vi(o) for o in outputs]
    graph = helper.make_graph(list(nodes), "g", list(inputs), outs, initializer=list(inits))
    opsets = [helper.make_opsetid("", opset)] + \
        ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def save(tmp_path, m, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return str(path)


def refused(fn, error=ONNXError, *needles):
    """The error fn raises (of class `error`, naming every needle), checked to come before
    anything of the attack's size was allocated."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as info:
            fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK, f"{peak:,} bytes allocated before refusing"
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    return info.value


def identity_body(carried=1):
    """A Loop body that hands its condition and carried values through."""
    names = [f"v{k}" for k in range(carried)]
    nodes = [helper.make_node("Identity", ["c"], ["c_out"])] + \
        [helper.make_node("Identity", [n], [n + "_out"]) for n in names]
    return helper.make_graph(
        nodes, "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, [])] +
        [vi(n, shape=[1]) for n in names],
        [vi("c_out", TensorProto.BOOL, [])] + [vi(n + "_out", shape=[1]) for n in names])


# ---- loops, functions, nesting: no count in the file escapes the budget ------------------

@pytest.mark.timeout(60)
def test_loop_trip_count_of_a_billion_is_refused_before_the_first_trip(tmp_path):
    m = model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=identity_body())],
              [vi("x", shape=[1])], inits=[ints("M", 10 ** 9)])
    path = save(tmp_path, m)
    assert os.path.getsize(path) < 300  # a tiny file that asked for a billion trips
    f = rill.onnx.load(path)
    e = refused(lambda: f(rill.ones(1)), ONNXBudgetError, path, "Loop node #0",
                "max_loop_trips", "1,000,000,000")
    assert e.file == path and e.node.startswith("Loop node #0")


@pytest.mark.timeout(60)
def test_loop_whose_condition_never_stops_is_refused_at_the_budget():
    m = model([helper.make_node("Loop", ["", "go", "x"], ["y"], body=identity_body())],
              [vi("x", shape=[1])],
              inits=[numpy_helper.from_array(np.array(True), "go")])
    f = rill.onnx.load(m, limits=Limits(max_loop_trips=200))
    refused(lambda: f(rill.ones(1)), ONNXBudgetError, "Loop node #0", "200")


@pytest.mark.timeout(60)
def test_nested_loops_each_under_the_cap_fail_on_their_product():
    inner = helper.make_node("Loop", ["N", "", "v0"], ["v0_out"], body=identity_body())
    body = identity_body()
    body.node.pop()  # the carried value now comes from the inner loop
    body.node.append(inner)
    outer = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="outer")
    m = model([outer], [vi("x", shape=[1])], inits=[ints("M", 2000), ints("N", 2000)])
    f = rill.onnx.load(m)  # default budget: 100,000 trips; each loop asks for 2,000
    e = refused(lambda: f(rill.ones(1)), ONNXBudgetError, "4,000,000", "max_loop_trips",
                "inside Loop node #0 'outer'")
    assert e.node == "Loop node #1"  # the inner loop, at its first run


@pytest.mark.timeout(20)
@pytest.mark.parametrize("capture", [True, False])
def test_data_dependent_loop_that_never_stops_fails_when_it_runs(capture):
    # The condition reads the input, so the loop is a rill.while_loop, not unrolled: the
    # rest of the trip budget caps it when the graph runs, and reaching the cap is an error.
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c_out"]),
         helper.make_node("Identity", ["v"], ["v_out"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []),
                 vi("v", shape=[1])], [vi("c_out", TensorProto.BOOL, []), vi("v_out", shape=[1])])
    go = helper.make_node("Greater", ["xs", "zero"], ["go"])
    m = model([helper.make_node("ReduceSum", ["x"], ["xs"], keepdims=0), go,
               helper.make_node("Loop", ["", "go", "x"], ["y"], body=body)],
              [vi("x", shape=[1])], inits=[numpy_helper.from_array(np.array(0, np.float32),
                                                                   "zero")])
    f = rill.onnx.load(m, capture=capture, limits=Limits(max_loop_trips=50))
    assert f(-rill.ones(1)).numpy().tolist() == [-1.0]  # stops at once: fine
    with pytest.raises(rill.Error, match="still running after 50 trips"):
        f(rill.ones(1))


def _doubling_chain(depth):
    """Local functions f0..f{depth}: each calls the one below twice (2**depth calls)."""
    functions = [helper.make_function("local", "f0", ["a"], ["b"],
                                      [helper.make_node("Identity", ["a"], ["b"])],
                                      [helper.make_opsetid("", 17)])]
    for k in range(1, depth + 1):
        nodes = [helper.make_node(f"f{k - 1}", ["a"], ["t"], domain="local"),
                 helper.make_node(f"f{k - 1}", ["t"], ["b"], domain="local")]
        functions.append(helper.make_function("local", f"f{k}", ["a"], ["b"], nodes,
                                              [helper.make_opsetid("", 17),
                                               helper.make_opsetid("local", 1)]))
    return functions


@pytest.mark.timeout(60)
def test_function_doubling_chain_is_refused_at_load():
    m = model([helper.make_node("f30", ["x"], ["y"], domain="local")], [vi("x", shape=[1])],
              functions=_doubling_chain(30))
    refused(lambda: rill.onnx.load(m), ONNXBudgetError, "max_nodes", "ModelProto 'g'")
    # the same chain, short enough, runs and means what it says
    small = model([helper.make_node("f3", ["x"], ["y"], domain="local")],
                  [vi("x", shape=[1])], functions=_doubling_chain(3))
    assert rill.onnx.load(small)(rill.ones(1)).numpy().tolist() == [1.0]


@pytest.mark.timeout(60)
def test_recursive_function_is_refused():
    call = helper.make_node("f", ["a"], ["b"], domain="local")
    f = helper.make_function("local", "f", ["a"], ["b"], [call],
                             [helper.make_opsetid("local", 1)])
    m = model([helper.make_node("f", ["x"], ["y"], domain="local")], [vi("x", shape=[1])],
              functions=[f])
    refused(lambda: rill.onnx.load(m), ONNXError, "calls itself")


@pytest.mark.timeout(60)
def test_deep_nesting_of_subgraphs_and_calls_is_refused():
    # function calls: f40 calls f39 ... calls f0, past the default depth of 32
    chain = [helper.make_function("local", "f0", ["a"], ["b"],
                                  [helper.make_node("Identity", ["a"], ["b"])],
                                  [helper.make_opsetid("", 17)])]
    chain += [helper.make_function("local", f"f{k}", ["a"], ["b"],
                                   [helper.make_node(f"f{k - 1}", ["a"], ["b"], domain="local")],
                                   [helper.make_opsetid("local", 1)]) for k in range(1, 41)]
    calls = model([helper.make_node("f40", ["x"], ["y"], domain="local")],
                  [vi("x", shape=[1])], functions=chain)
    refused(lambda: rill.onnx.load(calls), ONNXBudgetError, "max_depth")
    # subgraphs: protobuf itself refuses ~33 levels of If, so a smaller budget shows it
    leaf = graph = helper.make_graph([helper.make_node("Identity", ["x"], ["r"])], "leaf",
                                     [], [vi("r")])
    for level in range(12):
        node = helper.make_node("If", ["cond"], [f"r{level}"], then_branch=graph,
                                else_branch=leaf)
        graph = helper.make_graph([node], f"level{level}", [], [vi(f"r{level}")])
    m = model(graph.node, [vi("x", shape=[1]), vi("cond", TensorProto.BOOL, [])],
              outputs=["r11"])
    refused(lambda: rill.onnx.load(m, limits=Limits(max_depth=8)), ONNXBudgetError,
            "max_depth")
    assert rill.onnx.load(m)(rill.ones(1), rill.tensor(True)).numpy().tolist() == [1.0]


@pytest.mark.timeout(60)
def test_too_many_nodes_at_run_time_are_refused():
    # 20 trips of a 10-node body: within the trip budget, past a node budget of 100
    body = identity_body()
    for _ in range(9):
        body.node.append(helper.make_node("Identity", ["v0"], ["spare"]))
    m = model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
              [vi("x", shape=[1])], inits=[ints("M", 20)])
    f = rill.onnx.load(m, limits=Limits(max_nodes=100))
    refused(lambda: f(rill.ones(1)), ONNXBudgetError, "max_nodes")
    assert rill.onnx.load(m)(rill.ones(1)).numpy().tolist() == [1.0]


# ---- sizes: checked before anything of that size exists -----------------------------------

HUGE = [10 ** 6, 10 ** 6]  # 10^12 elements


def _huge_models():
    x = [vi("x", shape=[1])]
    y = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    yield "Expand", model([helper.make_node("Expand", ["x", "s"], ["y"])], x, y,
                          [ints("s", HUGE)])
    yield "ConstantOfShape", model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [], y,
                                   [ints("s", HUGE)])
    yield "Tile", model([helper.make_node("Tile", ["x", "r"], ["y"])], x, y,
                        [ints("r", [10 ** 12])])
    yield "Range", model([helper.make_node("Range", ["a", "b", "d"], ["y"])], [], y,
                         [numpy_helper.from_array(np.array(v, np.int64), n)
                          for n, v in (("a", 0), ("b", 10 ** 12), ("d", 1))])
    yield "Resize", model([helper.make_node("Resize", ["x4", "", "", "sizes"], ["y"])],
                          [vi("x4", shape=[1, 1, 2, 2])], y,
                          [ints("sizes", [1, 1] + HUGE)])
    yield "Pad", model([helper.make_node("Pad", ["x", "p"], ["y"])], x, y,
                       [ints("p", [0, 10 ** 12])])
    yield "OneHot", model([helper.make_node("OneHot", ["i", "depth", "v"], ["y"])],
                          [vi("i", TensorProto.INT64, [4])], y,
                          [ints("depth", 10 ** 12),
                           numpy_helper.from_array(np.array([0, 1], np.float32), "v")])
    # an Expand that is fine alone, fed to an op that materializes it
    yield "Add", model([helper.make_node("Expand", ["x", "s"], ["e"]),
                        helper.make_node("Add", ["e", "e"], ["y"])], x, y,
                       [ints("s", [10 ** 5, 10 ** 5])])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("op,m", list(_huge_models()), ids=[op for op, _ in _huge_models()])
def test_huge_outputs_are_refused_before_allocation(op, m, tmp_path):
    path = save(tmp_path, m)
    f = rill.onnx.load(path, capture=False)
    args = [rill.ones([d.dim_value for d in i.type.tensor_type.shape.dim],
                      dtype=rill.int64 if i.type.tensor_type.elem_type == TensorProto.INT64
                      else rill.float32) for i in m.graph.input]
    e = refused(lambda: f(*args), ONNXBudgetError, path, "max_elements")
    assert op in e.node or op == "Add", e.node


@pytest.mark.timeout(60)
def test_size_budget_is_configurable_and_holds_captured_graphs_too():
    m = model([helper.make_node("ConstantOfShape", ["s"], ["c"]),
               helper.make_node("Add", ["c", "x"], ["y"])], [vi("x", shape=[1])],
              inits=[ints("s", [300, 300])])
    small = Limits(max_elements=50_000)
    refused(lambda: rill.onnx.load(m, limits=small)(rill.ones(1)), ONNXBudgetError,
            "90,000", "ConstantOfShape node #0")
    assert rill.onnx.load(m)(rill.ones(1)).shape == (300, 300)
    # a traced (not static) value's shape is checked as it is recorded
    expand = model([helper.make_node("Expand", ["x", "s"], ["e"]),
                    helper.make_node("Exp", ["e"], ["y"])], [vi("x", shape=[1])],
                   inits=[ints("s", [300, 300])])
    refused(lambda: rill.onnx.load(expand, limits=small)(rill.ones(1)), ONNXBudgetError,
            "Expand node #0")
    total = Limits(max_total_elements=100_000)
    refused(lambda: rill.onnx.load(m, limits=total)(rill.ones(1)), ONNXBudgetError,
            "max_total_elements")
    # the weights count toward a run's total: 40k of weights, 40k of constant, 40k of sum
    both = model([helper.make_node("ConstantOfShape", ["s"], ["c"]),
                  helper.make_node("Add", ["c", "w"], ["y"])], [vi("unused", shape=[1])],
                 inits=[ints("s", [40_000]),
                        numpy_helper.from_array(np.ones(40_000, np.float32), "w")])
    refused(lambda: rill.onnx.load(both, limits=total)(rill.ones(1)), ONNXBudgetError,
            "max_total_elements", "Add node #1")
    f = rill.onnx.load(both, limits=Limits(max_total_elements=200_000))
    assert f(rill.ones(1)).shape == (40_000,)


@pytest.mark.timeout(60)
def test_initializer_that_claims_a_huge_shape_is_refused_before_decoding(tmp_path):
    t = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    t.dims[:] = HUGE
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", shape=[1])], inits=[t])
    path = save(tmp_path, m)
    refused(lambda: rill.onnx.load(path), ONNXBudgetError, path, "initializer 'w'",
            "max_elements")


@pytest.mark.timeout(60)
def test_limits_are_checked():
    with pytest.raises(ONNXError, match="max_nodes must be a positive int"):
        Limits(max_nodes=0)
    with pytest.raises(ONNXError, match="limits must be a rill.onnx.Limits"):
        rill.onnx.load(model([]), limits={"max_nodes": 5})


# ---- files that do not decode ---------------------------------------------------------------

def _valid_bytes():
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", shape=[4])],
                 inits=[w]).SerializeToString()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "flipped"])
def test_bytes_that_do_not_decode_name_the_file(tmp_path, damage):
    data = _valid_bytes()
    data = {"truncated": data[:len(data) // 2], "garbage": bytes(range(256)) * 4,
            "empty": b"", "flipped": bytes([data[0] ^ 0xFF]) + data[1:]}[damage]
    path = save(tmp_path, model([]))
    open(path, "wb").write(data)
    refused(lambda: rill.onnx.load(path), ONNXError, path)


@pytest.mark.timeout(60)
def test_paths_that_are_not_model_files(tmp_path):
    refused(lambda: rill.onnx.load(tmp_path / "missing.onnx"), ONNXError, "missing.onnx")
    refused(lambda: rill.onnx.load(tmp_path), ONNXError, "not a regular file")
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)  # nobody writes to it: reading it would wait forever
    refused(lambda: rill.onnx.load(fifo), ONNXError, "not a regular file")
    refused(lambda: rill.onnx.load(12), ONNXError, "got int")


# ---- external data ----------------------------------------------------------------------------

def _external_model(location, offset=0, length=16, dims=(4,)):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", shape=[4])],
                 inits=[t])


@pytest.mark.timeout(60)
def test_external_data_inside_the_folder_is_read(tmp_path):
    values = np.arange(4, dtype=np.float32)
    (tmp_path / "weights.bin").write_bytes(b"\1" * 8 + values.tobytes())
    path = save(tmp_path, _external_model("weights.bin", offset=8))
    got = rill.onnx.load(path)(rill.zeros(4))
    assert got.numpy().tolist() == values.tolist()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("attack", ["missing", "parent", "absolute", "dev_zero", "fifo",
                                    "symlink_out", "symlink_dir", "short", "offset", "length",
                                    "no_folder", "bad_offset"])
def test_external_data_attacks(tmp_path, attack):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    (folder / "w.bin").write_bytes(b"\0" * 16)
    location, offset, length = "w.bin", 0, 16
    if attack == "missing":
        location = "nothere.bin"
    elif attack == "parent":
        location = "../../etc/passwd"
    elif attack == "absolute":
        location = "/etc/passwd"
    elif attack == "dev_zero":
        location = "/dev/zero"
    elif attack == "fifo":
        os.mkfifo(folder / "pipe.bin")
        location = "pipe.bin"
    elif attack == "symlink_out":
        os.symlink(tmp_path / "secret.bin", folder / "link.bin")
        location = "link.bin"
    elif attack == "symlink_dir":
        os.symlink(tmp_path, folder / "up")
        location = "up/secret.bin"
    elif attack == "short":
        (folder / "w.bin").write_bytes(b"\0" * 10)
    elif attack == "offset":
        offset = 8
    elif attack == "length":
        length = 10 ** 12
    elif attack == "bad_offset":
        offset = "12abc"
    m = _external_model(location, offset, length)
    if attack == "no_folder":  # a ModelProto in memory names no folder to read from
        refused(lambda: rill.onnx.load(m), ONNXError, "ModelProto", "initializer 'w'")
        return
    path = save(folder, m)
    refused(lambda: rill.onnx.load(path), ONNXError, path, "initializer 'w'")


# ---- initializers whose data disagree with their type -------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["raw_length", "negative_dim", "unknown_type",
                                    "undefined_type", "string", "typed_count", "no_data",
                                    "constant_value"])
def test_initializers_that_do_not_decode(tmp_path, damage):
    t = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    if damage == "raw_length":
        t.raw_data = t.raw_data[:7]
    elif damage == "negative_dim":
        t.dims[0] = -4
    elif damage == "unknown_type":
        t.data_type = 99
    elif damage == "undefined_type":
        t.data_type = TensorProto.UNDEFINED
    elif damage == "string":
        t = helper.make_tensor("w", TensorProto.STRING, [1], [b"abc"])
    elif damage == "typed_count":
        t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], float_data=[1, 2])
    elif damage == "no_data":
        t.ClearField("raw_data")
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    inits = [t]
    if damage == "constant_value":  # the same checks hold for a Constant node's tensor
        t.raw_data = t.raw_data[:7]
        nodes = [helper.make_node("Constant", [], ["w"], value=t)] + nodes
        inits = []
    path = save(tmp_path, model(nodes, [vi("x", shape=[4])], inits=inits))
    if damage == "constant_value":
        f = rill.onnx.load(path)
        refused(lambda: f(rill.ones(4)), ONNXError, path, "Constant node #0", "raw data")
    else:
        refused(lambda: rill.onnx.load(path), ONNXError, path, "initializer 'w'")


# ---- damaged names, attributes, wiring ----------------------------------------------------------

def _damaged(damage):
    x = [vi("x", shape=[2, 3])]
    if damage == "dangling_input":
        return model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")], x)
    if damage == "empty_names":
        return model([helper.make_node("Relu", [""], [""])], x, outputs=[""])
    if damage == "missing_attribute":
        return model([helper.make_node("Concat", ["x", "x"], ["y"])], x)
    if damage == "wrong_attribute_type":
        return model([helper.make_node("Transpose", ["x"], ["y"], perm="not ints")], x)
    if damage == "body_not_a_graph":
        return model([helper.make_node("Loop", ["", "", "x"], ["y"], body=3)], x)
    if damage == "undefined_attribute":
        node = helper.make_node("Softmax", ["x"], ["y"])
        node.attribute.add().name = "axis"  # type UNDEFINED, no value
        return model([node], x)
    if damage == "no_outputs":
        return model([helper.make_node("Relu", ["x"], [])], x)
    if damage == "output_never_made":
        return model([helper.make_node("Relu", ["x"], ["z"])], x)
    if damage == "bad_body":  # a Loop body declaring fewer inputs than it is fed
        body = helper.make_graph([], "body", [], [])
        return model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)], x,
                     inits=[ints("M", 2)])
    if damage == "bad_axis":
        return model([helper.make_node("Softmax", ["x"], ["y"], axis=40)], x)
    raise AssertionError(damage)


DAMAGES = ["dangling_input", "empty_names", "missing_attribute", "wrong_attribute_type",
           "body_not_a_graph", "undefined_attribute", "no_outputs", "output_never_made",
           "bad_body", "bad_axis"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("capture", [True, False])
def test_damaged_graphs_raise_rill_errors_naming_file_and_node(tmp_path, damage, capture):
    path = save(tmp_path, _damaged(damage))
    e = refused(lambda: rill.onnx.load(path, capture=capture)(rill.ones((2, 3))), ONNXError,
                path)
    if damage not in ("output_never_made", "no_outputs"):  # no node made the output
        assert e.node is not None and "node #0" in e.node, str(e)
    if damage == "dangling_input":
        assert "Add node #0 'add'" in str(e) and "'nowhere'" in str(e)


# ---- initializer names never collide with the module -----------------------------------------

@pytest.mark.timeout(60)
def test_initializer_names_cannot_shadow_module_attributes():
    names = ["forward", "parameters", "state_dict", "training", "_parameters", "__init__",
             "initializer_names", "eval", "x.y", "0"]
    inits = [numpy_helper.from_array(np.full(2, k, np.float32), n) for k, n in enumerate(names)]
    nodes, last = [], "x"
    for k, name in enumerate(names):
        nodes.append(helper.make_node("Add", [last, name], [f"s{k}"]))
        last = f"s{k}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    # trainable=True: added vectors are no weights by default, and the names matter here
    f = rill.onnx.load(model(nodes, [vi("x", shape=[2])], inits=inits), trainable=True)
    assert f(rill.zeros(2)).numpy().tolist() == [45.0, 45.0]  # 0 + 1 + ... + 9
    module = f.module
    assert sorted(module.initializer_names.values()) == sorted(names)
    assert callable(module.forward) and callable(module.parameters)
    assert isinstance(module.initializer_names, dict) and module.training
    module.eval()  # sets .training: must not meet an initializer named training
    assert not module.training
    module.train()
    state = module.state_dict()
    assert len(state) == len(names) == len(list(module.parameters()))
    for key, name in module.initializer_names.items():
        assert np.allclose(state[key].numpy(), names.index(name))
    # the keys keep the ONNX names where those are identifiers no attribute already has
    assert "x_y" in state and "forward" not in state
    # fine-tuning reaches them
    loss = f(rill.zeros(2)).sum()
    loss.backward()
    assert all(p.grad is not None for p in module.parameters())
