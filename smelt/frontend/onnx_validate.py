"""Structural checks of an ONNX graph before import: what onnxruntime refuses,
smelt refuses too, with every problem named at once (instead of answering with
the last of two definitions, ignoring an attribute, or failing deep in a pass).

* names are valid UTF-8;
* every value is defined once (graph inputs, initializers, node outputs); an
  initializer may share a graph input's name (its default value, as in ONNX);
* the model imports an opset of the default domain that onnx knows, its
  ir_version is not newer than onnx's, and the graph has outputs;
* each node's op exists at the model's opset; its attributes exist in the op's
  schema, with the schema's type, required ones present, 0/1 flags 0 or 1; its
  input and output counts fit the schema; required inputs are not empty;
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

DEFAULT_DOMAINS = ("", "ai.onnx")
# INT attributes that ONNX defines as 0 or 1 (onnxruntime reads other values its
# own way: keepdims=-1 keeps no dims there, smelt would keep them)
FLAGS = {
    "keepdims", "noop_with_empty_axes", "transA", "transB", "ceil_mode",
    "count_include_pad", "select_last_index", "exclusive", "reverse", "largest",
    "sorted", "storage_order", "detect_negative", "detect_positive", "allowzero",
    "upper",
}  # fmt: skip
WINDOW_OPS = {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger",
    "QLinearConv", "MaxUnpool",
}  # fmt: skip


POOL_OPS = {"MaxPool", "AveragePool", "LpPool"}  # pads < kernel (onnxruntime's rule)
# INT attributes that count something: 0 or less is meaningless (onnxruntime
# refuses each; smelt ran LRN size 0 and returned numbers)
POSITIVE = {
    "LRN": ("size",), "DepthToSpace": ("blocksize",), "SpaceToDepth": ("blocksize",),
    "Conv": ("group",), "ConvTranspose": ("group",), "ConvInteger": ("group",),
    "QLinearConv": ("group",), "DeformConv": ("group", "offset_group"),
    "GroupNormalization": ("num_groups",), "Split": ("num_outputs",),
}  # fmt: skip
# the epsilon a normalization adds to the variance before its square root: a
# negative one is no guard against division by zero (the variance minus it can
# be 0 or negative: infinities and NaN, which onnxruntime returns)
EPSILON_OPS = {
    "BatchNormalization", "InstanceNormalization", "LayerNormalization",
    "GroupNormalization", "RMSNormalization",
}  # fmt: skip


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
    if _opset(model) == [] and not 1 <= opset <= defs.onnx_opset_version():
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
            problems += [f"{where}: {p}" for p in _against_schema(node, opset, known)]
        if node.op_type in WINDOW_OPS:
            problems += [f"{where}: {p}" for p in _window(node)]
        if node.domain in DEFAULT_DOMAINS:
            problems += [f"{where}: {p}" for p in _meaning(node)]
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
    nested = any(external_data_helper.uses_external_data(t) for t in graph_tensors(slim))
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
        checked = _with_output_types(_stft_onesided(model))
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


def _raise(problems: list[str]) -> None:
    lines = "\n".join(f"  - {p}" for p in problems)
    raise InvalidModel(
        f"the model is not valid ONNX ({len(problems)} problem"
        f"{'s' if len(problems) > 1 else ''}; onnxruntime refuses it too):\n{lines}"
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
    if any(o.domain in DEFAULT_DOMAINS for o in model.opset_import):
        return []
    return ["the model imports no opset of the default ONNX domain (opset_import)"]


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


def _against_schema(
    node: onnx.NodeProto, opset: int, known: dict[str, int]
) -> list[str]:
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        if not defs.has(node.op_type):
            return []  # an unknown op: the importer names it with the unsupported
        since = defs.get_schema(node.op_type).since_version
        first = min(
            (v for v in range(1, since + 1) if _exists(node.op_type, v)), default=since
        )
        return [f"{node.op_type} does not exist in opset {opset} (it came in opset "
                f"{first})"]  # fmt: skip
    problems = []
    given = {a.name for a in node.attribute}
    for name, spec in sorted(schema.attributes.items()):
        if spec.required and name not in given:
            problems.append(f"required attribute '{name}' is missing")
    for attr in node.attribute:
        spec = schema.attributes.get(attr.name)
        if spec is None:
            names = ", ".join(sorted(schema.attributes)) or "none"
            problems.append(
                f"attribute '{attr.name}' is not one of {node.op_type}'s "
                f"(opset {opset}: {names})"
            )
        elif int(spec.type) != int(attr.type):
            want = onnx.AttributeProto.AttributeType.Name(int(spec.type))
            got = onnx.AttributeProto.AttributeType.Name(int(attr.type))
            problems.append(f"attribute '{attr.name}' must be {want}, not {got}")
        elif attr.name in FLAGS and attr.type == attr.INT and attr.i not in (0, 1):
            problems.append(f"attribute '{attr.name}' is {attr.i}; it must be 0 or 1")
    for what, count, low, high in (
        ("inputs", len(node.input), schema.min_input, schema.max_input),
        ("outputs", len(node.output), schema.min_output, schema.max_output),
    ):
        if not low <= count <= high:
            allowed = f"{low} to {high}" if high < 2**31 - 1 else f"at least {low}"
            problems.append(f"it has {count} {what}; opset {opset} allows {allowed}")
    bound: dict[str, dict[str, int]] = {}  # type parameter → input → element type
    for position, name in enumerate(node.input):
        if not schema.inputs:
            break
        formal = schema.inputs[min(position, len(schema.inputs) - 1)]
        single = formal.option == defs.OpSchema.FormalParameterOption.Single
        if not name and single and position < len(schema.inputs):
            problems.append(
                f"input {position} ('{formal.name}') is required but given no value"
            )
        elif not name and formal.option == defs.OpSchema.FormalParameterOption.Variadic:
            problems.append(f"input {position} ('{formal.name}') has an empty name")
        if name in known:
            if formal.is_homogeneous:  # Loop's, Scan's carried values may differ
                bound.setdefault(formal.type_str, {})[name] = known[name]
            problems += _allowed(schema, formal, position, name, known[name])
    for param, types in bound.items():
        if len(set(types.values())) > 1:
            listed = ", ".join(
                f"'{n}' {onnx.TensorProto.DataType.Name(t).lower()}"
                for n, t in types.items()
            )
            problems.append(f"inputs {listed} must have one element type ({param})")
    return problems


def _window(node: onnx.NodeProto) -> list[str]:
    problems = []
    attrs = {a.name: list(a.ints) for a in node.attribute if a.ints}
    if any(p < 0 for p in attrs.get("pads", [])):
        problems.append(f"pads {attrs['pads']} are negative")
    for key in ("strides", "dilations", "kernel_shape"):
        if any(v <= 0 for v in attrs.get(key, [])):
            problems.append(f"{key} {attrs[key]} must be positive")
    kernel, pads = attrs.get("kernel_shape", []), attrs.get("pads", [])
    if node.op_type in POOL_OPS and kernel and len(pads) == 2 * len(kernel):
        if any(p >= kernel[i % len(kernel)] for i, p in enumerate(pads)):
            # a window wholly in the padding has no value to pool
            problems.append(
                f"pads {pads} must be smaller than kernel_shape {kernel}"
            )
    return problems


def _meaning(node: onnx.NodeProto) -> list[str]:
    """Attribute values that the op's schema gives no meaning (see POSITIVE,
    EPSILON_OPS; Transpose's perm)."""
    attrs = {a.name: a for a in node.attribute}
    problems = []
    for name in POSITIVE.get(node.op_type, ()):
        attr = attrs.get(name)
        if attr is not None and attr.type == attr.INT and attr.i < 1:
            problems.append(f"attribute '{name}' is {attr.i}; it must be positive")
    eps = attrs.get("epsilon")
    eps_ok = eps is None or eps.type != eps.FLOAT or 0 <= eps.f < float("inf")
    if node.op_type in EPSILON_OPS and not eps_ok:
        problems.append(
            f"attribute 'epsilon' is {eps.f:g}; it must be a finite number >= 0 "
            "(it keeps the division by the standard deviation away from zero)"
        )
    perm = attrs.get("perm")
    ints = list(perm.ints) if perm is not None and perm.type == perm.INTS else None
    if node.op_type == "Transpose" and ints and sorted(ints) != [*range(len(ints))]:
        problems.append(
            f"attribute 'perm' is {ints}; it must be a permutation of "
            f"0..{len(ints) - 1}: each axis once, no negative entries"
        )
    return problems


def _exists(op_type: str, version: int) -> bool:
    try:
        return defs.get_schema(op_type, version, "").since_version <= version
    except defs.SchemaError:
        return False


def _allowed(schema, formal, position: int, name: str, elem: int) -> list[str]:
    """The element type of input `name` against the schema's type constraint."""
    constraints = {c.type_param_str: c for c in schema.type_constraints}
    constraint = constraints.get(formal.type_str)
    allowed = (
        set(constraint.allowed_type_strs) if constraint else {formal.type_str}
    )
    given = f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    if given in allowed or not any(a.startswith("tensor(") for a in allowed):
        return []
    return [
        f"input {position} ('{formal.name}') is '{name}' of type {given}; "
        f"{schema.name} takes {', '.join(sorted(allowed))}"
    ]
