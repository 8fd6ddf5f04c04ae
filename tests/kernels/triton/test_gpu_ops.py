"""The op table on the gpu device: every result equals the CPU result within the dtype's
tolerance, gradients included, and a captured graph on the gpu equals eager on the gpu.

Without a GPU these run the Triton kernels through Triton's interpreter
(RILL_TRITON_INTERPRET=1, set by conftest), on the table's tiny shapes.
"""
from __future__ import annotations

import numpy as np
import pytest

import rill

from op_cases import CASES, as_tuple, cotangents_for, diff_positions, is_float, make_inputs

if not rill.gpu.is_available():  # pragma: no cover - CI has Triton and the interpreter
    pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()), allow_module_level=True)

GPU = rill.device("gpu")
TOLERANCE = {"float64": (1e-9, 1e-12), "float32": (1e-5, 1e-6)}


def on(device, arrays, dtype=None):
    return [rill.tensor(a, dtype=dtype if is_float(a) else None, device=device) for a in arrays]


def assert_close(got, expected, dtype, what):
    got, expected = as_tuple(got), as_tuple(expected)
    assert len(got) == len(expected), what
    rtol, atol = TOLERANCE[dtype]
    for g, e in zip(got, expected):
        assert g.device == GPU, f"{what}: result on {g.device}"
        assert (g.shape, g.dtype) == (e.shape, e.dtype), f"{what}: {g.dtype}{g.shape}"
        if e.dtype.is_floating:
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=rtol, atol=atol, err_msg=what)
        else:
            np.testing.assert_array_equal(g.numpy(), e.numpy(), err_msg=what)


_REFUSED: dict = {}


def refused(op, case) -> str | None:
    """Why the gpu refuses a row, or None when it runs it: a CPU-only primitive (a LAPACK
    factorization, an fft: declared `cpu_only`) with no composite for other devices, or a
    complex value (complex buffers are CPU-only). A refusal must be the documented
    DeviceError naming the reason."""
    key = (op.name, case)
    if key not in _REFUSED:
        from rill.ops.primitive import PRIMITIVES
        arrays = make_inputs(op, op.shapes[case])
        with rill.profiler.profile() as prof:
            op.fn(*on("cpu", arrays))
        names = [e.name for e in prof.events()
                 if e.name in PRIMITIVES and PRIMITIVES[e.name].cpu_only is not None]
        try:
            with rill.profiler.profile() as gpu_prof:
                op.fn(*on(GPU, arrays))
            _REFUSED[key] = None
        except rill.DeviceError as e:
            if names:
                _REFUSED[key] = names[0]
            elif "complex tensors are CPU-only" in str(e):
                _REFUSED[key] = "complex"
            else:
                raise
        # A CPU fast path (the fused batch norm, the LSTM cell) may leave the gpu a composite
        # of other ops, but the CPU-only primitive itself must never run there.
        ran = [e.name for e in gpu_prof.events()] if _REFUSED[key] is None else []
        assert not set(names) & set(ran), f"{op}: {names[0]} ran on the gpu"
    return _REFUSED[key]


def refuses_on_gpu(op, case, arrays, dtype=None) -> bool:
    """For a CPU-only row: check the gpu refuses it with a DeviceError and say so."""
    if refused(op, case) is None:
        return False
    with pytest.raises(rill.DeviceError):
        op.fn(*on(GPU, arrays, dtype))
    return True


@pytest.mark.parametrize("op,case", CASES)
def test_gpu_forward_matches_cpu(op, case):
    arrays = make_inputs(op, op.shapes[case])
    if refuses_on_gpu(op, case, arrays):
        return
    assert_close(op.fn(*on(GPU, arrays)), op.fn(*on("cpu", arrays)), "float64", f"{op}")


@pytest.mark.parametrize("op,case", [c for c in CASES if "float32" in c.values[0].dtypes])
def test_gpu_forward_in_float32_matches_cpu(op, case):
    arrays = make_inputs(op, op.shapes[case])
    if refuses_on_gpu(op, case, arrays, "float32"):
        return
    assert_close(op.fn(*on(GPU, arrays, "float32")), op.fn(*on("cpu", arrays, "float32")),
                 "float32", f"{op} float32")


def _gradients(op, arrays, device):
    positions = diff_positions(op, arrays)
    cots = cotangents_for(as_tuple(op.fn(*on("cpu", arrays))))

    def loss(*xs):
        full = on(device, arrays)
        for p, x in zip(positions, xs):
            full[p] = x
        total = None
        for o, c in zip(as_tuple(op.fn(*full)), cots):
            if c is not None:
                term = (o * rill.tensor(c, device=device)).sum()
                total = term if total is None else total + term
        return total

    inputs = [rill.tensor(arrays[p], device=device) for p in positions]
    return rill.grad(loss, argnums=tuple(range(len(positions))))(*inputs)


@pytest.mark.parametrize("op,case", [c for c in CASES if c.values[0].grad])
def test_gpu_gradient_matches_cpu(op, case):
    arrays = make_inputs(op, op.shapes[case])
    if not diff_positions(op, arrays):
        pytest.skip("no float input to differentiate")
    if refused(op, case):
        pytest.skip(f"CPU-only ({refused(op, case)}): the forward test checks the refusal")
    assert_close(_gradients(op, arrays, GPU), _gradients(op, arrays, "cpu"), "float64",
                 f"{op} gradient")


@pytest.mark.parametrize("op,case", [c for c in CASES if c.values[1] == 0])
def test_gpu_captured_matches_gpu_eager(op, case):
    arrays = make_inputs(op, op.shapes[case])
    if refused(op, case):
        pytest.skip(f"CPU-only ({refused(op, case)}): the forward test checks the refusal")
    eager = as_tuple(op.fn(*on(GPU, arrays)))
    captured = as_tuple(rill.capture(lambda *xs: op.fn(*xs), name=op.name)(*on(GPU, arrays)))
    for c, e in zip(captured, eager):
        assert c.device == GPU and (c.shape, c.dtype) == (e.shape, e.dtype), f"{op}"
        np.testing.assert_array_equal(c.numpy(), e.numpy(), err_msg=f"{op}")


def test_every_primitive_has_a_gpu_kernel():
    from rill.ops.primitive import PRIMITIVES
    missing = sorted(name for name, p in PRIMITIVES.items()
                     if "gpu" not in p.kernels and p.cpu_only is None)
    assert not missing, f"primitives without a gpu kernel: {missing}"
    for name, p in PRIMITIVES.items():  # CPU-only by design, and saying why
        assert p.cpu_only is None or ("gpu" not in p.kernels and len(p.cpu_only) > 10), name
