"""scaled_dot_product_attention as the fused primitive `attention` (and `attention_grad`):
forward and q/k/v gradients against torch.nn.functional.scaled_dot_product_attention, finite
differences, capture, the gpu kernels under Triton's interpreter with small tiles, the
composite fallbacks (dropout, a mask that needs a gradient), MultiheadAttention's causal
flag, and the errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
import rill.nn.functional as F
from rill.kernels.numpy import attention as cpu_attention

TF = torch.nn.functional
TOL = {np.float64: dict(rtol=1e-9, atol=1e-11), np.float32: dict(rtol=2e-4, atol=2e-5)}


def arrays(shapes, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def rill_run(qkv, cot, device="cpu", **kw):
    """(out, dq, dk, dv) of rill's attention, the gradients of sum(out * cot)."""
    ts = [rill.tensor(a, device=device, requires_grad=True) for a in qkv]
    out = F.scaled_dot_product_attention(*ts, **kw)
    (out * rill.tensor(cot, device=device)).sum().backward()
    return [out.numpy()] + [t.grad.numpy() for t in ts], out


def torch_run(qkv, cot, **kw):
    ts = [torch.tensor(a, requires_grad=True) for a in qkv]
    kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    out = TF.scaled_dot_product_attention(*ts, **kw)
    (out * torch.tensor(cot)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def assert_all_close(got, want, dtype):
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, g.dtype, w.shape)
        np.testing.assert_allclose(g, w, err_msg=name, **TOL[dtype])


CASES = [  # (q, k, v) shapes: odd lengths, T_q != T_k both ways, heads, no batch axes
    ((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)),
    ((1, 2, 9, 8), (1, 2, 4, 8), (1, 2, 4, 3)),
    ((3, 1, 1), (3, 6, 1), (3, 6, 2)),
    ((13, 16), (13, 16), (13, 16)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.37])
@pytest.mark.parametrize("shapes", CASES, ids=lambda s: "x".join(map(str, s[0])))
def test_forward_and_gradients_match_pytorch(shapes, scale, is_causal, dtype):
    *qkv, cot = arrays(list(shapes) + [shapes[0][:-1] + shapes[2][-1:]], dtype)
    got, out = rill_run(qkv, cot, is_causal=is_causal, scale=scale)
    assert out._node.prim.name == "attention"  # the fused primitive ran, not the composite
    assert_all_close(got, torch_run(qkv, cot, is_causal=is_causal, scale=scale), dtype)


@pytest.mark.parametrize("mask_shape,dtype", [((5, 7), bool), ((2, 1, 5, 7), bool),
                                              ((1, 3, 1, 7), np.float64), ((1, 7), np.float64)])
def test_masks_match_pytorch(mask_shape, dtype):
    q, k, v, cot = arrays([(2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), (2, 3, 5, 6)])
    rng = np.random.default_rng(1)
    mask = rng.random(mask_shape) < 0.7 if dtype is bool else rng.standard_normal(mask_shape)
    got, out = rill_run([q, k, v], cot, attn_mask=rill.tensor(mask))
    assert out._node.prim.name == "attention"
    assert_all_close(got, torch_run([q, k, v], cot, attn_mask=mask), np.float64)


def test_a_row_with_no_key_gives_zero_as_pytorch():
    q, k, v, cot = arrays([(1, 3, 4), (1, 5, 4), (1, 5, 2), (1, 3, 2)])
    mask = np.ones((3, 5), bool)
    mask[1] = False
    got, _ = rill_run([q, k, v], cot, attn_mask=rill.tensor(mask))
    assert np.all(got[0][0, 1] == 0) and np.all(got[1][0, 1] == 0) and np.isfinite(got[2]).all()
    assert_all_close(got, torch_run([q, k, v], cot, attn_mask=mask), np.float64)


def test_a_mask_that_needs_a_gradient_takes_the_composite():
    q, k, v, m, cot = arrays([(2, 5, 4), (2, 7, 4), (2, 7, 3), (5, 7), (2, 5, 3)])
    mask = rill.tensor(m, requires_grad=True)
    out = F.scaled_dot_product_attention(*map(rill.tensor, (q, k, v)), attn_mask=mask)
    (out * rill.tensor(cot)).sum().backward()
    tm = torch.tensor(m, requires_grad=True)
    tout = TF.scaled_dot_product_attention(*map(torch.tensor, (q, k, v)), attn_mask=tm)
    (tout * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(mask.grad.numpy(), tm.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_dropout_is_the_composite_and_drops():
    q = rill.ones(2, 6, 4)
    rill.manual_seed(0)
    out = F.scaled_dot_product_attention(q, q, rill.randn(2, 6, 4), dropout_p=0.5)
    assert out._node is None or out._node.prim.name != "attention"
    assert F.scaled_dot_product_attention(q, q, q, dropout_p=1.0).numpy().max() == 0


def test_enable_gqa_matches_pytorch():
    q, k, v, cot = arrays([(2, 6, 5, 4), (2, 2, 7, 4), (2, 2, 7, 3), (2, 6, 5, 3)])
    got, _ = rill_run([q, k, v], cot, enable_gqa=True, is_causal=True)
    assert_all_close(got, torch_run([q, k, v], cot, enable_gqa=True, is_causal=True),
                     np.float64)


def test_broadcast_batch_axes_match_pytorch():
    q, k, v, cot = arrays([(2, 3, 5, 4), (1, 3, 7, 4), (3, 7, 2), (2, 3, 5, 2)])
    assert_all_close(rill_run([q, k, v], cot)[0], torch_run([q, k, v], cot), np.float64)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gradients_match_finite_differences(is_causal):
    q, k, v, cot = arrays([(2, 4, 3), (2, 5, 3), (2, 5, 2), (2, 4, 2)], seed=3)
    mask = rill.tensor(np.random.default_rng(4).standard_normal((4, 5)))
    kw = dict(is_causal=is_causal) if is_causal else dict(attn_mask=mask)

    def loss(*xs):
        return float((F.scaled_dot_product_attention(*map(rill.tensor, xs), **kw).numpy()
                      * cot).sum())
    _, dq, dk, dv = rill_run([q, k, v], cot, **kw)[0]
    eps = 1e-6
    for i, (x, grad) in enumerate(zip((q, k, v), (dq, dk, dv))):
        for idx in [(0, 0, 0), (1, 2, 1), tuple(s - 1 for s in x.shape)]:
            up, down = [a.copy() for a in (q, k, v)], [a.copy() for a in (q, k, v)]
            up[i][idx] += eps
            down[i][idx] -= eps
            fd = (loss(*up) - loss(*down)) / (2 * eps)
            assert abs(fd - grad[idx]) < 1e-7 * max(1.0, abs(fd)), (i, idx, fd, grad[idx])


def test_second_order_gradients_match_pytorch():
    q, k, v, cot = arrays([(2, 4, 3), (2, 5, 3), (2, 5, 2), (2, 4, 2)], seed=5)

    def first(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * rill.tensor(cot)).sum()

    def second(q, k, v):
        return sum(((g * g).sum() for g in rill.grad(first, argnums=(0, 1, 2))(q, k, v)),
                   rill.tensor(0.0))
    got = rill.grad(second, argnums=(0, 1, 2))(*map(rill.tensor, (q, k, v)))
    tts = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    tout = TF.scaled_dot_product_attention(*tts, is_causal=True)
    tgrads = torch.autograd.grad((tout * torch.tensor(cot)).sum(), tts, create_graph=True)
    sum((g * g).sum() for g in tgrads).backward()
    for g, tt in zip(got, tts):
        np.testing.assert_allclose(g.numpy(), tt.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_capture_agrees_with_eager_and_holds_the_fused_nodes():
    q, k, v = (rill.tensor(a) for a in arrays([(2, 3, 9, 8), (2, 3, 11, 8), (2, 3, 11, 4)],
                                              np.float32))

    def loss(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (out * out).sum()

    def step(q, k, v):
        value, grads = rill.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)
        return (value,) + tuple(grads)

    captured = rill.capture(step)
    for want, got in zip(step(q, k, v), captured(q, k, v)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    ops = [n.op for n in captured.graph_for(q, k, v).nodes]
    assert "attention" in ops and "attention_grad" in ops and "softmax" not in ops


@pytest.mark.parametrize("is_causal", [False, True])
def test_cpu_query_blocks_agree_with_one_block(monkeypatch, is_causal):
    q, k, v, cot = arrays([(2, 37, 4), (2, 29, 4), (2, 29, 3), (2, 37, 3)], seed=6)
    whole = rill_run([q, k, v], cot, is_causal=is_causal)[0]
    monkeypatch.setattr(cpu_attention, "ROWS", 8)
    blocked = rill_run([q, k, v], cot, is_causal=is_causal)[0]
    for a, b in zip(blocked, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mask_shape", [None, (3, 1, 9, 11), (1, 2, 9, 11), (9, 11)])
def test_cpu_batch_split_over_threads_agrees(monkeypatch, mask_shape):
    from rill.kernels.numpy import parallel
    *qkv, cot = arrays([(3, 2, 9, 4), (3, 2, 11, 4), (3, 2, 11, 5), (3, 2, 9, 5)], seed=9)
    kw = {} if mask_shape is None else dict(
        attn_mask=np.random.default_rng(10).standard_normal(mask_shape))
    run_kw = {k: rill.tensor(v) for k, v in kw.items()}
    whole = rill_run(qkv, cot, is_causal=mask_shape is None, **run_kw)[0]
    monkeypatch.setattr(cpu_attention, "SPLIT_SCORES", 0)
    monkeypatch.setattr(parallel, "THREADS", 2)
    monkeypatch.setattr(parallel, "MIN_ELEMENTS", 0)
    split = rill_run(qkv, cot, is_causal=mask_shape is None, **run_kw)[0]
    for a, b in zip(split, whole):
        np.testing.assert_array_equal(a, b)
    assert_all_close(split, torch_run(qkv, cot, is_causal=mask_shape is None, **kw), np.float64)


def test_float16_computes_in_float32():
    q, k, v, cot = arrays([(2, 6, 8), (2, 6, 8), (2, 6, 8), (2, 6, 8)], np.float16)
    got, out = rill_run([q, k, v], cot, is_causal=True)
    assert out.dtype == rill.float16
    want = torch_run([a.astype(np.float32) for a in (q, k, v)], cot.astype(np.float32),
                     is_causal=True)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=1e-2, atol=2e-3)


def test_multihead_attention_causal_flag_takes_the_fused_path():
    torch.manual_seed(0)
    tmha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    mha = rill.nn.MultiheadAttention(8, 2, batch_first=True, dtype=rill.float64)
    mha.load_state_dict({n: rill.tensor(p.detach().numpy()) for n, p in tmha.state_dict().items()})
    x = arrays([(3, 6, 8)])[0]
    out, _ = mha(*(rill.tensor(x),) * 3, need_weights=False, is_causal=True)
    causal = torch.triu(torch.full((6, 6), float("-inf"), dtype=torch.float64), 1)
    want, _ = tmha(*(torch.tensor(x),) * 3, need_weights=False, attn_mask=causal,
                   is_causal=True)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


# ---- gpu kernels under Triton's interpreter (or a GPU) ------------------------------------

@pytest.fixture
def small_tiles(monkeypatch):
    """16-row and 16-key tiles: several blocks, tails and the causal loop bounds."""
    if not rill.gpu.is_available():  # pragma: no cover
        pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()))
    from rill.kernels.triton import attention as gpu_attention
    for name in ("BLOCK_M", "BLOCK_N", "BLOCK_F64"):
        monkeypatch.setattr(gpu_attention, name, 16)


GPU_CASES = [  # (shapes q, k, v, mask or None, is_causal)
    (((2, 37, 4), (2, 21, 4), (2, 21, 3)), None, True),
    (((1, 2, 21, 5), (1, 2, 37, 5), (1, 2, 37, 17)), None, True),
    (((2, 3, 19, 4), (2, 3, 18, 4), (2, 3, 18, 4)), (2, 1, 19, 18), False),  # key padding
    (((2, 3, 19, 4), (2, 3, 18, 4), (2, 3, 18, 4)), (19, 18), False),
    (((2, 3, 2, 5, 4), (2, 3, 2, 6, 4), (2, 3, 2, 6, 4)), (2, 1, 2, 5, 6), False),  # copied
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes,mask_shape,is_causal", GPU_CASES)
def test_gpu_matches_cpu(small_tiles, shapes, mask_shape, is_causal, dtype):
    *qkv, cot = arrays(list(shapes) + [shapes[0][:-1] + shapes[2][-1:]], dtype, seed=7)
    kw = dict(is_causal=is_causal)
    if mask_shape is not None:
        mask = np.random.default_rng(8).random(mask_shape) < 0.8
        mask[..., 0, :] = False  # a row with no key
        kw["attn_mask"] = mask
    gpu = rill.device("gpu")

    def run(device):
        extra = {"attn_mask": rill.tensor(kw["attn_mask"], device=device)} \
            if "attn_mask" in kw else {}
        return rill_run(qkv, cot, device=device, is_causal=is_causal, **extra)
    got, out = run(gpu)
    assert out._node.prim.name == "attention" and out.device == gpu
    want, _ = run("cpu")
    assert_all_close(got, want, dtype)
    assert_all_close(want, torch_run(qkv, cot, **kw), dtype)


# ---- errors ----------------------------------------------------------------------------------

def ones(*shape):
    return rill.ones(*shape)


@pytest.mark.parametrize("call,error,words", [
    (lambda: F.scaled_dot_product_attention(ones(2, 3, 4), ones(2, 5, 3), ones(2, 5, 3)),
     rill.ShapeError, ["(2, 3, 4)", "(2, 5, 3)"]),
    (lambda: F.scaled_dot_product_attention(ones(2, 3, 4), ones(2, 5, 4), ones(2, 6, 4)),
     rill.ShapeError, ["(2, 6, 4)"]),
    (lambda: F.scaled_dot_product_attention(ones(4), ones(4), ones(4)), rill.ShapeError,
     ["(4,)"]),
    (lambda: F.scaled_dot_product_attention(ones(2, 3, 4), ones(3, 5, 4), ones(3, 5, 4)),
     rill.ShapeError, ["(2,)", "(3,)"]),
    (lambda: F.scaled_dot_product_attention(ones(3, 4), ones(5, 4), ones(5, 4), ones(3, 4)),
     rill.ShapeError, ["(3, 4)", "(3, 5)"]),
    (lambda: F.scaled_dot_product_attention(ones(3, 4), ones(5, 4), ones(5, 4),
                                            rill.zeros(3, 5, dtype=rill.int32)),
     rill.DTypeError, ["bool or floating", "int32"]),
    (lambda: F.scaled_dot_product_attention(ones(3, 4), ones(3, 4), ones(3, 4), ones(3, 3),
                                            is_causal=True), rill.ArgumentError, ["is_causal"]),
    (lambda: F.scaled_dot_product_attention(ones(1, 6, 3, 4), ones(1, 4, 3, 4),
                                            ones(1, 4, 3, 4), enable_gqa=True),
     rill.ShapeError, ["multiple", "6", "4"]),
    (lambda: F.scaled_dot_product_attention(ones(3, 4), ones(3, 4), ones(3, 4), dropout_p=1.5),
     rill.ArgumentError, ["dropout_p"]),
    (lambda: F.scaled_dot_product_attention(ones(3, 4), ones(3, 4), ones(3, 4), scale="a"),
     rill.ArgumentError, ["scale"]),
])
def test_bad_input_raises_a_rill_error(call, error, words):
    with pytest.raises(error, match="scaled_dot_product_attention") as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_the_primitive_checks_its_own_inputs():
    from rill.ops.attention import attention
    with pytest.raises(rill.ShapeError, match="attention.*same leading axes"):
        attention(ones(2, 3, 4), ones(3, 5, 4), ones(3, 5, 4), scale=1.0, is_causal=False)
    with pytest.raises(rill.ShapeError, match="attention.*mask"):
        attention(ones(2, 3, 4), ones(2, 5, 4), ones(2, 5, 4), ones(4, 5), scale=1.0,
                  is_causal=False)
    with pytest.raises(rill.ArgumentError, match="attention.*scale"):
        attention(ones(2, 3, 4), ones(2, 5, 4), ones(2, 5, 4), scale="x", is_causal=False)


_COMPILE_SCRIPT = r'''
import inspect
import numpy as np
import rill.gpu

class _HostBackend:  # enough of a backend to import the kernels without CuPy or a GPU
    xp = np
    interpreted = False

rill.gpu.backend = lambda: _HostBackend()
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from rill.kernels.triton import attention

def build(fn, data, meta):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: "constexpr" if n in meta else data.get(n, "fp32" if n == "scale" else "i32")
           for n in names}
    src = triton.compiler.ASTSource(fn, sig, constexprs={(names.index(k),): v
                                                         for k, v in meta.items()})
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))

for dt, acc, block, kernels in [
        ("fp32", tl.float32, 64, ("_forward_kernel", "_dq_kernel", "_dkdv_kernel")),
        ("fp64", tl.float64, 16, ("_dkdv_kernel",))]:
    data = {n: "*" + dt for n in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "g_ptr",
                                  "dq_ptr", "dk_ptr", "dv_ptr", "lse_ptr", "rowdot_ptr")}
    meta = dict(HAS_MASK=True, CAUSAL=True, FMA=dt == "fp64", PRECISION="ieee", ACC=acc,
                BLOCK_M=block, BLOCK_N=block, BLOCK_E=64, BLOCK_EV=32)
    for name in kernels:
        build(getattr(attention, name), data, meta)
print("compiled")
'''


def test_kernels_compile_for_a_real_gpu():
    """The interpreter never runs Triton's compiler: compile the tl.dot (float32) kernels
    and the float64 multiply-and-sum path for sm_90 (no GPU needed; Triton caches them)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ("RILL_TRITON_INTERPRET", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
