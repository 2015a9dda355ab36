"""Lowerings of the index-driven graph ops (graph_index.py): gathers and scatters by
elements and by index tuples, one-hot, trilu and reverse_sequence.

Every run-time index goes through `checked_index` (a `loop.check`, then a clamp), so
no access leaves its buffer. A scatter copies its input, then applies the updates in
a nest of `reduction` loops: in order (the last duplicate wins) and on one thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph, loop
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import Index, KernelBuilder, element_type, shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import checked_index, copy_nest
from smelt.lowering.scalar_ops import Arith

COMBINE: dict[str, Callable[[Arith, SSAValue, SSAValue], SSAValue]] = {
    "add": Arith.add,
    "mul": Arith.mul,
    "max": Arith.max,
    "min": Arith.min,
}


def _nonempty(op: Operation, size: int, dim: int, out_shape: Sequence[int]) -> None:
    if size == 0 and 0 not in out_shape:
        raise SmeltError(f"{op.name}: indexes dim {dim}, which is empty")


def _along(ivs: Sequence[Index], axis: int, index: Index) -> list[Index]:
    return [*ivs[:axis], index, *ivs[axis + 1 :]]


# --- gathers ------------------------------------------------------------------------


def lower_gather_elements(ctx: LoweringContext, op: graph.GatherElementsOp) -> None:
    k = ctx.op_kernel(op)
    (src, indices), (dst,) = k.inputs, k.outputs
    axis = op.attr("axis")
    size = shape(src)[axis]
    _nonempty(op, size, axis, shape(dst))
    message = graph.axis_index_message("GatherElements", axis, shape(src), size)

    def src_index(ivs: list[Index]) -> list[Index]:
        return _along(ivs, axis, checked_index(k, k.load(indices, ivs), size, message))

    copy_nest(k, src, dst, shape(dst), src_index)


def _tuple_index(
    k: KernelBuilder,
    name: str,
    indices: SSAValue,
    at: Sequence[Index],
    data_shape: Sequence[int],
    first: int,
) -> list[Index]:
    """The checked index tuple indices[at, :] into dims first.. of data_shape."""
    out = []
    for j in range(shape(indices)[-1]):
        size = data_shape[first + j]
        message = graph.nd_index_message(name, first + j, data_shape, size)
        raw = k.load(indices, [*at, k.index(j)])
        out.append(checked_index(k, raw, size, message))
    return out


def lower_gather_nd(ctx: LoweringContext, op: graph.GatherNDOp) -> None:
    k = ctx.op_kernel(op)
    (src, indices), (dst,) = k.inputs, k.outputs
    b, data_shape = op.attr("batch_dims"), shape(src)
    q, depth = len(shape(indices)) - 1, shape(indices)[-1]
    for j in range(depth):
        _nonempty(op, data_shape[b + j], b + j, shape(dst))

    def src_index(ivs: list[Index]) -> list[Index]:
        tuple_ = _tuple_index(k, "GatherND", indices, ivs[:q], data_shape, b)
        return [*ivs[:b], *tuple_, *ivs[q:]]

    copy_nest(k, src, dst, shape(dst), src_index)


# --- scatters -----------------------------------------------------------------------


def _update(
    k: KernelBuilder,
    reduction: str,
    arith_: Arith,
    dst: SSAValue,
    at: list[Index],
    updates: SSAValue,
    from_: list[Index],
) -> None:
    """dst[at] = updates[from_], or dst[at] (op)= updates[from_]."""
    if reduction == "none":
        k.store(k.load(updates, from_), dst, at)
        return
    old, new = k.load_value(dst, at), k.load_value(updates, from_)
    k.store_value(COMBINE[reduction](arith_, old, new), dst, at)


def lower_scatter_elements(ctx: LoweringContext, op: graph.ScatterElementsOp) -> None:
    k = ctx.op_kernel(op)
    (src, indices, updates), (dst,) = k.inputs, k.outputs
    axis, reduction = op.attr("axis"), op.attr("reduction")
    size = shape(src)[axis]
    _nonempty(op, size, axis, shape(indices))
    message = graph.axis_index_message("ScatterElements", axis, shape(src), size)
    arith_ = Arith(k, graph.element_type_of(op.input))
    copy_nest(k, src, dst, shape(dst), lambda ivs: ivs)
    with k.nest(shape(indices), loop.REDUCTION) as ivs:
        index = checked_index(k, k.load(indices, ivs), size, message)
        _update(k, reduction, arith_, dst, _along(ivs, axis, index), updates, ivs)


def lower_scatter_nd(ctx: LoweringContext, op: graph.ScatterNDOp) -> None:
    k = ctx.op_kernel(op)
    (src, indices, updates), (dst,) = k.inputs, k.outputs
    data_shape, reduction = shape(src), op.attr("reduction")
    depth = shape(indices)[-1]
    for j in range(depth):
        _nonempty(op, data_shape[j], j, shape(updates))
    arith_ = Arith(k, graph.element_type_of(op.input))
    copy_nest(k, src, dst, shape(dst), lambda ivs: ivs)
    with k.nest(shape(indices)[:-1], loop.REDUCTION) as ivs:
        tuple_ = _tuple_index(k, "ScatterND", indices, ivs, data_shape, 0)
        with k.nest(data_shape[depth:], loop.REDUCTION) as rest:
            at, from_ = [*tuple_, *rest], [*ivs, *rest]
            _update(k, reduction, arith_, dst, at, updates, from_)


# --- positions ----------------------------------------------------------------------


def _as_index(k: KernelBuilder, value: SSAValue, graph_type) -> Index:
    """An integer value as `index` (unsigned types zero-extended first)."""
    if graph.dtypes.is_unsigned(graph_type) or graph_type == graph.dtypes.i1:
        value = k.op(arith.ExtUIOp, value, IntegerType(64))
    return k.op(arith.IndexCastOp, value, IndexType())


def lower_trilu(ctx: LoweringContext, op: graph.TriluOp) -> None:
    k = ctx.op_kernel(op)
    (src, kbuf), (dst,) = k.inputs, k.outputs
    raw = k.load(kbuf, [k.index(0)] * len(shape(kbuf)))
    diagonal = _as_index(k, raw, graph.dtypes.i64)
    storage = element_type(dst)
    zero = k.constant(0.0 if not isinstance(storage, IntegerType) else 0, storage)
    keep_when = "sge" if op.attr("upper") else "sle"
    with k.nest(shape(dst)) as ivs:
        offset = k.op(arith.SubiOp, ivs[-1], ivs[-2])  # col - row
        keep = k.op(arith.CmpiOp, offset, diagonal, keep_when)
        value = k.op(arith.SelectOp, keep, k.load(src, ivs), zero)
        k.store(value, dst, ivs)


def lower_one_hot(ctx: LoweringContext, op: graph.OneHotOp) -> None:
    k = ctx.op_kernel(op)
    (indices, values), (dst,) = k.inputs, k.outputs
    axis, depth = op.attr("axis"), op.attr("depth")
    index_type = graph.element_type_of(op.indices)
    a = Arith(k, index_type)
    flat = [[k.index(p) for p in _unravel(j, shape(values))] for j in range(2)]
    off, on = (k.load(values, at) for at in flat)
    with k.nest(shape(dst)) as ivs:
        position, x = ivs[axis], k.load_value(indices, ivs[:axis] + ivs[axis + 1 :])
        if a.is_float:  # compared as floats (a fractional index matches nothing)
            wrapped = a.select(a.cmp("lt", x, a.zero()), a.add(x, a.const(depth)), x)
            wide = k.op(arith.IndexCastOp, position, IntegerType(64))
            hit = a.cmp("eq", wrapped, k.op(arith.SIToFPOp, wide, a.type))
        else:
            raw = _as_index(k, x, index_type)
            wrapped = k.op(arith.AddiOp, raw, k.index(depth))
            raw = k.op(arith.SelectOp, k.cmp_index(raw, "slt", 0), wrapped, raw)
            hit = k.op(arith.CmpiOp, raw, position, "eq")
        k.store(k.op(arith.SelectOp, hit, on, off), dst, ivs)


def _unravel(flat: int, dims: Sequence[int]) -> list[int]:
    out = []
    for d in reversed(dims):
        out.append(flat % d)
        flat //= d
    return out[::-1]


def lower_reverse_sequence(ctx: LoweringContext, op: graph.ReverseSequenceOp) -> None:
    k = ctx.op_kernel(op)
    (src, lens), (dst,) = k.inputs, k.outputs
    b_axis, t_axis = op.attr("batch_axis"), op.attr("time_axis")
    steps = shape(src)[t_axis]
    message = graph.reverse_message(steps)
    lens_type = graph.element_type_of(op.lens)

    def src_index(ivs: list[Index]) -> list[Index]:
        t = ivs[t_axis]
        n = _as_index(k, k.load(lens, [ivs[b_axis]]), lens_type)
        k.check(k.in_range(n, 0, steps + 1), message)
        reversed_ = k.affine([(n, 1), (t, -1)], -1)  # n - 1 - t
        index = k.op(arith.SelectOp, k.cmp_index(t, "slt", n), reversed_, t)
        return _along(ivs, t_axis, k.clamp(index, 0, steps - 1))

    copy_nest(k, src, dst, shape(dst), src_index)


LOWERINGS: dict[type[Operation], Callable] = {
    graph.GatherElementsOp: lower_gather_elements,
    graph.GatherNDOp: lower_gather_nd,
    graph.ScatterElementsOp: lower_scatter_elements,
    graph.ScatterNDOp: lower_scatter_nd,
    graph.TriluOp: lower_trilu,
    graph.OneHotOp: lower_one_hot,
    graph.ReverseSequenceOp: lower_reverse_sequence,
}
