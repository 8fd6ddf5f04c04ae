"""Adam's bias corrections once per cohort of equal step counts (issue 20, speed).

Each parameter keeps its own step count (torch's state_dict has one per parameter), but
rill computes a step's bias corrections once for all counts it knows are equal: those made
together in one group, and still stepping together. These tests check the bookkeeping
against torch where counts part (parameters without a gradient skip a step), after
load_state_dict, and after a user replaces a count; and that a captured step computes the
corrections once per group.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import rill
from rill import nn, optim

SHAPES = [(3, 2), (2,), (4,), (2, 2)]


def _pair(kind, **kw):
    """The same two-group optimizer over the same float64 values in rill and torch."""
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(s) for s in SHAPES]
    rp = [nn.Parameter(rill.tensor(v)) for v in values]
    tp = [torch.nn.Parameter(torch.tensor(v)) for v in values]

    def groups(ps):
        return [{"params": ps[:2]}, {"params": ps[2:], "weight_decay": 0.0}]
    return (rp, getattr(optim, kind)(groups(rp), lr=0.05, **kw),
            tp, getattr(torch.optim, kind)(groups(tp), lr=0.05, **kw))


def _loss(lib, params, used, k):
    """A loss that reaches only the parameters in `used` (the others get no gradient)."""
    total = None
    for i in used:
        c = float(k + i + 1)
        term = ((params[i] * c).sin() * params[i]).sum()
        total = term if total is None else total + term
    return total


def _step(params, opt, lib, used, k):
    opt.zero_grad()
    _loss(lib, params, used, k).backward()
    opt.step()


# which parameters have a gradient in each step: counts part within a group and across
PATTERN = [(0, 1, 2, 3), (0, 2, 3), (0, 1, 2, 3), (1, 3), (0, 1, 2, 3), (0, 1, 2)]


def _close(rp, tp, ropt, topt):
    for r, t in zip(rp, tp):
        np.testing.assert_allclose(r.numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-14)
    rstate, tstate = ropt.state_dict()["state"], topt.state_dict()["state"]
    assert sorted(rstate) == sorted(tstate)
    for i in tstate:
        assert float(rstate[i]["step"]) == float(tstate[i]["step"])
        np.testing.assert_allclose(rstate[i]["exp_avg_sq"].numpy(),
                                   tstate[i]["exp_avg_sq"].numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind, kw", [("AdamW", {}), ("Adam", {"weight_decay": 0.1}),
                                      ("AdamW", {"amsgrad": True})])
def test_counts_that_part_match_torch(kind, kw):
    rp, ropt, tp, topt = _pair(kind, **kw)
    for k, used in enumerate(PATTERN):
        _step(rp, ropt, rill, used, k)
        _step(tp, topt, torch, used, k)
        _close(rp, tp, ropt, topt)


def test_state_dict_keeps_one_count_per_parameter():
    rp, ropt, tp, topt = _pair("AdamW")
    for k in range(2):
        _step(rp, ropt, rill, (0, 1, 2, 3), k)
    state = ropt.state_dict()["state"]
    steps = [state[i]["step"] for i in range(4)]
    assert all(isinstance(s, rill.Tensor) and s.dtype is rill.float64 for s in steps)
    assert len({id(s) for s in steps}) == 4 and [float(s) for s in steps] == [2.0] * 4
    assert len({id(ropt.state[p]["step"]) for p in rp}) == 4  # counts are not shared objects


def test_loaded_counts_that_differ_match_torch():
    rp, ropt, tp, topt = _pair("AdamW")
    for k, used in enumerate(PATTERN[:4]):  # counts now 4, 2, 3, 4
        _step(rp, ropt, rill, used, k)
        _step(tp, topt, torch, used, k)
    saved = ropt.state_dict()
    fresh = [nn.Parameter(p.detach().clone()) for p in rp]
    loaded = optim.AdamW([{"params": fresh[:2]}, {"params": fresh[2:], "weight_decay": 0.0}],
                         lr=0.05)
    loaded.load_state_dict(saved)
    for k in range(4, 8):
        _step(fresh, loaded, rill, (0, 1, 2, 3), k)
        _step(tp, topt, torch, (0, 1, 2, 3), k)
        _close(fresh, tp, loaded, topt)


def test_a_count_the_user_replaces_matches_torch():
    rp, ropt, tp, topt = _pair("Adam")
    for k in range(2):
        _step(rp, ropt, rill, (0, 1, 2, 3), k)
        _step(tp, topt, torch, (0, 1, 2, 3), k)
    ropt.state[rp[1]]["step"] = rill.tensor(7.0, dtype=rill.float64)
    topt.state[tp[1]]["step"] = torch.tensor(7.0, dtype=torch.float64)
    for k in range(2, 4):
        _step(rp, ropt, rill, (0, 1, 2, 3), k)
        _step(tp, topt, torch, (0, 1, 2, 3), k)
        _close(rp, tp, ropt, topt)


def test_a_captured_step_computes_corrections_once_per_group():
    rill.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3), nn.LayerNorm(3))
    params = list(model.parameters())
    opts = []
    for _ in range(2):
        opts.append(optim.AdamW([{"params": [p for p in params if p.ndim == 2]},
                                 {"params": [p for p in params if p.ndim < 2],
                                  "weight_decay": 0.0}], lr=1e-2))
    rng = np.random.default_rng(1)
    batches = [(rill.tensor(rng.standard_normal((5, 6)).astype(np.float32)),
                rill.tensor(rng.standard_normal((5, 3)).astype(np.float32))) for _ in range(4)]
    start = [p.detach().clone() for p in params]

    def make_step(opt):
        def step(x, y):
            opt.zero_grad()
            d = model(x) - y
            loss = (d * d).mean()  # no power op: the graph's are the optimizer's
            loss.backward()
            opt.step()
            return loss
        return step

    results = []
    for opt, capture in zip(opts, (False, True)):
        with rill.no_grad():
            for p, s in zip(params, start):
                rill.ops.methods.assign(p, s)
        run = rill.capture(make_step(opt)) if capture else make_step(opt)
        losses = [run(x, y).numpy().copy() for x, y in batches]
        results.append((losses, [p.detach().numpy().copy() for p in params]))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    for a, b in zip(results[1][1], results[0][1]):
        np.testing.assert_array_equal(a, b)
    (variant,) = run.variants.values()
    # one beta1 ** t and one beta2 ** t per group (2 groups, 6 parameters)
    assert variant.program.graph.count("power") == 4


@pytest.mark.filterwarnings("ignore::rill.CaptureWarning")  # a new pattern traces anew
def test_captured_steps_whose_counts_part_match_torch():
    rp, ropt, tp, topt = _pair("AdamW")

    @rill.capture
    def step(used):
        _step(rp, ropt, rill, used, 0)

    for used in PATTERN + PATTERN:  # later calls replay the variants the first ones traced
        step(used)
        _step(tp, topt, torch, used, 0)
        _close(rp, tp, ropt, topt)
    assert len(step.variants) == 4
