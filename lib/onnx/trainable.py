"""Which initializers of an ONNX model are weights to fine-tune (`load(..., trainable=...)`).

ONNX has only initializers: a layer's weight, a running mean, GELU's exponent 3.0 and a
causal mask are all the same kind of tensor. Training every floating-point one changes
constants the model relies on (a step on the exponent 3.0 sent a GPT-2 exported by torch
to NaN), so by default an initializer is trained only where the file says it is a weight:

1. rill's own exporter lists its buffers and constants in the model's metadata
   (export.BUFFERS_KEY, CONSTANTS_KEY): every other floating-point initializer is a
   Parameter of the exported model;
2. torch's exporter (torch.export based, the default since torch 2.9) writes the exported
   program's graph signature into the graph's metadata: its PARAMETER targets are weights,
   its BUFFER and CONSTANT_TENSOR targets never are. Its TorchScript exporter
   (`dynamo=False`) writes no signature but names the tensors it takes from the module's
   state_dict after their keys, and those it makes "onnx::MatMul_12" or
   "/attn/Constant_output_0": the former (but scalars) are weights;
3. otherwise the initializer's place in the graph says it: an input that holds weights in
   the op's definition (MatMul's and Gemm's operands, Conv's and ConvTranspose's W and B,
   a normalization's scale and bias, Gather's table, a recurrent op's W, R and B, PRelu's
   slope), reached directly or through ops that only move or cast it (Transpose, Reshape,
   Identity, ...), or a bias (a vector: one axis longer than 1) added to the output of
   MatMul, Gemm, Conv or Einsum (torch writes Linear as MatMul + Add). With torch's
   signature present, biases keep their names and this last rule is not used.

A 0-d initializer (a scalar) is never a weight, unless torch's signature names it a
PARAMETER.
"""
from __future__ import annotations

import re

from .errors import ONNXError, short

# The inputs that hold weights, by op type (in the default domain).
WEIGHT_INPUTS = {
    "MatMul": (0, 1), "Gemm": (0, 1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2),
    "LayerNormalization": (1, 2), "BatchNormalization": (1, 2),
    "InstanceNormalization": (1, 2), "GroupNormalization": (1, 2), "RMSNormalization": (1,),
    "Gather": (0,), "LSTM": (1, 2, 3), "GRU": (1, 2, 3), "RNN": (1, 2, 3), "PRelu": (1,),
    "Einsum": tuple(range(16)),
}
# Ops whose output is their input 0 moved, viewed or cast: a weight passes through them.
PASS_THROUGH = {"Transpose", "Reshape", "Identity", "Cast", "CastLike", "Squeeze",
                "Unsqueeze", "Flatten"}
# Ops after which an added vector is a bias.
BIASED = {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"}
TORCH_SIGNATURE = "pkg.torch.export.ExportedProgram.graph_signature"


def choose(trainable, model, floats: dict, fixed: set, statistics: set) -> set:
    """The ONNX names, among the floating-point initializers `floats` ({name: shape}), to
    make Parameters. `fixed` must stay constants and `statistics` buffers whatever is
    asked; `trainable` is None (the rules above), True, False, a collection of names or a
    predicate taking a name."""
    allowed = {n for n in floats if n not in fixed and n not in statistics}
    if trainable is None:
        return weights(model, floats) & allowed
    if trainable is True or trainable is False:
        return set(allowed) if trainable else set()
    if callable(trainable):
        return {n for n in allowed if _asked(trainable, n)}
    if isinstance(trainable, (str, bytes)) or not hasattr(trainable, "__iter__"):
        raise ONNXError(f"trainable must be None, True, False, a collection of initializer "
                        f"names or a function of a name, got {short(trainable)}; for one "
                        "name write {name!r}", op="load")
    names = set(trainable)
    unknown = sorted(str(n) for n in names - set(floats))
    if unknown:
        raise ONNXError(f"trainable names {', '.join(short(n) for n in unknown[:10])}, which "
                        "no floating-point initializer of the model is called (it has "
                        f"{len(floats)}: {', '.join(short(n) for n in sorted(floats)[:10])}"
                        f"{', ...' if len(floats) > 10 else ''})", op="load")
    held = sorted((names & fixed) | (names & statistics))
    if held:
        raise ONNXError(f"trainable names {', '.join(short(n) for n in held[:10])}: "
                        "BatchNormalization's running statistics and values that must be "
                        "known when the graph is traced (Resize's scales, constants of a rill "
                        "export) cannot be trained", op="load")
    return names


def _asked(predicate, name: str) -> bool:
    answer = predicate(name)
    if not isinstance(answer, bool):
        raise ONNXError(f"the trainable function returned {short(answer)} for {short(name)}; "
                        "it must return True or False", op="load")
    return answer


def weights(model, floats: dict) -> set:
    """The initializers, among `floats` ({name: shape}), the file marks as weights (the
    module docstring's rules)."""
    from .export import BUFFERS_KEY, CONSTANTS_KEY
    keys = {p.key: p.value for p in model.metadata_props}
    if BUFFERS_KEY in keys and CONSTANTS_KEY in keys:  # a rill export says it all
        named = {n for k in (BUFFERS_KEY, CONSTANTS_KEY) for n in keys[k].split(",") if n}
        return set(floats) - named
    parameters, held = _torch_signature(model.graph)
    signed = bool(parameters or held)
    if not signed and model.producer_name == "pytorch":  # torch's TorchScript exporter
        parameters = {n for n in floats if floats[n] and _state_dict_key(n)}
    # With torch's names a bias keeps its name; only folded copies of weights (a transposed
    # MatMul operand) need finding, and an added mask must not pass for a bias.
    placed = _by_place(model.graph, floats, biases=not parameters and not signed)
    return {n for n in placed - held if floats[n]} | (parameters & set(floats))


def _state_dict_key(name: str) -> bool:
    """Whether torch's TorchScript exporter took `name` from the module's state_dict: the
    tensors it creates are called "onnx::MatMul_12", "/attn/Constant_output_0" or "12"."""
    return not (name.startswith(("onnx::", "/")) or name.isdigit())


def _torch_signature(graph) -> tuple:
    """(PARAMETER targets, BUFFER and CONSTANT_TENSOR targets) of the graph signature
    torch's exporter records, or two empty sets."""
    text = next((p.value for p in graph.metadata_props if p.key == TORCH_SIGNATURE), "")
    parameters, held = set(), set()
    for kind, target in re.findall(r"^\s*\S+: ([A-Z_]+) target='([^']*)'", text, re.M):
        if kind == "PARAMETER":
            parameters.add(target)
        elif kind in ("BUFFER", "CONSTANT_TENSOR"):
            held.add(target)
    return parameters, held


def _by_place(graph, floats: dict, biases: bool) -> set:
    """Initializers (`floats`: {name: shape}) that reach a weight input, or (`biases`) are
    vectors added to a weight op's output."""
    consumers: dict = {}
    producers: dict = {}
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
        for name in node.output:
            producers[name] = node
    found = set()
    for name in floats:
        pending, seen = [name], set()
        while pending and name not in found:
            value = pending.pop()
            seen.add(value)
            for node, i in consumers.get(value, ()):
                if i in WEIGHT_INPUTS.get(node.op_type, ()) or \
                        (biases and _is_bias(node, i, producers, floats[name])):
                    found.add(name)
                    break
                if node.op_type in PASS_THROUGH and i == 0:
                    pending.extend(o for o in node.output if o and o not in seen)
    return found


def _is_bias(node, i, producers, shape) -> bool:
    """Whether an initializer of `shape`, input i of `node`, is a bias: a vector (one axis
    longer than 1) added to the output of MatMul, Gemm, Conv or Einsum. A mask has more."""
    if node.op_type != "Add" or len(node.input) != 2 or sum(d > 1 for d in shape) > 1:
        return False
    other = producers.get(node.input[1 - i])
    return other is not None and other.op_type in BIASED
