"""What the profiler costs (issue 21): per eager op and per call of a small captured function,
with no profile open and inside one, in microseconds per call.

"off" must not move: eager ops reach the profiler only through the interpreter a profile puts
in the context (bind is unchanged), and a compiled graph checks one flag per call. To compare
"off" with the code before the profiler existed, run this script under both trees, interleaved
(see docs/benchmarks-history.md); `python bench/dispatch.py` times the eager path the same way.

    python bench/profiler.py                       # 9 rounds x 20000 calls
    python bench/profiler.py --repeats 15 --number 50000 --json profiler.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import timeit

import rill

N = 10


def cases() -> dict:
    """label -> (statement, namespace, profile keyword arguments or None for off)."""
    x, y = rill.ones(N), rill.ones(N)
    w = rill.ones(N, requires_grad=True)
    f = rill.capture(lambda a: rill.tanh(a * 2.0 + 1.0))
    f(x)
    has_profiler = hasattr(rill, "profiler")
    out = {}
    for label, stmt, ns in (("eager add", "x + y", {"x": x, "y": y}),
                            ("eager add, tape", "w + y", {"w": w, "y": y}),
                            ("captured 3 ops", "f(x)", {"f": f, "x": x})):
        out[f"{label}, off"] = (stmt, ns, None)
        if has_profiler:
            out[f"{label}, profiled"] = (stmt, ns, {})
            out[f"{label}, profiled with shapes+memory"] = (
                stmt, ns, {"record_shapes": True, "profile_memory": True})
    return out


def _time(stmt, ns, options, number) -> float:
    timer = timeit.Timer(stmt, globals=ns)
    scope = contextlib.nullcontext() if options is None else rill.profiler.profile(**options)
    with scope:
        return timer.timeit(number) / number * 1e6


def run(repeats: int, number: int) -> dict:
    table = cases()
    labels = list(table)
    for label in labels:
        _time(*table[label], max(1, number // 10))
    samples = {label: [] for label in labels}
    for r in range(repeats):  # rotate the start so drift falls on every case alike
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            samples[label].append(_time(*table[label], number))
    return {label: {"median_us": statistics.median(v), "min_us": min(v), "samples_us": v}
            for label, v in samples.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--number", type=int, default=20000)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    results = run(args.repeats, args.number)
    width = max(map(len, results))
    print(f"{'case':<{width}}  median us  min us")
    for label, s in results.items():
        print(f"{label:<{width}}  {s['median_us']:9.3f}  {s['min_us']:6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeats": args.repeats, "number": args.number, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
