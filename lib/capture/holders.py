"""The kinds of objects that hold a captured step's state, as their classes declare them.

A capture names and walks parameters, buffers and optimizer slots through the objects that
hold them: nn.Module (its submodules, parameters, buffers, and what its methods read as
`self.<name>`) and optim.Optimizer (its hyperparameters read as tensors, its slots). capture
sits below nn and optim (docs/DESIGN.md, "Layers"), so those classes register here when
they are defined, and capture asks `is_module` / `is_optimizer` instead of importing them.
Before nn is imported there is no Module to find, so the answers are right from the start.
"""
from __future__ import annotations

_MODULE_TYPES: tuple = ()
_OPTIMIZER_TYPES: tuple = ()


def holds_modules(cls: type) -> type:
    """Class decorator: instances of `cls` are modules (named_modules, named_parameters,
    named_buffers, and parameters, buffers and submodules in _parameters, _buffers and
    _modules)."""
    global _MODULE_TYPES
    _MODULE_TYPES += (cls,)
    return cls


def holds_optimizer_state(cls: type) -> type:
    """Class decorator: instances of `cls` are optimizers (hyper_tensors(), and `state`,
    parameter -> {slot name: tensor})."""
    global _OPTIMIZER_TYPES
    _OPTIMIZER_TYPES += (cls,)
    return cls


def is_module(obj) -> bool:
    """Whether `obj` is an instance of a class registered with `holds_modules`."""
    return isinstance(obj, _MODULE_TYPES)


def is_optimizer(obj) -> bool:
    """Whether `obj` is an instance of a class registered with `holds_optimizer_state`."""
    return isinstance(obj, _OPTIMIZER_TYPES)
