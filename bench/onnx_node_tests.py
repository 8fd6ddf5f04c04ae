"""rill.onnx.load on the ONNX backend node tests: pass rate per op type.

The node tests are single-op models with inputs and expected outputs, defined in the onnx
wheel (onnx/backend/test/case/node/*.py; older wheels also ship them generated under
onnx/backend/test/data/node, which this script reads when present). A case counts when every
input and output is a tensor of a dtype rill has (bool, signed and unsigned ints, bfloat16,
float16, float32, float64); it passes when rill.onnx.load(model) called on the inputs gives
every expected output (same shape; values within the tolerance the case states, at least
rtol 1/64 / atol 1e-5 for bfloat16, 1e-3 / 1e-5 for float16 and 1e-4 / 1e-6 otherwise; NaN
where NaN is expected).

    python bench/onnx_node_tests.py              # summary per op type
    python bench/onnx_node_tests.py --failures   # and why each case failed
    python bench/onnx_node_tests.py --op Conv    # only the cases of ops whose name contains Conv
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import warnings

import numpy as np

SUPPORTED = {np.dtype(n) for n in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                   "uint16", "uint32", "uint64", "float16", "float32",
                                   "float64")}


def _bfloat16():
    """onnx's NumPy dtype for bfloat16 (ml_dtypes'): rill has the type, held in float32."""
    from onnx import TensorProto, helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16))


def cases():
    """(name, model, [(inputs, outputs)], rtol, atol) for every node test."""
    import onnx
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(folder):
        yield from _cases_on_disk(folder)
        return
    import onnx.backend.test.case.node as node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    from onnx import TensorProto, numpy_helper

    def array(x):  # some cases give TensorProtos (float16 bit patterns and the like)
        if isinstance(x, TensorProto):
            return numpy_helper.to_array(x)
        return x if isinstance(x, (list, dict)) else np.asarray(x)  # sequences: skipped
    for case in collected:
        sets = [([array(x) for x in ins], [array(y) for y in outs])
                for ins, outs in case.data_sets]
        yield case.name, case.model, sets, case.rtol, case.atol


def _cases_on_disk(folder):
    import glob
    import onnx
    from onnx import numpy_helper
    for name in sorted(os.listdir(folder)):
        model = onnx.load(os.path.join(folder, name, "model.onnx"))
        sets = []
        for data in sorted(glob.glob(os.path.join(folder, name, "test_data_set_*"))):
            def read(kind):
                found = []
                for path in sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")),
                                   key=lambda p: int(re.findall(r"_(\d+)\.pb", p)[0])):
                    tensor = onnx.TensorProto()
                    with open(path, "rb") as f:
                        tensor.ParseFromString(f.read())
                    found.append(numpy_helper.to_array(tensor))
                return found
            sets.append((read("input"), read("output")))
        yield name, model, sets, 1e-3, 1e-7


def rill_dtypes_only(model) -> bool:
    from onnx import helper
    for v in list(model.graph.input) + list(model.graph.output):
        if not v.type.HasField("tensor_type"):
            return False
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
        except Exception:  # noqa: BLE001 - strings, float8, 4-bit types
            return False
        if dtype not in SUPPORTED and dtype != _bfloat16():
            return False
    return True


def op_type_of(name, model, by_name) -> str:
    """The op a case tests: its single node's type; an `_expanded` case (the op's function
    body) counts for the op of the case it expands."""
    base = re.sub(r"_expanded.*$", "", name)
    other = by_name.get(base, model)
    nodes = other.graph.node
    return nodes[0].op_type if len(nodes) == 1 else nodes[-1].op_type


def check(got, want, rtol, atol) -> str | None:
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    # bfloat16: two ulps (1/64). The cases' expected outputs round every NumPy step to
    # bfloat16, sums included: on the Attention cases they are up to 0.95% from the exact
    # result, rill (float32 accumulation) up to 0.6%.
    floors = {np.dtype(np.float16): (1e-3, 1e-5), _bfloat16(): (1 / 64, 1e-5)}
    if want.dtype == _bfloat16():
        want = want.astype(np.float32)  # rill's bfloat16 tensors give float32 arrays too
        floors[want.dtype] = floors[_bfloat16()]
    if want.dtype.kind in "fc":
        floor_rtol, floor_atol = floors.get(want.dtype, (1e-4, 1e-6))
        ok = np.isclose(got.astype(np.float64), want.astype(np.float64),
                        rtol=max(rtol, floor_rtol), atol=max(atol, floor_atol), equal_nan=True)
        if not ok.all():
            return f"values differ (max abs {np.nanmax(np.abs(got - want.astype(got.dtype))):.3g})"
        return None
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    return None if np.array_equal(got, want) else "values differ"


def run_case(model, data_sets, rtol, atol, fix_integers=False, capture=True) -> str | None:
    """None when the case passes, else why not. With `fix_integers`, integer and one-element
    inputs, and float inputs that give scales or regions (rill.onnx.load.trace_time_inputs),
    are handed to load(constants=...) (a rill graph must know shapes, axes and counts when it
    is traced; the node tests pass them as inputs where real models hold initializers)."""
    import rill.onnx
    from rill.onnx.dtypes import as_rill  # bfloat16 arrays as bfloat16 tensors
    from rill.onnx.load import trace_time_inputs
    try:
        names = [i.name for i in model.graph.input]
        scales = trace_time_inputs(model.graph)
        for inputs, outputs in data_sets:
            fixed = {n: np.asarray(x) for n, x in zip(names, inputs)
                     if fix_integers and (np.asarray(x).dtype.kind in "iu" or
                                          np.asarray(x).size == 1 or n in scales)}
            fn = rill.onnx.load(model, constants=fixed, capture=capture)
            args = [as_rill(np.asarray(x)) for n, x in zip(names, inputs) if n not in fixed]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = fn(*args)
            result = result if isinstance(result, tuple) else (result,)
            for got, want in zip(result, outputs):
                why = check(got.numpy(), np.asarray(want), rtol, atol)
                if why:
                    return why
    except Exception as e:  # noqa: BLE001 - every failure is a result here
        return f"{type(e).__name__}: {str(e)}"  # whole: main() matches phrases anywhere in it
    return None


# Outside the deep-learning subset: classic ML (ai.onnx.ml), text and image decoding,
# optional values, and ops whose expected outputs are random draws no other generator
# reproduces. Every other case of rill's dtypes is in it.
NOT_DEEP_LEARNING = re.compile(r"^(ai\.onnx\.ml\.|ImageDecoder$|TfIdfVectorizer$|String|"
                               r"RegexFullMatch$|Optional|Bernoulli$|Random|Multinomial$)")


def op_name(model, op) -> str:
    domains = {n.domain for n in model.graph.node if n.op_type == op}
    domain = next(iter(domains), "")
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="print why each case failed")
    parser.add_argument("--op", default="", help="only op types whose name contains this")
    args = parser.parse_args(argv)
    all_cases = list(cases())
    by_name = {name: model for name, model, *_ in all_cases}
    per_op = collections.defaultdict(lambda: [0, 0, 0])  # plain, with options, cases
    skipped = fixed = eager = 0
    failures = []
    for name, model, data_sets, rtol, atol in all_cases:
        if not rill_dtypes_only(model):
            skipped += 1
            continue
        op = op_type_of(name, model, by_name)
        op = op_name(by_name.get(re.sub(r"_expanded.*$", "", name), model), op)
        if args.op and args.op not in op:
            continue
        why = plain = run_case(model, data_sets, rtol, atol)
        if why is not None and "must be known when the graph is traced" in why:
            why = run_case(model, data_sets, rtol, atol, fix_integers=True)
            fixed += why is None
        if why is not None and "load with capture=False" in why:  # data-dependent shapes
            why = run_case(model, data_sets, rtol, atol, capture=False)
            eager += why is None
        why = why if why is None else why.splitlines()[0][:160]
        per_op[op][2] += 1
        per_op[op][0] += plain is None
        per_op[op][1] += why is None
        if why is not None:
            failures.append((op, name, why))
    print(f"{'op type':<28} {'plain':>6} {'w/opts':>7} {'cases':>6}")
    for op in sorted(per_op):
        p, o, t = per_op[op]
        print(f"{op:<28} {p:>6} {o:>7} {t:>6}{'' if p == t else '   <'}")

    def summary(label, ops):
        plain = sum(per_op[op][0] for op in ops)
        opts = sum(per_op[op][1] for op in ops)
        total = sum(per_op[op][2] for op in ops)
        pct = 100 / max(total, 1)
        print(f"{label}: plain load {plain} of {total} ({plain * pct:.1f}%); with options "
              f"{opts} ({opts * pct:.1f}%); {len(ops)} op types, "
              f"{sum(per_op[op][0] == per_op[op][2] for op in ops)} pass every case plainly")
    print()
    summary("every case with rill's dtypes", list(per_op))
    summary("deep-learning subset", [op for op in per_op if not NOT_DEEP_LEARNING.match(op)])
    print(f"{skipped} cases skipped (dtypes or value kinds rill lacks); of the cases passing "
          f"only with options, {fixed} had integer inputs fixed as constants, {eager} ran "
          "eagerly (load(capture=False))")
    if args.failures:
        for op, name, why in failures:
            print(f"{op:<24} {name:<60} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
