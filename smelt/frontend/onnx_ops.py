"""ONNX op handlers: each maps one node to graph ops. This file holds the registry,
elementwise ops, reductions and constants; data movement lives in `onnx_shapes`, the
neural-network ops in `onnx_nn`.

A handler takes a `NodeContext` and returns the values of the node's outputs, in
order. Axes it emits are normalized (non-negative); attributes that depend on the
opset are read the way that opset defines them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.dialects.weights import ALIGNED_BYTES, held
from smelt.errors import SmeltError
from smelt.frontend import onnx_dims
from smelt.frontend.onnx import (
    Const,
    DimArray,
    NodeContext,
    Value,
    element_type,
    element_type_of,
    numpy_type_of,
    shape_of,
    tensor_array,
)
from smelt.registry import Table

Handler = Callable[[NodeContext], list[Value]]
HANDLERS = Table()  # this module's handlers; `frontend/handlers.py` lists them all
handles = HANDLERS.register


def axis_of(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.invalid(
            f"axis {axis} is out of range for rank {rank} (expected "
            f"{-rank} to {max(rank, 1) - 1})"
        )
    return axis % max(rank, 1)


def axes_input(ctx: NodeContext, attr_until: int, index: int = 1) -> list[int] | None:
    """The `axes` of a node: an attribute before opset `attr_until`, then an input."""
    if ctx.opset < attr_until:
        axes = ctx.attr("axes")
    else:
        axes = ctx.const(index, "axes")
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


# --- elementwise ---------------------------------------------------------------------

_UNARY = {
    "Relu": g.ReluOp, "Sigmoid": g.SigmoidOp, "Tanh": g.TanhOp, "Exp": g.ExpOp,
    "Log": g.LogOp, "Erf": g.ErfOp, "Sqrt": g.SqrtOp, "Neg": g.NegOp, "Abs": g.AbsOp,
    "Reciprocal": g.ReciprocalOp, "Floor": g.FloorOp, "Ceil": g.CeilOp,
    "Identity": g.IdentityOp, "Sign": g.SignOp, "Round": g.RoundOp,
    "Sin": g.SinOp, "Cos": g.CosOp, "Tan": g.TanOp, "Asin": g.AsinOp,
    "Acos": g.AcosOp, "Atan": g.AtanOp, "Sinh": g.SinhOp, "Cosh": g.CoshOp,
    "Asinh": g.AsinhOp, "Acosh": g.AcoshOp, "Atanh": g.AtanhOp,
    "Not": g.NotOp, "BitwiseNot": g.NotOp, "IsNaN": g.IsNanOp,
}  # fmt: skip
_BINARY = {
    "Add": g.AddOp, "Sub": g.SubOp, "Mul": g.MulOp, "Div": g.DivOp,
    "Equal": g.EqualOp, "Less": g.LessOp, "Greater": g.GreaterOp,
    "LessOrEqual": g.LessEqualOp, "GreaterOrEqual": g.GreaterEqualOp,
    "And": g.AndOp, "Or": g.OrOp, "Xor": g.XorOp,
    "BitwiseAnd": g.AndOp, "BitwiseOr": g.OrOp, "BitwiseXor": g.XorOp,
}  # fmt: skip
_VARIADIC = {"Max": g.MaxOp, "Min": g.MinOp, "Sum": g.AddOp}


@handles(*_UNARY)
def _unary(ctx: NodeContext) -> list[Value]:
    return ctx.emit(_UNARY[ctx.node.op_type], [ctx.inputs[0]])


@handles(*_BINARY)
def _binary(ctx: NodeContext) -> list[Value]:
    a, b = ctx.inputs[:2]
    if ctx.opset < 7 and ctx.attr("broadcast", 0) and "axis" in ctx.attrs:
        # legacy broadcasting: b's dims line up with a's from `axis` on
        rank, b_shape = len(shape_of(a)), shape_of(b)
        axis = axis_of(ctx, ctx.attr("axis"), rank)
        if axis + len(b_shape) > rank:
            raise SmeltError(
                f"{ctx.label}: B of shape {list(b_shape)} does not fit in a rank "
                f"{rank} input from axis {axis}; check the 'axis' attribute"
            )
        b = ctx.reshape(b, b_shape + (1,) * (rank - axis - len(b_shape)))
    return ctx.emit(_BINARY[ctx.node.op_type], [a, b])


@handles(*_VARIADIC)
def _variadic(ctx: NodeContext) -> list[Value]:
    cls = _VARIADIC[ctx.node.op_type]
    values = [v for v in ctx.inputs if v is not None]
    return [functools.reduce(lambda a, b: ctx.emit(cls, [a, b])[0], values)]


@handles("Softplus")
def _softplus(ctx: NodeContext) -> list[Value]:
    """ln(1 + e^x) as relu(x) + ln(1 + e^-|x|): onnx's function body, ln(e^x + 1),
    overflows to inf from x = 89 in f32, where the answer is x."""
    x = ctx.inputs[0]
    one = Const(np.array(1, numpy_type_of(x)))
    tail = ctx.emit(g.ExpOp, ctx.emit(g.NegOp, ctx.emit(g.AbsOp, [x])))
    log = ctx.emit(g.LogOp, ctx.emit(g.AddOp, [tail[0], one]))
    return ctx.emit(g.AddOp, [ctx.emit(g.ReluOp, [x])[0], log[0]])


@handles("Mean")
def _mean(ctx: NodeContext) -> list[Value]:
    values = [v for v in ctx.inputs if v is not None]
    total = functools.reduce(lambda a, b: ctx.emit(g.AddOp, [a, b])[0], values)
    if len(values) == 1:
        return [total]
    count = Const(np.array(len(values), numpy_type_of(values[0])))
    return ctx.emit(g.DivOp, [total, count])


@handles("BitShift")
def _bit_shift(ctx: NodeContext) -> list[Value]:
    direction = ctx.attr("direction")
    cls = {"LEFT": g.ShiftLeftOp, "RIGHT": g.ShiftRightOp}.get(direction)
    if cls is None:
        raise SmeltError(
            f"{ctx.label}: direction must be 'LEFT' or 'RIGHT', not {direction!r}"
        )
    return ctx.emit(cls, ctx.inputs[:2])


@handles("Mod")
def _mod(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.ModOp, ctx.inputs[:2], fmod=int(ctx.attr("fmod", 0)))


@handles("IsInf")
def _is_inf(ctx: NodeContext) -> list[Value]:
    return ctx.emit(
        g.IsInfOp,
        [ctx.inputs[0]],
        detect_negative=int(ctx.attr("detect_negative", 1)),
        detect_positive=int(ctx.attr("detect_positive", 1)),
    )


@handles("PRelu")
def _prelu(ctx: NodeContext) -> list[Value]:
    x, slope = ctx.inputs[:2]
    x_shape, slope_shape = shape_of(x), shape_of(slope)
    if ctx.opset < 7 and len(slope_shape) == 1 and slope_shape[0] > 1:
        # before numpy broadcasting a 1-D slope held one value per channel (axis 1)
        slope_shape = (slope_shape[0],) + (1,) * max(len(x_shape) - 2, 0)
        slope = ctx.reshape(slope, slope_shape)
    # the slope broadcasts to x (unidirectionally), never x to the slope
    try:
        fits = np.broadcast_shapes(x_shape, slope_shape) == x_shape
    except ValueError:
        fits = False
    if not fits:
        raise SmeltError(
            f"{ctx.label}: the slope's shape {list(slope_shape)} does not broadcast "
            f"to the input's shape {list(x_shape)}"
        )
    return ctx.emit(g.PreluOp, [x, slope])


@handles("Pow")
def _pow(ctx: NodeContext) -> list[Value]:
    base, exp = ctx.inputs[:2]
    bt, et = element_type_of(base), element_type_of(exp)
    if bt == et:
        return ctx.emit(g.PowOp, [base, exp])
    if numpy_type_of(base).kind == "f" or numpy_type_of(exp).kind != "f":
        exp = ctx.emit(g.CastOp, [exp], to=bt)[0]
        return ctx.emit(g.PowOp, [base, exp])
    # An integer base with a float exponent: compute in floats, truncate back.
    base = ctx.emit(g.CastOp, [base], to=et)[0]
    return ctx.emit(g.CastOp, ctx.emit(g.PowOp, [base, exp]), to=bt)


@handles("LeakyRelu")
def _leaky_relu(ctx: NodeContext) -> list[Value]:
    return ctx.emit(
        g.LeakyReluOp, [ctx.inputs[0]], alpha=float(ctx.attr("alpha", 0.01))
    )


@handles("Clip")
def _clip(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    dtype = numpy_type_of(x)
    if dtype.kind == "f":
        lo, hi = dtype.type(-np.inf), dtype.type(np.inf)
    else:
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    if ctx.opset < 11:
        bounds = [
            Const(np.array(ctx.attr(n, d), dtype))
            for n, d in (("min", lo), ("max", hi))
        ]
    else:
        bounds = [
            ctx.input(i) if ctx.input(i) is not None else Const(np.array(d, dtype))
            for i, d in ((1, lo), (2, hi))
        ]
    return ctx.emit(g.ClipOp, [x, *bounds])


@handles("Where")
def _where(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.WhereOp, ctx.inputs[:3])


@handles("Cast")
def _cast(ctx: NodeContext) -> list[Value]:
    to = element_type(ctx.attr("to"), f"{ctx.label}: 'to'")
    return ctx.emit(g.CastOp, [ctx.inputs[0]], to=to)


@handles("BitCast")
def _bitcast(ctx: NodeContext) -> list[Value]:
    """The input's bytes read as type `to` of the same width (no kernel)."""
    x = ctx.inputs[0]
    to = element_type(ctx.attr("to"), f"{ctx.label}: 'to'")
    src = element_type_of(x)
    if src == to:
        return [x]
    if dtypes.byte_size(src) != dtypes.byte_size(to):
        raise SmeltError(
            f"{ctx.label}: BitCast from {numpy_type_of(x)} to "
            f"{dtypes.to_numpy(to)} changes the element width"
        )
    if to == dtypes.i1:
        raise ctx.unsupported("BitCast to bool is not supported (bytes other than 0/1)")
    return ctx.emit(g.BitcastOp, [x], to=to)


@handles("CastLike")
def _cast_like(ctx: NodeContext) -> list[Value]:
    """Cast to the element type of the second input (whose values are unused)."""
    x, like = ctx.inputs[:2]
    to = element_type_of(like)
    if element_type_of(x) == to:
        return [x]
    return ctx.emit(g.CastOp, [x], to=to)


@handles("Dropout")
def _dropout(ctx: NodeContext) -> list[Value]:
    """Inference: y = x, and the mask (when used) keeps every element."""
    what = "training_mode (smelt compiles inference: a constant false)"
    training = ctx.const(2, what) if ctx.opset >= 12 else None
    if training is not None and bool(training.reshape(-1)[0]):
        raise ctx.unsupported("Dropout in training mode is not supported")
    x = ctx.inputs[0]
    y = ctx.emit(g.DropoutOp, [x])
    if ctx.output_used(1):
        true = Const(np.ones((1,) * len(shape_of(x)), np.bool_))
        y += ctx.emit(g.ExpandOp, [true], shape=list(shape_of(x)))
    return y


# --- reductions ----------------------------------------------------------------------

_REDUCE = {
    "ReduceSum": (g.ReduceSumOp, 13),
    "ReduceMean": (g.ReduceMeanOp, 18),
    "ReduceMax": (g.ReduceMaxOp, 18),
    "ReduceMin": (g.ReduceMinOp, 18),
    "ReduceProd": (g.ReduceProdOp, 18),
}


@handles(*_REDUCE)
def _reduce(ctx: NodeContext) -> list[Value]:
    cls, axes_as_input_since = _REDUCE[ctx.node.op_type]
    x = ctx.inputs[0]
    rank = len(shape_of(x))
    axes = axes_input(ctx, axes_as_input_since)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({axis_of(ctx, a, rank) for a in axes})
    return ctx.emit(cls, [x], axes=axes, keepdims=int(ctx.attr("keepdims", 1)))


_SOFTMAX = {
    "Softmax": g.SoftmaxOp,
    "LogSoftmax": g.LogSoftmaxOp,
    "Hardmax": g.HardmaxOp,
}


@handles(*_SOFTMAX)
def _softmax(ctx: NodeContext) -> list[Value]:
    cls, x = _SOFTMAX[ctx.node.op_type], ctx.inputs[0]
    shape = shape_of(x)
    if not shape:
        raise SmeltError(f"{ctx.label}: its input must have rank >= 1, got a scalar")
    axis = axis_of(ctx, ctx.attr("axis", 1 if ctx.opset < 13 else -1), len(shape))
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return ctx.emit(cls, [x], axis=axis)
    # Before opset 13 the input is coerced to 2-D: dims from `axis` on are one row.
    flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    y = ctx.emit(cls, [flat], axis=1)[0]
    return [ctx.reshape(y, shape)]


# --- constants and shapes -----------------------------------------------------------


@handles("Constant")
def _constant(ctx: NodeContext) -> list[Value]:
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):  # fmt: skip
        if name in ctx.attrs:
            return [Const(np.array(ctx.attrs[name], dtype))]
    if "value" not in ctx.attrs:
        raise ctx.unsupported(f"Constant with {sorted(ctx.attrs)} is not supported")
    return [Const(_tensor_value(ctx, ctx.attrs["value"]))]


def _tensor_value(ctx: NodeContext, tensor) -> np.ndarray:
    what = f"{ctx.label}: its value"
    array = tensor_array(tensor, what, ctx.importer.data_dir)
    element_type(tensor.data_type, what)  # supported at all?
    return array


@handles("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> list[Value]:
    given = ctx.input(0)
    if isinstance(given, DimArray):
        raise g.SymbolicDimError(
            f"{ctx.label}: its shape {given.text()} is symbolic, and a filled tensor "
            "of symbolic dims cannot be written yet (graph.expand keeps only the "
            "dims of its input); fix them with input_shapes="
        )
    shape = [int(d) for d in ctx.const(0, "shape").reshape(-1)]
    value = ctx.attrs.get("value")
    fill = _tensor_value(ctx, value).reshape(-1) if value is not None else None
    if fill is None:
        fill = np.zeros(1, np.float32)
    ctx.check_size(shape, fill.dtype)
    if math.prod(shape) * fill.itemsize >= ALIGNED_BYTES:  # filled where it stays
        return [Const(held(np.broadcast_to(fill[0], shape)))]
    # Repeating the bytes of one element is the fastest way to a small filled
    # buffer, and graph.constant then keeps those very bytes.
    data = fill[:1].tobytes() * math.prod(shape)
    return [Const(np.frombuffer(data, fill.dtype).reshape(shape))]


@handles("Shape")
def _shape(ctx: NodeContext) -> list[Value]:
    shape = shape_of(ctx.inputs[0])[ctx.attr("start", 0) : ctx.attr("end", None)]
    return [onnx_dims.make(onnx_dims.objects(shape, (len(shape),)))]

