"""Slices by the iteration number inside a `graph.loop` body: `x[i:i+1]`, the
usual way a Loop body reads its step of a sequence. Their starts and ends are
run-time values there, but when both are the iteration number times the same
factor plus constants, the slice keeps one size in every iteration and stays in
range for every iteration number: it becomes a Gather of `start + arange(size)`."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import OpResult, SSAValue

from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, shape_of
from smelt.frontend.onnx_ops import axis_of

# (the iteration number or None, factor, offset): the value is factor * i + offset
Affine = tuple[SSAValue | None, int, int]


def _scalar(array: np.ndarray) -> Affine | None:
    if array.size != 1 or array.dtype.kind not in "iu":
        return None
    return None, 0, int(array.reshape(-1)[0])


def affine(v: Value, counters: dict[SSAValue, int]) -> Affine | None:
    """`v` (one integer element) as an affine function of an iteration number of
    `counters`, or None when it is anything else."""
    if isinstance(v, Const):
        return _scalar(v.array)
    if v in counters:
        return v, 1, 0
    if not isinstance(v, OpResult) or len(shape_of(v)) > 1:
        return None
    if shape_of(v) and shape_of(v)[0] != 1:
        return None
    op = v.op
    if isinstance(op, g.ConstantOp):
        return _scalar(op.to_array())
    if isinstance(op, g.ReshapeOp):
        return affine(op.operands[0], counters)
    if isinstance(op, g.CastOp):
        if not isinstance(g.element_type_of(v), IntegerType):
            return None
        if not isinstance(g.element_type_of(op.operands[0]), IntegerType):
            return None
        return affine(op.operands[0], counters)
    if isinstance(op, g.AddOp | g.SubOp | g.MulOp):
        a, b = (affine(x, counters) for x in op.operands)
        if a is None or b is None or (a[0] and b[0] and a[0] is not b[0]):
            return None
        counter = a[0] or b[0]
        if isinstance(op, g.AddOp):
            return counter, a[1] + b[1], a[2] + b[2]
        if isinstance(op, g.SubOp):
            return counter, a[1] - b[1], a[2] - b[2]
        if a[1] and b[1]:
            return None  # i * i
        return counter, a[1] * b[2] + b[1] * a[2], a[2] * b[2]
    return None


def slice_by_counter(ctx: NodeContext) -> list[Value] | None:
    """Slice (opset 10 on) of one axis whose starts / ends follow the iteration
    number of an enclosing graph.loop, as a Gather; None when it does not fit."""
    counters = ctx.importer.loop_counters
    x, starts, ends = ctx.input(0), ctx.input(1), ctx.input(2)
    if not counters or x is None or starts is None or ends is None:
        return None
    for i in (3, 4):
        if ctx.input(i) is not None and not isinstance(ctx.input(i), Const):
            return None
    axes, steps = ctx.const(3, "axes"), ctx.const(4, "steps")
    s, e = affine(starts, counters), affine(ends, counters)
    if s is None or e is None or s[1] != e[1]:
        return None
    counter = s[0] or e[0]
    if counter is None or (s[0] and e[0] and s[0] is not e[0]):
        return None
    shape = shape_of(x)
    axis = 0 if axes is None else int(axes.reshape(-1)[0])
    if axes is not None and axes.size != 1:
        return None
    axis = axis_of(ctx, axis, len(shape))
    step = 1 if steps is None else int(steps.reshape(-1)[0])
    width = e[2] - s[2]
    if step <= 0 or width <= 0:
        return None
    last = counters[counter] - 1
    first_start, last_start = s[2], s[1] * last + s[2]
    first_end, last_end = e[2], e[1] * last + e[2]
    if min(first_start, last_start) < 0 or max(first_end, last_end) > shape[axis]:
        return None  # ONNX would wrap or clamp: not one size in every iteration
    size = -(-width // step)
    indices = ctx.reshape(_as_i64(ctx, starts), [1])
    if size > 1:
        spread = Const(np.arange(0, size * step, step, dtype=np.int64))
        indices = ctx.emit(g.AddOp, [indices, spread])[0]
    return ctx.emit(g.GatherOp, [x, indices], axis=axis)


def _as_i64(ctx: NodeContext, v: Value) -> Value:
    if isinstance(v, Const):
        return Const(v.array.astype(np.int64))
    if g.element_type_of(v) == IntegerType(64):
        return v
    return ctx.emit(g.CastOp, [v], to=IntegerType(64))[0]
