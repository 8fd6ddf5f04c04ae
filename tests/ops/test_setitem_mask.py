"""x[mask] = v with a 0-d boolean mask, as NumPy and PyTorch write it (SciPy's stats
functions do it through array_api_extra's `at`): True writes the whole indexed region, False
writes nothing, also beside other indices, inside a capture and under the tape.
"""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")

KEYS = ["m", "(m, 0)", "(0, m)", "(Ellipsis, m)", "(m, [0, 2])", "(slice(None), m, 1)",
        "(m, m)", "(m, slice(None), None)", "(1, slice(1, 3), m)"]
# NumPy counts an int beside a 0-d mask as an advanced index (x[1, 1:3, True] has shape
# (1, 2)); PyTorch applies the int first (shape (2, 1)). rill reads keys as NumPy does.
TORCH_DIFFERS = {"(1, slice(1, 3), m)"}


def _key(text, mask):
    return eval(text, {"m": mask})  # noqa: S307 - the test's own key spellings


def _values(shape):
    return np.arange(10.0, 10.0 + shape[-1]) if shape and shape[-1] else np.float64(7.0)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("text", KEYS)
def test_zero_d_mask_setitem_matches_numpy_and_torch(text, value):
    a = np.arange(12.0).reshape(3, 4)
    x, t = rill.tensor(a), torch.tensor(a)
    masks = (np.bool_(value), rill.tensor(value), torch.tensor(value))
    k_np, k_rill, k_torch = (_key(text, m) for m in masks)
    try:
        v = _values(a[k_np].shape)
        a[k_np] = v
    except IndexError:  # NumPy refuses this key for this mask value: rill must too
        with pytest.raises(rill.IndexingError):
            x[k_rill] = 1.0
        return
    x[k_rill] = rill.tensor(v)
    np.testing.assert_array_equal(x.numpy(), a)
    if text not in TORCH_DIFFERS:
        t[k_torch] = torch.tensor(v)
        np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("value", [True, False])
def test_zero_d_mask_augmented_assignment_and_index_add(value):
    a = np.ones((2, 3))
    x = rill.tensor(a)
    a[np.bool_(value)] += 5.0
    x[rill.tensor(value)] += 5.0
    np.testing.assert_array_equal(x.numpy(), a)
    added = rill.index_add(rill.ones(2, 3), (rill.tensor(value), 1), rill.tensor([1.0, 2.0, 3.0]))
    want = np.ones((2, 3))
    if value:
        want[1] += [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(added.numpy(), want)


@pytest.mark.parametrize("value", [True, False])
def test_zero_d_mask_setitem_inside_capture_follows_the_mask_at_run_time(value):
    @rill.capture
    def clear_where(x, flag):
        y = x * 1.0
        y[flag] = 0.0
        return y

    x = rill.arange(6.0).reshape(2, 3)
    for flag in (value, not value):  # one trace serves both values
        got = clear_where(x, rill.tensor(flag))
        want = np.zeros((2, 3)) if flag else np.arange(6.0).reshape(2, 3)
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("value", [True, False])
def test_zero_d_mask_setitem_gradients_match_torch(value):
    grads = []
    for lib in (rill, torch):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        v = lib.tensor([5.0, 6.0], requires_grad=True)
        y = x * 2.0
        y[lib.tensor(value), 1] = v * v
        (y * lib.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        grads.append((np.asarray(x.grad.tolist()), np.asarray(v.grad.tolist())))
    for got, want in zip(*grads):
        np.testing.assert_array_equal(got, want)


def test_a_zero_d_mask_value_must_fit_the_region():
    x = rill.zeros(2, 3)
    with pytest.raises(rill.ShapeError):
        x[rill.tensor(True)] = rill.ones(4)
