"""ONNX ops the importer lacked (MaxUnpool, Col2Im, TensorScatter) and bfloat16 tensors,
imported with plain rill.onnx.load and checked against onnxruntime, onnx's reference
evaluator and PyTorch (values and gradients)."""
import numpy as np
import pytest

import rill

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
rill_onnx = pytest.importorskip("rill.onnx")
from onnx import TensorProto as T, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=22):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, None)
                                           for n, t in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnxruntime(model, *arrays):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})


def _reference(model, *arrays):
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))


def _rill(model, *arrays):
    from rill.onnx.dtypes import as_rill
    got = rill_onnx.load(model)(*[as_rill(a) for a in arrays])
    return [t.numpy() for t in (got if isinstance(got, tuple) else (got,))]


def _close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for mine, theirs in zip(got, want):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, np.asarray(theirs, np.float64), rtol=rtol, atol=atol)


# ---- MaxUnpool ------------------------------------------------------------------------------

def test_max_unpool_of_max_pool_matches_onnxruntime_reference_and_torch():
    """MaxPool's values and indices unpooled: the input's maxima in place, zeros elsewhere;
    the gradient matches torch's max_pool2d -> max_unpool2d."""
    torch = pytest.importorskip("torch")
    nodes = [helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["v", "i"], ["y"], kernel_shape=[2, 2],
                              strides=[2, 2])]
    model = _model(nodes, [("x", T.FLOAT)], [("y", T.FLOAT)])
    x = np.random.default_rng(0).normal(size=(2, 3, 6, 8)).astype(np.float32)
    got = _rill(model, x)
    _close(got, _onnxruntime(model, x))
    _close(got, _reference(model, x))
    xt = torch.tensor(x, requires_grad=True)
    values, where = torch.nn.functional.max_pool2d(xt, 2, return_indices=True)
    yt = torch.nn.functional.max_unpool2d(values, where, 2)
    weight = np.random.default_rng(1).normal(size=yt.shape).astype(np.float32)
    (yt * torch.tensor(weight)).sum().backward()
    xr = rill.tensor(x, requires_grad=True)
    (rill_onnx.load(model)(xr) * rill.tensor(weight)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


def test_max_unpool_output_shape_pads_the_unpooled_tensor_as_the_reference():
    """With output_shape the indices still count in the unpooled geometry (onnx's reference
    and node tests; onnxruntime counts them in output_shape's instead)."""
    node = helper.make_node("MaxUnpool", ["v", "i", "shape"], ["y"], kernel_shape=[3],
                            strides=[2], pads=[1, 0])
    model = _model([node], [("v", T.FLOAT), ("i", T.INT64), ("shape", T.INT64)],
                   [("y", T.FLOAT)])
    v = np.arange(1, 9, dtype=np.float32).reshape(2, 1, 4)
    i = np.array([[[0, 3, 4, 7]], [[9, 11, 13, 15]]], dtype=np.int64)  # unpooled: (2, 1, 8)
    shape = np.array([2, 1, 10], dtype=np.int64)
    got = _rill(model, v, i, shape)
    _close(got, _reference(model, v, i, shape))
    assert got[0].shape == (2, 1, 10) and got[0][1, 0, 1] == 5 and got[0][0, 0, 8:].sum() == 0


# ---- Col2Im --------------------------------------------------------------------------------

@pytest.mark.parametrize("strides,pads,dilations", [
    ([1, 1], [0, 0, 0, 0], [1, 1]),
    ([2, 1], [1, 2, 1, 2], [1, 1]),
    ([1, 2], [0, 1, 0, 1], [2, 1]),
])
def test_col2im_matches_torch_fold_and_onnxruntime(strides, pads, dilations):
    torch = pytest.importorskip("torch")
    image, block = [7, 6], [3, 2]
    grid = [(n + lo + hi - d * (k - 1) - 1) // s + 1 for n, lo, hi, d, k, s in
            zip(image, pads[:2], pads[2:], dilations, block, strides)]
    x = np.random.default_rng(2).normal(size=(2, 3 * 6, grid[0] * grid[1])).astype(np.float32)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=strides,
                            pads=pads, dilations=dilations)
    model = _model([node], [("x", T.FLOAT), ("image", T.INT64), ("block", T.INT64)],
                   [("y", T.FLOAT)], opset=18)
    args = (x, np.array(image, np.int64), np.array(block, np.int64))
    got = _rill(model, *args)
    _close(got, _onnxruntime(model, *args))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.fold(xt, image, block, dilation=dilations, padding=pads[:2],
                                  stride=strides)
    _close(got, [yt.detach().numpy()])
    weight = np.random.default_rng(3).normal(size=yt.shape).astype(np.float32)
    (yt * torch.tensor(weight)).sum().backward()
    xr = rill.tensor(x, requires_grad=True)
    f = rill_onnx.load(model)
    (f(xr, *[rill.tensor(a) for a in args[1:]]) * rill.tensor(weight)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert f.specialized == ["image", "block"]


def test_col2im_refuses_a_block_count_that_does_not_fit():
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"])
    model = _model([node], [("x", T.FLOAT), ("image", T.INT64), ("block", T.INT64)],
                   [("y", T.FLOAT)], opset=18)
    x = np.zeros((1, 4, 5), np.float32)  # a 3x3 image in 2x2 blocks has 4 positions
    with pytest.raises(rill_onnx.ONNXError, match="Col2Im.*must be"):
        _rill(model, x, np.array([3, 3], np.int64), np.array([2, 2], np.int64))


# ---- TensorScatter -------------------------------------------------------------------------

@pytest.mark.parametrize("mode,axis", [("linear", -2), ("circular", -2), ("circular", 1)])
def test_tensor_scatter_matches_onnxruntime_and_reference(mode, axis):
    rng = np.random.default_rng(4)
    past = rng.normal(size=(3, 6, 5, 4)).astype(np.float32)
    shape = list(past.shape)
    shape[axis] = 2
    update = rng.normal(size=shape).astype(np.float32)
    starts = np.array([0, 1, past.shape[axis] - 1 if mode == "circular" else 0], np.int64)
    node = helper.make_node("TensorScatter", ["past", "update", "at"], ["present"],
                            mode=mode, axis=axis)
    model = _model([node], [("past", T.FLOAT), ("update", T.FLOAT), ("at", T.INT64)],
                   [("present", T.FLOAT)], opset=24)
    got = _rill(model, past, update, starts)
    _close(got, _reference(model, past, update, starts), rtol=0, atol=0)
    _close(got, _onnxruntime(model, past, update, starts), rtol=0, atol=0)


def test_tensor_scatter_without_write_indices_and_past_the_end():
    node = helper.make_node("TensorScatter", ["past", "update"], ["present"])
    model = _model([node], [("past", T.FLOAT), ("update", T.FLOAT)], [("present", T.FLOAT)],
                   opset=24)
    past = np.zeros((2, 1, 4, 3), np.float32)
    update = np.ones((2, 1, 2, 3), np.float32)
    _close(_rill(model, past, update), _reference(model, past, update), rtol=0, atol=0)
    with_starts = helper.make_node("TensorScatter", ["past", "update", "at"], ["present"])
    model = _model([with_starts], [("past", T.FLOAT), ("update", T.FLOAT), ("at", T.INT64)],
                   [("present", T.FLOAT)], opset=24)
    with pytest.raises(rill.errors.Error, match="out of bounds"):  # linear: 3 + 2 > 4
        _rill(model, past, update, np.array([3, 0], np.int64))


# ---- bfloat16 ------------------------------------------------------------------------------

def _bf16(array):
    import ml_dtypes
    return np.asarray(array, np.float32).astype(ml_dtypes.bfloat16)


def test_cast_to_and_from_bfloat16_round_as_the_reference():
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=T.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=T.FLOAT)]
    model = _model(nodes, [("x", T.FLOAT)], [("b", T.BFLOAT16), ("y", T.FLOAT)])
    x = np.random.default_rng(5).normal(size=(64,)).astype(np.float32) * 100
    x[:4] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, np.inf, np.nan]  # ties round to even
    f = rill_onnx.load(model)
    b, y = f(rill.tensor(x))
    assert b.dtype is rill.bfloat16 and y.dtype is rill.float32
    want_b, want_y = _reference(model, x)
    np.testing.assert_array_equal(b.numpy(), want_b.astype(np.float32))
    np.testing.assert_array_equal(y.numpy(), want_y)


@pytest.mark.parametrize("raw", [True, False])
def test_small_bfloat16_model_matches_the_reference_and_trains(raw):
    """A bfloat16 MLP whose weights are bfloat16 initializers (raw bytes or int32_data):
    imported as bfloat16 Parameters, its outputs within bfloat16 rounding of onnx's
    reference, and an SGD step moves them."""
    rng = np.random.default_rng(6)
    w1, b1 = _bf16(rng.normal(size=(8, 16)) / 3), _bf16(rng.normal(size=(16,)) / 3)
    w2 = _bf16(rng.normal(size=(16, 4)) / 4)

    def init(name, array):
        if raw:
            return numpy_helper.from_array(array, name)
        return helper.make_tensor(name, T.BFLOAT16, array.shape, array.astype(np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["z"]),
             helper.make_node("Softmax", ["z"], ["y"], axis=-1)]
    model = _model(nodes, [("x", T.BFLOAT16)], [("y", T.BFLOAT16)],
                   [init("w1", w1), init("b1", b1), init("w2", w2)])
    x = _bf16(rng.normal(size=(5, 8)))
    (got,) = _rill(model, x)
    (want,) = _reference(model, x)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2 ** -6, atol=1e-3)
    f = rill_onnx.load(model)
    params = dict(f.module.named_parameters())
    assert sorted(params) == ["b1", "w1", "w2"]
    assert all(p.dtype is rill.bfloat16 for p in params.values())
    np.testing.assert_array_equal(params["w1"].numpy(), w1.astype(np.float32))
    from rill.onnx.dtypes import as_rill
    opt = rill.optim.SGD(f.module.parameters(), lr=0.5)
    before = params["w2"].numpy().copy()
    loss = (f(as_rill(x)) * rill.tensor(np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0]])).sum()
    loss.backward()
    opt.step()
    assert params["w2"].dtype is rill.bfloat16
    after = params["w2"].numpy()
    assert not np.array_equal(before, after)
    np.testing.assert_array_equal(after, _bf16(after).astype(np.float32))  # still bfloat16
