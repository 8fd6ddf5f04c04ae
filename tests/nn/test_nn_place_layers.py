"""rill.nn.utils.place_layers: a Sequential's layers over several devices. The oracle is the
same model on one device: forward, gradients and captured training steps bit-equal, the
captured step partitioned with one send/recv pair per stage boundary and direction."""
from __future__ import annotations

import numpy as np
import pytest
import rill
from rill import nn, optim
from rill.nn.utils import place_layers

CPU, CPU1, CPU2 = rill.device("cpu"), rill.device("cpu:1"), rill.device("cpu:2")


def _mlp():
    rill.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3)).to(rill.float64)


def _data(seed=1):
    rng = np.random.default_rng(seed)
    return rill.tensor(rng.standard_normal((8, 6))), rill.tensor(rng.standard_normal((8, 3)))


def test_stages_get_their_devices_and_the_model_keeps_its_boundary():
    model = place_layers(_mlp(), ["cpu:0", "cpu:1"])
    # parameter counts 112, 272, 51: the cut nearest half of 435 is after the ReLU
    assert [str(p.device) for p in model.parameters()] == ["cpu", "cpu", "cpu:1", "cpu:1",
                                                           "cpu:1", "cpu:1"]
    x, _ = _data()
    assert model(x).device is CPU  # handed back to the first device
    assert model[1](model[0](x)).device is CPU1  # the first stage hands on to the second


def test_balance_gives_layers_per_stage():
    model = place_layers(_mlp(), ["cpu", "cpu:1", "cpu:2"], balance=[1, 3, 1])
    assert [m.weight.device for m in model if isinstance(m, nn.Linear)] == [CPU, CPU1, CPU2]
    x, _ = _data()
    np.testing.assert_array_equal(model(x).numpy(), _mlp()(x).numpy())


def test_eager_forward_and_gradients_are_bit_equal_to_one_device():
    whole, split = _mlp(), place_layers(_mlp(), ["cpu", "cpu:1"])
    x, y = _data()
    for model in (whole, split):
        ((model(x) - y) ** 2).mean().backward()
    np.testing.assert_array_equal(split(x).numpy(), whole(x).numpy())
    for a, b in zip(split.parameters(), whole.parameters()):
        assert a.grad.device is a.device
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_captured_training_steps_are_bit_equal_and_partitioned():
    def train(devices, steps=5):
        model = place_layers(_mlp(), devices)
        opt = optim.Adam(model.parameters(), lr=1e-2)

        @rill.capture
        def step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        x, y = _data()
        return model, [step(x, y).item() for _ in range(steps)], step.partitions_for(x, y)

    split, split_losses, parts = train(["cpu", "cpu:1"])
    whole, whole_losses, one = train(["cpu"])
    assert split_losses == whole_losses and split_losses[-1] < split_losses[0]
    for a, b in zip(split.parameters(), whole.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert sorted(parts) == ["cpu", "cpu:1"] and list(one) == ["cpu"]
    # each stage's state (parameters, gradients, Adam's moments) is assigned on its device:
    # the second stage has twice the first's tensors (two Linears to one)
    assert parts["cpu"].count("assign") > 0
    assert parts["cpu:1"].count("assign") == 2 * parts["cpu"].count("assign")
    assert parts["cpu"].count("send") >= 2 and parts["cpu:1"].count("send") >= 2


def test_placing_again_replaces_the_hooks():
    model = place_layers(place_layers(_mlp(), ["cpu", "cpu:1"]), ["cpu:1", "cpu"])
    x, _ = _data()
    assert model[0].weight.device is CPU1
    assert model(x.to("cpu:1")).device is CPU1
    one = place_layers(model, ["cpu"])
    assert one(x).device is CPU and all(p.device is CPU for p in one.parameters())


def test_bad_arguments_are_rill_errors():
    with pytest.raises(rill.ArgumentError, match="expected an nn.Sequential"):
        place_layers(nn.Linear(2, 2), ["cpu", "cpu:1"])
    with pytest.raises(rill.ArgumentError, match="list of devices"):
        place_layers(_mlp(), "cpu:1")
    with pytest.raises(rill.ArgumentError, match="cannot cut 2 layer"):
        place_layers(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), ["cpu", "cpu:1", "cpu:2"])
    with pytest.raises(rill.ArgumentError, match="places 4 layers, but the module has 5"):
        place_layers(_mlp(), ["cpu", "cpu:1"], balance=[2, 2])
    with pytest.raises(rill.ArgumentError, match="balance"):
        place_layers(_mlp(), ["cpu", "cpu:1"], balance=[5, 0])
    with pytest.raises(rill.DeviceError, match="bad device index"):
        place_layers(_mlp(), ["cpu", "cpu:x"])
