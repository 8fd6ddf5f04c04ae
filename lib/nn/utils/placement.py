"""Model parallelism for a Sequential: its layers cut into stages, one stage per device.

`place_layers(model, ["cpu:0", "cpu:1"])` moves each stage's parameters and buffers to its
device and makes each stage hand its output to the next stage's device (a forward hook on
the stage's last layer doing `output.to(next device)`); the last stage hands its output back
to the first device. So the model still takes and returns tensors on `devices[0]`, eagerly
(the moves are explicit copies: rill never copies between devices by itself) and captured
(each move is a `to_device` node, which the partition pass turns into a send/recv pair).

This spreads the *memory* of a model over devices; it does not make one input run faster:
each stage needs the previous stage's output, so the stages of one forward pass take turns.
Work overlaps only when the graph has independent parts, e.g. micro-batches (the second
stage on micro-batch 1 while the first runs micro-batch 2), which a captured step over
several devices runs at once.

>>> import rill
>>> from rill import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> _ = place_layers(model, ["cpu:0", "cpu:1"])
>>> [str(p.device) for p in model.parameters()]
['cpu', 'cpu', 'cpu:1', 'cpu:1']
>>> model(rill.ones(3, 4)).device
device('cpu')
"""
from __future__ import annotations

from ...devices import Device
from ...devices import device as as_device
from ...errors import ArgumentError
from ...ops.arguments import as_int, describe
from ...tensor import Tensor

_HOOKS = "_place_layers_hooks"  # the hooks of the last place_layers call, on the model


def place_layers(module, devices, balance=None):
    """Cut the nn.Sequential `module` into len(devices) consecutive stages and put stage i
    on devices[i] (see the module docstring). Returns `module`, changed in place.

    `balance`: how many layers each stage gets (a list of positive ints summing to
    len(module)); by default stages hold about equal numbers of parameters, each at least
    one layer. Call it before making the optimizer: optimizer state is made beside each
    parameter, where the parameter is when the state is first made. Calling it again
    re-places the model (the previous hooks are removed).
    """
    from ..containers import Sequential
    op = "place_layers"
    if not isinstance(module, Sequential):
        raise ArgumentError(f"expected an nn.Sequential, got {describe(module)}: for another "
                            "module, move its parts with .to(device) and its activations "
                            "with x.to(device) in forward", op=op)
    if isinstance(devices, (str, Device)) or not hasattr(devices, "__iter__"):
        raise ArgumentError(f"devices must be a list of devices such as ['cpu:0', 'cpu:1'], "
                            f"got {describe(devices)}", op=op)
    devices = [as_device(d) for d in devices]
    layers = list(module)
    if not devices or len(devices) > len(layers):
        raise ArgumentError(f"cannot cut {len(layers)} layer(s) into {len(devices)} stage(s): "
                            "give between 1 and len(module) devices", op=op)
    counts = _balance(layers, len(devices)) if balance is None else \
        _checked_balance(balance, len(layers), len(devices), op)
    for handle in getattr(module, _HOOKS, ()):
        handle.remove()
    hooks, start = [], 0
    for i, (device, count) in enumerate(zip(devices, counts)):
        stage = layers[start:start + count]
        for layer in stage:
            layer.to(device)
        after = devices[(i + 1) % len(devices)]
        if len(devices) > 1:
            hooks.append(stage[-1].register_forward_hook(_move_to(after)))
        start += count
    object.__setattr__(module, _HOOKS, hooks)
    return module


def _move_to(device):
    def hook(module, args, output):
        if isinstance(output, Tensor):
            return output.to(device)
        if isinstance(output, (tuple, list)):
            return type(output)(o.to(device) if isinstance(o, Tensor) else o for o in output)
        return None
    return hook


def _balance(layers, stages: int) -> list:
    """Layers per stage: cut where the running parameter count passes each stage's equal
    share, keeping at least one layer per stage (and enough layers for the stages after)."""
    sizes = [sum(p.size for p in layer.parameters()) for layer in layers]
    total = sum(sizes) or len(layers)
    sizes = sizes if sum(sizes) else [1] * len(layers)
    counts, taken, running = [], 0, 0
    for stage in range(stages - 1):
        share = total * (stage + 1) / stages
        count = 1
        running += sizes[taken]
        # take more while the next layer brings the running total closer to the share
        while (taken + count < len(layers) - (stages - stage - 1)
               and abs(running + sizes[taken + count] - share) <= abs(running - share)):
            running += sizes[taken + count]
            count += 1
        counts.append(count)
        taken += count
    counts.append(len(layers) - taken)
    return counts


def _checked_balance(balance, layers: int, stages: int, op: str) -> list:
    if not isinstance(balance, (list, tuple)) or len(balance) != stages:
        raise ArgumentError(f"balance must be a list of {stages} layer counts (one per "
                            f"device), got {describe(balance)}", op=op)
    counts = [as_int(b, f"balance[{i}]", op, low=1) for i, b in enumerate(balance)]
    if sum(counts) != layers:
        raise ArgumentError(f"balance {counts} places {sum(counts)} layers, but the module "
                            f"has {layers}", op=op)
    return counts
