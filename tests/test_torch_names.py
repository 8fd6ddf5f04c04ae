"""PyTorch's spellings and meanings: keyword aliases, functions, Tensor methods, views written
through, casts, devices and the errors that name rill's spelling. Each checked against torch
on the same inputs."""
import warnings

import numpy as np
import pytest
import torch

import rill

A = np.random.default_rng(0).standard_normal((3, 4))


def pair(a=A):
    return rill.tensor(a), torch.tensor(a)


def same(r, t, tol=1e-12):
    if isinstance(t, (tuple, list)):
        assert len(r) == len(t)
        for a, b in zip(r, t):
            same(a, b, tol)
        return
    if isinstance(t, torch.Tensor):
        t = t.detach().numpy()
    np.testing.assert_allclose(np.asarray(r), t, rtol=tol, atol=tol)
    assert np.asarray(r).shape == np.shape(t)


# ---- keyword spellings ------------------------------------------------------------------------


@pytest.mark.parametrize("name,kwargs", [
    ("sum", dict(dim=1)), ("sum", dict(dim=0, keepdim=True)), ("mean", dict(dim=(0, 1))),
    ("prod", dict(dim=1, keepdim=True)), ("argmax", dict(dim=1)), ("cumsum", dict(dim=1)),
    ("logsumexp", dict(dim=1)), ("flip", dict(dims=(0,))), ("roll", dict(shifts=1, dims=1)),
    ("flatten", dict(start_dim=0, end_dim=1)), ("norm", dict(p=1)),
    ("var", dict(dim=1, unbiased=False)), ("std", dict(dim=0, unbiased=True, keepdim=True)),
    ("amax", dict(dim=1)),
])
def test_torch_keywords_on_functions_and_methods(name, kwargs):
    r, t = pair()
    want = getattr(torch, name)(t, **kwargs)
    same(getattr(rill, name)(r, **kwargs) if hasattr(rill, name) else
         getattr(r, name)(**kwargs), want)
    same(getattr(r, name)(**kwargs), want)


def test_input_and_other_keywords():
    r, t = pair()
    same(rill.add(input=r, other=r), torch.add(input=t, other=t))
    same(rill.pow(r, exponent=2), torch.pow(t, exponent=2))
    same(rill.softmax(input=r, dim=1), torch.softmax(t, dim=1))
    same(rill.nn.functional.log_softmax(r, dim=0), torch.log_softmax(t, dim=0))


def test_alias_and_target_together_is_an_error():
    r, _ = pair()
    with pytest.raises(rill.ArgumentError, match="both dim= and axis="):
        rill.sum(r, dim=0, axis=1)
    with pytest.raises(rill.ArgumentError, match="unbiased must be True or False"):
        rill.var(r, dim=0, unbiased=2)


# ---- functions whose meaning PyTorch fixes --------------------------------------------------


def test_max_min_sort_follow_the_spelling():
    r, t = pair()
    for name in ("max", "min"):
        same(getattr(rill, name)(r, 1), tuple(getattr(torch, name)(t, 1)))
        same(getattr(rill, name)(r, dim=0, keepdim=True), tuple(getattr(torch, name)(t, 0, True)))
        same(getattr(rill, name)(r, axis=1), getattr(torch, "a" + name)(t, 1))  # the standard
        same(getattr(rill, name)(r), getattr(torch, name)(t))
        same(getattr(rill, name)(r, r * 0), getattr(torch, name)(t, t * 0))  # elementwise
    values, indices = rill.max(r, 1)
    assert rill.max(r, 1).indices is not None and indices.dtype is rill.int64
    same(rill.sort(r, 1, descending=True), tuple(torch.sort(t, 1, descending=True)))
    same(rill.sort(r, axis=0), torch.sort(t, 0).values)
    import rill.ops.torch_functions as tf
    tf._warned.discard("sort")
    with pytest.warns(rill.DifferenceWarning, match=r"returns \(values, indices\)"):
        same(rill.sort(r), torch.sort(t).values)  # the standard's, said once


def test_std_var_defaults():
    r, t = pair()
    same(rill.std(r, 0), torch.std(t, 0))
    same(rill.var(r, dim=1), torch.var(t, dim=1))
    same(rill.var(r, axis=1), torch.var(t, dim=1, correction=0))   # the standard's default
    same(r.std(), t.std())
    same(r.var(1, keepdim=True), t.var(1, keepdim=True))
    same(r.std(0, unbiased=False), t.std(0, unbiased=False))
    import rill.ops.torch_functions as tf
    tf._warned.discard("std")
    with pytest.warns(rill.DifferenceWarning, match="correction=0"):
        same(rill.std(r), torch.std(t, correction=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rill.std(r)  # once only
        rill.std(r, correction=1)
    tf._warned.discard(("var", "positional"))
    with pytest.warns(rill.DifferenceWarning, match="read as PyTorch's call"):
        same(rill.var(r, 1), torch.var(t, 1))  # once: positional dims used to mean axis
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rill.var(r, 1)
        rill.var(r, dim=1)  # spelled as PyTorch: nothing to say


def test_split_chunk_repeat():
    a = np.arange(14.).reshape(7, 2)
    r, t = rill.tensor(a), torch.tensor(a)
    same(rill.split(r, 3), torch.split(t, 3))
    same(r.split([2, 5]), t.split([2, 5]))
    same(r.split(1, dim=1), t.split(1, dim=1))
    same(rill.chunk(r, 3), torch.chunk(t, 3))
    same(r.chunk(4, 0), t.chunk(4, 0))
    same(rill.unbind(r, 1), torch.unbind(t, 1))
    same(r.repeat(2, 3), t.repeat(2, 3))
    same(r.repeat(2, 1, 1), t.repeat(2, 1, 1))
    same(r.repeat_interleave(2, dim=0), t.repeat_interleave(2, dim=0))
    same(rill.repeat(r, 2, axis=1), torch.repeat_interleave(t, 2, dim=1))  # the standard's
    with pytest.raises(rill.ShapeError, match="positive"):
        rill.split(r, 0)


def test_shape_methods_and_size():
    r, t = pair()
    assert r.size() == tuple(t.size()) and r.size(1) == t.size(1) and r.size(-2) == 3
    assert r.size == 12 and r.numel() == t.numel() and r.dim() == t.dim() == 2
    same(r.view(-1), t.view(-1))
    same(r.view(2, 6), t.view(2, 6))
    same(r.view_as(rill.zeros(6, 2)), t.view_as(torch.zeros(6, 2)))
    same(r.t(), t.t())
    same(r.transpose(0, 1), t.transpose(0, 1))
    same(rill.transpose(r, 1, 0), torch.transpose(t, 1, 0))
    same(r.permute(1, 0), t.permute(1, 0))
    same(r.unsqueeze(1), t.unsqueeze(1))
    same(rill.unsqueeze(r, -1), torch.unsqueeze(t, -1))
    same(r.narrow(1, 1, 2), t.narrow(1, 1, 2))
    same(r[:1].expand(5, -1), t[:1].expand(5, -1))
    same(rill.cat([r, r], dim=1), torch.cat([t, t], dim=1))
    same(r.reshape_as(rill.zeros(4, 3)), t.reshape_as(torch.zeros(4, 3)))
    with pytest.raises(rill.ShapeError, match="out of range"):
        r.size(2)
    with pytest.raises(rill.ArgumentError, match="names one axis"):
        rill.transpose(r, 1)


def test_arithmetic_methods():
    r, t = pair()
    same(r.add(r, alpha=2), t.add(t, alpha=2))
    same(r.sub(1.5), t.sub(1.5))
    same(r.div(0.7, rounding_mode="floor"), t.div(0.7, rounding_mode="floor"))
    same(r.div(0.7, rounding_mode="trunc"), t.div(0.7, rounding_mode="trunc"))
    same(r.clamp(-0.5, 0.5), t.clamp(-0.5, 0.5))
    same(rill.clamp(r, min=0), torch.clamp(t, min=0))
    same(r.masked_fill(r > 0, -1.0), t.masked_fill(t > 0, -1.0))
    same(r.addcmul(r, r, value=0.5), t.addcmul(t, t, value=0.5))
    same(r.lerp(r * 2, 0.25), t.lerp(t * 2, 0.25))
    same(r.where(r > 0, 0.0), t.where(t > 0, 0.0))
    assert r.equal(r.clone()) and not r.equal(r + 1) and rill.allclose(r, r + 1e-9)
    same(rill.mm(r, r.t()), torch.mm(t, t.t()))
    same(r.sum(dtype=rill.float32), t.sum(dtype=torch.float32), tol=1e-6)


def test_in_place_methods_write_through_views():
    r, t = pair()
    r, t = r.clone(), t.clone()
    for fn in (lambda x: x[:, 0].zero_(), lambda x: x[1].add_(1.0, alpha=3),
               lambda x: x.view(-1)[5:7].fill_(9.0), lambda x: x.t()[0].mul_(2),
               lambda x: x.narrow(1, 2, 2).clamp_(-0.1, 0.1), lambda x: x.unsqueeze(0)[0, 2].neg_(),
               lambda x: x[2][1:3].copy_(torch.tensor([4.0, 5.0]) if isinstance(x, torch.Tensor)
                                         else rill.tensor([4.0, 5.0]))):
        fn(r)
        fn(t)
        same(r, t)
    with pytest.raises(rill.ShapeError, match="expanded"):
        r[:1].expand(3, -1).add_(1)


def test_data_and_in_place_under_no_grad():
    w = rill.nn.Parameter(rill.zeros(2, 3))
    w.data.fill_(0.5)
    assert w.requires_grad and w.is_leaf and float(w.sum()) == 3.0
    w.data = rill.ones(2, 3)
    assert float(w.sum()) == 6.0 and w.requires_grad
    with pytest.raises(rill.GradientError, match="leaf"):
        w.add_(1)  # as torch: in place on a leaf that requires grad, outside no_grad
    with rill.no_grad():
        w.mul_(2)
    assert float(w.sum()) == 12.0
    rill.manual_seed(0)
    w.data.normal_(0.0, 0.02)
    assert 0 < float(w.std()) < 0.1


def test_in_place_is_recorded_for_autodiff():
    x = rill.tensor(A, requires_grad=True)
    tx = torch.tensor(A, requires_grad=True)
    for v, lib in ((x, rill), (tx, torch)):
        y = v * 1
        y[:, 1].mul_(3)
        y.exp_()
        y.sum().backward()
    same(x.grad, tx.grad)


def test_casts_and_devices():
    r, t = pair()
    for name in ("float", "double", "half", "long", "int", "short", "bool", "byte"):
        got, want = getattr(r, name)(), getattr(t, name)()
        assert got.dtype.name == str(want.dtype).replace("torch.", "")
    assert rill.long is rill.int64 and rill.float is rill.float32 and rill.int is rill.int32
    assert rill.double is rill.float64 and rill.half is rill.float16
    assert r.to(rill.float32).dtype is rill.float32 and r.to("cpu", rill.int64).dtype is rill.int64
    assert r.to(rill.zeros(1, dtype=rill.float16)).dtype is rill.float16
    assert r.type() == "float64" and r.type(rill.int32).dtype is rill.int32
    assert r.new_zeros(2, 3).dtype is rill.float64 and r.new_ones((2,)).shape == (2,)
    assert r.new_full((2,), 7).tolist() == [7.0, 7.0] and r.new_tensor([1, 2]).dtype is rill.float64
    assert not r.is_cuda and r.is_cpu and r.get_device() == -1 and r.device.type == "cpu"
    real_gpu = rill.gpu.is_available() and not rill.gpu.interpreted()
    assert rill.cuda.is_available() == real_gpu == rill.accelerator.is_available()
    assert rill.cuda.device_count() in (0, 1)
    assert r.cpu() is not None and r.contiguous() is r and r.is_contiguous()
    if not rill.gpu.is_available():
        with pytest.raises(rill.DeviceError, match="gpu"):
            r.cuda()


def test_like_and_from_numpy():
    a = np.arange(6.0)
    t = rill.from_numpy(a)
    assert t.dtype is rill.float64
    a[0] = 42.0  # shares memory, as torch.from_numpy
    assert float(t[0]) == 42.0
    with pytest.raises(rill.ArgumentError, match="NumPy array"):
        rill.from_numpy([1, 2])
    rill.manual_seed(1)
    z = rill.randn_like(rill.zeros(2, 3, dtype=rill.float64))
    assert z.shape == (2, 3) and z.dtype is rill.float64
    assert rill.rand_like(z).dtype is rill.float64
    i = rill.randint_like(rill.zeros(100, dtype=rill.int64), 3)
    assert set(i.tolist()) <= {0, 1, 2}


def test_captured_methods_agree_with_eager():
    def step(x):
        y = x.view(-1, 2).t().clone()
        y[0].mul_(2)
        values, idx = y.max(1)
        return values.sum() + x.std() + x.var(0).sum() + idx.float().sum()

    x = rill.tensor(A)
    captured = rill.capture(step)
    same(captured(x), step(x))


def test_pytorch_names_rill_spells_otherwise_are_named():
    with pytest.raises(rill.Error, match="no_grad") as info:
        rill.set_grad_enabled  # (rill.FloatTensor exists: tests/ops/test_torch_constructors.py)
    assert isinstance(info.value, AttributeError)
    with pytest.raises(AttributeError, match="COMING_FROM_PYTORCH"):
        rill.no_such_function
    with pytest.raises(rill.Error, match="custom_vjp"):
        rill.zeros(1).register_hook
    assert not hasattr(rill.zeros(1), "storage")
    with pytest.raises(rill.ArgumentError, match="reinterprets"):
        rill.zeros(2).view(rill.int32)


def test_views_of_leaves_pass_gradients_to_the_leaf():
    w = rill.nn.Parameter(rill.tensor(A))
    tw = torch.tensor(A, requires_grad=True)
    for v in (w, tw):
        (v.view(-1)[3] * 2 + v.t()[1].sum() + v[0].unsqueeze(0).sum() + v.narrow(0, 1, 1).sum()
         ).backward()
    same(w.grad, tw.grad)


def test_augmented_assignment_on_a_view_writes_the_base():
    r, t = pair()
    r, t = r.clone(), t.clone()
    for x in (r, t):
        row = x[1]
        row += 1
        row[2] = -7.0
        x[0] += 2  # get, add, set: the base is written once in value
        x[:, 3] *= 0
    same(r, t)
    assert rill.tensor([0.2, 0.9]).bernoulli().dtype is rill.float32
    assert rill.tensor([[0.1, 0.9]]).multinomial(1).shape == (1, 1)


def test_the_guide_shows_the_ported_program_as_it_is():
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    program = (root / "tests" / "ports" / "cnn_classifier.py").read_text()
    body = program.split("# --- end of imports ---\n", 1)[1].lstrip("\n")
    guide = (root / "docs" / "COMING_FROM_PYTORCH.md").read_text()
    shown = guide.split("## A complete program, side by side", 1)[1].split("```python\n")[1]
    assert shown.split("```")[0] == body


def test_unique_and_nonzero_as_pytorch():
    a = np.array([[3, 1, 3], [0, 1, 2]])
    r, t = rill.tensor(a), torch.tensor(a)
    same(rill.unique(r), torch.unique(t))
    same(rill.unique(r, return_inverse=True, return_counts=True),
         torch.unique(t, return_inverse=True, return_counts=True))
    same(r.nonzero(), t.nonzero())
    same(r.nonzero(as_tuple=True), t.nonzero(as_tuple=True))
    same(rill.nonzero(r), np.nonzero(a))  # the standard's: a tuple
    assert int(r.count_nonzero()) == int(t.count_nonzero())


def test_an_unused_draw_still_advances_the_generator_under_capture():
    def f(x):
        unused = rill.rand(3)  # noqa: F841 - its draw moves the generator, as eagerly
        return x + rill.rand(3)

    x = rill.zeros(3)
    captured = rill.capture(f)
    for _ in range(2):
        rill.manual_seed(7)
        want = (f(x), rill.rand(2))
        rill.manual_seed(7)
        got = (captured(x), rill.rand(2))
        same(got[0], want[0].numpy())
        same(got[1], want[1].numpy())
