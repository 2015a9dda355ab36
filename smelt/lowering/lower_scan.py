"""Anchors of the ops that sweep one axis carrying state: arg_max / arg_min (best
value and its position), cum_sum / cum_prod (a running total written at every step)
and top_k (k selection sweeps, each finding the next element in sorted order)."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.loop_builder import Index, KernelBuilder
from smelt.lowering.lower_reduce import first_extreme
from smelt.lowering.scalar_ops import Arith

I64 = IntegerType(64)


def _along(op: graph.GraphOp) -> tuple[int, int, list[int]]:
    """(axis, its length, the other dims) of an op's input."""
    dims = graph.shape_of(op.operands[0])
    axis = graph.normalize_axis(op.attr("axis"), len(dims))
    return axis, dims[axis], [d for i, d in enumerate(dims) if i != axis]


def _as_i64(k: KernelBuilder, i: Index) -> SSAValue:
    return k.op(arith.IndexCastOp, i, I64)


def emit_arg_reduce(io: KernelIO, op: graph.ArgReduceOp) -> None:
    """Sweep carrying (best, position): the first extreme replaces best only when
    strictly better; the last one (select_last_index) when at least as good. A NaN
    is the extreme: the first NaN is kept, or, for the last, every NaN is taken."""
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    axis, n, others = _along(op)
    is_max = isinstance(op, graph.ArgMaxOp)
    last = bool(op.attr("select_last_index"))
    with k.nest(others) as ivs:

        def step(j: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            best, where = acc
            value = io.read(0, [*ivs[:axis], j[0], *ivs[axis:]])
            if not last:
                take = first_extreme(a, "gt" if is_max else "lt", value, best)
            else:  # value >= best (max) / value <= best (min), or value is NaN
                take = a.cmp("ge", value, best) if is_max else a.cmp("ge", best, value)
                if a.is_float:
                    take = k.op(arith.OrIOp, take, a.cmp("ne", value, value))
            position = _as_i64(k, j[0])
            return [a.select(take, value, best), a.select(take, position, where)]

        init = a.lowest() if is_max else a.highest()
        _, where = k.reduce([n], [init, k.constant(0, I64)], step)
        out = [*ivs[:axis], k.index(0), *ivs[axis:]] if op.attr("keepdims") else ivs
        io.write(0, where, out)


def emit_cumulative(io: KernelIO, op: graph.CumulativeOp) -> None:
    """A sequential sweep along `axis` (from its end when reverse) carrying the
    running total; each step writes the total before (exclusive) or after adding
    its element."""
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    axis, n, others = _along(op)
    is_sum = isinstance(op, graph.CumSumOp)
    reverse, exclusive = bool(op.attr("reverse")), bool(op.attr("exclusive"))
    with k.nest(others) as ivs:

        def step(j: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            pos = k.affine([(j[0], -1)], n - 1) if reverse else j[0]
            at = [*ivs[:axis], pos, *ivs[axis:]]
            value = io.read(0, at)
            total = a.add(acc[0], value) if is_sum else a.mul(acc[0], value)
            io.write(0, acc[0] if exclusive else total, at)
            return [total]

        k.reduce([n], [a.zero() if is_sum else a.one()], step)


def emit_top_k(io: KernelIO, op: graph.TopKOp) -> None:
    """Sweep r finds the element right after sweep r-1's (value, position) in the
    output order: value descending (ascending for the smallest), equal values by
    increasing position, NaN above every number (numpy's sort order). O(k * n) per
    row, no scratch."""
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    axis, n, others = _along(op)
    largest = bool(op.attr("largest"))
    none = k.constant(-1, I64)

    def above(x: SSAValue, y: SSAValue) -> SSAValue:
        """x after y in the value order (NaN highest)."""
        gt = a.cmp("gt", x, y)
        if not a.is_float:
            return gt
        nan_x = k.op(arith.AndIOp, a.cmp("ne", x, x), a.cmp("eq", y, y))
        return k.op(arith.OrIOp, gt, nan_x)

    def same(x: SSAValue, y: SSAValue) -> SSAValue:
        eq = a.cmp("eq", x, y)
        if not a.is_float:
            return eq
        both_nan = k.op(arith.AndIOp, a.cmp("ne", x, x), a.cmp("ne", y, y))
        return k.op(arith.OrIOp, eq, both_nan)

    def better(x: SSAValue, y: SSAValue) -> SSAValue:
        return above(x, y) if largest else above(y, x)

    with k.nest(others) as ivs:

        def at(j: Index) -> list[Index]:
            return [*ivs[:axis], j, *ivs[axis:]]

        def sweep(r: list[Index], prev: list[SSAValue]) -> list[SSAValue]:
            prev_value, prev_where = prev

            def step(j: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
                best, where = acc
                value, pos = io.read(0, at(j[0])), _as_i64(k, j[0])
                later = k.op(
                    arith.AndIOp,
                    same(value, prev_value),
                    k.op(arith.CmpiOp, pos, prev_where, "sgt"),
                )
                after = k.op(arith.OrIOp, better(prev_value, value), later)
                first_sweep = k.op(arith.CmpiOp, prev_where, none, "eq")
                eligible = k.op(arith.OrIOp, first_sweep, after)
                unset = k.op(arith.CmpiOp, where, none, "eq")
                wins = k.op(arith.OrIOp, unset, better(value, best))
                take = k.op(arith.AndIOp, eligible, wins)
                return [a.select(take, value, best), a.select(take, pos, where)]

            best, where = k.reduce([n], [a.zero(), none], step)
            io.write(0, best, at(r[0]))
            io.write(1, where, at(r[0]))
            return [best, where]

        k.reduce([op.attr("k")], [a.zero(), none], sweep)


ANCHORS: dict[type[Operation], Anchor] = {
    graph.ArgMaxOp: Anchor(emit_arg_reduce),  # type: ignore[arg-type]
    graph.ArgMinOp: Anchor(emit_arg_reduce),  # type: ignore[arg-type]
    graph.CumSumOp: Anchor(emit_cumulative),  # type: ignore[arg-type]
    graph.CumProdOp: Anchor(emit_cumulative),  # type: ignore[arg-type]
    graph.TopKOp: Anchor(emit_top_k),  # type: ignore[arg-type]
}
