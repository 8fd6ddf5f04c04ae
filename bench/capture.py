"""rill.capture against rill eager: training steps (an MLP, a small GPT, a conv net with
BatchNorm) and a chain of elementwise ops.

PyTorch eager runs beside them (and jax.jit where it is importable), with a NumPy floor for
the MLP and the chain.

Cases, each one call of what a user writes:
    mlp, batch 16 and batch 128   784-512-512-10 with ReLU; opt.zero_grad(), cross-entropy
                                  on integer labels, loss.backward(), opt.step() of SGD
                                  (lr 0.1, no momentum)
    chain                         50 elementwise ops on a (64,) float32 tensor, no grad
                                  (x * 1.01, x + 0.5, tanh(x), x * 0.99, x - 0.25, ten times)
    gpt, 2 layers d=64            token embedding (vocabulary 65) plus learned positions, two
                                  pre-norm nn.TransformerEncoderLayer(64, 4 heads, 256,
                                  dropout 0) under a causal mask, final LayerNorm, linear
                                  head; sequence 64, batch 8; cross-entropy on the next
                                  tokens, clip_grad_norm_(1.0), AdamW (lr 3e-4, weight decay
                                  0.1 on matrices, none on biases and norms' scales)
    conv net with BatchNorm       conv3x3(3->16)-BatchNorm-ReLU-maxpool2-conv3x3(16->32)-
                                  BatchNorm-ReLU-global average pool-linear(32->10), batch 32
                                  of 3x32x32, cross-entropy, SGD (lr 0.05, momentum 0.9)
Variants: rill eager; rill captured (the same function under `rill.capture`, the whole step
one graph); PyTorch eager (for the GPT, torch.nn.TransformerEncoderLayer with the same
settings and the same weights); jax.jit (MLP and chain; skipped with a note when jax cannot
be imported); and, for the MLP and the chain, a NumPy floor written by hand: for the MLP the
same forward, softmax-cross-entropy gradient, backward and SGD update in float32, for the
chain the same 50 ufunc calls (on constants converted to float32 once).

All variants start from the same float32 weights and data. Before timing, the first losses
(the chain's outputs) of every variant are checked against rill eager's, and the script stops
if they differ, so every row does the same work; rill captured must match rill eager exactly
up to rounding. The first call of a captured (or jitted) function traces and compiles: it is
the checked call, never a timed one, and a few warm-up calls follow it.

As in bench/train.py, each variant runs in its own process (no framework's BLAS or OpenMP
threads spin beside another's; thread counts are left at each library's default) and the
parent rotates blocks of consecutive calls between them, with a pause between blocks, so
machine noise falls on all alike. The tables give medians and minimums in ms per call (for
the chain each sample is the mean of many calls) and ratios of medians. The script prints
the BLAS NumPy uses (kernel family, threads; threadpoolctl) and torch's CPU capability.

    python bench/capture.py                 # all cases, about two minutes
    python bench/capture.py --quick         # smoke run, about 15 s
    python bench/capture.py --cases gpt conv --repeats 400 --json capture.json
    python bench/capture.py --guards        # per call: the cost of checking a trace's guards
    python bench/capture.py --base e080e54  # also rill eager and captured at that commit
"""
from __future__ import annotations

import importlib.util
import statistics
import zlib

import numpy as np

# bench/harness.py: run as `python bench/capture.py`, the script's folder is on sys.path
import harness

LR = 0.1
CHAIN_SHAPE = (64,)
CHAIN_ROUNDS = 10          # five ops a round: 50 ops
CHECK_CALLS = 3            # calls whose results are compared across variants
WARMUP_CALLS = 5           # after the checked calls, before any timing

GPT_VOCAB, GPT_D, GPT_HEADS, GPT_LAYERS, GPT_SEQ = 65, 64, 4, 2, 64
GPT_LR, GPT_WEIGHT_DECAY, GPT_CLIP = 3e-4, 0.1, 1.0
CONV_LR, CONV_MOMENTUM = 0.05, 0.9

EAGER, CAPTURED, TORCH, NUMPY, JAX = ("rill eager", "rill captured", "torch eager",
                                      "numpy (floor)", "jax.jit")
CASES = {"mlp, batch 16": ("mlp", 16), "mlp, batch 128": ("mlp", 128),
         "chain of 50 ops, (64,)": ("chain", None),
         "gpt, 2 layers d=64": ("gpt", 8), "conv net with BatchNorm": ("convbn", 32)}
# The models only rill and PyTorch run (no NumPy floor or jax version is written for them).
MODEL_KINDS = ("gpt", "convbn")


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


def gpt_data(batch: int):
    """Token ids (batch, seq) and the next token of each position, flattened (batch * seq,)."""
    tokens = np.random.default_rng(batch).integers(0, GPT_VOCAB, (batch, GPT_SEQ + 1))
    return tokens[:, :-1], tokens[:, 1:].reshape(-1)


def conv_data(batch: int):
    rng = np.random.default_rng(batch)
    return rng.standard_normal((batch, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, batch)


def model_weights(shapes: dict) -> dict:
    """Float32 values for every parameter, by name, made alike for every framework (each from
    a generator seeded by its name): 1-d weights (norms' scales) near 1, other 1-d tensors
    (biases) near 0, matrices and kernels scaled by 1/sqrt(fan-in)."""
    out = {}
    for name, shape in shapes.items():
        z = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(shape)
        if len(shape) == 1:
            z = 1 + 0.1 * z if name.endswith("weight") else 0.02 * z
        else:
            z = z / np.sqrt(np.prod(shape[1:]))
        out[name] = z.astype(np.float32)
    return out


def gpt_model(fw):
    """The "gpt" case's model in `fw` (the rill or torch module: the same layer and parameter
    names): token embedding plus learned positions, pre-norm encoder layers under a causal
    mask, a final LayerNorm and a linear head."""
    nn = fw.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(GPT_VOCAB, GPT_D)
            self.pos = nn.Parameter(fw.zeros(GPT_SEQ, GPT_D))
            self.blocks = nn.ModuleList([
                nn.TransformerEncoderLayer(GPT_D, GPT_HEADS, 4 * GPT_D, dropout=0.0,
                                           batch_first=True, norm_first=True)
                for _ in range(GPT_LAYERS)])
            self.norm = nn.LayerNorm(GPT_D)
            self.head = nn.Linear(GPT_D, GPT_VOCAB)
            # -inf above the diagonal: position i attends to positions <= i
            self.mask = fw.tensor(np.triu(np.full((GPT_SEQ, GPT_SEQ), -np.inf, np.float32), 1))

        def forward(self, tokens):
            h = self.embed(tokens) + self.pos
            for block in self.blocks:
                h = block(h, src_mask=self.mask)
            return self.head(self.norm(h))
    return GPT()


def conv_model(fw):
    nn = fw.nn
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def model_case(fw, kind: str, batch: int, clip_grad_norm_):
    """(step, x, y) for the "gpt" and "convbn" cases, written once for rill and torch (whose
    APIs agree here; `clip_grad_norm_` is the framework's). step(x, y) returns the loss."""
    F = fw.nn.functional
    if kind == "gpt":
        xs, ys = gpt_data(batch)
        net = gpt_model(fw)
    else:
        xs, ys = conv_data(batch)
        net = conv_model(fw)
    weights = model_weights({n: tuple(p.shape) for n, p in net.named_parameters()})
    # buffers (BatchNorm's running statistics) keep their framework's defaults, alike
    net.load_state_dict({**net.state_dict(), **{n: fw.tensor(w) for n, w in weights.items()}})
    x, y = fw.tensor(xs), fw.tensor(ys)
    if kind == "convbn":
        opt = fw.optim.SGD(net.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss
        return step, x, y
    # decay for matrices (embeddings and positions too), none for biases and norms' scales
    params = list(net.parameters())
    opt = fw.optim.AdamW([{"params": [p for p in params if p.ndim >= 2]},
                          {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                         lr=GPT_LR, weight_decay=GPT_WEIGHT_DECAY)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(net(x).reshape(-1, GPT_VOCAB), y)
        loss.backward()
        clip_grad_norm_(params, GPT_CLIP)
        opt.step()
        return loss
    return step, x, y


# ---- rill ----------------------------------------------------------------------------------

def rill_step(kind: str, batch):
    """(step, args, to_numpy): step(*args) runs one step (one chain), uncaptured, and
    returns its loss (output)."""
    import rill
    if kind in MODEL_KINDS:
        step, x, y = model_case(rill, kind, batch, rill.optim.clip_grad_norm_)
        return step, (x, y), (lambda loss: float(loss))
    if kind == "chain":
        def run(x):
            return chain(x, rill.tanh)
        return run, (rill.tensor(chain_data()),), (lambda out: out.numpy())

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
    return step, (x, y), (lambda loss: float(loss))


def rill_case(kind: str, batch, captured: bool):
    """(call, to_numpy): call() runs one step (one chain) and returns its loss (output)."""
    import rill
    step, args, read = rill_step(kind, batch)
    fn = rill.capture(step) if captured else step
    return (lambda: fn(*args)), read


# ---- PyTorch -------------------------------------------------------------------------------

def torch_case(kind: str, batch):
    import torch
    if kind in MODEL_KINDS:
        step, x, y = model_case(torch, kind, batch, torch.nn.utils.clip_grad_norm_)
        return (lambda: step(x, y)), (lambda loss: loss.item())
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
    if CASES[case][0] in MODEL_KINDS:  # rill and torch only
        conns = {label: c for label, c in conns.items() if label not in (NUMPY, JAX)}
    first = harness.set_up(conns, case)
    check(case, first)
    samples = harness.time_in_rotation(conns, repeats, block, settle, inner)
    return samples, first


# ---- where a captured step's time goes (--per-node) ----------------------------------------

def per_node(case: str, calls: int, console) -> None:
    """In this one process: the captured step's program with a timer around each node's
    kernel (the same straight-line code, the same buffer lifetimes), its time per op and its
    slowest nodes; then whole calls, in rotation, of the captured step with the program
    capture chose for it, with the straight-line program, and of the eager step. This reads
    rill's internals (CapturedFunction.variants, executor.Program): a diagnostic, not a
    benchmark."""
    import collections
    import time

    import rill
    from rill.capture.executor import Program
    step, args, _ = rill_step(*CASES[case])
    fn = rill.capture(step)
    for _ in range(1 + WARMUP_CALLS):
        fn(*args)
    (variant,) = fn.variants.values()
    chosen, graph = variant.program, variant.program.graph
    node_s = collections.defaultdict(list)

    def timed(i, kernel):
        def run(*a, **kw):
            t = time.perf_counter()
            out = kernel(*a, **kw)
            node_s[i].append(time.perf_counter() - t)
            return out
        return run
    straight = Program(graph, parallel=False)
    clocked = Program(graph, parallel=True)  # not compiled yet: its kernels get timers first
    clocked.steps = [timed(i, k) for i, k in enumerate(clocked.steps)]
    clocked.parallel = False
    clocked._compile()
    whole = collections.defaultdict(list)
    programs = {f"captured, as chosen ({'thread pool' if chosen.parallel else 'straight-line'})":
                chosen, "captured, straight-line program": straight,
                "captured, kernels timed": clocked}
    for _ in range(max(1, calls // 10)):
        for label, program in programs.items():
            variant.program = program
            for _ in range(10):
                t = time.perf_counter()
                fn(*args)
                whole[label].append(time.perf_counter() - t)
        for _ in range(10):
            t = time.perf_counter()
            step(*args)
            whole["eager"].append(time.perf_counter() - t)
    variant.program = chosen
    console.print(f"{case}: {len(graph.nodes)} nodes; ms per call, median (min) of "
                  f"{len(whole['eager'])}")
    for label, times in whole.items():
        console.print(f"  {label:44s} {statistics.median(times) * 1e3:8.3f} "
                      f"({min(times) * 1e3:.3f})")
    median = {i: statistics.median(t) for i, t in node_s.items()}
    by_op, count = collections.defaultdict(float), collections.Counter()
    for i, t in median.items():
        by_op[graph.nodes[i].op] += t
        count[graph.nodes[i].op] += 1
    total = sum(by_op.values())
    console.print(f"  kernels, sum of per-node medians: {total * 1e3:.3f} ms; "
                  "by op (nodes, ms, %):")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1])[:15]:
        console.print(f"    {op:28s} {count[op]:4d} {t * 1e3:8.3f} {100 * t / total:5.1f}")
    console.print("  slowest nodes:")
    for i in sorted(median, key=lambda i: -median[i])[:10]:
        node = graph.nodes[i]
        shapes = ", ".join(str(tuple(v.shape)) for v in node.inputs)
        console.print(f"    {median[i] * 1e3:7.3f} ms  #{i} {node.op}({shapes})")


# ---- report --------------------------------------------------------------------------------

def guard_cost(case: str, calls: int, console) -> None:
    """The captured step's guards (what its trace baked in from Python: module flags and
    settings, globals, optimizer options) and what checking them costs before each call."""
    import time
    import rill
    from rill.capture.python_reads import Reads
    kind, batch = CASES[case]
    step, args, _ = rill_step(kind, batch)
    fn = rill.capture(step)
    fn(*args)
    variant = next(iter(fn.variants.values()))
    reads = sum(len(c.reads) for c in variant.checks if isinstance(c, Reads))
    samples = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            variant.guard_failure(fn.name)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    console.print(f"{case}: {len(variant.checks) - (reads > 0) + reads} guards ({reads} on "
                  f"Python values read), checked in {statistics.median(samples):.1f} us a call")


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
    speedup = "captured speedup over rill eager (eager / captured)"

    def ratio(case, name):
        return cases.get(case, {}).get("ratios", {}).get(name)
    for case in ("mlp, batch 16", "chain of 50 ops, (64,)"):
        r = ratio(case, speedup)
        if r is not None:
            lines.append(f"{case}: captured {r:.2f}x faster than rill eager (target >= 1.3x): "
                         f"{'met' if r >= 1.3 else 'NOT met'}")
    r = ratio("mlp, batch 128", "rill captured / numpy floor")
    if r is not None:
        lines.append(f"mlp, batch 128: captured at {r:.2f}x the NumPy floor (target <= 1.05x): "
                     f"{'met' if r <= 1.05 else 'NOT met'}")
    r = ratio("gpt, 2 layers d=64", speedup)
    if r is not None:
        lines.append(f"gpt, 2 layers d=64: captured {r:.2f}x faster than rill eager (target "
                     f">= 1.2x): {'met' if r >= 1.2 else 'NOT met'}")
    slower = {case: c["ratios"][speedup] for case, c in cases.items()
              if c["ratios"].get(speedup, 1.0) < 1.0}
    if len(cases) > len(slower):
        lines.append("every case: captured not slower than rill eager (eager / captured >= "
                     "1.0 in medians): " + ("met" if not slower else "NOT met, " + ", ".join(
                         f"{case} {r:.2f}x" for case, r in slower.items())))
    return lines


def blas() -> dict:
    """The BLAS NumPy (so rill) calls, as threadpoolctl reports it (the kernel family
    OpenBLAS chose for this CPU, or the one OPENBLAS_CORETYPE forced), and torch's CPU
    capability. Both read in this parent process: the workers inherit its environment."""
    import os
    info = {var: os.environ[var] for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                             "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
            if var in os.environ}
    try:
        import threadpoolctl
    except ImportError:
        info["numpy"] = "threadpoolctl is not installed (pip install threadpoolctl)"
    else:
        info["numpy"] = [{k: lib.get(k) for k in ("internal_api", "version", "architecture",
                                                  "num_threads")}
                         for lib in threadpoolctl.threadpool_info()
                         if lib.get("user_api") == "blas"]
    if importlib.util.find_spec("torch") is not None:
        import torch
        info["torch"] = torch.backends.cpu.get_cpu_capability()
    return info


def main(argv=None) -> None:
    parser = harness.rotation_parser(__doc__, repeats=200, block=20,
                                     quick="few repeats, short pauses", base=True)
    parser.add_argument("--chain-calls", type=int, default=200,
                        help="chain calls averaged into one sample")
    parser.add_argument("--per-node", action="store_true",
                        help="instead of the benchmark: time each node of the captured steps "
                             "(in this process; with --cases to pick them)")
    parser.add_argument("--guards", action="store_true",
                        help="instead of the benchmark: the cost of checking each captured "
                             "step's guards before a call (in this process)")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.block, args.chain_calls = 6, 3, 10
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S

    from rich.console import Console
    console = Console()
    if args.guards:
        for case in CASES:
            if not args.cases or any(word in case for word in args.cases):
                guard_cost(case, 200 if args.quick else 2000, console)
        return
    if args.per_node:
        for case in CASES:
            if not args.cases or any(word in case for word in args.cases):
                per_node(case, 20 if args.quick else args.repeats, console)
        return
    labels = [EAGER, CAPTURED, TORCH, NUMPY]
    if importlib.util.find_spec("jax") is not None:
        labels.append(JAX)
    else:
        console.print("jax is not importable: the jax.jit rows are skipped")
    modules, first_paths = harness.with_base({label: MODULES[label] for label in labels},
                                             args.base)
    procs, conns, skipped, _ = harness.start(modules, setup, WARMUP_CALLS,
                                              first_paths=first_paths)
    for label, why in skipped.items():
        console.print(f"{label} skipped ({why})")

    report = {"machine": harness.machine(), "blas": blas(),
              "repeats": args.repeats, "block": args.block, "chain_calls": args.chain_calls,
              "base": args.base,
              "skipped": skipped, "cases": {}}
    console.print(f"BLAS: {report['blas']}")
    try:
        for case, (kind, _) in CASES.items():
            if args.cases and not any(word in case for word in args.cases):
                continue
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
    harness.finish(args, report, console)


if __name__ == "__main__":
    main()
