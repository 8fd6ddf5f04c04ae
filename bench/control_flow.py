"""Control flow: an LSTM training step (forward and backward), captured rill against the rest.

Case: one LSTM layer, input 128, hidden 256, sequence 50, batch 32 (x is (T, N, F)); loss the
mean of the output squared; the gradients of all four parameters (weight_ih_l0, weight_hh_l0,
bias_ih_l0, bias_hh_l0). Variants, each one call of the step:
    rill captured   `rill.capture` of the step (zero_grad, forward, loss, backward): the LSTM
                    records one `scan` node whose body is one fused `lstm_cell` (the recurrent
                    GEMM and the gates), its gradient a reversed scan of `lstm_cell_grad` and
                    one GEMM per step over saved residuals
    rill eager      the same step uncaptured: the LSTM runs a Python loop over time steps
    torch eager     `torch.nn.LSTM` on CPU with the same weights (rill uses PyTorch's
                    parameter names and layout)
    jax.jit         `jax.value_and_grad` of the same LSTM written with `jax.lax.scan`, under
                    `jax.jit`: run where jax imports, or from another interpreter given with
                    `--jax-python` (a venv made with --system-site-packages, so that it sees
                    numpy and rill too); skipped with a note otherwise
    numpy (floor)   a hand-written BPTT in float32 NumPy: the input projection of all steps
                    one matmul, the sequential h @ W_hh.T per step, the backward's dgates
                    stacked so that the weight gradients are one matmul each after the loop

All variants start from the same float32 weights and input. Before timing, each variant's
loss and gradients from its first call are checked against rill eager's (captured rill to
rounding, the others to float32 summation-order tolerance), and the script stops loudly if
any differs. The first call of a captured or jitted function traces and compiles: it is the
checked call, never a timed one, and a few warm-up calls follow it.

As in bench/capture.py, each variant runs in its own process (thread counts left at each
library's default) and the parent rotates blocks of consecutive calls between them with a
pause between blocks, so machine noise falls on all alike. The table gives medians and
minimums in ms per step, and ratios of medians, with the host's load average before and after
the timing and the BLAS libraries NumPy uses (threadpoolctl), as the figures depend on both.

    python bench/control_flow.py                  # about a minute
    python bench/control_flow.py --quick          # smoke run: tiny sizes, a few seconds
    python bench/control_flow.py --base e080e54   # also rill's variants at that commit
    python bench/control_flow.py --jax-python /tmp/jaxvenv/bin/python --json lstm.json
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics

import numpy as np

# bench/harness.py: run as `python bench/control_flow.py`, the script's folder is on sys.path
import harness

WARMUP_CALLS = 3           # after the checked call, before any timing
FULL = {"seq": 50, "batch": 32, "input": 128, "hidden": 256}
QUICK = {"seq": 5, "batch": 4, "input": 8, "hidden": 16}
NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")

CAPTURED, EAGER, TORCH, JAX, NUMPY = ("rill captured", "rill eager", "torch eager", "jax.jit",
                                      "numpy (floor)")


# ---- data: the same arrays for every variant -----------------------------------------------

def lstm_data(sizes: dict):
    """x (T, N, F) and the weights in PyTorch's layout, U(-1/sqrt(H), 1/sqrt(H))."""
    t, n, f, h = sizes["seq"], sizes["batch"], sizes["input"], sizes["hidden"]
    x = np.random.default_rng(1).standard_normal((t, n, f)).astype(np.float32)
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(h)
    shapes = [(4 * h, f), (4 * h, h), (4 * h,), (4 * h,)]
    ws = [rng.uniform(-bound, bound, s).astype(np.float32) for s in shapes]
    return x, dict(zip(NAMES, ws))


# ---- rill ----------------------------------------------------------------------------------

def rill_case(sizes: dict, captured: bool):
    """call() runs one step and returns (loss, [grads in NAMES order]) as NumPy."""
    import rill
    xs, ws = lstm_data(sizes)
    x = rill.tensor(xs)
    lstm = rill.nn.LSTM(sizes["input"], sizes["hidden"])
    lstm.load_state_dict({k: rill.tensor(w) for k, w in ws.items()})
    params = [getattr(lstm, k) for k in NAMES]

    def step(x):
        lstm.zero_grad()
        out, _ = lstm(x)
        loss = (out * out).mean()
        loss.backward()
        return loss
    fn = rill.capture(step) if captured else step
    return (lambda: fn(x)), (lambda loss: (float(loss), [p.grad.numpy() for p in params]))


# ---- PyTorch -------------------------------------------------------------------------------

def torch_case(sizes: dict):
    import torch
    xs, ws = lstm_data(sizes)
    x = torch.tensor(xs)
    lstm = torch.nn.LSTM(sizes["input"], sizes["hidden"])
    lstm.load_state_dict({k: torch.tensor(w) for k, w in ws.items()})
    params = [getattr(lstm, k) for k in NAMES]

    def step():
        lstm.zero_grad(set_to_none=True)
        out, _ = lstm(x)
        loss = (out * out).mean()
        loss.backward()
        return loss
    return step, (lambda loss: (loss.item(), [p.grad.numpy() for p in params]))


# ---- jax.jit (optional) --------------------------------------------------------------------

def jax_case(sizes: dict):
    import jax
    import jax.numpy as jnp
    xs, ws = lstm_data(sizes)
    x = jnp.asarray(xs)
    params = tuple(jnp.asarray(ws[k]) for k in NAMES)

    def loss_fn(params, x):
        w_ih, w_hh, b_ih, b_hh = params
        proj = x @ w_ih.T + b_ih           # every step's input projection, one matmul

        def cell(carry, p_t):
            h, c = carry
            i, f, g, o = jnp.split(p_t + h @ w_hh.T + b_hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        zeros = jnp.zeros((x.shape[1], w_hh.shape[1]), x.dtype)
        _, out = jax.lax.scan(cell, (zeros, zeros), proj)
        return jnp.mean(out * out)

    fn = jax.jit(jax.value_and_grad(loss_fn))

    def step():
        loss, grads = fn(params, x)
        jax.block_until_ready(grads)
        return loss, grads
    return step, (lambda out: (float(out[0]), [np.asarray(g) for g in out[1]]))


# ---- NumPy floor ---------------------------------------------------------------------------

def numpy_case(sizes: dict):
    xs, ws = lstm_data(sizes)
    w_ih, w_hh, b_ih, b_hh = (ws[k] for k in NAMES)
    steps, batch, _ = xs.shape
    hidden = w_hh.shape[1]
    x2 = xs.reshape(steps * batch, -1)
    one = np.float32(1)

    def sigmoid(a, out):
        np.negative(a, out=out)
        np.exp(out, out=out)
        out += one
        np.reciprocal(out, out=out)
        return out

    def step():
        # forward: the input projection of every step at once, then the recurrence
        proj = (x2 @ w_ih.T + (b_ih + b_hh)).reshape(steps, batch, 4 * hidden)
        acts = np.empty_like(proj)                      # i, f, g, o after their activations
        cs = np.empty((steps + 1, batch, hidden), np.float32)
        hs = np.empty((steps + 1, batch, hidden), np.float32)
        tcs = np.empty((steps, batch, hidden), np.float32)
        cs[0] = 0
        hs[0] = 0
        for t in range(steps):
            gates = proj[t] + hs[t] @ w_hh.T
            a = acts[t]
            sigmoid(gates, a)
            np.tanh(gates[:, 2 * hidden:3 * hidden], out=a[:, 2 * hidden:3 * hidden])
            i, f, g, o = (a[:, k * hidden:(k + 1) * hidden] for k in range(4))
            np.multiply(f, cs[t], out=cs[t + 1])
            cs[t + 1] += i * g
            np.tanh(cs[t + 1], out=tcs[t])
            np.multiply(o, tcs[t], out=hs[t + 1])
        out = hs[1:]
        loss = np.mean(out * out)
        # backward
        dout = out * np.float32(2 / out.size)
        dgates = np.empty_like(proj)
        dh = np.zeros((batch, hidden), np.float32)
        dc = np.zeros((batch, hidden), np.float32)
        for t in range(steps - 1, -1, -1):
            a, d, tc = acts[t], dgates[t], tcs[t]
            i, f, g, o = (a[:, k * hidden:(k + 1) * hidden] for k in range(4))
            di, df, dg, do = (d[:, k * hidden:(k + 1) * hidden] for k in range(4))
            dh += dout[t]
            dc += dh * o * (one - tc * tc)
            np.multiply(dh, tc, out=do)
            do *= o * (one - o)
            np.multiply(dc, g, out=di)
            di *= i * (one - i)
            np.multiply(dc, cs[t], out=df)
            df *= f * (one - f)
            np.multiply(dc, i, out=dg)
            dg *= one - g * g
            dc *= f
            dh = d @ w_hh
        # the weight gradients, one matmul each over all steps
        d2 = dgates.reshape(steps * batch, 4 * hidden)
        db = d2.sum(axis=0)
        grads = [d2.T @ x2, d2.T @ hs[:-1].reshape(steps * batch, hidden), db, db.copy()]
        return loss, grads
    return step, (lambda out: (float(out[0]), out[1]))


def build(label: str, sizes: dict):
    if label in (EAGER, CAPTURED):
        return rill_case(sizes, captured=label == CAPTURED)
    return {TORCH: torch_case, NUMPY: numpy_case, JAX: jax_case}[label](sizes)


# ---- one process per variant (bench/harness.py) -------------------------------------------

MODULES = {EAGER: "rill", CAPTURED: "rill", TORCH: "torch", NUMPY: "numpy", JAX: "jax"}


def setup(label: str, sizes: dict):
    """Run in the variant's worker: its call and its first call's (loss, grads) (that call
    traces and compiles where it applies: checked, not timed)."""
    call, read = build(label, sizes)
    loss, grads = read(call())
    return call, (loss, [np.array(g, dtype=np.float32) for g in grads])


def max_rel_errors(values, ref) -> list[float]:
    """Max |difference| of the loss and of each gradient, relative to the reference's max."""
    out = [abs(values[0] - ref[0]) / max(abs(ref[0]), 1e-30)]
    for g, r in zip(values[1], ref[1]):
        out.append(float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-30)))
    return out


def check(first: dict) -> dict:
    """Every variant's loss and gradients against rill eager's: equal work, or stop."""
    ref = first[EAGER]
    errors = {}
    for label, values in first.items():
        if label == EAGER:
            continue
        if [np.shape(g) for g in values[1]] != [np.shape(r) for r in ref[1]]:
            raise SystemExit(f"{label}: gradient shapes {[np.shape(g) for g in values[1]]} "
                             f"differ from {EAGER}'s {[np.shape(r) for r in ref[1]]}")
        errs = max_rel_errors(values, ref)
        errors[label] = errs
        # captured rill runs rill's own kernels: rounding only. The others sum in other orders
        # through 50 steps forward and back.
        tol = 1e-5 if label == CAPTURED else 1e-3
        if not all(np.isfinite(errs)) or max(errs) > tol:
            what = ["loss"] + list(NAMES)
            bad = ", ".join(f"{w} {e:.2e}" for w, e in zip(what, errs) if not e <= tol)
            raise SystemExit(f"{label} disagrees with {EAGER} (max error relative to the "
                             f"largest value, tolerance {tol:g}): {bad}\n"
                             f"  losses: {EAGER} {ref[0]!r}, {label} {values[0]!r}")
    return errors


# ---- report --------------------------------------------------------------------------------

def blas_info() -> list:
    """The BLAS libraries loaded in this process (threadpoolctl), as 'name arch threads'."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return ["threadpoolctl not installed"]
    return [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} "
            f"{i.get('num_threads')} threads" for i in threadpool_info()
            if i.get("user_api") == "blas"]


def ratios(m: dict) -> dict:
    out = {}
    for other in (EAGER, TORCH, JAX, NUMPY):
        if CAPTURED in m and other in m:
            out[f"{CAPTURED} / {other}"] = m[CAPTURED] / m[other]
    return out


def table(title: str, samples: dict, medians: dict):
    from rich.table import Table
    n = len(next(iter(samples.values())))
    t = Table(title=f"{title}: ms per step (forward + backward), median of {n}")
    for col in ("variant", "median ms", "min ms", "x rill captured", "x torch"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for label, vals in samples.items():
        vs_cap = f"{medians[label] / medians[CAPTURED]:.2f}" if CAPTURED in medians else "-"
        vs_torch = f"{medians[label] / medians[TORCH]:.2f}" if TORCH in medians else "-"
        t.add_row(label, f"{medians[label]:.2f}", f"{min(vals):.2f}", vs_cap, vs_torch)
    return t


def main(argv=None) -> None:
    parser = harness.rotation_parser(__doc__, repeats=60, block=5, unit="steps", cases=False,
                                     base=True,
                                     quick="tiny sizes, few repeats")
    parser.add_argument("--jax-python",
                        help="a Python interpreter with jax installed, to run the jax.jit "
                             "variant from (by default: this one, if jax imports here)")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    if args.quick:
        args.repeats, args.block = 6, 3
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S

    from rich.console import Console
    console = Console()
    labels = [CAPTURED, EAGER, TORCH, NUMPY]
    if args.jax_python or importlib.util.find_spec("jax") is not None:
        labels.insert(3, JAX)
    else:
        console.print("jax is not importable: the jax.jit row is skipped (--jax-python PATH "
                      "runs it from an interpreter that has jax)")
    modules, first_paths = harness.with_base({label: MODULES[label] for label in labels},
                                             args.base)
    procs, conns, skipped, found_versions = harness.start(
        modules, setup, WARMUP_CALLS,
        executables={JAX: args.jax_python} if args.jax_python else None,
        first_paths=first_paths)
    for label, why in skipped.items():
        console.print(f"{label} skipped ({why})")
    if EAGER not in conns or CAPTURED not in conns:
        raise SystemExit(f"rill could not be imported: {skipped}")

    title = ("LSTM {input}->{hidden}, seq {seq}, batch {batch}".format(**sizes))
    try:
        first = harness.set_up(conns, sizes)
        errors = check(first)
        load_before = os.getloadavg()
        samples = harness.time_in_rotation(conns, args.repeats, args.block, settle)
        load_after = os.getloadavg()
    finally:
        harness.stop(procs, conns)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    console.print("agreement with rill eager (max error of loss and gradients, relative to "
                  "the largest value): " + ", ".join(f"{k} {max(e):.1e}"
                                                      for k, e in errors.items()))
    console.print(table(title, samples, medians))
    console.print("load average (1, 5, 15 min) before timing "
                  f"{', '.join(f'{v:.2f}' for v in load_before)}; after "
                  f"{', '.join(f'{v:.2f}' for v in load_after)}")
    console.print("BLAS (threadpoolctl, this process): " + "; ".join(blas_info()))
    found = ratios(medians)
    for name, value in found.items():
        console.print(f"  {name}: [bold]{value:.2f}[/bold]")
    if JAX in medians:
        r = found[f"{CAPTURED} / {JAX}"]
        console.print(f"target, rill captured at or below jax.jit: {'met' if r <= 1 else 'NOT met'}"
                      f" ({r:.2f}x)")
    if args.quick:
        console.print("(--quick: a smoke run; these figures are too few to mean anything)")
    if args.json:
        report = {"machine": {**harness.machine(),
                              "versions seen by the variants": found_versions},
                  "load_average": {"before": load_before, "after": load_after},
                  "blas": blas_info(),
                  "sizes": sizes, "repeats": args.repeats, "block": args.block,
                  "base": args.base,
                  "skipped": skipped, "median_ms": medians,
                  "min_ms": {k: min(v) for k, v in samples.items()}, "ratios": found,
                  "losses": {k: v[0] for k, v in first.items()},
                  "max_rel_errors": errors, "samples_ms": samples}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
