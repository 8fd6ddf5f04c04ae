"""The CPU allocator tuning: on by default on Linux/glibc, off with RILL_CPU_MALLOC=system."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")

PROBE = "import rill.cpu_memory as m; print(m.TUNED)"


def _run(env_value):
    env = dict(os.environ)
    env.pop("RILL_CPU_MALLOC", None)
    if env_value is not None:
        env["RILL_CPU_MALLOC"] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env=env, check=True).stdout.strip()


def test_tuned_by_default_and_not_when_asked():
    assert _run(None) == "True"
    assert _run("system") == "False"


def test_large_buffers_stop_faulting_in_after_reuse():
    # Several large buffers live at once, then freed, again and again (as the ops of a
    # training step): with the tuning the pages are reused; glibc's default returns them to
    # the system and faults them in anew every round.
    code = ("import resource, numpy as np, rill\n"
            "def work():\n"
            "    live = [np.ones(n, np.float32) for n in (2_000_000, 3_000_000, 5_000_000)]\n"
            "for _ in range(3): work()\n"
            "r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
            "for _ in range(10): work()\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)")
    faults = {}
    for mode in (None, "system"):
        env = dict(os.environ)
        env.pop("RILL_CPU_MALLOC", None)
        if mode:
            env["RILL_CPU_MALLOC"] = mode
        faults[mode] = int(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                          text=True, env=env, check=True).stdout)
    assert faults[None] * 10 < faults["system"], faults


# ---- buffers past the mmap threshold: reused only when no one holds them ------------------

def _big():
    import numpy as np
    import rill
    from rill import cpu_memory
    n = cpu_memory.RECYCLE_MIN_BYTES // 4
    return np, rill, cpu_memory, n


def test_a_replaced_buffer_that_no_one_holds_serves_the_next_result():
    np, rill, cpu_memory, n = _big()
    cpu_memory.clear()
    t = rill.zeros(n)
    replaced = id(t._data)
    with rill.no_grad():
        t += 1.0                                # replaces t's buffer; no one else holds it
    y = rill.ops.elementwise.scaled_add(t, t, 1.0, 2.0)
    assert id(y._data) == replaced              # the result was written into it
    assert float(y[0]) == 3.0 and float(y[-1]) == 3.0 and float(t[0]) == 1.0
    cpu_memory.clear()


@pytest.mark.parametrize("hold", ["numpy view", "detached tensor", "state_dict",
                                  "tape node"])
def test_a_replaced_buffer_someone_holds_is_never_written(hold):
    """rill's buffers are never written once made: what `.numpy()`, `detach()`, a state_dict
    or a saved tensor handed out keeps its values through later optimizer steps."""
    np, rill, cpu_memory, n = _big()
    cpu_memory.clear()
    p = rill.nn.Parameter(rill.zeros(n))
    model = rill.nn.Module()
    model.w = p
    if hold == "numpy view":
        held = p.numpy()
    elif hold == "detached tensor":
        held = p.detach()
    elif hold == "state_dict":
        held = model.state_dict()["w"]
    else:
        q = rill.ones(n, requires_grad=True)
        held = q * p.detach()                   # the multiply saves p's buffer for backward
    opt = rill.optim.SGD([p], lr=1.0, momentum=0.5)
    for _ in range(3):
        p.grad = rill.ones(n)
        opt.step()
        y = rill.ops.elementwise.scaled_add(p, p, 1.0, 1.0)  # asks for a buffer of p's size
        assert float(y[0]) == 2 * float(p[0])
    if hold == "tape node":
        held.sum().backward()                   # d/dq (q * p_then) is p's value back then
        held = q.grad
    values = held if isinstance(held, np.ndarray) else held.numpy()
    assert not values.any(), hold               # still the zeros it was made from
    assert float(p[0]) != 0.0
    cpu_memory.clear()


def test_zero_grad_gives_back_a_gradient_no_one_holds():
    np, rill, cpu_memory, n = _big()
    cpu_memory.clear()
    p = rill.nn.Parameter(rill.zeros(n))
    opt = rill.optim.SGD([p], lr=1.0)
    p.grad = rill.ones(n)
    freed = id(p.grad._data)
    opt.zero_grad()
    assert p.grad is None
    y = rill.ops.elementwise.scaled_add(p, p, 1.0, 1.0)
    assert id(y._data) == freed and not y.numpy().any()   # written into the gradient's buffer
    held = rill.ones(n)
    p.grad = held                                          # the user keeps the gradient
    opt.zero_grad()
    rill.ops.elementwise.scaled_add(p, p, 1.0, 1.0)
    assert held.numpy().all()                              # never written
    cpu_memory.clear()


def test_a_captured_steps_large_gradient_is_kept_for_its_next_call():
    """The gradient a captured step leaves in .grad is replaced by the next call's: kept, and
    the call after writes its gradient there; the steps match eager ones."""
    np, rill, cpu_memory, n = _big()
    cpu_memory.clear()
    models = []
    for _ in range(2):
        rill.manual_seed(0)
        model = rill.nn.Linear(2048, n // 2048, bias=False)   # a 32 MB weight
        models.append((model, rill.optim.SGD(model.parameters(), lr=0.1)))
    x = rill.ones(2, 2048)

    def step(model, opt):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    wants = [float(step(*models[0])) for _ in range(3)]
    cpu_memory.clear()
    captured = rill.capture(lambda: step(*models[1]))
    for call, want in enumerate(wants):
        got = float(captured())
        assert abs(got - want) <= 1e-5 * abs(want), call
        # the replaced weight, and from the second call the last call's gradient
        assert cpu_memory._kept_bytes == (2 if call else 1) * n * 4, call
    np.testing.assert_allclose(models[1][0].weight.numpy(), models[0][0].weight.numpy(),
                               rtol=1e-5, atol=1e-7)
    cpu_memory.clear()


def test_at_most_a_few_buffers_of_one_shape_are_kept():
    """Buffers of a shape no kernel asks for again (a gradient some kernel allocates itself)
    do not pile up to RECYCLE_MAX_BYTES: at most RECYCLE_PER_SHAPE of a shape are kept."""
    np, rill, cpu_memory, n = _big()
    cpu_memory.clear()
    for _ in range(cpu_memory.RECYCLE_PER_SHAPE + 2):
        a = np.ones(n, np.float32)
        cpu_memory.give(a)
        del a
    assert cpu_memory._kept_bytes == cpu_memory.RECYCLE_PER_SHAPE * n * 4
    cpu_memory.clear()
