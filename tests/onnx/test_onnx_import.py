"""rill.onnx.load: models exported by rill (and written with onnx.helper) come back as rill
captured functions that agree with onnxruntime, differentiate, and fine-tune."""
import numpy as np
import pytest

import rill
from rill import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import rill.onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(1)


def tensor(*shape):
    return rill.tensor(RNG.standard_normal(shape).astype(np.float32))


def onnxruntime_outputs(path, *xs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), xs)})


def cnn():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    return model.eval()


@pytest.mark.parametrize("name", ["mlp", "cnn", "lstm", "transformer"])
def test_round_trip(tmp_path, name):
    if name == "mlp":
        model, x = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)), tensor(5, 4)
    elif name == "cnn":
        model, x = cnn(), tensor(3, 1, 8, 8)
    elif name == "lstm":
        lstm = nn.LSTM(3, 5, batch_first=True)
        model, x = (lambda x: lstm(x)[0]), tensor(2, 4, 3)
    else:
        model = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
        x = tensor(2, 5, 8)
    path = tmp_path / f"{name}.onnx"
    rill.onnx.export(model, (x,), path)
    loaded = rill.onnx.load(path)
    assert isinstance(loaded, rill.capture(lambda t: t).__class__)  # a CapturedFunction
    got = loaded(x)
    np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.numpy(), onnxruntime_outputs(path, x)[0], rtol=1e-5,
                               atol=1e-5)


def test_round_trip_control_flow(tmp_path):
    def f(x):
        y = rill.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, x)
        return rill.fori_loop(0, 3, lambda i, c: c * 0.5 + 1.0, y)

    x = tensor(3, 4)
    rill.onnx.export(f, (x,), tmp_path / "cf.onnx")
    loaded = rill.onnx.load(tmp_path / "cf.onnx")
    for arg in (x.abs(), -x.abs()):
        np.testing.assert_allclose(loaded(arg).numpy(), f(arg).numpy(), rtol=1e-6)


def test_gradients_and_fine_tuning(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x, target = tensor(16, 4), tensor(16, 1)
    rill.onnx.export(model, (x,), tmp_path / "m.onnx")
    loaded = rill.onnx.load(tmp_path / "m.onnx")
    params = list(loaded.module.parameters())
    assert len(params) == 4 and all(p.requires_grad for p in params)
    assert set(loaded.module.initializer_names.values()) == {"0.weight", "0.bias",
                                                             "2.weight", "2.bias"}
    # The gradient through the loaded graph equals the original model's.
    loss = ((loaded(x) - target) ** 2).mean()
    loss.backward()
    want = ((model(x) - target) ** 2).mean()
    want.backward()
    by_name = dict(zip(loaded.module.initializer_names.values(), params))
    for name, p in model.named_parameters():
        np.testing.assert_allclose(by_name[name].grad.numpy(), p.grad.numpy(), rtol=1e-5,
                                   atol=1e-6)
    # A few optimizer steps lower the loss and change the outputs.
    optimizer = rill.optim.SGD(params, lr=0.1)
    before = loaded(x).numpy()
    first = float(loss.item())
    for _ in range(5):
        optimizer.zero_grad()
        loss = ((loaded(x) - target) ** 2).mean()
        loss.backward()
        optimizer.step()
    assert not np.allclose(loaded(x).numpy(), before)
    assert float(((loaded(x) - target) ** 2).mean().item()) < first


def _single_node_model(op_type, inputs, outputs, initializers=(), **attrs):
    node = helper.make_node(op_type, [i.name for i in inputs] + [t.name for t in initializers],
                            [o.name for o in outputs], **attrs)
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_written_by_hand_matches_onnxruntime(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    model = _single_node_model("Conv", [x], [y], [w], strides=[2, 2], pads=[1, 0, 0, 1])
    onnx.save(model, tmp_path / "conv.onnx")
    arg = tensor(2, 3, 6, 6)
    got = rill.onnx.load(tmp_path / "conv.onnx")(arg)
    np.testing.assert_allclose(got.numpy(), onnxruntime_outputs(tmp_path / "conv.onnx", arg)[0],
                               rtol=1e-5, atol=1e-5)


def test_unsupported_ops_are_named():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _single_node_model("DeformConv", [x], [y], kernel_shape=[2])
    with pytest.raises(rill.onnx.ONNXError, match="DeformConv"):
        rill.onnx.load(model)


def test_shape_inputs_must_be_known():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = _single_node_model("Reshape", [x, shape], [y])
    f = rill.onnx.load(model)  # read at run time (tests/onnx/test_onnx_plain_load.py)
    assert f(tensor(2, 6), rill.tensor(np.array([3, 4]))).shape == (3, 4)
    outer = rill.capture(lambda a, s: f(a, s))  # inside another trace it is not known
    with pytest.raises(rill.onnx.ONNXError, match="shape must be known"):
        outer(tensor(2, 6), rill.tensor(np.array([3, 4])))
    fixed = rill.onnx.load(model, constants={"shape": np.array([3, -1])})
    assert fixed(tensor(2, 6)).shape == (3, 4)
    with pytest.raises(rill.Error, match="not an input"):
        rill.onnx.load(model, constants={"nope": np.array([1])})


def _run_both(tmp_path, model, *args, rtol=1e-5, atol=1e-5):
    """rill's outputs (captured) checked against onnxruntime's; returns rill's."""
    onnx.save(model, tmp_path / "m.onnx")
    got = rill.onnx.load(tmp_path / "m.onnx")(*args)
    got = got if isinstance(got, tuple) else (got,)
    for mine, theirs in zip(got, onnxruntime_outputs(tmp_path / "m.onnx", *args)):
        np.testing.assert_allclose(mine.numpy(), theirs, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("mode,transform,extra", [
    ("nearest", "asymmetric", {"nearest_mode": "floor"}),
    ("nearest", "half_pixel", {"nearest_mode": "round_prefer_ceil"}),
    ("linear", "half_pixel", {}),
    ("linear", "align_corners", {}),
    ("linear", "pytorch_half_pixel", {}),
    ("cubic", "half_pixel", {"cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ("cubic", "asymmetric", {}),
])
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.5)])
def test_resize_matches_onnxruntime(tmp_path, mode, transform, extra, scales):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    roi = numpy_helper.from_array(np.zeros(0, np.float32), "roi")
    factors = numpy_helper.from_array(np.asarray(scales, np.float32), "scales")
    model = _single_node_model("Resize", [x], [y], [roi, factors], mode=mode,
                               coordinate_transformation_mode=transform, **extra)
    arg = tensor(2, 3, 5, 6)
    _run_both(tmp_path, model, arg)
    # float scales are constants of the graph, not Parameters; gradients reach the input
    assert not list(rill.onnx.load(model).module.parameters())
    if mode != "nearest":
        arg.requires_grad = True
        rill.onnx.load(model)(arg).sum().backward()
        assert arg.grad is not None and np.isfinite(arg.grad.numpy()).all()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(tmp_path, mode, padding, align):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, [2, 6, 7, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                            padding_mode=padding, align_corners=align)
    model = helper.make_model(helper.make_graph([node], "g", [x, grid], [y]),
                              opset_imports=[helper.make_opsetid("", 20)])
    # Cubic taps past the border: onnxruntime moves each tap onto the edge, the ONNX
    # reference (and the node tests, and rill) the sampling position; both agree inside.
    reach = 1.0 if (mode, padding) == ("cubic", "border") else 1.4
    where = rill.tensor(RNG.uniform(-reach, reach, (2, 6, 7, 2)).astype(np.float32))
    _run_both(tmp_path, model, tensor(2, 3, 4, 5), where, rtol=1e-4, atol=1e-4)


def test_grid_sample_gradients_reach_grid_and_input():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    grid = helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 3, 3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("GridSample", ["x", "grid"], ["y"])
    model = helper.make_model(helper.make_graph([node], "g", [x, grid], [y]),
                              opset_imports=[helper.make_opsetid("", 20)])
    image = tensor(1, 2, 4, 4)
    where = rill.tensor(RNG.uniform(-0.9, 0.9, (1, 3, 3, 2)).astype(np.float64))
    image = image.astype(rill.float64)
    image.requires_grad = where.requires_grad = True
    f = rill.onnx.load(model, capture=False)
    f(image, where).sum().backward()
    # finite differences on one grid coordinate (bilinear is smooth away from pixels)
    eps, g0 = 1e-6, where.numpy().copy()
    moved = g0.copy()
    moved[0, 1, 1, 0] += eps
    with rill.no_grad():
        diff = (f(image, rill.tensor(moved)).sum() - f(image, rill.tensor(g0)).sum()).item()
    np.testing.assert_allclose(where.grad.numpy()[0, 1, 1, 0], diff / eps, rtol=1e-4)
    assert np.abs(image.grad.numpy()).sum() > 0


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_matches_onnxruntime(tmp_path, op, direction):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs, hidden, seq, batch, size = 1 + (direction == "bidirectional"), 5, 4, 3, 2
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, size])
    lens = helper.make_tensor_value_info("lens", TensorProto.INT32, [batch])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h")]
    inits = [numpy_helper.from_array(RNG.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (dirs, gates * hidden, size)),
                          ("r", (dirs, gates * hidden, hidden)),
                          ("b", (dirs, 2 * gates * hidden)))]
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    node = helper.make_node(op, ["x", "w", "r", "b", "lens"], ["y", "y_h"],
                            hidden_size=hidden, direction=direction, **extra)
    model = helper.make_model(helper.make_graph([node], "g", [x, lens], outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    lengths = rill.tensor(np.array([4, 2, 3], np.int32))
    _run_both(tmp_path, model, tensor(seq, batch, size), lengths, rtol=1e-4, atol=1e-5)


def test_data_dependent_shapes_run_eagerly(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT if n == "y" else
                                          TensorProto.INT64, None)
            for n in ("y", "first", "inverse", "counts")]
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], sorted=0)
    model = helper.make_model(helper.make_graph([node], "g", [x], outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    arg = rill.tensor(np.array([3, 1, 3, 2, 1, 5], np.float32))
    onnx.save(model, tmp_path / "u.onnx")
    plain = rill.onnx.load(tmp_path / "u.onnx")  # the importer runs it eagerly itself
    for f in (plain, rill.onnx.load(tmp_path / "u.onnx", capture=False)):
        got = f(arg)
        for mine, theirs in zip(got, onnxruntime_outputs(tmp_path / "u.onnx", arg)):
            np.testing.assert_array_equal(mine.numpy(), theirs)
    assert "Unique" in plain.runs_eagerly


def test_resize_rejects_unknown_mode():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    roi = numpy_helper.from_array(np.zeros(0, np.float32), "roi")
    factors = numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "scales")
    model = _single_node_model("Resize", [x], [y], [roi, factors], mode="bilinear")
    with pytest.raises(rill.Error, match="mode 'bilinear' is not one of"):
        rill.onnx.load(model)(tensor(1, 1, 2, 2))


def test_batch_norm_statistics_are_buffers_not_parameters(tmp_path):
    import rill.onnx
    model = rill.nn.Sequential(rill.nn.Conv2d(1, 2, 3), rill.nn.BatchNorm2d(2)).eval()
    x = rill.randn(2, 1, 5, 5)
    path = str(tmp_path / "bn.onnx")
    rill.onnx.export(model, (x,), path)
    loaded = rill.onnx.load(path)
    params = [loaded.module.initializer_names[n] for n, _ in loaded.module.named_parameters()]
    buffers = [loaded.module.initializer_names[n] for n, _ in loaded.module.named_buffers()]
    assert len(params) == 4 and len(buffers) == 2, (params, buffers)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
