"""Module.summary(): a rich table of a model's layers, output shapes and parameter counts.

>>> import rill
>>> from rich.console import Console
>>> model = rill.nn.Sequential(rill.nn.Linear(4, 3), rill.nn.ReLU())
>>> console = Console(width=72, color_system=None)
>>> console.print(summary_table(model, rill.zeros(2, 4)))
                      Sequential
┏━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━┓
┃ Layer ┃ Type   ┃ Output shape ┃ Params ┃ Trainable ┃
┡━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━┩
│ 0     │ Linear │ [2, 3]       │     15 │        15 │
│ 1     │ ReLU   │ [2, 3]       │      0 │         0 │
├───────┼────────┼──────────────┼────────┼───────────┤
│ total │        │ [2, 3]       │     15 │        15 │
└───────┴────────┴──────────────┴────────┴───────────┘
"""
from __future__ import annotations

from rich.table import Table

from ..tensor import Tensor
from ..eager.context import no_grad


def _shape_text(output) -> str:
    """[2, 3] for a tensor; nested brackets for tuples and lists of tensors."""
    if isinstance(output, Tensor):
        return str(list(output.shape))
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(_shape_text(o) for o in output) + ")"
    if output is None:
        return "None"
    return type(output).__name__


def summary_table(module, example_input=None) -> Table:
    """Build the table behind `Module.summary` (one row per submodule, depth first).

    Parameter columns count each module's own parameters, so that they add up to the
    total row; a parameter shared by two modules is counted where it is first found.
    """

    shapes, handles = {}, []

    def record(name):
        def hook(mod, args, output):
            shapes.setdefault(name, _shape_text(output))  # the first call, if called twice
        return hook

    if example_input is not None:
        for name, m in module.named_modules():
            handles.append(m.register_forward_hook(record(name)))
        # In eval mode, so that looking at a model does not change it (BatchNorm's running
        # statistics, the dropout generator's state); each module's mode is put back.
        modes = [(m, m.training) for m in module.modules()]
        try:
            module.eval()
            with no_grad():
                args = example_input if isinstance(example_input, tuple) else (example_input,)
                module(*args)
        finally:
            for m, training in modes:
                m.training = training
            for h in handles:
                h.remove()

    table = Table(title=type(module).__name__, show_footer=False)
    table.add_column("Layer")
    table.add_column("Type")
    if example_input is not None:
        table.add_column("Output shape")
    table.add_column("Params", justify="right")
    table.add_column("Trainable", justify="right")

    counted = set()
    for name, m in module.named_modules():
        own = [p for p in m.parameters(recurse=False) if id(p) not in counted]
        if not name and not own:
            continue
        counted.update(id(p) for p in own)
        depth = name.count(".")
        label = "  " * depth + name.rsplit(".", 1)[-1] if name else "(own parameters)"
        row = [label, type(m).__name__]
        if example_input is not None:
            row.append(shapes.get(name, "-"))
        row += [f"{sum(p.size for p in own):,}",
                f"{sum(p.size for p in own if p.requires_grad):,}"]
        table.add_row(*row)
    total = ["total", ""] + ([shapes.get("", "-")] if example_input is not None else []) + \
        [f"{module.num_parameters():,}", f"{module.num_parameters(trainable_only=True):,}"]
    table.add_section()
    table.add_row(*total)
    return table
