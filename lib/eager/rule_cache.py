"""Shape/dtype rule results, remembered per primitive.

A rule (`prim.infer`) is a function of its inputs' shapes, dtypes and devices, its attrs, and
the default float dtype (which a rule may give int inputs: dtypes.to_float). A training step asks the
same questions every time, and the answers cost more Python than the kernels of small ops
(2.7 ms of a small GPT's eager step, 5 us a matmul), so bind looks them up here first.

Only primitives whose every attr type can key a cache have one (ops/attrs.py, `cache_key`):
an attr that takes 1 and 1.0 (a float) is keyed by its type too, and one whose values are
not known to be faithful keys (a graph, an index key) leaves its primitive uncached. A rule
that raises is not remembered, so bad input fails as before, named, every time.

With RILL_CHECK_KERNELS set (the test suite sets it) every remembered answer is computed
again and compared, so a rule that reads anything else fails the suite instead of being
answered from the cache.
"""
from __future__ import annotations

from .. import dtypes as _dt
from .interpreter import CHECK_KERNELS

MAX_ENTRIES = 256  # per primitive; a program that keeps making new shapes starts over


def inferred(prim, args, attrs):
    """prim.infer(*args, **attrs), from the cache when it was asked before."""
    cache = prim.rule_cache
    if cache is None:
        return prim.infer(*args, **attrs)
    try:
        n = len(args)
        if n == 1:
            a = args[0]
            signature = (a.shape, a.dtype, a.device)
        elif n == 2:
            a, b = args
            signature = (a.shape, a.dtype, a.device, b.shape, b.dtype, b.device)
        else:
            signature = tuple([(a.shape, a.dtype, a.device) for a in args])
        key = (signature, tuple(attrs.items()) if attrs else None, _dt.default_float)
        if prim.typed_attrs:
            key += tuple([type(attrs.get(name)) for name in prim.typed_attrs])
        found = cache.get(key)
    except (TypeError, AttributeError):  # an unhashable value (a list shape), a non-tensor
        return prim.infer(*args, **attrs)
    if found is None:
        found = prim.infer(*args, **attrs)
        if len(cache) >= MAX_ENTRIES:
            cache.clear()
        cache[key] = found
    elif CHECK_KERNELS:
        _check(prim, args, attrs, found)
    return found


def _check(prim, args, attrs, found) -> None:
    fresh = prim.infer(*args, **attrs)
    if fresh != found:
        raise AssertionError(f"{prim.name}: its shape/dtype rule gave {fresh}, but {found} was "
                             "remembered for the same shapes, dtypes, devices and attrs: the "
                             "rule reads something else, so its primitive cannot be cached")
