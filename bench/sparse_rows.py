"""A training step that touches 32 rows of a 1 GiB embedding table: eager and captured.

Issue 34: a captured step must read and write only the rows a batch looks up, and take at
most twice the eager step's time. Per optimizer (SGD, Adagrad, SparseAdam) this prints the
step's median time eager and captured, and the bytes the step allocated at its peak
(tracemalloc, which sees NumPy's buffers), beside one copy of the table for scale: a step
that copied or densified the table would allocate a table's size.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/sparse_rows.py [--rows 4194304]
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

import rill

OPTIMIZERS = {
    "SGD": lambda ps: rill.optim.SGD(ps, lr=0.1),
    "Adagrad": lambda ps: rill.optim.Adagrad(ps, lr=0.1),
    "SparseAdam": lambda ps: rill.optim.SparseAdam(ps, lr=0.01),
}


def measure(name, rows, width, batch, repeats):
    table = rill.nn.Embedding(rows, width)
    opt = OPTIMIZERS[name](list(table.parameters()))
    target = rill.zeros(width)

    def step(idx):
        loss = ((table(idx) - target) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    results = {}
    for kind, fn in (("eager", step), ("captured", rill.capture(step))):
        batches = [rill.tensor(rng.integers(0, rows, batch)) for _ in range(repeats + 25)]
        for b in batches[:25]:  # warm-up (a captured step's first calls pick its schedule)
            fn(b)
        times = []
        for b in batches[25:]:
            start = time.perf_counter()
            fn(b)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        fn(batches[0])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        results[kind] = (float(np.median(times)) * 1e3, peak)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1 << 22)  # x 64 float32 = 1 GiB
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    table_bytes = args.rows * args.width * 4
    copy = np.ones(min(args.rows, 1 << 22) * args.width, dtype=np.float32)
    start = time.perf_counter()
    copy.copy()
    scale = (time.perf_counter() - start) * table_bytes / copy.nbytes * 1e3
    del copy
    print(f"table {args.rows} x {args.width} float32 = {table_bytes / 2**30:.2f} GiB; "
          f"{args.batch} rows a step; one copy of the table takes ~{scale:.0f} ms here")
    print("| optimizer | eager ms | captured ms | captured / eager | eager peak bytes | "
          "captured peak bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in OPTIMIZERS:
        r = measure(name, args.rows, args.width, args.batch, args.repeats)
        (e, ep), (c, cp) = r["eager"], r["captured"]
        print(f"| {name} | {e:.3f} | {c:.3f} | {c / e:.2f} | {ep:,} | {cp:,} |", flush=True)


if __name__ == "__main__":
    main()
