"""GPU linear algebra, convolution and pooling kernels on shapes the op table does not reach
(several tiles with tails, broadcast batches, transposed and reversed views, float16, split-K),
compared with the CPU kernels; and the GEMM autotuner's on-disk cache, with a fake timer."""
from __future__ import annotations

import importlib
import json
import warnings

import numpy as np
import pytest

import rill

if not rill.gpu.is_available():  # pragma: no cover
    pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()), allow_module_level=True)

rill.device("gpu")  # builds the backend, which loads the kernels

from rill.kernels.numpy import conv as cpu_conv  # noqa: E402
from rill.kernels.numpy import linalg as cpu_linalg  # noqa: E402,F401
from rill.kernels.numpy import pooling as cpu_pool  # noqa: E402
from rill.kernels.triton import conv, linalg, pooling, tuning  # noqa: E402
from rill.kernels.triton.launch import BACKEND, INTERPRET  # noqa: E402


def dev(a):
    return BACKEND.from_host(np.asarray(a), None)


def host(b):
    return BACKEND.to_host(b)


def close(got, expected, dtype=np.float64):
    got = host(got)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = {np.float64: 1e-10, np.float32: 1e-4, np.float16: 2e-2}.get(np.dtype(dtype).type, 0)
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=tol, atol=tol)


# ---- matmul / linear / einsum -------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_matmul_tiles_and_broadcast_batches(rng, dtype):
    x = rng.standard_normal((2, 1, 70, 130)).astype(dtype)
    y = rng.standard_normal((3, 130, 90)).astype(dtype)
    expected = np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(dtype)
    close(linalg._matmul(dev(x), dev(y)), expected, dtype)


def _copies(monkeypatch):
    """The copy launches contract makes (relayouts), counted."""
    made = []
    real = linalg.elementwise_launch

    def counted(name, *args, **kw):
        made.append(name)
        return real(name, *args, **kw)
    monkeypatch.setattr(linalg, "elementwise_launch", counted)
    return made


@pytest.mark.parametrize("case", ["row-major", "weight grad", "batched, B transposed",
                                  "K-contiguous"])
def test_tf32_operands_are_read_k_contiguous(rng, monkeypatch, case):
    # tf32 products read an operand whose summed axis is not innermost from a K-contiguous
    # copy (Hopper's tensor cores want both tiles so): the same products, the same bits
    monkeypatch.setattr(linalg, "ALLOW_TF32", True)
    x = dev(rng.standard_normal((2, 48, 40), dtype=np.float32))
    y = dev(rng.standard_normal((2, 40, 56), dtype=np.float32))
    run, copies_wanted = {
        "row-major": (lambda: linalg._matmul(x[0], y[0]), 1),           # B is N-contiguous
        "weight grad": (lambda: linalg._linear_weight_grad(x[0], x[1]), 2),  # g^T: both
        "batched, B transposed": (lambda: linalg._matmul(x, y.transpose(0, 2, 1)
                                                         .transpose(0, 2, 1)), 1),
        "K-contiguous": (lambda: linalg._matmul(x[0], y[0].T.copy().T), 0),
    }[case]
    as_is = host(run())  # below the thresholds: read in place
    monkeypatch.setattr(linalg, "TF32_RELAYOUT_MIN_FLOPS", 0)
    monkeypatch.setattr(linalg, "TF32_RELAYOUT_MIN_ROWS", 1)
    made = _copies(monkeypatch)
    moved = host(run())
    assert made.count("copy") == copies_wanted
    np.testing.assert_array_equal(moved, as_is)
    monkeypatch.setattr(linalg, "ALLOW_TF32", False)  # float32 "ieee": never moved
    made.clear()
    run()
    assert made == []


@pytest.mark.parametrize("captured", [False, True])
def test_bfloat16_products_are_told_their_operands_dtypes(monkeypatch, captured):
    # bfloat16 is stored as float32: the interpreter (eager, and a captured graph's
    # executor) tells a kernel that reads dtypes which operands are bfloat16, so a GPU
    # product can take its tiles in bfloat16; other products are not told anything
    from rill.ops.primitive import PRIMITIVES
    seen = []
    for name in ("matmul", "linear", "linear_weight_grad"):
        real = PRIMITIVES[name].kernels["gpu"]

        def spy(*buffers, _real=real, _name=name, **kw):
            seen.append((_name, tuple(d.name for d in kw.get("dtypes", ()))))
            return _real(*buffers, **kw)
        spy.reads_dtypes = True
        monkeypatch.setitem(PRIMITIVES[name].kernels, "gpu", spy)
    rng = np.random.default_rng(3)

    def step(x, w, y):
        h = rill.nn.functional.linear(x, w)
        return (h @ y).sum()
    for dtype in (rill.bfloat16, rill.float32):
        x, w, y = (rill.tensor(rng.standard_normal(s, dtype=np.float32), dtype=dtype,
                               device="gpu", requires_grad=True)
                   for s in [(4, 8), (6, 8), (6, 3)])
        fn = rill.capture(step) if captured else step
        seen.clear()
        loss = fn(x, w, y)
        if not captured:  # eager: the backward's weight gradient is told too
            loss.backward()
        told = dict(seen)
        want = ("bfloat16", "bfloat16") if dtype is rill.bfloat16 else ()
        assert told["linear"] == want and told["matmul"] == want, seen
        if not captured:
            assert told["linear_weight_grad"] == want, seen


def test_bfloat16_matmul_agrees_with_the_cpu(rng):
    # on a GPU the tiles go to the tensor cores in bfloat16 (exact: the values are bfloat16),
    # summed in float32: the result, rounded to bfloat16, within one rounding of the CPU's
    a = rng.standard_normal((192, 320), dtype=np.float32)
    b = rng.standard_normal((320, 160), dtype=np.float32)
    on_cpu = (rill.tensor(a, dtype=rill.bfloat16) @ rill.tensor(b, dtype=rill.bfloat16))
    on_gpu = (rill.tensor(a, dtype=rill.bfloat16, device="gpu") @
              rill.tensor(b, dtype=rill.bfloat16, device="gpu"))
    assert on_gpu.dtype is rill.bfloat16
    got, want = on_gpu.to("cpu").numpy().astype(np.float64), on_cpu.numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-2)


def test_matmul_transposed_reversed_and_broadcast_views(rng):
    x = dev(rng.standard_normal((130, 70)))
    y = dev(rng.standard_normal((90, 130)))
    xt, yt = x.T, y.T[::-1]  # (70, 130) column-major; (130, 90) with a negative stride
    expected = host(x).T @ host(y).T[::-1]
    close(linalg._matmul(xt, yt), expected)
    # A stride-0 batch axis is read in place, never copied.
    xb = BACKEND.xp.broadcast_to(xt, (4, 70, 130))
    close(linalg._matmul(xb, yt), np.broadcast_to(expected, (4, 70, 90)))


def test_matmul_vectors_and_integers(rng):
    a = rng.integers(-9, 9, (5, 40, 33)).astype(np.int32)
    b = rng.integers(-9, 9, (33,)).astype(np.int32)
    close(linalg._matmul(dev(a), dev(b)), np.matmul(a, b))
    close(linalg._matmul(dev(b), dev(a.transpose(0, 2, 1))), np.matmul(b, a.transpose(0, 2, 1)))
    u = rng.integers(0, 200, (17, 20)).astype(np.uint8)
    close(linalg._matmul(dev(u), dev(u.T)), np.matmul(u, u.T))


def test_linear_and_weight_grad(rng):
    x = rng.standard_normal((3, 50, 40))
    w = rng.standard_normal((70, 40))
    b = rng.standard_normal(70)
    close(linalg._linear(dev(x), dev(w), dev(b)), cpu_linalg._linear(x, w, b))
    close(linalg._linear(dev(x)[:, ::2], dev(w)), cpu_linalg._linear(x[:, ::2], w))
    g = rng.standard_normal((150, 70))
    xs = rng.standard_normal((150, 40))
    close(linalg._linear_weight_grad(dev(g), dev(xs)), g.T @ xs)
    g3, x3 = g.reshape(3, 50, 70), xs.reshape(3, 50, 40)  # summed over every leading axis
    close(linalg._linear_weight_grad(dev(g3), dev(x3)), g.T @ xs)
    close(linalg._linear_weight_grad(dev(g3)[:, ::2], dev(x3)[:, ::2]),
          cpu_linalg._weight_grad(g3[:, ::2], x3[:, ::2]))


def test_split_k_matches(rng, monkeypatch):
    # The GPU splits long K across programs when tiles are few; force it here.
    monkeypatch.setattr(linalg, "split_k", lambda tiles, k, bk: 3)
    monkeypatch.setattr(conv, "split_k", lambda tiles, k, bk: 3)
    g = rng.standard_normal((150, 20))
    xs = rng.standard_normal((150, 30))
    close(linalg._linear_weight_grad(dev(g), dev(xs)), g.T @ xs)
    x = rng.standard_normal((20, 30, 40))
    w = rng.standard_normal((10, 40))
    b = rng.standard_normal(10)
    close(linalg._linear(dev(x), dev(w), dev(b)), cpu_linalg._linear(x, w, b))
    xi = rng.integers(-5, 5, (6, 200)).astype(np.int64)
    close(linalg._matmul(dev(xi), dev(xi.T)), xi @ xi.T)
    x = rng.standard_normal((2, 3, 9, 11))
    gy = rng.standard_normal((2, 4, 9, 11))
    attrs = dict(kernel_size=(3, 3), stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1),
                 groups=1)
    close(conv.conv2d_weight_grad(dev(x), dev(gy), **attrs),
          cpu_conv.conv2d_weight_grad(x, gy, **attrs))


@pytest.mark.parametrize("equation,shapes", [
    ("bij,bjk->bik", [(3, 20, 30), (3, 30, 17)]),
    ("ij,kj->ik", [(40, 24), (33, 24)]),
    ("i,i->", [(50,), (50,)]),
    ("ii->i", [(9, 9)]),
    ("iij->j", [(5, 5, 7)]),
    ("ij->", [(6, 7)]),
    ("ij->ji", [(6, 7)]),
    ("ab,cd->abcd", [(2, 3), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 6)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 7, 8), (2, 3, 9, 8)]),
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 8)]),
    ("acbed,abcdf->fbe", [(2, 2, 3, 2, 3), (2, 3, 2, 3, 4)]),
    ("acbed,abcdf->ef", [(2, 2, 3, 2, 3), (2, 3, 2, 3, 4)]),  # > 3 unmergeable K axes
])
def test_einsum(rng, equation, shapes):
    from rill.ops.linalg import parse_einsum
    xs = [rng.standard_normal(s) for s in shapes]
    inputs, output = parse_einsum(equation, shapes)
    expected = np.einsum(",".join(inputs) + "->" + output, *xs)
    close(linalg._einsum(*map(dev, xs), inputs=inputs, output=output), np.asarray(expected))


def test_tf32_switch_is_off_by_default():
    assert linalg.ALLOW_TF32 is False
    assert linalg.GemmTypes(np.float32).precision == "ieee"


# ---- convolutions ------------------------------------------------------------------------

CONV_CASES = [
    dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1),
    dict(stride=(2, 1), padding=((1, 0), (2, 2)), dilation=(1, 2), groups=1),
    dict(stride=(1, 2), padding=((0, 0), (1, 1)), dilation=(2, 1), groups=3),
]


@pytest.mark.parametrize("attrs", CONV_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv2d_and_its_gradients(rng, attrs, dtype):
    x = rng.standard_normal((2, 6, 9, 11)).astype(dtype)
    w = rng.standard_normal((9, 6 // attrs["groups"], 3, 3)).astype(dtype)
    b = rng.standard_normal(9).astype(dtype)
    y = cpu_conv.conv2d(x, w, b, **attrs)
    close(conv.conv2d(dev(x), dev(w), dev(b), **attrs), y, dtype)
    g = rng.standard_normal(y.shape).astype(dtype)
    close(conv.conv2d_weight_grad(dev(x), dev(g), kernel_size=(3, 3), **attrs),
          cpu_conv.conv2d_weight_grad(x, g, kernel_size=(3, 3), **attrs), dtype)
    close(conv.conv_transpose2d(dev(g), dev(w), input_size=(9, 11), **attrs),
          cpu_conv.conv_transpose2d(g, w, input_size=(9, 11), **attrs), dtype)


def test_conv2d_float16_and_strided_input(rng):
    attrs = CONV_CASES[0]
    x = rng.standard_normal((2, 8, 9, 11)).astype(np.float16)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float16)
    xs = dev(x)[:, ::2]  # every other channel: a strided view, read in place
    close(conv.conv2d(xs, dev(w), **attrs), cpu_conv.conv2d(x[:, ::2], w, **attrs), np.float16)


# ---- pooling -----------------------------------------------------------------------------

@pytest.mark.parametrize("window", [
    dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 1)),
    dict(kernel_size=(2, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 2)),
    dict(kernel_size=(12, 12), stride=(1, 1), padding=(0, 0), dilation=(1, 1)),  # int32 taps
])
def test_max_pool_matches_cpu_exactly(rng, window):
    x = rng.standard_normal((2, 3, 13, 17))
    x[0, 0, 2, 2] = np.nan
    x[1, 1, :4, :4] = 1.0  # ties: the first maximum wins
    best, winners = cpu_pool.max_pool2d(x, **window)
    got_best, got_winners = pooling.max_pool2d(dev(x), **window)
    np.testing.assert_array_equal(host(got_best), best)
    np.testing.assert_array_equal(host(got_winners), winners)
    assert host(got_winners).dtype == winners.dtype
    g = rng.standard_normal(best.shape)
    expected = cpu_pool.max_pool2d_grad(g, winners, x.shape, **window)
    got = host(pooling.max_pool2d_grad(dev(g), dev(winners), x.shape, **window))
    np.testing.assert_array_equal(got, expected)  # same terms, same order


def test_max_pool_channel_major_input(rng):
    window = dict(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1))
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    xt = dev(x.transpose(1, 0, 2, 3).copy()).transpose(1, 0, 2, 3)
    best, winners = cpu_pool.max_pool2d(x, **window)
    got_best, got_winners = pooling.max_pool2d(xt, **window)
    np.testing.assert_array_equal(host(got_best), best)
    np.testing.assert_array_equal(host(got_winners), winners)


# ---- the autotuner's cache ---------------------------------------------------------------

def test_heuristic_blocks_are_valid():
    for path in ("dot", "fma"):
        for m, n, k in [(1, 1, 1), (70, 90, 130), (4096, 4096, 4096), (8, 100000, 3)]:
            cfg = tuning.heuristic(path, "float32", m, n, k)
            assert all(v & (v - 1) == 0 for v in cfg[:3])
            assert min(cfg[:3]) >= (16 if path == "dot" else 4)


def test_gpu_heuristic_tf32_takes_the_measured_tile(monkeypatch):
    # what a real GPU gets (under the interpreter the heuristic covers the problem instead)
    monkeypatch.setattr(tuning, "INTERPRET", False)
    monkeypatch.setattr(tuning, "sm_count", lambda: 132)
    big = tuning.heuristic("dot", "float32-tf32", 4096, 4096, 4096)
    assert big == tuning.Config(128, 256, 32, 8, 8, 3)
    assert tuning.heuristic("dot", "float32", 4096, 4096, 4096)[:3] == (128, 128, 32)
    # too few 256-row tiles to fill the GPU: the general rule (smaller tiles) stands
    for m, n in [(512, 512), (4096, 200), (64, 64)]:
        cfg = tuning.heuristic("dot", "float32-tf32", m, n, 4096)
        assert cfg == tuning.heuristic("dot", "float32", m, n, 4096)


def test_tuning_cache_write_reread_and_corrupt(tmp_path, monkeypatch):
    path = tmp_path / "gemm_tuning.json"
    cache = tuning.TuningCache(path)
    key = tuning.make_key("matmul", "float32", 70, 90, 130, device="Fake GPU")
    assert key == "Fake GPU|matmul|float32|128x128x256"
    timed = []
    fastest = tuning.DOT_CANDIDATES[3]

    def timer(fn):
        fn()
        return 1.0 if timed[-1] == fastest else 2.0

    best = tuning.tune(key, timed.append, "dot", timer=timer, cache=cache)
    assert best == fastest and timed == list(tuning.DOT_CANDIDATES)
    assert json.loads(path.read_text())["entries"][key] == list(fastest)
    # A fresh cache (as at start-up) reads it back.
    assert tuning.TuningCache(path).get(key) == fastest
    # The module reads $RILL_CACHE_DIR when imported.
    monkeypatch.setenv("RILL_CACHE_DIR", str(tmp_path))
    fresh = importlib.reload(tuning)
    try:
        assert fresh.CACHE.path == tmp_path / "tuning" / "gemm_tuning.json"
        assert fresh.CACHE.get(key) is None            # not there: nothing read
        (tmp_path / "tuning").mkdir(mode=0o700)
        (tmp_path / "tuning" / "gemm_tuning.json").write_bytes(path.read_bytes())
        fresh = importlib.reload(tuning)
        assert fresh.CACHE.get(key) == fastest
    finally:
        monkeypatch.delenv("RILL_CACHE_DIR")
        importlib.reload(tuning)
    # A corrupt file is ignored with a warning, and rewritten on the next put.
    path.write_text("{not json")
    with pytest.warns(UserWarning, match="corrupt tuning cache"):
        broken = tuning.TuningCache(path)
    assert broken.get(key) is None
    broken.put(key, fastest)
    assert tuning.TuningCache(path).get(key) == fastest


def test_failing_candidates_are_skipped(tmp_path):
    cache = tuning.TuningCache(tmp_path / "t.json")

    def run(config):
        if config.block_m > 32:
            raise RuntimeError("out of shared memory")

    best = tuning.tune("k", run, "fma", timer=lambda fn: (fn(), 1.0)[1], cache=cache)
    assert best is not None and best.block_m <= 32


def test_interpreter_never_times(monkeypatch):
    if not INTERPRET:
        pytest.skip("real GPU")
    monkeypatch.setenv("RILL_AUTOTUNE", "1")
    assert not tuning.autotune_enabled()
    assert tuning.tune("k", lambda config: pytest.fail("timed")) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = tuning.config_for("matmul", "dot", "float32", 70, 90, 130,
                                run=lambda config: pytest.fail("timed"))
    assert cfg == tuning.heuristic("dot", "float32", 70, 90, 130)


def test_einsum_booleans_and_integers(rng):
    a = rng.random((40, 300)) < 0.5
    b = rng.random((300, 7)) < 0.02
    expected = np.einsum("ij,jk->ik", a, b)
    got = host(linalg._einsum(dev(a), dev(b), inputs=("ij", "jk"), output="ik"))
    np.testing.assert_array_equal(got, expected)
    x, y, z = (rng.integers(-50, 50, s).astype(np.int16) for s in [(4, 5), (5, 6), (6,)])
    close(linalg._einsum(dev(x), dev(y), dev(z), inputs=("ij", "jk", "k"), output="i"),
          np.einsum("ij,jk,k->i", x, y, z))


# ---- the real compiler ---------------------------------------------------------------------

_COMPILE_SCRIPT = r'''
import inspect, os
import numpy as np
import rill.gpu

class _HostBackend:  # enough of a backend to import the kernels without CuPy or a GPU
    xp = np
    interpreted = False

rill.gpu.backend = lambda: _HostBackend()
import triton
from triton.backends.compiler import GPUTarget
from rill.kernels.triton import conv, linalg, pooling

def build(fn, pointers, constexprs, warps=4, stages=3):
    names = list(inspect.signature(fn.fn).parameters)
    sig = {n: "constexpr" if n in constexprs else pointers.get(n, "i32") for n in names}
    src = triton.compiler.ASTSource(
        fn, sig, constexprs={(names.index(k),): v for k, v in constexprs.items()})
    triton.compile(src, target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=warps, num_stages=stages))

gemm = dict(GROUP_M=8, BLOCK_K=32)
for dt, dot, prec, acc, dims, long in [("fp32", True, "ieee", 0, 1, False),
                                       ("fp16", True, "default", 0, 3, True),
                                       ("fp64", False, "ieee", 1, 2, False)]:
    build(linalg._contract_kernel, dict(a_ptr="*" + dt, b_ptr="*" + dt, c_ptr="*" + dt,
                                        bias_ptr="*" + dt),
          dict(gemm, B_DIMS=dims, M_DIMS=dims, N_DIMS=1, K_DIMS=dims, HAS_BIAS=True,
               USE_DOT=dot, PRECISION=prec, ACC=acc, IDX64=long, BLOCK_M=64, BLOCK_N=64,
               BLOCK_K=32 if dot else 8))
conv_common = dict(gemm, KH=3, KW=3, USE_DOT=True, PRECISION="ieee", ACC=0, IDX64=False,
                   BLOCK_M=64, BLOCK_N=32)
build(conv._conv2d_kernel, dict(x_ptr="*fp16", w_ptr="*fp16", y_ptr="*fp16",
                                bias_ptr="*fp16"), dict(conv_common, HAS_BIAS=True))
build(conv._conv2d_weight_grad_kernel, dict(x_ptr="*fp32", g_ptr="*fp32", gw_ptr="*fp32"),
      conv_common)
build(conv._conv_transpose2d_kernel, dict(g_ptr="*fp32", w_ptr="*fp32", dx_ptr="*fp32"),
      conv_common)
build(pooling._max_pool2d_grad_kernel, dict(g_ptr="*fp32", winner_ptr="*i8", out_ptr="*fp32"),
      dict(KH=3, KW=3, BLOCK=1024))
print("compiled")
'''


def test_kernels_compile_for_a_real_gpu():
    """The interpreter never runs Triton's compiler: compile a few variants of each GEMM
    kernel for sm_90 (ptxas ships with Triton; no GPU is needed; Triton's cache keeps repeated
    runs fast)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ("RILL_TRITON_INTERPRET", "TRITON_INTERPRET")}
    done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]
