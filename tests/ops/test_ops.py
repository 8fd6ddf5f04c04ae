"""Every primitive, by the table in ops_table.py: forward against NumPy float64, gradients
against central finite differences and against PyTorch, forward in lower precisions, and
(through RILL_CHECK_KERNELS, set in conftest) the inferred shape/dtype against every kernel
result."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill.eager import interpreter
from rill.eager.context import use_interpreter
from rill.eager.wrapping import WrappingInterpreter

from op_cases import (CASES, OPS, TOLERANCE, as_tuple, cotangents_for, diff_positions,
                      is_float, make_inputs, rill_inputs, scalar_loss)


def test_kernel_results_are_checked_against_rules():
    # conftest turns this on, so every op in this suite validates infer() against its kernel.
    assert interpreter.CHECK_KERNELS


@pytest.mark.parametrize("op,case", CASES)
def test_forward_matches_numpy_float64(op, case):
    arrays = make_inputs(op, op.shapes[case])
    outs = as_tuple(op.fn(*rill_inputs(arrays)))
    expected = as_tuple(op.ref(*arrays))
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        e = np.asarray(e)
        assert o.shape == e.shape, f"{op}: shape {o.shape} != {e.shape}"
        if e.dtype.kind == "f":
            assert o.dtype is rill.float64
            np.testing.assert_allclose(o.numpy(), e, rtol=op.rtol, atol=1e-12)
        else:
            np.testing.assert_array_equal(o.numpy(), e)


def _grads(op, arrays, positions, cots):
    def loss(*xs):
        full = list(rill_inputs(arrays))
        for p, x in zip(positions, xs):
            full[p] = x
        return scalar_loss(as_tuple(op.fn(*full)), cots)
    return loss


def _diff_cases():
    return [c for c in CASES if c.values[0].grad]


@pytest.mark.parametrize("op,case", _diff_cases())
def test_gradient_matches_finite_differences(op, case):
    arrays = make_inputs(op, op.shapes[case])
    positions = diff_positions(op, arrays)
    cots = cotangents_for(as_tuple(op.fn(*rill_inputs(arrays))))
    loss = _grads(op, arrays, positions, cots)
    grads = rill.grad(loss, argnums=tuple(range(len(positions))))(
        *[rill.tensor(arrays[p]) for p in positions])
    eps = 1e-6
    for g, p in zip(grads, positions):
        numeric = np.zeros_like(arrays[p])
        for idx in np.ndindex(arrays[p].shape):
            values = []
            for sign in (1, -1):
                shifted = [rill.tensor(arrays[q]) for q in positions]
                bumped = arrays[p].copy()
                bumped[idx] += sign * eps
                shifted[positions.index(p)] = rill.tensor(bumped)
                with rill.no_grad():
                    values.append(float(loss(*shifted)))
            numeric[idx] = (values[0] - values[1]) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g), numeric, rtol=op.fd_rtol, atol=1e-6,
                                   err_msg=f"{op}: input {p}")


@pytest.mark.parametrize("op,case", [c for c in _diff_cases() if c.values[0].torch_fn])
def test_gradient_matches_pytorch(op, case):
    arrays = make_inputs(op, op.shapes[case])
    positions = diff_positions(op, arrays)
    cots = cotangents_for(as_tuple(op.fn(*rill_inputs(arrays))))
    grads = rill.grad(_grads(op, arrays, positions, cots), argnums=tuple(range(len(positions))))(
        *[rill.tensor(arrays[p]) for p in positions])

    tin = [torch.tensor(a, requires_grad=i in positions) for i, a in enumerate(arrays)]
    touts = as_tuple(op.torch_fn(*tin))
    tloss = sum((o * torch.tensor(c)).sum() for o, c in zip(touts, cots) if c is not None)
    tgrads = torch.autograd.grad(tloss, [tin[p] for p in positions], allow_unused=True)
    for g, tg, p in zip(grads, tgrads, positions):
        expected = np.zeros(arrays[p].shape) if tg is None else tg.numpy()
        np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-8, atol=1e-10,
                                   err_msg=f"{op}: input {p}")


def _assert_bit_equal(got, expected, what):
    assert len(got) == len(expected), what
    for g, e in zip(got, expected):
        assert (g.shape, g.dtype) == (e.shape, e.dtype), f"{what}: {g.dtype}{g.shape}"
        np.testing.assert_array_equal(g.numpy(), e.numpy(), err_msg=what)


@pytest.mark.parametrize("op,case", CASES)
def test_captured_matches_eager(op, case):
    # The compiled graph runs the same kernels on the same inputs: bit-equal on the CPU.
    arrays = make_inputs(op, op.shapes[case])
    eager = as_tuple(op.fn(*rill_inputs(arrays)))
    captured = rill.capture(lambda *xs: op.fn(*xs), name=op.name)
    _assert_bit_equal(as_tuple(captured(*rill_inputs(arrays))), eager, f"{op}")
    _assert_bit_equal(as_tuple(captured(*rill_inputs(arrays))), eager, f"{op}, second call")


@pytest.mark.parametrize("op,case", _diff_cases())
def test_captured_gradient_matches_eager(op, case):
    # rill.grad inside a capture adds the gradient nodes, built by the same rules.
    arrays = make_inputs(op, op.shapes[case])
    positions = diff_positions(op, arrays)
    cots = cotangents_for(as_tuple(op.fn(*rill_inputs(arrays))))
    grad_fn = rill.grad(_grads(op, arrays, positions, cots), argnums=tuple(range(len(positions))))
    inputs = [rill.tensor(arrays[p]) for p in positions]
    eager = as_tuple(grad_fn(*inputs))
    captured = rill.capture(lambda *xs: grad_fn(*xs), name=f"grad_{op.name}")
    _assert_bit_equal(as_tuple(captured(*inputs)), eager, f"{op} gradient")


@pytest.mark.parametrize("op,dtype", [pytest.param(op, d, id=f"{op.name}-{d}")
                                      for op in OPS for d in op.dtypes])
def test_forward_in_lower_precision(op, dtype):
    arrays = make_inputs(op, op.shapes[0])
    tensors = rill_inputs(arrays, dtype)
    # The reference sees exactly the rounded inputs the op saw.
    rounded = [t.numpy().astype(np.float64) if is_float(a) else a for t, a in zip(tensors, arrays)]
    outs = as_tuple(op.fn(*tensors))
    expected = as_tuple(op.ref(*rounded))
    rtol, atol = TOLERANCE[dtype]
    for o, e in zip(outs, expected):
        e = np.asarray(e)
        assert o.shape == e.shape
        if e.dtype.kind == "f":
            assert o.dtype is getattr(rill, dtype), f"{op}: {o.dtype}"
            np.testing.assert_allclose(o.numpy().astype(np.float64), e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(o.numpy(), e)


def test_table_covers_every_primitive():
    from rill.ops.primitive import PRIMITIVES
    exercised = set()

    class Spy(WrappingInterpreter):  # every op binds through it (the compiled bind too)
        def apply(self, prim, *rest):
            exercised.add(prim.name)
            return self.inner.apply(prim, *rest)

    with use_interpreter(Spy(interpreter.EAGER)):
        for op in OPS:
            for shapes in op.shapes:
                arrays = make_inputs(op, shapes)
                out = as_tuple(op.fn(*rill_inputs(arrays)))
                cots = cotangents_for(out)
                if op.grad and any(c is not None for c in cots):
                    positions = diff_positions(op, arrays)
                    rill.grad(_grads(op, arrays, positions, cots),
                              argnums=tuple(range(len(positions))))(
                        *[rill.tensor(arrays[p]) for p in positions])
    creation = {"full", "empty", "arange", "linspace", "eye", "uniform", "normal", "randint",
                "to_device"}  # covered in test_tensor.py
    creation |= {"to_device_prefix",  # covered in test_sharded_embedding.py
                 "lstm_cell", "lstm_cell_grad"}  # covered in test_speed_lstm_cell.py
    # float32 through the optional oneDNN only: covered in test_lstm_onednn.py
    creation |= {"lstm_layer", "lstm_layer_grad"}
    missing = set(PRIMITIVES) - exercised - creation
    assert not missing, f"primitives missing from the op table: {sorted(missing)}"
