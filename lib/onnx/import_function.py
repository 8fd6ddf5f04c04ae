"""ONNX ops defined as functions, run through their function bodies.

The ONNX specification defines many operators (SwiGLU, RotaryEmbedding, LinearAttention,
the window functions, CenterCropPad, ...) by a function body: a small graph of simpler
ONNX ops, sometimes built for the node's attributes and input types (a "context-dependent"
function). Where rill has no direct translation of an op, its body from the onnx package's
schema (or the model's own local functions) is run node by node in a child scope, with
attribute references resolved from the calling node: the op's defined meaning, as any
ONNX backend without a dedicated kernel runs it.
"""
from __future__ import annotations

from .errors import ONNXError


def _schema(domain, op_type, opset):
    from onnx import defs
    try:
        return defs.get_schema(op_type, opset, domain)
    except Exception:  # noqa: BLE001 - no schema of that name, domain and version
        return None


def _body_version(schema, opset):
    """The newest function-body version of `schema` at `opset`, and whether it is
    context-dependent; None when it has none."""
    plain = [v for v in schema.function_opset_versions if v <= opset]
    context = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if not plain and not context:
        return None
    best = max(plain + context)
    return best, best not in plain


def has_body(domain, op_type, opsets, functions) -> bool:
    """Whether `op_type` of `domain` can run through a function body (a schema's, at the
    model's opset for that domain, or one of the model's local functions)."""
    if (domain, op_type) in functions:
        return True
    schema = _schema(domain, op_type, opsets.get(domain, 1))
    return schema is not None and _body_version(schema, opsets.get(domain, 1)) is not None


def _type_proto(x):
    from onnx import helper

    from .dtypes import onnx_type
    return helper.make_tensor_type_proto(onnx_type(x.dtype), list(x.shape))


def _body(run, node, ins):
    """(FunctionProto, the attributes with the schema's defaults filled in)."""
    from onnx import FunctionProto
    attrs = {a.name: a for a in node.attribute}
    local = run.functions.get((node.domain, node.op_type))
    if local is not None:
        return local, attrs
    opset = run.opsets.get(node.domain, 1)
    schema = _schema(node.domain, node.op_type, opset)
    found = None if schema is None else _body_version(schema, opset)
    if found is None:
        raise ONNXError(f"{node.op_type} has no translation and no function body at opset "
                        f"{opset}", op=node.op_type)
    version, context_dependent = found
    for name, spec in schema.attributes.items():  # defaults the body may refer to
        if name not in attrs and spec.default_value.name:
            attrs[name] = spec.default_value
    if context_dependent:
        from onnx import NodeProto
        full = NodeProto()
        full.CopyFrom(node)
        del full.attribute[:]
        full.attribute.extend(attrs.values())
        types = [_type_proto(x).SerializeToString() if x is not None else b"" for x in ins]
        text = schema.get_context_dependent_function_with_opset_version(
            version, full.SerializeToString(), types)
    else:
        text = schema.get_function_with_opset_version(version)
    function = FunctionProto()
    function.ParseFromString(text)
    if not function.node:
        raise ONNXError(f"{node.op_type}: the onnx package built no function body for this "
                        "node", op=node.op_type)
    return function, attrs


def _resolved(body_node, attrs, missing):
    """The body's node with attribute references replaced by the caller's attributes, and
    the function inputs the caller omitted (`missing`) read as omitted."""
    from onnx import NodeProto
    out = NodeProto()
    out.CopyFrom(body_node)
    del out.attribute[:]
    del out.input[:]
    out.input.extend("" if name in missing else name for name in body_node.input)
    for attr in body_node.attribute:
        if attr.ref_attr_name:
            if attr.ref_attr_name in attrs:  # an unset optional attribute is left out
                given = type(attr)()
                given.CopyFrom(attrs[attr.ref_attr_name])
                given.name = attr.name
                out.attribute.append(given)
        else:
            out.attribute.append(attr)
    return out


class _Nodes:
    """A node list in the shape Runner.graph reads."""

    def __init__(self, nodes):
        self.node = nodes


def run_function(run, node, ins, a):
    """Outputs of `node` computed by its function body in a child scope."""
    function, attrs = _body(run, node, ins)
    scope = run.child()
    scope.opsets = dict(run.opsets)
    for entry in function.opset_import:
        scope.opsets[entry.domain if entry.domain != "ai.onnx" else ""] = entry.version
    scope.opset = scope.opsets.get("", run.opset)
    missing = set(function.input[len(ins):])
    for name, given, value in zip(function.input, node.input, ins):
        if value is None:
            missing.add(name)
        else:
            scope.set(name, value, run.is_static(given))
    scope.graph(_Nodes([_resolved(n, attrs, missing) for n in function.node]))
    outs = []
    for name in function.output[:len(node.output)]:
        found = scope.values.get(name)
        outs.append(found)
    return outs
