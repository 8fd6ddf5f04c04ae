"""Reinforcement learning: a REINFORCE episode, rill eager against PyTorch eager.

An RL loop is the small-op regime at its purest: every environment step runs a tiny policy
(6 -> 16 -> 2, one state), builds a Categorical, samples an action and keeps its
log-probability; the episode ends with one backward pass through all of them and an Adam
step. Per op, the frameworks' own overhead (dispatch, the distribution's Python, the tape and
its reverse walk) is nearly all of the time.

Case: a corridor of 50 cells, episodes of exactly 20 steps (the end cannot be reached, so
every episode does the same work), returns discounted (0.99) and normalized in NumPy, loss
-sum(log_prob * return), Adam (lr 1e-2). Both frameworks start from the same weights. Before
timing, each runs one episode with the same forced actions (no sampling) and its loss and
gradients are checked against rill's; timed episodes sample their actions.

Each variant runs in its own process and the parent rotates blocks of episodes between them
(bench/harness.py); medians in ms per episode, and us per environment step.

    python bench/rl.py                    # about half a minute
    python bench/rl.py --quick            # smoke run
    python bench/rl.py --base e080e54     # also rill at that commit
"""
from __future__ import annotations

import statistics

import numpy as np

# bench/harness.py: run as `python bench/rl.py`, the script's folder is on sys.path
import harness

STEPS, CELLS, HIDDEN, GAMMA = 20, 50, 16, 0.99
WARMUP_CALLS = 5
RILL, TORCH = "rill eager", "torch eager"
MODULES = {RILL: "rill", TORCH: "torch"}
FORCED = [(i * 7 + 3) % 2 for i in range(STEPS)]  # the checked episode's actions


def weights():
    rng = np.random.default_rng(0)
    shapes = {"affine1.weight": (HIDDEN, 6), "affine1.bias": (HIDDEN,),
              "affine2.weight": (2, HIDDEN), "affine2.bias": (2,)}
    return {k: (rng.standard_normal(s) * 0.3).astype(np.float32) for k, s in shapes.items()}


def observe(position: int) -> list:
    """The state: the position one-hot over the first 6 cells, the rest folded into the last."""
    state = [0.0] * 6
    state[min(position, 5)] = 1.0
    return state


def normalized_returns(rewards) -> np.ndarray:
    out, running = [], 0.0
    for r in reversed(rewards):
        running = r + GAMMA * running
        out.append(running)
    returns = np.array(out[::-1], np.float32)
    return (returns - returns.mean()) / (returns.std() + np.float32(1e-6))


def episode_of(fw_name: str):
    """(episode(actions=None) -> loss, the parameters): one REINFORCE episode and update."""
    if fw_name == "rill":
        import rill as fw
        from rill.distributions import Categorical
    else:
        import torch as fw
        from torch.distributions import Categorical
        fw.manual_seed(0)
    nn = fw.nn
    policy = nn.Sequential()
    policy.affine1, policy.relu, policy.affine2 = nn.Linear(6, HIDDEN), nn.ReLU(), \
        nn.Linear(HIDDEN, 2)
    policy.load_state_dict({k: fw.tensor(v) for k, v in weights().items()})
    opt = fw.optim.Adam(policy.parameters(), lr=1e-2)

    def episode(actions=None):
        position, log_probs, rewards = 0, [], []
        for t in range(STEPS):
            logits = policy(fw.tensor([observe(position)]))
            m = Categorical(logits=logits)
            action = m.sample() if actions is None else fw.tensor([actions[t]])
            log_probs.append(m.log_prob(action))
            position = max(0, position + (1 if int(action.item()) == 1 else -1))
            rewards.append(-0.05)
        loss = (-fw.cat(log_probs) * fw.tensor(normalized_returns(rewards))).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return episode, list(policy.parameters())


def setup(label: str, quick: bool):
    """Run in the variant's worker: its timed call (a sampled episode) and the checked
    episode's (loss, gradients)."""
    episode, params = episode_of(MODULES[label])
    loss = episode(FORCED).item()
    first = (loss, [np.array(p.grad.numpy()) for p in params])
    return episode, first


def check(first: dict) -> None:
    ref_loss, ref_grads = first[RILL]
    for label, (loss, grads) in first.items():
        errors = [abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)] + [
            float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-30))
            for g, r in zip(grads, ref_grads)]
        if not all(np.isfinite(errors)) or max(errors) > 1e-5:
            raise SystemExit(f"{label} disagrees with {RILL} on the forced episode: relative "
                             f"errors (loss, then each gradient) {errors}")


def main(argv=None) -> None:
    parser = harness.rotation_parser(__doc__, repeats=60, block=5, unit="episodes",
                                     cases=False, base=True, quick="a few episodes")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.block = 4, 2
    settle = harness.QUICK_SETTLE_S if args.quick else harness.SETTLE_S
    from rich.console import Console
    from rich.table import Table
    console = Console()
    modules, first_paths = harness.with_base(dict(MODULES), args.base)
    procs, conns, skipped, versions = harness.start(modules, setup, WARMUP_CALLS,
                                                    first_paths=first_paths)
    try:
        for label, why in skipped.items():
            console.print(f"{label}: skipped ({why})")
        first = harness.set_up(conns, args.quick)
        check(first)
        samples = harness.time_in_rotation(conns, args.repeats, args.block, settle)
    finally:
        harness.stop(procs, conns)
    medians = {label: statistics.median(v) for label, v in samples.items()}
    table = Table(title=f"REINFORCE, {STEPS}-step episodes: median of {args.repeats}")
    for col in ("variant", "ms per episode", "us per env step", "x torch"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for label, ms in medians.items():
        table.add_row(label, f"{ms:.3f}", f"{ms * 1e3 / STEPS:.1f}",
                      f"{ms / medians[TORCH]:.2f}" if TORCH in medians else "-")
    console.print(table)
    console.print(f"BLAS: {harness.machine().get('blas')}")
    report = {"machine": harness.machine(), "versions": versions, "repeats": args.repeats,
              "base": args.base,
              "steps_per_episode": STEPS, "median_ms": medians,
              "ratios": {f"{label} / {TORCH}": m / medians[TORCH]
                         for label, m in medians.items() if label != TORCH}}
    harness.finish(args, report, console)


if __name__ == "__main__":
    main()
