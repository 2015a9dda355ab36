"""ONNX Det as graph ops: Gaussian elimination with partial pivoting, unrolled over
the (static) matrix size.

Each step picks the row of the largest |value| in the first column (`graph.arg_max`),
swaps it to the top (a `graph.gather_elements` of the rows), multiplies the running
determinant by the pivot (and by -1 for a swap) and subtracts multiples of the pivot
row from the rows below, leaving a matrix one smaller. A zero pivot makes the
determinant 0; the division then uses 1 instead, so no inf or NaN reaches it.
"""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

MAX_SIZE = 64  # matrices up to 64 x 64: each row is a step of a dozen graph ops


def _slice(ctx: NodeContext, x: Value, starts: list[int], ends: list[int]) -> Value:
    return ctx.emit(
        g.SliceOp, [x], starts=starts, ends=ends, steps=[1] * len(starts)
    )[0]


@handles("Det")
def _det(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    dtype = numpy_type_of(x)
    if len(shape) < 2 or shape[-1] != shape[-2] or dtype.kind != "f":
        raise SmeltError(
            f"{ctx.label}: needs float square matrices (..., n, n), got "
            f"{dtype}{list(shape)}"
        )
    n, batch = shape[-1], math.prod(shape[:-2])
    if n > MAX_SIZE:
        raise ctx.unsupported(
            f"Det of {n} x {n} matrices is not supported (up to {MAX_SIZE}: the "
            "elimination is unrolled into graph ops, one step per row)"
        )
    if n == 0 or batch == 0:
        raise ctx.unsupported("Det of empty matrices is not supported")
    work = np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    m = Arith(ctx, work)
    a = ctx.reshape(m.cast(x, work), (batch, n, n))
    det: Value = m.const(np.ones((batch, 1), work))
    for size in range(n, 0, -1):
        if size > 1:
            column = _slice(ctx, a, [0, 0, 0], [batch, size, 1])
            top = ctx.emit(g.ArgMaxOp, [m.op(g.AbsOp, column)], axis=1, keepdims=1,
                           select_last_index=0)[0]  # fmt: skip
            top = ctx.reshape(top, (batch, 1))  # the pivot row, (B, 1)
            rows = m.const(np.arange(size).reshape(1, size), np.int64)
            zero = m.const(0, np.int64)
            order = m.where(
                m.op(g.EqualOp, rows, zero),
                top,
                m.where(m.op(g.EqualOp, rows, top), zero, rows),
            )  # rows 0 and top swapped, (B, size)
            order = ctx.emit(g.ExpandOp, [ctx.reshape(order, (batch, size, 1))],
                             shape=[batch, size, size])[0]  # fmt: skip
            a = ctx.emit(g.GatherElementsOp, [a, order], axis=1)[0]
            swapped = m.op(g.EqualOp, top, zero)
            det = m.where(swapped, det, m.mul(det, -1.0))
        pivot = ctx.reshape(_slice(ctx, a, [0, 0, 0], [batch, 1, 1]), (batch, 1))
        det = m.mul(det, pivot)
        if size == 1:
            break
        safe = m.where(m.op(g.EqualOp, pivot, 0.0), 1.0, pivot)
        below = _slice(ctx, a, [0, 1, 0], [batch, size, 1])  # (B, size-1, 1)
        factor = m.div(below, ctx.reshape(safe, (batch, 1, 1)))
        pivot_row = _slice(ctx, a, [0, 0, 1], [batch, 1, size])
        rest = _slice(ctx, a, [0, 1, 1], [batch, size, size])
        a = m.sub(rest, m.mul(factor, pivot_row))
    return [m.cast(ctx.reshape(det, shape[:-2]), dtype)]
