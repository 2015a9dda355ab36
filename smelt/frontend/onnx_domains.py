"""Ops of ONNX's other domains: ai.onnx.ml's Binarizer and ArrayFeatureExtractor
as graph ops, and the ai.onnx.preview.training ops refused with their reason.

TreeEnsemble is in `onnx_ml_trees`. The other ai.onnx.ml ops (LabelEncoder,
the classifiers, ...) have no handler: the importer names them as unsupported
ops of their domain (onnxruntime runs them). The training ops are refused here:
they update weights from gradients, and smelt compiles inference graphs;
onnxruntime's inference build (1.32, the CPU package) does not register them
either (test_other_domains checks both against it)."""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import graph as g
from smelt.frontend.onnx import NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
ML = "ai.onnx.ml::"
TRAINING = "ai.onnx.preview.training::"


@HANDLERS.register(ML + "Binarizer")
def _binarizer(ctx: NodeContext) -> list[Value]:
    """1 where x > threshold, else 0, in x's type. NaN gives 0, as in onnx's
    reference (onnxruntime stops with an error on a NaN)."""
    x = ctx.inputs[0]
    dtype = numpy_type_of(x)
    if dtype.kind not in "fiu":
        raise ctx.unsupported(f"Binarizer of {dtype} is not supported")
    m = Arith(ctx, dtype)
    threshold = m.const(np.float32(ctx.attr("threshold", 0.0)).astype(dtype))
    return [m.where(m.greater(x, threshold), 1, 0)]


@HANDLERS.register(ML + "ArrayFeatureExtractor")
def _array_feature_extractor(ctx: NodeContext) -> list[Value]:
    """x[..., indices] with the indices flattened: (..., len(indices)), and
    (1, len(indices)) for a 1-D x (onnx's reference and onnxruntime)."""
    x, indices = ctx.inputs[:2]
    shape = shape_of(x)
    if not shape:
        raise ctx.invalid("its X is a scalar; it needs rank >= 1")
    if numpy_type_of(indices) != np.int64:
        raise ctx.invalid(f"its Y is {numpy_type_of(indices)}; it must be int64")
    count = math.prod(shape_of(indices))
    flat = ctx.reshape(indices, (count,))
    m = Arith(ctx, np.dtype(np.int64))
    # onnxruntime refuses a negative index (Gather would count it from the
    # end): make it one past the end, which the gather's run-time check refuses
    flat = m.where(m.less(flat, 0), shape[-1], flat)
    taken = ctx.emit(g.GatherOp, [x, flat], axis=len(shape) - 1,
                     what=f"{ctx.label}'s indices Y")[0]  # fmt: skip
    out = (1, count) if len(shape) == 1 else (*shape[:-1], count)
    return [ctx.reshape(taken, out)]


@HANDLERS.register(
    *(TRAINING + op for op in ("Adagrad", "Adam", "Momentum", "Gradient"))
)
def _training(ctx: NodeContext) -> list[Value]:
    raise ctx.unsupported(
        f"{ctx.node.op_type} ({ctx.node.domain}) is a training op (it updates "
        "weights); smelt compiles inference graphs and does not implement it "
        "(onnxruntime's inference build does not register it either)"
    )
