"""Reference kernels of the index-driven graph ops (graph_index.py): gathers and
scatters by elements and by index tuples, one-hot, trilu, reverse_sequence.

An index out of range raises the SmeltError the compiled run raises (same message).
"""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register

_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _wrap(indices: np.ndarray, size: int, message: str) -> np.ndarray:
    indices = indices.astype(np.int64)
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise SmeltError(message)
    return np.where(indices < 0, indices + size, indices)


def _crop(x: np.ndarray, shape, axis: int) -> np.ndarray:
    """x restricted to the first shape[d] entries of every dim but `axis`."""
    return x[
        tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(shape))
    ]


@kernel(g.GatherElementsOp)
def _gather_elements(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, indices = args
    axis, size = op.attr("axis"), args[0].shape[op.attr("axis")]
    message = g.axis_index_message("GatherElements", axis, x.shape, size)
    idx = _wrap(indices, size, message)
    return np.take_along_axis(_crop(x, idx.shape, axis), idx, axis)


def _nd_tuples(op: str, indices: np.ndarray, shape, first: int) -> tuple:
    """The index tuples (last dim of `indices`) into dims first.. of `shape`,
    wrapped, as a tuple of index arrays."""
    k = indices.shape[-1]
    return tuple(
        _wrap(indices[..., j], shape[first + j],
              g.nd_index_message(op, first + j, shape, shape[first + j]))
        for j in range(k)
    )  # fmt: skip


@kernel(g.GatherNDOp)
def _gather_nd(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, indices = args
    b = op.attr("batch_dims")
    tuples = _nd_tuples("GatherND", indices, x.shape, b)
    batch = math.prod(x.shape[:b])
    flat_x = x.reshape(batch, *x.shape[b:])
    flat_t = [t.reshape(batch, -1) for t in tuples]
    out = [flat_x[n][tuple(t[n] for t in flat_t)] for n in range(batch)]
    return np.stack(out).reshape(g.shape_of(op.result))


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: str):
    """out[where] (op)= updates, in order: the last duplicate wins for none, and
    f16 / bf16 combine in f32 rounded at each step (as the compiled kernel does)."""
    low_float = out.dtype.itemsize == 2 and out.dtype.kind not in "iu"
    if reduction != "none" and not low_float:
        _UFUNCS[reduction].at(out, where, updates)
        return out
    combine = _UFUNCS.get(reduction)
    for n in range(updates.shape[0]):
        at = tuple(w[n] for w in where)
        new = updates[n]
        if combine is not None:
            wide = combine(out[at].astype(np.float32), new.astype(np.float32))
            new = wide.astype(out.dtype)
        out[at] = new
    return out


@kernel(g.ScatterElementsOp)
def _scatter_elements(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, indices, updates = args
    axis, size = op.attr("axis"), x.shape[op.attr("axis")]
    message = g.axis_index_message("ScatterElements", axis, x.shape, size)
    idx = _wrap(indices, size, message).reshape(-1)
    grid = np.indices(indices.shape).reshape(indices.ndim, -1)
    where = tuple(idx if a == axis else grid[a] for a in range(x.ndim))
    return _scatter(x.copy(), where, updates.reshape(-1), op.attr("reduction"))


@kernel(g.ScatterNDOp)
def _scatter_nd(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, indices, updates = args
    k = indices.shape[-1]
    where = tuple(t.reshape(-1) for t in _nd_tuples("ScatterND", indices, x.shape, 0))
    rows = updates.reshape(-1, *x.shape[k:])
    return _scatter(x.copy(), where, rows, op.attr("reduction"))


@kernel(g.TriluOp)
def _trilu(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, k = args
    k = int(k.reshape(-1)[0])
    return np.triu(x, k) if op.attr("upper") else np.tril(x, k)


@kernel(g.OneHotOp)
def _one_hot(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    indices, values = args
    depth, values = op.attr("depth"), values.reshape(-1)
    axis = g.normalize_axis(op.attr("axis"), indices.ndim + 1)
    wrapped = np.where(indices < 0, indices + depth, indices)
    at = np.expand_dims(wrapped, axis)
    positions = np.arange(depth).reshape([-1 if d == axis else 1
                                          for d in range(indices.ndim + 1)])
    return np.where(at == positions, values[1], values[0]).astype(values.dtype)


@kernel(g.ReverseSequenceOp)
def _reverse_sequence(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, lens = args
    b_axis, t_axis = op.attr("batch_axis"), op.attr("time_axis")
    steps = x.shape[t_axis]
    out = x.copy()
    for b, n in enumerate(lens.astype(np.int64)):
        if not 0 <= n <= steps:
            raise SmeltError(g.reverse_message(steps))
        src = np.take(x, b, axis=b_axis)  # time is now axis 0
        dst = np.take(out, b, axis=b_axis)
        dst[:n] = src[:n][::-1]
        if b_axis == 0:
            out[b] = dst
        else:
            out[:, b] = dst
    return out
