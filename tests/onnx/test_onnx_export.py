"""rill.onnx.export, checked by its real consumers: onnx.checker and onnxruntime.

Each model is exported, validated with onnx.checker (full check, shape inference included),
run by onnxruntime, and compared with rill's own output in float32.
"""
import subprocess
import sys

import numpy as np
import pytest

import rill
from rill import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import rill.onnx  # noqa: E402

RNG = np.random.default_rng(0)


def tensor(*shape):
    return rill.tensor(RNG.standard_normal(shape).astype(np.float32))


def run(path, *xs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), xs)}
    return session.run(None, feeds)


def close(onnx_out, rill_out, tol=1e-5):
    np.testing.assert_allclose(onnx_out, rill_out.numpy(), rtol=tol, atol=tol)


def test_mlp(tmp_path):
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    x = tensor(5, 4)
    proto = rill.onnx.export(model, (x,), tmp_path / "mlp.onnx", input_names=["x"],
                             output_names=["logits"])
    onnx.checker.check_model(onnx.load(tmp_path / "mlp.onnx"), full_check=True)
    assert {i.name for i in proto.graph.initializer} >= {"0.weight", "0.bias", "2.weight"}
    assert [i.name for i in proto.graph.input] == ["x"]
    (out,) = run(tmp_path / "mlp.onnx", x)
    close(out, model(x))


def test_cnn_eval_dynamic_batch(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))
    model.train()
    with rill.no_grad():  # running statistics away from 0 and 1, so eval mode matters
        for _ in range(3):
            model(tensor(8, 1, 8, 8) * 2 + 1)
    model.eval()
    rill.onnx.export(model, (tensor(4, 1, 8, 8),), tmp_path / "cnn.onnx", dynamic_batch=True)
    graph = onnx.load(tmp_path / "cnn.onnx").graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert {"Conv", "MaxPool", "Gemm"} <= {n.op_type for n in graph.node}
    x = tensor(7, 1, 8, 8)
    (out,) = run(tmp_path / "cnn.onnx", x)
    assert out.shape == (7, 10)
    close(out, model(x))


def test_lstm_dynamic_batch(tmp_path):
    lstm = nn.LSTM(3, 5, num_layers=2, batch_first=True)

    def last_outputs(x):
        return lstm(x)[0]

    rill.onnx.export(last_outputs, (tensor(4, 6, 3),), tmp_path / "lstm.onnx",
                     dynamic_batch=True)
    ops = {n.op_type for n in onnx.load(tmp_path / "lstm.onnx").graph.node}
    assert "Loop" in ops
    x = tensor(7, 6, 3)
    (out,) = run(tmp_path / "lstm.onnx", x)
    close(out, last_outputs(x))


def test_transformer_encoder_layer(tmp_path):
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    layer.eval()
    rill.onnx.export(layer, (tensor(4, 5, 8),), tmp_path / "tr.onnx", dynamic_batch=True)
    x = tensor(7, 5, 8)
    (out,) = run(tmp_path / "tr.onnx", x)
    close(out, layer(x))


def test_causal_attention(tmp_path):
    import rill.nn.functional as F

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = tensor(2, 3, 4, 8), tensor(2, 3, 4, 8), tensor(2, 3, 4, 8)
    rill.onnx.export(attend, (q, k, v), tmp_path / "att.onnx")
    (out,) = run(tmp_path / "att.onnx", q, k, v)
    close(out, attend(q, k, v))


def test_cond_takes_both_branches(tmp_path):
    def f(x):
        return rill.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, x)

    rill.onnx.export(f, (tensor(3, 4),), tmp_path / "cond.onnx")
    assert "If" in {n.op_type for n in onnx.load(tmp_path / "cond.onnx").graph.node}
    for x in (tensor(3, 4).abs(), -tensor(3, 4).abs()):
        (out,) = run(tmp_path / "cond.onnx", x)
        close(out, f(x))


def test_while_loop_and_reverse_scan(tmp_path):
    def doubling(x):
        return rill.while_loop(lambda c: c[1].sum() < 100.0,
                               lambda c: (c[0] + 1, c[1] * 2.0), (rill.tensor(0), x))

    x = tensor(3).abs() + 0.1
    rill.onnx.export(doubling, (x,), tmp_path / "while.onnx")
    steps, value = run(tmp_path / "while.onnx", x)
    want_steps, want_value = doubling(x)
    assert int(steps) == int(want_steps.item()) > 1
    close(value, want_value)

    def running(xs):
        return rill.scan(lambda c, xt: (c + xt, c * xt), xs[0] * 0, xs, reverse=True)

    xs = tensor(5, 3)
    rill.onnx.export(running, (xs,), tmp_path / "scan.onnx")
    for got, want in zip(run(tmp_path / "scan.onnx", xs), running(xs)):
        close(got, want)


def test_unsupported_op_names_it_and_the_line(tmp_path):
    def f(x):
        y = x * 2
        return rill.linalg.svd(y)[1]  # the line the error must name
    line = f.__code__.co_firstlineno + 2
    with pytest.raises(rill.onnx.ONNXError, match="svd.*no ONNX mapping") as info:
        rill.onnx.export(f, (tensor(3, 3),), tmp_path / "bad.onnx")
    assert info.value.op == "svd"
    assert f"test_onnx_export.py:{line}" in str(info.value)
    assert not (tmp_path / "bad.onnx").exists()


def test_training_mode_state_updates_are_refused(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with pytest.raises(rill.Error, match="eval"):
        rill.onnx.export(model, (tensor(5, 3),), tmp_path / "bn.onnx")


def test_bad_arguments(tmp_path):
    model = nn.Linear(3, 2)
    with pytest.raises(rill.Error, match="input_names"):
        rill.onnx.export(model, (tensor(2, 3),), tmp_path / "m.onnx", input_names=["a", "b"])
    with pytest.raises(rill.Error, match="opset"):
        rill.onnx.export(model, (tensor(2, 3),), tmp_path / "m.onnx", opset=7)


def test_import_rill_does_not_import_onnx():
    code = "import sys, rill; assert 'onnx' not in sys.modules and 'rill.onnx' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_onnx_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(rill.Error, match=r'pip install "rill\[onnx\]"'):
        rill.onnx.export(nn.Linear(2, 2), (tensor(1, 2),), tmp_path / "m.onnx")
