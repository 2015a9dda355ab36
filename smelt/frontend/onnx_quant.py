"""ONNX handlers of quantization: QuantizeLinear / DequantizeLinear (QDQ format)
and the QOperator ops MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv
(listed in `frontend/handlers.py`; DynamicQuantizeLinear is expanded from its
ONNX function body).

Scales and zero points are reshaped to broadcast to the value (a per-axis [C] on
axis 1 of a rank-4 tensor becomes [C, 1, 1]; blocked ones are repeated per block).
int4 / float8 types are refused when the importer reads their tensors. Integer
matmul and conv subtract the zero points in i32 and accumulate in i32; the QLinear
ops then requantize. A DequantizeLinear of a constant stays `quant.dequantize` of
int8 data (never folded).
"""

from __future__ import annotations

import numpy as np

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.dialects import quant as q
from smelt.errors import SmeltError
from smelt.frontend.onnx import (
    Const,
    NodeContext,
    Value,
    element_type,
    element_type_of,
    numpy_type_of,
    shape_of,
)
from smelt.frontend.onnx_nn import conv
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

_QUANT_STORAGE = (dtypes.i8, dtypes.ui8, dtypes.i16, dtypes.ui16, dtypes.i32)


def _per_axis(ctx: NodeContext, param: Value, rank: int, axis: int, what: str) -> Value:
    """A scale or zero point (scalar, [1] or [C]) shaped to broadcast to a rank
    `rank` value quantized along `axis`."""
    dims = shape_of(param)
    if len(dims) == 0 or tuple(dims) == (1,):  # per tensor, whatever the axis
        return param if len(dims) == 0 else ctx.reshape(param, ())
    if len(dims) != 1:
        raise ctx.unsupported(
            f"its {what} has shape {list(dims)}: expected a scalar or a 1-D "
            "per-axis tensor (or blocks with block_size)"
        )
    axis = axis_of(ctx, axis, rank)
    return ctx.reshape(param, (dims[0],) + (1,) * (rank - axis - 1))


def _blocked(ctx: NodeContext, param: Value, x_shape, axis: int, what: str) -> Value:
    """A blocked scale or zero point (x's shape but ceil(n / block_size) along
    `axis`) repeated block_size times along `axis`, cut to x's shape."""
    block, rank = int(ctx.attr("block_size")), len(x_shape)
    axis = axis_of(ctx, axis, rank)
    dims, n = shape_of(param), x_shape[axis]
    blocks = -(-n // block)
    expected = (*x_shape[:axis], blocks, *x_shape[axis + 1 :])
    if tuple(dims) != expected:
        raise SmeltError(
            f"{ctx.label}: its {what} has shape {list(dims)}; blocks of "
            f"{block} along axis {axis} need {list(expected)}"
        )
    v = ctx.reshape(param, (*dims[: axis + 1], 1, *dims[axis + 1 :]))
    v = ctx.emit(g.ExpandOp, [v], shape=[*dims[: axis + 1], block, *dims[axis + 1 :]])
    v = ctx.reshape(v[0], (*dims[:axis], blocks * block, *dims[axis + 1 :]))
    if blocks * block != n:
        v = ctx.emit(
            g.SliceOp, [v], starts=[0] * rank, ends=list(x_shape), steps=[1] * rank
        )[0]
    return v


def _params(ctx: NodeContext, x: Value, scale: Value, zp: Value) -> list[Value]:
    """Scale and zero point shaped to broadcast to x (per tensor, axis or block)."""
    x_shape, axis = shape_of(x), int(ctx.attr("axis", 1))
    if int(ctx.attr("block_size", 0)) > 0:
        return [_blocked(ctx, p, x_shape, axis, w) for p, w in
                ((scale, "scale"), (zp, "zero point"))]  # fmt: skip
    return [_per_axis(ctx, p, len(x_shape), axis, w) for p, w in
            ((scale, "scale"), (zp, "zero point"))]  # fmt: skip


def _storage(ctx: NodeContext, t, what: str):
    if t not in _QUANT_STORAGE:
        raise ctx.unsupported(
            f"{what} of type {t} is not supported: quantized storage must be "
            "int8, uint8, int16, uint16 (or int32 for DequantizeLinear)"
        )
    return t


def _zero(t, like: Value) -> Const:
    """A zero point of storage type `t` of the shape of scale `like`."""
    return Const(np.zeros(shape_of(like), dtypes.to_numpy(t)))


@handles("QuantizeLinear")
def _quantize_linear(ctx: NodeContext) -> list[Value]:
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
    if zp is not None:
        out = element_type_of(zp)
    elif ctx.attr("output_dtype", 0):
        out = element_type(ctx.attr("output_dtype"), f"{ctx.label}: output_dtype")
    else:
        out = dtypes.ui8
    if out == dtypes.i32:
        raise ctx.unsupported("QuantizeLinear to int32 is not an ONNX quantized type")
    _storage(ctx, out, "the output")
    scale, zp = _params(ctx, x, scale, _zero(out, scale) if zp is None else zp)
    return ctx.emit(q.QuantizeOp, [x, scale, zp])


@handles("DequantizeLinear")
def _dequantize_linear(ctx: NodeContext) -> list[Value]:
    x, scale, zp = ctx.input(0), ctx.input(1), ctx.input(2)
    storage = _storage(ctx, element_type_of(x), "the input")
    scale, zp = _params(ctx, x, scale, _zero(storage, scale) if zp is None else zp)
    y = ctx.emit(q.DequantizeOp, [x, scale, zp])
    if ctx.attr("output_dtype", 0):
        to = element_type(ctx.attr("output_dtype"), f"{ctx.label}: output_dtype")
        if to != element_type_of(y[0]):
            y = ctx.emit(g.CastOp, y, to=to)
    return y


# --- integer matmul and conv ----------------------------------------------------------


def _widen(ctx: NodeContext, v: Value, zp: Value | None) -> Value:
    """v - zp in i32 (zp already shaped to broadcast to v)."""
    _storage(ctx, element_type_of(v), "an integer operand")
    wide = ctx.emit(g.CastOp, [v], to=dtypes.i32)[0]
    if zp is None or (isinstance(zp, Const) and not zp.array.any()):
        return wide
    if element_type_of(zp) != element_type_of(v):
        raise ctx.unsupported(
            f"a zero point of type {element_type_of(zp)} for an operand of type "
            f"{element_type_of(v)}: they must match"
        )
    return ctx.emit(g.SubOp, [wide, ctx.emit(g.CastOp, [zp], to=dtypes.i32)[0]])[0]


def _row_param(ctx: NodeContext, a: Value, p: Value | None) -> Value | None:
    """A scalar or per-row ([M]) parameter of matmul operand A, as [M, 1]."""
    if p is None or len(shape_of(p)) == 0 or shape_of(p) == (1,):
        return p if p is None or not shape_of(p) else ctx.reshape(p, ())
    if len(shape_of(p)) == 1 and len(shape_of(a)) >= 2:
        return ctx.reshape(p, (shape_of(p)[0], 1))
    return p


def _col_param(ctx: NodeContext, p: Value | None) -> Value | None:
    """A scalar or per-column ([N]) parameter of matmul operand B (as given)."""
    if p is not None and shape_of(p) == (1,):
        return ctx.reshape(p, ())
    return p


def _matmul_integer(
    ctx: NodeContext, a: Value, b: Value, a_zp: Value | None, b_zp: Value | None
) -> Value:
    a32 = _widen(ctx, a, _row_param(ctx, a, a_zp))
    b32 = _widen(ctx, b, _col_param(ctx, b_zp))
    return ctx.emit(g.MatMulOp, [a32, b32])[0]


@handles("MatMulInteger")
def _matmul_integer_node(ctx: NodeContext) -> list[Value]:
    a, b = ctx.inputs[:2]
    return [_matmul_integer(ctx, a, b, ctx.input(2), ctx.input(3))]


def _conv_integer(
    ctx: NodeContext,
    x: Value,
    w: Value,
    x_zp: Value | None,
    w_zp: Value | None,
    bias: Value | None,
) -> Value:
    if x_zp is not None and shape_of(x_zp) not in ((), (1,)):
        raise ctx.unsupported("a per-channel input zero point is not supported")
    x32 = _widen(ctx, x, None if x_zp is None else ctx.reshape(x_zp, ()))
    w_rank = len(shape_of(w))
    if w_zp is not None:
        w_zp = _per_axis(ctx, w_zp, w_rank, 0, "weight zero point")
    w32 = _widen(ctx, w, w_zp)
    if bias is None:
        bias = Const(np.zeros(shape_of(w)[0], np.int32))
    elif element_type_of(bias) != dtypes.i32:
        raise ctx.unsupported(f"a bias of type {element_type_of(bias)} (needs int32)")
    return conv(ctx, x32, w32, bias)


@handles("ConvInteger")
def _conv_integer_node(ctx: NodeContext) -> list[Value]:
    x, w = ctx.inputs[:2]
    return [_conv_integer(ctx, x, w, ctx.input(2), ctx.input(3), None)]


def _multiplier(ctx: NodeContext, scales: list[Value]) -> Value:
    """in_scale * weight_scale / out_scale, in the scales' float type."""
    product = ctx.emit(g.MulOp, scales[:2])[0]
    return ctx.emit(g.DivOp, [product, scales[2]])[0]


def _out_zero_point(ctx: NodeContext, zp: Value | None, like: Value) -> Value:
    if zp is None:
        return Const(np.zeros((), numpy_type_of(like)))
    _storage(ctx, element_type_of(zp), "the output zero point")
    if shape_of(zp) not in ((), (1,)):
        raise ctx.unsupported("a per-channel output zero point is not supported")
    return ctx.reshape(zp, ()) if shape_of(zp) else zp


def _scalar_scale(ctx: NodeContext, s: Value, what: str) -> Value:
    if shape_of(s) not in ((), (1,)):
        raise ctx.unsupported(f"the {what} must be a scalar, got {list(shape_of(s))}")
    return ctx.reshape(s, ()) if shape_of(s) else s


@handles("QLinearMatMul")
def _qlinear_matmul(ctx: NodeContext) -> list[Value]:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (ctx.input(i) for i in range(8))
    acc = _matmul_integer(ctx, a, b, a_zp, b_zp)
    scales = [
        _row_param(ctx, a, a_scale),
        _col_param(ctx, b_scale),
        _scalar_scale(ctx, y_scale, "output scale"),
    ]
    multiplier = _multiplier(ctx, scales)  # type: ignore[arg-type]
    return ctx.emit(q.RequantizeOp, [acc, multiplier, _out_zero_point(ctx, y_zp, a)])


@handles("QLinearConv")
def _qlinear_conv(ctx: NodeContext) -> list[Value]:
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (
        ctx.input(i) for i in range(8)
    )
    acc = _conv_integer(ctx, x, w, x_zp, w_zp, ctx.input(8))
    rank = len(shape_of(acc))
    scales = [
        _scalar_scale(ctx, x_scale, "input scale"),
        _per_axis(ctx, w_scale, rank, 1, "weight scale"),
        _scalar_scale(ctx, y_scale, "output scale"),
    ]
    multiplier = _multiplier(ctx, scales)  # type: ignore[arg-type]
    return ctx.emit(q.RequantizeOp, [acc, multiplier, _out_zero_point(ctx, y_zp, x)])

