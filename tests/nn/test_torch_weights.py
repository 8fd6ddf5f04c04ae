"""Weights from PyTorch and safetensors load into rill models and give PyTorch's outputs;
hostile checkpoints are refused without running code (issue 36, item 2)."""
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

import rill
from rill.errors import CheckpointError

torch = pytest.importorskip("torch")


# ---- the same architectures, built from either framework's nn --------------------------------


def cnn(nn):
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 2 * 2, 5))


class _Sequence:
    """Embedding -> transformer encoder layer -> LSTM -> LayerNorm -> Linear, in either
    framework (both name their submodules alike, so their state_dict keys agree)."""

    @staticmethod
    def build(nn):
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(11, 8)
                self.block = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                        batch_first=True)
                self.lstm = nn.LSTM(8, 6, num_layers=2, batch_first=True)
                self.norm = nn.LayerNorm(6)
                self.head = nn.Linear(6, 3)

            def forward(self, tokens):
                h = self.block(self.embed(tokens))
                h, _ = self.lstm(h)
                return self.head(self.norm(h))

        return Model()


def trained_torch(build, x):
    """A torch model whose batch-norm statistics moved off their initial values."""
    torch.manual_seed(0)
    model = build(torch.nn)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(x)
    return model.eval()


def outputs(model, x):
    return np.asarray(model(rill.tensor(x.numpy())).numpy())


def torch_outputs(model, x):
    with torch.no_grad():
        return model(x).numpy()


def images():
    rng = np.random.default_rng(0)
    return torch.from_numpy(rng.standard_normal((4, 3, 8, 8), dtype=np.float32))


def tokens():
    return torch.from_numpy(np.random.default_rng(1).integers(0, 11, (2, 7)))


@pytest.mark.parametrize("build,inputs", [(cnn, images), (_Sequence.build, tokens)],
                         ids=["cnn", "transformer_lstm"])
@pytest.mark.parametrize("fmt", ["torch.save", "safetensors"])
def test_torch_weights_give_torch_outputs(tmp_path, build, inputs, fmt):
    x = inputs()
    reference = trained_torch(build, x)
    path = os.fspath(tmp_path / "weights")
    if fmt == "torch.save":
        torch.save(reference.state_dict(), path)
    else:
        pytest.importorskip("safetensors")
        from safetensors.torch import save_file
        save_file(reference.state_dict(), path)
    model = build(rill.nn).eval()
    before = outputs(model, x)
    result = model.load_state_dict(rill.load(path))
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    got, want = outputs(model, x), torch_outputs(reference, x)
    assert not np.allclose(before, want, rtol=1e-5, atol=1e-6)  # the weights did change it
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    bn = [k for k in model.state_dict() if k.endswith("num_batches_tracked")]
    for key in bn:
        assert int(model.state_dict()[key]) == 3


def test_rill_weights_through_safetensors_into_torch(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from rill.utils import safetensors
    x = images()
    rill.manual_seed(3)
    model = cnn(rill.nn)
    model.train()
    for _ in range(2):
        model(rill.tensor(x.numpy()))
    model.eval()
    path = safetensors.save_file(model.state_dict(), tmp_path / "rill.safetensors",
                                 metadata={"source": "rill"})
    reference = cnn(torch.nn).eval()
    reference.load_state_dict(safetensors_torch.load_file(path))
    np.testing.assert_allclose(torch_outputs(reference, x), outputs(model, x),
                               rtol=1e-5, atol=1e-6)
    with safetensors_torch.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"source": "rill"}


# ---- dtypes ------------------------------------------------------------------------------------


def _dtype_zoo():
    base = torch.linspace(-3, 3, 12).reshape(3, 4)
    return {
        "bf16": (base * 1.37).to(torch.bfloat16), "f16": (base / 7).to(torch.float16),
        "f64": base.double() / 3, "i8": torch.arange(-5, 5, dtype=torch.int8),
        "i16": torch.arange(6, dtype=torch.int16), "i32": torch.arange(6, dtype=torch.int32),
        "i64": torch.arange(6, dtype=torch.int64) * 2**40,
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }


def _same(got, want):
    assert got.dtype.name == str(want.dtype).split(".")[-1], (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    host = np.asarray(got.float().numpy() if got.dtype is rill.bfloat16 else got.numpy())
    np.testing.assert_array_equal(host, want.float().numpy() if want.dtype is torch.bfloat16
                                  else want.numpy())


def test_dtypes_views_and_parameters_from_torch_save(tmp_path):
    zoo = _dtype_zoo()
    whole = torch.arange(24.0).reshape(4, 6)
    zoo.update({"column": whole[:, 2], "transposed": whole.t(), "whole": whole,
                "param": torch.nn.Parameter(torch.ones(2, 2)),
                "nested": [whole[1], {"step": 7, "lr": 0.5, "name": "adam", "raw": b"\x00\x01"}]})
    path = tmp_path / "zoo.pt"
    torch.save(zoo, path)
    got = rill.load(path)
    for key, want in _dtype_zoo().items():
        _same(got[key], want)
    _same(got["column"], whole[:, 2])
    _same(got["transposed"], whole.t().contiguous())
    assert isinstance(got["param"], rill.nn.Parameter) and got["param"].requires_grad
    _same(got["nested"][0], whole[1])
    assert got["nested"][1] == {"step": 7, "lr": 0.5, "name": "adam", "raw": b"\x00\x01"}


def test_dtypes_through_safetensors_both_ways(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from rill.utils import safetensors
    zoo = {k: v for k, v in _dtype_zoo().items()}
    path = tmp_path / "zoo.safetensors"
    safetensors_torch.save_file(zoo, path)
    got = rill.load(path)
    assert set(got) == set(zoo)
    for key, want in zoo.items():
        _same(got[key], want)
    again = tmp_path / "again.safetensors"
    safetensors.save_file(got, again)  # rill writes them back, bfloat16 bits included
    back = safetensors_torch.load_file(again)
    for key, want in zoo.items():
        assert back[key].dtype == want.dtype and torch.equal(back[key], want), key
    nan = rill.tensor([float("nan"), 1.0], dtype=rill.bfloat16)
    safetensors.save_file({"nan": nan}, again)
    assert torch.isnan(safetensors_torch.load_file(again)["nan"][0])


# ---- hostile files -----------------------------------------------------------------------------


class _Touch:
    """Pickles as a call that would create a file."""

    def __init__(self, target, how):
        self.target, self.how = target, how

    def __reduce__(self):
        if self.how == "system":
            return os.system, (f"touch {self.target}",)
        return open, (self.target, "w")


@pytest.mark.parametrize("how,named", [("system", "system"), ("open", "open")])
def test_malicious_pickle_is_refused_and_runs_nothing(tmp_path, how, named):
    planted = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"weight": torch.ones(2), "payload": _Touch(planted, how)}, path)
    with pytest.raises(CheckpointError, match=rf"names the global \w+\.{named}\b") as e:
        rill.load(path)
    assert "weights_only" in str(e.value)
    assert not planted.exists()


def test_whole_module_pickle_is_refused(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 3), path)
    with pytest.raises(CheckpointError, match=r"torch\.nn\.modules\.linear\.Linear"):
        rill.load(path)


def _archive(path, pickled: bytes, storages=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            z.writestr(f"archive/data/{key}", data)
    return path


def _tensor_pickle(numel, size, stride, offset=0):
    """A pickle of one tensor, as torch writes it, with the layout we choose."""
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" +
            b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000"
            b"X\x03\x00\x00\x00cpu" + pickle.dumps(numel, 2)[2:-1] + b"tQ" +
            pickle.dumps(offset, 2)[2:-1] + pickle.dumps(tuple(size), 2)[2:-1] +
            pickle.dumps(tuple(stride), 2)[2:-1] + b"\x89}tR.")


def test_crafted_archives_are_refused(tmp_path):
    four = np.arange(4, dtype="<f4").tobytes()
    ok = _archive(tmp_path / "ok.pt", _tensor_pickle(4, (2, 2), (2, 1)), {"0": four})
    np.testing.assert_array_equal(rill.load(ok).numpy(), [[0, 1], [2, 3]])
    cases = {
        "claims 2**40 elements": (_tensor_pickle(2**40, (2**40,), (1,)), r"holds 16 bytes, "
                                  r"but the pickle says .* 1099511627776 elements"),
        "reaches past its storage": (_tensor_pickle(4, (3, 2), (2, 1)), "reaches past"),
        "expands past the budget": (_tensor_pickle(4, (2**45,), (0,)), "budget"),
        "missing storage": (_tensor_pickle(4, (4,), (1,)).replace(
            b"X\x01\x00\x00\x000", b"X\x01\x00\x00\x007"), "which the archive lacks"),
        "truncated pickle": (_tensor_pickle(4, (4,), (1,))[:-9], "malformed or truncated"),
        "builtin eval": (b"\x80\x02cbuiltins\neval\nX\x01\x00\x00\x001\x85R.",
                         r"names the global builtins\.eval"),
        "INST opcode": (b"(ios\nsystem\nX\x04\x00\x00\x00true.", "opcode INST"),
        "BUILD on a list": (b"\x80\x02]}X\x01\x00\x00\x00aK\x01sb.", "BUILD"),
    }
    for name, (pickled, message) in cases.items():
        path = _archive(tmp_path / "bad.pt", pickled, {"0": four})
        with pytest.raises(CheckpointError, match=message):
            rill.load(path)
    with pytest.raises(CheckpointError, match="budget"):
        rill.load(ok, max_bytes=8)


def test_truncated_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(64, 64)}, path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 100):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(CheckpointError):
            rill.load(tmp_path / "cut.pt")
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match=r"legacy format.*torch\.save\(obj, path\)"):
        rill.load(legacy)
    script = tmp_path / "script.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), script)
    with pytest.raises(CheckpointError, match="TorchScript"):
        rill.load(script)


def test_bad_safetensors_files_are_refused(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    path = tmp_path / "w.safetensors"
    safetensors_torch.save_file({"w": torch.ones(64, 64), "b": torch.ones(8)}, path)
    data = path.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:len(data) - 100])
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        rill.load(tmp_path / "cut.safetensors")
    header = b'{"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,16]}}'
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", len(header)) + header +
                                                bytes(16))
    with pytest.raises(CheckpointError):
        rill.load(tmp_path / "huge.safetensors")
    with pytest.raises(CheckpointError, match="budget"):
        rill.load(path, max_bytes=1024)
    header = b'{"u":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}}'
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    with pytest.raises(CheckpointError, match="U16, a dtype rill does not have"):
        rill.load(path)
