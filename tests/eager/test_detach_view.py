"""detach() is a view, as PyTorch's (issue 32): writes through it reach the tensor, and a
backward that read the tensor before the write refuses. Module.state_dict() entries are
such views too; what rill hands out as values of their own (gradients, copies) are not.

PyTorch is the oracle: each test runs the same program in both and compares.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")

LIBS = [rill, torch]


def _values(lib):
    return lib.tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]])


def _same(r, t):
    np.testing.assert_array_equal(np.asarray(r.detach().numpy()), t.detach().numpy())


@pytest.mark.parametrize("write", ["zero_", "add_", "setitem", "iadd"])
@pytest.mark.parametrize("kind", ["plain", "leaf requiring grad", "non-leaf"])
def test_a_write_through_detach_reaches_the_tensor(write, kind):
    results = []
    for lib in LIBS:
        x = _values(lib)
        if kind == "leaf requiring grad":
            x.requires_grad_()
        elif kind == "non-leaf":
            x = _values(lib).requires_grad_() * 2.0
        d = x.detach()
        if write == "zero_":
            d.zero_()
        elif write == "add_":
            d.add_(1)
        elif write == "setitem":
            d[1, 2] = 9.0
        else:
            d += 1
        results.append((x, d))
    (rx, rd), (tx, td) = results
    _same(rx, tx)
    _same(rd, td)
    assert rx.requires_grad == tx.requires_grad and not rd.requires_grad


def test_detach_is_cut_from_the_tape():
    for lib in LIBS:
        x = _values(lib).requires_grad_()
        d = (x * 3.0).detach()
        assert not d.requires_grad and d.is_leaf
        (d * x).sum().backward()
        _same(x.grad, (_values(torch) * 3.0))


@pytest.mark.parametrize("write", ["zero_", "add_"])
def test_backward_that_read_the_tensor_before_the_write_refuses(write):
    """PyTorch's detach shares the version counter: a backward through an op that saved x
    refuses after x.detach() was written. rill's tape checks x's version the same way."""
    for lib, error in ((rill, rill.GradientError), (torch, RuntimeError)):
        w = _values(lib).requires_grad_()
        x = _values(lib) + 1.0
        y = (w * x).sum()  # mul saves x for w's gradient
        getattr(x.detach(), write)(*(() if write == "zero_" else (1,)))
        with pytest.raises(error, match="in ?place"):
            y.backward()


def test_a_leaf_written_through_detach_refuses_a_stale_backward():
    for lib, error in ((rill, rill.GradientError), (torch, RuntimeError)):
        x = _values(lib).requires_grad_()
        y = (x * x).sum()
        x.detach().mul_(2.0)
        with pytest.raises(error, match="in ?place"):
            y.backward()


@pytest.mark.parametrize("how", ["detach", "no_grad"])
def test_an_output_an_op_saved_then_written_refuses_backward(how):
    """sigmoid's gradient reads its output: PyTorch refuses once it changed; rill did not
    know the value was gone and failed inside multiply's argument check."""
    for lib, error in ((rill, rill.GradientError), (torch, RuntimeError)):
        x = _values(lib).requires_grad_()
        y = x.sigmoid()
        if how == "detach":
            y.detach().zero_()
        else:
            with lib.no_grad():
                y.zero_()
        with pytest.raises(error, match="in ?place"):
            y.sum().backward()


def test_a_backward_recorded_after_the_write_sees_the_new_value():
    grads = []
    for lib in LIBS:
        x = _values(lib).requires_grad_()
        x.detach().mul_(2.0)
        (x * x).sum().backward()
        grads.append(x.grad)
    _same(*grads)


def test_captured_write_through_detach_matches_eager():
    def step(x):
        y = x * 1.0
        y.detach()[0].add_(5.0)
        return y

    x = _values(rill)
    captured = rill.capture(step)
    want = step(_values(torch)).numpy()
    for _ in range(2):
        np.testing.assert_array_equal(captured(x).numpy(), want)
    np.testing.assert_array_equal(x.numpy(), _values(torch).numpy())


# ---- Module.state_dict() ----------------------------------------------------------------------


def _linear(lib):
    m = lib.nn.Linear(3, 2)
    with lib.no_grad():
        m.weight.copy_(lib.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]]))
        m.bias.copy_(lib.tensor([0.25, -0.75]))
    return m


def test_state_dict_entries_write_through_to_the_parameters():
    results = []
    for lib in LIBS:
        m = _linear(lib)
        sd = m.state_dict()
        sd["weight"].zero_()
        sd["bias"].add_(1)
        out = m(lib.tensor([[1.0, 2.0, 3.0]]))
        results.append((m.weight, m.bias, out, sd["weight"]))
    for r, t in zip(*results):
        _same(r, t)
    assert float(results[0][0].abs().sum()) == 0.0


def test_state_dict_buffers_write_through():
    results = []
    for lib in LIBS:
        bn = lib.nn.BatchNorm1d(3)
        bn.state_dict()["running_mean"].fill_(2.0)
        bn.eval()
        results.append((bn.running_mean, bn(lib.tensor([[1.0, 2.0, 3.0]]))))
    for r, t in zip(*results):
        np.testing.assert_allclose(np.asarray(r.detach().numpy()), t.detach().numpy(),
                                   rtol=1e-6)


def test_a_parameter_changed_through_state_dict_refuses_a_stale_backward():
    for lib, error in ((rill, rill.GradientError), (torch, RuntimeError)):
        m = _linear(lib)
        x = lib.tensor([[1.0, 2.0, 3.0]], requires_grad=True)  # x's gradient needs weight
        y = m(x).sum()
        m.state_dict()["weight"].mul_(2.0)
        with pytest.raises(error, match="in ?place"):
            y.backward()


def test_state_dict_still_loads_and_keep_vars_gives_the_parameters():
    a, b = _linear(rill), rill.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    _same(b.weight, _linear(torch).weight)
    sd = a.state_dict()
    b.load_state_dict(sd)
    sd["weight"].zero_()  # a's weight, not b's: loading copied the values
    _same(b.weight, _linear(torch).weight)
    assert float(a.weight.abs().sum()) == 0.0
    assert a.state_dict(keep_vars=True)["weight"] is a.weight


# ---- what rill hands out as values of their own -----------------------------------------------


def test_gradients_are_not_views_of_anything():
    """a + b hands both leaves the same cotangent: writing one gradient in place must change
    neither the other nor any tensor of the program, as in PyTorch."""
    results = []
    for lib in LIBS:
        a, b = _values(lib).requires_grad_(), _values(lib).requires_grad_()
        c = _values(lib) * 3.0
        (a + b + c).sum().backward()
        a.grad.add_(1.0)
        a.grad[0, 0] = 7.0
        results.append((a, b, c, a.grad, b.grad))
    for r, t in zip(*results):
        _same(r, t)


def test_gradients_from_rill_grad_are_values_of_their_own():
    x = _values(rill)
    g = rill.grad(lambda t: (t * t).sum())(x)
    g.zero_()
    np.testing.assert_array_equal(x.numpy(), _values(torch).numpy())


def test_rill_tensor_and_clone_copy():
    copies = (lambda t: rill.tensor(t), lambda t: t.clone(), lambda t: rill.asarray(t, copy=True))
    for copy in copies:
        x = _values(rill)
        y = copy(x)
        y.zero_()
        y[0, 0] = 5.0
        np.testing.assert_array_equal(x.numpy(), _values(torch).numpy())


def test_rill_tensor_copies_under_capture_too():
    def step(x):
        y = rill.tensor(x)
        y.add_(1.0)
        return x * 1.0, y

    x = _values(rill)
    kept, moved = rill.capture(step)(x)
    np.testing.assert_array_equal(kept.numpy(), _values(torch).numpy())
    np.testing.assert_array_equal(moved.numpy(), _values(torch).numpy() + 1.0)


def test_custom_vjp_output_is_not_a_view_of_its_input():
    @rill.custom_vjp
    def identity(x):
        return x

    identity.defvjp(lambda x: (x, None), lambda res, g: (g,))
    x = _values(rill).requires_grad_()
    y = identity(x)
    with rill.no_grad():
        y.zero_()
    np.testing.assert_array_equal(x.numpy(), _values(torch).numpy())


def _reaches_a_parameter(objects, depth=3) -> bool:
    import gc
    for o in objects:
        if isinstance(o, rill.nn.Parameter):
            return True
        if depth and isinstance(o, (rill.Tensor, tuple)) and \
                _reaches_a_parameter(gc.get_referents(o), depth - 1):
            return True
    return False


def test_deepcopy_of_a_state_dict_copies_values_not_the_parameters_behind_them():
    import copy
    results = []
    for lib in LIBS:
        m = _linear(lib)
        m(lib.tensor([[1.0, 2.0, 3.0]])).sum().backward()
        saved = copy.deepcopy(m.state_dict())
        saved["weight"].zero_()
        results.append((m.weight, saved["weight"], saved["bias"]))
    for r, t in zip(*results):
        _same(r, t)
    m = _linear(rill)
    m(rill.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert _reaches_a_parameter(m.state_dict().values())  # a view holds its base ...
    assert not _reaches_a_parameter(copy.deepcopy(m.state_dict()).values())  # ... a copy not


def test_deepcopy_keeps_a_view_of_a_base_copied_with_it():
    import copy
    results = []
    for lib in LIBS:
        x = _values(lib)
        base, view = copy.deepcopy([x, x.T])
        view[0].add_(1.0)
        results.append((x, base, view))
    for r, t in zip(*results):
        _same(r, t)
