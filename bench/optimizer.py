"""An Adam update over 10M float32 parameters: rill eager and captured against PyTorch's
three CPU implementations, with the memory-bandwidth floor every one of them is bound by.

Cases (the gradients are set once and never recomputed: only the update is timed):
    Adam, 20 tensors      ten Linear layers' weights and biases, nine 1024x1024 and one
                          512x1024: 9,971,200 parameters (lr 1e-3, betas (0.9, 0.999))
    Adam, one tensor      one (10,000,000,) tensor
    AdamW, both layouts   the same with AdamW, weight_decay 0.01
Variants, each one call of `opt.step()`:
    rill eager            rill.optim.Adam / AdamW
    rill captured         `rill.capture` of a step that sets each parameter's .grad from its
                          argument and calls opt.step() (the grads are the captured
                          function's arguments, so the graph reads no outside tensor)
    torch foreach=False   torch.optim.Adam / AdamW, one parameter at a time
    torch foreach=True    the multi-tensor implementation
    torch fused=True      the fused kernel (skipped with a note where this torch has no CPU
                          version)
    numpy copyto 40 MB    np.copyto of a 10M float32 array: the copy bandwidth the floor uses

Every update must read p, g, m, v and write p, m, v: 7 x 4 bytes per parameter (280 MB for
10M). The floor row is those bytes over the copy bandwidth (2 x 40 MB, read and written, over
the copy's median time), measured in the same rotation as the updates.

All variants start from the same float32 parameters and gradients. Before timing, each
variant's parameters after its first steps are compared with rill eager's (tolerance 1e-5
relative to each parameter, or to lr where the parameter is smaller; the error relative to
the largest change from the start is printed too), and the script stops if any differs. The
first call of the captured step traces and compiles: it is a checked call, never a timed one.

As in bench/capture.py, each variant runs in its own process (bench/harness.py; thread counts
left at each library's default: PyTorch's implementations may use every core, rill's NumPy
kernels use one) and the parent rotates blocks of consecutive calls between them, with a
pause between blocks. The tables give medians and minimums in ms per step, the effective
bandwidth (bytes touched over the median), and ratios to the fastest PyTorch variant.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/optimizer.py   # a few minutes
    python bench/optimizer.py --quick                 # smoke run: 1M parameters, seconds
    python bench/optimizer.py --cases "Adam," --repeats 60 --json optimizer.json
"""
from __future__ import annotations

import os
import statistics
import warnings

import numpy as np

# bench/harness.py and bench/capture.py: run as `python bench/optimizer.py`, the script's
# folder is on sys.path
import harness
from capture import blas

LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01
CHECK_STEPS = 3            # steps whose resulting parameters are compared across variants
WARMUP_CALLS = 2           # after the checked steps, before any timing
BYTES_PER_PARAM = 7 * 4    # read p, g, m, v; write p, m, v; float32
COPY_N = 10_000_000        # the copy: a 40 MB float32 array

# nine 1024x1024 Linear layers and one 1024 -> 512, weights (out, in) and biases
SPLIT = [s for out in [1024] * 9 + [512] for s in ((out, 1024), (out,))]
SINGLE = [(10_000_000,)]
QUICK_SPLIT = [s for out in [256] * 3 + [128] for s in ((out, 1024), (out,))]
QUICK_SINGLE = [(1_000_000,)]

EAGER, CAPTURED = "rill eager", "rill captured"
TORCH_LOOP, TORCH_FOREACH, TORCH_FUSED = ("torch foreach=False", "torch foreach=True",
                                          "torch fused=True")
TORCHES = (TORCH_LOOP, TORCH_FOREACH, TORCH_FUSED)
COPY = "numpy copyto 40 MB"
MODULES = {EAGER: "rill", CAPTURED: "rill", TORCH_LOOP: "torch", TORCH_FOREACH: "torch",
           TORCH_FUSED: "torch", COPY: "numpy"}
CASES = {"Adam, 20 tensors": ("adam", "split"), "Adam, one tensor": ("adam", "single"),
         "AdamW wd 0.01, 20 tensors": ("adamw", "split"),
         "AdamW wd 0.01, one tensor": ("adamw", "single")}


# ---- data: the same arrays for every variant -----------------------------------------------

def shapes_of(layout: str, quick: bool) -> list[tuple]:
    if layout == "split":
        return QUICK_SPLIT if quick else SPLIT
    return QUICK_SINGLE if quick else SINGLE


def data(shapes: list[tuple]):
    """Float32 parameters (matrices scaled by 1/sqrt(fan-in), biases small) and gradients
    (about 1e-2), made alike for every variant."""
    rng = np.random.default_rng(0)
    params, grads = [], []
    for shape in shapes:
        z = rng.standard_normal(shape, dtype=np.float32)
        params.append(z / np.float32(np.sqrt(shape[1])) if len(shape) == 2 else z * 0.02)
        grads.append(rng.standard_normal(shape, dtype=np.float32) * np.float32(1e-2))
    return params, grads


def flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays])


# ---- variants ------------------------------------------------------------------------------

def rill_case(kind: str, shapes, captured: bool):
    """(call, read): call() runs one step; read() the parameters as one flat array."""
    import rill
    ps, gs = data(shapes)
    params = [rill.nn.Parameter(rill.tensor(p)) for p in ps]
    grads = [rill.tensor(g) for g in gs]
    opt = (rill.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS) if kind == "adam" else
           rill.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY))
    if not captured:
        for p, g in zip(params, grads):
            p.grad = g
        return opt.step, (lambda: flat(p.numpy() for p in params))

    def step(grads):
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    fn = rill.capture(step)
    return (lambda: fn(grads)), (lambda: flat(p.numpy() for p in params))


def torch_case(label: str, kind: str, shapes):
    import torch
    ps, gs = data(shapes)
    params = [torch.nn.Parameter(torch.from_numpy(p)) for p in ps]
    for p, g in zip(params, gs):
        p.grad = torch.from_numpy(g)
    how = {TORCH_LOOP: {"foreach": False}, TORCH_FOREACH: {"foreach": True},
           TORCH_FUSED: {"fused": True}}[label]
    opt = (torch.optim.Adam(params, lr=LR, betas=BETAS, eps=EPS, **how) if kind == "adam" else
           torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY,
                             **how))
    return opt.step, (lambda: flat(p.detach().numpy() for p in params))


def copy_case():
    src = np.random.default_rng(0).standard_normal(COPY_N, dtype=np.float32)
    dst = np.empty_like(src)
    return (lambda: np.copyto(dst, src)), (lambda: None)


def setup(label: str, what):
    """Run in the variant's worker: its call, and the parameters after its first
    CHECK_STEPS steps, and this process's torch thread count (for the report)."""
    case, quick = what
    kind, layout = CASES[case]
    shapes = shapes_of(layout, quick)
    if label == COPY:
        call, read = copy_case()
    elif label in (EAGER, CAPTURED):
        call, read = rill_case(kind, shapes, captured=label == CAPTURED)
    else:
        call, read = torch_case(label, kind, shapes)
    with warnings.catch_warnings():
        if label in (EAGER, CAPTURED):
            # a CaptureWarning (an outside tensor read, say) would mean the captured graph is
            # not the update this benchmark means to time
            import rill
            warnings.simplefilter("error", rill.CaptureWarning)
        for _ in range(CHECK_STEPS):
            call()
    threads = None
    if label in TORCHES:
        import torch
        threads = torch.get_num_threads()
    return call, (read(), threads)  # not a dict: the harness takes a dict for a failure


# ---- checks and report ---------------------------------------------------------------------

def check(case: str, quick: bool, first: dict) -> dict:
    """Every variant's parameters after CHECK_STEPS steps against rill eager's: the same
    update, or stop. Returns each variant's (max error relative to |parameter| + lr, max error
    relative to the largest change from the start)."""
    start = flat(data(shapes_of(CASES[case][1], quick))[0])
    ref = first[EAGER][0]
    ref_change = float(np.max(np.abs(ref - start)))
    errors = {}
    for label, got in first.items():
        if label in (EAGER, COPY):
            continue
        p = got[0]
        rel = float(np.max(np.abs(p - ref) / (np.abs(ref) + LR)))
        errors[label] = (rel, float(np.max(np.abs(p - ref))) / ref_change)
        # relative to the parameter, or to the learning rate where the parameter is smaller
        # (near 0, rounding of the update is all that differs)
        if not np.all(np.abs(p - ref) <= 1e-5 * (np.abs(ref) + LR)):
            raise SystemExit(f"{case}: {label}'s parameters after {CHECK_STEPS} steps differ "
                             f"from {EAGER}'s (max relative error {rel:.2e}, tolerance 1e-5 "
                             "of the parameter or of lr, whichever is larger)")
    return errors


def table(case: str, n_params: int, samples: dict, medians: dict, floor_ms: float | None):
    from rich.table import Table
    n = len(next(iter(samples.values())))
    torches = {k: medians[k] for k in TORCHES if k in medians}
    best = min(torches, key=torches.get) if torches else None
    t = Table(title=f"{case} ({n_params:,} parameters): ms per step, median of {n}")
    for col in ("variant", "median ms", "min ms", "GB/s touched",
                f"x {best}" if best else "x torch"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    touched = BYTES_PER_PARAM * n_params / 1e9
    for label, vals in samples.items():
        if label == COPY:
            continue
        t.add_row(label, f"{medians[label]:.2f}", f"{min(vals):.2f}",
                  f"{touched / (medians[label] / 1e3):.1f}",
                  f"{medians[label] / torches[best]:.2f}" if best else "-")
    if floor_ms is not None:
        t.add_row(f"floor: {touched * 1e3:.0f} MB at copy bandwidth", f"{floor_ms:.2f}", "",
                  f"{touched / (floor_ms / 1e3):.1f}",
                  f"{floor_ms / torches[best]:.2f}" if best else "-")
    return t


def main(argv=None) -> None:
    parser = harness.rotation_parser(__doc__, repeats=40, block=5, unit="steps",
                                     quick="1M parameters, few repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.block = 6, 3
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S

    from rich.console import Console
    console = Console()
    procs, conns, skipped, _ = harness.start(MODULES, setup, WARMUP_CALLS)
    for label, why in skipped.items():
        console.print(f"{label} skipped ({why})")
    if EAGER not in conns:
        raise SystemExit(f"rill could not be imported: {skipped}")
    report = {"machine": harness.machine(), "blas": blas(), "repeats": args.repeats,
              "block": args.block, "skipped": skipped, "cases": {}}
    console.print(f"BLAS: {report['blas']}")
    try:
        if TORCH_FUSED in conns:  # fused=True on CPU is recent: try it once, drop it if absent
            conns[TORCH_FUSED].send(("setup", (next(iter(CASES)), True)))
            answer = conns[TORCH_FUSED].recv()
            if isinstance(answer, dict):  # the harness's form of a failure
                why = answer["error"].strip().splitlines()[-1]
                console.print(f"{TORCH_FUSED} skipped ({why})")
                skipped[TORCH_FUSED] = why
                procs.pop(TORCH_FUSED).join(timeout=10)
                conns.pop(TORCH_FUSED)
        for case, (_, layout) in CASES.items():
            if args.cases and not any(word in case for word in args.cases):
                continue
            n_params = sum(int(np.prod(s)) for s in shapes_of(layout, args.quick))
            first = harness.set_up(conns, (case, args.quick))
            errors = check(case, args.quick, first)
            load_before = os.getloadavg()
            samples = harness.time_in_rotation(conns, args.repeats, args.block, settle)
            load_after = os.getloadavg()
            medians = {k: statistics.median(v) for k, v in samples.items()}
            # copy bandwidth: 40 MB read and 40 MB written per median copy
            copy_gbs = 2 * 4 * COPY_N / 1e9 / (medians[COPY] / 1e3) if COPY in medians else None
            floor_ms = (BYTES_PER_PARAM * n_params / 1e9 / copy_gbs * 1e3) if copy_gbs else None
            console.print(table(case, n_params, samples, medians, floor_ms))
            console.print("  agreement with rill eager after "
                          f"{CHECK_STEPS} steps (max error relative to |parameter| + lr; "
                          "relative to the largest change): " + ", ".join(
                              f"{k} {a:.1e}; {b:.1e}" for k, (a, b) in errors.items()))
            if copy_gbs:
                console.print(f"  copy bandwidth {copy_gbs:.1f} GB/s (np.copyto 40 MB, median "
                              f"{medians[COPY]:.2f} ms); torch threads "
                              f"{ {k: v[1] for k, v in first.items() if v[1]} }")
            console.print("  load average (1, 5, 15 min) before timing "
                          f"{', '.join(f'{v:.2f}' for v in load_before)}; after "
                          f"{', '.join(f'{v:.2f}' for v in load_after)}")
            torches = {k: medians[k] for k in TORCHES if k in medians}
            ratios = {}
            if torches:
                best = min(torches, key=torches.get)
                for label in (EAGER, CAPTURED):
                    ratios[f"{label} / {best} (fastest torch)"] = medians[label] / medians[best]
            if CAPTURED in medians:
                ratios[f"{EAGER} / {CAPTURED}"] = medians[EAGER] / medians[CAPTURED]
            if floor_ms:
                ratios[f"{CAPTURED} / floor"] = medians[CAPTURED] / floor_ms
            for name, value in ratios.items():
                console.print(f"  {name}: [bold]{value:.2f}[/bold]")
            report["cases"][case] = {
                "parameters": n_params, "median_ms": medians,
                "min_ms": {k: min(v) for k, v in samples.items()}, "ratios": ratios,
                "copy_GBps": copy_gbs, "floor_ms": floor_ms, "errors": errors,
                "load_average": {"before": load_before, "after": load_after},
                "samples_ms": samples}
    finally:
        harness.stop(procs, conns)
    harness.finish(args, report, console)


if __name__ == "__main__":
    main()
