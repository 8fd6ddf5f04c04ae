"""The op table's cases and what every test of it needs to feed them: inputs made from an
op's shapes, the positions differentiated, a scalar loss of outputs and cotangents. Shared by
ops/test_ops.py, the func transforms' tests and the gpu tests."""
from __future__ import annotations

import numpy as np
import pytest

import rill

from ops_table import OPS
from ops_table_nn import NN_OPS

OPS = OPS + NN_OPS  # every primitive's cases: the core table, then nn's

CASES = [pytest.param(op, i, id=f"{op.name}-{i}") for op in OPS for i in range(len(op.shapes))]
TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}


def make_inputs(op, shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in shapes:
        a = spec(rng) if callable(spec) else rng.uniform(*op.domain, size=spec)
        arrays.append(np.asarray(a))
    return arrays


def as_tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def diff_positions(op, arrays):
    return [i for i, a in enumerate(arrays) if is_float(a) and i not in op.nondiff_inputs]


def rill_inputs(arrays, dtype=None):
    return [rill.tensor(a, dtype=dtype if is_float(a) else None) for a in arrays]


def scalar_loss(outs, cotangents):
    total = None
    for o, c in zip(outs, cotangents):
        if c is None:
            continue
        term = (o * rill.tensor(c)).sum()
        total = term if total is None else total + term
    return total


def cotangents_for(outs, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=o.shape) if o.dtype.is_floating else None for o in outs]
