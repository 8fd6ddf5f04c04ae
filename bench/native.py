"""Kernels compiled from C (rill.kernels.native) against the NumPy kernels they replace.

Each case calls one CPU kernel of rill (the function registered for its primitive) on the
same arrays twice: with the compiled module (rill.kernels.native.build.ENABLED True) and
without it (False: the NumPy kernel). Both ways run in this one process, interleaved: blocks
of `--number` calls, the way switching every block and the starting way alternating between
rounds, the first block after a switch not timed, so machine noise falls on both alike. The
table gives the median and minimum per call in microseconds over the blocks, and the ratio
of medians (compiled / NumPy). Before timing, the two results are compared (bit for bit
where the compiled kernel promises the NumPy kernel's bits, else to float rounding).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/native.py        # ~40 s
    python bench/native.py --quick                  # smoke run
    python bench/native.py --cases "batch_norm" "max_pool2d" --json native.json

The shapes are the ones the bench steps of bench/capture.py and bench/control_flow.py give
the kernels (float32).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _kernel(name):
    from rill.ops.primitive import PRIMITIVES
    return PRIMITIVES[name].kernels["cpu"]


def cases(quick: bool = False):
    """name -> (call, exact): call() runs the kernel once; exact: the same bits promised."""
    import rill  # noqa: F401  (registers the kernels)
    rng = np.random.default_rng(0)

    def f32(*shape, scale=1.0, shift=0.0):
        return (rng.standard_normal(shape) * scale + shift).astype(np.float32)

    found = {}
    x_proj, h, c = f32(32, 1024), f32(32, 256), f32(32, 256)
    w_hh, b_hh = f32(1024, 256, scale=0.06), f32(1024)
    cell = _kernel("lstm_cell")
    acts, tanh_c = cell(x_proj, h, c, w_hh, b_hh)[2:]
    g_h, g_c = f32(32, 256), f32(32, 256)
    found["lstm_cell (32, 256)"] = (lambda: cell(x_proj, h, c, w_hh, b_hh), False)
    grad = _kernel("lstm_cell_grad")
    found["lstm_cell_grad (32, 256)"] = (lambda: grad(acts, tanh_c, c, g_h, g_c), True)

    x, g, w, b = f32(8, 64, 64, shift=1.0), f32(8, 64, 64), f32(64), f32(64)
    ln, ln_grad = _kernel("layer_norm"), _kernel("layer_norm_grad")
    found["layer_norm (8, 64, 64)"] = (lambda: ln(x, w, b, 1e-5, 1), False)
    found["layer_norm_grad (8, 64, 64)"] = (lambda: ln_grad(g, x, w, 1e-5, 1), False)

    xb, gb, wb, bb = f32(32, 16, 32, 32, shift=0.5), f32(32, 16, 32, 32), f32(16), f32(16)
    bn, bn_grad = _kernel("batch_norm_train"), _kernel("batch_norm_grad")
    _, mean, var = bn(xb, wb, bb, 1e-5)
    found["batch_norm_train (32, 16, 32, 32)"] = (lambda: bn(xb, wb, bb, 1e-5), False)
    found["batch_norm_grad (32, 16, 32, 32)"] = (
        lambda: bn_grad(gb, xb, wb, mean, var, 1e-5), False)

    pool, pool_grad = _kernel("max_pool2d"), _kernel("max_pool2d_grad")
    found["max_pool2d 2x2 (32, 16, 32, 32)"] = (
        lambda: pool(xb, (2, 2), (2, 2), (0, 0), (1, 1)), True)
    winners, g_pool = pool(xb, (2, 2), (2, 2), (0, 0), (1, 1))[1], f32(32, 16, 16, 16)
    found["max_pool2d_grad 2x2 (32, 16, 32, 32)"] = (
        lambda: pool_grad(g_pool, winners, xb.shape, (2, 2), (2, 2), (0, 0), (1, 1)), True)

    logits, labels = f32(512, 65, scale=3.0), rng.integers(0, 65, 512)
    ce, ce_grad = _kernel("softmax_cross_entropy"), _kernel("softmax_cross_entropy_grad")
    one = np.asarray(1.0, np.float32)
    found["softmax_cross_entropy (512, 65)"] = (
        lambda: ce(logits, labels, -100, 0.0, "mean"), False)
    found["softmax_cross_entropy_grad (512, 65)"] = (
        lambda: ce_grad(logits, labels, one, -100, 0.0, "mean"), False)

    dy = f32(512, 64)
    total = _kernel("sum")
    found["sum over rows (512, 64)"] = (lambda: total(dy, 0, False), False)

    p, gp = f32(512, 784), f32(512, 784)
    scaled_add = _kernel("scaled_add")
    found["scaled_add (512, 784)"] = (lambda: scaled_add(p, gp, 1.0, -0.01), True)

    # the conv net's second convolution: the direct kernels against the per-image ones
    xc, wc, bc, gc = f32(32, 16, 16, 16), f32(32, 16, 3, 3), f32(32), f32(32, 32, 16, 16)
    conv, conv_t, conv_w = (_kernel(k) for k in ("conv2d", "conv_transpose2d",
                                                 "conv2d_weight_grad"))
    geometry = dict(stride=(1, 1), padding=((1, 1), (1, 1)), dilation=(1, 1), groups=1)
    found["conv2d 3x3 (32, 16, 16, 16) -> 32"] = (lambda: conv(xc, wc, bc, **geometry), False)
    found["conv_transpose2d (its input gradient)"] = (
        lambda: conv_t(gc, wc, (16, 16), **geometry), False)
    found["conv2d_weight_grad"] = (lambda: conv_w(xc, gc, (3, 3), **geometry), False)

    # a fused group as a generated C loop against the NumPy fused function: relu's gradient
    found["fused where(x > 0, g, 0) (32, 16, 32, 32)"] = (_relu_grad_group(xb, gb), True)

    n = 1_000_000 if quick else 10_000_000
    pa, ga, ma, va = f32(n), f32(n), f32(n), np.abs(f32(n))
    adam = _kernel("adam_update")
    scalars = (np.float32(1e-3), np.float32(0.3))
    found[f"adam_update, AdamW ({n // 1_000_000}M,)"] = (
        lambda: adam(pa, ga, ma, va, *scalars, beta1=0.9, beta2=0.999, eps=1e-8,
                     weight_decay=0.01, decay=1 - 1e-5), True)
    return found


def _relu_grad_group(x, g):
    """A call of the fused kernel on the group the capture of relu's gradient makes."""
    import rill
    from rill.capture.passes import pipeline
    from rill.capture.passes.fuse import fuse
    from rill.kernels.native import fused as native_fused
    native_fused.WAIT = True  # compile before timing, not in the background
    graph = fuse(pipeline.optimize(rill.capture(
        lambda a, b: rill.where(a > 0, b, 0.0), optimize=False).graph_for(
            rill.tensor(x), rill.tensor(g)), pipeline.PASSES))
    node = next(n for n in graph.nodes if n.op == "fused")
    inputs = [(x, g)[v.node.attrs["index"]] if v.node.op == "input" else
              np.asarray(v.node.attrs["value"], np.float32) for v in node.inputs]
    run = _kernel("fused")
    return lambda: run(*inputs, body=node.attrs["body"])


def _same(a, b, exact):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    for x, y in zip(a, b):
        if exact:
            np.testing.assert_array_equal(x, y)
        else:
            scale = max(1.0, float(np.abs(y).max()))
            np.testing.assert_allclose(x, y, rtol=0, atol=scale * 1e-5)


def time_case(call, rounds: int, number: int) -> dict:
    from rill.kernels.native import build
    samples = {True: [], False: []}
    for r in range(rounds):
        for way in ((True, False) if r % 2 == 0 else (False, True)):
            build.ENABLED = way
            call()  # the first call after a switch: not timed
            for _ in range(2):
                start = time.perf_counter()
                for _ in range(number):
                    call()
                samples[way].append((time.perf_counter() - start) / number * 1e6)
    build.ENABLED = True
    return samples


def blas() -> str:
    try:
        import threadpoolctl
    except ImportError:
        return "threadpoolctl is not installed"
    return "; ".join(f"{i['internal_api']} {i['version']} {i.get('architecture')} "
                     f"{i['num_threads']} threads" for i in threadpoolctl.threadpool_info()
                     if i["user_api"] == "blas")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cases", nargs="*", help="substrings of case names")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    from rill.kernels.native import build
    if build.load("lstm_cell") is None:
        raise SystemExit(f"no compiled kernels here: {build.why_not('lstm_cell')}")
    print("BLAS (threadpoolctl):", blas())
    report = {}
    for name, (call, exact) in cases(args.quick).items():
        if args.cases and not any(part in name for part in args.cases):
            continue
        build.ENABLED = True
        compiled = call()
        build.ENABLED = False
        _same(compiled, call(), exact)
        build.ENABLED = True
        start = time.perf_counter()
        call()
        once = time.perf_counter() - start
        number = max(1, min(200, int(0.02 / max(once, 1e-6))))
        samples = time_case(call, 2 if args.quick else args.rounds, 1 if args.quick else number)
        med = {way: statistics.median(v) for way, v in samples.items()}
        report[name] = {"compiled_us": med[True], "numpy_us": med[False],
                        "compiled_min_us": min(samples[True]), "numpy_min_us": min(samples[False]),
                        "ratio": med[True] / med[False], "same_bits": exact}
        print(f"{name:36s} compiled {med[True]:9.1f} us (min {min(samples[True]):9.1f})   "
              f"numpy {med[False]:9.1f} us (min {min(samples[False]):9.1f})   "
              f"compiled / numpy {med[True] / med[False]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"blas": blas(), "cases": report}, f, indent=1)


if __name__ == "__main__":
    main()
