"""Training steps of the models people train (issue 31): rill beside PyTorch, side by side.

Workloads, each one full training step (forward, loss, backward, optimizer update):
    alexnet    AlexNet as in the convnet-benchmarks of the TensorFlow paper's Table 1 (conv
               11x11/4 64, 5x5 192, 3x3 384-256-256, three max pools; FC 4096-4096-1000),
               batch 8 of 3x224x224
    overfeat   Overfeat "fast" (conv 11x11/4 96, 5x5 256, 3x3 512-1024-1024, three 2x2 max
               pools; FC 3072-4096-1000), batch 4 of 3x231x231
    vgg11      VGG-11 / OxfordNet model A (eight 3x3 convs, five max pools; FC 4096-4096-
               1000), batch 2 of 3x224x224
    googlenet  GoogLeNet / Inception v1 (nine inception modules with 5x5 branches; no
               auxiliary heads, no LRN), batch 4 of 3x224x224
    resnet18   ResNet-18 with BatchNorm (training mode), batch 4 of 3x224x224
    gpt        the minGPT step of bench/gpt_step.py (4 layers, d 128, 4 heads, context 64,
               batch 16; clip_grad_norm_, AdamW), imported from there
    lstm       an LSTM language model over 256 tokens: Embedding(256, 128),
               nn.LSTM(128 -> 256), Linear(256, 256); T 50, batch 32
The conv nets train with cross-entropy over 1000 classes and SGD (lr 0.001, momentum 0.9:
at 0.01, the usual rate for batch 128, these small fixed batches drove AlexNet's weights to
overflow within twenty steps, and a step over infinities is not the step being timed), the
LSTM with plain SGD (lr 0.1). Dropout is left out everywhere: its random masks cannot be
the same in two frameworks, and the losses are checked equal.

Variants, each in --processes processes of its own (2 by default, fresh for every model, their
samples pooled: one process's luck moved a variant's median by up to 30 %) (bench/harness.py:
blocks of steps rotate between the processes with a pause, so machine noise falls on all
alike while no two run at once):
rill eager; rill captured (the same step function under `rill.capture`); PyTorch eager;
torch.compile of the same step function (the graph breaks at backward(); the optimizer step
compiles on its own). torch.compile is skipped with a note where it fails on the machine.

Every variant starts from the same float32 weights and data, made in NumPy from seeds
(capture.model_weights: normal, 1/sqrt(fan-in) for matrices and kernels), and the
losses of the first CHECK_CALLS steps are checked against rill eager's before any timing;
the first of them is the first step's loss, the others follow one update each. The first
call of a captured or compiled step traces and compiles: it is checked, never timed, and
its time is reported. Threads: every process runs with --threads (2 by default): rill's
own pool (RILL_NUM_THREADS), the BLAS and OpenMP libraries threadpoolctl finds, and
torch.set_num_threads; the script prints what threadpoolctl reports in each process (BLAS
kernel family, threads). On a host busier than its cores, 2 threads measure the scheduler
more than the kernels: torch's OpenMP regions wait at their barriers for a descheduled
thread, and its eager steps of many small ops (ResNet-18, the LSTM) stretched 5-10x in such
a run; --threads 1 compares the kernels there.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/models.py
    python bench/models.py --models alexnet,gpt --repeats 20 --json models.json
    python bench/models.py --profile alexnet          # rill.profiler beside torch.profiler
    python bench/models.py --quick --variants eager,captured,torch   # smoke run, tiny shapes

--quick shrinks every workload (batch 2, small images, an eighth of the channels, a
one-layer GPT, a short LSTM): the code paths, not the figures.
"""
from __future__ import annotations

import os
import statistics
import time
import zlib
from dataclasses import dataclass

import numpy as np

# bench/harness.py, bench/capture.py, bench/gpt_step.py: run as `python bench/models.py`,
# the script's folder is on sys.path (and spawned workers get the same sys.path)
import harness
from capture import model_weights

EAGER, CAPTURED, TORCH, COMPILED = "rill eager", "rill captured", "torch eager", "torch.compile"
VARIANTS = {"eager": EAGER, "captured": CAPTURED, "torch": TORCH, "compile": COMPILED}
MODULES = {EAGER: "rill", CAPTURED: "rill", TORCH: "torch", COMPILED: "torch"}

CHECK_CALLS = 2            # steps whose losses are compared across variants
WARMUP_STEPS = 12          # untimed steps after them (see main)
# float32 in both frameworks, different summation orders (convolution algorithms, GEMM
# blocking); the second loss carries one update's worth of them
RTOL, ATOL = 2e-4, 1e-5
CONV_LR, CONV_MOMENTUM, LSTM_LR = 0.001, 0.9, 0.1
CLASSES = 1000
QUICK_DIV = 8              # --quick: channels, FC widths and classes divided by this


@dataclass(frozen=True)
class Workload:
    kind: str              # "conv" (a net from NETS), "gpt" or "lstm"
    batch: int
    size: int              # image side, or sequence length
    quick_batch: int
    quick_size: int        # the smallest side that still leaves every pool an input
    what: str


WORKLOADS = {
    "alexnet": Workload("conv", 8, 224, 2, 63, "AlexNet, batch 8, 224x224"),
    "overfeat": Workload("conv", 4, 231, 2, 71, "Overfeat (fast), batch 4, 231x231"),
    "vgg11": Workload("conv", 2, 224, 2, 32, "VGG-11 (OxfordNet), batch 2, 224x224"),
    "googlenet": Workload("conv", 4, 224, 2, 32, "GoogLeNet, batch 4, 224x224"),
    "resnet18": Workload("conv", 4, 224, 2, 64, "ResNet-18, batch 4, 224x224"),
    "gpt": Workload("gpt", 16, 64, 2, 16, "minGPT, 4 layers d 128, ctx 64, batch 16, AdamW"),
    "lstm": Workload("lstm", 32, 50, 4, 8, "LSTM LM 128->256, T 50, batch 32, SGD"),
}
LSTM_VOCAB, LSTM_IN, LSTM_HIDDEN = 256, 128, 256

# ---- the models, written once for rill and torch (their nn APIs agree here) ----------------

# (kind, channels out, kernel, stride, padding) and (kind, kernel, stride) for max pools
ALEXNET = [("conv", 64, 11, 4, 2), ("pool", 3, 2), ("conv", 192, 5, 1, 2), ("pool", 3, 2),
           ("conv", 384, 3, 1, 1), ("conv", 256, 3, 1, 1), ("conv", 256, 3, 1, 1),
           ("pool", 3, 2)]
OVERFEAT = [("conv", 96, 11, 4, 0), ("pool", 2, 2), ("conv", 256, 5, 1, 0), ("pool", 2, 2),
            ("conv", 512, 3, 1, 1), ("conv", 1024, 3, 1, 1), ("conv", 1024, 3, 1, 1),
            ("pool", 2, 2)]
VGG11 = [("conv", 64, 3, 1, 1), ("pool", 2, 2), ("conv", 128, 3, 1, 1), ("pool", 2, 2),
         ("conv", 256, 3, 1, 1), ("conv", 256, 3, 1, 1), ("pool", 2, 2),
         ("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool", 2, 2),
         ("conv", 512, 3, 1, 1), ("conv", 512, 3, 1, 1), ("pool", 2, 2)]
PLAIN = {"alexnet": (ALEXNET, (4096, 4096)), "overfeat": (OVERFEAT, (3072, 4096)),
         "vgg11": (VGG11, (4096, 4096))}
# GoogLeNet's inception modules: 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection;
# "pool" is a 3x3/2 max pool between stages
INCEPTION = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), "pool",
             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
             (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
             (256, 160, 320, 32, 128, 128), "pool",
             (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]


def plain_net(fw, layers, fc, side: int, div: int):
    """Convs with ReLU and max pools, then ReLU dense layers: AlexNet, Overfeat, VGG."""
    nn = fw.nn
    out, channels = [], 3
    for kind, *a in layers:
        if kind == "conv":
            width, k, s, p = max(4, a[0] // div), *a[1:]
            out += [nn.Conv2d(channels, width, k, s, p), nn.ReLU()]
            channels = width
        else:
            (k, s), p = a, 0
            out.append(nn.MaxPool2d(k, s))
        side = (side + 2 * p - k) // s + 1
    out.append(nn.Flatten())
    features = channels * side * side
    for width in (w // div for w in fc):
        out += [nn.Linear(features, width), nn.ReLU()]
        features = width
    out.append(nn.Linear(features, CLASSES // div))
    return nn.Sequential(*out)


def googlenet(fw, div: int):
    nn = fw.nn

    def w(n):
        return max(2, n // div)

    def conv(i, o, k, s=1, p=0):
        return nn.Sequential(nn.Conv2d(i, o, k, s, p), nn.ReLU())

    class Inception(nn.Module):
        def __init__(self, i, c1, r3, c3, r5, c5, proj):
            super().__init__()
            self.b1 = conv(i, w(c1), 1)
            self.b3 = nn.Sequential(conv(i, w(r3), 1), conv(w(r3), w(c3), 3, p=1))
            self.b5 = nn.Sequential(conv(i, w(r5), 1), conv(w(r5), w(c5), 5, p=2))
            self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), conv(i, w(proj), 1))
            self.out = w(c1) + w(c3) + w(c5) + w(proj)

        def forward(self, x):
            return fw.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)

    layers = [conv(3, w(64), 7, 2, 3), nn.MaxPool2d(3, 2, 1), conv(w(64), w(64), 1),
              conv(w(64), w(192), 3, 1, 1), nn.MaxPool2d(3, 2, 1)]
    channels = w(192)
    for spec in INCEPTION:
        if spec == "pool":
            layers.append(nn.MaxPool2d(3, 2, 1))
        else:
            layers.append(Inception(channels, *spec))
            channels = layers[-1].out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(channels, CLASSES // div))


def resnet18(fw, div: int):
    nn, F = fw.nn, fw.nn.functional

    class Basic(nn.Module):
        def __init__(self, i, o, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(i, o, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(o)
            self.conv2 = nn.Conv2d(o, o, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(o)
            self.down = nn.Identity() if stride == 1 and i == o else nn.Sequential(
                nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(h)) + self.down(x))

    widths = [max(4, c // div) for c in (64, 128, 256, 512)]
    layers = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]),
              nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    channels = widths[0]
    for n, width in enumerate(widths):
        layers += [Basic(channels, width, 1 if n == 0 else 2), Basic(width, width, 1)]
        channels = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(channels, CLASSES // div))


def lstm_lm(fw, div: int):
    nn = fw.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(LSTM_VOCAB, LSTM_IN // div)
            self.lstm = nn.LSTM(LSTM_IN // div, LSTM_HIDDEN // div, batch_first=True)
            self.head = nn.Linear(LSTM_HIDDEN // div, LSTM_VOCAB)

        def forward(self, tokens):
            h, _ = self.lstm(self.embed(tokens))
            return self.head(h)
    return LM()


def load_weights(fw, net) -> None:
    """The same float32 values in every framework: capture.model_weights, one parameter at
    a time (VGG-11's first dense layer alone is 400 MB). Buffers (BatchNorm's running
    statistics) keep their frameworks' defaults, alike."""
    for name, p in net.named_parameters():
        value = model_weights({name: tuple(p.shape)})[name]
        net.load_state_dict({name: fw.tensor(value)}, strict=False)


def make_step(fw, model: str, quick: bool):
    """(step, x, y): step(x, y) runs one training step of `model` in `fw` (the rill or torch
    module) and returns its loss."""
    work = WORKLOADS[model]
    F = fw.nn.functional
    batch, size = (work.quick_batch, work.quick_size) if quick else (work.batch, work.size)
    div = QUICK_DIV if quick else 1
    rng = np.random.default_rng(zlib.crc32(model.encode()))
    if work.kind == "gpt":
        import gpt_step as gpt
        if quick:  # its model reads these module constants when it is built
            gpt.LAYERS, gpt.BATCH, gpt.SEQ = 1, batch, size
        clip = fw.nn.utils.clip_grad_norm_ if fw.__name__ == "torch" else \
            fw.optim.clip_grad_norm_
        return gpt.gpt_step(fw, clip)
    if work.kind == "lstm":
        net = lstm_lm(fw, div)
        load_weights(fw, net)
        tokens = rng.integers(0, LSTM_VOCAB, (batch, size + 1))
        x, y = fw.tensor(tokens[:, :-1]), fw.tensor(tokens[:, 1:].reshape(-1))
        opt = fw.optim.SGD(net.parameters(), lr=LSTM_LR)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(net(x).reshape(-1, LSTM_VOCAB), y)
            loss.backward()
            opt.step()
            return loss
        return step, x, y
    if model in PLAIN:
        net = plain_net(fw, *PLAIN[model], size, div)
    else:
        net = {"googlenet": googlenet, "resnet18": resnet18}[model](fw, div)
    load_weights(fw, net)
    x = fw.tensor(rng.standard_normal((batch, 3, size, size)).astype(np.float32))
    y = fw.tensor(rng.integers(0, CLASSES // div, batch))
    opt = fw.optim.SGD(net.parameters(), lr=CONV_LR, momentum=CONV_MOMENTUM)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, x, y


# ---- one process per variant (bench/harness.py) -------------------------------------------

def pin_threads(label: str, threads: int) -> dict:
    """Every thread pool of this process at `threads`; returns what threadpoolctl then
    reports (the BLAS kernel family and threads) and torch's threads. rill's own pool read
    RILL_NUM_THREADS, set by the parent, when the worker imported rill."""
    info: dict = {"rill pool": os.environ.get("RILL_NUM_THREADS")}
    try:
        import threadpoolctl
    except ImportError:
        info["threadpoolctl"] = "not installed: BLAS threads left at their default"
    else:
        threadpoolctl.threadpool_limits(limits=threads)
        info["threadpoolctl"] = [
            {k: lib.get(k) for k in ("user_api", "internal_api", "version", "architecture",
                                     "num_threads")}
            for lib in threadpoolctl.threadpool_info()]
    if MODULES[label] == "torch":
        import torch
        torch.set_num_threads(threads)
        info["torch threads"] = torch.get_num_threads()
        info["torch cpu"] = torch.backends.cpu.get_cpu_capability()
    return info


def variant_of(worker: str) -> str:
    """The variant a worker runs: "rill eager #2" is the second process of "rill eager"."""
    return worker.split(" #")[0]


def setup(worker: str, job: dict):
    """In the variant's worker: its call, and `first`: the losses of its first CHECK_CALLS
    steps, the first call's seconds, the threads, and a profile of one step when asked.
    torch.compile failing is reported as {"skipped": why}, with a call that does nothing.
    `first` goes back as a 1-tuple (harness.receive reads a dict as a worker's failure)."""
    label = variant_of(worker)
    first = {"threads": pin_threads(label, job["threads"])}
    if MODULES[label] == "torch":
        import torch as fw
    else:
        import rill as fw
    step, x, y = make_step(fw, job["model"], job["quick"])
    call = fw.capture(step) if label == CAPTURED else \
        fw.compile(step) if label == COMPILED else step
    losses = []
    try:
        for _ in range(CHECK_CALLS):
            t = time.perf_counter()
            losses.append(call(x, y).item())
            first.setdefault("first_call_s", time.perf_counter() - t)
    except Exception as e:  # noqa: BLE001 -- a compiler that fails here is skipped, noted
        if label != COMPILED:
            raise
        first["skipped"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
        return (lambda: None), (first,)
    first["losses"] = losses
    if job.get("profile"):
        first["profile"] = profile_step(fw, lambda: call(x, y), job["top"])
    return (lambda: call(x, y)), (first,)  # a tuple: the harness takes a dict for a failure


def profile_step(fw, call, top: int) -> dict:
    """One step (after a warm one) under the framework's profiler: its wall ms, the summed
    self time of its ops, and the `top` ops by self time as (name, calls, ms)."""
    call()
    t = time.perf_counter()
    if fw.__name__ == "torch":
        with fw.profiler.profile(activities=[fw.profiler.ProfilerActivity.CPU]) as prof:
            call()
        wall = time.perf_counter() - t
        rows = [(r.key, r.count, r.self_cpu_time_total / 1e3) for r in prof.key_averages()]
    else:
        with fw.profiler.profile() as prof:
            call()
        wall = time.perf_counter() - t
        rows = [(r.key, r.count, r.self_time * 1e3) for r in prof.key_averages("op")]
    rows.sort(key=lambda r: -r[2])
    return {"wall_ms": wall * 1e3, "self_ms": sum(r[2] for r in rows), "top": rows[:top]}


def check(model: str, first: dict) -> None:
    """Every variant's first losses against rill eager's (torch eager's if rill eager is
    not run): equal work, or stop. torch.compile disagreeing is marked skipped instead, with
    both losses: that is PyTorch's compiler at fault (seen: zero convolution gradients in
    the --quick AlexNet, whose last pool leaves 1x1), not something rill can be timed on."""
    ref_label = EAGER if EAGER in first else next(iter(first))
    ref = first[ref_label]["losses"]
    for label, got in first.items():
        if "losses" in got and not np.allclose(got["losses"], ref, rtol=RTOL, atol=ATOL):
            why = (f"{model}: {label}'s first losses {got['losses']} are not {ref_label}'s "
                   f"{ref} (rtol {RTOL}, atol {ATOL})")
            if label != COMPILED:
                raise SystemExit(why)
            got["skipped"] = why


# ---- report --------------------------------------------------------------------------------

def ratios(medians: dict) -> dict:
    out = {}
    for num, den, name in ((EAGER, TORCH, "rill eager / torch eager"),
                           (CAPTURED, TORCH, "rill captured / torch eager"),
                           (CAPTURED, EAGER, "rill captured / rill eager"),
                           (COMPILED, TORCH, "torch.compile / torch eager")):
        if num in medians and den in medians:
            out[name] = medians[num] / medians[den]
    return out


def summary_table(report: dict, labels: list):
    from rich.table import Table
    t = Table(title=f"ms per training step, medians of {report['repeats']} "
                    f"({report['threads']} threads per process)")
    t.add_column("workload")
    for label in labels:
        t.add_column(label, justify="right")
    names = ("rill eager / torch eager", "rill captured / torch eager",
             "rill captured / rill eager")
    for name in names:
        t.add_column(name.replace(" / ", " /\n"), justify="right")
    for model, r in report["models"].items():
        cells = [f"{r['median_ms'][label]:.1f}" if label in r["median_ms"] else
                 ("skipped" if label in r["skipped"] else "-") for label in labels]
        cells += [f"{r['ratios'][n]:.2f}" if n in r["ratios"] else "-" for n in names]
        t.add_row(WORKLOADS[model].what if not report["quick"] else model, *cells)
    return t


def profile_table(model: str, first: dict, top: int):
    """The top ops of each variant's profiled step, side by side."""
    from rich.table import Table
    profiled = {label: f["profile"] for label, f in first.items() if "profile" in f}
    t = Table(title=f"{model}: top ops by self time, one step (ms)")
    t.add_column("#", justify="right")
    for label, p in profiled.items():
        t.add_column(f"{label}\n(step {p['wall_ms']:.0f} ms, ops {p['self_ms']:.0f} ms)")
        t.add_column("ms", justify="right")
    for i in range(top):
        cells = [str(i + 1)]
        for p in profiled.values():
            if i < len(p["top"]):
                name, calls, ms = p["top"][i]
                cells += [f"{name[:38]} x{calls}", f"{ms:.1f}"]
            else:
                cells += ["", ""]
        t.add_row(*cells)
    return t


def describe_threads(console, first: dict) -> None:
    for label, f in first.items():
        th = f["threads"]
        libs = th.get("threadpoolctl")
        if isinstance(libs, list):
            libs = "; ".join(f"{lib['internal_api']} {lib['version']} "
                             f"{lib['architecture'] or ''} x{lib['num_threads']}".replace("  ", " ")
                             for lib in libs)
        extra = f", torch {th['torch threads']} threads ({th['torch cpu']})" \
            if "torch threads" in th else ""
        console.print(f"  {label}: rill pool {th['rill pool']}; {libs}{extra}")


# ---- main ----------------------------------------------------------------------------------

def parse(argv):
    parser = harness.rotation_parser(__doc__, repeats=10, block=2, unit="steps", cases=False,
                                     quick="tiny shapes, 3 repeats, short pauses")
    parser.add_argument("--models", default=",".join(WORKLOADS),
                        help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of {','.join(VARIANTS)}")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of every pool in every process (rill, BLAS, torch)")
    parser.add_argument("--profile", metavar="MODEL",
                        help="instead of timing: one step of MODEL under rill.profiler and "
                             "torch.profiler, the top ops side by side")
    parser.add_argument("--top", type=int, default=15, help="ops shown by --profile")
    parser.add_argument("--processes", type=int, default=2,
                        help="processes per variant, their samples pooled (1 under --quick "
                             "and --profile)")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    if args.profile:
        args.models = [args.profile]
    for m in args.models:
        if m not in WORKLOADS:
            parser.error(f"unknown model {m!r}; use some of {', '.join(WORKLOADS)}")
    for v in args.variants:
        if v not in VARIANTS:
            parser.error(f"unknown variant {v!r}; use some of {', '.join(VARIANTS)}")
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    if args.quick:
        args.repeats, args.block = 3, 1
    if args.quick or args.profile:
        args.processes = 1
    return args


def run_model(model: str, conns: dict, args, settle: float, console,
              threads_shown: bool) -> dict:
    """Sets `model` up in every worker, checks the first losses, then times it in rotation
    (or, under --profile, prints the profiles); returns its part of the --json report."""
    job = {"model": model, "quick": args.quick, "threads": args.threads,
           "profile": bool(args.profile), "top": args.top}
    # one worker at a time: a profile, or the first call's time, taken while the other
    # workers build their models would time the contention
    every = {worker: harness.set_up({worker: conn}, job)[worker][0]
             for worker, conn in conns.items()}
    first = {worker: f for worker, f in every.items() if worker == variant_of(worker)}
    check(model, first)
    for worker, f in every.items():  # a variant's other processes: the same losses, or stop
        if worker not in first:
            check(model, {**first, variant_of(worker): f})
    if not threads_shown:
        console.print(f"threads ({args.threads} per process; threadpoolctl):")
        describe_threads(console, first)
    check(model, first)
    notes = {label: f["skipped"] for label, f in first.items() if "skipped" in f}
    for label, why in notes.items():
        console.print(f"{model}: {label} skipped ({why})")
    ran = {label: f for label, f in first.items() if label not in notes}
    console.print(f"{model}: first losses agree: " + ", ".join(
        f"{label} {f['losses'][0]:.6g}" for label, f in ran.items()) + "; first call s: " +
        ", ".join(f"{label} {f['first_call_s']:.2f}" for label, f in ran.items()))
    out = {"what": WORKLOADS[model].what, "skipped": notes,
           "first_call_s": {k: f["first_call_s"] for k, f in ran.items()},
           "first_losses": {k: f.get("losses") for k, f in first.items()},
           "threads": {k: f["threads"] for k, f in first.items()}}
    if args.profile:
        console.print(profile_table(model, ran, args.top))
        return {**out, "profile": {k: f["profile"] for k, f in ran.items()}}
    # each variant's processes share its repeats, rotating with the others'; their samples
    # are pooled: a process's luck (where its threads and memory land) moved a variant's
    # median by 10-30 % from one process to the next, the same code in the same run
    timed = {k: c for k, c in conns.items() if variant_of(k) in ran}
    per_process = -(-args.repeats // args.processes)
    by_worker = harness.time_in_rotation(timed, per_process, args.block, settle)
    samples = {label: [] for label in ran}
    for worker, values in by_worker.items():
        samples[variant_of(worker)].extend(values)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    out.update(median_ms=medians, min_ms={k: min(v) for k, v in samples.items()},
               ratios=ratios(medians), samples_ms=samples, processes=args.processes,
               process_medians_ms={k: statistics.median(v) for k, v in by_worker.items()})
    console.print(f"{model}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in medians.items()) +
                  "".join(f"; {n} {r:.2f}" for n, r in out["ratios"].items()))
    return out


def main(argv=None) -> None:
    args = parse(argv)
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        console = Console(width=180)
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S
    labels = [VARIANTS[v] for v in VARIANTS if v in args.variants]
    # read by rill's kernels/numpy/parallel.py when a worker imports rill
    os.environ["RILL_NUM_THREADS"] = str(args.threads)
    # Untimed steps past the checked ones: a captured step's first TRIAL_WARM_CALLS +
    # 2 * TRIAL_CALLS calls (capture/executor.py: 3, then 5 each way) time its straight-line
    # and thread-pool schedules before it keeps one; timing them measured the trials (VGG-11
    # captured: 1.66x eager).
    workers = {label + (f" #{i + 1}" if i else ""): MODULES[label]
               for i in range(args.processes) for label in labels}
    report = {"machine": harness.machine(), "threads": args.threads, "quick": args.quick,
              "repeats": args.repeats, "block": args.block, "processes": args.processes,
              "models": {}}
    for model in args.models:
        # fresh processes per model: what one model leaves (caches, a fragmented heap, the
        # other models' captured programs) does not weigh on the next
        procs, conns, skipped, _ = harness.start(workers, setup,
                                                 1 if args.quick else WARMUP_STEPS)
        for worker, why in skipped.items():
            console.print(f"{worker} skipped ({why})")
        try:
            report["models"][model] = run_model(model, conns, args, settle, console,
                                                threads_shown=bool(report["models"]))
        finally:
            harness.stop(procs, conns)
    if not args.profile:
        console.print(summary_table(report, labels))
    harness.finish(args, report, console)


if __name__ == "__main__":
    main()
