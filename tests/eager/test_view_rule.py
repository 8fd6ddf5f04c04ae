"""The one view rule (lib/ops/views.py): every spelling that returns a view in PyTorch, or
stands for one in the Array API, writes through to its base exactly as PyTorch does.

One row per spelling: the same in-place write goes through the rill view and the torch
view, and base, view and the gradient reaching the base are compared with PyTorch, eagerly
and under rill.capture. A census test checks that the rows cover every view spelling rill
has, and probes PyTorch for every public rill name to find views the list would miss.
"""
import inspect
import warnings

import numpy as np
import pytest

import rill
from rill.ops import view_spellings, views

torch = pytest.importorskip("torch")


def _arange(lib, shape, complex_=False):
    n = int(np.prod(shape))
    values = np.arange(n, dtype=np.float64).reshape(shape) * 0.5 - 1.0
    if complex_:
        values = values + 1j * (values[::-1] if values.ndim else values)
    return lib.tensor(values.copy())


# (label, shape, rill view, torch view, complex input)
_ = None
ROWS = [
    # reshapes
    ("rill.reshape", (2, 3), lambda x: rill.reshape(x, (3, 2)), lambda x: torch.reshape(x, (3, 2))),
    ("rill.reshape copy=False", (2, 3), lambda x: rill.reshape(x, (6,), copy=False),
     lambda x: x.view(6)),
    ("x.reshape", (2, 3, 2), lambda x: x.reshape(6, 2), _),
    ("x.reshape_as", (2, 3), lambda x: x.reshape_as(_like((6,), x)), _),
    ("x.view", (2, 3), lambda x: x.view(-1), _),
    ("x.view_as", (2, 3), lambda x: x.view_as(_like((3, 2), x)), _),
    ("rill.flatten", (2, 3, 2), lambda x: rill.flatten(x, 1), lambda x: torch.flatten(x, 1)),
    ("x.flatten", (2, 3), lambda x: x.flatten(), _),
    ("rill.ravel", (2, 3), lambda x: rill.ravel(x), lambda x: torch.ravel(x)),
    ("x.ravel", (2, 3), lambda x: x.ravel(), _),
    ("rill.unflatten", (2, 6), lambda x: rill.unflatten(x, 1, (3, 2)),
     lambda x: torch.unflatten(x, 1, (3, 2))),
    ("x.unflatten", (6,), lambda x: x.unflatten(0, (2, -1)), _),
    ("rill.squeeze", (2, 1, 3), lambda x: rill.squeeze(x, 1), lambda x: torch.squeeze(x, 1)),
    ("x.squeeze", (1, 3), lambda x: x.squeeze(), _),
    ("rill.unsqueeze", (2, 3), lambda x: rill.unsqueeze(x, 1), lambda x: torch.unsqueeze(x, 1)),
    ("x.unsqueeze", (3,), lambda x: x.unsqueeze(-1), _),
    ("rill.expand_dims", (2, 3), lambda x: rill.expand_dims(x, 0),
     lambda x: torch.unsqueeze(x, 0)),
    ("x.expand_dims", (3,), lambda x: x.expand_dims(1), lambda x: x.unsqueeze(1)),
    # transposes
    ("rill.transpose", (2, 3, 4), lambda x: rill.transpose(x, 0, 2),
     lambda x: torch.transpose(x, 0, 2)),
    ("rill.transpose(axes)", (2, 3, 4), lambda x: rill.transpose(x, (2, 0, 1)),
     lambda x: x.permute(2, 0, 1)),
    ("x.transpose", (2, 3), lambda x: x.transpose(0, 1), _),
    ("rill.permute_dims", (2, 3, 4), lambda x: rill.permute_dims(x, (1, 2, 0)),
     lambda x: torch.permute(x, (1, 2, 0))),
    ("rill.permute", (2, 3, 4), lambda x: rill.permute(x, (2, 0, 1)),
     lambda x: torch.permute(x, (2, 0, 1))),
    ("x.permute", (2, 3, 4), lambda x: x.permute(2, 1, 0), _),
    ("x.permute_dims", (2, 3), lambda x: x.permute_dims((1, 0)), lambda x: x.permute(1, 0)),
    ("rill.swapaxes", (2, 3, 4), lambda x: rill.swapaxes(x, 0, 1),
     lambda x: torch.swapaxes(x, 0, 1)),
    ("x.swapaxes", (2, 3, 4), lambda x: x.swapaxes(-1, 0), _),
    ("rill.swapdims", (2, 3), lambda x: rill.swapdims(x, 0, 1), lambda x: torch.swapdims(x, 0, 1)),
    ("x.swapdims", (2, 3, 4), lambda x: x.swapdims(1, 2), _),
    ("rill.moveaxis", (2, 3, 4), lambda x: rill.moveaxis(x, 0, -1),
     lambda x: torch.moveaxis(x, 0, -1)),
    ("x.moveaxis", (2, 3, 4), lambda x: x.moveaxis((0, 1), (2, 0)), _),
    ("rill.movedim", (2, 3, 4), lambda x: rill.movedim(x, 2, 0), lambda x: torch.movedim(x, 2, 0)),
    ("x.movedim", (2, 3, 4), lambda x: x.movedim(1, 0), _),
    ("rill.matrix_transpose", (2, 3, 4), lambda x: rill.matrix_transpose(x), lambda x: x.mT),
    ("rill.linalg.matrix_transpose", (3, 4), lambda x: rill.linalg.matrix_transpose(x),
     lambda x: x.mT),
    ("rill.t", (2, 3), lambda x: rill.t(x), lambda x: torch.t(x)),
    ("x.t", (2, 3), lambda x: x.t(), _),
    ("x.T", (2, 3), lambda x: x.T, _),
    ("x.mT", (2, 3, 4), lambda x: x.mT, _),
    ("x.H", (2, 3), lambda x: x.H, _),
    ("x.mH", (2, 3, 4), lambda x: x.mH, _),
    ("rill.adjoint", (2, 3), lambda x: rill.adjoint(x), lambda x: torch.adjoint(x)),
    ("x.adjoint", (2, 2, 3), lambda x: x.adjoint(), _),
    # complex: conjugate views
    ("rill.conj complex", (2, 3), lambda x: rill.conj(x), lambda x: torch.conj(x), True),
    ("x.conj complex", (3,), lambda x: x.conj(), _, True),
    ("x.H complex", (2, 3), lambda x: x.H, _, True),
    ("x.mH complex", (2, 2, 3), lambda x: x.mH, _, True),
    ("rill.adjoint complex", (2, 3), lambda x: rill.adjoint(x), lambda x: torch.adjoint(x), True),
    ("rill.conj real", (2, 3), lambda x: rill.conj(x), lambda x: torch.conj(x)),
    ("rill.real real", (2, 3), lambda x: rill.real(x), lambda x: torch.real(x)),
    ("x.real real", (2, 3), lambda x: x.real, _),
    # slices and pieces
    ("x[int]", (3, 4), lambda x: x[1], _),
    ("x[slices]", (3, 4), lambda x: x[::2, 1:3], _),
    ("x[..., None, int]", (2, 3, 4), lambda x: x[..., None, 2], _),
    ("x[...]", (2, 3), lambda x: x[...], _),
    ("rill.narrow", (3, 4), lambda x: rill.narrow(x, 1, 1, 2), lambda x: torch.narrow(x, 1, 1, 2)),
    ("x.narrow", (5, 2), lambda x: x.narrow(0, -3, 2), _),
    ("rill.select", (3, 4), lambda x: rill.select(x, 1, -1), lambda x: torch.select(x, 1, -1)),
    ("x.select", (3, 4), lambda x: x.select(0, 2), _),
    ("rill.diagonal", (3, 4), lambda x: rill.diagonal(x, 1), lambda x: torch.diagonal(x, 1)),
    ("x.diagonal", (2, 3, 4), lambda x: x.diagonal(-1, 2, 1), _),
    ("rill.linalg.diagonal", (2, 4, 3), lambda x: rill.linalg.diagonal(x, offset=-1),
     lambda x: torch.linalg.diagonal(x, offset=-1)),
    ("rill.split", (5, 2), lambda x: rill.split(x, 2), lambda x: torch.split(x, 2)),
    ("rill.split sizes", (2, 5), lambda x: rill.split(x, [1, 4], 1),
     lambda x: torch.split(x, [1, 4], 1)),
    ("x.split", (5, 2), lambda x: x.split(3), _),
    ("rill.chunk", (5, 2), lambda x: rill.chunk(x, 3), lambda x: torch.chunk(x, 3)),
    ("x.chunk", (2, 6), lambda x: x.chunk(2, 1), _),
    ("rill.unbind", (3, 2), lambda x: rill.unbind(x), lambda x: torch.unbind(x)),
    ("x.unbind", (3, 2), lambda x: x.unbind(1), _),
    ("rill.unstack", (3, 2), lambda x: rill.unstack(x, axis=1), lambda x: torch.unbind(x, 1)),
    # broadcasts that repeat no element are written through; the others are refused below
    ("rill.broadcast_to", (3,), lambda x: rill.broadcast_to(x, (1, 3)),
     lambda x: torch.broadcast_to(x, (1, 3))),
    ("x.broadcast_to", (2, 3), lambda x: x.broadcast_to((1, 2, 3)),
     lambda x: x.broadcast_to((1, 2, 3))),
    ("x.expand", (2, 3), lambda x: x.expand(1, -1, 3), _),
    ("x.expand_as", (2, 3), lambda x: x.expand_as(_like((2, 3), x)), _),
    ("rill.broadcast_arrays", (3,), lambda x: rill.broadcast_arrays(x, _like((1, 3), x)),
     lambda x: list(torch.broadcast_tensors(x, _like((1, 3), x)))),
    ("rill.meshgrid", (3,), lambda x: rill.meshgrid(x, _like((1,), x), indexing="ij")[0],
     lambda x: torch.meshgrid(x, _like((1,), x), indexing="ij")[0]),
    ("rill.meshgrid xy", (3,), lambda x: rill.meshgrid(_like((1,), x), x)[1],
     lambda x: torch.meshgrid(_like((1,), x), x, indexing="xy")[1]),
    # identity views
    ("x.data", (2, 3), lambda x: x.data, _),
    ("x.detach", (2, 3), lambda x: x.detach(), _),
    ("x.detach chained", (2, 3, 4), lambda x: x.detach()[1].T, _),
    ("x.contiguous", (2, 3), lambda x: x.contiguous(), _),
    # chains, and reshapes that PyTorch makes copies (nothing reaches the base)
    ("x.T.reshape (copy)", (2, 3), lambda x: x.T.reshape(-1), _),
    ("x.T.flatten (copy)", (2, 3), lambda x: x.T.flatten(), _),
    ("x.T.contiguous (copy)", (2, 3), lambda x: x.T.contiguous(), _),
    ("x[:, :2].reshape (copy)", (2, 3), lambda x: x[:, :2].reshape(-1), _),
    ("x[:, :2].reshape (view)", (2, 3), lambda x: x[:, :2].reshape(2, 1, 2), _),
    ("rill.ravel(x.mT) (copy)", (2, 3), lambda x: rill.ravel(x.mT), lambda x: torch.ravel(x.mT)),
    ("x.permute.reshape (view)", (2, 1, 3), lambda x: x.permute(1, 0, 2).reshape(6), _),
    ("x[1].T.unsqueeze", (2, 3, 4), lambda x: x[1].T.unsqueeze(0)[0, 1:], _),
    ("permute_dims(x)[0].split", (2, 3, 4), lambda x: rill.permute_dims(x, (2, 0, 1))[0].split(1),
     lambda x: x.permute(2, 0, 1)[0].split(1)),
]


def _like(shape, other):
    lib = rill if isinstance(other, rill.Tensor) else torch
    return lib.ones(shape, dtype=other.dtype)


def _row(row):
    label, shape, rill_view, torch_view = row[:4]
    return label, shape, rill_view, torch_view or rill_view, len(row) > 4 and row[4]


def _write(v):
    """Two in-place writes of every element: a method and an item assignment."""
    v.mul_(-2.0)
    if v.ndim:
        v[0] = 7.0 if not v.dtype.is_complex else 7.0 - 1.0j
    else:
        v.add_(3.0)


def _write_torch(v):
    v.mul_(-2.0)
    if v.ndim:
        v[0] = 7.0 if not v.is_complex() else 7.0 - 1.0j
    else:
        v.add_(3.0)


def _pieces(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _same(r, t):
    want = t.resolve_conj().detach().numpy()
    got = np.asarray(r.numpy())
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_array_equal(got, want)


def _through(view_fn, write, base, all_pieces=True):
    """Take the views of base, write each in turn, return (base, views)."""
    pieces = _pieces(view_fn(base))
    for p in (pieces if all_pieces else pieces[-1:]):
        write(p)
    return base, pieces


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_writes_through_each_spelling_as_pytorch(row):
    label, shape, rill_view, torch_view, complex_ = _row(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # x.T on 1-d, meshgrid's indexing: torch's warnings
        rb, rv = _through(rill_view, _write, _arange(rill, shape, complex_))
        tb, tv = _through(torch_view, _write_torch, _arange(torch, shape, complex_))
    _same(rb, tb)
    assert len(rv) == len(tv)
    for r, t in zip(rv, tv):
        _same(r, t)


@pytest.mark.parametrize("row", [r for r in ROWS if not (len(r) > 4 and r[4])],
                         ids=[r[0] for r in ROWS if not (len(r) > 4 and r[4])])
def test_gradients_through_each_spelling_as_pytorch(row):
    label, shape, rill_view, torch_view, _ = _row(row)
    if label == "x.data":
        pytest.skip(".data leaves the tape by definition")
    if any(name in label for name in ("split", "chunk", "unbind", "unstack")):
        pytest.skip("PyTorch refuses in-place writes to the pieces of a multi-view op when "
                    "autograd records them; rill differentiates them")
    grads = []
    for lib, view_fn, write in ((rill, rill_view, _write), (torch, torch_view, _write_torch)):
        x = _arange(lib, shape).requires_grad_()
        base = x * 1.0  # written in place: not a leaf
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _through(view_fn, write, base, all_pieces=False)
        (base * _arange(lib, shape)).sum().backward()
        grads.append(x.grad)
    _same(*grads)


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_captured_writes_match_eager(row):
    label, shape, rill_view, _, complex_ = _row(row)

    def step(x):
        base = x * 1.0
        _, pieces = _through(rill_view, _write, base)
        return [base] + pieces

    x = _arange(rill, shape, complex_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = step(x)
        captured = rill.capture(step)
        first, second = captured(x), captured(x)
    for e, a, b in zip(eager, first, second):
        np.testing.assert_array_equal(a.numpy(), e.numpy())
        np.testing.assert_array_equal(b.numpy(), e.numpy())


REFUSED = [
    ("x.expand", (1, 3), lambda x: x.expand(2, 3)),
    ("rill.broadcast_to", (3,), lambda x: rill.broadcast_to(x, (2, 3))),
    ("rill.broadcast_arrays", (3,), lambda x: rill.broadcast_arrays(x, rill.ones((2, 1)))[0]),
    ("rill.meshgrid", (3,), lambda x: rill.meshgrid(x, rill.ones(2))[0]),
    ("x.expand()[0] (PyTorch allows)", (1, 3), lambda x: x.expand(2, 3)[0]),
    ("x.real complex", (2,), lambda x: x.real),
    ("x.imag complex", (2,), lambda x: x.imag),
    ("rill.real complex", (2,), lambda x: rill.real(x)),
    ("rill.imag complex", (2,), lambda x: rill.imag(x)),
]


@pytest.mark.parametrize("row", REFUSED, ids=[r[0] for r in REFUSED])
def test_writes_rill_cannot_make_are_refused_before_anything_changes(row):
    label, shape, view_fn = row
    x = _arange(rill, shape, complex_="complex" in label)
    before = x.numpy().copy()
    v = view_fn(x)
    with pytest.raises(rill.ShapeError, match="clone|out of place"):
        v.mul_(2.0)
    np.testing.assert_array_equal(x.numpy(), before)


def test_pytorch_refuses_the_repeated_element_writes_too():
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.ones(1, 3).expand(2, 3).mul_(2)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.broadcast_to(torch.ones(3), (2, 3)).mul_(2)


def test_a_later_write_to_the_base_does_not_reach_an_earlier_view():
    x = rill.zeros(2, 3)
    v = x.T
    x.add_(1.0)  # PyTorch's v would show it; rill's views are values (docs/DESIGN.md)
    assert float(v.sum()) == 0.0


# ---- strides: when reshape views, and contiguity -------------------------------------------


def test_view_strides_follow_pytorch_on_strided_tensors():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        shape = tuple(int(s) for s in rng.integers(1, 4, size=rng.integers(1, 5)))
        t = torch.zeros(shape)
        r = rill.zeros(shape)
        order = tuple(int(a) for a in rng.permutation(len(shape)))
        t, r = t.permute(order), r.permute(order)
        if rng.random() < 0.5 and t.shape[0] > 1:
            t, r = t[::2], r[::2]
        assert views.strides_of(r) == t.stride()
        assert views.is_contiguous(r) == t.is_contiguous() == r.is_contiguous()
        n = t.numel()
        target = tuple(rng.permutation([d for d in (1, 2, 3, 4, 6) if n % d == 0])[:1]) or (1,)
        target = target + (n // int(np.prod(target)),)
        got = views.view_strides(tuple(r.shape), views.strides_of(r), target)
        try:
            want = t.view(target).stride()
        except RuntimeError:
            want = None
        assert got == want, (shape, order, target)
        checked += 1
    assert checked == 300


# ---- the census -----------------------------------------------------------------------------


def _covered() -> set:
    """The spellings the tables above exercise (a row's label starts with its spelling)."""
    return {label.split(" ")[0] for label, *_ in ROWS + REFUSED}


def _spellings() -> set:
    return ({f"rill.{n}" for n in view_spellings.FUNCTIONS} |
            {f"rill.linalg.{n}" for n in view_spellings.LINALG} |
            {f"x.{n}" for n in view_spellings.METHODS if n != "__getitem__"} |
            {f"x.{n}" for n in view_spellings.PROPERTIES} | {"x[int]"})


def test_the_table_covers_every_view_spelling():
    """Every spelling view_spellings lists has a row above (the census of the report)."""
    assert _spellings() - _covered() == set()
    assert len(_spellings()) == 71


def test_every_spelling_is_the_one_in_view_spellings():
    """rill's namespace, rill.linalg and Tensor take each view spelling from one place."""
    for name, fn in view_spellings.FUNCTIONS.items():
        assert inspect.unwrap(getattr(rill, name)) is inspect.unwrap(fn), name
    for name, fn in view_spellings.LINALG.items():
        assert inspect.unwrap(getattr(rill.linalg, name)) is inspect.unwrap(fn), name
    for name, fn in view_spellings.METHODS.items():
        assert inspect.unwrap(getattr(rill.Tensor, name)) is inspect.unwrap(fn), name
    for name, prop in view_spellings.PROPERTIES.items():
        assert rill.Tensor.__dict__[name] is prop, name


# PyTorch names that share memory with their input but are not views in PyTorch's list
# (the tensor itself comes back; or einsum, whose result is a view only by accident).
_NOT_VIEWS = {"rill.as_tensor", "rill.asarray", "rill.positive", "rill.from_dlpack",
              "rill.einsum", "x.to", "x.float", "x.cpu", "x.type"}
_SAMPLES = [(), (0,), (1,), (-1,), (0, 1), (1, 0), ((1, 0),), ((2, 0, 1),), ((6,),),
            ((3, 2),), (1, 0, 1), (0, 1, 2), (1, (3, 1)), (-1, 2)]


def _torch_counterpart(name: str, method: bool):
    import array_api_compat.torch as xpt
    if method:
        return getattr(torch.Tensor, name, None)
    return getattr(xpt, name, None) or getattr(torch, name, None)


def _shares_memory(out, x) -> bool:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return any(isinstance(o, torch.Tensor) and o.layout == torch.strided and o.numel() and
               o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for o in outs)


def _torch_views(names, method: bool) -> set:
    found = set()
    inputs = [torch.arange(24.0).reshape(2, 3, 4), torch.arange(6.0).reshape(2, 3),
              torch.arange(4.0)]
    for name in names:
        fn = _torch_counterpart(name, method)
        if fn is None or name.endswith("_") and name != "__getitem__":
            continue
        for x in inputs:
            attribute = isinstance(fn, property) or not callable(fn)
            for args in [()] if attribute else _SAMPLES:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out = getattr(x, name) if attribute else fn(x, *args)
                except Exception:
                    continue
                if _shares_memory(out, x):
                    found.add(name)
    return found


_UNSAFE = {"manual_seed", "save", "load", "set_default_dtype", "set_printoptions", "compile",
           "from_numpy", "backward", "register_hook", "retain_grad", "share_memory_"}


def test_pytorch_knows_no_view_among_rills_names_that_the_table_misses():
    pytest.importorskip("array_api_compat")
    public = [n for n in dir(rill) if not n.startswith("_") and n not in _UNSAFE and
              callable(getattr(rill, n)) and not inspect.isclass(getattr(rill, n)) and
              not inspect.ismodule(getattr(rill, n))]
    methods = [n for n in dir(rill.Tensor) if (not n.startswith("_") or n == "__getitem__")
               and n not in _UNSAFE]
    found = ({f"rill.{n}" for n in _torch_views(public, method=False)} |
             {f"x.{n}" for n in _torch_views(methods, method=True)})
    # x[...] found as __getitem__; the table spells it x[int], x[slices]
    found = {"x[int]" if n == "x.__getitem__" else n for n in found}
    assert found - _covered() - _NOT_VIEWS == set()
    assert len(found) >= 45  # the probe does find PyTorch's views


@pytest.mark.parametrize("expr", ["to", "float", "type", "cpu", "asarray", "as_tensor",
                                  "positive", "pos", "requires_grad_", "contiguous"])
def test_the_tensor_itself_where_pytorch_returns_it(expr):
    x = rill.zeros(2, 3)
    same = {"to": lambda: x.to(rill.float32), "float": lambda: x.float(),
            "type": lambda: x.type(rill.float32), "cpu": lambda: x.cpu(),
            "asarray": lambda: rill.asarray(x), "as_tensor": lambda: rill.as_tensor(x),
            "positive": lambda: rill.positive(x), "pos": lambda: +x,
            "requires_grad_": lambda: x.requires_grad_(False),
            "contiguous": lambda: x.contiguous()}[expr]()
    same.add_(1.0)
    assert float(x.sum()) == 6.0


def test_array_api_code_writes_through_permute_dims_and_expand_dims():
    """What scipy.signal's overlap-add does with an Array API namespace: write blocks into
    a permuted view of a buffer and read the buffer back."""
    xp = rill.zeros(1).__array_namespace__()
    for lib in (xp, torch):
        buf = lib.zeros((2, 3, 4), dtype=lib.float64)
        view = lib.permute_dims(buf, (2, 0, 1)) if lib is xp else buf.permute(2, 0, 1)
        view[1] = lib.ones((2, 3), dtype=lib.float64)
        front = xp.expand_dims(buf, 0) if lib is xp else buf.unsqueeze(0)
        front[0, 0] *= 3
        if lib is xp:
            got = buf.numpy()
        else:
            want = buf.numpy()
    np.testing.assert_array_equal(got, want)
    assert got.sum() == 3 * 1 + 3 * 3


def test_scipy_overlap_add_convolution_on_rill_tensors_matches_numpy():
    """scipy.signal.oaconvolve writes its blocks through permute_dims / expand_dims views of
    an Array API namespace (rill's, here): with views that did not write through it was off
    by up to 1.45 on this input. SCIPY_ARRAY_API must be set before scipy is imported."""
    pytest.importorskip("scipy")
    import os
    import subprocess
    import sys
    script = (
        "import numpy as np, rill, scipy.signal as ss\n"
        "rng = np.random.default_rng(0)\n"
        "worst = 0.0\n"
        "for a, b, kw in ((rng.standard_normal(50), rng.standard_normal(7), {}),\n"
        "                 (rng.standard_normal((4, 60)), rng.standard_normal((1, 9)),\n"
        "                  {'axes': 1})):\n"
        "    for mode in ('full', 'same', 'valid'):\n"
        "        got = ss.oaconvolve(rill.tensor(a), rill.tensor(b), mode=mode, **kw)\n"
        "        assert isinstance(got, rill.Tensor)\n"
        "        want = ss.oaconvolve(a, b, mode=mode, **kw)\n"
        "        worst = max(worst, float(np.abs(np.asarray(got) - want).max()))\n"
        "print(worst)\n")
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 1e-12
