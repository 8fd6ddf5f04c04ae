"""rill.capture against rill eager: an MLP training step and a chain of elementwise ops.

PyTorch eager runs beside them (and jax.jit where it is importable), with a NumPy floor.

Cases, each one call of what a user writes:
    mlp, batch 16 and batch 128   784-512-512-10 with ReLU; opt.zero_grad(), cross-entropy
                                  on integer labels, loss.backward(), opt.step() of SGD
                                  (lr 0.1, no momentum)
    chain                         50 elementwise ops on a (64,) float32 tensor, no grad
                                  (x * 1.01, x + 0.5, tanh(x), x * 0.99, x - 0.25, ten times)
Variants: rill eager; rill captured (the same function under `rill.capture`, the whole step
one graph); PyTorch eager; jax.jit (skipped with a note when jax cannot be imported); and a
NumPy floor written by hand: for the MLP the same forward, softmax-cross-entropy gradient,
backward and SGD update in float32, for the chain the same 50 ufunc calls (on constants
converted to float32 once).

All variants start from the same float32 weights and data. Before timing, the first losses
(the chain's outputs) of every variant are checked against rill eager's, and the script stops
if they differ, so every row does the same work; rill captured must match rill eager exactly
up to rounding. The first call of a captured (or jitted) function traces and compiles: it is
the checked call, never a timed one, and a few warm-up calls follow it.

As in bench/train.py, each variant runs in its own process (no framework's BLAS or OpenMP
threads spin beside another's; thread counts are left at each library's default) and the
parent rotates blocks of consecutive calls between them, with a pause between blocks, so
machine noise falls on all alike. The tables give medians and minimums in ms per call (for
the chain each sample is the mean of many calls) and ratios of medians.

    python bench/capture.py                 # all cases, about a minute
    python bench/capture.py --quick         # smoke run, a few seconds
    python bench/capture.py --repeats 400 --json capture.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics

import numpy as np

# bench/harness.py: run as `python bench/capture.py`, the script's folder is on sys.path
import harness

LR = 0.1
CHAIN_SHAPE = (64,)
CHAIN_ROUNDS = 10          # five ops a round: 50 ops
CHECK_CALLS = 3            # calls whose results are compared across variants
WARMUP_CALLS = 5           # after the checked calls, before any timing

EAGER, CAPTURED, TORCH, NUMPY, JAX = ("rill eager", "rill captured", "torch eager",
                                      "numpy (floor)", "jax.jit")
CASES = {"mlp, batch 16": ("mlp", 16), "mlp, batch 128": ("mlp", 128),
         "chain of 50 ops, (64,)": ("chain", None)}


# ---- data: the same arrays for every variant -----------------------------------------------

def mlp_data(batch: int):
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    shapes = [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    wrng = np.random.default_rng(0)
    # weight (out, in) and bias (out,), scaled by 1/sqrt(fan-in) of the layer
    ws = [(wrng.standard_normal(s) / np.sqrt(784 if i < 2 else 512)).astype(np.float32)
          for i, s in enumerate(shapes)]
    return x, y, ws


def chain_data():
    return np.linspace(-2.0, 2.0, int(np.prod(CHAIN_SHAPE)), dtype=np.float32).reshape(
        CHAIN_SHAPE)


CHAIN_CONSTANTS = (1.01, 0.5, 0.99, 0.25)


def chain(x, tanh, c=CHAIN_CONSTANTS):
    """The op chain, written once for every framework: `tanh` is the framework's; the
    constants are Python floats as a user writes them (the NumPy floor passes them made
    into float32 0-d arrays once, as a captured graph holds its constants)."""
    for _ in range(CHAIN_ROUNDS):
        x = x * c[0]
        x = x + c[1]
        x = tanh(x)
        x = x * c[2]
        x = x - c[3]
    return x


# ---- rill ----------------------------------------------------------------------------------

def rill_case(kind: str, batch, captured: bool):
    """(call, to_numpy): call() runs one step (one chain) and returns its loss (output)."""
    import rill
    if kind == "chain":
        x = rill.tensor(chain_data())

        def run(x):
            return chain(x, rill.tanh)
        fn = rill.capture(run) if captured else run
        return (lambda: fn(x)), (lambda out: out.numpy())

    import rill.nn.functional as F
    nn = rill.nn
    xs, ys, ws = mlp_data(batch)
    x, y = rill.tensor(xs), rill.tensor(ys)
    net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10))
    names = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    net.load_state_dict({k: rill.tensor(w) for k, w in zip(names, ws)})
    opt = rill.optim.SGD(net.parameters(), lr=LR)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    fn = rill.capture(step) if captured else step
    return (lambda: fn(x, y)), (lambda loss: float(loss))


# ---- PyTorch -------------------------------------------------------------------------------

def torch_case(kind: str, batch):
    import torch
    if kind == "chain":
        x = torch.tensor(chain_data())
        return (lambda: chain(x, torch.tanh)), (lambda out: out.numpy())
    nn = torch.nn
    xs, ys, ws = mlp_data(batch)
    x, y = torch.tensor(xs), torch.tensor(ys)
    net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10))
    names = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    net.load_state_dict({k: torch.tensor(w) for k, w in zip(names, ws)})
    opt = torch.optim.SGD(net.parameters(), lr=LR)

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, (lambda loss: loss.item())


# ---- NumPy floor ---------------------------------------------------------------------------

def numpy_case(kind: str, batch):
    if kind == "chain":
        x = chain_data()
        # Python floats would cost each ufunc call a scalar conversion (about 0.25 us of its
        # 0.5 here): the floor converts them once.
        c = tuple(np.asarray(v, dtype=np.float32) for v in CHAIN_CONSTANTS)
        return (lambda: chain(x, np.tanh, c)), (lambda out: out)
    x, y, params = mlp_data(batch)
    rows = np.arange(batch)

    def step():
        nonlocal params
        w1, b1, w2, b2, w3, b3 = params
        # forward
        a1 = x @ w1.T + b1
        h1 = np.maximum(a1, 0)
        a2 = h1 @ w2.T + b2
        h2 = np.maximum(a2, 0)
        z = h2 @ w3.T + b3
        # softmax cross-entropy, mean over the batch, and its gradient wrt the logits
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        total = e.sum(axis=1, keepdims=True)
        loss = np.mean(np.log(total[:, 0]) - z[rows, y])
        dz = e / total
        dz[rows, y] -= 1
        dz /= batch
        # backward through the dense layers and ReLU masks
        dh2 = (dz @ w3) * (a2 > 0)
        dh1 = (dh2 @ w2) * (a1 > 0)
        grads = (dh1.T @ x, dh1.sum(axis=0), dh2.T @ h1, dh2.sum(axis=0),
                 dz.T @ h2, dz.sum(axis=0))
        # SGD
        params = [p - np.float32(LR) * g for p, g in zip(params, grads)]
        return loss
    return step, (lambda loss: float(loss))


# ---- jax.jit (optional) --------------------------------------------------------------------

def jax_case(kind: str, batch):
    import jax
    import jax.numpy as jnp
    if kind == "chain":
        x = jnp.asarray(chain_data())
        fn = jax.jit(lambda x: chain(x, jnp.tanh))
        return (lambda: fn(x).block_until_ready()), (lambda out: np.asarray(out))
    xs, ys, ws = mlp_data(batch)
    x, y = jnp.asarray(xs), jnp.asarray(ys.astype(np.int32))
    params = [jnp.asarray(w) for w in ws]

    def loss_fn(params, x, y):
        w1, b1, w2, b2, w3, b3 = params
        h1 = jax.nn.relu(x @ w1.T + b1)
        h2 = jax.nn.relu(h1 @ w2.T + b2)
        logp = jax.nn.log_softmax(h2 @ w3.T + b3, axis=1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def jstep(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return [p - LR * g for p, g in zip(params, grads)], loss

    def step():
        nonlocal params
        params, loss = jstep(params, x, y)
        jax.block_until_ready(params)
        return loss
    return step, (lambda loss: float(loss))


def build(label: str, case: str):
    kind, batch = CASES[case]
    if label in (EAGER, CAPTURED):
        return rill_case(kind, batch, captured=label == CAPTURED)
    return {TORCH: torch_case, NUMPY: numpy_case, JAX: jax_case}[label](kind, batch)


# ---- one process per variant (bench/harness.py) -------------------------------------------

MODULES = {EAGER: "rill", CAPTURED: "rill", TORCH: "torch", NUMPY: "numpy", JAX: "jax"}


def setup(label: str, case: str):
    """Run in the variant's worker: its call and the results of its first CHECK_CALLS calls
    (the first call of a captured or jitted function traces: checked, not timed)."""
    call, read = build(label, case)
    first = [np.asarray(read(call()), dtype=np.float64).tolist() for _ in range(CHECK_CALLS)]
    return call, first


def check(case: str, first: dict) -> None:
    """Every variant's first results against rill eager's: equal work, or stop."""
    ref = np.asarray(first[EAGER])
    for label, values in first.items():
        # rill captured runs rill's own kernels: it must agree to rounding. Other libraries
        # sum in other orders, and three SGD steps carry that along a little.
        rtol, atol = (1e-5, 1e-6) if label == CAPTURED else (1e-4, 1e-5)
        if not np.allclose(values, ref, rtol=rtol, atol=atol):
            raise SystemExit(f"{case}: {label} disagrees with {EAGER} on the first "
                             f"{CHECK_CALLS} calls:\n  {EAGER}: {ref.ravel()[:6]}\n"
                             f"  {label}: {np.asarray(values).ravel()[:6]}")


def run_case(case: str, conns: dict, repeats: int, block: int, inner: int,
             settle: float) -> tuple[dict, dict]:
    first = harness.set_up(conns, case)
    check(case, first)
    samples = harness.time_in_rotation(conns, repeats, block, settle, inner)
    return samples, first


# ---- report --------------------------------------------------------------------------------

def fmt(ms: float) -> str:
    return f"{ms:.3f}" if ms >= 0.1 else f"{ms:.4f}"


def ratios(medians: dict) -> dict:
    """The ratios of medians the issue's targets are stated in."""
    out = {}
    m = medians
    if EAGER in m and CAPTURED in m:
        out["captured speedup over rill eager (eager / captured)"] = m[EAGER] / m[CAPTURED]
    if CAPTURED in m and NUMPY in m:
        out["rill captured / numpy floor"] = m[CAPTURED] / m[NUMPY]
    if CAPTURED in m and TORCH in m:
        out["rill captured / torch eager"] = m[CAPTURED] / m[TORCH]
    if EAGER in m and TORCH in m:
        out["rill eager / torch eager"] = m[EAGER] / m[TORCH]
    if CAPTURED in m and JAX in m:
        out["rill captured / jax.jit"] = m[CAPTURED] / m[JAX]
    return out


def table(case: str, samples: dict, medians: dict, inner: int):
    from rich.table import Table
    n = len(next(iter(samples.values())))
    what = "ms per step" if inner == 1 else f"ms per call (each sample the mean of {inner})"
    t = Table(title=f"{case}: {what}, median of {n}")
    for col in ("variant", "median ms", "min ms", "x rill eager", "x torch"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for label, vals in samples.items():
        vs_eager = f"{medians[label] / medians[EAGER]:.2f}"
        vs_torch = f"{medians[label] / medians[TORCH]:.2f}" if TORCH in medians else "-"
        t.add_row(label, fmt(medians[label]), fmt(min(vals)), vs_eager, vs_torch)
    return t


def targets(report: dict) -> list[str]:
    lines = []
    cases = report["cases"]

    def ratio(case, name):
        return cases.get(case, {}).get("ratios", {}).get(name)
    for case in ("mlp, batch 16", "chain of 50 ops, (64,)"):
        r = ratio(case, "captured speedup over rill eager (eager / captured)")
        if r is not None:
            lines.append(f"{case}: captured {r:.2f}x faster than rill eager (target >= 1.3x): "
                         f"{'met' if r >= 1.3 else 'NOT met'}")
    r = ratio("mlp, batch 128", "rill captured / numpy floor")
    if r is not None:
        lines.append(f"mlp, batch 128: captured at {r:.2f}x the NumPy floor (target <= 1.05x): "
                     f"{'met' if r <= 1.05 else 'NOT met'}")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: few repeats, short pauses (figures are not meaningful)")
    parser.add_argument("--repeats", type=int, default=200,
                        help="timed samples per variant and case")
    parser.add_argument("--block", type=int, default=20,
                        help="consecutive samples per variant before rotating to the next")
    parser.add_argument("--chain-calls", type=int, default=200,
                        help="chain calls averaged into one sample")
    parser.add_argument("--json", help="write samples, medians, ratios and the machine here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.block, args.chain_calls = 6, 3, 10
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S

    from rich.console import Console
    console = Console()
    labels = [EAGER, CAPTURED, TORCH, NUMPY]
    if importlib.util.find_spec("jax") is not None:
        labels.append(JAX)
    else:
        console.print("jax is not importable: the jax.jit rows are skipped")
    procs, conns, skipped, _ = harness.start({label: MODULES[label] for label in labels},
                                              setup, WARMUP_CALLS)
    for label, why in skipped.items():
        console.print(f"{label} skipped ({why})")

    report = {"machine": harness.machine(),
              "repeats": args.repeats, "block": args.block, "chain_calls": args.chain_calls,
              "skipped": skipped, "cases": {}}
    try:
        for case, (kind, _) in CASES.items():
            inner = args.chain_calls if kind == "chain" else 1
            samples, first = run_case(case, conns, args.repeats, args.block, inner, settle)
            medians = {k: statistics.median(v) for k, v in samples.items()}
            console.print(table(case, samples, medians, inner))
            report["cases"][case] = {"median_ms": medians,
                                     "min_ms": {k: min(v) for k, v in samples.items()},
                                     "ratios": ratios(medians), "first_results": first,
                                     "samples_ms": samples}
            for name, value in report["cases"][case]["ratios"].items():
                console.print(f"  {name}: [bold]{value:.2f}[/bold]")
    finally:
        harness.stop(procs, conns)
    for line in targets(report):
        console.print(line)
    if args.quick:
        console.print("(--quick: a smoke run; these figures are too few to mean anything)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
