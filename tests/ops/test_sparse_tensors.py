"""Sparse tensors (COO, CSR): what they hold, their products, sums and softmax, against SciPy
in float64 and against torch.sparse (values and gradients); capture, saved graphs, and the
refusals (dense ops, the gpu, data-dependent conversions inside a capture).
The op table (tests/ops_table.py) adds finite-difference gradients for each primitive."""
import os
import subprocess
import sys

import numpy as np
import pytest

import rill
from rill.sparse import SparseCOO

torch = pytest.importorskip("torch")
sp = pytest.importorskip("scipy.sparse")

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # PyTorch's notice


def random_coo(rng, shape=(5, 7), nnz=12, repeats=True):
    """(indices [2, nnz] int64, values float64): random entries, some indices repeated."""
    rows = rng.integers(0, shape[0], nnz)
    cols = rng.integers(0, shape[1], nnz)
    if repeats:
        rows[-2:], cols[-2:] = rows[:2], cols[:2]
    return np.stack([rows, cols]).astype(np.int64), rng.standard_normal(nnz)


def scipy_of(indices, values, shape):
    return sp.coo_matrix((values, (indices[0], indices[1])), shape=shape)


def pair(indices, values, shape, requires_grad=False):
    """The same COO tensor in rill and in PyTorch (float64)."""
    v = rill.tensor(values, requires_grad=requires_grad)
    tv = torch.tensor(values, requires_grad=requires_grad)
    return (rill.sparse_coo_tensor(indices, v, shape), v,
            torch.sparse_coo_tensor(torch.from_numpy(indices), tv, shape), tv)


# ---- what a sparse tensor holds ---------------------------------------------------------


def test_coo_holds_what_pytorch_holds(rng):
    indices, values = random_coo(rng)
    s, _, ts, _ = pair(indices, values, (5, 7))
    assert (s.layout, s.shape, s.dtype, s.nnz, s._nnz()) == \
        (rill.sparse_coo, (5, 7), rill.float64, 12, ts._nnz())
    assert s.is_coalesced() is ts.is_coalesced() is False and s.is_sparse
    assert (s.sparse_dim(), s.dense_dim(), s.ndim, s.size(), s.size(1)) == (2, 0, 2, (5, 7), 7)
    with pytest.raises(rill.ArgumentError, match="coalesce"):
        s.indices()  # as PyTorch: an uncoalesced tensor's indices may repeat
    c, tc = s.coalesce(), ts.coalesce()
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    np.testing.assert_allclose(c.values().numpy(), tc.values().numpy(), rtol=1e-15)
    assert c.is_coalesced() and c.coalesce() is c
    np.testing.assert_allclose(s.to_dense().numpy(), scipy_of(indices, values, (5, 7)).toarray(),
                               rtol=1e-15)
    assert rill.ones(2).layout is rill.strided and repr(rill.sparse_csr) == "rill.sparse_csr"
    assert rill.ones(2).new_zeros(3, layout=rill.strided).shape == (3,)  # PyTorch's spelling


def test_size_is_inferred_and_indices_are_checked():
    s = rill.sparse_coo_tensor([[0, 3], [1, 1]], [1.0, 2.0])
    assert s.shape == tuple(torch.sparse_coo_tensor([[0, 3], [1, 1]], [1.0, 2.0]).shape)
    with pytest.raises(rill.ShapeError, match="out of range"):
        rill.sparse_coo_tensor([[0, 3], [1, 1]], [1.0, 2.0], (3, 2))
    with pytest.raises(rill.ShapeError, match="nnz"):
        rill.sparse_coo_tensor([[0, 1]], [1.0, 2.0, 3.0], (3,))
    with pytest.raises(rill.ArgumentError, match="sorted"):
        rill.sparse_csr_tensor([0, 2, 2], [1, 0], [1.0, 2.0], (2, 2))
    with pytest.raises(rill.ShapeError, match="crow_indices"):
        rill.sparse_csr_tensor([0, 3, 2], [1, 0], [1.0, 2.0], (2, 2))


def test_hybrid_coo_and_nd_coo_to_dense(rng):
    # two sparse dims and one dense dim; and three sparse dims
    indices, values = random_coo(rng, (4, 3), 6), rng.standard_normal((6, 2))
    s = rill.sparse_coo_tensor(indices[0], values, (4, 3, 2))
    t = torch.sparse_coo_tensor(torch.from_numpy(indices[0]), torch.from_numpy(values),
                                (4, 3, 2))
    np.testing.assert_allclose(s.to_dense().numpy(), t.to_dense().numpy(), rtol=1e-15)
    assert (s.sparse_dim(), s.dense_dim()) == (2, 1)
    idx3 = rng.integers(0, 3, (3, 8))
    s3 = rill.sparse_coo_tensor(idx3, np.arange(8.0), (3, 3, 3))
    t3 = torch.sparse_coo_tensor(torch.from_numpy(idx3), torch.arange(8.0, dtype=torch.float64),
                                 (3, 3, 3))
    np.testing.assert_allclose(s3.to_dense().numpy(), t3.to_dense().numpy())
    np.testing.assert_allclose(s3.coalesce().values().numpy(), t3.coalesce().values().numpy())


def test_conversions_match_pytorch(rng):
    x = rng.standard_normal((6, 5)) * (rng.random((6, 5)) < 0.3)
    s, ts = rill.tensor(x).to_sparse(), torch.from_numpy(x).to_sparse()
    np.testing.assert_array_equal(s.indices().numpy(), ts.indices().numpy())
    np.testing.assert_array_equal(s.values().numpy(), ts.values().numpy())
    c, tc = rill.tensor(x).to_sparse_csr(), torch.from_numpy(x).to_sparse_csr()
    assert c.layout is rill.sparse_csr
    for got, expected in ((c.crow_indices(), tc.crow_indices()),
                          (c.col_indices(), tc.col_indices()), (c.values(), tc.values())):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(c.to_dense().numpy(), x)
    np.testing.assert_array_equal(s.to_sparse_csr().crow_indices().numpy(),
                                  tc.crow_indices().numpy())
    back = c.to_sparse()
    assert back.is_coalesced()
    np.testing.assert_array_equal(back.indices().numpy(), ts.indices().numpy())
    # to_sparse gathers its values: gradients reach the dense tensor, as in PyTorch
    xr = rill.tensor(x, requires_grad=True)
    (xr.to_sparse().values() * 2.0).sum().backward()
    np.testing.assert_array_equal(xr.grad.numpy(), 2.0 * (x != 0))


def test_requires_grad_makes_the_values_a_leaf():
    s = rill.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2), requires_grad=True)
    rill.sparse.mm(s, rill.tensor([[1.0], [3.0]])).sum().backward()
    assert s.requires_grad and s.grad.layout is rill.sparse_coo
    np.testing.assert_array_equal(s.grad.to_dense().numpy(), [[0.0, 3.0], [1.0, 0.0]])


# ---- products ----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["coo", "coo_uncoalesced", "csr"])
def test_mm_matches_scipy_in_float64(rng, layout):
    indices, values = random_coo(rng, (6, 9), 20, repeats=layout == "coo_uncoalesced")
    matrix = scipy_of(indices, values, (6, 9))
    if layout == "csr":
        csr = matrix.tocsr()
        csr.sort_indices()
        s = rill.sparse_csr_tensor(csr.indptr.astype(np.int64), csr.indices.astype(np.int64),
                                   csr.data, (6, 9))
    else:
        s = rill.sparse_coo_tensor(indices, values, (6, 9))
    dense = rng.standard_normal((9, 4))
    np.testing.assert_allclose((s @ rill.tensor(dense)).numpy(), matrix @ dense, rtol=1e-13)
    np.testing.assert_allclose(rill.sparse.mm(s, rill.tensor(dense[:, 0])).numpy(),
                               matrix @ dense[:, 0], rtol=1e-13)


def test_mm_without_scipy_gives_scipys_result(rng, monkeypatch):
    from rill.kernels.numpy import sparse as kernels
    indices, values = random_coo(rng, (6, 9), 20)
    dense = rill.tensor(rng.standard_normal((9, 3)))
    coo = rill.sparse_coo_tensor(indices, values, (6, 9))
    csr = coo.to_sparse_csr()
    with_scipy = [(coo @ dense).numpy(), (csr @ dense).numpy()]
    monkeypatch.setattr(kernels, "_scipy_sparse", False)
    assert kernels.scipy_sparse() is None
    for got, expected in zip([(coo @ dense).numpy(), (csr @ dense).numpy()], with_scipy):
        np.testing.assert_allclose(got, expected, rtol=1e-13)


def test_mm_of_empty_and_float32(rng):
    empty = rill.sparse_coo_tensor(np.zeros((2, 0), np.int64), np.zeros(0, np.float32), (3, 4))
    out = empty @ rill.ones(4, 2)
    assert out.dtype is rill.float32 and not out.numpy().any() and out.shape == (3, 2)
    with pytest.raises(rill.DTypeError, match="one dtype"):
        empty @ rill.ones(4, 2, dtype=rill.float64)
    with pytest.raises(rill.ShapeError, match="cannot multiply"):
        empty @ rill.ones(3, 2)


@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_mm_gradients_match_torch_sparse(rng, layout):
    indices, values = random_coo(rng, (5, 7), 10, repeats=layout == "coo")
    if layout == "csr":
        c = scipy_of(indices, values, (5, 7)).tocsr()
        c.sort_indices()
        indices = np.stack([np.repeat(np.arange(5), np.diff(c.indptr)), c.indices])
        values = c.data
    s, v, ts, tv = pair(indices, values, (5, 7), requires_grad=True)
    if layout == "csr":
        s = rill.sparse_csr_tensor(c.indptr, c.indices, v, (5, 7))
    dense = rng.standard_normal((7, 3))
    d, td = rill.tensor(dense, requires_grad=True), torch.tensor(dense, requires_grad=True)
    cot = rng.standard_normal((5, 3))
    (rill.sparse.mm(s, d) * rill.tensor(cot)).sum().backward()
    (torch.sparse.mm(ts, td) * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(d.grad.numpy(), td.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-12)


def test_addmm_matches_torch(rng):
    indices, values = random_coo(rng)
    s, _, ts, _ = pair(indices, values, (5, 7))
    mat, dense = rng.standard_normal((5, 2)), rng.standard_normal((7, 2))
    got = rill.sparse.addmm(rill.tensor(mat), s, rill.tensor(dense), beta=0.5, alpha=2.0)
    expected = torch.sparse.addmm(torch.tensor(mat), ts, torch.tensor(dense), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-13)


# ---- sum, softmax, elementwise -----------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
def test_sum_matches_torch(rng, dim):
    indices, values = random_coo(rng)
    s, v, ts, tv = pair(indices, values, (5, 7), requires_grad=True)
    got = rill.sparse.sum(s) if dim is None else rill.sparse.sum(s, dim)
    expected = torch.sparse.sum(ts.coalesce()) if dim is None else \
        torch.sparse.sum(ts.coalesce(), dim)
    if expected.is_sparse:
        assert got.layout is rill.sparse_coo and not got.is_coalesced()
        got, expected = got.to_dense(), expected.to_dense()
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy(), rtol=1e-13)
    cot = rng.standard_normal(tuple(expected.shape))
    (got * rill.tensor(cot)).sum().backward()
    (expected * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-13)


@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_over_stored_entries_matches_torch(rng, dim):
    indices, values = random_coo(rng, nnz=15)
    s, _, ts, _ = pair(indices, values, (5, 7))
    s, ts = s.coalesce().detach(), ts.coalesce().detach()
    v, tv = s.values().requires_grad_(), ts.values().clone().requires_grad_()
    got = rill.sparse.softmax(rill.sparse_coo_tensor(s.indices(), v, (5, 7), is_coalesced=True),
                              dim)
    expected = torch.sparse.softmax(torch.sparse_coo_tensor(ts.indices(), tv, (5, 7),
                                                            is_coalesced=True), dim)
    np.testing.assert_allclose(got.values().numpy(), expected.coalesce().values().detach(),
                               rtol=1e-13)
    cot = rng.standard_normal(v.shape[0])
    (got.values() * rill.tensor(cot)).sum().backward()
    (expected.coalesce().values() * torch.tensor(cot)).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-12, atol=1e-15)
    # CSR: along rows, the same values
    csr = s.to_sparse_csr()
    np.testing.assert_allclose(rill.sparse.softmax(csr, 1).values().numpy(),
                               torch.sparse.softmax(ts, 1).coalesce().values().numpy(),
                               rtol=1e-13)


def test_elementwise_ops_keep_sparsity_as_torch_does(rng):
    indices, values = random_coo(rng)
    s, v, ts, tv = pair(indices, values, (5, 7), requires_grad=True)
    other = rng.standard_normal((5, 7))
    d, td = rill.tensor(other, requires_grad=True), torch.tensor(other, requires_grad=True)
    cases = [(s * 2.0, ts * 2.0), (3.0 * s, 3.0 * ts), (s / 4.0, ts / 4.0), (-s, -ts),
             (s + s, ts + ts), (s - s * 0.5, ts - ts * 0.5), (s * d, ts * td),
             (s * rill.tensor(2.0), ts * torch.tensor(2.0, dtype=torch.float64))]
    for got, expected in cases:
        assert got.layout is rill.sparse_coo and expected.is_sparse
        np.testing.assert_allclose(got.to_dense().numpy(), expected.to_dense().detach().numpy(),
                                   rtol=1e-14)
    # sparse + dense is dense; PyTorch spells it dense + sparse (rill: sparse + dense, since
    # a Tensor's own + refuses a sparse operand)
    dense_sum, t_dense_sum = s + d, td + ts
    assert dense_sum.layout is rill.strided and not t_dense_sum.is_sparse
    np.testing.assert_allclose(dense_sum.numpy(), t_dense_sum.detach().numpy(), rtol=1e-14)
    total = sum(got.to_dense().sum() for got, _ in cases) + dense_sum.sum()
    t_total = sum(e.to_dense().sum() for _, e in cases) + t_dense_sum.sum()
    total.backward()
    t_total.backward()
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-13)
    np.testing.assert_allclose(d.grad.numpy(), td.grad.numpy(), rtol=1e-13)
    c = s.to_sparse_csr()
    np.testing.assert_allclose((c + c * 2.0).to_dense().numpy(), 3 * s.to_dense().numpy())


# ---- refusals ----------------------------------------------------------------------------


def test_dense_ops_refuse_sparse_tensors_naming_to_dense():
    s = rill.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
    for call in (lambda: rill.exp(s), lambda: rill.nn.functional.relu(s),
                 lambda: rill.ones(2, 2) @ s, lambda: rill.ones(2, 2) + s, lambda: s[0],
                 lambda: s.exp(), lambda: s.reshape(4), lambda: np.asarray(s),
                 lambda: s + 1.0, lambda: s / rill.ones(2, 2)):
        with pytest.raises(rill.Error, match=r"to_dense\(\)"):
            call()
    assert not hasattr(s, "exp")  # an AttributeError too, so hasattr() tells the truth
    with pytest.raises(rill.ArgumentError, match="sparse @ sparse"):
        s @ s


@pytest.mark.skipif(not rill.gpu.is_available(), reason="no gpu device")
def test_gpu_refuses_sparse_products():
    s = rill.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2)).to("gpu")
    assert s.device.kind == "gpu"
    with pytest.raises(rill.DeviceError, match="sparse"):
        s @ rill.ones(2, 2, device="gpu")
    with pytest.raises(rill.DeviceError, match="sparse"):
        rill.sparse.softmax(s.coalesce(), 1)


def test_import_rill_does_not_import_scipy():
    code = "import sys, rill; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "RILL_TRITON_INTERPRET": "0"}, check=True)
    assert out.stdout.strip() == "False"


# ---- capture and saved graphs ------------------------------------------------------------


def _graph_inputs(rng):
    indices, values = random_coo(rng, (6, 6), 14, repeats=False)
    s = rill.sparse_coo_tensor(indices, values.astype(np.float32), (6, 6)).coalesce()
    return s, rill.tensor(rng.standard_normal((6, 3)).astype(np.float32))


def _sparse_program(s, d):
    p = rill.sparse.softmax(s * 2.0, 1)
    return p, rill.sparse.mm(p, d) + rill.sparse.sum(s, 1).to_dense().reshape(6, 1)


def test_captured_function_takes_and_returns_sparse_tensors(rng):
    captured = rill.capture(_sparse_program)
    for seed in (0, 1):  # a second graph of the same nnz reuses the trace
        s, d = _graph_inputs(np.random.default_rng(seed))
        (p, out), (ep, eout) = captured(s, d), _sparse_program(s, d)
        assert isinstance(p, SparseCOO) and p.is_coalesced() and p.shape == (6, 6)
        np.testing.assert_array_equal(p.indices().numpy(), ep.indices().numpy())
        np.testing.assert_array_equal(p.values().numpy(), ep.values().numpy())
        np.testing.assert_array_equal(out.numpy(), eout.numpy())
    assert len(captured.variants) == 1
    node_ops = {n.op for n in captured.graph_for(s, d).nodes}
    assert {"segment_softmax", "sparse_coo_mm"} <= node_ops


def test_capture_refuses_what_depends_on_index_values():
    s = rill.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0], (2, 2))  # uncoalesced
    with pytest.raises(rill.CaptureError, match="coalesce"):
        rill.capture(lambda s: rill.sparse.softmax(s, 1).values())(s)
    with pytest.raises(rill.CaptureError, match="to_sparse"):
        rill.capture(lambda x: x.to_sparse().values())(rill.ones(2, 2))


def test_captured_training_step_with_a_sparse_adjacency_matches_eager(rng):
    s, x = _graph_inputs(rng)
    labels = rill.tensor(rng.integers(0, 3, 6))

    def run(captured):
        rill.manual_seed(0)
        layer = rill.nn.Linear(3, 3)
        optimizer = rill.optim.SGD(layer.parameters(), lr=0.5)

        def step(adj, x, labels):
            optimizer.zero_grad()
            loss = rill.nn.functional.cross_entropy(rill.sparse.mm(adj, layer(x)), labels)
            loss.backward()
            optimizer.step()
            return loss
        step = rill.capture(step) if captured else step
        return [float(step(s, x, labels)) for _ in range(4)], layer.weight.numpy()

    (eager_losses, eager_w), (losses, w) = run(False), run(True)
    assert losses == eager_losses and losses[-1] < losses[0]
    np.testing.assert_array_equal(w, eager_w)


def test_saved_graph_with_sparse_values_loads_and_runs(rng, tmp_path):
    captured = rill.capture(_sparse_program)
    s, d = _graph_inputs(rng)
    captured(s, d)
    captured.save(tmp_path / "sparse")
    loaded = rill.load_graph(tmp_path / "sparse")
    s2, d2 = _graph_inputs(np.random.default_rng(7))
    (p, out), (ep, eout) = loaded(s2, d2), _sparse_program(s2, d2)
    np.testing.assert_array_equal(out.numpy(), eout.numpy())
    # A saved graph describes results as tensors and tuples: a sparse result comes back as
    # its components, (indices, values, size, coalesced), which SparseCOO(*parts) rebuilds.
    rebuilt = SparseCOO(*p)
    np.testing.assert_array_equal(rebuilt.values().numpy(), ep.values().numpy())
    np.testing.assert_array_equal(rebuilt.indices().numpy(), ep.indices().numpy())


def test_vmap_over_the_dense_operand_folds_members_into_columns(rng):
    import warnings
    from rill.func import vmap
    indices, values = random_coo(rng)
    coo = rill.sparse_coo_tensor(indices, values, (5, 7))
    dense = rill.tensor(rng.standard_normal((4, 7, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a batching rule, not the per-member loop
        for s in (coo, coo.to_sparse_csr()):
            got = vmap(lambda d: s @ d)(dense)
            expected = np.stack([(s @ dense[i]).numpy() for i in range(4)])
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-14)
