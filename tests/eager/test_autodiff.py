"""The tape and the autodiff API: backward, .grad, higher derivatives, grad/value_and_grad,
custom_vjp, sparse gradients, no_grad, retain_graph, in-place safety."""
import gc
import math

import numpy as np
import pytest
import torch

import rill


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=tol, atol=tol)


# ---- higher-order derivatives --------------------------------------------------------------

@pytest.mark.parametrize("x0", [-1.3, 0.0, 0.4, 2.0])
def test_third_derivative_of_tanh(x0):
    d3 = rill.grad(rill.grad(rill.grad(rill.tanh)))
    t = math.tanh(x0)
    # d/dx tanh = 1 - t^2; second = -2t(1-t^2); third = -2(1-t^2)(1-3t^2)
    close(d3(rill.tensor(x0, dtype=rill.float64)), -2 * (1 - t * t) * (1 - 3 * t * t))


@pytest.mark.parametrize("x0", [-2.0, 0.3, 1.7])
def test_third_derivative_of_x_sin_x(x0):
    f = lambda x: x * rill.sin(x)  # noqa: E731
    d3 = rill.grad(rill.grad(rill.grad(f)))
    # (x sin x)''' = -3 sin x - x cos x
    close(d3(rill.tensor(x0, dtype=rill.float64)), -3 * math.sin(x0) - x0 * math.cos(x0))


def test_backward_create_graph_gives_differentiable_grads():
    x = rill.tensor([0.5, -1.0], dtype=rill.float64, requires_grad=True)
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    g = x.grad                      # 3x^2, itself on the tape
    x.grad = None
    g.sum().backward()              # d/dx sum(3x^2) = 6x
    close(x.grad, 6 * np.array([0.5, -1.0]))


def test_hessian_vector_product_matches_pytorch():
    a = np.array([[2.0, 1.0], [0.5, 3.0]])
    f = lambda w: (rill.tanh(rill.tensor(a) @ w) ** 2).sum()  # noqa: E731
    w0, v = np.array([0.3, -0.2]), np.array([1.0, 2.0])
    hvp = rill.grad(lambda w: (rill.grad(f)(w) * rill.tensor(v)).sum())(rill.tensor(w0))
    tw = torch.tensor(w0, requires_grad=True)
    tg, = torch.autograd.grad((torch.tanh(torch.tensor(a) @ tw) ** 2).sum(), tw, create_graph=True)
    th, = torch.autograd.grad((tg * torch.tensor(v)).sum(), tw)
    close(hvp, th.numpy())


# ---- backward and .grad --------------------------------------------------------------------

def test_grad_accumulates_on_leaves_until_reset():
    w = rill.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * 3).sum().backward()
    close(w.grad, [6.0, 6.0])
    w.grad = None
    (w * w).sum().backward()
    close(w.grad, [2.0, 4.0])


def test_backward_with_explicit_cotangent():
    x = rill.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(rill.tensor([1.0, 0.0, 2.0]))
    close(x.grad, [2.0, 0.0, 12.0])


def test_shared_subexpressions_sum_their_cotangents():
    x = rill.tensor(1.5, dtype=rill.float64, requires_grad=True)
    a = rill.exp(x)
    (a * a + a).backward()
    close(x.grad, 2 * math.exp(3.0) + math.exp(1.5))


def test_tape_is_freed_after_backward_unless_retained():
    x = rill.tensor([1.0], requires_grad=True)
    y = rill.tanh(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    close(x.grad, 2 * (1 - math.tanh(1.0) ** 2), tol=1e-6)
    with pytest.raises(rill.GradientError, match="retain_graph"):
        y.backward()


def test_tape_nodes_are_released_and_not_leaked():
    x = rill.ones(1000, requires_grad=True)
    y = rill.tanh(x * 2).sum()
    node = y._node
    y.backward()
    assert node.inputs is None  # released: buffers can go
    import weakref
    z = rill.exp(x)
    ref = weakref.ref(z)
    del z
    gc.collect()
    assert ref() is None


def test_retain_grad_on_intermediate():
    x = rill.tensor([1.0, 2.0], requires_grad=True)
    h = (x * 2).retain_grad()
    (h * h).sum().backward()
    close(h.grad, [4.0, 8.0])
    close(x.grad, [8.0, 16.0])


def test_detach_and_no_grad_stop_the_tape():
    x = rill.tensor([1.0], requires_grad=True)
    assert not x.detach().requires_grad
    with rill.no_grad():
        y = x * 2
        with rill.enable_grad():
            z = x * 2
    assert not y.requires_grad and z.requires_grad
    assert rill.is_grad_enabled()


def test_no_grad_is_a_decorator_and_per_thread():
    import threading
    seen = {}

    @rill.no_grad()
    def inside():
        seen["main"] = rill.is_grad_enabled()
        t = threading.Thread(target=lambda: seen.setdefault("thread", rill.is_grad_enabled()))
        t.start()
        t.join()

    inside()
    assert seen == {"main": False, "thread": True}
    assert rill.is_grad_enabled()


def test_integer_outputs_do_not_require_grad():
    x = rill.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, idx = rill.topk(x, 2)
    assert values.requires_grad and not idx.requires_grad
    assert not (x > 1).requires_grad


# ---- functional API ------------------------------------------------------------------------

def test_value_and_grad_with_argnums_and_aux():
    def f(w, b, scale):
        loss = ((w * scale + b) ** 2).sum()
        return loss, {"scale": scale}
    w, b = rill.tensor([1.0, 2.0]), rill.tensor(0.5)
    (value, aux), (gw, gb) = rill.value_and_grad(f, argnums=(0, 1), has_aux=True)(w, b, 3.0)
    close(value, (3.5 ** 2 + 6.5 ** 2), tol=1e-6)
    close(gw, [2 * 3.5 * 3, 2 * 6.5 * 3], tol=1e-5)
    close(gb, 2 * 3.5 + 2 * 6.5, tol=1e-5)
    assert aux == {"scale": 3.0}
    assert not w.requires_grad  # the caller's tensors are left alone


def test_grad_over_nested_structures():
    params = {"w": rill.tensor([1.0, 2.0]), "layers": [rill.tensor(3.0)]}
    g = rill.grad(lambda p: (p["w"] * p["layers"][0]).sum())(params)
    close(g["w"], [3.0, 3.0])
    close(g["layers"][0], 3.0)


def test_grad_of_unused_argument_is_zero():
    g = rill.grad(lambda x, y: (x * 2).sum(), argnums=1)(rill.ones(2), rill.ones(3))
    close(g, np.zeros(3))


def test_grad_needs_a_scalar_float_output():
    with pytest.raises(rill.GradientError, match="one-element"):
        rill.grad(lambda x: x * 2)(rill.ones(3))


# ---- custom_vjp ----------------------------------------------------------------------------

def test_custom_vjp_replaces_the_gradient():
    @rill.custom_vjp
    def stable_log1pexp(x):
        return rill.softplus(x)

    def fwd(x):
        return rill.softplus(x), x

    def bwd(x, g):
        return (g * rill.sigmoid(x),)

    stable_log1pexp.defvjp(fwd, bwd)
    x = rill.tensor([-50.0, 0.0, 50.0], dtype=rill.float64)
    g = rill.grad(lambda x: stable_log1pexp(x).sum())(x)
    close(g, 1 / (1 + np.exp(-np.array([-50.0, 0.0, 50.0]))))
    # Without grad it is just the function.
    close(stable_log1pexp(x), np.logaddexp(0, [-50.0, 0.0, 50.0]))


def test_custom_vjp_identity_keeps_input_a_leaf_and_works_twice():
    @rill.custom_vjp
    def scale_grad(x, k):
        return x

    scale_grad.defvjp(lambda x, k: (x, k), lambda k, g: (g * k, None))
    x = rill.tensor([1.0, 2.0], requires_grad=True)
    y = scale_grad(x, 10.0)
    assert x.is_leaf and not y.is_leaf
    (y * y).sum().backward()
    close(x.grad, [20.0, 40.0])


# ---- sparse gradients ----------------------------------------------------------------------

def test_gather_gradient_is_sparse_rows():
    table = rill.randn(1000, 8, requires_grad=True)
    idx = rill.tensor([3, 7, 3])
    (table[idx] * 2).sum().backward()
    g = table.grad
    assert isinstance(g, rill.SparseRows)
    assert g.rows.shape == (3, 8) and g.shape == (1000, 8)
    dense = g.to_dense().numpy()
    assert dense[3].tolist() == [4.0] * 8 and dense[7].tolist() == [2.0] * 8
    assert np.count_nonzero(dense.sum(axis=1)) == 2
    c = g.coalesce()
    assert c.indices.tolist() == [3, 7]
    close(c.rows.numpy()[0], [4.0] * 8)


def test_sparse_gradients_accumulate_and_densify_when_needed():
    table = rill.ones(5, 2, requires_grad=True)
    rill.take(table, rill.tensor([0, 1]), axis=0).sum().backward()
    rill.take(table, rill.tensor([1]), axis=0).sum().backward()
    assert isinstance(table.grad, rill.SparseRows)
    close(np.asarray(table.grad)[:, 0], [1, 2, 0, 0, 0])
    (table * 1.0).sum().backward()       # a dense contribution densifies
    assert isinstance(table.grad, rill.Tensor)
    close(table.grad.numpy()[:, 0], [2, 3, 1, 1, 1])


def test_sparse_rows_inside_the_graph_are_densified_for_other_rules():
    x = rill.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    h = x[rill.tensor([1])]          # gather: sparse cotangent flows into x
    y = (h * x).sum()                # x also used densely
    y.backward()
    # directly: h broadcast over x's rows; through the gather: column sums of x, into row 1
    close(x.grad, [[3.0, 4.0], [3.0 + (1.0 + 3.0), 4.0 + (2.0 + 4.0)]])


# ---- in-place safety -----------------------------------------------------------------------

def test_inplace_after_use_is_caught_at_backward():
    w = rill.tensor([1.0, 2.0], requires_grad=True)
    x = rill.tensor([3.0, 4.0])
    y = (w * x).sum()
    x += 1
    with pytest.raises(rill.GradientError, match="changed in place"):
        y.backward()


def test_inplace_on_non_leaf_is_differentiable():
    x = rill.tensor([1.0, 2.0], dtype=rill.float64, requires_grad=True)
    h = rill.tanh(x)
    h *= 3            # non-leaf: recorded as an out-of-place multiply on h's old value
    h.sum().backward()
    close(x.grad, 3 * (1 - np.tanh([1.0, 2.0]) ** 2))


def test_setitem_with_a_value_that_requires_grad():
    v = rill.tensor([5.0, 6.0], requires_grad=True)
    x = rill.zeros(3, 2)
    x[1] = v
    assert x.requires_grad and not x.is_leaf
    (x * 2).sum().backward()
    close(v.grad, [2.0, 2.0])


def test_optimizer_style_update_under_no_grad():
    w = rill.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    with rill.no_grad():
        w -= 0.1 * w.grad
    assert w.is_leaf and w.requires_grad
    close(w.numpy(), [0.8, 1.6], tol=1e-6)


def test_changing_an_index_output_in_place_does_not_change_the_saved_one():
    # topk's rule reads its indices; the user's handle on them is theirs to change.
    x = rill.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values, indices = rill.topk(x, 3)
    with rill.no_grad():
        indices += 1
    (values * rill.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 3.0, 2.0])
