"""The GCN port (tests/ports/gcn.py, a PyTorch program using torch.sparse): run on PyTorch and,
with only its import block swapped, on rill, from the same weights on the same Cora-sized
synthetic graph. Same losses (float32 tolerance), same accuracy; and rill's captured step
gives its eager step's losses."""
import numpy as np
import pytest

import rill

torch = pytest.importorskip("torch")
from ports.test_ports import copy_weights, load  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # PyTorch's notice


@pytest.fixture(scope="module")
def gcn():
    """(program on PyTorch, program on rill, the graph as NumPy arrays)."""
    on_torch = load("gcn", "torch")
    return on_torch, load("gcn", "rill"), on_torch.make_graph(seed=0)


@pytest.fixture
def one_torch_thread():
    # The machine is shared and small: PyTorch's thread pool only adds contention here.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_graph_is_cora_sized_and_has_class_structure(gcn):
    _, _, (indices, values, x, labels, train, test) = gcn
    assert x.shape == (2708, 1433) and indices.shape == (2, 2 * 5278 + 2708)
    assert len(np.unique(labels)) == 7 and len(train) == 140 and len(test) == 1000
    rows, cols = indices
    assert (labels[rows] == labels[cols]).mean() > 0.7  # most edges stay within a class
    np.testing.assert_allclose(values, values[np.lexsort((rows, cols))][
        np.argsort(np.lexsort((rows, cols)))])  # A_hat is symmetric in its entries
    assert not np.isin(test, train).any()


@pytest.mark.timeout(120)
def test_gcn_trains_as_on_pytorch(gcn, one_torch_thread):
    on_torch, on_rill, graph = gcn
    torch_model, rill_model = on_torch.build_model(seed=3), on_rill.build_model(seed=3)
    copy_weights(torch_model, rill_model)
    torch_losses, torch_accuracy = on_torch.train(torch_model, on_torch.to_tensors(graph))
    rill_losses, rill_accuracy = on_rill.train(rill_model, on_rill.to_tensors(graph))
    np.testing.assert_allclose(rill_losses, torch_losses, rtol=1e-4, atol=1e-5)
    assert torch_losses[-1] < 0.6 * torch_losses[0]  # it learned something
    assert abs(rill_accuracy - torch_accuracy) <= 0.01
    assert rill_accuracy > 0.7  # far above chance (1/7): the accuracy means something
    # gc1's rows for words a node seldom uses get gradients near float32's noise, which
    # Adam scales up to steps of lr: compare the layer whose gradients are all well above it.
    np.testing.assert_allclose(np.asarray(rill_model.gc2.weight),
                               torch_model.gc2.weight.detach().numpy(), rtol=1e-3, atol=1e-4)


def test_captured_gcn_step_matches_eager(gcn):
    _, on_rill, graph = gcn
    tensors = on_rill.to_tensors(graph)[:4]
    losses = {}
    for captured in (False, True):
        model = on_rill.build_model(seed=1)
        optimizer = rill.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        step = on_rill.make_step(model, optimizer)
        if captured:
            step = rill.capture(step)
        losses[captured] = [float(step(*tensors)) for _ in range(5)]
    assert losses[True] == losses[False]  # the same kernels in the same order: bit-equal
    assert losses[True][-1] < losses[True][0]
