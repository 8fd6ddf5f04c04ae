"""Primitive: the one declaration of an op.

A primitive has a name, a shape/dtype rule (`infer`), a gradient rule written in rill ops
(`vjp`), an input normalization (`normalize`: scalars lifted, dtypes promoted), and kernels
registered per device kind from `rill.kernels`. `bind` is the only way to run one.
"""
from __future__ import annotations

from typing import Callable

from .attrs import attr_problems
from ..eager.bind import register_primitive
from ..errors import DeviceError


class Primitive:
    """One op, declared once.

    infer(*inputs, **attrs) -> (shape, dtype), or a list of them when `multiple_results`.
        Inputs are anything with .shape/.dtype/.device (eager tensors, graph values).
    vjp(g, out, *inputs, **attrs) -> one cotangent per input (None where there is none).
        `g` and `out` are tuples when `multiple_results`; `out` is None unless `save_output`.
        None for ops whose outputs carry no gradient (comparisons, argmax, ...).
    normalize(inputs) -> inputs as Tensors of the dtypes the kernel expects (or None: only
        Python scalars are lifted).
    device_attr: the op's result lives on attrs["device"] (creation ops, copies between
        devices); otherwise on the device all its inputs share.
    effect: None for a pure op; "random" for a draw (changes a generator: never merged or
        folded by graph passes), "check" for an op that may raise (kept even when unused).
    residuals(**attrs) -> how many trailing outputs are saved for the vjp only (control flow's
        per-iteration stacks): not differentiable, held by the tape until backward.
    attrs: {name: attribute type} (ops/attrs.py), the keyword-only parameters of `infer`;
        bind checks every call against it, loaders every saved node. None: not declared.
    cpu_only: why the op has no gpu kernel, for a primitive that is CPU-only by design (the
        LAPACK decompositions, fft); None for every op that must have one.
    required_attrs: the names in `attrs` whose infer parameter has no default.
    batch(prim, size, args, dims, attrs) -> (outs, out_dims): the batching rule `vmap` uses
        (ops/batching.py has the families): args are the inputs with their batch axis where
        dims says (None: not batched), size the batch's length. None: vmap loops over the
        batch (correct for every op, and said once).
    composite(*inputs, **attrs) -> the op's outputs (not its residuals) computed by other
        ops: for a fused op whose gradient kernel is not differentiable (the LSTMs). Under
        create_graph the reverse walk differentiates the composite instead of calling vjp
        (autodiff/backward.py: call_vjp), so the gradient can be differentiated again.
    cache_rule: whether bind looks the rule's answers up instead of asking it. True: in
        eager/rule_cache.py's cache and in the compiled bind's (kernels/native/dispatch.c,
        whose key also holds each attr's type, so a hit skips the attrs' check too).
        "compiled": in the compiled bind's only, for a rule cheaper than the Python lookup
        of its answer (a taped 10-element add, bench/dispatch.py: 2.39 -> 2.74 us with it;
        full 0.13 against 0.64 us, scaled_add 0.27 against 0.77, adam_update 0.92 against
        1.61) but not than the compiled one (x - y 0.87 -> 0.75 us, where 2.9 -> 2.3,
        layer_norm 6.4 -> 5.5). False: neither, for a rule that copies a shape (the unary
        elementwise family: log 0.97 -> 1.00 us with the compiled lookup).
    """

    __slots__ = ("name", "infer", "vjp", "normalize", "multiple_results", "save_output",
                 "device_attr", "effect", "residuals", "kernels", "attrs", "required_attrs",
                 "attr_checks", "cpu_only", "batch", "rule_cache", "typed_attrs", "composite",
                 "dispatch_cache", "__weakref__")

    def __init__(self, name: str, infer: Callable, vjp: Callable | None = None, *,
                 normalize: Callable | None = None, multiple_results: bool = False,
                 save_output: bool = False, device_attr: bool = False, effect: str | None = None,
                 residuals: Callable | None = None, attrs: dict | None = None,
                 cpu_only: str | None = None, batch: Callable | None = None,
                 cache_rule: bool | str = True, composite: Callable | None = None):
        self.name = name
        self.composite = composite
        self.batch = batch
        self.infer = infer
        self.vjp = vjp
        self.normalize = normalize
        self.multiple_results = multiple_results
        self.save_output = save_output
        self.device_attr = device_attr
        self.effect = effect
        self.residuals = residuals
        self.kernels: dict[str, Callable] = {}
        self.cpu_only = cpu_only
        self.attrs = None if attrs is None else dict(attrs)
        defaults = getattr(infer, "__kwdefaults__", None) or {}
        self.required_attrs = frozenset(k for k in self.attrs or () if k not in defaults)
        # Bound `check`s looked up once here: bind runs them on every call.
        self.attr_checks = None if attrs is None else {k: t.check for k, t in attrs.items()}
        # infer's results by inputs' shapes, dtypes, devices and attrs (eager/rule_cache.py),
        # when every attr's value can key it; typed_attrs are keyed by their type as well.
        keys = [t.cache_key for t in (attrs or {}).values()]
        if cache_rule is not True and cache_rule is not False and cache_rule != "compiled":
            raise ValueError(f"cache_rule must be True, False or 'compiled', got {cache_rule!r}")
        keyable = attrs is not None and None not in keys
        self.rule_cache = {} if cache_rule is True and keyable else None
        self.typed_attrs = tuple(k for k, t in (attrs or {}).items() if t.cache_key == "typed")
        # the compiled bind's answers for the same primitives, under keys that also hold each
        # attr's type, so that a hit needs no attr check either (kernels/native/dispatch.c)
        self.dispatch_cache = {} if cache_rule and keyable else None

    def __repr__(self) -> str:
        return f"Primitive({self.name})"

    def attr_problems(self, attrs: dict) -> list[tuple[str, str]]:
        """[(path, why)] for each attr of `attrs` that does not fit the declaration (bind's
        error path; ops/attrs.py: attr_problems)."""
        return attr_problems(self, attrs)

    def missing_kernel(self, kind: str):
        """The DeviceError for a device kind this op has no kernel for, with the way round."""
        why = f" ({self.cpu_only})" if self.cpu_only else ""
        return DeviceError(f"no {kind} kernel is registered for this op{why}; run it on the "
                           f"cpu: move its inputs with .to('cpu') and the result back",
                           op=self.name)


PRIMITIVES: dict[str, Primitive] = {}

# Complex gradients follow PyTorch: for a real loss L and complex z = x + iy, z.grad is
# dL/dx + i dL/dy (the conjugate Wirtinger derivative, doubled): for L = |z|^2, 2z.
# A vjp rule written as a holomorphic derivative, g * f'(z) (every arithmetic rule is),
# gives that convention when conjugated around: conj(rule(conj(g))) = g * conj(f'(z)).
# Rules for non-holomorphic ops (abs, real, imag, conj, sign, the real -> complex cast,
# fft's real transforms) are written in the convention already and are named here by the
# modules declaring them, as are the control-flow primitives, whose rules run the reverse
# walk over their bodies (autodiff/backward.py: call_vjp conjugates the others around), and
# custom_vjp's user rules (written in PyTorch's convention, as torch.autograd.Function's).
COMPLEX_RULES: set = {"scan", "while", "switch"}

register_primitive(Primitive)  # the compiled bind reads its slots (eager/bind.py)


def primitive(name: str, infer: Callable, vjp: Callable | None = None, **options) -> Primitive:
    """Declare and register a primitive under `name` (options: Primitive's keywords, among them
    `attrs={name: type}` from ops/attrs.py)."""
    from .promotion import lift
    options.setdefault("normalize", lift)
    if options["normalize"] is None:
        options["normalize"] = lift
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name!r} declared twice")
    prim = PRIMITIVES[name] = Primitive(name, infer, vjp, **options)
    return prim


def register_kernels(kind: str, table: dict[str, Callable]) -> None:
    """Attach kernels for one device kind, by primitive name (called from rill.kernels)."""
    for name, fn in table.items():
        if name not in PRIMITIVES:
            raise KeyError(f"kernel for unknown primitive {name!r}")
        PRIMITIVES[name].kernels[kind] = fn
