"""Lowerings of data-movement graph ops: views, constants and index-mapped copies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph, loop
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import (
    TRANSPOSE_PATTERN,
    Index,
    KernelBuilder,
    mark_pattern,
    shape,
    tag_loops,
)
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import (
    broadcast_index,
    checked_index,
    copy_nest,
    offset_along,
)
from smelt.lowering.scalar_ops import memref_type

# --- no kernel: constants, views, aliases --------------------------------------------


def lower_constant(ctx: LoweringContext, op: graph.ConstantOp) -> None:
    t = memref_type(op.result.type)
    ctx.bind(op.result, ctx.emit(loop.ConstantOp(op.value, t)))


def lower_reshape(ctx: LoweringContext, op: graph.ReshapeOp) -> None:
    view = loop.ViewOp(ctx.buffer(op.input), memref_type(op.result.type))
    ctx.bind(op.result, ctx.emit(view))


def lower_bitcast(ctx: LoweringContext, op: graph.BitcastOp) -> None:
    """The same bytes typed as the result (a view: no kernel)."""
    view = loop.ViewOp(ctx.buffer(op.input), memref_type(op.result.type))
    ctx.bind(op.result, ctx.emit(view))


def lower_alias(ctx: LoweringContext, op: Operation) -> None:
    """Identity and dropout (inference): the result is the operand's buffer."""
    ctx.bind(op.results[0], ctx.buffer(op.operands[0]))


# --- copies -------------------------------------------------------------------------


def lower_expand(ctx: LoweringContext, op: graph.ExpandOp) -> None:
    k = ctx.op_kernel(op)
    (src,), (dst,) = k.inputs, k.outputs
    copy_nest(k, src, dst, shape(dst), lambda ivs: broadcast_index(k, ivs, shape(src)))


def lower_transpose(ctx: LoweringContext, op: graph.TransposeOp) -> None:
    k = ctx.op_kernel(op)
    (src,), (dst,) = k.inputs, k.outputs
    perm = op.attr("perm")

    source_dim = {p: i for i, p in enumerate(perm)}  # result dim i is source perm[i]
    with k.nest(shape(dst)) as ivs:
        # roles d0, d1, ... for loop-schedule, which tiles the two contiguous dims
        tag_loops(ivs, [f"d{i}" for i in range(len(ivs))])
        value = k.load(src, [ivs[source_dim[d]] for d in range(len(perm))])
        k.store(value, dst, ivs)
    if perm and perm[-1] != len(perm) - 1:
        mark_pattern(k, TRANSPOSE_PATTERN)


def lower_concat(ctx: LoweringContext, op: graph.ConcatOp) -> None:
    k = ctx.op_kernel(op)
    (dst,) = k.outputs
    axis = graph.normalize_axis(op.attr("axis"), len(shape(dst)))
    offset = 0
    for src in k.inputs:
        place = partial(offset_along, k, axis=axis, offset=offset)
        copy_nest(k, src, dst, shape(src), lambda ivs: ivs, place)
        offset += shape(src)[axis]


def lower_split(ctx: LoweringContext, op: graph.SplitOp) -> None:
    k = ctx.op_kernel(op)
    (src,) = k.inputs
    axis = graph.normalize_axis(op.attr("axis"), len(shape(src)))
    offset = 0
    for dst in k.outputs:
        place = partial(offset_along, k, axis=axis, offset=offset)
        copy_nest(k, src, dst, shape(dst), place)
        offset += shape(dst)[axis]


def lower_slice(ctx: LoweringContext, op: graph.SliceOp) -> None:
    k = ctx.op_kernel(op)
    (src,), (dst,) = k.inputs, k.outputs
    starts, steps = op.attr("starts"), op.attr("steps")
    for dim, (size, n, start, step) in enumerate(
        zip(shape(src), shape(dst), starts, steps)
    ):
        last = start + (n - 1) * step
        if n and not (0 <= start < size and 0 <= last < size):
            raise SmeltError(
                f"{op.name}: dim {dim} reads [{start}, {last}] outside [0, {size}); "
                "starts and ends must be normalized"
            )
    copy_nest(
        k,
        src,
        dst,
        shape(dst),
        lambda ivs: [k.affine([(iv, st)], s) for iv, st, s in zip(ivs, steps, starts)],
    )


def lower_gather(ctx: LoweringContext, op: graph.GatherOp) -> None:
    k = ctx.op_kernel(op)
    (src, indices), (dst,) = k.inputs, k.outputs
    axis = graph.normalize_axis(op.attr("axis"), len(shape(src)))
    size, rank = shape(src)[axis], len(shape(indices))
    if size == 0 and graph.shape_of(op.result).count(0) == 0:
        raise SmeltError(f"{op.name}: gathers from an empty axis {axis}")
    message = (
        f"Gather along axis {axis} of a {'x'.join(map(str, shape(src)))} tensor: "
        f"an index is out of range [-{size}, {size}); check the indices input"
    )
    if op.attr("what"):
        message = f"{op.attr('what')} is out of range [-{size}, {size})"

    def src_index(ivs: list[Index]) -> list[Index]:
        raw = k.load(indices, ivs[axis : axis + rank])
        index = checked_index(k, raw, size, message)
        return [*ivs[:axis], index, *ivs[axis + rank :]]

    copy_nest(k, src, dst, shape(dst), src_index)


def lower_pad(ctx: LoweringContext, op: graph.PadOp) -> None:
    mode = op.attr("mode")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise SmeltError(f"{op.name}: mode {mode!r} is not supported")
    in_shape = graph.shape_of(op.input)
    if mode != "constant" and 0 in in_shape and 0 not in graph.shape_of(op.result):
        raise SmeltError(f"{op.name}: mode {mode!r} cannot pad an empty tensor")
    k = ctx.op_kernel(op)
    (src, fill_buf), (dst,) = k.inputs, k.outputs
    fill = None
    if mode == "constant":
        fill = k.load(fill_buf, [k.index(0)] * len(graph.shape_of(op.value)))
    pad_nest(k, src, dst, op.attr("pads"), mode, fill)


def pad_nest(
    k: KernelBuilder,
    src: SSAValue,
    dst: SSAValue,
    pads: Sequence[int],
    mode: str = "constant",
    fill: SSAValue | None = None,
) -> None:
    """dst = src padded by `pads` (all begins, then all ends; negative ones crop);
    constant mode writes `fill` (raw storage type) outside the source."""
    in_shape, rank = shape(src), len(shape(src))
    if 0 in in_shape:  # nothing to read: all fill (or an empty result)
        if fill is not None:
            with k.nest(shape(dst)) as ivs:
                k.store(fill, dst, ivs)
        return
    with k.nest(shape(dst)) as ivs:
        index, valid = [], []
        for d, iv in enumerate(ivs):
            lo, hi, size = pads[d], pads[d + rank], in_shape[d]
            i, ok = _pad_index(
                k, mode, k.affine([(iv, 1)], -lo), size, lo > 0 or hi > 0
            )
            index.append(i)
            if ok is not None:
                valid.append(ok)
        value = k.load(src, index)
        cond = k.and_all(valid)
        if cond is not None and fill is not None:
            value = k.op(arith.SelectOp, cond, value, fill)
        k.store(value, dst, ivs)


def _pad_index(
    k: KernelBuilder, mode: str, i: Index, size: int, padded: bool
) -> tuple[Index, SSAValue | None]:
    """The in-bounds source index for position i (may be outside [0, size)) and, in
    constant mode, the condition that i is inside."""
    if not padded:
        return i, None  # negative or zero pads only crop: always inside
    if mode == "constant":
        return k.clamp(i, 0, size - 1), k.in_range(i, 0, size)
    if mode == "edge" or size == 1:
        return k.clamp(i, 0, size - 1), None
    if mode == "wrap":
        return k.positive_mod(i, size), None
    # reflect: period 2 * (size - 1), mirrored in its second half
    period = 2 * (size - 1)
    t = k.positive_mod(i, period)
    mirrored = k.affine([(t, -1)], period)
    return k.op(arith.SelectOp, k.cmp_index(t, "sge", size), mirrored, t), None


LOWERINGS: dict[type[Operation], Callable] = {
    graph.ConstantOp: lower_constant,
    graph.ReshapeOp: lower_reshape,
    graph.BitcastOp: lower_bitcast,
    graph.IdentityOp: lower_alias,
    graph.DropoutOp: lower_alias,
    graph.ExpandOp: lower_expand,
    graph.TransposeOp: lower_transpose,
    graph.ConcatOp: lower_concat,
    graph.SplitOp: lower_split,
    graph.SliceOp: lower_slice,
    graph.GatherOp: lower_gather,
    graph.PadOp: lower_pad,
}

