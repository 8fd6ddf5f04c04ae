"""rill.serialization: exact round trips, and every damaged file refused with CheckpointError."""
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import rill
from rill import serialization
from rill.serialization import load, save

DTYPES = [rill.bool_, rill.int8, rill.int16, rill.int32, rill.int64, rill.uint8, rill.float16,
          rill.bfloat16, rill.float32, rill.float64]


def sample(dtype, shape, rng):
    """Values that use the whole range of the dtype (sign bits, high bits, fractions)."""
    if dtype is rill.bool_:
        return rill.tensor(rng.random(shape) < 0.5)
    if dtype.is_integer:
        info = np.iinfo(dtype.storage)
        return rill.tensor(rng.integers(info.min, info.max, size=shape, endpoint=True,
                                        dtype=dtype.storage), dtype=dtype)
    return rill.tensor(rng.standard_normal(shape) * 1e3, dtype=dtype)


def same(a, b):
    assert isinstance(b, rill.Tensor)
    assert a.dtype is b.dtype and a.shape == b.shape and str(b.device) == "cpu"
    # Bit for bit: compares NaNs and signed zeros too.
    x, y = np.asarray(a.numpy()), np.asarray(b.numpy())
    assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)], ids=str)
def test_round_trip_every_dtype_and_shape(tmp_path, rng, dtype, shape):
    t = sample(dtype, shape, rng)
    same(t, load(save(t, tmp_path / "t.rill")))


def test_floats_keep_nan_inf_and_signed_zero(tmp_path):
    for dtype in rill.dtypes.FLOATING:
        t = rill.tensor([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5], dtype=dtype)
        back = load(save(t, tmp_path / "f.rill"))
        same(t, back)
        assert np.signbit(back.numpy()[3]) and np.isnan(back.numpy()[0])


def test_bfloat16_is_stored_as_two_bytes(tmp_path):
    t = rill.tensor(np.linspace(-3, 3, 1000), dtype=rill.bfloat16)
    small = os.path.getsize(save(t, tmp_path / "a.rill"))
    big = os.path.getsize(save(t.to(rill.float32), tmp_path / "b.rill"))
    assert big - small >= 1900


def test_nested_structure_round_trip(tmp_path, rng):
    state = {
        "model": {"layer.weight": sample(rill.float32, (3, 4), rng),
                  "layer.bias": sample(rill.bfloat16, (4,), rng)},
        "optimizer": {"state": {0: {"m": sample(rill.float64, (2,), rng)}},
                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "nesterov": False}]},
        "step": 12345678901234,
        "name": "run-ü",
        "nothing": None,
        "weird": [float("nan"), float("inf"), -float("inf"), 1e-300, [], {}, ()],
        "scalar": rill.tensor(3, dtype=rill.int8),
    }
    back = load(save(state, tmp_path / "s.rill"))
    assert list(back) == list(state)
    same(state["model"]["layer.weight"], back["model"]["layer.weight"])
    same(state["model"]["layer.bias"], back["model"]["layer.bias"])
    same(state["optimizer"]["state"][0]["m"], back["optimizer"]["state"][0]["m"])
    assert list(back["optimizer"]["state"]) == [0]  # int keys stay ints
    assert back["optimizer"]["param_groups"] == [{"lr": 0.1, "betas": (0.9, 0.999),
                                                  "nesterov": False}]
    assert back["step"] == 12345678901234 and back["name"] == "run-ü" and back["nothing"] is None
    weird = back["weird"]
    assert np.isnan(weird[0]) and weird[1:] == [float("inf"), -float("inf"), 1e-300, [], {}, ()]
    assert type(weird[6]) is tuple
    same(state["scalar"], back["scalar"])


def test_scalars_alone_and_requires_grad(tmp_path):
    for value in (0, -1, 2.5, True, None, "x", [], {}):
        loaded = load(save(value, tmp_path / "v.rill"))
        assert loaded == value and type(loaded) is type(value)
    w = rill.nn.Parameter(rill.ones(2))
    back = load(save({"w": w, "c": rill.ones(2)}, tmp_path / "p.rill"))
    assert back["w"].requires_grad and back["w"].is_leaf and not back["c"].requires_grad


def test_sparse_rows_round_trip(tmp_path):
    g = rill.SparseRows(rill.tensor([1, 3]), rill.ones(2, 4), (5, 4))
    back = load(save({"g": g}, tmp_path / "g.rill"))["g"]
    assert isinstance(back, rill.SparseRows) and back.shape == (5, 4)
    same(g.to_dense(), back.to_dense())


def test_load_onto_a_device(tmp_path):
    back = load(save(rill.ones(2), tmp_path / "d.rill"), device="cpu:1")
    assert str(back.device) == "cpu:1"


def test_unsavable_values_name_where_they_are(tmp_path):
    with pytest.raises(rill.CheckpointError, match=r"numpy\.ndarray at 'model\.w'.*rill\.tensor"):
        save({"model": {"w": np.ones(2)}}, tmp_path / "x.rill")
    with pytest.raises(rill.CheckpointError, match="dict key of type tuple"):
        save({(1, 2): 3}, tmp_path / "x.rill")
    assert not os.listdir(tmp_path)  # nothing written, not even a temp file


def test_file_layout_matches_the_documented_header(tmp_path):
    path = save({"a": rill.ones(3), "b": rill.zeros(2, dtype=rill.int8)}, tmp_path / "l.rill")
    raw = Path(path).read_bytes()
    assert raw[:5] == b"RILL\x00"
    version, length, crc = struct.unpack("<HxQI", raw[5:20])
    assert version == serialization.VERSION
    manifest = json.loads(raw[24:24 + length])
    assert zlib.crc32(raw[24:24 + length]) == crc
    assert manifest["format"] == "rill" and manifest["version"] == 1
    a, b = manifest["tensors"]
    assert (a["name"], a["shape"], a["dtype"], a["length"]) == ("a", [3], "float32", 12)
    assert (b["name"], b["dtype"], b["length"]) == ("b", "int8", 2)
    start = -(-(24 + length) // 64) * 64
    assert a["offset"] % 64 == 0 and b["offset"] % 64 == 0
    data = raw[start + a["offset"]:start + a["offset"] + 12]
    assert np.frombuffer(data, "<f4").tolist() == [1.0, 1.0, 1.0]
    assert f"{zlib.crc32(data):08x}" == a["crc32"]
    assert len(raw) == start + manifest["data_length"]


# ---- damaged files ----------------------------------------------------------------------------


@pytest.fixture
def good(tmp_path):
    state = {"w": rill.arange(40, dtype=rill.float32).reshape(5, 8), "b": rill.ones(3),
             "step": 3}
    return save(state, tmp_path / "good.rill")


def refused(path, match):
    with pytest.raises(rill.CheckpointError, match=match) as info:
        load(path)
    assert os.fspath(path) in str(info.value)  # names the file
    return str(info.value)


def rewrite(path, data):
    with open(path, "wb") as f:
        f.write(data)


def test_missing_file(tmp_path):
    refused(tmp_path / "nope.rill", "no such file")


def test_truncated_at_every_kind_of_cut_point(good):
    raw = Path(good).read_bytes()
    for cut in [0, 3, 5, 12, 23, 24, 40, len(raw) // 2, len(raw) - 64, len(raw) - 1]:
        rewrite(good, raw[:cut])
        refused(good, "truncated|not a rill file")
    rewrite(good, raw + b"\x00")
    refused(good, "unexpected bytes")


def test_every_single_byte_flip_is_caught(good):
    raw = Path(good).read_bytes()
    # Every byte of this small file: header, manifest, padding and data. Patched in place:
    # rewriting a file from scratch 600 times is slow on ext4, which flushes on truncation.
    with open(good, "r+b", buffering=0) as f:
        for i in range(len(raw)):
            f.seek(i)
            f.write(bytes([raw[i] ^ 0x10]))
            with pytest.raises(rill.CheckpointError):
                load(good)
            f.seek(i)
            f.write(raw[i:i + 1])
    load(good)  # and the file is whole again


def test_flipped_byte_in_data_names_the_tensor(good):
    raw = bytearray(Path(good).read_bytes())
    raw[-1] ^= 1  # inside 'b', the last buffer
    rewrite(good, bytes(raw))
    refused(good, r"tensor 'b' \(float32 \(3,\)\) fails its CRC-32")


def test_flipped_byte_in_manifest(good):
    raw = bytearray(Path(good).read_bytes())
    raw[30] ^= 1
    rewrite(good, bytes(raw))
    refused(good, "manifest is corrupted")


def test_wrong_magic(good, tmp_path):
    raw = Path(good).read_bytes()
    rewrite(good, b"PK\x03\x04" + raw[4:])
    refused(good, "not a rill file")
    text = tmp_path / "notes.rill"
    text.write_text("hello")
    refused(text, "not a rill file")


def test_version_mismatch_is_reported_as_such(good):
    raw = Path(good).read_bytes()
    magic, version, length, crc = struct.unpack("<5sHxQI", raw[:20])
    head = struct.pack("<5sHxQI", magic, version + 1, length, crc)
    rewrite(good, head + struct.pack("<I", zlib.crc32(head)) + raw[24:])
    refused(good, "format version 2 is newer")


def test_manifest_lying_about_lengths_is_refused(good):
    raw = Path(good).read_bytes()
    length = struct.unpack("<Q", raw[8:16])[0]
    manifest = json.loads(raw[24:24 + length])
    manifest["tensors"][0]["shape"] = [6, 8]  # more elements than the bytes it claims
    text = json.dumps(manifest, separators=(",", ":")).encode().ljust(length)
    head = struct.pack("<5sHxQI", b"RILL\x00", 1, length, zlib.crc32(text))
    rewrite(good, head + struct.pack("<I", zlib.crc32(head)) + text + raw[24 + length:])
    refused(good, "manifest entry of tensor 0 is malformed")


# ---- atomic writes ------------------------------------------------------------------------------


def test_overwrite_is_atomic_when_the_write_fails_midway(tmp_path, monkeypatch):
    path = save({"w": rill.zeros(1000)}, tmp_path / "a.rill")
    real_open = open

    class HalfWritten:
        """A file that dies after half of what a save writes."""

        def __init__(self, *args):
            self.f, self.budget = real_open(*args), 2000

        def write(self, data):
            n = memoryview(data).nbytes
            if n > self.budget:
                self.f.write(bytes(memoryview(data).cast("B")[:self.budget]))
                raise OSError(28, "No space left on device")
            self.budget -= n
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(serialization, "open", HalfWritten, raising=False)
    with pytest.raises(rill.CheckpointError, match="cannot write: No space left"):
        save({"w": rill.ones(1000)}, path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["a.rill"]  # the temp file is gone
    assert load(path)["w"].numpy().sum() == 0  # and the old file is intact


def test_temp_file_is_in_the_same_directory_with_a_distinct_name(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def replace(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src)))
        return real_replace(src, dst)

    monkeypatch.setattr(serialization.os, "replace", replace)
    save(rill.ones(1), tmp_path / "x.rill")
    (directory, name), = seen
    assert directory == str(tmp_path)
    assert name.startswith(".x.rill.") and name.endswith(serialization.TEMP_SUFFIX)


def test_a_structure_that_contains_itself_is_refused(tmp_path):
    d = {"w": rill.ones(2)}
    d["again"] = d
    with pytest.raises(rill.CheckpointError, match="contains itself"):
        rill.serialization.save(d, tmp_path / "x.rill")
    shared = [rill.ones(1)]  # the same list twice is not a cycle
    rill.serialization.save({"a": shared, "b": shared}, tmp_path / "y.rill")
    assert rill.serialization.load(tmp_path / "y.rill")["b"][0].tolist() == [1.0]
