"""Loading a saved graph never runs code from it (issue 14, findings 1 and 2).

Each test crafts a graph document the way an attacker would (and re-seals the manifest's
checksums, since a checksum is integrity, not authentication), loads it, runs it, and checks
that the result is a rill error and that the payload's marker file was never created.
Payloads cover plain Python, quotes and newlines that break out of generated lines, dunder
names, and identifiers in Unicode letters that Python normalises (NFKC) to ASCII.
"""
from __future__ import annotations

import unicodedata

import numpy as np
import pytest

import rill
from rill.capture.executor import Program
from rill.tensor import new_tensor

from saved_graphs import edit_doc, nodes_of


def _nfkc_letters(text: str) -> str:
    """text with a-z in mathematical sans-serif letters: a different string that Python's
    parser reads as the same identifier (and that str.upper() leaves alone)."""
    out = "".join(chr(0x1D5BA + ord(c) - 97) if "a" <= c <= "z" else c for c in text)
    assert out != text and unicodedata.normalize("NFKC", out) == text
    return out


def _payloads(marker) -> list:
    touch = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    return [
        f"{touch} or 0",
        f"0]; {touch}; x = args[0",
        f"0]\n    {touch}\n    x = (args[0",
        f'0] if {touch} else args["0',
        "__class__",
        _nfkc_letters("__import__") + f"('pathlib').Path({str(marker)!r}).touch() or 0",
        f"A=__import__('pathlib').Path({str(marker)!r}).touch()",
        _nfkc_letters("alpha") + f"=__import__('pathlib').Path({str(marker)!r}).touch()",
    ]


def _saved(tmp_path, fn, *args, name="g"):
    captured = rill.capture(fn)
    captured(*args)
    captured.save(tmp_path / name)
    return tmp_path / name


def _load_and_run(path, *args):
    """Load and call; every failure must be a rill error."""
    loaded = rill.load_graph(path)
    return loaded(*args)


def _expect_refusal(path, marker, *args):
    with pytest.raises(rill.Error):
        _load_and_run(path, *args)
    assert not marker.exists(), "loading the graph ran code from it"


def _set(field):
    """An edit that puts a payload into one place of the first node of a kind."""
    def editor(op, payload):
        def edit(doc):
            node = nodes_of(doc, op)[0]
            field(node, payload)
        return edit
    return editor


PLACES = {
    "input index": ("input", _set(lambda n, p: n["attrs"].__setitem__("index", p))),
    "read var": ("read", _set(lambda n, p: n["attrs"].__setitem__("var", p))),
    "assign var": ("assign", _set(lambda n, p: n["attrs"].__setitem__("var", p))),
    "attr value": ("leaky_relu", _set(lambda n, p: n["attrs"].__setitem__("alpha", p))),
    "attr key": ("leaky_relu", _set(lambda n, p: n["attrs"].__setitem__(p, 0.5))),
    "op name": ("leaky_relu", _set(lambda n, p: n.__setitem__("op", p))),
    "device": ("leaky_relu", _set(lambda n, p: n.__setitem__("device", p))),
    "dtype": ("leaky_relu", _set(lambda n, p: n["outputs"][0].__setitem__("dtype", p))),
    "source": ("leaky_relu", _set(lambda n, p: n.__setitem__("source", p))),
}


def _stateful_step(device="cpu"):
    w = rill.ones(3, device=device)

    def step(x):
        nonlocal w
        y = rill.nn.functional.leaky_relu(x * w, 0.1)
        with rill.no_grad():
            w += 1.0
        return y
    return step


@pytest.mark.parametrize("place", sorted(PLACES))
def test_cpu_graph_with_code_in_any_field_is_refused(tmp_path, place):
    op, editor = PLACES[place]
    x = rill.tensor([-1.0, 2.0, 3.0])
    for i, payload in enumerate(_payloads(tmp_path / "MARKER")):
        path = _saved(tmp_path, _stateful_step(), x, name=f"g{i}")
        edit_doc(path, editor(op, payload))
        if place == "source":  # a source line is only text: it may load, but never runs
            try:
                _load_and_run(path, x)
            except rill.Error:
                pass
            assert not (tmp_path / "MARKER").exists()
        else:
            _expect_refusal(path, tmp_path / "MARKER", x)


def test_generated_program_holds_no_text_from_the_graph():
    """By construction: a Program's source is made of rill's own names and numbers. A string
    attr that slipped past every check reaches the kernel as a value, never as code; a graph
    op's attr of the wrong type is refused when the program is built."""
    graph = rill.capture(lambda x: rill.nn.functional.gelu(x * 2.0, approximate="tanh")
                         ).graph_for(rill.ones(2))
    (gelu,) = [n for n in graph.nodes if n.op == "gelu"]
    gelu.attrs["approximate"] = "tanh') or __import__('os').getpid() or ('"
    program = Program(graph, parallel=False)
    assert "__import__" not in program.source and "getpid" not in program.source
    assert "tanh" not in program.source
    assert "approximate=" in program.source  # a keyword as gelu declares it, value in scope
    # an attr name the primitive does not declare never becomes text: all pass as one dict
    gelu.attrs["getpid"] = 1
    program = Program(graph, parallel=False)
    assert "getpid" not in program.source and "approximate=" not in program.source
    del gelu.attrs["getpid"]
    (inp,) = [n for n in graph.nodes if n.op == "input"]
    inp.attrs["index"] = "__import__('os').getpid() and 0"
    with pytest.raises(rill.CaptureError, match="index must be an int"):
        Program(graph, parallel=False)


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device (interpreted or real)")
@pytest.mark.parametrize("place", ["attr key", "attr value", "input index"])
def test_gpu_graph_with_code_in_attrs_is_refused(tmp_path, place):
    op, editor = PLACES[place]
    x = rill.tensor([-1.0, 2.0, 3.0], device="gpu")
    for i, payload in enumerate(_payloads(tmp_path / "MARKER")):
        path = _saved(tmp_path, _stateful_step("gpu"), x, name=f"g{i}")
        edit_doc(path, editor(op, payload))
        _expect_refusal(path, tmp_path / "MARKER", x)


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device (interpreted or real)")
def test_gpu_elementwise_kernel_never_pastes_attr_keys(tmp_path):
    """The generated Triton source names its constants from rill's own table, so even a
    kernel called directly with a crafted key refuses it instead of compiling it."""
    from rill.kernels.triton.elementwise import KERNELS
    x = rill.tensor([-1.0, 2.0], device="gpu")
    buffer = x._data
    for payload in _payloads(tmp_path / "MARKER"):
        with pytest.raises(rill.Error):
            KERNELS["leaky_relu"](buffer, **{payload: 0.5})
    assert not (tmp_path / "MARKER").exists()
    out = new_tensor(KERNELS["leaky_relu"](buffer, alpha=0.5), rill.float32, x.device)
    np.testing.assert_allclose(out.numpy(), [-0.5, 2.0])
