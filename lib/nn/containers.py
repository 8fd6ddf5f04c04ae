"""Containers: Sequential (a pipeline), ModuleList and ModuleDict (registered collections).

A plain Python list or dict of modules is invisible to `parameters()`; these register
their items as submodules named by position or key.
"""
from __future__ import annotations

from collections import OrderedDict

from ..errors import ArgumentError, IndexingError
from .module import Module


def _index(i: int, n: int, what: str) -> int:
    if isinstance(i, bool) or not isinstance(i, int):
        raise IndexingError(f"a {what} is indexed by an int or a slice, got {i!r}")
    if not -n <= i < n:
        raise IndexingError(f"index {i} is out of range for a {what} of length {n}")
    return i % n


def _renumber(container: Module, modules) -> None:
    container._modules.clear()
    for i, m in enumerate(modules):
        container.add_module(str(i), m)


class Sequential(Module):
    """Modules applied one after another, each to the output of the one before.

    >>> import rill
    >>> from rill import nn
    >>> model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    >>> model(rill.ones(2, 3)).shape
    (2, 1)
    >>> model[0]
    Linear(in_features=3, out_features=4, bias=True)  (params: 16)
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (dict, OrderedDict)):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        items = list(self._modules.items())
        if isinstance(i, slice):
            return Sequential(OrderedDict(items[i]))
        return items[_index(i, len(items), "Sequential")][1]

    def __setitem__(self, i: int, module: Module) -> None:
        name = list(self._modules)[_index(i, len(self), "Sequential")]
        self.add_module(name, module)

    def __delitem__(self, i) -> None:
        names = list(self._modules)
        for name in (names[i] if isinstance(i, slice) else
                     [names[_index(i, len(names), "Sequential")]]):
            del self._modules[name]
        if all(name.isdigit() for name in names):
            # Positional names stay 0..n-1, so that append() cannot reuse a taken name.
            _renumber(self, list(self._modules.values()))

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters belong to the owner.

    >>> from rill import nn
    >>> layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(layers), len(list(layers.parameters()))
    (3, 6)
    """

    def __init__(self, modules=()):
        super().__init__()
        self.extend(modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, i):
        items = list(self._modules.values())
        if isinstance(i, slice):
            return ModuleList(items[i])
        return items[_index(i, len(items), "ModuleList")]

    def __setitem__(self, i: int, module: Module) -> None:
        self.add_module(str(_index(i, len(self), "ModuleList")), module)

    def __delitem__(self, i) -> None:
        items = list(self._modules.values())
        del items[i if isinstance(i, slice) else _index(i, len(items), "ModuleList")]
        _renumber(self, items)

    def __iadd__(self, modules) -> "ModuleList":
        return self.extend(modules)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        _renumber(self, items)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward(): iterate over it and call each "
                                  "module")


class ModuleDict(Module):
    """A dict of modules (insertion ordered) whose parameters belong to the owner.

    >>> from rill import nn
    >>> heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})
    >>> list(heads), heads["reg"].out_features
    (['cls', 'reg'], 1)
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise ArgumentError(f"ModuleDict has no key {key!r}; keys are {list(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self._modules[key]
        return module

    def update(self, modules) -> None:
        pairs = modules.items() if hasattr(modules, "items") else modules
        for key, m in pairs:
            self[key] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward(): look a module up and call it")
