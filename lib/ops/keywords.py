"""PyTorch's keyword spellings, accepted by every public function as aliases of rill's (and
the standard's `axis`/`keepdims` by functions that follow PyTorch and name them `dim`).

rill's functions name their arguments as the Array API standard does (`axis`, `keepdims`,
`correction`, `x`); PyTorch programs write `dim`, `keepdim`, `unbiased`, `input`. Rather than
give each function a second set of parameters, `accept_torch_keywords` wraps it once, when
rill is imported (`install`), with a translation computed from its signature: an alias is
translated only where the function takes the target and not the alias itself (a function that
has its own `dim` keeps it). So `rill.sum(x, dim=1, keepdim=True)`, `x.std(unbiased=False)` and
`F.softmax(input=x, dim=-1)` all reach the same code as rill's own spelling.

The wrapper costs one Python call, and a set test only when keywords are passed.
"""
from __future__ import annotations

import functools
import inspect

from ..errors import ArgumentError

# alias -> the rill parameters it may stand for, first match wins.
ALIASES = {
    "dim": ("axis", "axes"),
    "dims": ("axes", "axis", "reps"),
    "shifts": ("shift",),
    "keepdim": ("keepdims",),
    "start_dim": ("start_axis",),
    "end_dim": ("end_axis",),
    "unbiased": ("correction",),
    "exponent": ("y",),
    "p": ("ord",),
    "size": ("shape",),
    # ... and the standard's spellings for functions named as PyTorch's (x.sort(axis=0)):
    "axis": ("dim",),
    "keepdims": ("keepdim",),
    "input": (0,),    # the first positional parameter, whatever its name
    "other": ("y",),  # the second operand of a binary function
}

_POSITIONAL = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)


def translation(fn) -> dict:
    """{alias: rill parameter} for the aliases `fn` can accept."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    names = list(params)
    positional = [n for n, p in params.items() if p.kind in _POSITIONAL]
    table = {}
    for alias, targets in ALIASES.items():
        if alias in params:
            continue
        for target in targets:
            if isinstance(target, int):
                # (a method's `self` is not PyTorch's `input`: x.sum(input=...) means nothing)
                if target < len(positional) and positional[target] != "self" and \
                        params[positional[target]].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                    table[alias] = positional[target]
                break
            if target in names:
                table[alias] = target
                break
    return table


def _translate(fn, table: dict, kwargs: dict) -> dict:
    out = {}
    for key, value in kwargs.items():
        target = table.get(key)
        if target is None:
            out[key] = value
            continue
        if target in kwargs:
            raise ArgumentError(f"got both {key}= and {target}=, which mean the same; pass one",
                                op=fn.__name__)
        if key == "unbiased":
            if not isinstance(value, bool):
                raise ArgumentError(f"unbiased must be True or False, got {value!r}",
                                    op=fn.__name__)
            value = int(value)
        out[target] = value
    return out


def accept_torch_keywords(fn):
    """`fn`, also accepting PyTorch's keyword spellings of its parameters (or `fn` itself when
    no alias applies)."""
    if getattr(fn, "__torch_keywords__", None) is not None:
        return fn
    table = translation(fn)
    if not table:
        return fn
    aliases = frozenset(table)

    @functools.wraps(fn)
    def accepting(*args, **kwargs):
        if kwargs and not aliases.isdisjoint(kwargs):
            kwargs = _translate(fn, table, kwargs)
        return fn(*args, **kwargs)

    accepting.__torch_keywords__ = table
    return accepting


def install(module) -> None:
    """Wrap every public function defined in `module`, in place (callers that look the name
    up in the module, rill's namespace and Tensor's methods among them, get the wrapper)."""
    for name, value in list(vars(module).items()):
        if name.startswith("_") or not inspect.isfunction(value):
            continue
        if value.__module__ != module.__name__:
            continue
        setattr(module, name, accept_torch_keywords(value))
