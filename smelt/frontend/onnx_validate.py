"""Structural checks of an ONNX graph before import: what onnxruntime refuses,
smelt refuses too, with every problem named at once (instead of answering with
the last of two definitions, ignoring an attribute, or failing deep in a pass).

* names are valid UTF-8;
* every value is defined once (graph inputs, initializers, node outputs); an
  initializer may share a graph input's name (its default value, as in ONNX);
* the model imports an opset, and one of the default domain that onnx knows
  where it uses that domain's ops (without one onnx's checker refuses the model
  and onnxruntime runs it: the message says so); its ir_version is not newer
  than onnx's, and the graph has outputs. A model whose ops are all of other
  domains (ai.onnx.ml, ai.onnx.preview.training) passes: the importer names
  the ops it lacks;
* each node's op exists at the model's opset (but onnxruntime's own
  ORT_DEFAULT_DOMAIN ops); its attributes exist in the op's schema, with the
  schema's type, required ones present, 0/1 flags 0 or 1; its input and output
  counts fit the schema; required inputs are not empty (these checks of one
  node are in `onnx_validate_nodes`);
* inputs that the schema binds to one type parameter have one element type, where
  the types are known (graph inputs, initializers, value_info);
* windows (Conv, pools): pads not negative, strides, dilations and kernel sizes
  positive; a pool's pads smaller than its kernel;
* counts positive (LRN's size, a conv's group, DepthToSpace's blocksize, ...),
  a normalization's epsilon not negative, Transpose's perm a permutation.

Checks that need the input shapes (a perm's length, a kernel that must fit its
input) are the handlers' (`NodeContext.invalid`).
"""

from __future__ import annotations

import re

import onnx
from onnx import defs, external_data_helper, helper

from smelt.errors import InvalidModel
from smelt.frontend.onnx_load import graph_tensors
from smelt.frontend.onnx_validate_nodes import (
    ORT_DEFAULT_DOMAIN,
    ORT_RUNS,
    WINDOW_OPS,
    against_schema,
    meaning_problems,
    window_problems,
)

DEFAULT_DOMAINS = ("", "ai.onnx")


def label(node: onnx.NodeProto, index: int) -> str:
    """How messages name a node: its name, or `op_type#index` when it has none."""
    if not node.op_type:
        return f"node #{index} (empty op_type)"
    op = node.op_type if node.op_type.isprintable() else repr(node.op_type)
    if node.name:
        return f"{op} '{node.name}'"
    return f"{op}#{index}"


FULL_CHECK_LIMIT = 1 << 30  # onnx's checker takes a ModelProto below 2 GB only


def validate(model: onnx.ModelProto) -> None:
    """Raises one SmeltError listing every structural problem of `model`."""
    problems = _text(model)
    if problems:  # what follows reads names as text
        _raise(problems)
    problems = _opset(model) + _definitions(model.graph)
    opset = next(
        (o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 0
    )
    imported = any(o.domain in DEFAULT_DOMAINS for o in model.opset_import)
    if imported and not 1 <= opset <= defs.onnx_opset_version():
        problems.append(
            f"the model imports opset {opset} of the default ONNX domain; this onnx "
            f"knows opsets 1 to {defs.onnx_opset_version()} (opset_import)"
        )
        opset = 0
    if model.ir_version > onnx.IR_VERSION:
        problems.append(
            f"ir_version {model.ir_version} is newer than this onnx reads "
            f"(up to {onnx.IR_VERSION})"
        )
    if not model.graph.output:
        problems.append("the graph declares no outputs (graph.output is empty)")
    known = _element_types(model.graph)
    for index, node in enumerate(model.graph.node):
        where = label(node, index)
        if node.domain in DEFAULT_DOMAINS and opset:
            problems += [f"{where}: {p}" for p in against_schema(node, opset, known)]
        if node.op_type in WINDOW_OPS:
            problems += [f"{where}: {p}" for p in window_problems(node)]
        if node.domain in DEFAULT_DOMAINS:
            problems += [f"{where}: {p}" for p in meaning_problems(node)]
    if problems:
        _raise(problems)


def _weights_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """`model`, or a slim copy whose weights became typed graph inputs.

    Moved: external initializers (the checker reads external data relative to
    the process's folder when given a ModelProto, and smelt leaves the data on
    disk until the import reads it) and large float initializers (the checker
    serializes the whole model: seconds for a few hundred MB). As graph inputs
    of the same type and shape the weights check and infer alike; integer
    tensors and small ones stay, so no shape-deciding value is lost. None when
    an external tensor lies elsewhere (a node attribute or a subgraph): the full
    check is then skipped, smelt's own checks having run."""
    graph = model.graph
    moved = [t for t in graph.initializer if _is_weight(t)]
    if not moved:
        return model
    names = {t.name for t in moved}
    slim = _copy_fields(graph, onnx.GraphProto(), skip="initializer")
    slim.initializer.extend(t for t in graph.initializer if t.name not in names)
    listed = {i.name for i in slim.input}
    slim.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in moved if t.name not in listed
    )  # fmt: skip
    copy = _copy_fields(model, onnx.ModelProto(), skip="graph")
    copy.graph.CopyFrom(slim)
    nested = any(
        external_data_helper.uses_external_data(t) for t in graph_tensors(slim)
    )
    return None if nested else copy


def _copy_fields(source, target, skip: str):
    """`target` given every field of message `source` but `skip` (copied)."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(target, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)
    return target


_FLOATS = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
}


def _is_weight(t: onnx.TensorProto) -> bool:
    if external_data_helper.uses_external_data(t):
        return True
    count = 1
    for d in t.dims:
        count *= d
    return t.data_type in _FLOATS and count > 4096


def _with_output_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy whose graph outputs without a type or shape got their
    inferred ones: the checker requires both, onnxruntime (and smelt) infer them."""
    def untyped(o: onnx.ValueInfoProto) -> bool:
        t = o.type
        return not t.HasField("tensor_type") or not t.tensor_type.HasField("shape")

    if not any(untyped(o) for o in model.graph.output):
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (the full check reports the problem)
        return model
    # inferred types of graph outputs land in graph.output itself
    known = {v.name: v for v in inferred.graph.value_info}
    known |= {v.name: v for v in inferred.graph.output if not untyped(v)}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for out in copy.graph.output:
        if untyped(out) and out.name in known:
            out.type.CopyFrom(known[out.name].type)
    return copy


def _stft_onesided(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy whose main-graph STFT nodes spell out `onesided`: the
    schema's default is 1 (onnx's reference and onnxruntime use it), but onnx's
    shape inference reads an absent onesided as 0 and rejects the right shape."""
    if not any(
        n.op_type == "STFT" and n.domain in DEFAULT_DOMAINS
        and all(a.name != "onesided" for a in n.attribute)
        for n in model.graph.node
    ):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for n in copy.graph.node:
        if n.op_type == "STFT" and n.domain in DEFAULT_DOMAINS:
            if all(a.name != "onesided" for a in n.attribute):
                n.attribute.append(helper.make_attribute("onesided", 1))
    return copy


ORT_DOMAIN = "ai.onnxruntime.default"  # where the checker leaves them unchecked


def _ort_ops_apart(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy whose default-domain nodes of onnxruntime's own ops
    (ORT_DEFAULT_DOMAIN) without an onnx schema at the model's opset are moved
    to a domain of their own: the checker would refuse them (no such op),
    onnxruntime runs them. The rest is checked as before."""
    opset = next(
        (o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 0
    )

    def foreign(node: onnx.NodeProto) -> bool:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in ORT_DEFAULT_DOMAIN:
            return False
        try:
            defs.get_schema(node.op_type, opset, "")
        except defs.SchemaError:
            return True
        return False

    if not any(foreign(n) for n in _all_nodes(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in _all_nodes(copy):
        if foreign(node):
            node.domain = ORT_DOMAIN
    copy.opset_import.append(helper.make_opsetid(ORT_DOMAIN, 1))
    return copy


# Formalities the checker insists on and onnxruntime does not (nor smelt, whose
# import has succeeded by now): every graph input and output typed and shaped
# (runtimes infer them), and before IR version 4 every initializer listed as a
# graph input (the onnx package's own light_densenet121 with new weights).
_INFERRED_BY_RUNTIMES = (
    "Field 'shape' of 'type' is required but missing",
    "Field 'type' of 'value_info' is required but missing",
)
_IR3_INITIALIZER = "in initializer but not in graph input"


def full_check(model: onnx.ModelProto) -> None:
    """onnx's own checker with strict shape inference must accept `model` (run
    after smelt's import, whose messages name nodes better)."""
    model = _weights_as_inputs(model)
    if model is None:
        return  # external tensors in subgraphs or attributes: see _weights_as_inputs
    if model.ByteSize() > FULL_CHECK_LIMIT:
        return  # too large for the checker's in-memory form; ours above still ran
    try:
        checked = _with_output_types(_stft_onesided(_ort_ops_apart(model)))
        onnx.checker.check_model(checked, full_check=True)
    except Exception as e:  # noqa: BLE001 (the checker's errors have no common base)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if first.startswith(_INFERRED_BY_RUNTIMES) or _IR3_INITIALIZER in first:
            return
        raise InvalidModel(
            f"the model is not valid ONNX{_checker_site(model, first)}: onnx's "
            f"checker (full_check) says: {first} (check_model=False / "
            "--no-check-model skips this check)"
        ) from None


_CHECKER_NODE = re.compile(r"\(op_type:([^,)]+)(?:, node name: ([^)]*))?\)")


def _checker_site(model: onnx.ModelProto, message: str) -> str:
    """Where in the main graph a checker message points: " at NODE" (and the
    outputs whose declared types the inferred ones contradict), or ""."""
    match = _CHECKER_NODE.search(message)
    if match is None:
        return ""
    op, name = match[1].strip(), match[2]
    found = [
        (i, n) for i, n in enumerate(model.graph.node)
        if n.op_type == op and (not name or n.name == name)
    ]  # fmt: skip
    if not found:
        return ""  # inside a subgraph or a function: the checker's text says
    where = ", ".join(label(n, i) for i, n in found[:3])
    if len(found) > 1:
        where = f"one of {where}" + (", …" if len(found) > 3 else "")
    if "existing shape" not in message and "existing type" not in message:
        return f" at {where}"
    graph = model.graph
    declared = {v.name for v in [*graph.output, *graph.value_info, *graph.input]}
    outputs = [o for _, n in found for o in n.output if o in declared]
    if not outputs:
        return f" at {where}"
    names = ", ".join(f"'{o}'" for o in outputs[:3])
    return f" at {where}: the declared type of {names} contradicts what it computes"


# A problem that onnx's checker reports and onnxruntime 1.32 runs anyway: it is
# still refused (which opset smelt should read the ops at is not said), but the
# message claims no refusal of onnxruntime's (test_other_domains checks both).
CHECKER_ONLY = f"onnx's checker refuses it; {ORT_RUNS}"


def _raise(problems: list[str]) -> None:
    lines = "\n".join(f"  - {p}" for p in problems)
    # the problems not marked ORT_RUNS are ones onnxruntime refuses, at load or
    # at run (test_onnx_validate's cases, checked against it)
    also = "; onnxruntime refuses it too"
    if any(ORT_RUNS in p for p in problems):
        also = ""
    raise InvalidModel(
        f"the model is not valid ONNX ({len(problems)} problem"
        f"{'s' if len(problems) > 1 else ''}{also}):\n{lines}"
    )


def _text(model: onnx.ModelProto) -> list[str]:
    """Names that are not valid UTF-8 (protobuf hands them over as bytes)."""
    graph = model.graph
    problems = []
    for index, node in enumerate(graph.node):
        fields = [node.op_type, node.name, node.domain, *node.input, *node.output]
        fields += [a.name for a in node.attribute]
        if any(isinstance(f, bytes) for f in fields):
            op = node.op_type if isinstance(node.op_type, str) else "?"
            problems.append(f"node #{index} ({op}): a name is not valid UTF-8")
    values = [*graph.input, *graph.output, *graph.initializer, *graph.value_info]
    for value in values:
        if isinstance(value.name, bytes):
            problems.append(f"tensor name {value.name!r} is not valid UTF-8")
    for o in model.opset_import:
        if isinstance(o.domain, bytes):
            problems.append(f"opset_import domain {o.domain!r} is not valid UTF-8")
    return problems


def _opset(model: onnx.ModelProto) -> list[str]:
    """No opset imported at all (onnxruntime refuses that too), or ops of the
    default domain without an opset of it. A model whose ops are all of other
    domains (ai.onnx.ml, ai.onnx.preview.training, com.microsoft) needs none."""
    if not model.opset_import:
        return ["the model imports no opset at all (opset_import is empty)"]
    if any(o.domain in DEFAULT_DOMAINS for o in model.opset_import):
        return []
    used = sorted({n.op_type for n in _all_nodes(model) if n.domain in DEFAULT_DOMAINS})
    if not used:
        return []
    return [
        f"it uses ops of the default ONNX domain ({', '.join(used[:5])}) but imports "
        "no opset of that domain (opset_import), so which version of each op is "
        f"meant is not said ({CHECKER_ONLY} at a version of its choosing): add "
        "the default domain's opset to opset_import"
    ]


def _all_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes of the main graph, its subgraphs and the model's functions."""
    nodes: list[onnx.NodeProto] = []
    pending = [list(model.graph.node), *(list(f.node) for f in model.functions)]
    while pending:
        for node in pending.pop():
            nodes.append(node)
            for attr in node.attribute:
                pending += [list(g.node) for g in [attr.g, *attr.graphs] if g.node]
    return nodes


def _definitions(graph: onnx.GraphProto) -> list[str]:
    problems = []
    inputs: set[str] = set()
    for value in graph.input:
        if value.name in inputs:
            problems.append(f"graph input '{value.name}' is declared twice")
        inputs.add(value.name)
    initializers: set[str] = set()
    for tensor in graph.initializer:
        if tensor.name in initializers:
            problems.append(f"initializer '{tensor.name}' is defined twice")
        initializers.add(tensor.name)
    defined = inputs | initializers
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in defined:
                problems.append(
                    f"{label(node, index)}: output '{name}' is already defined "
                    "(by a graph input, an initializer or an earlier node)"
                )
            defined.add(name)
    return problems


def _element_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Element types that the graph states: inputs, value_info, initializers."""
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in [*graph.input, *graph.value_info]
        if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type
    }
    types.update((t.name, t.data_type) for t in graph.initializer)
    valid = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    return {name: t for name, t in types.items() if t in valid}
