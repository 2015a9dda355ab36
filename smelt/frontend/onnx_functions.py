"""ONNX function bodies: a node whose op onnx defines as a function (HardSigmoid,
GreaterOrEqual, Celu, Range, Attention, ...) or that calls a model-local function is
replaced by the body's nodes, renamed into the caller's scope.

The body comes from onnx itself (`OpSchema.function_body`, or the context-dependent
builder that sees the node's attributes and input types), never from a hand-written
copy; smelt then imports the body's nodes with its own handlers, recursively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import onnx
from onnx import defs, helper

from smelt.dialects.symbolic import Dim
from smelt.frontend.onnx_validate import DEFAULT_DOMAINS


@dataclass
class Body:
    """The nodes that replace one call, and the default-domain opset they use."""

    nodes: list[onnx.NodeProto]
    opset: int


def has_function(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether onnx defines `op_type` of `domain` at `opset` as a function."""
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except defs.SchemaError:
        return False
    return schema.has_function or schema.has_context_dependent_function


def schema_function(
    node: onnx.NodeProto, opset: int, input_types: Sequence[onnx.TypeProto | None]
) -> onnx.FunctionProto | None:
    """onnx's function body of `node` at `opset` (of the node's domain: the default
    one, or another that onnx defines schemas for, such as ai.onnx.preview), if it
    has one (`input_types`: one per node input, None for an absent optional one).

    A schema may carry bodies for several opsets (the body's own ops change with
    the opset); the newest one not newer than the model's is used, else the oldest.
    """
    domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
    try:
        schema = defs.get_schema(node.op_type, opset, domain)
    except defs.SchemaError:
        return None
    if schema.has_function:
        version = _pick(schema.function_opset_versions, opset)
        return _proto(schema.get_function_with_opset_version(version))
    if schema.has_context_dependent_function:
        version = _pick(schema.context_dependent_function_opset_versions, opset)
        types = [(t or onnx.TypeProto()).SerializeToString() for t in input_types]
        raw = schema.get_context_dependent_function_with_opset_version(
            version, node.SerializeToString(), types
        )
        return _proto(raw)
    return None


def _proto(body: onnx.FunctionProto | bytes | None) -> onnx.FunctionProto | None:
    """onnx's bindings return some bodies serialized."""
    if isinstance(body, bytes):
        return onnx.FunctionProto.FromString(body) if body else None
    return body


def _pick(versions: Sequence[int], opset: int) -> int:
    older = [v for v in versions if v <= opset]
    return max(older) if older else min(versions)


def expand(
    node: onnx.NodeProto,
    function: onnx.FunctionProto,
    defaults: dict[str, onnx.AttributeProto],
    opset: int,
    prefix: str,
    caller: str | None = None,
) -> Body:
    """`function`'s nodes with formal inputs and outputs bound to `node`'s, every
    inner value renamed under `prefix`, each inner node named `caller/inner`
    (`caller`: the node's name, or its op type), and attribute references resolved
    from the node (or `defaults`); an unset reference without a default is dropped,
    as ONNX function semantics say."""
    caller = caller or node.name or node.op_type
    names = dict(zip(function.input, node.input))
    names.update(zip(function.output, node.output))
    for formal in function.input[len(node.input) :]:
        names[formal] = ""  # an optional input the caller left out
    given = {a.name: a for a in node.attribute}
    for a in function.attribute_proto:
        defaults.setdefault(a.name, a)

    def rename(name: str) -> str:
        if not name:
            return ""
        if name not in names:
            names[name] = f"{prefix}/{name}"
        return names[name]

    nodes = []
    for inner in function.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.input[:] = [rename(n) for n in inner.input]
        copy.output[:] = [rename(n) for n in inner.output]
        copy.name = f"{caller}/{inner.name or inner.op_type}"
        del copy.attribute[:]
        for a in inner.attribute:
            resolved = _resolve(a, given, defaults)
            if resolved is not None:
                copy.attribute.append(resolved)
        nodes.append(copy)
    # a subgraph (If branch, Loop body) sees the body's values by name: rename its
    # references too, once every name of the body is known
    for copy in nodes:
        _rename_subgraphs(copy, names)
    body_opset = next(
        (o.version for o in function.opset_import if o.domain in DEFAULT_DOMAINS),
        opset,
    )
    return Body(nodes, body_opset)


def rename_subgraph(
    nodes: Sequence[onnx.NodeProto], names: dict[str, str], prefix: str
) -> list[onnx.NodeProto]:
    """Copies of a subgraph's `nodes` (an If branch, a Loop or Scan body) with
    every value they define renamed under `prefix`, the names in `names` (the
    subgraph's formal inputs and initializers) renamed as it says, and references
    to outer values left as they are. `names` gains the new names."""
    for n in nodes:
        for out in n.output:
            if out and out not in names:
                names[out] = f"{prefix}/{out}"
    copies = []
    for inner in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.input[:] = [names.get(n, n) for n in inner.input]
        copy.output[:] = [names.get(n, n) for n in inner.output]
        copy.name = f"{prefix}/{inner.name or inner.op_type}"
        _rename_subgraphs(copy, names)
        copies.append(copy)
    return copies


def _rename_subgraphs(node: onnx.NodeProto, names: dict[str, str]) -> None:
    """Renames, in place, the references of `node`'s subgraph attributes to the
    values that `names` renames (a subgraph's own definitions shadow them)."""
    for a in node.attribute:
        for graph in [a.g] if a.HasField("g") else list(a.graphs):
            _rename_graph(graph, names)


def _rename_graph(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    own = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    own |= {o for n in graph.node for o in n.output}
    visible = {k: v for k, v in names.items() if k not in own}
    if not visible:
        return
    for n in graph.node:
        n.input[:] = [visible.get(i, i) for i in n.input]
        _rename_subgraphs(n, visible)
    for o in graph.output:
        o.name = visible.get(o.name, o.name)


def references(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every value name `nodes` read, including from inside their subgraphs."""
    out: set[str] = set()
    for n in nodes:
        out.update(n.input)
        for a in n.attribute:
            for graph in [a.g] if a.HasField("g") else list(a.graphs):
                out |= references(graph.node)
                out.update(o.name for o in graph.output)
    return out


def _resolve(
    attr: onnx.AttributeProto,
    given: dict[str, onnx.AttributeProto],
    defaults: dict[str, onnx.AttributeProto],
) -> onnx.AttributeProto | None:
    if not attr.ref_attr_name:
        return attr
    source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
    if source is None:
        return None
    out = onnx.AttributeProto()
    out.CopyFrom(source)
    out.name = attr.name
    return out


def schema_defaults(
    op_type: str, opset: int, domain: str = ""
) -> dict[str, onnx.AttributeProto]:
    """The default attribute values of `op_type`'s schema, by name."""
    schema = defs.get_schema(op_type, opset, domain)
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value.type != onnx.AttributeProto.UNDEFINED:
            value = onnx.AttributeProto()
            value.CopyFrom(a.default_value)
            value.name = name
            out[name] = value
    return out


def tensor_type(elem: int, shape: Sequence[int]) -> onnx.TypeProto:
    """The TypeProto of a tensor; a symbolic dim (`symbolic.Dim`, #34) is written
    as a dim_param of its text, so function bodies and onnx's inference see it."""
    dims = [str(d) if isinstance(d, Dim) else d for d in shape]
    return helper.make_tensor_type_proto(elem, dims)
