"""Sparse updates inside captured steps (issue 34): an embedding's gradient keeps its rows in
the graph, optimizers coalesce it to the batch's shapes, and the table is updated in its
own buffer, rows only: captured steps equal eager ones bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import rill
from rill import nn, optim
from rill.ops.rows import add_rows_, coalesce_rows

OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "adagrad": lambda ps: optim.Adagrad(ps, lr=0.1),
    "sparse_adam": lambda ps: optim.SparseAdam(ps, lr=0.05),
}


def _run(name, captured, steps=4):
    rill.manual_seed(0)
    table = nn.Embedding(50, 6)
    opt = OPTIMIZERS[name](list(table.parameters()))
    target = rill.tensor(np.linspace(-1, 1, 6), dtype=rill.float32)

    def step(idx):
        loss = ((table(idx) - target) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()  # no .grad kept past the step (a kept one is stored dense)
        return loss

    run = rill.capture(step) if captured else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        idx = rng.integers(0, 50, size=12)
        idx[:3] = idx[3]  # repeated rows: coalescing and padding are exercised
        losses.append(float(run(rill.tensor(idx))))
    return losses, table.weight.numpy().copy(), opt, run


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_captured_sparse_steps_equal_eager_bit_for_bit(name):
    eager_losses, eager_w, eager_opt, _ = _run(name, captured=False)
    losses, w, opt, step = _run(name, captured=True)
    assert losses == eager_losses
    np.testing.assert_array_equal(w, eager_w)
    for a, b in zip(eager_opt.state.values(), opt.state.values()):
        for k in a:
            np.testing.assert_array_equal(np.asarray(a[k].numpy()), np.asarray(b[k].numpy()))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_graph_holds_no_table_sized_gradient(name):
    _, _, _, step = _run(name, captured=True, steps=2)
    graph = step.graph_for(rill.tensor(np.arange(12)))
    for node in graph.nodes:  # table-sized values: only the reads and the row updates
        for v in node.outputs:
            if v.shape == (50, 6):
                assert node.op == "read" or node.op == "index_add" and \
                    node.inputs[0].node.op == "read", str(graph)


def test_coalesce_rows_pads_to_the_batch_and_sums_repeats():
    idx = rill.tensor([4, 2, 4, 4, 0])
    rows = rill.tensor(np.arange(10.0).reshape(5, 2))
    indices, summed, valid = coalesce_rows(idx, rows)
    np.testing.assert_array_equal(indices.numpy()[:3], [0, 2, 4])
    np.testing.assert_array_equal(summed.numpy(), [[8, 9], [2, 3], [10, 13], [0, 0], [0, 0]])
    np.testing.assert_array_equal(valid.numpy(), [True, True, True, False, False])
    with pytest.raises(rill.ShapeError):
        coalesce_rows(idx, rill.ones(4, 2))


def test_add_rows_writes_in_place_only_when_no_one_else_holds_the_buffer():
    t = rill.zeros(6, 2)
    first = id(t._data)
    add_rows_(t, rill.tensor([1, 1, 5]), rill.ones(3, 2))
    assert id(t._data) == first  # written in place
    np.testing.assert_array_equal(t.numpy()[:, 0], [0, 2, 0, 0, 0, 1])
    view = t[2:]  # a view shares the buffer: the update must not show through it
    add_rows_(t, rill.tensor([5]), rill.ones(1, 2))
    assert id(t._data) != first
    np.testing.assert_array_equal(view.numpy()[3], [1, 1])
    np.testing.assert_array_equal(t.numpy()[5], [2, 2])


def test_topk_by_partition_equals_the_stable_sort_with_ties():
    # Long rows take the partition path (kernels/numpy/sorting.py); ties must resolve as the
    # stable sort resolves them: the lower index first, and the lowest indices kept.
    rng = np.random.default_rng(3)
    for largest in (True, False):
        x = rill.tensor(rng.integers(0, 6, size=(3, 2048)).astype(np.float32))
        values, idx = rill.topk(x, 300, largest=largest)
        order = np.argsort(-x.numpy() if largest else x.numpy(), axis=-1, kind="stable")
        np.testing.assert_array_equal(idx.numpy(), order[:, :300])
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x.numpy(), order,
                                                                          -1)[:, :300])


def test_a_sparse_grad_kept_past_a_captured_step_is_said_once_it_costs_a_table(monkeypatch):
    from rill.capture import tracer
    monkeypatch.setattr(tracer, "DENSE_GRAD_WARN_BYTES", 1000)
    table = nn.Embedding(100, 4)
    opt = optim.SGD(list(table.parameters()), lr=0.1)

    def step(idx):
        opt.zero_grad()  # at the start: the step's sparse gradient outlives it
        table(idx).sum().backward()
        opt.step()

    from rill.capture.function import CaptureWarning
    with pytest.warns(CaptureWarning, match="zero_grad\\(\\) at the end"):
        rill.capture(step)(rill.tensor([1, 2]))


def test_a_saved_graph_with_new_axes_and_an_ellipsis_loads(tmp_path):
    # A loaded key is made of new tuples, equal to rill's markers but not the same objects.
    f = rill.capture(lambda x: x[:, None, ..., 0] * 2)
    x = rill.tensor(np.arange(24.0).reshape(3, 2, 4))
    expected = f(x)
    f.save(tmp_path / "g")
    np.testing.assert_array_equal(rill.load_graph(tmp_path / "g")(x).numpy(), expected.numpy())
