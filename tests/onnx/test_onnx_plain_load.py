"""rill.onnx.load with no options on models whose inputs decide shapes: the imported function
reads them at run time (a trace specialized on their values, guarded) or runs the node that
needs them eagerly; checked against onnxruntime."""
import warnings

import numpy as np
import pytest

import rill

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
rill_onnx = pytest.importorskip("rill.onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s)
                                           for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnxruntime(model, *arrays):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def _same_as_onnxruntime(f, model, *arrays):
    got = f(*[rill.tensor(a) for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    want = _onnxruntime(model, *arrays)
    assert len(got) == len(want)
    for mine, theirs in zip(got, want):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine.numpy(), theirs, rtol=1e-5, atol=1e-6)


def test_reshape_shape_input_is_read_at_run_time_and_guarded():
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [("x", T.FLOAT, [2, 6]), ("shape", T.INT64, [2])], [("y", T.FLOAT)])
    f = rill_onnx.load(model)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    _same_as_onnxruntime(f, model, x, np.array([3, 4]))
    assert f.specialized == ["shape"] and f.runs_eagerly is None
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _same_as_onnxruntime(f, model, x, np.array([4, -1]))
    assert any("input shape held was {shape: [3, 4]}" in str(w.message)
               for w in said), [str(w.message) for w in said]
    traced = len(f.retraces)
    _same_as_onnxruntime(f, model, x, np.array([3, 4]))  # seen before: its trace is reused
    assert len(f.retraces) == traced


def test_specialized_only_on_the_inputs_behind_the_shape():
    """The shape is Shape(x)[:1] ++ k: x stays a graph input (gradients reach it), only k
    is specialized on."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"], end=1),
             helper.make_node("Concat", ["sx", "k"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Mul", ["r", "r"], ["y"])]
    model = _model(nodes, [("x", T.FLOAT, [2, 6]), ("k", T.INT64, [2])], [("y", T.FLOAT)])
    f = rill_onnx.load(model)
    x = np.random.default_rng(0).normal(size=(2, 6)).astype(np.float32)
    _same_as_onnxruntime(f, model, x, np.array([3, 2]))
    assert f.specialized == ["k"]
    xt = rill.tensor(x, requires_grad=True)
    f(xt, rill.tensor(np.array([2, 3]))).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), 2 * x, rtol=1e-6)


@pytest.mark.parametrize("case", ["topk", "slice", "resize", "tile_range"])
def test_shape_deciding_inputs_of_several_ops(case):
    rng = np.random.default_rng(1)
    if case == "topk":
        model = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                       [("x", T.FLOAT, [3, 5]), ("k", T.INT64, [1])],
                       [("v", T.FLOAT), ("i", T.INT64)])
        calls = [(rng.normal(size=(3, 5)).astype(np.float32), np.array([k])) for k in (2, 4)]
    elif case == "slice":
        model = _model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                       [("x", T.FLOAT, [4, 6]), ("s", T.INT64, [1]), ("e", T.INT64, [1]),
                        ("a", T.INT64, [1]), ("st", T.INT64, [1])], [("y", T.FLOAT)])
        x = rng.normal(size=(4, 6)).astype(np.float32)
        calls = [(x, np.array([1]), np.array([5]), np.array([1]), np.array([2])),
                 (x, np.array([-1]), np.array([-9]), np.array([0]), np.array([-1]))]
    elif case == "resize":
        roi = numpy_helper.from_array(np.zeros(0, np.float32), "roi")
        model = _model([helper.make_node("Resize", ["x", "roi", "scales"], ["y"],
                                         mode="linear")],
                       [("x", T.FLOAT, [1, 1, 2, 3]), ("scales", T.FLOAT, [4])],
                       [("y", T.FLOAT)], [roi])
        x = rng.normal(size=(1, 1, 2, 3)).astype(np.float32)
        calls = [(x, np.array([1, 1, 2, 2], np.float32)), (x, np.array([1, 1, 3, 1.5],
                                                                       np.float32))]
    else:  # Tile's repeats from Range(0, n, 1) + 1
        one = numpy_helper.from_array(np.array(1, np.int64), "one")
        zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
        model = _model([helper.make_node("Range", ["zero", "n", "one"], ["r"]),
                        helper.make_node("Add", ["r", "one"], ["reps"]),
                        helper.make_node("Tile", ["x", "reps"], ["y"])],
                       [("x", T.FLOAT, ["a", "b"]), ("n", T.INT64, [])], [("y", T.FLOAT)],
                       [one, zero])
        x = rng.normal(size=(2, 2)).astype(np.float32)
        calls = [(x, np.array(2)), (x[:1], np.array(2))]
    f = rill_onnx.load(model)
    for arrays in calls:
        _same_as_onnxruntime(f, model, *arrays)
    assert f.specialized and f.runs_eagerly is None


def test_data_dependent_output_shapes_run_eagerly():
    model = _model([helper.make_node("NonZero", ["x"], ["i"]),
                    helper.make_node("Compress", ["x", "m"], ["y"], axis=0)],
                   [("x", T.FLOAT, [4]), ("m", T.BOOL, [4])], [("i", T.INT64), ("y", T.FLOAT)])
    f = rill_onnx.load(model)
    for x, m in [([0, 1.5, 0, 2], [1, 0, 1, 1]), ([3, 0, 0, 0], [0, 0, 0, 1])]:
        _same_as_onnxruntime(f, model, np.array(x, np.float32), np.array(m, bool))
    assert "NonZero" in f.runs_eagerly and not f.specialized
    with pytest.raises(rill_onnx.ONNXError, match="runs eagerly"):
        f.save("unused")


def test_shape_computed_from_a_weight_runs_eagerly():
    """A float initializer trained as a weight, cast to the shape: no input to specialize
    on, so that node's model runs eagerly (and the weight still gets its gradient)."""
    w = numpy_helper.from_array(np.array([3.0, 2.0], np.float32), "w")
    model = _model([helper.make_node("Cast", ["w"], ["s"], to=T.INT64),
                    helper.make_node("Reshape", ["x", "s"], ["r"]),
                    helper.make_node("Mul", ["r", "w"], ["y"])],
                   [("x", T.FLOAT, [6])], [("y", T.FLOAT)], [w])
    f = rill_onnx.load(model, trainable=True)
    _same_as_onnxruntime(f, model, np.arange(6, dtype=np.float32))
    assert "Reshape" in f.runs_eagerly
    f(rill.tensor(np.ones(6, np.float32))).sum().backward()
    np.testing.assert_allclose(next(iter(f.module.parameters())).grad.numpy(), [3.0, 3.0])


def test_specialized_graph_is_not_saved_without_its_values(tmp_path):
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [("x", T.FLOAT, [2, 6]), ("shape", T.INT64, [2])], [("y", T.FLOAT)])
    f = rill_onnx.load(model)
    f(rill.ones((2, 6)), rill.tensor(np.array([3, 4])))
    with pytest.raises(rill_onnx.ONNXError, match="constants="):
        f.save(tmp_path / "g")
    fixed = rill_onnx.load(model, constants={"shape": np.array([3, 4])})  # the override
    fixed(rill.ones((2, 6)))
    fixed.save(tmp_path / "g")
    assert rill.load_graph(tmp_path / "g")(rill.ones((2, 6))).shape == (3, 4)


def _reference(model, *arrays):
    from onnx.reference import ReferenceEvaluator
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))


@pytest.mark.parametrize("case", ["maxpool_indices", "maxpool_indices_column_major",
                                  "batchnorm_training", "pad_wrap", "gathernd_batch",
                                  "reverse_sequence"])
def test_gaps_closed_against_the_specification(case):
    """MaxPool's Indices, BatchNormalization in training mode and Pad's wrap mode, checked
    against onnx's reference implementation (and onnxruntime where it runs them)."""
    rng = np.random.default_rng(2)
    if case.startswith("maxpool"):
        x = rng.normal(size=(2, 3, 5, 6)).astype(np.float32)
        x[0, 0, :2, :2] = 1.0  # ties: the first largest entry is the one reported
        model = _model([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2],
                                         strides=[2, 2], pads=[1, 0, 1, 1],
                                         storage_order=int(case.endswith("major")))],
                       [("x", T.FLOAT, list(x.shape))], [("y", T.FLOAT), ("i", T.INT64)])
        arrays, oracles = (x,), (_reference, _onnxruntime)
    elif case == "batchnorm_training":
        x = rng.normal(size=(4, 3, 2, 2)).astype(np.float32)
        params = [rng.uniform(0.5, 1.5, 3).astype(np.float32) for _ in range(4)]
        model = _model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                                         ["y", "rm", "rv"], training_mode=1, momentum=0.8)],
                       [(n, T.FLOAT, list(a.shape)) for n, a in
                        zip("xsbmv", [x] + params)],
                       [("y", T.FLOAT), ("rm", T.FLOAT), ("rv", T.FLOAT)], opset=15)
        arrays, oracles = (x, *params), (_reference,)
    elif case == "gathernd_batch":
        x = rng.normal(size=(2, 3, 4)).astype(np.float32)
        idx = np.array([[[2, 1], [0, 3]], [[1, 0], [-1, -2]]], np.int64)
        model = _model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
                       [("x", T.FLOAT, [2, 3, 4]), ("i", T.INT64, [2, 2, 2])],
                       [("y", T.FLOAT)])
        arrays, oracles = (x, idx), (_reference, _onnxruntime)
    elif case == "reverse_sequence":  # its lengths an input: specialized on
        x = rng.normal(size=(3, 4, 2)).astype(np.float32)
        model = _model([helper.make_node("ReverseSequence", ["x", "n"], ["y"], time_axis=1,
                                         batch_axis=0)],
                       [("x", T.FLOAT, [3, 4, 2]), ("n", T.INT64, [3])], [("y", T.FLOAT)])
        arrays, oracles = (x, np.array([4, 1, 3])), (_reference, _onnxruntime)
    else:
        x = rng.normal(size=(2, 3)).astype(np.float32)
        pads = numpy_helper.from_array(np.array([1, 4, 2, 5], np.int64), "pads")
        model = _model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")],
                       [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT)], [pads], opset=19)
        arrays, oracles = (x,), (_reference, _onnxruntime)
    got = rill_onnx.load(model)(*[rill.tensor(a) for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    for oracle in oracles:
        for mine, theirs in zip(got, oracle(model, *arrays)):
            assert mine.shape == theirs.shape
            np.testing.assert_allclose(mine.numpy(), theirs, rtol=1e-5, atol=1e-6)
