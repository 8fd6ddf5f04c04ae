"""rill.nn's losses against torch.nn's on the same inputs: every reduction, forward in
float64 and float32, gradients of every differentiable input; one loss in a captured
training step; the legacy size_average/reduce arguments; bad arguments."""
import warnings

import numpy as np
import pytest
import torch

import rill
from rill import nn
from rill.nn import functional as F

RNG = np.random.default_rng(0)
A, B, C = (RNG.standard_normal((6, 5)) for _ in range(3))
PROB = 1 / (1 + np.exp(-A))
BITS = (B > 0).astype(np.float64)
SIGNS = np.where(B > 0, 1.0, -1.0)
COUNTS = np.floor(np.abs(C) * 3)
VAR = np.abs(C) + 0.1
VAR[0, 0] = 1e-9  # below eps: clamped in value, gradient straight through
LOGP = np.log(np.exp(A) / np.exp(A).sum(1, keepdims=True))
TARGET_P = np.exp(B) / np.exp(B).sum(1, keepdims=True)
TARGET_P[0, :2] = 0.0  # zeros in the target: 0 log 0 counts as 0
LABELS = np.where(RNG.standard_normal(6) > 0, 1.0, -1.0)

# name, rill loss, torch loss (module factories taking the reduction), inputs, which need grad
CASES = [
    ("bce", lambda r: nn.BCELoss(reduction=r), lambda r: torch.nn.BCELoss(reduction=r),
     [PROB, BITS], [0, 1]),
    ("bce_weight", lambda r: nn.BCELoss(weight=rill.tensor(VAR), reduction=r),
     lambda r: torch.nn.BCELoss(weight=torch.tensor(VAR), reduction=r), [PROB, BITS], [0]),
    ("smooth_l1", lambda r: nn.SmoothL1Loss(reduction=r, beta=0.7),
     lambda r: torch.nn.SmoothL1Loss(reduction=r, beta=0.7), [A, B], [0, 1]),
    ("smooth_l1_beta0", lambda r: nn.SmoothL1Loss(reduction=r, beta=0.0),
     lambda r: torch.nn.SmoothL1Loss(reduction=r, beta=0.0), [A, B], [0, 1]),
    # d/dtarget of target log target is -inf at 0 (NaN in PyTorch): target grads where > 0
    ("kl_div", lambda r: nn.KLDivLoss(reduction=r), lambda r: torch.nn.KLDivLoss(reduction=r),
     [LOGP, TARGET_P], [0]),
    ("kl_div_positive", lambda r: nn.KLDivLoss(reduction=r),
     lambda r: torch.nn.KLDivLoss(reduction=r), [LOGP, PROB], [0, 1]),
    ("kl_div_log_target", lambda r: nn.KLDivLoss(reduction=r, log_target=True),
     lambda r: torch.nn.KLDivLoss(reduction=r, log_target=True), [LOGP, B], [0, 1]),
    ("cosine_embedding", lambda r: nn.CosineEmbeddingLoss(0.2, reduction=r),
     lambda r: torch.nn.CosineEmbeddingLoss(0.2, reduction=r), [A, B, LABELS], [0, 1]),
    ("margin_ranking", lambda r: nn.MarginRankingLoss(0.3, reduction=r),
     lambda r: torch.nn.MarginRankingLoss(0.3, reduction=r), [A[:, 0], B[:, 0], LABELS],
     [0, 1]),
    ("triplet", lambda r: nn.TripletMarginLoss(reduction=r),
     lambda r: torch.nn.TripletMarginLoss(reduction=r), [A, B, C], [0, 1, 2]),
    ("triplet_p1_swap", lambda r: nn.TripletMarginLoss(0.5, p=1, swap=True, reduction=r),
     lambda r: torch.nn.TripletMarginLoss(0.5, p=1, swap=True, reduction=r), [A, B, C],
     [0, 1, 2]),
    ("soft_margin", lambda r: nn.SoftMarginLoss(reduction=r),
     lambda r: torch.nn.SoftMarginLoss(reduction=r), [A, SIGNS], [0]),
    ("gaussian_nll", lambda r: nn.GaussianNLLLoss(full=True, reduction=r),
     lambda r: torch.nn.GaussianNLLLoss(full=True, reduction=r), [A, B, VAR], [0, 1, 2]),
    ("gaussian_nll_var_per_row", lambda r: nn.GaussianNLLLoss(reduction=r),
     lambda r: torch.nn.GaussianNLLLoss(reduction=r), [A, B, VAR[:, 1]], [0, 1, 2]),
    ("gaussian_nll_var_column", lambda r: nn.GaussianNLLLoss(reduction=r),
     lambda r: torch.nn.GaussianNLLLoss(reduction=r), [A, B, VAR[:, :1]], [0, 2]),
    ("poisson_nll", lambda r: nn.PoissonNLLLoss(reduction=r),
     lambda r: torch.nn.PoissonNLLLoss(reduction=r), [A, COUNTS], [0]),
    ("poisson_nll_full_rate", lambda r: nn.PoissonNLLLoss(log_input=False, full=True,
                                                         reduction=r),
     lambda r: torch.nn.PoissonNLLLoss(log_input=False, full=True, reduction=r),
     [PROB, COUNTS], [0]),
    ("cross_entropy_probs_smoothing",
     lambda r: nn.CrossEntropyLoss(label_smoothing=0.1, reduction=r),
     lambda r: torch.nn.CrossEntropyLoss(label_smoothing=0.1, reduction=r), [A, TARGET_P],
     [0]),
]


def reductions(name):
    return ("mean", "sum", "none") + (("batchmean",) if name.startswith("kl_div") else ())


def run_case(make_rill, make_torch, inputs, grads, reduction, dtype, tol):
    warnings.filterwarnings("ignore", "reduction: 'mean' divides")  # PyTorch's kl_div note
    xr = [rill.tensor(x.astype(dtype), requires_grad=i in grads) for i, x in enumerate(inputs)]
    xt = [torch.tensor(x.astype(dtype), requires_grad=i in grads) for i, x in enumerate(inputs)]
    lr, lt = make_rill(reduction)(*xr), make_torch(reduction)(*xt)
    np.testing.assert_allclose(lr.numpy(), lt.detach().numpy(), **tol)
    w = np.linspace(0.5, 1.5, max(lr.size, 1)).reshape(lr.shape).astype(dtype)
    (lr * rill.tensor(w)).sum().backward()
    (lt * torch.tensor(w)).sum().backward()
    for i in grads:
        np.testing.assert_allclose(xr[i].grad.numpy(), xt[i].grad.numpy(), err_msg=f"input {i}",
                                   **tol)


@pytest.mark.parametrize("name,make_rill,make_torch,inputs,grads", CASES,
                         ids=[c[0] for c in CASES])
def test_loss_matches_torch(name, make_rill, make_torch, inputs, grads):
    for reduction in reductions(name):
        run_case(make_rill, make_torch, inputs, grads, reduction, np.float64,
                 dict(rtol=1e-9, atol=1e-12))
    run_case(make_rill, make_torch, inputs, grads, "mean", np.float32,
             dict(rtol=2e-5, atol=1e-6))


def test_bce_log_is_clamped_at_minus_100():
    p, y = np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0, 1.0])
    mine = F.binary_cross_entropy(rill.tensor(p), rill.tensor(y), reduction="none")
    ref = torch.nn.functional.binary_cross_entropy(torch.tensor(p), torch.tensor(y),
                                                   reduction="none")
    np.testing.assert_array_equal(mine.numpy(), ref.numpy())
    assert mine.tolist() == [100.0, 100.0, 0.0, 0.0]


@pytest.mark.parametrize("fn,args,kwargs", [
    ("cosine_similarity", [A, B], {"dim": 1}),
    ("cosine_similarity", [A, B[:1]], {"dim": 1}),  # broadcast
    ("cosine_similarity", [A, B], {"dim": 0, "eps": 1e-3}),
    ("pairwise_distance", [A, B], {}),
    ("pairwise_distance", [A, B], {"p": 3.0, "keepdim": True}),
    ("normalize", [A], {}),
    ("normalize", [A], {"p": 1.0, "dim": 0}),
])
def test_distance_functions_match_torch(fn, args, kwargs):
    xr = [rill.tensor(a, requires_grad=True) for a in args]
    xt = [torch.tensor(a, requires_grad=True) for a in args]
    yr, yt = getattr(F, fn)(*xr, **kwargs), getattr(torch.nn.functional, fn)(*xt, **kwargs)
    np.testing.assert_allclose(yr.numpy(), yt.detach().numpy(), rtol=1e-10)
    yr.sum().backward(), yt.sum().backward()
    for a, b in zip(xr, xt):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_existing_losses_take_torch_arguments():
    """CrossEntropyLoss / NLLLoss / BCEWithLogitsLoss with PyTorch's keywords and order."""
    logits = torch.tensor(A, requires_grad=True)
    target = torch.tensor([0, 1, 2, 3, 4, 1])
    weight = np.array([1.0, 2.0, 0.5, 1.0, 3.0])
    for kwargs in (dict(label_smoothing=0.2, ignore_index=1), dict(reduction="sum")):
        ref = torch.nn.CrossEntropyLoss(torch.tensor(weight), **kwargs)(logits, target)
        mine = nn.CrossEntropyLoss(rill.tensor(weight), **kwargs)(rill.tensor(A),
                                                                 rill.tensor(target.numpy()))
        np.testing.assert_allclose(mine.numpy(), ref.detach().numpy(), rtol=1e-10)
    ref = torch.nn.NLLLoss(None, None, 2)(torch.tensor(LOGP), target)  # positional ignore_index
    mine = nn.NLLLoss(None, None, 2)(rill.tensor(LOGP), rill.tensor(target.numpy()))
    np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-12)
    pos = np.array([1.0, 2.0, 3.0, 0.5, 1.0])
    ref = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos))(torch.tensor(A),
                                                                  torch.tensor(BITS))
    mine = nn.BCEWithLogitsLoss(pos_weight=rill.tensor(pos))(rill.tensor(A), rill.tensor(BITS))
    np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=1e-12)


@pytest.mark.parametrize("size_average,reduce,expected", [
    (None, None, "mean"), (False, None, "sum"), (True, False, "none"), (None, False, "none"),
    (False, True, "sum")])
def test_legacy_size_average_and_reduce(size_average, reduce, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.nn.MSELoss(size_average, reduce).reduction == expected
    assert nn.MSELoss(size_average, reduce).reduction == expected
    assert nn.SmoothL1Loss(size_average, reduce).reduction == expected
    assert nn.BCELoss(None, size_average, reduce).reduction == expected


def test_captured_training_step_with_a_new_loss_matches_eager():
    def make():
        rill.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.Hardswish(), nn.Linear(8, 5), nn.Sigmoid())
        return model, rill.optim.SGD(model.parameters(), lr=0.1)

    x, y = rill.tensor(A.astype(np.float32)), rill.tensor(BITS.astype(np.float32))

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = F.binary_cross_entropy(model(x), y) + nn.SmoothL1Loss(beta=0.5)(model(x), y)
        loss.backward()
        opt.step()
        return loss

    eager_model, eager_opt = make()
    captured_model, captured_opt = make()
    captured = rill.capture(lambda x, y: step(captured_model, captured_opt, x, y))
    for _ in range(3):
        np.testing.assert_allclose(captured(x, y).numpy(),
                                   step(eager_model, eager_opt, x, y).numpy(), rtol=1e-6)
    for a, b in zip(captured_model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make,error,match", [
    (lambda: F.binary_cross_entropy(rill.tensor([1.5]), rill.tensor([1.0])), rill.Error,
     "probabilities"),
    (lambda: F.binary_cross_entropy(rill.ones(3), rill.ones(2)), rill.ShapeError, "shape"),
    (lambda: nn.KLDivLoss(reduction="avg"), rill.ArgumentError, "reduction"),
    (lambda: F.smooth_l1_loss(rill.ones(2), rill.ones(2), beta=-1.0), rill.ArgumentError,
     "beta"),
    (lambda: F.triplet_margin_loss(rill.ones(2, 3), rill.ones(2, 3), rill.ones(2, 3),
                                   margin=0.0), rill.ArgumentError, "margin"),
    (lambda: F.gaussian_nll_loss(rill.ones(2, 3), rill.ones(2, 3), rill.ones(3, 2)),
     rill.ShapeError, "var"),
    (lambda: F.gaussian_nll_loss(rill.ones(2), rill.ones(2), -rill.ones(2)), rill.Error,
     "negative"),
    (lambda: F.cosine_embedding_loss(rill.ones(2, 3), rill.ones(2, 3), rill.ones(3)),
     rill.ShapeError, "target"),
    (lambda: nn.GaussianNLLLoss(reduction="batchmean"), rill.ArgumentError, "reduction"),
])
def test_bad_arguments_raise_rill_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()
