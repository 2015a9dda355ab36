"""The outputs of an expanded onnx function body held to the shapes onnx's own
inference gives the node (`onnx.py` calls it after the body's nodes)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import onnx

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx_scopes import type_proto
from smelt.frontend.onnx_validate import DEFAULT_DOMAINS
from smelt.frontend.onnx_values import element_type_of, shape_of

if TYPE_CHECKING:
    from smelt.frontend.onnx import _Importer as Importer


def inferred_shapes(
    importer: Importer,
    node: onnx.NodeProto,
    label: str,
    inputs: list,
    opset: int,
    poison: object,
) -> None:
    """Holds the outputs of an expanded onnx function body to the shapes
    onnx's own inference gives the node: a body may broadcast where the op
    does not (Celu's float[1] alpha made a scalar input's result [1]), so a
    result of as many elements is reshaped, another one refused. (`poison`: the
    value of a failed node, skipped.)"""
    if node.domain not in DEFAULT_DOMAINS or (node.domain, node.op_type) in (
        importer.functions
    ):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        types = {
            name: type_proto(v)
            for name, v in zip(node.input, inputs)
            if name and v is not None
        }
        inferred = onnx.shape_inference.infer_node_outputs(schema, node, types)
    except Exception:  # noqa: BLE001 (no inference: keep the body's shapes)
        return
    for name in node.output:
        v, want = importer.values.get(name), inferred.get(name)
        if v is None or v is poison or want is None:
            continue
        dims = want.tensor_type.shape.dim
        if not want.tensor_type.HasField("shape") or not all(
            d.HasField("dim_value") for d in dims
        ):
            continue
        shape = tuple(d.dim_value for d in dims)
        if shape_of(v) == shape:
            continue
        if math.prod(shape_of(v)) != math.prod(shape):
            raise SmeltError(
                f"{label}: onnx's function body gives output '{name}' shape "
                f"{list(shape_of(v))}, its shape inference {list(shape)}"
            )
        result = g.tensor(element_type_of(v), shape)
        importer.values[name] = importer.emit(g.ReshapeOp, [v], [result])[0]
