"""Module: the base class of layers and models.

A Module owns parameters, buffers and submodules, registered by assigning them as
attributes. It walks them by dotted name (`named_parameters`, `state_dict`), switches
training and evaluation mode, and converts its state in place (`to`) so that optimizers,
which hold the Parameter objects themselves, keep seeing the same objects.
"""
from __future__ import annotations

import difflib
import itertools
from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from ..capture.guards import module_called
from ..capture.holders import holds_modules
from .. import dtypes as _dt
from ..eager.context import detached_value, no_grad, set_grad
from ..errors import ArgumentError, Error
from ..ops.sparse_rows import SparseRows
from ..tensor import Tensor
from .parameter import Parameter
from ..ops.creation import as_tensor, to_device, zeros
from ..ops.methods import assign
from ..devices import device as as_device

LoadResult = namedtuple("LoadResult", ["missing_keys", "unexpected_keys"])


class RemovableHandle:
    """Returned by `register_forward_hook`; `remove()` unregisters the hook."""

    _ids = itertools.count()

    def __init__(self, hooks: dict):
        self._hooks = hooks
        self.id = next(RemovableHandle._ids)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)


def assign_(target: Tensor, value: Tensor) -> Tensor:
    """Give `target` the buffer, dtype and device of `value`, keeping the object itself.

    Optimizers and user code hold parameters by identity, so conversions and loads must
    change the object they hold rather than make a new one.
    """
    target._data, target.shape = value._data, value.shape
    target.dtype, target.device = value.dtype, value.device
    target._version += 1
    return target


@holds_modules
class Module:
    """Base class of every layer: subclass it, assign parameters and submodules in
    `__init__`, and compute in `forward`.

    >>> import rill
    >>> from rill import nn
    >>> class Affine(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.scale = nn.Parameter(rill.ones(2))
    ...         self.register_buffer("shift", rill.zeros(2))
    ...     def forward(self, x):
    ...         return x * self.scale + self.shift
    >>> m = Affine()
    >>> m(rill.tensor([1.0, 2.0]))
    tensor([1., 2.], grad_fn=add)
    >>> [name for name, _ in m.named_parameters()], list(m.state_dict())
    (['scale'], ['scale', 'shift'])
    """

    training: bool

    def __init__(self):
        # Written through object.__setattr__: our own __setattr__ needs these to exist.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        module_called(self)  # inside a trace: the training flag is baked in, so guarded
        output = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            replaced = hook(self, args, output)
            if replaced is not None:
                output = replaced
        return output

    def register_forward_hook(self, hook) -> RemovableHandle:
        """Call `hook(module, args, output)` after each forward; a non-None result replaces
        the output. Returns a handle whose `remove()` unregisters it."""
        handle = RemovableHandle(self._forward_hooks)
        self._forward_hooks[handle.id] = hook
        return handle

    # ---- registration ----------------------------------------------------------------------

    def _registries(self):
        try:
            return (self.__dict__["_parameters"], self.__dict__["_buffers"],
                    self.__dict__["_modules"])
        except KeyError:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 "assigning parameters, buffers or submodules") from None

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, (Parameter, Module)):
            params, buffers, modules = self._registries()
            home = params if isinstance(value, Parameter) else modules
            self.__dict__.pop(name, None)
            for registry in (params, buffers, modules):
                if registry is not home:  # the home keeps the name's place in the order
                    registry.pop(name, None)
            self._non_persistent.discard(name)
            home[name] = value
            return
        d = self.__dict__
        params, buffers, modules = (d.get(r, {}) for r in ("_parameters", "_buffers", "_modules"))
        if name in params:
            if value is not None:
                raise ArgumentError(f"{type(self).__name__}.{name} is a parameter: assign a "
                                    f"rill.nn.Parameter or None, not {type(value).__name__}")
            params[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise ArgumentError(f"{type(self).__name__}.{name} is a buffer: assign a "
                                    f"Tensor or None, not {type(value).__name__}")
            buffers[name] = value
        elif name in modules:
            if value is not None:
                raise ArgumentError(f"{type(self).__name__}.{name} is a submodule: assign a "
                                    f"Module or None, not {type(value).__name__}")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails: parameters, buffers and submodules live here.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        if "_parameters" not in d:  # before __init__ ran, or while unpickling
            raise AttributeError(f"'{type(self).__name__}' module has no attribute '{name}'")
        close = difflib.get_close_matches(name, self.__dir__(), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise AttributeError(f"'{type(self).__name__}' module has no attribute '{name}'{hint}")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        own = list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(set(super().__dir__()) | set(own))

    def _check_name(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise ArgumentError(f"{what} name must be a non-empty string without '.', "
                                f"got {name!r}")
        if name in self.__dict__ and name not in self._parameters | self._buffers | \
                self._modules:
            raise ArgumentError(f"{type(self).__name__} already has an attribute '{name}'")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register `param` (or None, for an absent optional parameter such as a bias)."""
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise ArgumentError(f"register_parameter needs a rill.nn.Parameter or None, got "
                                f"{type(param).__name__}")
        self._buffers.pop(name, None)
        self._modules.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register state that is not trained (running statistics, masks).

        Persistent buffers are saved in `state_dict`; others only follow `to()`.
        """
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ArgumentError(f"register_buffer needs a Tensor or None, got "
                                f"{type(tensor).__name__}")
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a submodule under `name` (as assigning the attribute does)."""
        self._check_name(name, "module")
        if module is not None and not isinstance(module, Module):
            raise ArgumentError(f"add_module needs a Module or None, got "
                                f"{type(module).__name__}")
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._modules[name] = module

    register_module = add_module

    # ---- walking the tree ------------------------------------------------------------------

    def named_modules(self, prefix: str = "", remove_duplicate: bool = True, _seen=None):
        """(dotted name, module) for this module and every descendant, depth first."""
        seen = set() if _seen is None else _seen
        if remove_duplicate:
            if id(self) in seen:
                return
            seen.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name,
                                               remove_duplicate, seen)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        """(name, module) for the direct submodules."""
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, registry: str, prefix: str, recurse: bool,
                       remove_duplicate: bool = True):
        seen = set()
        modules = self.named_modules(prefix, remove_duplicate) if recurse else [(prefix, self)]
        for module_name, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_name}.{name}" if module_name else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True):
        """(dotted name, parameter) pairs; a parameter shared by two modules comes once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many numbers the parameters hold (those that require grad, if asked)."""
        return sum(p.size for p in self.parameters()
                   if p.requires_grad or not trainable_only)

    # ---- state -----------------------------------------------------------------------------

    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Name -> tensor for every parameter and persistent buffer, in registration order.

        Values are detached views, as PyTorch's: an in-place change of one (`sd["w"].zero_()`)
        changes the parameter too; `keep_vars=True` returns the Parameter and buffer objects
        themselves.
        """
        state = OrderedDict()
        for module_name, module in self.named_modules(prefix, remove_duplicate=False):
            dot = f"{module_name}." if module_name else ""
            for name, p in module._parameters.items():
                if p is not None:
                    state[dot + name] = p if keep_vars else p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[dot + name] = b if keep_vars else b.detach()
        return state

    def load_state_dict(self, state_dict, strict: bool = True) -> LoadResult:
        """Copy values into the existing parameters and buffers (their identity is kept).

        Everything is checked before anything changes. Shape and dtype mismatches always
        raise; missing and unexpected keys raise when `strict`. The error names every bad
        key. Returns (missing_keys, unexpected_keys).
        """

        if not isinstance(state_dict, Mapping):
            raise ArgumentError(f"expects a mapping of names to tensors (as state_dict() "
                                f"returns), got {type(state_dict).__name__}",
                                op="load_state_dict")
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched, values = [], {}
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                try:
                    value = as_tensor(value)
                except (Error, TypeError, ValueError):
                    mismatched.append(f"{key}: expected a tensor, got {type(value).__name__}")
                    continue
            if tuple(value.shape) != tuple(target.shape):
                mismatched.append(f"{key}: shape {tuple(value.shape)} in the checkpoint, "
                                  f"{tuple(target.shape)} in the model")
            elif value.dtype is not target.dtype:
                mismatched.append(f"{key}: dtype {value.dtype} in the checkpoint, "
                                  f"{target.dtype} in the model")
            else:
                values[key] = value
        problems = mismatched + ([f"missing key: {k}" for k in missing] +
                                 [f"unexpected key: {k}" for k in unexpected] if strict else [])
        if problems:
            raise ArgumentError(f"{type(self).__name__} cannot load this state dict "
                                f"({len(problems)} problems):\n  " + "\n  ".join(problems),
                                op="load_state_dict")
        with no_grad():
            for key, value in values.items():
                target = own[key]
                if value.device != target.device:
                    value = to_device(value, target.device)
                # detach: a loaded value must not bring its own tape or requires_grad along.
                assign(target, detached_value(value))
        return LoadResult(missing, unexpected)

    # ---- modes and conversions -------------------------------------------------------------

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (dropout active, batch statistics) here and in every submodule."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        """Evaluation mode: same as `train(False)`."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Turn gradient tracking of every parameter on or off (freezing layers)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the gradients of every parameter (set to None), or with set_to_none=False
        set each existing one to zeros (PyTorch's older habit; None saves the memory and
        lets the next backward write instead of add)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                set_grad(p, None)
            else:
                set_grad(p, zeros(*p.shape, dtype=p.dtype, device=p.device))

    def apply(self, fn) -> "Module":
        """Call fn(module) on every submodule, children before parents, then on self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, target) -> "Module":
        """Convert parameters and buffers in place to a dtype or device; returns self.

        A dtype converts floating tensors only (integer buffers such as counters stay).
        Each Parameter stays the same object, so optimizers built earlier still hold it.
        """
        is_dtype = isinstance(target, _dt.DType) or (isinstance(target, str) and
                                                      target in _dt._BY_NAME)
        self._convert((lambda t: t.dtype.is_floating) if is_dtype else (lambda t: True),
                      target)
        return self

    def _convert(self, wanted, target) -> None:
        """Convert, in place, each parameter and buffer t for which wanted(t) holds."""
        is_dtype = isinstance(target, _dt.DType) or (isinstance(target, str) and
                                                      target in _dt._BY_NAME)
        with no_grad():
            for t in itertools.chain(self.parameters(), self.buffers()):
                if not wanted(t):
                    continue
                assign_(t, detached_value(t).to(target))
                if isinstance(t.grad, Tensor):
                    t.grad = t.grad.to(target)
                elif isinstance(t.grad, SparseRows):  # an embedding's gradient
                    g = t.grad
                    t.grad = SparseRows(g.indices if is_dtype else g.indices.to(target),
                                        g.rows.to(target), g.shape)

    def type(self, dst_type) -> "Module":
        """Cast every parameter and buffer to `dst_type` (a rill dtype or its name) in place,
        integer buffers included (as PyTorch's Module.type); returns self."""
        dtype = _dt.as_dtype(dst_type, "Module.type")
        self._convert(lambda t: t.dtype is not dtype, dtype)
        return self

    def float(self) -> "Module":
        """Floating parameters and buffers to float32, in place; returns self."""
        return self.to(_dt.float32)

    def double(self) -> "Module":
        """Floating parameters and buffers to float64, in place; returns self."""
        return self.to(_dt.float64)

    def half(self) -> "Module":
        """Floating parameters and buffers to float16, in place; returns self."""
        return self.to(_dt.float16)

    def bfloat16(self) -> "Module":
        """Floating parameters and buffers to bfloat16, in place; returns self."""
        return self.to(_dt.bfloat16)

    def cuda(self, device=None) -> "Module":
        """Move parameters and buffers to rill's gpu device (`gpu`, or `gpu:N` for an int
        `device`), in place; a rill.DeviceError says why when no gpu is available."""
        if device is None:
            target = "gpu"
        elif isinstance(device, int) and not isinstance(device, bool):
            target = f"gpu:{device}"
        else:
            target = device
        return self.to(as_device(target))  # checked before anything moves

    def cpu(self) -> "Module":
        """Move parameters and buffers to the cpu device, in place; returns self."""
        return self.to("cpu")

    # ---- looking up by dotted name ---------------------------------------------------------

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path `target` ('' is self), e.g. 'encoder.layers.0'."""
        module = self
        if target == "":
            return self
        walked = []
        for name in target.split("."):
            child = module._modules.get(name) if isinstance(module, Module) else None
            if child is None:
                where = ".".join(walked) or type(self).__name__
                raise ArgumentError(f"{where} has no submodule {name!r} (looking up "
                                    f"{target!r})", op="get_submodule")
            module = child
            walked.append(name)
        return module

    def _get_member(self, target: str, registry: str, what: str):
        path, _, name = target.rpartition(".")
        owner = self.get_submodule(path)
        value = getattr(owner, registry).get(name)
        if value is None:
            raise ArgumentError(f"{type(owner).__name__} at {path or 'the top'!r} has no "
                                f"{what} {name!r}", op=f"get_{what}")
        return value

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path `target`, e.g. 'encoder.layers.0.linear1.weight'."""
        return self._get_member(target, "_parameters", "parameter")

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path `target`, e.g. 'bn.running_mean'."""
        return self._get_member(target, "_buffers", "buffer")

    # ---- printing --------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr (its settings)."""
        return ""

    def __repr__(self) -> str:
        count = self.num_parameters()
        counted = f"  (params: {count:,})" if count else ""
        children = [(name, m) for name, m in self._modules.items() if m is not None]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()}){counted}"
        lines = [f"  {line}" for line in self.extra_repr().splitlines()]
        for name, child in children:
            text = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {text}")
        return f"{type(self).__name__}({counted}\n" + "\n".join(lines) + "\n)"

    def summary(self, example_input=None, show: bool = True, console=None):
        """A table of submodules: name, type, output shape (when `example_input` is given,
        which is run through the model; a tuple is passed as several arguments), parameter
        counts. Prints it (to a
        `rich.console.Console`, a new one on stdout by default) unless `show=False`; returns
        the `rich.table.Table`.

        >>> import rill
        >>> model = rill.nn.Sequential(rill.nn.Linear(4, 3), rill.nn.ReLU())
        >>> table = model.summary(rill.zeros(2, 4), show=False)
        >>> table.row_count, table.columns[2].header  # two layers and the total
        (3, 'Output shape')
        """
        from .summary import summary_table
        table = summary_table(self, example_input)
        if show:
            if console is None:
                from rich.console import Console
                console = Console()
            console.print(table)
        return table
