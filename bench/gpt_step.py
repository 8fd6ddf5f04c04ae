"""A minGPT training step (issue 31), rill beside PyTorch eager, and the kernels it leans on.

The model, written once for rill and torch (their APIs agree here): token embedding (vocabulary
65) plus learned positions, 4 pre-norm blocks of d=128 with 4 heads under a causal mask and an
MLP of 4d with exact GELU, a final LayerNorm and a head; context 64, batch 16; cross-entropy
on the next tokens, clip_grad_norm_(1.0), AdamW lr 3e-4 with weight decay 0.1 on matrices.
Every projection is `x @ W + b` with x of shape (B, T, C), as a GPT written from scratch has
it (nn.Linear runs its own primitive). The kernel cases time one op at the step's shapes:
erf, gelu and gelu's gradient over (16, 64, 512) float32, and (16, 64, 128) @ (128, 512).

Each variant runs in its own process (bench/harness.py): blocks of calls rotate between them
with a pause, so machine noise falls on all alike. --base REV adds rill at an earlier commit
(its lib/ and kernels/ from `git archive`, first on the worker's sys.path) beside the current
tree: before and after in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/gpt_step.py --base cf59d2e
    python bench/gpt_step.py --quick
    python bench/gpt_step.py --cases step --repeats 100 --json gpt.json
"""
from __future__ import annotations

import math
import statistics
import types

import numpy as np

import harness
from capture import blas, model_weights

VOCAB, D, HEADS, LAYERS, SEQ, BATCH = 65, 128, 4, 4, 64, 16
LR, WEIGHT_DECAY, CLIP = 3e-4, 0.1, 1.0
ELEMENTS = (16, 64, 512)  # the MLP's hidden activations: B, T, 4d
WARMUP_CALLS, CHECK_CALLS = 3, 3

EAGER, CAPTURED, TORCH = "rill eager", "rill captured", "torch eager"
BASE_EAGER, BASE_CAPTURED = EAGER + harness.BASE, CAPTURED + harness.BASE
CASES = {"step": "ms per training step", "erf": "ns per element", "gelu": "ns per element",
         "gelu_grad": "ns per element", "matmul 3d@2d": "ms", "matmul 3d@2d fwd+bwd": "ms"}


def gpt_model(fw):
    nn, F = fw.nn, fw.nn.functional

    def matrix(rows, cols):
        return nn.Parameter(fw.zeros(rows, cols))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.w_qkv, self.b_qkv = matrix(D, 3 * D), nn.Parameter(fw.zeros(3 * D))
            self.w_proj, self.b_proj = matrix(D, D), nn.Parameter(fw.zeros(D))
            self.w_fc, self.b_fc = matrix(D, 4 * D), nn.Parameter(fw.zeros(4 * D))
            self.w_out, self.b_out = matrix(4 * D, D), nn.Parameter(fw.zeros(D))

        def forward(self, x, mask):
            b, t, c = x.shape
            q, k, v = (self.ln1(x) @ self.w_qkv + self.b_qkv).split(D, dim=2)
            q, k, v = (z.reshape(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            att = F.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS)) + mask,
                            dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + (y @ self.w_proj + self.b_proj)
            return x + (F.gelu(self.ln2(x) @ self.w_fc + self.b_fc) @ self.w_out + self.b_out)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D)
            self.pos = nn.Parameter(fw.zeros(SEQ, D))
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.norm = nn.LayerNorm(D)
            self.head = matrix(D, VOCAB)
            self.mask = fw.tensor(np.triu(np.full((SEQ, SEQ), -np.inf, np.float32), 1))

        def forward(self, tokens):
            h = self.embed(tokens) + self.pos
            for block in self.blocks:
                h = block(h, self.mask)
            return self.norm(h) @ self.head
    return GPT()


def gpt_step(fw, clip_grad_norm_):
    """step(x, y) -> loss, x, y: one AdamW step of the model in `fw` (rill or torch)."""
    F = fw.nn.functional
    tokens = np.random.default_rng(0).integers(0, VOCAB, (BATCH, SEQ + 1))
    net = gpt_model(fw)
    weights = model_weights({n: tuple(p.shape) for n, p in net.named_parameters()})
    net.load_state_dict({**net.state_dict(), **{n: fw.tensor(w) for n, w in weights.items()}})
    params = list(net.parameters())
    opt = fw.optim.AdamW([{"params": [p for p in params if p.ndim >= 2]},
                          {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                         lr=LR, weight_decay=WEIGHT_DECAY)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy((net(x)).reshape(-1, VOCAB), y)
        loss.backward()
        clip_grad_norm_(params, CLIP)
        opt.step()
        return loss
    return step, fw.tensor(tokens[:, :-1]), fw.tensor(tokens[:, 1:].reshape(-1))


def kernel_case(fw, case: str):
    """call() running one op of the step at its shape, in rill or torch."""
    rng = np.random.default_rng(1)
    x, g = (fw.tensor(rng.standard_normal(ELEMENTS).astype(np.float32)) for _ in range(2))
    if case.startswith("matmul"):
        a = fw.tensor(rng.standard_normal((16, 64, 128)).astype(np.float32))
        w = fw.tensor(rng.standard_normal((128, 512)).astype(np.float32))
        if case == "matmul 3d@2d":
            return lambda: a @ w
        a.requires_grad_(True)
        w.requires_grad_(True)
        cotangent = fw.tensor(rng.standard_normal((16, 64, 512)).astype(np.float32))
        return lambda: (a @ w).backward(cotangent)
    if case == "erf":
        return lambda: fw.erf(x)
    if case == "gelu":
        return lambda: fw.nn.functional.gelu(x)
    if fw.__name__ == "torch":
        return lambda: fw.ops.aten.gelu_backward(g, x)
    from rill.ops.elementwise import _gelu_vjp  # the rule backward calls, in every tree
    return lambda: _gelu_vjp(g, None, x)


def setup(label: str, case: str):
    """In the variant's worker: its call, and the first CHECK_CALLS losses (a step's case)."""
    if label == TORCH:
        import torch as fw
        clip = fw.nn.utils.clip_grad_norm_
    else:
        import rill as fw
        clip = fw.optim.clip_grad_norm_
    if case != "step":
        return kernel_case(fw, case), []
    step, x, y = gpt_step(fw, clip)
    call = fw.capture(step) if label == CAPTURED else step
    return (lambda: call(x, y)), [float(call(x, y).detach()) for _ in range(CHECK_CALLS)]


def per_element(case: str) -> float:
    """ms -> ns per element for the elementwise cases."""
    return 1.0 if case not in ("erf", "gelu", "gelu_grad") else 1e6 / math.prod(ELEMENTS)


def main(argv=None) -> None:
    parser = harness.rotation_parser(__doc__, repeats=60, block=10,
                                     quick="few repeats, short pauses", base=True)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.block = 4, 2
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S
    report = {"machine": harness.machine(), "blas": blas(), "base": args.base, "cases": {}}
    print(f"BLAS: {report['blas']}", flush=True)
    modules, first_paths = harness.with_base({EAGER: "rill", CAPTURED: "rill", TORCH: "torch"},
                                             args.base)
    procs, conns, skipped, _ = harness.start(modules, setup, WARMUP_CALLS,
                                             first_paths=first_paths)
    for label, why in skipped.items():
        print(f"{label} skipped ({why})")
    try:
        for case, unit in CASES.items():
            if args.cases and not any(word in case for word in args.cases):
                continue
            chosen = conns if case == "step" else \
                {k: c for k, c in conns.items() if k not in (CAPTURED, BASE_CAPTURED)}
            first = harness.set_up(chosen, case)
            if case == "step":
                ref = first[EAGER]
                for label, losses in first.items():
                    if not np.allclose(losses, ref, rtol=1e-4, atol=1e-5):
                        raise SystemExit(f"{label}'s first losses {losses} are not {EAGER}'s "
                                         f"{ref}")
            samples = harness.time_in_rotation(chosen, args.repeats, args.block, settle)
            scale = per_element(case)
            medians = {k: statistics.median(v) * scale for k, v in samples.items()}
            report["cases"][case] = {"unit": unit, "median": medians,
                                     "min": {k: min(v) * scale for k, v in samples.items()},
                                     "first_losses": first}
            torch_median = medians.get(TORCH)
            print(f"{case} ({unit}, medians of {args.repeats}):")
            for label, value in medians.items():
                ratio = f"  {value / torch_median:6.2f}x torch" if torch_median else ""
                print(f"  {label:22s} {value:10.4g}{ratio}")
            if BASE_EAGER in medians:
                print(f"  rill eager now / @base: {medians[EAGER] / medians[BASE_EAGER]:.3f}")
    finally:
        harness.stop(procs, conns)
    harness.finish(args, report, types.SimpleNamespace(print=print))


if __name__ == "__main__":
    main()
