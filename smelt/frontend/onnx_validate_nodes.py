"""The checks of one node in `onnx_validate`: against its op's schema (the op
exists at the opset, attribute names and types, 0/1 flags, input and output counts,
required inputs, one element type per type parameter), windows (Conv, pools) and
attribute values that the op gives no meaning (counts, epsilon, perm)."""

from __future__ import annotations

import onnx
from onnx import defs

# Said of a problem that onnxruntime 1.32 does not refuse (the message then
# claims no refusal of onnxruntime's; test_onnx_validate checks each kind)
ORT_RUNS = "onnxruntime runs it"
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


# Ops that onnxruntime registers in the default domain itself, before onnx has
# them: its LayerNormalization before onnx's (opset 17) and
# SimplifiedLayerNormalization (an RMS norm), which its transformer optimizer
# writes, and ONNX's old experimental ThresholdedRelu (onnx's from opset 10) and
# MeanVarianceNormalization (9). onnxruntime 1.32 loads them where onnx has no
# schema for them (every other op of a later opset it refuses, as smelt does:
# checked for all of onnx's ops), so "does not exist in opset N" would be false
# there; the importer imports them or names what it lacks (test_other_domains).
ORT_DEFAULT_DOMAIN = {
    "LayerNormalization", "SimplifiedLayerNormalization", "ThresholdedRelu",
    "MeanVarianceNormalization",
}  # fmt: skip


def against_schema(
    node: onnx.NodeProto, opset: int, known: dict[str, int]
) -> list[str]:
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        if not defs.has(node.op_type) or node.op_type in ORT_DEFAULT_DOMAIN:
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
            problems.append(
                f"attribute '{attr.name}' is {attr.i}; it must be 0 or 1 ({ORT_RUNS}, "
                "reading the value its own way)"
            )
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


def window_problems(node: onnx.NodeProto) -> list[str]:
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


def meaning_problems(node: onnx.NodeProto) -> list[str]:
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
            "(it keeps the division by the standard deviation away from zero; "
            f"{ORT_RUNS}, giving infinities or NaN)"
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
