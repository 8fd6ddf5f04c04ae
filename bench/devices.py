"""One captured graph over two cpu devices against the same graph on one (issue 18).

Two figures:
    two matmul chains     two independent chains of 8 matmuls of 512x512 float32 (x @ w1 @
                          w2 ... and x @ v1 @ v2 ...), one captured step. Split: the first
                          chain's arguments on cpu:0, the second's on cpu:1 and its matmuls
                          inside `with rill.device("cpu:1")`, so the placer gives each device
                          one chain and the partitioned program runs them on two threads at
                          once. One device: the same function with every argument on cpu:0,
                          run as the straight-line Program (parallel=False). BLAS gets one
                          thread (threadpoolctl), so each device is one core's worth of work.
                          Target: the split step >= 1.6x faster on a 2-core machine.
    send/recv pair        a chain of cheap view ops (x[None], then [0], alternately) whose
                          hops alternate between cpu:0 and cpu:1 (every hop a send/recv pair),
                          against the same chain on one device; for a 4-byte value (float32,
                          0-d and (1,)) and a 4 MB one (1M float32). The cost of a pair is
                          the slope: (extra time of a 32-pair step - extra time of a 2-pair
                          step) / 30; the 2-pair step's extra time is reported too (it holds
                          the step's fixed cost of waking the second device's thread). Target:
                          <= 20 us per pair for 4 bytes. For scale, the floor of any hand-off
                          between two Python threads is printed too: a token passed back and
                          forth through two bare threading.Locks.

The machine is shared and noisy: the configurations are timed in rotation (A B, then B A,
round after round) in one process and compared by the ratio of their medians; the load
average before and after is printed. A control runs in the same rotation: the two chains in
NumPy alone, on one thread and on two, whose ratio is the most a second thread could give
at the time. The BLAS NumPy uses is printed (threadpoolctl).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/devices.py
    python bench/devices.py --quick         # smoke run, a few seconds
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time

import numpy as np
import rill

CHAIN, SIZE = 8, 512


def blas_info() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "BLAS: threadpoolctl is not installed"
    rows = [f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
            f"{i.get('threading_layer')}), {i.get('num_threads')} threads"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return "BLAS: " + ("; ".join(rows) or "none found")


def one_blas_thread():
    """A context giving BLAS one thread (a no-op without threadpoolctl, said so)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib
        print("threadpoolctl is missing: BLAS keeps its default thread count")
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def interleaved(fns, rounds: int, inner: int = 1) -> list:
    """Median seconds per call of each of `fns`, timed in rotation (a b c, b c a, ...): each
    sample is the mean of `inner` consecutive calls."""
    samples = [[] for _ in fns]
    for r in range(rounds):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            start = time.perf_counter()
            for _ in range(inner):
                fns[i]()
            samples[i].append((time.perf_counter() - start) / inner)
    return [statistics.median(s) for s in samples]


# ---- two matmul chains ---------------------------------------------------------------------

def chains(second: str):
    """Two independent chains, the second inside a scope for `second` (where its arguments
    are): captured without the pass-through of a thread pool (parallel=False)."""
    def step(x, y, *weights):
        a, b = x, y
        for w in weights[:CHAIN]:
            a = a @ w
        with rill.device(second):
            for v in weights[CHAIN:]:
                b = b @ v
        return a, b
    return rill.capture(step, parallel=False)


def chain_arguments(second: str):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SIZE, SIZE)).astype(np.float32)
    ws = [(rng.standard_normal((SIZE, SIZE)) / np.sqrt(SIZE)).astype(np.float32)
          for _ in range(2 * CHAIN)]
    return ([rill.tensor(x), rill.tensor(x, device=second)]
            + [rill.tensor(w) for w in ws[:CHAIN]]
            + [rill.tensor(w, device=second) for w in ws[CHAIN:]])


def bench_chains(rounds: int):
    split, split_args = chains("cpu:1"), chain_arguments("cpu:1")
    one, one_args = chains("cpu:0"), chain_arguments("cpu:0")
    parts = split.partitions_for(*split_args)
    assert sorted(parts) == ["cpu", "cpu:1"], sorted(parts)
    assert len(one.partitions_for(*one_args)) == 1
    for got, want in zip(split(*split_args), one(*one_args)):  # bit-equal, or no figure
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    counts = {d: g.count("matmul") for d, g in parts.items()}
    # The control: the same chains in NumPy alone, one after the other on one thread and
    # on two threads at once; their ratio is what the machine allows at that moment.
    arrays = [t.numpy() for t in one_args]

    def numpy_chain(x, weights):
        for w in weights:
            x = x @ w
        return x

    def numpy_one():
        numpy_chain(arrays[0], arrays[2:2 + CHAIN])
        numpy_chain(arrays[1], arrays[2 + CHAIN:])

    def numpy_two():
        thread = threading.Thread(target=numpy_chain, args=(arrays[1], arrays[2 + CHAIN:]))
        thread.start()
        numpy_chain(arrays[0], arrays[2:2 + CHAIN])
        thread.join()

    t_split, t_one, n_two, n_one = interleaved(
        [lambda: split(*split_args), lambda: one(*one_args), numpy_two, numpy_one], rounds)
    print(f"two chains of {CHAIN} matmuls {SIZE}x{SIZE} float32, one BLAS thread per device "
          f"(matmuls per device: {counts})")
    print(f"  one device (cpu:0)       {t_one * 1e3:8.2f} ms per step (median of {rounds})")
    print(f"  two devices (cpu:0+1)    {t_split * 1e3:8.2f} ms per step")
    speedup = t_one / t_split
    print(f"  speedup                  {speedup:8.2f}x   (target >= 1.6x)")
    print(f"  NumPy alone, same chains: one thread {n_one * 1e3:.2f} ms, two threads "
          f"{n_two * 1e3:.2f} ms: {n_one / n_two:.2f}x (what the machine allowed meanwhile)")
    return speedup, n_one / n_two


# ---- send/recv pairs -----------------------------------------------------------------------

def hops(pairs: int, devices):
    """x -> view -> view ... (`pairs` hops), hop i inside a scope for devices[i % 2]."""
    def fn(x):
        y = x
        for i in range(pairs):
            with rill.device(devices[i % 2]):
                y = y[None] if y.ndim == x.ndim else y[0]
        return y
    return rill.capture(fn, parallel=False)


def bench_pairs(shape, label: str, rounds: int, inner: int):
    x = rill.zeros(*shape)
    extra = {}
    for pairs in (2, 32):
        split, one = hops(pairs, ("cpu:1", "cpu:0")), hops(pairs, ("cpu:0", "cpu:0"))
        assert split.graph_for(x).count() >= pairs  # the views were not simplified away
        parts = split.partitions_for(x)
        sends = sum(g.count("send") for g in parts.values())
        assert sends == pairs, (sends, pairs)
        np.testing.assert_array_equal(split(x).numpy(), one(x).numpy())
        t_split, t_one = interleaved([lambda f=split: f(x), lambda f=one: f(x)], rounds, inner)
        extra[pairs] = (t_split - t_one, t_split, t_one)
    per_pair = (extra[32][0] - extra[2][0]) / 30
    print(f"send/recv between cpu:0 and cpu:1, {label}:")
    for pairs, (d, s, o) in extra.items():
        print(f"  {pairs:2d} pairs: one device {o * 1e6:8.1f} us, two devices {s * 1e6:8.1f} us, "
              f"extra {d * 1e6:8.1f} us per step")
    print(f"  per pair (slope)         {per_pair * 1e6:8.1f} us")
    return per_pair, extra[2][0]


def lock_ping_pong(hops: int = 2000, runs: int = 5) -> float:
    """The floor for a hand-off between two Python threads: seconds per hop of a token
    passed back and forth through two bare threading.Locks (median of `runs`)."""
    times = []
    for _ in range(runs):
        ping, pong = threading.Lock(), threading.Lock()
        ping.acquire()
        pong.acquire()

        def other(ping, pong):
            for _ in range(hops):
                ping.acquire()
                pong.release()

        thread = threading.Thread(target=other, args=(ping, pong))
        thread.start()
        start = time.perf_counter()
        for _ in range(hops):
            ping.release()
            pong.acquire()
        times.append((time.perf_counter() - start) / (2 * hops))
        thread.join()
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: few samples")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternations per figure (default 60, --quick 3)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 60)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cpus, python "
          f"{platform.python_version()}, numpy {np.__version__}")
    load_before = os.getloadavg()
    print(f"load average before: {', '.join(f'{x:.2f}' for x in load_before)}")
    with one_blas_thread():
        print(blas_info())
        speedup, control = bench_chains(rounds)
        small = bench_pairs((), "4 bytes", rounds * 5, 20)
        large = bench_pairs((1 << 20,), "4 MB", rounds * 5, 20)
        floor = lock_ping_pong(200 if args.quick else 2000)
    print(f"two Python threads passing a token through two bare Locks: {floor * 1e6:.1f} us "
          "per hand-off (the floor under a send/recv pair between two threads)")
    load_after = os.getloadavg()
    print(f"load average after:  {', '.join(f'{x:.2f}' for x in load_after)}")
    print("summary:")
    print(f"  two-chain speedup {speedup:.2f}x (target >= 1.6x: "
          f"{'met' if speedup >= 1.6 else 'missed'}); NumPy's two threads meanwhile "
          f"{control:.2f}x")
    print(f"  send/recv pair: {small[0] * 1e6:.1f} us for 4 bytes (target <= 20 us: "
          f"{'met' if small[0] <= 20e-6 else 'missed'}), {large[0] * 1e6:.1f} us for 4 MB; "
          f"a 2-pair step costs {small[1] * 1e6:.1f} us more than on one device; "
          f"bare lock hand-off {floor * 1e6:.1f} us")


if __name__ == "__main__":
    main()
