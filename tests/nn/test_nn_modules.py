"""rill.nn module machinery: registration and naming, state dicts, modes, conversions,
printing, containers, and the initializers in rill.nn.init."""
import io
import math

import numpy as np
import pytest
import torch
from rich.console import Console
from rich.table import Table

import rill
from rill import nn
from rill.nn import init


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(rill.ones(4))
        self.register_buffer("steps", rill.tensor(0))
        self.register_buffer("cache", rill.zeros(4), persistent=False)

    def forward(self, x):
        return rill.relu(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(4, 2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.head(self.drop(self.block(x)))


def values(module):
    return {k: np.array(v.numpy()) for k, v in module.state_dict().items()}


# ---- registration and naming ---------------------------------------------------------------

def test_parameters_buffers_and_submodules_are_found_by_dotted_name():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "block.scale", "block.fc.weight", "block.fc.bias", "head.weight", "head.bias"]
    assert [n for n, _ in net.named_buffers()] == ["block.steps", "block.cache"]
    assert [n for n, _ in net.named_modules()] == ["", "block", "block.fc", "head", "drop"]
    assert [n for n, _ in net.named_children()] == ["block", "head", "drop"]
    assert list(net.children()) == [net.block, net.head, net.drop]
    assert net.num_parameters() == 4 + (3 * 4 + 4) + (4 * 2 + 2)
    # Persistent buffers are state; the non-persistent cache is not.
    assert list(net.state_dict()) == ["block.scale", "block.steps", "block.fc.weight",
                                      "block.fc.bias", "head.weight", "head.bias"]


def test_shared_parameters_and_modules_are_listed_once():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(model.parameters())) == 2
    assert len(list(model.modules())) == 3
    tied = nn.Module()
    tied.a, tied.b = nn.Linear(2, 3), nn.Linear(3, 2)
    tied.b.weight = nn.Parameter(rill.zeros(2, 3))
    tied.a.weight = tied.b.weight  # tie (shapes fit only for this test's purpose)
    assert [n for n, _ in tied.named_parameters()] == ["a.weight", "a.bias", "b.bias"]
    assert len(list(tied.named_parameters(remove_duplicate=False))) == 4


def test_reassigning_and_deleting_attributes_updates_the_registries():
    m = Block()
    m.scale = nn.Parameter(rill.zeros(4))
    assert m.scale.tolist() == [0.0] * 4 and len(list(m.parameters())) == 3
    m.fc = None  # a submodule may be cleared to None
    assert "fc" not in dict(m.named_children()) and len(list(m.parameters())) == 1
    del m.scale
    assert list(m.parameters()) == [] and not hasattr(m, "scale")
    m.steps = rill.tensor(5)  # buffers are replaced by assignment
    assert m.state_dict()["steps"].item() == 5
    with pytest.raises(rill.ArgumentError, match="Block.steps is a buffer"):
        m.steps = 3
    m.w = nn.Parameter(rill.ones(1))
    with pytest.raises(rill.ArgumentError, match="Block.w is a parameter"):
        m.w = rill.ones(1)  # a plain tensor would silently stop being trained


def test_missing_attribute_error_names_the_module_and_suggests_names():
    net = Net()
    with pytest.raises(AttributeError, match=r"'Net' module has no attribute 'haed'.*'head'"):
        _ = net.haed
    with pytest.raises(AttributeError, match="'Linear' module has no attribute 'wieght'"):
        _ = net.head.wieght
    assert {"block", "head", "drop"} <= set(dir(net))
    assert {"weight", "bias"} <= set(dir(net.head))


def test_forgetting_super_init_is_explained():
    class Broken(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(rill.ones(1))

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Broken()


def test_registration_rejects_bad_names_and_values():
    m = nn.Module()
    with pytest.raises(rill.ArgumentError, match="without '.'"):
        m.register_parameter("a.b", nn.Parameter(rill.ones(1)))
    with pytest.raises(rill.ArgumentError, match="Parameter or None"):
        m.register_parameter("w", rill.ones(1))
    with pytest.raises(rill.ArgumentError, match="Tensor or None"):
        m.register_buffer("b", [1, 2])
    m.plain = 3
    with pytest.raises(rill.ArgumentError, match="already has an attribute 'plain'"):
        m.register_buffer("plain", rill.ones(1))


# ---- state dicts ---------------------------------------------------------------------------

def test_state_dict_round_trip_keeps_parameter_identity():
    a, b = Net().eval(), Net().eval()
    x = rill.randn(5, 3)
    before = list(b.parameters())
    held = b.head.weight  # as an optimizer would hold it
    result = b.load_state_dict(a.state_dict())
    assert result == ([], []) and result.missing_keys == []
    assert all(p is q for p, q in zip(before, b.parameters()))
    np.testing.assert_array_equal(held.numpy(), a.head.weight.numpy())
    np.testing.assert_array_equal(b(x).numpy(), a(x).numpy())
    assert held.requires_grad and held.is_leaf
    state = a.state_dict()
    assert not any(v.requires_grad for v in state.values())
    assert a.state_dict(keep_vars=True)["head.weight"] is a.head.weight


def test_load_state_dict_accepts_numpy_arrays():
    lin = nn.Linear(2, 2)
    lin.load_state_dict({"weight": np.eye(2, dtype=np.float32),
                         "bias": np.zeros(2, dtype=np.float32)})
    assert lin.weight.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_strict_load_names_every_problem_and_changes_nothing():
    net = Net()
    before = values(net)
    state = {k: v for k, v in net.state_dict().items()}
    state["block.scale"] = rill.zeros(4)                     # a good value, never loaded
    del state["head.bias"]                                   # missing
    del state["block.steps"]                                 # missing
    state["head.extra"] = rill.ones(1)                       # unexpected
    state["block.fc.weight"] = rill.zeros(5, 3)              # wrong shape
    state["head.weight"] = rill.zeros(2, 4, dtype=rill.float64)  # wrong dtype
    with pytest.raises(rill.ArgumentError) as info:
        net.load_state_dict(state)
    message = str(info.value)
    for text in ["missing key: head.bias", "missing key: block.steps",
                 "unexpected key: head.extra", "block.fc.weight: shape (5, 3)",
                 "head.weight: dtype float64", "5 problems"]:
        assert text in message, text
    after = values(net)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_non_strict_load_reports_keys_and_loads_the_rest():
    net = Net()
    state = net.state_dict()
    state["block.scale"] = rill.full((4,), 3.0)
    del state["head.bias"]
    state["stray"] = rill.ones(1)
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (["head.bias"], ["stray"])
    assert net.block.scale.tolist() == [3.0] * 4
    state["block.scale"] = rill.ones(3)
    with pytest.raises(rill.ArgumentError, match="block.scale: shape"):
        net.load_state_dict(state, strict=False)  # shapes are checked even when not strict


# ---- modes, conversions, helpers -----------------------------------------------------------

def test_train_and_eval_reach_every_submodule():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net and not any(m.training for m in net.modules())
    x = rill.ones(4, 3)
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # dropout is off
    net.train()
    assert all(m.training for m in net.modules())
    net.block.train(False)
    assert net.training and not net.block.training and not net.block.fc.training


def test_to_dtype_converts_in_place_and_keeps_integer_buffers():
    bn = nn.BatchNorm1d(3)
    model = nn.Sequential(nn.Linear(2, 3), bn)
    w = model[0].weight
    w.grad = rill.ones(3, 2)
    assert model.to(rill.float64) is model
    assert w is model[0].weight and w.dtype is rill.float64 and w.grad.dtype is rill.float64
    assert bn.running_mean.dtype is rill.float64
    assert bn.num_batches_tracked.dtype is rill.int64
    assert model(rill.ones(4, 2, dtype=rill.float64)).dtype is rill.float64
    model.to("float32")
    assert w.dtype is rill.float32


def test_to_device_moves_parameters_and_buffers():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    w = model[0].weight
    model.to("cpu:1")
    assert w is model[0].weight
    assert {str(t.device) for t in list(model.parameters()) + list(model.buffers())} == {"cpu:1"}
    assert str(model(rill.ones(4, 2, device="cpu:1")).device) == "cpu:1"


def test_apply_zero_grad_requires_grad_and_counts():
    net = Net()
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "Block", "Linear", "Dropout", "Net"]
    net.apply(lambda m: init.zeros_(m.bias) if isinstance(m, nn.Linear) else None)
    assert net.head.bias.tolist() == [0.0, 0.0]
    net(rill.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.block.requires_grad_(False)
    assert net.num_parameters(trainable_only=True) == 10
    net(rill.ones(2, 3)).sum().backward()
    assert net.block.fc.weight.grad is None and net.head.weight.grad is not None


def test_forward_hooks_see_and_may_replace_outputs():
    lin = nn.Linear(2, 2)
    seen = []
    handle = lin.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    double = lin.register_forward_hook(lambda m, args, out: out * 2)
    x = rill.ones(1, 2)
    plain = nn.functional.linear(x, lin.weight, lin.bias)
    np.testing.assert_allclose(lin(x).numpy(), 2 * plain.numpy())
    handle.remove()
    double.remove()
    np.testing.assert_allclose(lin(x).numpy(), plain.numpy())
    assert seen == [(1, 2)]


def test_forward_must_be_defined():
    with pytest.raises(NotImplementedError, match="Module does not define forward"):
        nn.Module()(rill.ones(1))


def test_deepcopy_and_pickle_give_independent_working_copies():
    import copy
    import pickle
    net = Net().eval()
    x = rill.ones(2, 3)
    for clone in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert clone.head.weight is not net.head.weight
        np.testing.assert_array_equal(clone(x).numpy(), net(x).numpy())
        with rill.no_grad():
            clone.head.bias += 1.0
        assert not np.array_equal(clone(x).numpy(), net(x).numpy())


# ---- printing ------------------------------------------------------------------------------

def test_repr_is_nested_with_parameter_counts():
    text = repr(Net())
    assert text.splitlines() == [
        "Net(  (params: 30)",
        "  (block): Block(  (params: 20)",
        "    (fc): Linear(in_features=3, out_features=4, bias=True)  (params: 16)",
        "  )",
        "  (head): Linear(in_features=4, out_features=2, bias=True)  (params: 10)",
        "  (drop): Dropout(p=0.5)",
        ")",
    ]
    assert repr(nn.Linear(1000, 1000)).endswith("(params: 1,001,000)")


def test_summary_renders_names_types_shapes_and_counts():
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.LSTM(8, 4, batch_first=True))
    model[2].weight_hh_l0.requires_grad_(False)
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    model.summary(rill.ones(2, 5, 3), console=console)
    text = out.getvalue()
    for piece in ["Linear", "ReLU", "LSTM", "[2, 5, 8]", "([2, 5, 4], ([1, 2, 4], [1, 2, 4]))",
                  "32", f"{model.num_parameters():,}",
                  f"{model.num_parameters(trainable_only=True):,}"]:
        assert piece in text, piece
    assert model.num_parameters() - model.num_parameters(trainable_only=True) == 64
    table = model.summary(show=False)
    assert isinstance(table, Table) and "Output shape" not in [c.header for c in table.columns]


def test_summary_lists_nested_modules_and_own_parameters():
    mha = nn.MultiheadAttention(8, 2)
    table = mha.summary(show=False)
    layers = list(table.columns[0].cells)
    assert layers == ["(own parameters)", "out_proj", "total"]
    assert list(table.columns[2].cells)[-1] == f"{mha.num_parameters():,}"


# ---- containers ----------------------------------------------------------------------------

def test_sequential_indexing_slicing_and_editing():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(model) == 3 and isinstance(model[-1], nn.Linear)
    head = model[:2]
    assert isinstance(head, nn.Sequential) and head(rill.ones(4, 2)).shape == (4, 3)
    assert head[0] is model[0]
    model[1] = nn.Tanh()
    assert isinstance(model[1], nn.Tanh)
    model.append(nn.Sigmoid())
    assert [n for n, _ in model.named_children()] == ["0", "1", "2", "3"]
    del model[3]
    assert len(model) == 3
    del model[0]
    model.append(nn.ReLU())
    assert [n for n, _ in model.named_children()] == ["0", "1", "2"]
    assert [type(m).__name__ for m in model] == ["Tanh", "Linear", "ReLU"]
    with pytest.raises(IndexError, match="out of range"):
        model[3]
    named = nn.Sequential({"enc": nn.Linear(2, 2), "act": nn.ReLU()})
    assert list(named.state_dict()) == ["enc.weight", "enc.bias"]


def test_module_list_registers_and_renumbers():
    layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    layers.append(nn.Linear(2, 3))
    layers.insert(0, nn.Identity())
    assert [type(m).__name__ for m in layers] == ["Identity", "Linear", "Linear", "Linear"]
    assert [n for n, _ in layers.named_children()] == ["0", "1", "2", "3"]
    del layers[1]
    assert list(layers.state_dict()) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    layers += [nn.ReLU()]
    assert len(layers) == 4 and isinstance(layers[-1], nn.ReLU)
    holder = nn.Module()
    holder.layers = layers
    assert len(list(holder.parameters())) == 4


def test_module_dict_behaves_like_a_dict():
    heads = nn.ModuleDict({"a": nn.Linear(2, 2)})
    heads["b"] = nn.Linear(2, 1)
    assert "b" in heads and list(heads.keys()) == ["a", "b"] and len(heads) == 2
    assert list(heads.state_dict()) == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert isinstance(heads.pop("a"), nn.Linear) and list(heads) == ["b"]
    with pytest.raises(rill.ArgumentError, match="no key 'zz'"):
        heads["zz"]


# ---- init ----------------------------------------------------------------------------------

def draw(fn, shape=(400, 300), seed=0, **kwargs):
    p = nn.Parameter(rill.empty(*shape))
    same = fn(p, generator=rill.Generator(seed), **kwargs)
    assert same is p
    return p.numpy().astype(np.float64)


def test_uniform_and_normal_statistics():
    u = draw(init.uniform_, a=-2.0, b=3.0)
    assert u.min() >= -2.0 and u.max() < 3.0
    assert abs(u.mean() - 0.5) < 0.02 and abs(u.var() - 25 / 12) < 0.03
    n = draw(init.normal_, mean=1.0, std=0.5)
    assert abs(n.mean() - 1.0) < 0.005 and abs(n.std() - 0.5) < 0.005


def test_xavier_and_kaiming_match_pytorch_formulas():
    fan_in, fan_out = 300, 400
    xu = draw(init.xavier_uniform_, gain=2.0)
    bound = 2.0 * math.sqrt(6 / (fan_in + fan_out))
    assert np.abs(xu).max() <= bound and abs(xu.std() - bound / math.sqrt(3)) < 0.01 * bound
    xn = draw(init.xavier_normal_)
    assert abs(xn.std() - math.sqrt(2 / (fan_in + fan_out))) < 0.005
    ku = draw(init.kaiming_uniform_, a=math.sqrt(5))  # Linear's default
    assert np.abs(ku).max() <= 1 / math.sqrt(fan_in)
    kn = draw(init.kaiming_normal_, mode="fan_out", nonlinearity="relu")
    assert abs(kn.std() - math.sqrt(2 / fan_out)) < 0.002
    conv = draw(init.kaiming_normal_, shape=(64, 16, 3, 3), nonlinearity="relu")
    assert abs(conv.std() - math.sqrt(2 / (16 * 9))) < 0.003


def test_calculate_gain_matches_pytorch():
    for name, param in [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                        ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None),
                        ("conv2d", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param))
    with pytest.raises(rill.ArgumentError, match="unknown nonlinearity 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(rill.ArgumentError, match="mode must be"):
        init.kaiming_uniform_(rill.empty(3, 3), mode="fan_avg")
    with pytest.raises(rill.ShapeError, match="at least 2 axes"):
        init.xavier_uniform_(rill.empty(3))


@pytest.mark.parametrize("shape", [(20, 5), (5, 20), (6, 2, 3, 3)])
def test_orthogonal_is_orthogonal(shape):
    q = draw(init.orthogonal_, shape=shape, gain=2.0).reshape(shape[0], -1)
    small = min(q.shape)
    gram = q.T @ q if q.shape[0] >= q.shape[1] else q @ q.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)


def test_constant_fills_and_generators_repeat():
    p = nn.Parameter(rill.empty(2, 3))
    assert init.constant_(p, 0.25) is p and p.tolist() == [[0.25] * 3] * 2
    assert init.ones_(p).tolist() == [[1.0] * 3] * 2 and p.requires_grad
    np.testing.assert_array_equal(draw(init.normal_, seed=7), draw(init.normal_, seed=7))
    assert not np.array_equal(draw(init.normal_, seed=7), draw(init.normal_, seed=8))
    rill.manual_seed(3)
    a = nn.Linear(4, 4)
    rill.manual_seed(3)
    b = nn.Linear(4, 4)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())


def test_default_initializations_follow_pytorch_bounds():
    lin = nn.Linear(50, 40)
    assert np.abs(lin.weight.numpy()).max() <= 1 / math.sqrt(50)
    assert np.abs(lin.bias.numpy()).max() <= 1 / math.sqrt(50)
    assert lin.weight.numpy().std() == pytest.approx(1 / math.sqrt(50) / math.sqrt(3), rel=0.1)
    conv = nn.Conv2d(4, 8, 3, groups=2)
    assert np.abs(conv.bias.numpy()).max() <= 1 / math.sqrt(2 * 9)
    lstm = nn.LSTM(3, 16)
    assert all(np.abs(p.numpy()).max() <= 0.25 for p in lstm.parameters())
    emb = nn.Embedding(1000, 16, padding_idx=3)
    assert abs(emb.weight.numpy().std() - 1.0) < 0.05 and not emb.weight.numpy()[3].any()
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.bias.tolist() == [0.0] * 3
