"""ONNX GlobalMaxPool, InstanceNormalization, LpNormalization and LpPool as
compositions of graph ops (reductions, elementwise ops and average pooling)."""

from __future__ import annotations

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_nn import (
    _as_2d,
    _drop_height,
    _lift,
    check_channel_params,
    check_windows,
    window_attrs,
)
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register


def _float_input(ctx: NodeContext, x: Value) -> np.dtype:
    dtype = numpy_type_of(x)
    if dtype.kind != "f":
        raise ctx.unsupported(f"{ctx.node.op_type} of {dtype} is not supported")
    return dtype


def _spatial_axes(ctx: NodeContext, x: Value) -> list[int]:
    rank = len(shape_of(x))
    if rank < 3:
        raise SmeltError(f"{ctx.label}: the input needs a spatial dim, got {rank}-D")
    return list(range(2, rank))


@handles("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    return ctx.emit(g.ReduceMaxOp, [x], axes=_spatial_axes(ctx, x), keepdims=1)


@handles("InstanceNormalization")
def _instance_norm(ctx: NodeContext) -> list[Value]:
    """scale[c] * (x - mean) / sqrt(var + epsilon) + bias[c], the (biased)
    statistics over the spatial dims of each (n, c)."""
    x, scale, bias = ctx.inputs[:3]
    dtype = _float_input(ctx, x)
    axes = _spatial_axes(ctx, x)
    check_channel_params(ctx, x, [scale, bias], ("scale", "B"))
    channels = shape_of(x)[1]
    mean = ctx.emit(g.ReduceMeanOp, [x], axes=axes, keepdims=1)[0]
    centered = ctx.emit(g.SubOp, [x, mean])[0]
    square = ctx.emit(g.MulOp, [centered, centered])[0]
    var = ctx.emit(g.ReduceMeanOp, [square], axes=axes, keepdims=1)[0]
    eps = Const(np.array(ctx.attr("epsilon", 1e-5), dtype))
    std = ctx.emit(g.SqrtOp, ctx.emit(g.AddOp, [var, eps]))[0]
    per_channel = (channels,) + (1,) * len(axes)
    scale = ctx.reshape(scale, per_channel)
    bias = ctx.reshape(bias, per_channel)
    y = ctx.emit(g.DivOp, [ctx.emit(g.MulOp, [centered, scale])[0], std])[0]
    return ctx.emit(g.AddOp, [y, bias])


def _abs_pow(ctx: NodeContext, x: Value, p: int) -> Value:
    """|x| ** p."""
    if p == 2:
        return ctx.emit(g.MulOp, [x, x])[0]
    ax = ctx.emit(g.AbsOp, [x])[0]
    if p == 1:
        return ax
    return ctx.emit(g.PowOp, [ax, Const(np.array(p, numpy_type_of(x)))])[0]


def _root(ctx: NodeContext, x: Value, p: int) -> Value:
    """x ** (1 / p)."""
    if p == 1:
        return x
    if p == 2:
        return ctx.emit(g.SqrtOp, [x])[0]
    return ctx.emit(g.PowOp, [x, Const(np.array(1.0 / p, numpy_type_of(x)))])[0]


def _p(ctx: NodeContext, allowed: tuple[int, ...] | None) -> int:
    p = ctx.attr("p", 2)
    if not isinstance(p, int) or p < 1 or (allowed and p not in allowed):
        raise SmeltError(f"{ctx.label}: p = {p} is not supported ({allowed or '>= 1'})")
    return p


@handles("LpNormalization")
def _lp_norm(ctx: NodeContext) -> list[Value]:
    """x / (sum |x| ** p) ** (1 / p) along `axis`; 0 where that norm is 0."""
    x = ctx.inputs[0]
    dtype = _float_input(ctx, x)
    p = _p(ctx, (1, 2))
    axis = axis_of(ctx, ctx.attr("axis", -1), len(shape_of(x)))
    total = ctx.emit(g.ReduceSumOp, [_abs_pow(ctx, x, p)], axes=[axis], keepdims=1)
    norm = _root(ctx, total[0], p)
    zero = Const(np.zeros((), dtype))
    is_zero = ctx.emit(g.EqualOp, [norm, zero])[0]
    # x / 1 where the norm is 0 (x is 0 there too), so no 0 / 0 is computed.
    one = Const(np.ones((), dtype))
    safe = ctx.emit(g.WhereOp, [is_zero, one, norm])[0]
    return ctx.emit(g.DivOp, [x, safe])


@handles("LpPool")
def _lp_pool(ctx: NodeContext) -> list[Value]:
    """(sum over the window of |x| ** p) ** (1 / p): an average pool that counts
    the padding, times the window size."""
    x = ctx.inputs[0]
    _float_input(ctx, x)
    p = _p(ctx, None)
    rank = len(_spatial_axes(ctx, x))
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != rank:
        raise SmeltError(f"{ctx.label}: kernel_shape {kernel} does not fit the input")
    attrs = {"kernel_shape": kernel, **window_attrs(ctx, shape_of(x)[2:], kernel)}
    ceil = bool(ctx.attr("ceil_mode", 0))
    check_windows(ctx, shape_of(x)[2:], kernel, attrs, ceil)
    powered = _abs_pow(ctx, x, p)
    if rank == 1:
        powered, attrs = _as_2d(ctx, powered), _lift(attrs)
    mean = ctx.emit(
        g.AveragePoolOp,
        [powered],
        ceil_mode=int(ctx.attr("ceil_mode", 0)),
        count_include_pad=1,
        layout="nchw",
        **attrs,
    )[0]
    if rank == 1:
        mean = _drop_height(ctx, mean)
    count = Const(np.array(np.prod(kernel), numpy_type_of(x)))
    return [_root(ctx, ctx.emit(g.MulOp, [mean, count])[0], p)]
