"""The gpu device itself: buffers, copies, memory accounting and its cap, synchronize, and
the error for a primitive without a gpu kernel. (Kernels: test_gpu_ops.py and the
test_gpu_<family>.py files.)"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import rill

if not rill.gpu.is_available():  # pragma: no cover
    pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()), allow_module_level=True)


def test_round_trip_keeps_values_and_dtypes():
    for dtype in ("float64", "float32", "float16", "int64", "int8", "uint8", "bool"):
        host = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
        t = rill.tensor(host, device="gpu")
        assert t.device == rill.device("gpu:0") and str(t.dtype) == dtype
        np.testing.assert_array_equal(t.numpy(), host)
        np.testing.assert_array_equal(t.to("cpu").numpy(), host)
        assert t.to("cpu").device == rill.device("cpu")


def test_numpy_is_a_host_copy_not_the_device_buffer():
    t = rill.zeros(3, device="gpu")
    host = np.array(t.numpy())
    host[0] = 5
    assert t.tolist() == [0.0, 0.0, 0.0]


def test_bfloat16_on_gpu_rounds_like_cpu():
    values = np.array([1.00390625, 1.01171875, 3.14159, -2.5, 1e-3], dtype=np.float32)
    gpu = rill.tensor(values, dtype=rill.bfloat16, device="gpu") * 1.5
    cpu = rill.tensor(values, dtype=rill.bfloat16) * 1.5
    assert gpu.dtype is rill.bfloat16
    np.testing.assert_array_equal(gpu.numpy(), cpu.numpy())


def test_mixing_devices_is_an_error_naming_both():
    with pytest.raises(rill.DeviceError, match="gpu:0 and cpu"):
        rill.ones(3, device="gpu") + rill.ones(3)


def test_memory_stats_follow_live_tensors():
    before = rill.gpu.memory_stats()
    t = rill.empty((256, 256), device="gpu")  # 256 KiB of float32
    during = rill.gpu.memory_stats()
    assert during["in_use_bytes"] >= before["in_use_bytes"] + 256 * 256 * 4
    assert during["held_bytes"] >= during["in_use_bytes"]
    del t
    if rill.gpu.interpreted():
        assert rill.gpu.memory_stats()["in_use_bytes"] == before["in_use_bytes"]


def test_memory_limit_refuses_growth_past_the_cap():
    stats = rill.gpu.memory_stats()
    rill.gpu.set_memory_limit(stats["in_use_bytes"] + (1 << 20))
    try:
        small = rill.zeros(1000, device="gpu")  # well under the cap
        with pytest.raises(rill.DeviceError, match=r"out of gpu memory.*limit"):
            rill.zeros((1024, 1024), device="gpu")  # 4 MiB
        assert small.sum().item() == 0
    finally:
        rill.gpu.set_memory_limit(stats["limit_bytes"])


def test_memory_limit_from_the_environment():
    code = ("import rill\n"
            "print(rill.gpu.memory_stats()['limit_bytes'])\n"
            "try:\n    rill.zeros((1024, 1024), device='gpu')\n"
            "except rill.DeviceError as e:\n    print(e)\n")
    env = dict(os.environ, RILL_GPU_MEMORY_LIMIT="2M")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    limit, message = out.stdout.splitlines()[:2]
    assert limit == str(2 << 20)
    assert "out of gpu memory" in message and "2,097,152" in message


def test_synchronize_and_availability():
    assert rill.gpu.is_available()
    rill.gpu.synchronize()  # nothing queued: returns at once
    assert rill.gpu.missing_parts() == []


def test_a_primitive_without_a_gpu_kernel_is_named_not_run_on_the_host():
    from rill.ops.primitive import PRIMITIVES
    prim = PRIMITIVES["exp"]
    kernel = prim.kernels.pop("gpu")
    try:
        with pytest.raises(rill.DeviceError, match=r"^exp: no gpu kernel"):
            rill.exp(rill.ones(2, device="gpu"))
    finally:
        prim.kernels["gpu"] = kernel


def test_captured_graph_runs_on_gpu():
    @rill.capture
    def f(x, y):
        return (rill.tanh(x) * y + 1.0).sum(axis=1)

    x = rill.tensor(np.linspace(-1, 1, 12).reshape(3, 4), device="gpu")
    y = rill.tensor(np.arange(4.0), device="gpu")
    out = f(x, y)
    assert out.device == rill.device("gpu")
    expected = (np.tanh(np.linspace(-1, 1, 12).reshape(3, 4)) * np.arange(4.0) + 1).sum(1)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_a_kernel_launched_with_a_runtime_python_float_is_refused():
    """Compiled Triton passes a Python float argument as float32 (the interpreter keeps
    float64): rill's launcher refuses one in either mode, and takes it as a constexpr."""
    from rill.kernels.triton.launch import empty, jit, pointer, tl

    def scale_kernel(x_ptr, out_ptr, n, factor, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * FACTOR, mask=mask)

    kernel = jit(scale_kernel)
    x = rill.gpu.backend().from_host(np.arange(4, dtype=np.float64) + 0.1, None)
    out = empty((4,), np.float64)
    with pytest.raises(TypeError, match="factor=0.1 would reach the compiled kernel as float32"):
        kernel[(1,)](pointer(x), pointer(out), 4, 0.1, FACTOR=0.1, BLOCK=4)
    with pytest.raises(TypeError, match="factor"):
        kernel[(1,)](pointer(x), pointer(out), 4, factor=0.1, FACTOR=0.1, BLOCK=4)
    kernel[(1,)](pointer(x), pointer(out), 4, 1, FACTOR=0.1, BLOCK=4)  # constexpr: fine
    host = rill.gpu.backend().to_host(out)
    np.testing.assert_array_equal(host, (np.arange(4) + 0.1) * 0.1)
