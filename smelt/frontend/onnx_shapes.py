"""ONNX handlers of the data-movement ops: reshapes, transpose, concat, split,
slice, gather and pad (listed in `frontend/handlers.py`).

Every reshape-like op (Reshape, Flatten, Squeeze, Unsqueeze) becomes `graph.reshape`;
Slice bounds are normalized; negative pads become a slice before the pad.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import graph as g
from smelt.dialects.symbolic_bounds import interval
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_loop_index import slice_by_counter
from smelt.frontend.onnx_ops import axes_input, axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register


def reshape_target(
    ctx: NodeContext, src: Sequence[int], spec: Sequence[int]
) -> list[int]:
    """ONNX Reshape's output shape: 0 copies the input dim (unless allowzero), one -1
    is inferred. A symbolic entry of `spec` (a shape computed from `Shape`) must
    be >= 1 for every value of its symbols."""
    allowzero = ctx.attr("allowzero", 0)
    for d in spec:
        if isinstance(d, g.Dim) and interval(d)[0] < 1:
            raise g.SymbolicDimError(
                f"{ctx.label}: its target shape entry '{d}' may be 0 or negative "
                "for some values of its symbols; fix them with input_shapes="
            )
    out = [src[i] if d == 0 and not allowzero and i < len(src) else d
           for i, d in enumerate(spec)]  # fmt: skip
    total, known = math.prod(src), math.prod(d for d in out if d != -1)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ctx.invalid(
            f"target shape {g.shape_str(spec)} may hold one -1 at most and no other "
            "negative dim"
        )
    if -1 in out:
        if known == 0 or total % known:
            raise ctx.invalid(
                f"cannot reshape {g.shape_str(src)} to {g.shape_str(spec)}"
            )
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        if any(isinstance(d, g.Dim) for d in (*src, *out)):  # for one value only
            raise g.SymbolicDimError(
                f"{ctx.label}: cannot reshape {g.shape_str(src)} to "
                f"{g.shape_str(spec)} "
                "for every value of its symbolic dims (the target fixes the element "
                "count); fix them with input_shapes="
            )
        raise ctx.invalid(
            f"cannot reshape {list(src)} to {list(spec)}: the element counts differ"
        )
    return out


@handles("Reshape")
def _reshape(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    spec = ctx.attr("shape") if ctx.opset < 5 else ctx.const(1, "shape")
    target = reshape_target(ctx, shape_of(x), dims_of(np.reshape(spec, -1)))
    return [ctx.reshape(x, target)]


def dims_of(values) -> list:
    """The entries of a shape operand: ints, and the symbolic dims of a shape
    value computed from `Shape` (`onnx_dims`)."""
    return [d if isinstance(d, g.Dim) else int(d) for d in values]


@handles("Flatten")
def _flatten(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axis = ctx.attr("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise ctx.invalid(
            f"axis {axis} is out of range (expected {-len(shape)} to {len(shape)})"
        )
    axis += len(shape) if axis < 0 else 0
    return [ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@handles("Unsqueeze")
def _unsqueeze(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = list(shape_of(x))
    axes = axes_input(ctx, 13) or []
    rank = len(shape) + len(axes)
    normalized = [axis_of(ctx, a, rank) for a in axes]
    if len(set(normalized)) < len(axes):
        raise ctx.invalid(
            f"axes {axes} name an output axis more than once; each must be "
            f"distinct in [-{rank}, {rank - 1}]"
        )
    for a in sorted(normalized):
        shape.insert(a, 1)
    return [ctx.reshape(x, shape)]


@handles("Squeeze")
def _squeeze(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axes = axes_input(ctx, 13)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {axis_of(ctx, a, len(shape)) for a in axes}
        if any(shape[a] != 1 for a in drop):
            raise ctx.invalid(
                f"axes {axes} must name dims of extent 1 (input {list(shape)})"
            )
    return [ctx.reshape(x, [d for i, d in enumerate(shape) if i not in drop])]


@handles("Expand")
def _expand(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    spec = dims_of(ctx.const(1, "shape").reshape(-1))
    try:
        shape = g.broadcast_shapes(shape_of(x), tuple(spec))
    except VerifyException:
        raise ctx.invalid(
            f"cannot expand {list(shape_of(x))} to {spec}: they must broadcast"
        ) from None
    return ctx.emit(g.ExpandOp, [x], shape=expand_attr(ctx, shape_of(x), shape))


def expand_attr(ctx: NodeContext, src: Sequence, shape: Sequence) -> list[int]:
    """graph.expand's `shape` for the broadcast result `shape` of `src`: a
    symbolic dim is kept by broadcasting 1 against the input's own dim; one the
    input does not have (it has 1 there) cannot be written yet: refused."""
    pad = len(shape) - len(src)
    out = []
    for i, d in enumerate(shape):
        if isinstance(d, g.Dim):
            if i < pad or src[i - pad] != d:
                raise g.SymbolicDimError(
                    f"{ctx.label}: expanding {g.shape_str(src)} to "
                    f"{g.shape_str(shape)} makes a symbolic dim ('{d}') that the "
                    "input does not have, which graph.expand cannot write yet; fix "
                    "it with input_shapes="
                )
            d = 1
        out.append(d)
    return out


@handles("Transpose")
def _transpose(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    rank = len(shape_of(x))
    perm = list(ctx.attr("perm", list(range(rank))[::-1]))
    if sorted(perm) != list(range(rank)):  # no negative entries (onnxruntime)
        raise ctx.invalid(
            f"perm {perm} must be a permutation of 0..{rank - 1} (the input's rank "
            f"is {rank}): each axis once, no negative entries"
        )
    return ctx.emit(g.TransposeOp, [x], perm=perm)


@handles("Concat")
def _concat(ctx: NodeContext) -> list[Value]:
    values = [v for v in ctx.inputs if v is not None]
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(values[0])))
    return ctx.emit(g.ConcatOp, values, axis=axis)


@handles("Split")
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape))
    n, dim = len(ctx.node.output), shape[axis]
    sizes = ctx.attr("split") if ctx.opset < 13 else ctx.const(1, "split")
    if sizes is not None:
        sizes = [int(s) for s in np.reshape(sizes, -1)]
        if any(s < 0 for s in sizes) or sum(sizes) != dim or len(sizes) != n:
            raise ctx.invalid(
                f"split {sizes} must hold one size per output ({n}), none "
                f"negative, summing to the extent {dim} of axis {axis}"
            )
    elif ctx.attr("num_outputs") is not None:
        n = ctx.attr("num_outputs")
        chunk = -(-dim // n) if n > 0 else 0  # the last one is smaller, or 0
        if n < 1 or n != len(ctx.node.output) or chunk * (n - 1) > dim:
            raise ctx.invalid(
                f"num_outputs {n} must equal the node's {len(ctx.node.output)} "
                f"outputs and split the extent {dim} of axis {axis} into chunks "
                f"of {chunk} and a last one that is smaller, not negative"
            )
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    elif dim % n == 0:
        sizes = [dim // n] * n
    else:
        raise SmeltError(f"{ctx.label}: cannot split {dim} into {n} equal parts")
    return ctx.emit(g.SplitOp, [x], axis=axis, sizes=sizes)


def slice_bounds(
    ctx: NodeContext, shape: Sequence[int], starts, ends, axes, steps
) -> dict[str, list[int]]:
    """ONNX Slice's starts/ends/axes/steps, normalized for `graph.slice` (kept as
    ONNX gives them on a symbolic axis: `graph.slice` normalizes those)."""
    rank = len(shape)
    axes = range(rank) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.invalid(
            f"starts, ends, axes and steps have {len(starts)}, {len(ends)}, "
            f"{len(axes)} and {len(steps)} entries; they must have as many"
        )
    out = {"starts": [0] * rank, "ends": list(shape), "steps": [1] * rank}
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = axis_of(ctx, int(axis), rank)
        dim, step = shape[a], int(step)
        if isinstance(end, g.Dim) and end == dim and step > 0:  # x[:, :x.shape[1]]
            end = _INT64_MAX
        for name, bound in (("start", start), ("end", end)):
            if isinstance(bound, g.Dim):
                raise g.SymbolicDimError(
                    f"{ctx.label}: its {name} on axis {a} (extent {dim}) is the "
                    f"symbolic '{bound}', which graph.slice cannot take yet; fix "
                    "its dims with input_shapes="
                )
        start, end = int(start), int(end)
        if step == 0 or a in seen:
            raise ctx.invalid(
                f"axis {axis} has step 0 or is named twice; steps must be non-zero "
                "and axes distinct"
            )
        seen.add(a)
        if not isinstance(dim, g.Dim):  # a symbolic axis keeps ONNX's bounds
            start, end = g.clamp_slice(start, end, step, dim)
        out["starts"][a], out["ends"][a], out["steps"][a] = start, end, step
    for a, dim in enumerate(shape):  # the whole of an unsliced symbolic axis
        if isinstance(dim, g.Dim) and a not in seen:
            out["ends"][a] = _INT64_MAX
    return out


_INT64_MAX = (1 << 63) - 1


@handles("Slice")
def _slice(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    if ctx.opset < 10:
        args = [ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None]
    else:
        if not all(isinstance(ctx.input(i), Const | None) for i in (1, 2)):
            sliced = slice_by_counter(ctx)  # x[i:i+1] in a loop body
            if sliced is not None:
                return sliced
        names = ("starts", "ends", "axes", "steps")
        args = [ctx.const(i + 1, n) for i, n in enumerate(names)]
        args = [None if a is None else a.reshape(-1).tolist() for a in args]
    return ctx.emit(g.SliceOp, [x], **slice_bounds(ctx, shape_of(x), *args))


@handles("Gather")
def _gather(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.inputs[:2]
    if not shape_of(x):
        raise SmeltError(f"{ctx.label}: gathers from a scalar; data needs rank >= 1")
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return ctx.emit(g.GatherOp, [x, indices], axis=axis)


@handles("Pad")
def _pad(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    rank, dtype = len(shape), numpy_type_of(x)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.unsupported(f"Pad mode '{mode}' is not supported")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads", ctx.attr("paddings")))
        value: Value = Const(np.array(ctx.attr("value", 0.0), dtype))
    else:
        pads = ctx.const(1, "pads").reshape(-1).tolist()
        given = ctx.input(2)
        value = given if given is not None else Const(np.zeros((), dtype))
        axes = ctx.const(3, "axes") if ctx.opset >= 18 else None
        if axes is not None:
            axes = [axis_of(ctx, int(a), rank) for a in axes.reshape(-1)]
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise ctx.invalid(
            f"pads has {len(pads)} values; a rank-{rank} input needs {2 * rank}"
        )
    _check_pad_extents(ctx, shape, pads, mode)
    if any(p < 0 for p in pads):  # negative pads crop: a slice, then the pad
        x, pads = _crop(ctx, x, shape, pads)
    return ctx.emit(g.PadOp, [x, value], pads=pads, mode=mode)


def _check_pad_extents(
    ctx: NodeContext, shape: Sequence[int], pads: Sequence[int], mode: str
) -> None:
    """Refuses pads that leave a negative extent, or (modes other than constant)
    nothing to copy from on a padded axis: onnxruntime refuses both."""
    rank = len(shape)
    for a, dim in enumerate(shape):
        begin, end = pads[a], pads[a + rank]
        if dim + begin + end < 0:
            raise ctx.invalid(
                f"pads {list(pads)} leave axis {a} (extent {dim}) an extent of "
                f"{dim + begin + end}; negative pads may crop at most the whole axis"
            )
        kept = dim + min(begin, 0) + min(end, 0)
        if mode != "constant" and (begin or end) and kept <= 0:
            raise ctx.invalid(
                f"pads {list(pads)} crop axis {a} (extent {dim}) to nothing, so "
                f"mode '{mode}' has no cell to copy; it needs at least one left"
            )


def _crop(
    ctx: NodeContext, x: Value, shape: Sequence[int], pads: Sequence[int]
) -> tuple[Value, list[int]]:
    """Negative pads as a slice of `x` and the non-negative pads that remain.

    The output of an axis of extent n is the interval [-begin, n + end) of the
    input extended by padding on both sides: the part inside [0, n) is sliced,
    the rest padded (a crop past the far end eats into that end's padding)."""
    rank = len(shape)
    starts, ends, rest = [], [], [0] * (2 * rank)
    for a, dim in enumerate(shape):
        lo, hi = -pads[a], dim + pads[a + rank]
        start = min(max(lo, 0), dim)
        starts.append(start)
        ends.append(max(min(max(hi, 0), dim), start))
        rest[a] = max(0, min(hi, 0) - lo)
        rest[a + rank] = max(0, hi - max(lo, dim))
    x = ctx.emit(g.SliceOp, [x], starts=starts, ends=ends, steps=[1] * rank)[0]
    return x, rest
