"""In-place results in captured programs (lib/capture/donation.py, issue 20): an elementwise
node writes into an intermediate buffer that dies at it when, at run time, nothing but the
program references it. Checked: the same bits as without donation, on an MLP training step;
a dying temporary taking the result (a lower peak); parameters, their snapshots and views,
.grad buffers, graph inputs and constants never written; and the reference-count test
itself."""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import rill
from rill.capture import donation

executor = importlib.import_module("rill.capture.executor")
BIG = (256, 128)  # float32: 128 KiB, over donation's MIN_BYTES


@pytest.fixture(autouse=True)
def _unfused(monkeypatch):
    """Donation is for ufunc nodes run one by one: these steps' chains stay unfused (the
    pipeline would make them fused nodes, generated C loops that allocate no intermediates)."""
    from rill.capture.passes import fuse
    monkeypatch.setitem(fuse.MIN_ELEMENTS, "cpu", None)


def _program(fn):
    (variant,) = fn.variants.values()
    return variant.program


def test_exclusive_counts_references():
    def fresh():
        a = np.ones(BIG, np.float32)
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert fresh()

    def shared():
        a = np.ones(BIG, np.float32)
        b = a  # noqa: F841 - a second reference
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert not shared()

    def viewed():
        a = np.ones(BIG, np.float32)
        v = a[1:]  # noqa: F841 - a view holds its base
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert not viewed()

    def a_view():
        a = np.ones((2,) + BIG, np.float32)[0]
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert not a_view()  # does not own its memory

    def transposed():
        a = np.ones(BIG, np.float32).T.copy(order="F")
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert not transposed()

    def read_only():
        a = np.ones(BIG, np.float32)
        a.flags.writeable = False
        return donation.exclusive(a, donation.ONE_LOCAL)
    assert not read_only()

    def other_not_c_ordered():
        a = np.ones(BIG, np.float32)
        return donation.exclusive(a, donation.ONE_LOCAL, np.ones(BIG[::-1], np.float32).T)
    assert not other_not_c_ordered()


def _mlp_step(seed):
    rng = np.random.default_rng(seed)
    net = rill.nn.Sequential(rill.nn.Linear(300, 256), rill.nn.ReLU(), rill.nn.Linear(256, 10))
    net.load_state_dict({k: rill.tensor(rng.standard_normal(tuple(v.shape)).astype(np.float32)
                                        / 16) for k, v in net.state_dict().items()})
    opt = rill.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = rill.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return net, step


def test_same_bits_as_without_donation(monkeypatch):
    rng = np.random.default_rng(0)
    x = rill.tensor(rng.standard_normal((16, 300)).astype(np.float32))
    y = rill.tensor(rng.integers(0, 10, 16))
    results = []
    for donate in (True, False):
        if not donate:
            monkeypatch.setattr(executor, "donor", lambda *a: None)
        net, step = _mlp_step(1)
        fn = rill.capture(step)
        losses = [float(fn(x, y)) for _ in range(4)]
        assert ("exclusive(" in _program(fn).source) == donate
        results.append((losses, [p.numpy().copy() for p in net.parameters()]))
    (l1, p1), (l2, p2) = results
    assert l1 == l2
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)


def test_a_dying_temporary_takes_the_result(monkeypatch):
    """(x * 2) + 1 with the memory plan off: the sum is written into the product's buffer,
    so a call's peak is one (1024, 1024) float32 buffer (4 MiB) instead of two."""
    import tracemalloc
    from rill.capture.passes import memory
    monkeypatch.setattr(memory, "ENABLED", False)
    x = rill.tensor(np.ones((1024, 1024), np.float32))
    peaks = {}
    for donate in (True, False):
        if not donate:
            monkeypatch.setattr(executor, "donor", lambda *a: None)
        fn = rill.capture(lambda x: (x * 2.0) + 1.0)
        fn(x)
        tracemalloc.start()
        try:
            out = fn(x)
            peaks[donate] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        np.testing.assert_array_equal(out.numpy(), 3.0)
    assert peaks[True] < 5 * 2**20 < 8 * 2**20 <= peaks[False]


def test_the_bias_added_after_a_batched_product_takes_its_buffer(monkeypatch):
    """x @ W + b with x (B, T, C): the GEMM's result owns its memory (not a reshaped view of
    the 2-D product's), so the add is written into it: one (16, 256, 256) float32 buffer
    (4 MiB) at the peak instead of two, and the same bits as eager."""
    import tracemalloc
    from rill.capture.passes import memory
    monkeypatch.setattr(memory, "ENABLED", False)
    rng = np.random.default_rng(3)
    x = rill.tensor(rng.standard_normal((16, 256, 64)).astype(np.float32))
    w = rill.tensor(rng.standard_normal((64, 256)).astype(np.float32))
    b = rill.tensor(rng.standard_normal(256).astype(np.float32))
    eager = (x @ w + b).numpy()
    fn = rill.capture(lambda x, w, b: x @ w + b)
    fn(x, w, b)
    tracemalloc.start()
    try:
        out = fn(x, w, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "exclusive(" in _program(fn).source
    assert peak < 5 * 2**20, peak
    assert out.numpy().tobytes() == eager.tobytes()


def _doubler():
    p = rill.nn.Parameter(rill.tensor(np.arange(np.prod(BIG), dtype=np.float32).reshape(BIG)))

    @rill.capture
    def double():
        with rill.no_grad():
            p.mul_(2.0)
    double()  # traced
    return p, double


def test_a_parameter_buffer_is_never_written_in_place():
    """A parameter's buffer belongs to the model: written in place, it would stay changed if a
    later node of the step failed. The update makes a new buffer."""
    p, double = _doubler()
    assert "exclusive(" not in _program(double).source
    address = p._data.__array_interface__["data"][0]
    expected = p.numpy().copy() * 2
    double()
    # The new buffer is made while the old one is alive: another address.
    assert p._data.__array_interface__["data"][0] != address
    np.testing.assert_array_equal(p.numpy(), expected)


@pytest.mark.parametrize("hold", ["detach", "numpy view", "alias"])
def test_a_held_buffer_is_never_written(hold):
    p, double = _doubler()
    old = p.numpy().copy()
    keep = {"detach": p.detach, "numpy view": p.numpy, "alias": lambda: p._data}[hold]()
    double()
    np.testing.assert_array_equal(np.asarray(keep.numpy() if hold == "detach" else keep), old)
    np.testing.assert_array_equal(p.numpy(), old * 2)


def test_a_grad_buffer_is_never_written():
    """Accumulating into .grad makes a new .grad Tensor: the old one, which the user may
    hold, must keep its values, although only that Tensor references its buffer."""
    w = rill.nn.Parameter(rill.ones(BIG))
    w.grad = rill.zeros(BIG)

    @rill.capture
    def step(x):
        (w * x).sum().backward()  # w.grad = w.grad + x

    x = rill.tensor(np.full(BIG, 2.0, np.float32))
    step(x)  # traced
    held = w.grad
    step(x)
    assert held is not w.grad
    np.testing.assert_array_equal(held.numpy(), 2.0)
    np.testing.assert_array_equal(w.grad.numpy(), 4.0)


def test_inputs_and_constants_are_not_candidates():
    @rill.capture
    def shift(x):
        return x + 1.0

    x = rill.tensor(np.full(BIG, 2.0, np.float32))
    out = shift(x)
    assert "exclusive(" not in _program(shift).source
    np.testing.assert_array_equal(x.numpy(), 2.0)
    np.testing.assert_array_equal(out.numpy(), 3.0)


def test_one_local_is_measured_through_a_call():
    def seen(buffer):
        return sys.getrefcount(buffer)

    def held_by_one_local():
        a = np.empty(1)
        return seen(a)

    def held_by_two_locals():
        a = np.empty(1)
        b = a  # noqa: F841
        return seen(a)
    assert held_by_one_local() == donation.ONE_LOCAL
    assert held_by_two_locals() == donation.ONE_LOCAL + 1


def test_calibration_ignores_a_tracer_that_reads_locals():
    def tracer(frame, event, arg):
        frame.f_locals  # a debugger's view of the locals holds references to them
        return tracer
    sys.settrace(tracer)
    try:
        measured = donation._calibrated()
    finally:
        sys.settrace(None)
    assert measured == donation.ONE_LOCAL is not None


def test_a_donated_quiet_op_stays_quiet(monkeypatch, recwarn):
    """divide's kernel lets inf come out without a warning; written into a dying input, too."""
    from rill.capture.passes import memory
    monkeypatch.setattr(memory, "ENABLED", False)
    fn = rill.capture(lambda x, y: (x * 1.5) / y)
    x, y = rill.tensor(np.ones(BIG, np.float32)), rill.tensor(np.zeros(BIG, np.float32))
    with np.errstate(all="raise"):
        for _ in range(2):
            out = fn(x, y)
    assert "exclusive(" in _program(fn).source
    np.testing.assert_array_equal(out.numpy(), np.inf)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
