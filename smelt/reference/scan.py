"""Reference kernels of the graph dialect's axis sweeps: arg-reductions, cumulative
sums and products, top-k (listed in `reference/kernels.py`)."""

from __future__ import annotations

import numpy as np

from smelt.dialects import graph as g
from smelt.reference.executor import widened
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register


@kernel(g.ArgMaxOp, g.ArgMinOp)
def _arg_reduce(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    find = np.argmax if isinstance(op, g.ArgMaxOp) else np.argmin
    if op.attr("select_last_index"):
        where = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis)
    else:
        where = find(x, axis=axis)
    where = where.astype(np.int64)
    return np.expand_dims(where, axis) if op.attr("keepdims") else where


@kernel(g.CumSumOp, g.CumProdOp)
def _cumulative(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    wide = widened(x)
    if op.attr("reverse"):
        wide = np.flip(wide, axis)
    if isinstance(op, g.CumSumOp):
        y, identity = np.cumsum(wide, axis=axis, dtype=wide.dtype), 0
    else:
        y, identity = np.cumprod(wide, axis=axis, dtype=wide.dtype), 1
    if op.attr("exclusive"):
        first = np.full_like(np.take(y, [0], axis=axis), identity)
        rest = np.take(y, np.arange(y.shape[axis] - 1), axis=axis)
        y = np.concatenate([first, rest], axis=axis)
    if op.attr("reverse"):
        y = np.flip(y, axis)
    return np.ascontiguousarray(y).astype(x.dtype)


@kernel(g.TopKOp)
def _top_k(op: g.GraphOp, args: list[np.ndarray]) -> list[np.ndarray]:
    """A stable sort: equal values keep increasing positions; for the largest, the
    sort of the reversed axis read backwards."""
    x = args[0]
    axis = g.normalize_axis(op.attr("axis"), x.ndim)
    n, k = x.shape[axis], op.attr("k")
    if op.attr("largest"):
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = n - 1 - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, indices, axis=axis), indices]
