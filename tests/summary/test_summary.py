"""rill.summary: event files written by rill, read back by TensorBoard itself (its
EventAccumulator, its protos, and a `tensorboard` server queried over HTTP)."""
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import rill
from rill.summary import SummaryWriter
from rill.summary.records import crc32c

needs_tensorboard = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None,
                                       reason="the tensorboard package is not installed")


def accumulator(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    keep_all = {"scalars": 0, "images": 0, "histograms": 0, "tensors": 0,
                "compressedHistograms": 0}
    acc = EventAccumulator(str(path), size_guidance=keep_all)
    acc.Reload()
    return acc


# ---- framing -----------------------------------------------------------------------------------

def test_crc32c_check_value():
    # The CRC-32C (Castagnoli) check value of the nine digits, from the CRC catalogue.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


@needs_tensorboard
def test_masked_crc_agrees_with_tensorboard():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    from rill.summary.records import masked_crc
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 100, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert masked_crc(data) == masked_crc32c(data)


def test_import_rill_does_not_import_tensorboard():
    code = ("import sys, rill, rill.summary, rill.train; "
            "w = rill.train.SummaryWriter; assert 'tensorboard' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- scalars -----------------------------------------------------------------------------------

@needs_tensorboard
def test_scalars_read_back(tmp_path):
    values = [1.5, 2, np.float64(0.25), rill.tensor(-3.0), rill.tensor([4.0]), np.array(7.0)]
    with SummaryWriter(tmp_path) as w:
        for step, v in enumerate(values):
            w.add_scalar("loss", v, step * 10, walltime=1000.0 + step)
        w.add_scalar("exact", 0.1, 3, new_style=True, double_precision=True)
    events = accumulator(tmp_path).Scalars("loss")
    assert [e.step for e in events] == [0, 10, 20, 30, 40, 50]
    assert [e.wall_time for e in events] == [1000.0 + i for i in range(6)]
    expected = np.float32([1.5, 2, 0.25, -3.0, 4.0, 7.0])  # simple_value is a float32
    np.testing.assert_array_equal(np.float32([e.value for e in events]), expected)
    from tensorboard.util import tensor_util
    exact = accumulator(tmp_path).Tensors("exact")[0]
    assert exact.step == 3 and tensor_util.make_ndarray(exact.tensor_proto) == 0.1  # float64


@needs_tensorboard
def test_add_scalars_writes_a_run_per_key(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for step in range(3):
            w.add_scalars("run/loss", {"train": step, "valid": 2.0 * step}, step)
    for key, scale in (("train", 1.0), ("valid", 2.0)):
        events = accumulator(tmp_path / f"run_loss_{key}").Scalars("run/loss")
        assert [(e.step, e.value) for e in events] == [(s, scale * s) for s in range(3)]


# ---- histograms --------------------------------------------------------------------------------

@needs_tensorboard
def test_histogram_with_tensorflow_buckets(tmp_path):
    x = rill.randn((2000,), dtype=rill.float64) * 3.0
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("w", x, 4)
    event, = accumulator(tmp_path).Histograms("w")
    h = event.histogram_value
    v = x.numpy()
    assert event.step == 4 and h.num == v.size
    assert (h.min, h.max) == (v.min(), v.max())
    assert h.sum == pytest.approx(v.sum()) and h.sum_squares == pytest.approx((v * v).sum())
    # bucket i holds the values in (limit[i-1], limit[i]]: count them independently
    limits = np.array(h.bucket_limit)
    assert np.all(np.diff(limits) > 0) and sum(h.bucket) == v.size
    lower = np.concatenate([[-np.inf], limits[:-1]])
    counted = [np.count_nonzero((v > lo) & (v <= hi)) for lo, hi in zip(lower, limits)]
    assert list(h.bucket) == counted
    # TensorFlow's edges grow by 10%: consecutive positive limits have ratio 1.1
    positive = limits[limits > 1e-3]
    np.testing.assert_allclose(positive[1:] / positive[:-1], 1.1, rtol=1e-9)


@needs_tensorboard
def test_histogram_with_numpy_bins_and_max_bins(tmp_path):
    v = np.random.default_rng(1).normal(size=500)
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("a", v, 0, bins=10)
        w.add_histogram("b", v, 0, bins=30, max_bins=7)
    acc = accumulator(tmp_path)
    a = acc.Histograms("a")[0].histogram_value
    counts, edges = np.histogram(v, bins=10)
    assert list(a.bucket) == list(counts) and np.allclose(a.bucket_limit, edges[1:])
    b = acc.Histograms("b")[0].histogram_value
    assert len(b.bucket) <= 7 and sum(b.bucket) == 500
    counts30, edges30 = np.histogram(v, bins=30)
    assert b.bucket[0] == counts30[:5].sum() and b.bucket_limit[0] == edges30[5]


# ---- images ------------------------------------------------------------------------------------

def _decode(encoded: bytes) -> np.ndarray:
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(encoded)))


@needs_tensorboard
def test_images_in_every_layout(tmp_path):
    pytest.importorskip("PIL")
    rng = np.random.default_rng(2)
    chw = rng.random((3, 5, 7))
    hwc = rng.integers(0, 256, (6, 4, 3), dtype=np.uint8)
    gray = rng.random((8, 9)).astype(np.float32)
    rgba = rng.integers(0, 256, (4, 2, 3), dtype=np.uint8)  # CHW with 4 channels
    with SummaryWriter(tmp_path) as w:
        w.add_image("chw", rill.tensor(chw), 1)
        w.add_image("hwc", hwc, 2, dataformats="HWC")
        w.add_image("gray", gray, 3, dataformats="HW")
        w.add_image("rgba", rgba, 4)
        w.add_image("clipped", np.array([[[-0.5, 0.5, 2.0]]]), 5)  # 1x1x3 CHW
    acc = accumulator(tmp_path)
    expect = {"chw": np.rint(chw.transpose(1, 2, 0) * 255), "hwc": hwc,
              "gray": np.rint(gray.astype(np.float64) * 255),
              "rgba": rgba.transpose(1, 2, 0), "clipped": np.array([[[0], [128], [255]]])}
    for tag, want in expect.items():
        event, = acc.Images(tag)
        pixels = _decode(event.encoded_image_string)
        assert (event.height, event.width) == pixels.shape[:2] == want.shape[:2], tag
        np.testing.assert_array_equal(pixels.reshape(want.shape), want, err_msg=tag)


# ---- text and hyper-parameters -----------------------------------------------------------------

@needs_tensorboard
def test_text_is_a_string_tensor_of_the_text_plugin(tmp_path):
    from tensorboard.util import tensor_util
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "lr **0.1**, résumé", 7)
    acc = accumulator(tmp_path)
    event, = acc.Tensors("notes")
    assert event.step == 7
    assert tensor_util.make_ndarray(event.tensor_proto).item().decode() == "lr **0.1**, résumé"
    assert acc.SummaryMetadata("notes").plugin_data.plugin_name == "text"


@needs_tensorboard
def test_hparams_read_by_the_plugin_protos(tmp_path):
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
    with SummaryWriter(tmp_path) as w:
        w.add_hparams({"lr": 0.01, "optimizer": "adam", "bn": True, "layers": rill.tensor(3)},
                      {"hparam/accuracy": 0.93, "hparam/loss": rill.tensor(0.2)},
                      hparam_domain_discrete={"optimizer": ["adam", "sgd"]}, run_name="trial1")
    acc = accumulator(tmp_path / "trial1")
    content = acc.PluginTagToContent("hparams")
    data = {tag: plugin_data_pb2.HParamsPluginData.FromString(c) for tag, c in content.items()}
    experiment = data["_hparams_/experiment"].experiment
    infos = {i.name: i for i in experiment.hparam_infos}
    assert set(infos) == {"lr", "optimizer", "bn", "layers"}
    assert infos["lr"].type == api_pb2.DATA_TYPE_FLOAT64
    assert infos["optimizer"].type == api_pb2.DATA_TYPE_STRING
    assert infos["bn"].type == api_pb2.DATA_TYPE_BOOL
    assert [v.string_value for v in infos["optimizer"].domain_discrete.values] == ["adam", "sgd"]
    assert [m.name.tag for m in experiment.metric_infos] == ["hparam/accuracy", "hparam/loss"]
    start = data["_hparams_/session_start_info"].session_start_info.hparams
    assert start["lr"].number_value == 0.01 and start["optimizer"].string_value == "adam"
    assert start["bn"].bool_value is True and start["layers"].number_value == 3
    assert data["_hparams_/session_end_info"].session_end_info.status == 1  # STATUS_SUCCESS
    assert acc.Scalars("hparam/accuracy")[0].value == pytest.approx(0.93)
    assert acc.Scalars("hparam/loss")[0].value == pytest.approx(0.2)


# ---- graphs ------------------------------------------------------------------------------------

def _check_graph(graph_def, graph, prefix=""):
    """Every node of the rill graph is a NodeDef of its op, in order, whose inputs name the
    NodeDefs of the rill node's producers; devices, shapes and dtypes carried over. Bodies
    of control flow are checked the same way inside their node's group."""
    from tensorboard.compat.proto import types_pb2
    mine = [n for n in graph_def.node if n.name.startswith(prefix)]
    defs, bodies = [], []
    for d in mine:
        if d.op in ("variable", "output") or any(d.name.startswith(b) for b, _ in bodies):
            continue
        defs.append(d)
        node = graph.nodes[len(defs) - 1]
        bodies += [(f"{d.name}/{key}/", sub) for key, sub in node.subgraphs.items()]
    assert [n.op for n in defs] == [n.op for n in graph.nodes]
    name = {node: d.name for node, d in zip(graph.nodes, defs)}
    variables = [n.name for n in mine if n.op == "variable"]
    assert variables == [prefix + v.name for v in graph.variables]
    for node, d in zip(graph.nodes, defs):
        inputs = [name[v.node] + (f":{v.index}" if v.index else "") for v in node.inputs]
        if node.op in ("read", "assign"):
            inputs.insert(0, variables[node.attrs["var"]])
        inputs += ["^" + name[a] for a in node.after]
        assert list(d.input) == inputs, node
        assert d.device == str(node.device)
        shapes = [[dim.size for dim in s.dim] for s in d.attr["_output_shapes"].list.shape]
        assert shapes == [list(v.shape) for v in node.outputs]
        if node.outputs:
            want = {"float32": types_pb2.DT_FLOAT, "float64": types_pb2.DT_DOUBLE,
                    "bool": types_pb2.DT_BOOL, "int64": types_pb2.DT_INT64}
            assert d.attr["dtype"].type == want[node.outputs[0].dtype.name]
    outputs = [n for n in mine if n.op == "output" and
               not any(n.name.startswith(b) for b, _ in bodies)]
    assert [list(n.input) for n in outputs] == [[name[v.node]] for v in graph.outputs]
    for body_prefix, sub in bodies:
        _check_graph(graph_def, sub, body_prefix)
    return {d.name: d for d in mine}


@needs_tensorboard
def test_graph_of_a_module_with_variables(tmp_path):
    model = rill.nn.Sequential(rill.nn.Linear(3, 4), rill.nn.Tanh(), rill.nn.Linear(4, 2))
    x = rill.ones((5, 3))
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model, x)
    graph = rill.capture(model).graph_for(x)
    nodes = _check_graph(accumulator(tmp_path).Graph(), graph)
    assert nodes["0.weight/read"].input == ["0.weight"]
    assert nodes["linear"].input == ["x0", "0.weight/read", "0.bias/read"]
    assert "test_summary.py" in nodes["linear"].attr["_source"].s.decode()


@needs_tensorboard
def test_graph_of_a_captured_training_step_with_control_flow(tmp_path):
    w0 = rill.randn((3, 2)).requires_grad_()
    opt = rill.optim.SGD([w0], lr=0.1)

    @rill.capture
    def step(x, flag):
        opt.zero_grad()
        y = rill.cond(flag.sum() > 0, lambda a: a * 2.0, lambda a: a - 1.0, x @ w0)
        loss = y.sum(axis=1).mean()
        loss.backward()
        opt.step()
        return loss, y

    args = (rill.ones((4, 3)), rill.ones((1,)))
    with SummaryWriter(tmp_path) as w:
        w.add_graph(step, args)
    graph = step.graph_for(*args)
    assert any(n.op == "assign" for n in graph.nodes)  # the update is in the graph
    nodes = _check_graph(accumulator(tmp_path).Graph(), graph)
    switches = [name for name, d in nodes.items() if d.op == "switch"]
    assert len(switches) >= 1  # forward (and the backward pass may have its own)
    assert nodes[switches[0]].input[-1] == "matmul"  # the operand flows into the cond
    body = {nodes[n].op for n in nodes if n.startswith(f"{switches[0]}/branches[1]/")}
    assert {"input", "multiply", "output"} <= body  # the true branch, a * 2.0, in its group
    assert "v0/assign" in nodes and nodes["v0/assign"].input[0] == "v0"


@needs_tensorboard
def test_graph_keeps_node_devices_and_joins_send_to_recv(tmp_path):
    @rill.capture
    def f(x):
        with rill.device("cpu:1"):
            y = rill.tanh(x) * 2.0
        return y + 1.0

    x = rill.ones((3,))
    with SummaryWriter(tmp_path / "placed") as w:
        w.add_graph(f, x)
    graph = f.graph_for(x)
    nodes = _check_graph(accumulator(tmp_path / "placed").Graph(), graph)
    assert nodes["tanh"].device == "cpu:1" and nodes["x0"].device == "cpu"
    # one graph holding both sides of a transfer (as partitioning makes them): the recv
    # is drawn after its send
    cpu = graph.nodes[0].device
    cpu1 = next(n.device for n in graph.nodes if n.op == "tanh")
    from rill.capture.ir import Graph
    g = Graph(name="transfer")
    x0 = g.add("input", attrs={"index": 0}, out_specs=[((3,), rill.float32)], device=cpu)
    g.add("send", [x0.outputs[0]], {"key": "1:cpu->cpu:1", "to": cpu1}, device=cpu)
    recv = g.add("recv", [], {"key": "1:cpu->cpu:1", "from": cpu}, [((3,), rill.float32)],
                 device=cpu1)
    g.outputs.append(recv.outputs[0])
    with SummaryWriter(tmp_path / "transfer") as w:
        w.add_graph(g)
    nodes = {n.name: n for n in accumulator(tmp_path / "transfer").Graph().node}
    assert nodes["recv"].input == ["^send"] and nodes["recv"].device == "cpu:1"
    assert nodes["send"].input == ["x0"] and nodes["send"].attr["key"].s == b"1:cpu->cpu:1"


# ---- files: flushing, closing, purging ---------------------------------------------------------

@needs_tensorboard
def test_max_queue_and_flush_secs_write_without_close(tmp_path):
    w = SummaryWriter(tmp_path / "q", max_queue=3, flush_secs=1000)
    for step in range(3):
        w.add_scalar("a", step, step)
    assert len(accumulator(tmp_path / "q").Scalars("a")) == 3  # the third add flushed
    w.add_scalar("a", 3, 3)
    assert len(accumulator(tmp_path / "q").Scalars("a")) == 3  # queued
    w.flush()
    assert len(accumulator(tmp_path / "q").Scalars("a")) == 4
    w.close()
    timed = SummaryWriter(tmp_path / "t", flush_secs=0.2)
    timed.add_scalar("b", 1.0, 0)
    deadline = time.monotonic() + 10
    while "b" not in accumulator(tmp_path / "t").Tags()["scalars"]:
        assert time.monotonic() < deadline, "the background flush never wrote"
        time.sleep(0.1)
    timed.close()


@needs_tensorboard
def test_purge_step_drops_what_a_restart_rewrites(tmp_path):
    with SummaryWriter(tmp_path, filename_suffix=".first") as w:
        for step in range(10):
            w.add_scalar("loss", 1.0, step)
    time.sleep(1.1)  # event files are ordered by the time in their name
    with SummaryWriter(tmp_path, purge_step=5) as w:
        for step in range(5, 7):
            w.add_scalar("loss", 2.0, step)
    events = accumulator(tmp_path).Scalars("loss")
    assert [(e.step, e.value) for e in events] == [(s, 1.0) for s in range(5)] + \
        [(5, 2.0), (6, 2.0)]
    assert any(f.endswith(".first") for f in os.listdir(tmp_path))


@needs_tensorboard
def test_progress_logs_its_metrics(tmp_path):
    with SummaryWriter(tmp_path) as w:
        bar = rill.train.Progress(total=3, description="train", file=io.StringIO(),
                                  plain=True, writer=w)
        with bar:
            for i in range(3):
                bar.update(loss=rill.tensor(1.0 / (i + 1)), lr=0.1, note="text")
            bar.set(acc=0.75)
    acc = accumulator(tmp_path)
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("train/loss")] == \
        [(1, 1.0), (2, 0.5), (3, round(1 / 3, 6))]
    assert [e.step for e in acc.Scalars("train/lr")] == [1, 2, 3]
    assert [(e.step, e.value) for e in acc.Scalars("train/acc")] == [(3, 0.75)]
    assert "train/note" not in acc.Tags()["scalars"]


# ---- errors ------------------------------------------------------------------------------------

def test_bad_input_raises_rill_errors(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(rill.ShapeError, match="one number.*shape \\(3,\\)"):
            w.add_scalar("a", rill.ones((3,)))
        with pytest.raises(rill.ArgumentError, match="tag must be a non-empty str"):
            w.add_scalar(3, 1.0)
        with pytest.raises(rill.ArgumentError, match="global_step must be an int"):
            w.add_scalar("a", 1.0, global_step=1.5)
        with pytest.raises(rill.ArgumentError, match="empty"):
            w.add_histogram("h", np.zeros((0,)))
        with pytest.raises(rill.ArgumentError, match="NaN or infinite"):
            w.add_histogram("h", np.array([1.0, np.nan]))
        with pytest.raises(rill.ArgumentError, match="bins must be"):
            w.add_histogram("h", np.ones(3), bins="nonsense")
        with pytest.raises(rill.ArgumentError, match="dataformats"):
            w.add_image("i", np.zeros((3, 4, 4)), dataformats="NCHW")
        with pytest.raises(rill.ShapeError, match="does not match dataformats"):
            w.add_image("i", np.zeros((4, 4)))
        with pytest.raises(rill.ShapeError, match="1 \\(gray\\), 3 \\(RGB\\) or 4"):
            w.add_image("i", np.zeros((2, 4, 4)))
        with pytest.raises(rill.DTypeError, match="uint8"):
            w.add_image("i", np.zeros((3, 4, 4), np.int32))
        with pytest.raises(rill.ArgumentError, match="text_string must be a str"):
            w.add_text("t", 3)
        with pytest.raises(rill.ArgumentError, match="must be dicts"):
            w.add_hparams([("lr", 1)], {})
        with pytest.raises(rill.ArgumentError, match="must be a number, str, bool"):
            w.add_hparams({"lr": [1, 2]}, {})
        with pytest.raises(rill.ArgumentError, match="not in hparam_dict"):
            w.add_hparams({"lr": 1.0}, {}, hparam_domain_discrete={"mom": [0.9]})
        with pytest.raises(rill.ArgumentError, match="model must be"):
            w.add_graph(42, rill.ones(()))
    with pytest.raises(rill.ArgumentError, match="max_queue"):
        SummaryWriter(tmp_path, max_queue=0)
    with pytest.raises(rill.ArgumentError, match="writer must be a SummaryWriter"):
        rill.train.Progress(total=1, file=io.StringIO(), plain=True, writer="runs")


def test_summaries_of_traced_values_are_refused_with_the_reason(tmp_path):
    with SummaryWriter(tmp_path) as w:
        @rill.capture
        def f(x):
            w.add_scalar("inside", x.sum())
            return x

        with pytest.raises(rill.CaptureError, match="return it from the captured function"):
            f(rill.ones((2,)))


def test_default_log_dir_and_reopening_after_close(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = SummaryWriter(comment="_exp")
    assert w.get_logdir().startswith("runs" + os.sep) and w.get_logdir().endswith("_exp")
    w.close()
    w.add_scalar("late", 1.0)  # a summary after close opens a new file, as PyTorch's does
    w.close()
    files = os.listdir(w.get_logdir())
    assert len(files) == 2 and all(f.startswith("events.out.tfevents.") for f in files)


# ---- a real TensorBoard server -----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, deadline: float, post=None):
    """GET url (POST the JSON `post`) until it answers 200 with non-empty JSON, or the
    deadline passes."""
    last = None
    while time.monotonic() < deadline:
        try:
            request = url if post is None else urllib.request.Request(
                url, data=json.dumps(post).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as reply:
                data = json.loads(reply.read())
            if data:
                return data
            last = "empty reply"
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
            last = e
        time.sleep(0.3)
    raise AssertionError(f"no answer from {url} in time: {last}")


@needs_tensorboard
def test_tensorboard_server_serves_the_run(tmp_path):
    with SummaryWriter(tmp_path / "exp") as w:
        for step in range(4):
            w.add_scalar("loss", 0.5 * step, step)
        w.add_graph(rill.nn.Linear(2, 2), rill.ones((1, 2)))
        w.add_text("notes", "*hello*", 2)
        w.add_hparams({"lr": 0.1, "optimizer": "adam"}, {"accuracy": 0.75}, run_name="trial")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path), "--host",
         "127.0.0.1", "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 45
        assert "exp" in _get_json(f"{base}/data/runs", deadline)
        points = _get_json(f"{base}/data/plugin/scalars/scalars?run=exp&tag=loss", deadline)
        assert [(step, value) for _, step, value in points] == [(s, 0.5 * s) for s in range(4)]
        with urllib.request.urlopen(f"{base}/data/plugin/graphs/graph?run=exp&conceptual=false",
                                    timeout=10) as reply:
            pbtxt = reply.read().decode()
        assert 'op: "linear"' in pbtxt and 'input: "x0"' in pbtxt
        text = _get_json(f"{base}/data/plugin/text/text?run=exp&tag=notes", deadline)
        assert [(t["step"], t["text"]) for t in text] == [(2, "<p><em>hello</em></p>")]
        query = {"experimentName": "", "allowedStatuses": ["STATUS_SUCCESS"], "colParams": [],
                 "startIndex": 0, "sliceSize": 10}
        groups = _get_json(f"{base}/data/plugin/hparams/session_groups", deadline, query)
        group, = groups["sessionGroups"]
        assert group["name"] == "exp/trial" and group["hparams"] == {"lr": 0.1,
                                                                     "optimizer": "adam"}
        assert [m["value"] for m in group["metricValues"]] == [0.75]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stderr.close()
