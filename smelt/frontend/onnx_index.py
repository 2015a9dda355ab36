"""ONNX handlers of the indexing ops: GatherElements, GatherND, Scatter(Elements/ND),
TensorScatter, MaxUnpool, Trilu, OneHot, ReverseSequence (graph_index ops); Tile,
DepthToSpace, SpaceToDepth (reshapes, expands and transposes); EyeLike, Range, Size
(constants); Compress, NonZero, Unique (data-dependent shapes: folded when their
input is a constant, refused otherwise); NonMaxSuppression (refused: its output
length is decided at run time). Listed in `frontend/handlers.py`.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend import onnx_dims
from smelt.frontend.onnx import (
    Const,
    DimArray,
    NodeContext,
    Value,
    element_type,
    numpy_type_of,
    shape_of,
)
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

_STATIC = "smelt compiles static shapes"

# --- gathers and scatters (indices at run time) -------------------------------------


@handles("GatherElements")
def _gather_elements(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.inputs[:2]
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return ctx.emit(g.GatherElementsOp, [x, indices], axis=axis)


@handles("GatherND")
def _gather_nd(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.inputs[:2]
    return ctx.emit(g.GatherNDOp, [x, indices], batch_dims=ctx.attr("batch_dims", 0))


def _reduction(ctx: NodeContext) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in g.SCATTER_REDUCTIONS:
        raise ctx.unsupported(f"scatter reduction '{reduction}' is not supported")
    return reduction


@handles("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeContext) -> list[Value]:
    x, indices, updates = ctx.inputs[:3]
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return ctx.emit(
        g.ScatterElementsOp, [x, indices, updates], axis=axis,
        reduction=_reduction(ctx),
    )  # fmt: skip


@handles("ScatterND")
def _scatter_nd(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.ScatterNDOp, ctx.inputs[:3], reduction=_reduction(ctx))


@handles("TensorScatter")
def _tensor_scatter(ctx: NodeContext) -> list[Value]:
    """A KV-cache write: update's rows along `axis` go to rows write_indices[b] +
    j (mod the cache length, circular) of each batch's cache; a ScatterElements
    with those rows as indices."""
    past, update, where = ctx.inputs[0], ctx.inputs[1], ctx.input(2)
    shape, ushape = shape_of(past), shape_of(update)
    rank = len(shape)
    axis = axis_of(ctx, ctx.attr("axis", -2), rank)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise SmeltError(f"{ctx.label}: unknown mode '{mode}'")
    if (
        axis == 0 or len(ushape) != rank or ushape[axis] > shape[axis]
        or any(u != d for i, (u, d) in enumerate(zip(ushape, shape)) if i != axis)
    ):  # fmt: skip
        raise SmeltError(
            f"{ctx.label}: update {list(ushape)} does not fit the cache {list(shape)} "
            f"along axis {axis} (not the batch axis)"
        )
    batch, length = shape[0], ushape[axis]
    if where is None:
        where = Const(np.zeros(batch, np.int64))
    elif shape_of(where) != (batch,):
        raise SmeltError(f"{ctx.label}: write_indices must have shape ({batch},)")
    along = [1] * rank
    along[axis] = length
    start = ctx.reshape(where, (batch, *[1] * (rank - 1)))
    rows = ctx.emit(g.AddOp, [start, Const(np.arange(length).reshape(along))])[0]
    if mode == "circular":
        size = Const(np.array(shape[axis], np.int64))
        rows = ctx.emit(g.ModOp, [rows, size], fmod=0)[0]
    rows = ctx.emit(g.ExpandOp, [rows], shape=list(ushape))[0]
    return ctx.emit(
        g.ScatterElementsOp, [past, rows, update], axis=axis, reduction="none"
    )


@handles("MaxUnpool")
def _max_unpool(ctx: NodeContext) -> list[Value]:
    """Each value of X written at its flat index (MaxPool's Indices output) into
    zeros of the unpooled shape (a ScatterElements on the flattened tensor)."""
    x, indices = ctx.inputs[:2]
    shape = shape_of(x)
    k = len(shape) - 2
    kernel = list(ctx.attr("kernel_shape", []))
    strides = list(ctx.attr("strides", [1] * k))
    pads = list(ctx.attr("pads", [0] * 2 * k))
    if k < 1 or len(kernel) != k or len(strides) != k or len(pads) != 2 * k:
        raise SmeltError(
            f"{ctx.label}: kernel_shape {kernel}, strides {strides} and pads {pads} "
            f"do not fit X of shape {list(shape)}"
        )
    if shape_of(indices) != shape:
        raise SmeltError(f"{ctx.label}: I must have X's shape {list(shape)}")
    full = [*shape[:2]] + [
        (shape[2 + d] - 1) * strides[d] - pads[d] - pads[d + k] + kernel[d]
        for d in range(k)
    ]
    given = ctx.const(2, "output_shape (it decides the output shape)")
    out = full if given is None else [int(v) for v in given.reshape(-1)]
    if min(full) < 1:
        raise SmeltError(f"{ctx.label}: the unpooled shape {full} is empty")
    if out != full:
        raise ctx.unsupported(
            f"MaxUnpool to an output_shape {out} other than the unpooled shape "
            f"{full} is not supported: onnx's reference reads the indices in the "
            "unpooled shape and pads, onnxruntime and PyTorch read them in "
            "output_shape; smelt does not pick one"
        )
    zero = Const(np.zeros((1,), numpy_type_of(x)))
    total = math.prod(full)
    y = ctx.emit(g.ExpandOp, [zero], shape=[total])[0]
    flat = ctx.reshape(indices, (math.prod(shape),))
    values = ctx.reshape(x, (math.prod(shape),))
    y = ctx.emit(
        g.ScatterElementsOp, [y, flat, values], axis=0, reduction="none"
    )[0]
    return [ctx.reshape(y, full)]


# --- positions ----------------------------------------------------------------------


@handles("Trilu")
def _trilu(ctx: NodeContext) -> list[Value]:
    x, k = ctx.inputs[0], ctx.input(1)
    if k is None:
        k = Const(np.zeros((), np.int64))
    elif math.prod(shape_of(k)) != 1:
        raise SmeltError(f"{ctx.label}: k must hold one element")
    return ctx.emit(g.TriluOp, [x, k], upper=int(ctx.attr("upper", 1)))


@handles("OneHot")
def _one_hot(ctx: NodeContext) -> list[Value]:
    indices, values = ctx.inputs[0], ctx.inputs[2]
    depth = ctx.const(1, "depth (it decides the output shape)").reshape(-1)
    if depth.size != 1:
        raise SmeltError(f"{ctx.label}: depth must hold one element")
    axis = axis_of(ctx, ctx.attr("axis", -1), len(shape_of(indices)) + 1)
    return ctx.emit(g.OneHotOp, [indices, values], depth=int(depth[0]), axis=axis)


@handles("ReverseSequence")
def _reverse_sequence(ctx: NodeContext) -> list[Value]:
    x, lens = ctx.inputs[:2]
    rank = len(shape_of(x))
    batch = axis_of(ctx, ctx.attr("batch_axis", 1), rank)
    time = axis_of(ctx, ctx.attr("time_axis", 0), rank)
    return ctx.emit(
        g.ReverseSequenceOp, [x, lens], batch_axis=batch, time_axis=time
    )


# --- copies made of reshapes, expands and transposes --------------------------------


@handles("Tile")
def _tile(ctx: NodeContext) -> list[Value]:
    """x tiled r times along a dim of size d: reshape to (1, d), expand to (r, d),
    reshape to (r * d)."""
    x = ctx.inputs[0]
    shape = shape_of(x)
    repeats = [int(r) for r in ctx.const(1, "repeats").reshape(-1)]
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ctx.invalid(
            f"repeats {repeats} must hold {len(shape)} values (one per input dim), "
            "none negative"
        )
    if all(r == 1 for r in repeats):
        return [x]
    split, expanded = [], []
    for d, r in zip(shape, repeats):
        split += [1, d] if r != 1 else [d]
        expanded += [r, d] if r != 1 else [d]
    y = ctx.emit(g.ExpandOp, [ctx.reshape(x, split)], shape=expanded)[0]
    return [ctx.reshape(y, [d * r for d, r in zip(shape, repeats)])]


def _blocks(ctx: NodeContext) -> tuple[tuple[int, ...], int, str]:
    x = ctx.inputs[0]
    shape, bs = shape_of(x), int(ctx.attr("blocksize", 0))
    mode = ctx.attr("mode", "DCR")
    if len(shape) != 4 or bs <= 0:
        raise SmeltError(f"{ctx.label}: needs a 4-D input and a positive blocksize")
    if mode not in ("DCR", "CRD"):
        raise SmeltError(f"{ctx.label}: mode '{mode}' is not DCR or CRD")
    return shape, bs, mode


@handles("DepthToSpace")
def _depth_to_space(ctx: NodeContext) -> list[Value]:
    (n, c, h, w), bs, mode = _blocks(ctx)
    if c % (bs * bs):
        raise ctx.invalid(
            f"the input's {c} channels must be a multiple of blocksize squared "
            f"({bs}x{bs})"
        )
    c2 = c // (bs * bs)
    if mode == "DCR":
        split, perm = (n, bs, bs, c2, h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c2, bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    y = ctx.emit(g.TransposeOp, [ctx.reshape(ctx.inputs[0], split)], perm=perm)[0]
    return [ctx.reshape(y, (n, c2, h * bs, w * bs))]


@handles("SpaceToDepth")
def _space_to_depth(ctx: NodeContext) -> list[Value]:
    (n, c, h, w), bs, mode = _blocks(ctx)
    if h % bs or w % bs:
        raise ctx.invalid(
            f"the input's {h}x{w} must split into blocksize {bs}x{bs} blocks"
        )
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    split = (n, c, h // bs, bs, w // bs, bs)
    y = ctx.emit(g.TransposeOp, [ctx.reshape(ctx.inputs[0], split)], perm=perm)[0]
    return [ctx.reshape(y, (n, c * bs * bs, h // bs, w // bs))]


# --- constants: they depend on shapes only, or their inputs decide a shape ----------


@handles("EyeLike")
def _eye_like(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    if len(shape) != 2:
        raise SmeltError(f"{ctx.label}: needs a 2-D input, got shape {list(shape)}")
    dtype = ctx.attr("dtype")
    if dtype:
        np_type = g.dtypes.to_numpy(element_type(dtype, f"{ctx.label}: 'dtype'"))
    else:
        np_type = x.array.dtype if isinstance(x, Const) else g.dtypes.to_numpy(
            g.element_type_of(x)
        )
    ctx.check_size(shape, np_type)
    return [Const(np.eye(shape[0], shape[1], int(ctx.attr("k", 0)), dtype=np_type))]


@handles("Range")
def _range(ctx: NodeContext) -> list[Value]:
    what = "{} (the inputs of Range decide its length; " + _STATIC + ")"
    for i, name in enumerate(("start", "limit", "delta")):
        v = ctx.input(i)
        if isinstance(v, DimArray):
            raise g.SymbolicDimError(
                f"{ctx.label}: its {name} is {v.text()}, so its length is "
                "symbolic, and the graph has no run-time Range yet; fix the dims "
                "with input_shapes="
            )
    start, limit, delta = (
        ctx.const(i, what.format(n)).reshape(-1)[0]
        for i, n in enumerate(("start", "limit", "delta"))
    )
    dtype = start.dtype
    if delta == 0:
        raise ctx.invalid("delta is 0; it must be non-zero")
    if dtype in (np.float16, ml_dtypes.bfloat16):  # stash_type: f32 (1) or f64 (11)
        wide = np.float64 if ctx.attr("stash_type", 1) == 11 else np.float32
        start, limit, delta = (wide(v) for v in (start, limit, delta))
    with np.errstate(all="ignore"):
        length = (float(limit) - float(start)) / float(delta)
    if not math.isfinite(length):
        raise SmeltError(
            f"{ctx.label}: start {start}, limit {limit} and delta {delta} give no "
            "finite length"
        )
    ctx.check_size([max(math.ceil(length), 0)], dtype)
    values = np.arange(start, limit, delta, dtype=start.dtype)
    return [Const(values.astype(dtype))]


@handles("Size")
def _size(ctx: NodeContext) -> list[Value]:
    size = math.prod(shape_of(ctx.inputs[0]))
    return [onnx_dims.make(onnx_dims.objects([size], ()))]


# --- data-dependent output shapes ---------------------------------------------------


def _dynamic(ctx: NodeContext, what: str, folds: bool = True) -> SmeltError:
    return ctx.unsupported(
        f"{ctx.node.op_type} is not supported here: its output shape depends on the "
        f"values of its {what}; {_STATIC}"
        + (" (it folds when they are constants)" if folds else "")
    )


@handles("Compress")
def _compress(ctx: NodeContext) -> list[Value]:
    x, condition = ctx.inputs[:2]
    if not isinstance(condition, Const):
        raise _dynamic(ctx, "condition input, computed at run time")
    axis = ctx.attr("axis")
    if axis is None:  # compress the flattened input
        x, axis = ctx.reshape(x, (math.prod(shape_of(x)),)), 0
    axis = axis_of(ctx, axis, len(shape_of(x)))
    keep = np.nonzero(condition.array.reshape(-1))[0]
    if keep.size and keep[-1] >= shape_of(x)[axis]:
        raise SmeltError(
            f"{ctx.label}: the condition selects index {keep[-1]} of an axis of "
            f"size {shape_of(x)[axis]}"
        )
    return ctx.emit(g.GatherOp, [x, Const(keep.astype(np.int64))], axis=axis)


@handles("NonZero")
def _non_zero(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    if not isinstance(x, Const):
        raise _dynamic(ctx, "input, computed at run time")
    return [Const(np.array(np.nonzero(x.array), np.int64).reshape(x.array.ndim, -1))]


@handles("Unique")
def _unique(ctx: NodeContext) -> list[Value]:
    raise _dynamic(ctx, "input", folds=False)


@handles("NonMaxSuppression")
def _non_max_suppression(ctx: NodeContext) -> list[Value]:
    raise ctx.unsupported(
        "NonMaxSuppression is not supported: the number of boxes it selects (its "
        "output's length) depends on the scores and boxes at run time; "
        f"{_STATIC}. Run it after the compiled model (e.g. with onnxruntime or "
        "torchvision.ops.nms), cutting the model before it"
    )
