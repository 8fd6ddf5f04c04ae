"""GCN training-step time: rill (eager and captured) against PyTorch (torch.sparse), on the GCN
port of tests/ports/gcn.py (two graph convolutions, sparse A_hat and sparse features) and its
Cora-sized synthetic graph (2708 nodes, 13264 stored entries, 1433 features, 7 classes).

One step is what the port's `make_step` does: zero_grad, forward (two sparse x dense products
per layer), NLL on the 140 training nodes, backward, Adam with weight decay. Each variant runs
in its own process (bench/harness.py), in rotating blocks; the table gives medians (ms per
step) and each median's ratio to PyTorch's. The first losses are checked equal across
variants before timing.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/gcn.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/gcn.py --torch-threads 1

--torch-threads sets PyTorch's intra-op threads (default: its own choice, one per core). On a
small machine that other work shares, PyTorch's spinning worker threads can cost it several
times its one-thread step time; the option shows both.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

# bench/harness.py: run as `python bench/gcn.py`, the script's folder is on sys.path
import harness

VARIANTS = {"torch": "torch", "rill eager": "rill", "rill captured": "rill"}
WARMUP_CALLS = 5


def _port(library: str):
    """tests/ports/gcn.py on `library` (its import block swapped for rill's, as the tests do)."""
    tests = str(Path(__file__).resolve().parent.parent / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from ports.test_ports import load
    return load("gcn", library)


def setup(label: str, what):
    """(one training step, the first step's loss) for this variant."""
    import warnings
    warnings.filterwarnings("ignore", "Sparse invariant checks")
    library = "torch" if label == "torch" else "rill"
    if library == "torch" and what["torch_threads"]:
        import torch
        torch.set_num_threads(what["torch_threads"])
    port = _port(library)
    tensors = port.to_tensors(port.make_graph(seed=0))[:4]
    model = port.build_model(seed=0)
    if library == "rill":  # PyTorch's initial weights, so the first losses agree
        import numpy as np
        import rill
        reference = _port("torch").build_model(seed=0).state_dict()
        model.load_state_dict({k: rill.tensor(np.asarray(v.detach().numpy()))
                               for k, v in reference.items()})
    optim = port.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    step = port.make_step(model, optim)
    if label == "rill captured":
        import rill
        step = rill.capture(step)
    first = float(step(*tensors).detach())

    def call():
        step(*tensors)
    return call, first


def main() -> None:
    parser = harness.rotation_parser(__doc__, repeats=100, block=10,
                                     quick="10 steps per variant", cases=False)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="PyTorch's intra-op threads (0: its default)")
    args = parser.parse_args()
    repeats, block = (10, 5) if args.quick else (args.repeats, args.block)
    console = Console()
    procs, conns, skipped, _ = harness.start(VARIANTS, setup, WARMUP_CALLS)
    try:
        first = harness.set_up(conns, {"torch_threads": args.torch_threads})
        losses = list(first.values())
        assert max(losses) - min(losses) < 1e-5, f"first losses differ: {first}"
        samples = harness.time_in_rotation(conns, repeats, block, harness.SETTLE_S)
    finally:
        harness.stop(procs, conns)
    medians = {label: statistics.median(s) for label, s in samples.items()}
    base = medians.get("torch")
    threads = args.torch_threads or "default"
    table = Table(title=f"GCN training step (ms, median of {repeats}; torch threads: {threads})")
    table.add_column("variant")
    table.add_column("ms / step", justify="right")
    table.add_column("vs torch", justify="right")
    for label, m in medians.items():
        table.add_row(label, f"{m:.2f}", f"{m / base:.2f}x" if base else "-")
    for label, why in skipped.items():
        table.add_row(label, "skipped", why)
    console.print(table)
    harness.finish(args, {"samples": samples, "medians": medians, "first_losses": first,
                          "torch_threads": args.torch_threads, "machine": harness.machine()},
                   console)


if __name__ == "__main__":
    main()
