"""Activation checkpointing (rill.utils.checkpoint, lib/utils/checkpoint.py): a small GPT block
stack and a small CNN, checkpointed, give the gradients they give without checkpointing
(eagerly and captured) and PyTorch's torch.utils.checkpoint gives on the same weights; their
peak memory is lower than without; dropout inside a checkpointed block keeps its mask.

Peak memory: rill's with tracemalloc (NumPy reports its buffers to it); PyTorch's, which
tracemalloc cannot see, as the bytes malloc holds (mallinfo2) after each aten op, from a
TorchDispatchMode. Run with -s to see both figures."""
from __future__ import annotations

import ctypes
import math
import tracemalloc

import numpy as np
import pytest

import rill
import rill.nn.functional as RF
from rill.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential

torch = pytest.importorskip("torch")
if rill.gpu.is_available():
    # torch.utils.checkpoint imports torch._dynamo, which imports Triton: rill's Triton setup
    # must come first (kernels/triton/launch.py sets TRITON_INTERPRET, which Triton reads at
    # import), or the interpreted gpu kernels of every later test in this process fail.
    import rill.kernels.triton.launch  # noqa: E402, F401
from torch.utils import checkpoint as torch_checkpoint  # noqa: E402

C, H, T, B, LAYERS = 32, 4, 32, 4, 4


def _gpt_blocks(lib, nn, F, dropout=0.0):
    """LAYERS pre-norm transformer blocks (causal attention, GELU MLP), written once for
    PyTorch and rill (the same spelling)."""
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.register_buffer("mask", lib.tensor(np.tril(np.ones((T, T), np.float32))))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q, k, v = (z.reshape(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
            att = F.dropout(F.softmax(att, dim=-1), dropout, self.training)
            return self.proj((att @ v).transpose(1, 2).reshape(b, t, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + F.dropout(self.mlp(self.ln2(x)), dropout, self.training)

    return nn.ModuleList([Block() for _ in range(LAYERS)])


def _cnn(nn):
    """Eight 3x3 convolutions: enough activations that keeping them, not the workspace of one
    convolution's backward, decides the peak."""
    layers = [nn.Conv2d(3, 16, 3, padding=1), nn.ReLU()]
    for _ in range(7):
        layers += [nn.Conv2d(16, 16, 3, padding=1), nn.ReLU()]
    return nn.Sequential(*layers, nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 8 * 8, 10))


def _twins(make_torch, make_rill):
    """A PyTorch model and a rill model with its weights."""
    torch.manual_seed(0)
    tm, rm = make_torch(), make_rill()
    theirs = dict(tm.named_parameters())
    with rill.no_grad():
        for name, p in rm.named_parameters():
            p.copy_(rill.tensor(theirs[name].detach().numpy()))
    return tm, rm


def _torch_gpt():
    return _gpt_blocks(torch, torch.nn, torch.nn.functional)


def _rill_gpt(dropout=0.0):
    return _gpt_blocks(rill, rill.nn, RF, dropout)


X_GPT = np.random.default_rng(1).standard_normal((B, T, C)).astype(np.float32)
X_CNN = np.random.default_rng(2).standard_normal((8, 3, 16, 16)).astype(np.float32)
Y_CNN = np.random.default_rng(3).integers(0, 10, 8)


def _gpt_loss(blocks, x, ck):
    for block in blocks:
        x = checkpoint(block, x) if ck else block(x)
    return (x * x).mean()


def _rill_grads(model, step, *args):
    for p in model.parameters():
        p.grad = None
    loss = step(*args)
    return float(loss), [p.grad.numpy().copy() for p in model.parameters()]


def _close(a, b, atol):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=atol)


def _torch_gpt_grads(tm, ck):
    for p in tm.parameters():
        p.grad = None
    x = torch.tensor(X_GPT)
    for block in tm:
        x = torch_checkpoint.checkpoint(block, x, use_reentrant=False) if ck else block(x)
    loss = (x * x).mean()
    loss.backward()
    return loss.item(), [p.grad.numpy().copy() for p in tm.parameters()]


# ---- peak memory ------------------------------------------------------------------------------

def _rill_peak(run) -> int:
    """Bytes allocated at the peak of run(), above what was allocated before it."""
    run()  # first: lazily made state (.grad, kernel caches) is not the step's
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


class _MallInfo(ctypes.Structure):
    _names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    _fields_ = [(n, ctypes.c_size_t) for n in _names.split()]


def _torch_peak(run):
    """PyTorch's peak bytes over run(), sampled after each aten op (None without glibc)."""
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo
    from torch.utils._python_dispatch import TorchDispatchMode

    def used():
        m = mallinfo2()
        return m.uordblks + m.hblkhd

    class Peak(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.peak = max(self.peak, used())
            return out

    run()
    found = []
    for _ in range(3):  # the least of three: allocations made once (pools, caches) left out
        mode = Peak()
        mode.peak = base = used()
        with mode:
            run()
        found.append(mode.peak - base)
    return min(found)


# ---- a GPT block stack -------------------------------------------------------------------------

def test_gpt_blocks_checkpointed_give_pytorchs_gradients_eager_and_captured():
    tm, rm = _twins(_torch_gpt, _rill_gpt)
    x = rill.tensor(X_GPT)
    plain = _rill_grads(rm, lambda: _backward(_gpt_loss(rm, x, False)))
    eager = _rill_grads(rm, lambda: _backward(_gpt_loss(rm, x, True)))
    captured_step = rill.capture(lambda x: _backward(_gpt_loss(rm, x, True)))
    captured = _rill_grads(rm, captured_step, x)
    again = _rill_grads(rm, captured_step, x)  # the compiled program, not the trace
    theirs = _torch_gpt_grads(tm, True)
    assert eager[0] == plain[0] and captured[0] == pytest.approx(plain[0], rel=1e-6)
    _close(eager[1], plain[1], 0)         # the same ops on the same values: the same bits
    _close(captured[1], plain[1], 1e-6)
    _close(again[1], captured[1], 0)
    assert theirs[0] == pytest.approx(plain[0], rel=1e-5)
    _close(theirs[1], eager[1], 1e-5)
    _close(_torch_gpt_grads(tm, False)[1], theirs[1], 1e-6)


def _backward(loss):
    loss.backward()
    return loss


def _torch_gpt_peaks() -> tuple:
    """PyTorch's peaks without and with checkpointing, measured in a fresh interpreter: glibc's
    counters (mallinfo2) depend on the heap the tests before left (in one order of the suite
    PyTorch's plain peak read 1.14 MB, alone 1.39 MB), which a new process does not have."""
    import json
    import subprocess
    import sys
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
            "import test_checkpoint_activations as t; tm = t._torch_gpt(); "
            "print(json.dumps([t._torch_peak(lambda: t._torch_gpt_grads(tm, ck)) "
            "for ck in (False, True)]))")
    here = str(__import__("pathlib").Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", code, here], capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def test_gpt_blocks_checkpointed_peak_lower_than_without_and_beside_pytorch():
    rm = _rill_gpt()
    x = rill.tensor(X_GPT)
    rill_plain = _rill_peak(lambda: _backward(_gpt_loss(rm, x, False)))
    rill_ck = _rill_peak(lambda: _backward(_gpt_loss(rm, x, True)))
    torch_plain, torch_ck = _torch_gpt_peaks()
    print(f"\nGPT blocks, eager peak bytes: rill {rill_plain} -> {rill_ck} checkpointed; "
          f"PyTorch {torch_plain} -> {torch_ck}")
    assert rill_ck < 0.6 * rill_plain
    if torch_plain is not None:  # the same saving, about, as PyTorch's own checkpoint
        assert torch_ck < torch_plain
        assert rill_ck / rill_plain < 1.5 * torch_ck / torch_plain


def test_gpt_blocks_captured_with_checkpoint_plan_a_lower_peak():
    rm = _rill_gpt()
    x = rill.tensor(X_GPT)
    plans = {}
    for ck in (False, True):
        graph = rill.capture(lambda x: _backward(_gpt_loss(rm, x, ck))).graph_for(x)
        plans[ck] = graph.memory_plan()
    print(f"\nGPT blocks, captured planned peak: {plans[False].unplanned_peak_bytes} -> "
          f"{plans[True].unplanned_peak_bytes} bytes checkpointed")
    assert plans[True].unplanned_peak_bytes < 0.7 * plans[False].unplanned_peak_bytes


def test_dropout_inside_checkpoint_gives_the_gradients_it_gives_without():
    rm = _rill_gpt(dropout=0.3)
    x = rill.tensor(X_GPT)

    def run(ck, step=None):
        rill.manual_seed(7)
        return _rill_grads(rm, step or (lambda: _backward(_gpt_loss(rm, x, ck))))

    plain, eager = run(False), run(True)
    assert eager[0] == plain[0]
    _close(eager[1], plain[1], 0)
    captured = run(True, lambda: rill.capture(lambda x: _backward(_gpt_loss(rm, x, True)))(x))
    _close(captured[1], plain[1], 1e-6)
    rill.manual_seed(7)  # the recomputation put the generator back where the forward left it
    _gpt_loss(rm, x, False)
    after_plain = rill.rand(3).numpy()
    rill.manual_seed(7)
    _backward(_gpt_loss(rm, x, True))
    np.testing.assert_array_equal(rill.rand(3).numpy(), after_plain)
    other = run(False)  # and differs from a run whose masks differ: dropout did draw
    rill.manual_seed(8)
    assert _rill_grads(rm, lambda: _backward(_gpt_loss(rm, x, False)))[0] != other[0]


def test_dropout_on_the_gpu_device_replays_its_philox_draws():
    if not rill.gpu.is_available():
        pytest.skip("no gpu device: " + "; ".join(rill.gpu.missing_parts()))
    gpu = rill.device("gpu")
    w = rill.tensor(np.linspace(0.5, 1.5, 16, dtype=np.float32), device=gpu, requires_grad=True)

    def run(ck):
        w.grad = None
        x = rill.tensor(X_GPT[0, :8, :16], device=gpu, requires_grad=True)
        rill.manual_seed(1)
        block = lambda t: RF.dropout(rill.tanh(t * w), 0.5)  # noqa: E731
        y = checkpoint(block, x) if ck else block(x)
        (y * y).sum().backward()
        return x.grad.numpy(), w.grad.numpy(), rill.rand(4, device=gpu).numpy()

    for plain, checked in zip(run(False), run(True)):  # gradients, and the generator after
        np.testing.assert_array_equal(checked, plain)


def test_without_preserve_rng_state_the_recomputation_draws_anew():
    x = rill.ones((64,), requires_grad=True)
    rill.manual_seed(0)
    checkpoint(lambda t: RF.dropout(t, 0.5), x, preserve_rng_state=False).sum().backward()
    rill.manual_seed(0)
    mask = RF.dropout(rill.ones(64), 0.5).numpy() != 0
    assert not np.array_equal(x.grad.numpy() != 0, mask)  # a second draw chose the gradient


# ---- a CNN -----------------------------------------------------------------------------------

def test_cnn_training_step_with_checkpoint_sequential_matches_pytorch_and_saves_memory():
    tm, rm = _twins(lambda: _cnn(torch.nn), lambda: _cnn(rill.nn))
    x, y = rill.tensor(X_CNN), rill.tensor(Y_CNN)

    def rill_step(x, y, segments):
        out = checkpoint_sequential(rm, segments, x) if segments else rm(x)
        return _backward(RF.cross_entropy(out, y))

    def torch_step(segments):
        for p in tm.parameters():
            p.grad = None
        tx = torch.tensor(X_CNN)
        out = torch_checkpoint.checkpoint_sequential(tm, segments, tx, use_reentrant=False) \
            if segments else tm(tx)
        loss = torch.nn.functional.cross_entropy(out, torch.tensor(Y_CNN))
        loss.backward()
        return loss.item(), [p.grad.numpy().copy() for p in tm.parameters()]

    plain = _rill_grads(rm, rill_step, x, y, 0)
    ck = _rill_grads(rm, rill_step, x, y, 4)
    captured = _rill_grads(rm, rill.capture(lambda x, y: rill_step(x, y, 4)), x, y)
    theirs = torch_step(4)
    _close(ck[1], plain[1], 0)
    _close(captured[1], plain[1], 1e-6)
    assert theirs[0] == pytest.approx(ck[0], rel=1e-5)
    _close(theirs[1], ck[1], 1e-5)
    rill_plain = _rill_peak(lambda: rill_step(x, y, 0))
    rill_ck = _rill_peak(lambda: rill_step(x, y, 4))
    torch_plain, torch_ck = _torch_peak(lambda: torch_step(0)), _torch_peak(lambda: torch_step(4))
    print(f"\nCNN step, eager peak bytes: rill {rill_plain} -> {rill_ck} checkpointed; "
          f"PyTorch {torch_plain} -> {torch_ck}")
    assert rill_ck < 0.8 * rill_plain


# ---- what checkpoint does with its arguments, and what it refuses -----------------------------

def test_gradients_reach_arguments_and_the_tensors_the_function_reads_itself():
    w = rill.tensor([0.5, -1.0, 2.0], requires_grad=True)
    x = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    frozen = rill.tensor([1.0, 1.0, 2.0])  # read, requires no grad

    def f(a, scale, *, shift):
        return (rill.sin(a * w) * scale + shift * frozen, a.sum())

    out, total = checkpoint(f, x, 2.0, shift=rill.ones(3))
    (out.sum() + total).backward()
    xt = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    wt = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    (torch.sin(xt * wt) * 2.0).sum().add(xt.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-6)


def test_a_tensor_with_history_read_inside_gets_its_gradient_once():
    p = rill.tensor([1.0, 2.0], requires_grad=True)
    q = p * 3.0  # computed outside, read by the block both directly and through its argument
    x = checkpoint(lambda a: a * q + q, q)
    x.sum().backward()
    np.testing.assert_allclose(p.grad.numpy(), (2 * 3 * 3 * np.array([1.0, 2.0]) + 3))


def test_second_order_gradients_through_a_checkpoint():
    x = rill.tensor([0.5, 1.5], requires_grad=True)
    first = rill.grad(lambda t: checkpoint(lambda u: (u ** 3).sum(), t).sum())
    second = rill.grad(lambda t: first(t).sum())(x)
    np.testing.assert_allclose(second.numpy(), 6 * x.numpy(), rtol=1e-6)


def test_checkpoint_sequential_runs_the_last_segment_as_is():
    calls = []
    layers = [lambda t, i=i: calls.append(i) or t * 2.0 for i in range(5)]
    x = rill.ones(2, requires_grad=True)
    checkpoint_sequential(layers, 2, x).sum().backward()
    assert calls == [0, 1, 2, 3, 4, 0, 1]  # the first 5 // 2 recomputed in backward
    np.testing.assert_array_equal(x.grad.numpy(), [32.0, 32.0])


def test_refusals_name_the_fix():
    x = rill.ones(2, requires_grad=True)
    with pytest.raises(rill.ArgumentError, match="use_reentrant=False"):
        checkpoint(lambda t: t * 2, x, use_reentrant=True)
    with pytest.raises(rill.ArgumentError, match="context_fn"):
        checkpoint(lambda t: t * 2, x, context_fn=lambda: None)
    with pytest.raises(rill.ArgumentError, match="segments"):
        checkpoint_sequential([lambda t: t], 0, x)
    state = {"n": 2}
    out = checkpoint(lambda t: t[: state["n"]] * 2, x)
    state["n"] = 1  # the recomputation will compute something else
    with pytest.raises(CheckpointError, match="same thing"):
        out.sum().backward()
    w = rill.ones(2)
    out = checkpoint(lambda t: t * w, x)
    w.add_(1.0)
    with pytest.raises(rill.GradientError, match="changed in place"):
        out.sum().backward()


@pytest.mark.filterwarnings("ignore::rill.capture.function.CaptureWarning")
def test_a_compiled_captured_function_is_refused_as_it_hides_what_it_reads():
    lin = rill.nn.Linear(3, 3)
    block = rill.capture(lambda t: rill.tanh(lin(t)))
    x = rill.ones((2, 3), requires_grad=True)
    block(x)
    with pytest.raises(CheckpointError, match="inside the captured function"):
        checkpoint(block, x)
    assert checkpoint(lambda t: t, x) is x  # no op, but nothing hidden either


def test_captured_recomputation_is_not_merged_back_into_the_forward():
    rm = _rill_gpt()
    x = rill.tensor(X_GPT)
    plain = rill.capture(lambda x: _backward(_gpt_loss(rm, x, False))).graph_for(x)
    ck = rill.capture(lambda x: _backward(_gpt_loss(rm, x, True))).graph_for(x)
    # every block's linears run again in the backward pass (qkv, proj, the MLP's first; its
    # last one's output no gradient reads, so dead code elimination drops that recomputation)
    assert ck.count("linear") == plain.count("linear") + 3 * LAYERS
    assert ck.count("uniform") == plain.count("uniform") == 0
