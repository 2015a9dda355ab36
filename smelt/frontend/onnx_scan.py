"""ONNX handlers of the ops that sweep one axis: ArgMax / ArgMin, CumSum / CumProd,
TopK."""

from __future__ import annotations

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import (
    Const,
    NodeContext,
    Value,
    numpy_type_of,
    shape_of,
)
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

_ARG = {"ArgMax": g.ArgMaxOp, "ArgMin": g.ArgMinOp}


def swept_shape(ctx: NodeContext) -> tuple[int, ...]:
    """The shape of input 0, which must have an axis to sweep along."""
    shape = shape_of(ctx.inputs[0])
    if not shape:
        raise SmeltError(f"{ctx.label}: its input must have rank >= 1, got a scalar")
    return shape


@handles(*_ARG)
def _arg_reduce(ctx: NodeContext) -> list[Value]:
    x, shape = ctx.inputs[0], swept_shape(ctx)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape))
    if shape[axis] == 0:
        raise SmeltError(f"{ctx.label}: the reduced axis {axis} is empty")
    return ctx.emit(
        _ARG[ctx.node.op_type],
        [x],
        axis=axis,
        keepdims=int(ctx.attr("keepdims", 1)),
        select_last_index=int(ctx.attr("select_last_index", 0)),
    )


def _scalar_const(ctx: NodeContext, i: int, what: str) -> int:
    """Input `i`, a constant holding one integer."""
    value = ctx.const(i, what)
    if value is None or value.size != 1 or value.dtype.kind not in "iu":
        raise SmeltError(f"{ctx.label}: its {what} must be one integer")
    return int(value.reshape(-1)[0])


_CUMULATIVE = {"CumSum": g.CumSumOp, "CumProd": g.CumProdOp}


@handles(*_CUMULATIVE)
def _cumulative(ctx: NodeContext) -> list[Value]:
    """A kernel's loop nest runs along one axis: with an axis known only at run
    time, one result is computed per possible axis, stacked, and the run-time axis
    picks one (a gather, whose run-time check fails the run on an axis out of
    range, as onnxruntime does)."""
    x, rank = ctx.inputs[0], len(swept_shape(ctx))
    attrs = {
        "exclusive": int(ctx.attr("exclusive", 0)),
        "reverse": int(ctx.attr("reverse", 0)),
    }
    op = _CUMULATIVE[ctx.node.op_type]
    axis = ctx.input(1)
    if isinstance(axis, Const):
        axis = axis_of(ctx, _scalar_const(ctx, 1, "axis"), rank)
        return ctx.emit(op, [x], axis=axis, **attrs)
    if shape_of(axis) not in ((), (1,)) or numpy_type_of(axis).kind not in "iu":
        raise SmeltError(f"{ctx.label}: its axis must be one integer")
    shape = list(shape_of(x))
    each = [
        ctx.reshape(ctx.emit(op, [x], axis=a, **attrs)[0], [1, *shape])
        for a in range(rank)
    ]
    stacked = each[0] if rank == 1 else ctx.emit(g.ConcatOp, each, axis=0)[0]
    index = ctx.reshape(axis, [])
    what = f"{ctx.label}: its axis (input 1 '{ctx.node.input[1]}')"
    return ctx.emit(g.GatherOp, [stacked, index], axis=0, what=what)


@handles("TopK")
def _top_k(ctx: NodeContext) -> list[Value]:
    x, shape = ctx.inputs[0], swept_shape(ctx)
    axis = axis_of(ctx, ctx.attr("axis", -1), len(shape))
    k = int(ctx.attr("k")) if ctx.opset < 10 else _scalar_const(ctx, 1, "K")
    if not 0 <= k <= shape[axis]:
        raise ctx.invalid(
            f"K = {k} must be within [0, {shape[axis]}], the extent of axis {axis}"
        )
    largest = int(ctx.attr("largest", 1))
    # sorted = 0 leaves the order unspecified: the sorted order is one of them.
    return ctx.emit(g.TopKOp, [x], axis=axis, k=k, largest=largest)
