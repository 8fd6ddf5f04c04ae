"""ONNX cases that once gave a wrong answer without a word (issue 32, class 5), each checked
against the ONNX specification as its reference evaluator (`onnx.reference`) and
onnxruntime implement it, and against PyTorch where it has the same operation."""
import numpy as np
import pytest

import rill

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import rill.onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(32)
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int64): TensorProto.INT64}


def one_node(op_type, feeds, opset=18, initializers=None, **attrs):
    """A model of one node whose inputs are `feeds` (name -> array, in order) and whose
    initializers are `initializers` (name -> array); its output has input 0's type."""
    initializers = initializers or {}
    inputs = [helper.make_tensor_value_info(name, ONNX_TYPES[a.dtype], a.shape)
              for name, a in feeds.items()]
    node = helper.make_node(op_type, list(feeds) + list(initializers), ["y"], **attrs)
    out = ONNX_TYPES[next(iter(feeds.values())).dtype]  # these ops keep input 0's type
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", out, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def by_reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)[0]


def by_onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def by_rill(model, feeds):
    return rill.onnx.load(model)(*[rill.tensor(a) for a in feeds.values()]).numpy()


def same(got, want, tol=1e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# ---- ScatterND: every update counts, repeated indices included --------------------------

def scatter_nd_case(data_shape, k, updates_lead, repeats):
    """data, indices (some negative) aiming `repeats` times at each of a few slices."""
    data = RNG.standard_normal(data_shape).astype(np.float32)
    distinct = int(np.prod(updates_lead)) // repeats
    rows = np.stack([RNG.integers(0, data_shape[i], distinct) for i in range(k)], axis=-1)
    rows = np.concatenate([rows] * repeats)[RNG.permutation(distinct * repeats)]
    rows = np.where(RNG.random(rows.shape) < 0.3, rows - np.asarray(data_shape[:k]), rows)
    indices = rows.reshape(tuple(updates_lead) + (k,)).astype(np.int64)
    updates = RNG.standard_normal(tuple(updates_lead) + data_shape[k:]).astype(np.float32)
    return {"data": data, "indices": indices, "updates": updates}


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("data_shape,k,lead,repeats", [
    ((5,), 1, (6,), 3),               # single elements, each hit three times
    ((4, 3, 2), 1, (2, 3), 2),        # whole (3, 2) slices
    ((4, 3, 2), 2, (4,), 4),          # one index aimed at four times
    ((3, 4, 2), 3, (2, 2, 3), 2),     # elements of a 3-d tensor, 2-d batch of indices
])
def test_scatter_nd_reductions_combine_every_update(reduction, data_shape, k, lead, repeats):
    feeds = scatter_nd_case(data_shape, k, lead, repeats)
    model = one_node("ScatterND", feeds, reduction=reduction)
    want = by_reference(model, feeds)
    same(by_rill(model, feeds), want)
    same(by_onnxruntime(model, feeds), want)


def test_scatter_nd_product_gradient_matches_finite_differences():
    feeds = scatter_nd_case((4, 2), 1, (5,), 1)
    feeds["indices"] = np.array([[0], [2], [0], [-4], [3]], np.int64)  # row 0 three times
    feeds = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in feeds.items()}
    model = one_node("ScatterND", feeds, reduction="mul")
    f, eager = rill.onnx.load(model), rill.onnx.load(model, capture=False)
    weights = RNG.standard_normal((4, 2))
    data, updates = (rill.tensor(feeds[k], requires_grad=True) for k in ("data", "updates"))
    (f(data, rill.tensor(feeds["indices"]), updates) * rill.tensor(weights)).sum().backward()

    def loss(d, u):
        out = eager(rill.tensor(d), rill.tensor(feeds["indices"]), rill.tensor(u))
        return float((out.numpy() * weights).sum())
    for name, grad in (("data", data.grad), ("updates", updates.grad)):
        numeric = np.zeros_like(feeds[name])
        for i in np.ndindex(numeric.shape):
            step = np.zeros_like(numeric)
            step[i] = 1e-6
            plus = dict(feeds, **{name: feeds[name] + step})
            minus = dict(feeds, **{name: feeds[name] - step})
            numeric[i] = (loss(plus["data"], plus["updates"]) -
                          loss(minus["data"], minus["updates"])) / 2e-6
        np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-5, atol=1e-7)


def test_scatter_nd_refuses_an_unknown_reduction_and_mismatched_updates():
    feeds = scatter_nd_case((4, 3), 1, (2,), 1)
    with pytest.raises(rill.onnx.ONNXError, match="reduction must be"):
        by_rill(one_node("ScatterND", feeds, reduction="mean"), feeds)
    feeds["updates"] = feeds["updates"][:, :2]
    with pytest.raises(rill.onnx.ONNXError, match=r"updates \(2, 2\) must have shape"):
        by_rill(one_node("ScatterND", feeds, reduction="add"), feeds)


# ---- LpNormalization: a slice whose norm is 0 gives 0 --------------------------------------

@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_of_zero_slices_is_zero(p, axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x[1] = 0.0
    x[:, 2] = 0.0
    x[..., 3] = 0.0
    feeds = {"x": x}
    model = one_node("LpNormalization", feeds, p=p, axis=axis)
    got = by_rill(model, feeds)
    assert np.isfinite(got).all()
    norm = np.linalg.norm(x, ord=p, axis=axis, keepdims=True)
    want = np.divide(x, norm, out=np.zeros_like(x), where=norm != 0)
    same(got, want)
    same(by_onnxruntime(model, feeds), want)
    if p == 2:  # the reference sums x ** p without abs, which only agrees for p = 2
        same(by_reference(model, feeds), want)


def test_lp_normalization_gradient_at_a_zero_slice_is_finite():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[1] = 0.0
    f = rill.onnx.load(one_node("LpNormalization", {"x": x}, p=2, axis=1))
    arg = rill.tensor(x, requires_grad=True)
    (f(arg) * rill.tensor(RNG.standard_normal((3, 4)).astype(np.float32))).sum().backward()
    assert np.isfinite(arg.grad.numpy()).all()


def test_lp_normalization_refuses_other_orders():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(rill.onnx.ONNXError, match="p must be 1 or 2, got 3"):
        by_rill(one_node("LpNormalization", {"x": x}, p=3), {"x": x})


# ---- SpaceToDepth and DepthToSpace in both modes (opset 28 has SpaceToDepth's mode) -------

@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape,block", [((2, 3, 4, 6), 2), ((1, 2, 6, 3), 3)])
def test_space_to_depth_and_back_in_each_mode(mode, shape, block):
    import torch
    x = RNG.standard_normal(shape).astype(np.float32)
    down = one_node("SpaceToDepth", {"x": x}, opset=28, blocksize=block, mode=mode)
    deep = by_rill(down, {"x": x})
    same(deep, by_reference(down, {"x": x}))
    same(deep, by_onnxruntime(down, {"x": x}))
    up = one_node("DepthToSpace", {"x": deep}, opset=28, blocksize=block, mode=mode)
    back = by_rill(up, {"x": deep})
    same(back, by_onnxruntime(up, {"x": deep}))
    same(back, x)  # the spec: DepthToSpace reverses SpaceToDepth
    if mode == "CRD":  # PyTorch's pixel (un)shuffle orders channels as CRD does
        same(deep, torch.nn.functional.pixel_unshuffle(torch.tensor(x), block).numpy())


def test_space_to_depth_refuses_sizes_that_do_not_split():
    x = np.ones((1, 1, 5, 4), np.float32)
    with pytest.raises(rill.onnx.ONNXError, match="multiples of the blocksize 2"):
        by_rill(one_node("SpaceToDepth", {"x": x}, blocksize=2), {"x": x})


# ---- ConvTranspose: output_shape sets the pads the spec's way -----------------------------

@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], output_shape=[5, 6]),          # pads > 0, odd totals
    dict(strides=[2, 2], output_shape=[4, 4]),
    dict(strides=[3, 2], output_shape=[10, 8]),         # one past the full result: zeros
    dict(strides=[3, 3], output_shape=[9, 10]),         # up to stride - 1 past it
    dict(strides=[2, 2], output_shape=[4, 5], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], output_shape=[4, 5], auto_pad="SAME_LOWER"),
    dict(strides=[2, 2], output_shape=[4, 5], pads=[1, 1, 1, 1]),  # pads are ignored
    dict(strides=[2, 2], output_shape=[6, 6], output_padding=[1, 1]),
    dict(strides=[2, 1], output_shape=[6, 4], dilations=[1, 2], group=2),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
])
def test_conv_transpose_output_shape(attrs):
    group = attrs.get("group", 1)
    feeds = {"x": RNG.standard_normal((2, 2, 3, 3)).astype(np.float32)}
    per_group = 3 if group == 1 else 1  # output channels: per_group * group
    weights = {"w": RNG.standard_normal((2, per_group, 3, 3)).astype(np.float32),
               "b": RNG.standard_normal(per_group * group).astype(np.float32)}
    model = one_node("ConvTranspose", feeds, initializers=weights, **attrs)
    got = by_rill(model, feeds)
    want = by_onnxruntime(model, feeds)
    if "output_shape" in attrs:
        assert got.shape[2:] == tuple(attrs["output_shape"][-2:])
    same(got, want, tol=1e-4)
    try:
        reference = by_reference(model, feeds)
    except ValueError:  # the reference's col2im handles only pads <= 0 with output_shape
        return
    same(got, reference, tol=1e-4)


def test_conv_transpose_output_shape_gradient_reaches_input_and_bias():
    feeds = {"x": RNG.standard_normal((1, 1, 3, 3)).astype(np.float32)}
    weights = {"w": np.ones((1, 1, 3, 3), np.float32), "b": np.zeros(1, np.float32)}
    f = rill.onnx.load(one_node("ConvTranspose", feeds, initializers=weights, strides=[3, 2],
                                output_shape=[10, 8]))
    x = rill.tensor(feeds["x"], requires_grad=True)
    f(x).sum().backward()
    # each input pixel reaches 9 outputs; the bias every one of the 10 x 8
    np.testing.assert_allclose(x.grad.numpy(), np.full((1, 1, 3, 3), 9.0))
    bias = dict(zip(f.module.initializer_names.values(), f.module.parameters()))["b"]
    np.testing.assert_allclose(bias.grad.numpy(), [80.0])


@pytest.mark.parametrize("output_shape,why", [
    ([9, 7], "output size 9 on spatial axis 0 is out of reach.*gives 0 to 8"),
    ([1, 1, 7, 7], "must give the 2 spatial sizes"),
])
def test_conv_transpose_refuses_an_output_shape_it_cannot_give(output_shape, why):
    feeds = {"x": np.ones((1, 1, 3, 3), np.float32)}
    model = one_node("ConvTranspose", feeds, initializers={"w": np.ones((1, 1, 3, 3),
                     np.float32)}, strides=[2, 2], output_shape=output_shape)
    with pytest.raises(rill.onnx.ONNXError, match=why):
        by_rill(model, feeds)
    with pytest.raises(Exception, match="output_shape"):  # onnxruntime refuses it too
        by_onnxruntime(model, feeds)


# ---- export(dynamic_batch=True): every shape a * batch + b, or a refusal -----------------

def _rows(n):
    return rill.tensor(RNG.standard_normal((n, 3)).astype(np.float32))


def _quadratic_fill(x):
    n = x.shape[0]
    return rill.zeros((n * n, 3)) + x.sum()


def _quadratic_broadcast(x):
    n = x.shape[0]
    return rill.broadcast_to(x[:1], (n * n, 3))


def _quadratic_reshape(x):
    n = x.shape[0]
    return rill.reshape(rill.broadcast_to(x.reshape((n, 1, 3)), (n, n, 3)), (n * n, 3))


def _halved(x):
    return rill.zeros((x.shape[0] // 2 + 1, 3)) + x.sum()


@pytest.mark.parametrize("f,op", [(_quadratic_fill, "constant"),
                                  (_quadratic_broadcast, "broadcast_to"),
                                  (_quadratic_reshape, "reshape"),
                                  (_halved, "constant")])
def test_dynamic_batch_refuses_shapes_off_a_line(tmp_path, f, op):
    with pytest.raises(rill.onnx.ONNXError,
                       match=rf"{op} at .*test_onnx_silent_fixes.py:\d+ has shape .* at batch 4"
                             r".*not a \* batch \+ b.*dynamic_batch=False"):
        rill.onnx.export(f, (_rows(4),), tmp_path / "m.onnx", dynamic_batch=True)
    rill.onnx.export(f, (_rows(4),), tmp_path / "m.onnx")  # a fixed batch exports


def _linear_shapes(x):
    n = x.shape[0]
    grown = rill.concat([x, rill.zeros((n + 2, 3))], axis=0)              # 2n + 2 rows
    flat = rill.reshape(x, (3 * n,))
    return grown.sum(axis=1)[:, None] * 2 + rill.broadcast_to(flat[:1], (2 * n + 2, 1))


@pytest.mark.parametrize("batch", [1, 3, 9])
def test_dynamic_batch_runs_linear_shapes_at_any_batch(tmp_path, batch):
    rill.onnx.export(_linear_shapes, (_rows(4),), tmp_path / "m.onnx", dynamic_batch=True)
    x = _rows(batch)
    got = by_onnxruntime(onnx.load(tmp_path / "m.onnx"), {"input": x.numpy()})
    same(got, _linear_shapes(x).numpy())


def test_dynamic_batch_refuses_a_value_taken_from_the_batch(tmp_path):
    def count(x):
        return x + rill.full((x.shape[0], 3), float(x.shape[0]))

    with pytest.raises(rill.onnx.ONNXError, match="bakes the batch size into its value"):
        rill.onnx.export(count, (_rows(4),), tmp_path / "m.onnx", dynamic_batch=True)


def test_dynamic_batch_names_the_batch_a_function_fails_at(tmp_path):
    def pairs(x):
        return x.reshape((x.shape[0] // 2, -1))

    with pytest.raises(rill.onnx.ONNXError, match="fails when traced at batch size 5 "
                                                  r"\(ShapeError.*dynamic_batch=False"):
        rill.onnx.export(pairs, (_rows(4),), tmp_path / "m.onnx", dynamic_batch=True)


# ---- load(trainable=...): only weights are trained -----------------------------------------

class _TorchBlocks:
    """Two small transformer blocks written in torch: GPT-2's (LayerNorm, biased Linear,
    tanh GELU with its exponent 3.0, masked softmax) and Llama's (a hand-written RMSNorm
    whose weight is a Mul, no biases, SiLU-gated MLP, torch's fused causal attention)."""

    @staticmethod
    def build(kind):
        import math

        import torch
        nn = torch.nn

        class RMSNorm(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.weight = nn.Parameter(torch.rand(d) + 0.5)

            def forward(self, x):
                return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

        class Block(nn.Module):
            def __init__(self, d=16, heads=2):
                super().__init__()
                self.heads, llama = heads, kind == "llama"
                self.n1, self.n2 = (RMSNorm(d), RMSNorm(d)) if llama else \
                    (nn.LayerNorm(d), nn.LayerNorm(d))
                self.qkv = nn.Linear(d, 3 * d, bias=not llama)
                self.o = nn.Linear(d, d, bias=not llama)
                self.up = nn.Linear(d, 32, bias=not llama)
                self.gate = nn.Linear(d, 32, bias=False) if llama else None
                self.down = nn.Linear(32, d, bias=not llama)
                with torch.no_grad():  # no two equal tensors, which exporters would merge
                    for p in self.parameters():
                        p.add_(torch.rand(p.shape) * 0.1)

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                           for z in self.qkv(self.n1(x)).split(d, dim=-1))
                if self.gate is not None:
                    y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                else:
                    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
                    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
                    y = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
                x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
                h = self.n2(x)
                if self.gate is not None:
                    h = nn.functional.silu(self.gate(h)) * self.up(h)
                else:
                    h = self.up(h)
                    h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                                    (h + 0.044715 * torch.pow(h, 3.0))))
                return x + self.down(h)

        return Block()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "default"])
def test_fine_tuning_a_torch_export_follows_torch(tmp_path, kind, dynamo):
    import warnings

    import torch
    if dynamo:
        pytest.importorskip("onnxscript")  # torch's default exporter needs it
    torch.manual_seed(0)
    block = _TorchBlocks.build(kind).eval()
    x, target = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation note
        torch.onnx.export(block, (x,), tmp_path / "block.onnx", dynamo=dynamo)
    proto = onnx.load(tmp_path / "block.onnx")
    scalars = {i.name for i in proto.graph.initializer if not i.dims}
    f = rill.onnx.load(tmp_path / "block.onnx")
    mine = dict(f.module.named_parameters())
    names = {f.module.initializer_names[k] for k in mine}
    # one Parameter per torch Parameter (a Linear's weight transposed), no scalar among them
    assert sorted(p.size for p in mine.values()) == \
        sorted(p.numel() for p in block.parameters())
    assert not names & scalars and all(p.ndim > 0 for p in mine.values())
    if dynamo:
        assert scalars  # GELU's constants and the attention scale are 0-d initializers
    theirs = torch.optim.Adam(block.parameters(), lr=1e-2)
    ours = rill.optim.Adam(list(mine.values()), lr=1e-2)
    xr, tr = rill.tensor(x.numpy()), rill.tensor(target.numpy())
    for step in range(5):
        theirs.zero_grad()
        want = ((block(x) - target) ** 2).mean()
        want.backward()
        theirs.step()
        ours.zero_grad()
        got = ((f(xr) - tr) ** 2).mean()
        got.backward()
        ours.step()
        assert np.isfinite(got.item())
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-4)


def _weights_model():
    """MatMul by a transposed W plus a bias b, an added 2-D mask, a vector scale v, a
    scalar s, a Gather table e, BatchNormalization with running statistics."""
    f32 = np.float32
    inits = {"W": RNG.standard_normal((4, 3)).astype(f32), "b": RNG.standard_normal(4)
             .astype(f32), "mask": np.triu(np.full((2, 4), -1e4, f32), 1),
             "v": RNG.standard_normal(4).astype(f32), "s": np.asarray(3.0, f32),
             "e": RNG.standard_normal((5, 4)).astype(f32), "ids": np.array([1, 3], np.int64),
             "gamma": np.ones(4, f32), "beta": np.zeros(4, f32), "mean": np.zeros(4, f32),
             "var": np.ones(4, f32)}
    nodes = [helper.make_node("Transpose", ["W"], ["Wt"]),
             helper.make_node("MatMul", ["x", "Wt"], ["xw"]),
             helper.make_node("Add", ["xw", "b"], ["lin"]),
             helper.make_node("Add", ["lin", "mask"], ["masked"]),
             helper.make_node("Mul", ["masked", "v"], ["scaled"]),
             helper.make_node("Pow", ["scaled", "s"], ["cubed"]),
             helper.make_node("Gather", ["e", "ids"], ["rows"]),
             helper.make_node("Add", ["cubed", "rows"], ["z"]),
             helper.make_node("Unsqueeze", ["z", "axes"], ["z4"]),
             helper.make_node("BatchNormalization", ["z4", "gamma", "beta", "mean", "var"],
                              ["y"])]
    inits["axes"] = np.array([2, 3], np.int64)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _kinds(f):
    m = f.module
    return ({m.initializer_names[k] for k, _ in m.named_parameters()},
            {m.initializer_names[k] for k, _ in m.named_buffers()})


@pytest.mark.parametrize("trainable,params,buffers", [
    (None, {"W", "b", "e", "gamma", "beta"}, {"mask", "v", "mean", "var"}),
    (True, {"W", "b", "mask", "v", "s", "e", "gamma", "beta"}, {"mean", "var"}),
    (False, set(), {"W", "b", "mask", "v", "e", "gamma", "beta", "mean", "var"}),
    ({"v", "s"}, {"v", "s"}, {"W", "b", "mask", "e", "gamma", "beta", "mean", "var"}),
    (lambda name: name in ("W", "e"), {"W", "e"},
     {"b", "mask", "v", "gamma", "beta", "mean", "var"}),
])
def test_trainable_chooses_the_parameters(trainable, params, buffers):
    model = _weights_model()
    f = rill.onnx.load(model, trainable=trainable)
    assert _kinds(f) == (params, buffers)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    same(f(rill.tensor(x)).numpy(), by_onnxruntime(model, {"x": x}), tol=1e-4)
    loss = f(rill.tensor(x)).sum()
    if params:
        loss.backward()
        assert all(p.grad is not None for p in f.module.parameters())


@pytest.mark.parametrize("trainable,why", [
    ({"W", "nope"}, "trainable names 'nope', which no floating-point initializer"),
    ({"ids"}, "trainable names 'ids', which no floating-point initializer"),
    ({"mean"}, "trainable names 'mean': BatchNormalization's running statistics"),
    ("W", "trainable must be None, True, False, a collection"),
    (lambda name: 1, "the trainable function returned 1 for"),
])
def test_trainable_refuses_what_it_cannot_do(trainable, why):
    with pytest.raises(rill.onnx.ONNXError, match=why):
        rill.onnx.load(_weights_model(), trainable=trainable)


def test_a_rill_export_trains_its_parameters_only(tmp_path):
    model = rill.nn.Sequential(rill.nn.Linear(3, 4), rill.nn.BatchNorm1d(4)).eval()
    path = tmp_path / "m.onnx"

    def scaled(x):
        return model(x) * 3.0 + rill.ones((4,)) * 0.5

    rill.onnx.export(scaled, (_rows(2),), path)
    params, buffers = _kinds(rill.onnx.load(path))
    assert params == {"model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias"}
    assert buffers == {"model.1.running_mean", "model.1.running_var"}  # 3.0 stays a constant
