"""The TensorFlow paper's language-model experiment (§6.4, Figure 9) in miniature.

An LSTM language model whose vocabulary is large (200k words by default, embedding and
hidden size 512): input embedding -> one LSTM layer -> softmax over the vocabulary, trained
with captured steps (plain SGD) on a synthetic word stream: each word is drawn from the
log-uniform (Zipf, s ~ 1) law over the vocabulary, and half the time it is instead the
successor (id + 1) of the word before, so that the LSTM has something to learn. Figures are
words per second: batch x unroll divided by the median step time over the steps after a
warm-up (the first call traces and compiles the step).

(a) one process: full softmax (logits for every word) against sampled softmax
    (rill.nn.functional.sampled_softmax_loss, log-uniform candidates), and a check that
    the sampled loss goes down;
(b) rill-launch, 1 worker and 1, 2 or 4 parameter servers: the input embedding and the
    softmax's weights (a row of weight and bias per word) are ShardedEmbeddings over the ps
    tasks, the LSTM's weights are placed on the ps (place_on_ps). Sampled softmax gathers
    the true and sampled words' rows from their shards (only those rows travel, and only
    their gradient rows go back); full softmax reads every shard whole and sends a dense
    gradient of it back, since a ps here answers a step in one exchange (see docs/benchmarks-history.md).
    The worker times what it waits for values from the ps and each ps what its programs
    run, so a step splits into worker compute, ps compute and transport.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/lm_sparse.py   # ~9 min
    ... python bench/lm_sparse.py --vocab 20000 --dim 128 --steps 6          # a quick look
    ... python bench/lm_sparse.py --only local                               # (a) only

Writes bench/results/lm_sparse.{json,md} and lm_sparse.png (or .svg without matplotlib).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


# ---- the word stream -----------------------------------------------------------------------

def word_batches(vocab: int, batch: int, unroll: int, count: int, seed: int = 0):
    """`count` (inputs, targets) pairs of int64 arrays [batch, unroll]: Zipf words (the
    log-uniform law the candidate sampler assumes), each replaced with probability 1/2 by
    the previous word + 1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        u = rng.random((batch, unroll + 1))
        words = np.floor(np.exp(u * np.log(vocab + 1.0))).astype(np.int64) - 1
        words = np.clip(words, 0, vocab - 1)
        follow = rng.random((batch, unroll + 1)) < 0.5
        for t in range(1, unroll + 1):
            words[:, t] = np.where(follow[:, t], (words[:, t - 1] + 1) % vocab, words[:, t])
        out.append((words[:, :-1], words[:, 1:]))
    return out


# ---- the model -----------------------------------------------------------------------------

# STEP: both training steps end with opt.zero_grad(), and run as straight-line programs.
# A captured step that leaves .grad set keeps each gradient as a variable of the table's
# shape, so the sparse rows of the embedding's and the softmax's gradients would be written
# into a dense 200k x 512 zero table every step (~0.15-1 s here); zeroed inside the step,
# they stay rows and update the tables in place. parallel=False: "auto" times its first 10
# calls both ways before settling, and on two cores the straight line is what it keeps.

def sampled_loss_over_rows(table, h, labels, num_sampled: int, vocab: int):
    """Sampled softmax whose (vocab, dim + 1) table of [weight | bias] rows is sharded:
    the true and sampled words' rows are looked up (only they travel) and the loss is
    rill's sampled_softmax_loss over those rows, with the classes renumbered as rows of
    the looked-up block. A label that was also sampled is numbered as its sampled row, so
    that accidental hits are still found."""
    import rill
    F = rill.nn.functional
    n, dim = h.shape
    labels = labels.reshape(n, 1)
    sampled, true_count, sampled_count = rill.random.log_uniform_candidate_sampler(
        labels, 1, num_sampled, True, vocab)
    rows = table(rill.concat([sampled, labels.reshape(-1)]))        # [S + n, dim + 1]
    same = labels == sampled.reshape(1, -1)                           # [n, S]
    local = rill.where(same.any(axis=1), rill.argmax(same.astype(rill.int32), axis=1),
                       num_sampled + rill.arange(n, dtype=rill.int64))
    drawn = (rill.arange(num_sampled, dtype=rill.int64), true_count, sampled_count)
    return F.sampled_softmax_loss(rows[:, :dim], rows[:, dim], local.reshape(n, 1), h,
                                  num_sampled, num_sampled + n, sampled_values=drawn).mean()


def make_local(vocab: int, dim: int):
    """(embedding, lstm, softmax weight, softmax bias) in this process."""
    import rill
    from rill import nn
    embed = nn.Embedding(vocab, dim)
    lstm = nn.LSTM(dim, dim, batch_first=True)
    weight = nn.Parameter(rill.randn(vocab, dim) * (dim ** -0.5))
    bias = nn.Parameter(rill.zeros(vocab))
    return embed, lstm, weight, bias


def local_step(vocab: int, dim: int, softmax: str, num_sampled: int, lr: float):
    """A captured training step of the one-process model: step(x, y) -> loss; and a
    function giving the full-softmax loss of a batch (for the check)."""
    import rill
    F = rill.nn.functional
    embed, lstm, weight, bias = make_local(vocab, dim)
    opt = rill.optim.SGD(list(embed.parameters()) + list(lstm.parameters()) +
                         [weight, bias], lr=lr)

    def hidden(x):
        h, _ = lstm(embed(x))
        return h.reshape(-1, dim)

    def loss_of(x, y):
        h = hidden(x)
        if softmax == "full":
            return F.cross_entropy(h @ weight.T + bias, y.reshape(-1))
        return F.sampled_softmax_loss(weight, bias, y.reshape(-1, 1), h, num_sampled,
                                      vocab).mean()

    @rill.capture(parallel=False)  # see STEP
    def step(x, y):
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def full_loss(x, y):
        with rill.no_grad():
            return float(F.cross_entropy(hidden(x) @ weight.T + bias, y.reshape(-1)))
    return step, full_loss


def time_steps(step, batches, warmup: int, steps: int, before=None):
    """(seconds of each timed step, losses of every step)."""
    import rill
    times, losses = [], []
    for i in range(warmup + steps):
        x, y = batches[i % len(batches)]
        x, y = rill.tensor(x), rill.tensor(y)
        if before is not None:
            before()
        start = time.perf_counter()
        losses.append(float(step(x, y)))
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times, losses


def run_local(args, softmax: str, num_sampled: int) -> dict:
    """(a): one process, captured steps."""
    import rill
    rill.manual_seed(0)
    batches = word_batches(args.vocab, args.batch, args.unroll, 8)
    step, full_loss = local_step(args.vocab, args.dim, softmax, num_sampled, args.lr)
    held_out = word_batches(args.vocab, args.batch, args.unroll, 1, seed=99)[0]
    x, y = rill.tensor(held_out[0]), rill.tensor(held_out[1])
    full_before = full_loss(x, y) if args.check else None
    steps = args.steps if softmax == "sampled" else args.full_steps
    times, losses = time_steps(step, batches, args.warmup, steps)
    words = args.batch * args.unroll
    out = {"where": "one process", "softmax": softmax, "num_sampled": num_sampled,
           "median_ms": 1e3 * float(np.median(times)), "steps": len(times),
           "words_per_s": words / float(np.median(times)), "losses": losses}
    if args.check:
        out["full_loss_before_after"] = [full_before, full_loss(x, y)]
    return out


# ---- (b): the job each rank of rill-launch runs ---------------------------------------------

def sharded_table(vocab: int, cols: int, values):
    """A ShardedEmbedding over the job's ps tasks holding `values` (numpy [vocab, cols])."""
    import rill
    from rill import nn
    from rill.distributed.graphs.embedding import ShardedEmbedding
    table = ShardedEmbedding(vocab, cols)
    for k, ((lo, hi), shard) in enumerate(zip(table.bounds, table.shards)):
        setattr(table, f"shard{k}", nn.Parameter(rill.tensor(values[lo:hi]).to(shard.device)))
    return table


def time_ps_programs() -> dict:
    """Seconds this ps spends in its step programs, per phase (pull, serve, contribute,
    apply), counted by wrapping the executor's Program (the ps runs nothing else)."""
    from rill.capture import executor
    spent: dict = {}
    call = executor.Program.__call__

    def timed(self, args):
        start = time.perf_counter()
        try:
            return call(self, args)
        finally:
            parts = str(getattr(self.graph, "name", "")).split(".")
            phase = parts[-2] if parts[-1].isdigit() else parts[-1]  # serve rounds: serve.k
            spent[phase] = spent.get(phase, 0.0) + time.perf_counter() - start
    executor.Program.__call__ = timed
    return spent


def time_worker_waits() -> list:
    """[seconds] the worker has waited for values from other tasks (TaskTransport.recv)."""
    from rill.distributed.graphs import program
    waited = [0.0]
    recv = program.TaskTransport.recv

    def timed(self, key, source, dest):
        if source.task is None:
            return recv(self, key, source, dest)
        start = time.perf_counter()
        try:
            return recv(self, key, source, dest)
        finally:
            waited[0] += time.perf_counter() - start
    program.TaskTransport.recv = timed
    return waited


def job(args) -> None:
    import rill.distributed as dist
    w = dist.init()
    if w.role == "ps":
        spent = time_ps_programs()
        stats = dist.serve()
        print("PS " + json.dumps({"task": w.task, "seconds": spent, "stats": stats}),
              flush=True)
        return
    import rill
    from rill import nn
    from rill.distributed.graphs.postbox import postbox
    F = rill.nn.functional
    waited = time_worker_waits()
    rill.manual_seed(0)
    vocab, dim, ns = args.vocab, args.dim, args.num_sampled
    rng = np.random.default_rng(0)
    embed = sharded_table(vocab, dim, rng.standard_normal((vocab, dim), dtype=np.float32))
    rows = np.zeros((vocab, dim + 1), np.float32)  # [weight | bias] per word
    rows[:, :dim] = rng.standard_normal((vocab, dim), dtype=np.float32) * dim ** -0.5
    softmax = sharded_table(vocab, dim + 1, rows)
    del rows
    lstm = nn.LSTM(dim, dim, batch_first=True)
    dist.place_on_ps(lstm)
    opt = rill.optim.SGD(list(embed.parameters()) + list(softmax.parameters()) +
                         list(lstm.parameters()), lr=args.lr)

    @dist.replicate(mode="async", parallel=False)  # see STEP
    def step(x, y):
        h, _ = lstm(embed(x))
        h = h.reshape(-1, dim)
        if args.softmax == "full":  # every shard comes whole, its gradient goes back dense
            table = rill.concat([s.to("cpu") for s in softmax.shards])
            loss = F.cross_entropy(h @ table[:, :dim].T + table[:, dim], y.reshape(-1))
        else:
            loss = sampled_loss_over_rows(softmax, h, y, ns, vocab)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    batches = word_batches(vocab, args.batch, args.unroll, 8)
    box = postbox(w)
    marks = {}

    def before():
        marks.setdefault("n", 0)
        marks["n"] += 1
        if marks["n"] == args.warmup + 1:  # the timed steps start: counters from here
            marks.update(waited=waited[0], sent=box.sent_bytes, received=box.received_bytes,
                         start=time.perf_counter())

    steps = args.steps if args.softmax == "sampled" else args.full_steps
    times, losses = time_steps(step, batches, args.warmup, steps, before)
    total = time.perf_counter() - marks["start"]
    dist.close()
    print("RESULT " + json.dumps({
        "median_ms": 1e3 * float(np.median(times)), "steps": len(times), "total_s": total,
        "wait_s": waited[0] - marks["waited"], "losses": losses,
        "sent_bytes": box.sent_bytes - marks["sent"],
        "received_bytes": box.received_bytes - marks["received"]}), flush=True)


def run_ps(args, ps: int, softmax: str, num_sampled: int) -> dict:
    """(b): one rill-launch job, 1 worker and `ps` parameter servers."""
    cmd = [sys.executable, "-m", "rill.distributed.launch", "-n", str(ps + 1), "--ps",
           str(ps), "--timeout", "600", os.path.abspath(__file__), "--job", "--softmax",
           softmax, "--num-sampled", str(num_sampled), "--vocab", str(args.vocab), "--dim",
           str(args.dim), "--batch", str(args.batch), "--unroll", str(args.unroll),
           "--steps", str(args.steps), "--full-steps", str(args.full_steps), "--warmup",
           str(args.warmup), "--lr", str(args.lr)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "RILL_"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    result, servers = None, []
    for line in proc.stdout.splitlines():
        body = line.split(" | ", 1)[-1]
        if body.startswith("RESULT "):
            result = json.loads(body[7:])
        elif body.startswith("PS "):
            servers.append(json.loads(body[3:]))
    if proc.returncode or result is None or len(servers) != ps:
        raise SystemExit(f"the job with {ps} ps ({softmax}) failed:\n{proc.stdout[-3000:]}"
                         f"{proc.stderr[-3000:]}")
    steps = args.warmup + result["steps"]
    # a ps's time per step: its program time over every step it served (warm-up included;
    # registration is outside its programs). The worker waits for pull and serve (the
    # values it reads and its lookups); contribute and apply run after the worker's step
    # has moved on (async), beside its next step.
    phases = [{k: 1e3 * v / steps for k, v in s["seconds"].items()} for s in servers]
    ps_ms = [sum(p.values()) for p in phases]
    waited_for = [p.get("pull", 0.0) + p.get("serve", 0.0) for p in phases]
    step_ms = 1e3 * result["total_s"] / result["steps"]
    wait_ms = 1e3 * result["wait_s"] / result["steps"]
    words = args.batch * args.unroll
    return {"where": f"{ps} ps", "ps": ps, "softmax": softmax, "num_sampled": num_sampled,
            "median_ms": result["median_ms"], "steps": result["steps"],
            "words_per_s": words / (result["median_ms"] / 1e3), "losses": result["losses"],
            "mean_step_ms": step_ms, "worker_compute_ms": step_ms - wait_ms,
            "wait_ms": wait_ms, "ps_ms": ps_ms, "ps_wait_ms": waited_for,
            "ps_phase_ms": phases,
            # what the worker waited beyond the ps's own work for it (the ps tasks answer
            # side by side, so the longest of them)
            "transport_ms": max(wait_ms - max(waited_for), 0.0),
            "mb_per_step": (result["sent_bytes"] + result["received_bytes"]) / 2**20 /
            result["steps"]}


# ---- the report ----------------------------------------------------------------------------

def fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def kind(r) -> str:
    return "full" if r["softmax"] == "full" else f"sampled {r['num_sampled']}"


def markdown(rows, args, load: str) -> str:
    lines = [f"vocabulary {args.vocab:,}, embedding = hidden = {args.dim}, batch {args.batch} "
             f"x unroll {args.unroll} = {args.batch * args.unroll} words a step, SGD; "
             f"load average before / after: {load}", "",
             "| where | softmax | words/s | step ms (median) | worker compute ms | "
             "ps ms, each ps: all (pull+serve) | transport ms | MB moved / step | "
             "loss first -> last |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ps = "-" if "ps_ms" not in r else " / ".join(
            f"{a:.0f} ({w:.0f})" for a, w in zip(r["ps_ms"], r["ps_wait_ms"]))
        first, last = np.mean(r["losses"][:3]), np.mean(r["losses"][-3:])
        lines.append(f"| {r['where']} | {kind(r)} | {fmt(r['words_per_s'])} | "
                     f"{fmt(r['median_ms'], 1)} | {fmt(r.get('worker_compute_ms'), 1)} | "
                     f"{ps} | {fmt(r.get('transport_ms'), 1)} | "
                     f"{fmt(r.get('mb_per_step'), 1)} | {first:.2f} -> {last:.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows, path: str) -> str:
    """words/s against ps tasks, a line per softmax kind, the one-process figures as
    horizontal marks; a PNG with matplotlib, else an SVG written here."""
    series: dict = {}
    for r in rows:
        if "ps" in r:
            series.setdefault(kind(r), []).append((r["ps"], r["words_per_s"]))
    local = {kind(r): r["words_per_s"] for r in rows if "ps" not in r}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return svg(series, local, path + ".svg")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (name, points) in enumerate(sorted(series.items())):
        xs, ys = zip(*sorted(points))
        style = "--" if name == "full" else "-"
        line, = ax.plot(xs, ys, style, marker="o", label=f"{name}, 1 worker + ps", color=f"C{i}")
        if name in local:
            ax.axhline(local[name], color=line.get_color(), alpha=0.4, linestyle=":",
                       label=f"{name}, one process")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4], ["1", "2", "4"])
    ax.set_xlabel("parameter server tasks")
    ax.set_ylabel("words / second")
    ax.set_title("LSTM LM, sampled vs full softmax (2-core machine)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path + ".png", dpi=120)
    return path + ".png"


def svg(series, local, path: str) -> str:
    width, height, pad = 560, 360, 60
    values = [y for pts in series.values() for _, y in pts] + list(local.values())
    lo, hi = np.log10(min(values)) - 0.1, np.log10(max(values)) + 0.1

    def at(ps, y):
        x = pad + (width - 2 * pad) * np.log2(ps) / 2
        return x, height - pad - (height - 2 * pad) * (np.log10(y) - lo) / (hi - lo)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">',
             f'<text x="{width / 2}" y="20" text-anchor="middle">words/s against ps tasks'
             '</text>']
    for i, (name, points) in enumerate(sorted(series.items())):
        color = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"][i % 4]
        xy = " ".join(f"{x:.0f},{y:.0f}" for x, y in (at(p, v) for p, v in sorted(points)))
        parts.append(f'<polyline points="{xy}" fill="none" stroke="{color}"/>')
        parts.append(f'<text x="{width - pad}" y="{40 + 14 * i}" fill="{color}" '
                     f'text-anchor="end">{name}</text>')
    for ps in (1, 2, 4):
        x, _ = at(ps, 10 ** lo)
        parts.append(f'<text x="{x:.0f}" y="{height - pad + 16}">{ps}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path


# ---- the driver ----------------------------------------------------------------------------

def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=512, help="embedding and hidden size")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--unroll", type=int, default=20)
    p.add_argument("--lr", type=float, default=2.0)
    p.add_argument("--steps", type=int, default=30, help="timed sampled-softmax steps")
    p.add_argument("--full-steps", type=int, default=4, help="timed full-softmax steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--samples", default="1024,8192", help="num_sampled values")
    p.add_argument("--ps", default="1,2,4", help="ps task counts for (b)")
    p.add_argument("--only", choices=("local", "ps"), help="run (a) or (b) only")
    p.add_argument("--no-full-ps", action="store_true",
                   help="skip the full softmax under rill-launch (it moves whole shards)")
    p.add_argument("--out", default=os.path.join(RESULTS, "lm_sparse"),
                   help="results path without extension")
    p.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--softmax", default="sampled", help=argparse.SUPPRESS)
    p.add_argument("--num-sampled", type=int, default=1024, help=argparse.SUPPRESS)
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the full-softmax loss before and after sampled training")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    if args.job:
        return job(args)
    samples = [int(s) for s in args.samples.split(",") if s]
    load_before = os.getloadavg()
    rows = []
    if args.only != "ps":
        full = [("full", 0)] if args.full_steps else []
        for softmax, ns in full + [("sampled", s) for s in samples]:
            r = run_local(args, softmax, ns)
            rows.append(r)
            print(f"one process, {kind(r)}: {r['words_per_s']:,.0f} words/s "
                  f"({r['median_ms']:.1f} ms a step)", flush=True)
    if args.only != "local":
        full = [] if args.no_full_ps or not args.full_steps else [("full", 0)]
        kinds = full + [("sampled", s) for s in samples]
        for ps in [int(p) for p in args.ps.split(",") if p]:
            for softmax, ns in kinds:
                r = run_ps(args, ps, softmax, ns)
                rows.append(r)
                print(f"{ps} ps, {kind(r)}: {r['words_per_s']:,.0f} words/s "
                      f"({r['median_ms']:.1f} ms a step; worker {r['worker_compute_ms']:.0f}, "
                      f"ps {'/'.join(f'{v:.0f}' for v in r['ps_ms'])}, transport "
                      f"{r['transport_ms']:.0f} ms; {r['mb_per_step']:.1f} MB)", flush=True)
    load = " / ".join(", ".join(f"{v:.2f}" for v in avg)
                      for avg in (load_before, os.getloadavg()))
    table = markdown(rows, args, load)
    print(table)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out + ".md", "w") as f:
        f.write(table)
    with open(args.out + ".json", "w") as f:
        json.dump({"args": vars(args), "load": load, "rows": rows}, f, indent=1)
    if any("ps" in r for r in rows):
        print("plot:", plot(rows, args.out))


if __name__ == "__main__":
    main()
