"""Fuzzing rill.onnx.load: mutated ONNX files, at the protobuf level (bytes flipped, cut,
inserted) and at the graph level (inputs renamed or dropped, dims, dtypes and attributes
changed, op types swapped, counts made huge). Seeded and deterministic. The rule: loading
and running each file either works or raises a rill.Error, within a time bound per case,
without allocating past the budget; a model that loads also runs or fails with a rill.Error.
"""
import random
import time
import tracemalloc
import warnings
import zlib

import numpy as np
import pytest

import rill

onnx = pytest.importorskip("onnx")
import rill.onnx  # noqa: E402
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper  # noqa: E402

LIMITS = rill.onnx.Limits(max_elements=1 << 16, max_total_elements=1 << 20,
                          max_loop_trips=200, max_nodes=2_000, max_depth=8)
PEAK = 48 << 20  # bytes: the budget's 1M elements of float64, and room for the decoder
CASE_SECONDS = 10.0  # per case, on a slow shared machine (a first call compiles)


def vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _model(nodes, inputs, outputs, inits, functions=(), opset=17):
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, initializer=inits)
    opsets = [helper.make_opsetid("", opset)] + \
        ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=opsets, functions=list(functions))


def _bases():
    """A few small valid models covering weights, shapes, control flow and functions."""
    rng = np.random.default_rng(0)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    mlp = _model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                  helper.make_node("Relu", ["h"], ["r"]),
                  helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)],
                 [vi("x", shape=[2, 4])], [vi("y")],
                 [const("w1", w(8, 4)), const("b1", w(8)), const("w2", w(3, 8)),
                  const("b2", w(3))])
    conv = _model([helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
                   helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2],
                                    strides=[2, 2]),
                   helper.make_node("Flatten", ["p"], ["y"])],
                  [vi("x", shape=[1, 2, 4, 4])], [vi("y")],
                  [const("k", w(3, 2, 3, 3)), const("s", np.ones(3)), const("b", w(3)),
                   const("m", np.zeros(3)), const("v", np.ones(3))])
    shapes = _model([helper.make_node("Shape", ["x"], ["sh"]),
                     helper.make_node("ConstantOfShape", ["sh"], ["z"],
                                      value=const("", [0.5])),
                     helper.make_node("Add", ["x", "z"], ["a"]),
                     helper.make_node("Expand", ["a", "e"], ["big"]),
                     helper.make_node("Tile", ["big", "t"], ["tiled"]),
                     helper.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
                     helper.make_node("Reshape", ["tiled", "rs"], ["flat"]),
                     helper.make_node("Slice", ["flat", "st", "en"], ["sl"]),
                     helper.make_node("Unsqueeze", ["sl", "ax"], ["y"])],
                    [vi("x", shape=[2, 3])], [vi("y"), vi("rg", TensorProto.INT64)],
                    [const("e", [2, 2, 3], np.int64), const("t", [1, 2, 1], np.int64),
                     const("r0", 0, np.int64), const("r1", 5, np.int64),
                     const("r2", 1, np.int64), const("rs", [-1], np.int64),
                     const("st", [1], np.int64), const("en", [7], np.int64),
                     const("ax", [0], np.int64)])
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [vi("i", TensorProto.INT64, []), vi("c", TensorProto.BOOL, []),
                 vi("acc", shape=[3])],
        [vi("c_out", TensorProto.BOOL, []), vi("acc_out", shape=[3]), vi("scan", shape=[3])])
    branch = lambda op: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["total"], ["out"])], op, [], [vi("out")])
    control = _model([helper.make_node("Loop", ["n", "", "x"], ["total", "rows"], body=body),
                      helper.make_node("If", ["flag"], ["y"], then_branch=branch("Relu"),
                                       else_branch=branch("Neg"))],
                     [vi("x", shape=[3])], [vi("y"), vi("rows")],
                     [const("n", 4, np.int64), const("flag", True, np.bool_)])
    square = helper.make_function("local", "square_plus", ["a", "b"], ["out"],
                                  [helper.make_node("Mul", ["a", "a"], ["sq"]),
                                   helper.make_node("Add", ["sq", "b"], ["out"])],
                                  [helper.make_opsetid("", 17)])
    functions = _model([helper.make_node("square_plus", ["x", "w"], ["h"], domain="local"),
                        helper.make_node("square_plus", ["h", "w"], ["y"], domain="local")],
                       [vi("x", shape=[4])], [vi("y")], [const("w", w(4))],
                       functions=[square])
    return {"mlp": mlp, "conv": conv, "shapes": shapes, "control": control,
            "functions": functions}


BASES = _bases()
OPS = sorted(["Add", "Mul", "Relu", "Gemm", "Conv", "Reshape", "Expand", "Tile", "Range",
              "ConstantOfShape", "Loop", "If", "Scan", "Concat", "Split", "Slice", "Gather",
              "Transpose", "Softmax", "MaxPool", "Resize", "Pad", "OneHot", "LRN", "LSTM",
              "ReduceSum", "Cast", "TopK", "Einsum", "DFT", "Squeeze", "Where", "CumSum",
              "NonZero", "Unique", "EyeLike", "Trilu", "GridSample", "AveragePool",
              "NoSuchOp", ""])
EXTREMES = [0, 1, -1, 2, 7, 255, -2 ** 31, 2 ** 31, 10 ** 9, 10 ** 12, 2 ** 62, -2 ** 63]


# ---- protobuf-level mutations: the serialized bytes -------------------------------------------

def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["flip", "flip", "truncate", "insert", "duplicate", "byte"])
        at = rng.randrange(max(len(data), 1))
        if kind == "flip" and data:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "byte" and data:
            data[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            chunk = data[at:at + rng.randint(1, 32)]
            data[at:at] = chunk
    return bytes(data)


# ---- graph-level mutations: the ModelProto ---------------------------------------------------

def _node_lists(m):
    """Every repeated node field of the model: the graph's, subgraphs', functions'."""
    lists = []

    def walk(nodes):
        lists.append(nodes)
        for node in nodes:
            for attr in node.attribute:
                if attr.type == AttributeProto.GRAPH:
                    walk(attr.g.node)
    walk(m.graph.node)
    for f in m.functions:
        walk(f.node)
    return lists


def _value_names(m):
    names = {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer}
    for nodes in _node_lists(m):
        for node in nodes:
            names.update(node.output)
    return sorted(names)


def _mutate_attribute(node, rng):
    if not node.attribute or rng.random() < 0.2:
        attr = node.attribute.add()
        attr.name = rng.choice(["axis", "perm", "kernel_shape", "to", "mode", "body", "value"])
    else:
        attr = rng.choice(node.attribute)
    kind = rng.choice(["type", "int", "ints", "float", "string", "tensor", "graph", "drop"])
    if kind == "type":
        attr.type = rng.choice(list(AttributeProto.AttributeType.values()))
    elif kind == "int":
        attr.type, attr.i = AttributeProto.INT, rng.choice(EXTREMES)
    elif kind == "ints":
        attr.type = AttributeProto.INTS
        attr.ints[:] = [rng.choice(EXTREMES) for _ in range(rng.randint(0, 6))]
    elif kind == "float":
        attr.type, attr.f = AttributeProto.FLOAT, rng.choice([np.nan, np.inf, -1.0, 1e30])
    elif kind == "string":
        attr.type, attr.s = AttributeProto.STRING, rng.choice([b"", b"bogus", b"\xff" * 9])
    elif kind == "tensor":
        attr.type = AttributeProto.TENSOR
        attr.t.CopyFrom(const("", [rng.choice(EXTREMES)], np.int64))
        attr.t.dims[:] = [rng.choice([0, 1, 3, 10 ** 9])]
    elif kind == "graph":
        attr.type = AttributeProto.GRAPH
        attr.g.CopyFrom(helper.make_graph([], "empty", [], []))
    else:
        node.attribute.remove(attr)


def _mutate_initializer(t, rng):
    kind = rng.choice(["dims", "dims", "type", "values", "raw", "external", "drop_dim"])
    if kind == "dims" and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice([0, -1, 3, 2 ** 31, 10 ** 12])
    elif kind == "drop_dim" and t.dims:
        del t.dims[rng.randrange(len(t.dims))]
    elif kind == "type":
        t.data_type = rng.choice(list(TensorProto.DataType.values()))
    elif kind == "values":  # a huge or odd count, shape or index, correctly encoded
        n = rng.randint(0, 4)
        value = np.asarray([rng.choice(EXTREMES) for _ in range(n)], np.int64)
        if t.data_type != TensorProto.INT64:
            value = value.astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(value.reshape(-1 if n != 1 or rng.random() < 0.5
                                                         else ()), t.name))
    elif kind == "raw" and t.HasField("raw_data"):
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)] + \
            b"\0" * rng.choice([0, 0, 1, 4])
    elif kind == "external":
        t.data_location = TensorProto.EXTERNAL
        entry = t.external_data.add()
        entry.key, entry.value = "location", rng.choice(["missing.bin", "../x", "/dev/zero",
                                                         "", "model.onnx"])


def mutate_graph(m: ModelProto, rng: random.Random) -> ModelProto:
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["rename", "drop_input", "drop_node", "op", "attr", "attr",
                           "init", "init", "opset", "io", "duplicate"])
        lists = [nodes for nodes in _node_lists(m) if len(nodes)]
        nodes = rng.choice(lists) if lists else None
        node = rng.choice(nodes) if nodes else None
        if kind == "rename" and node is not None and node.input:
            k = rng.randrange(len(node.input))
            node.input[k] = rng.choice(["", "nowhere"] + _value_names(m))
        elif kind == "drop_input" and node is not None and node.input:
            del node.input[rng.randrange(len(node.input))]
        elif kind == "drop_node" and node is not None:
            nodes.remove(node)
        elif kind == "op" and node is not None:
            node.op_type = rng.choice(OPS)
        elif kind == "attr" and node is not None:
            _mutate_attribute(node, rng)
        elif kind == "init" and m.graph.initializer:
            _mutate_initializer(rng.choice(m.graph.initializer), rng)
        elif kind == "opset":
            m.opset_import[0].version = rng.choice([1, 6, 9, 11, 13, 18, 23, 100, 2 ** 40])
        elif kind == "io":
            fields = [f for f in (m.graph.input, m.graph.output) if len(f)]
            if fields:
                field = rng.choice(fields)
                if rng.random() < 0.5:
                    del field[rng.randrange(len(field))]
                else:
                    rng.choice(field).name = rng.choice(["", "nowhere"] + _value_names(m))
        elif kind == "duplicate" and node is not None:
            nodes.add().CopyFrom(node)
    return m


# ---- running one case ---------------------------------------------------------------------

NUMPY = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64,
         TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_,
         TensorProto.FLOAT16: np.float16, TensorProto.UINT8: np.uint8}


def _arguments(f):
    """Inputs for the model's graph inputs, as declared where that is small and clear."""
    module = getattr(f, "module", f)  # a captured function, or the module itself
    declared = {i.name: i for i in module._graph.input}
    args = []
    for name in module.input_names:
        info = declared[name].type.tensor_type
        dims = [d.dim_value if 0 < d.dim_value <= 8 else 2 for d in info.shape.dim] \
            if info.HasField("shape") else [2]
        dtype = NUMPY.get(info.elem_type, np.float32)
        args.append(rill.tensor(np.ones(dims, dtype)))
    return args


def run_case(path, capture):
    """Load and run the file; None when it worked or raised a rill.Error, else what went
    wrong (another exception, too slow, too much memory)."""
    start = time.perf_counter()
    tracemalloc.reset_peak()
    problem = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = rill.onnx.load(path, capture=capture, limits=LIMITS)
            f(*_arguments(f))
    except rill.Error:
        pass
    except Exception as e:  # noqa: BLE001 - the finding this test exists for
        problem = f"{type(e).__name__}: {str(e)[:200]}"
    peak = tracemalloc.get_traced_memory()[1]
    took = time.perf_counter() - start
    if problem is None and took > CASE_SECONDS:
        problem = f"took {took:.1f} s"
    if problem is None and peak > PEAK:
        problem = f"allocated {peak:,} bytes"
    return problem


def _cases(family, count):
    """(name, seed) of `count` deterministic cases per base model."""
    return [(name, zlib.crc32(f"{family}/{name}".encode()) * 10_007 + k) for name in BASES
            for k in range(count)]


@pytest.fixture
def traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


def _fuzz(tmp_path, family, count, mutate):
    failures = []
    for name, seed in _cases(family, count):
        rng = random.Random(seed)
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(mutate(BASES[name], rng))
        problem = run_case(str(path), capture=rng.random() < 0.5)
        if problem:
            failures.append(f"{family} {name} seed={seed}: {problem}")
    assert not failures, f"{len(failures)} cases broke the rule:\n" + "\n".join(failures[:15])


def test_bases_load_and_run(traced, tmp_path):
    """The unmutated models work: the fuzz starts from valid files."""
    for name, m in BASES.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(m.SerializeToString())
        f = rill.onnx.load(str(path), limits=LIMITS)
        out = f(*_arguments(f))
        assert all(np.isfinite(o.numpy()).all() for o in (out if isinstance(out, tuple)
                                                          else (out,))), name


@pytest.mark.timeout(120)
def test_protobuf_mutations(traced, tmp_path):
    _fuzz(tmp_path, "bytes", 140,
          lambda m, rng: mutate_bytes(m.SerializeToString(), rng))


def _graph_mutation(m, rng):
    copy = ModelProto()
    copy.CopyFrom(m)
    return mutate_graph(copy, rng).SerializeToString()


@pytest.mark.timeout(120)
def test_graph_mutations(traced, tmp_path):
    _fuzz(tmp_path, "graph", 100, _graph_mutation)
