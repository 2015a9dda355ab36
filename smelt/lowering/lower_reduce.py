"""Lowerings of reductions and normalizations: reduce_*, softmax, norms, LRN."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from xdsl.dialects import math
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import Index, KernelBuilder, shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import broadcast_index, reduce_axes
from smelt.lowering.scalar_ops import Arith


def _require_float(op: Operation) -> None:
    element_type = graph.element_type_of(op.operands[0])
    if not dtypes.is_float(element_type):
        raise SmeltError(f"{op.name} on {element_type} is not supported: it needs floats")


def _float_arith(k: KernelBuilder, op: Operation) -> Arith:
    _require_float(op)
    return Arith(k, graph.element_type_of(op.operands[0]))


def _lower_reduce(ctx: LoweringContext, op: Operation, axes, keepdims: bool) -> None:
    k = ctx.op_kernel(op)
    a = Arith(k, graph.element_type_of(op.operands[0]))
    (src,), (dst,) = k.inputs, k.outputs
    count = pymath.prod(shape(src)[i] for i in axes)
    if isinstance(op, graph.ReduceMaxOp):
        inits, combine = (lambda: [a.lowest()]), (lambda v, acc: [a.max(acc[0], v)])
        finish: Callable[[list[SSAValue]], SSAValue] = lambda acc: acc[0]
    else:
        inits, combine = (lambda: [a.zero()]), (lambda v, acc: [a.add(acc[0], v)])
        if isinstance(op, graph.ReduceSumOp):
            finish = lambda acc: acc[0]  # noqa: E731
        else:  # mean; integers divide truncating toward zero
            finish = lambda acc: a.div(acc[0], a.const(count))  # noqa: E731
    reduce_axes(k, src, dst, axes, keepdims, inits, combine, finish)


def lower_reduce(ctx: LoweringContext, op: graph.ReduceOp) -> None:
    rank = len(graph.shape_of(op.input))
    axes = graph.reduced_axes(op.attr("axes"), rank)
    _lower_reduce(ctx, op, axes, bool(op.attr("keepdims")))


def lower_global_average_pool(ctx: LoweringContext, op: graph.GlobalAveragePoolOp) -> None:
    if op.attr("layout", "nchw") != "nchw":
        raise SmeltError(f"{op.name}: layout {op.attr('layout')!r} is not supported yet")
    rank = len(graph.shape_of(op.input))
    _require_float(op)
    _lower_reduce(ctx, op, tuple(range(2, rank)), True)


def lower_softmax(ctx: LoweringContext, op: graph.SoftmaxOp) -> None:
    """Three sweeps along `axis` per position: max, exp(x - max) and its sum, divide."""
    k = ctx.op_kernel(op)
    a = _float_arith(k, op)
    (x,), (y,) = k.inputs, k.outputs
    dims = shape(x)
    axis = graph.normalize_axis(op.attr("axis"), len(dims))
    others = [d for i, d in enumerate(dims) if i != axis]
    with k.nest(others) as ivs:

        def at(j: Index) -> list[Index]:
            return [*ivs[:axis], j, *ivs[axis:]]

        (peak,) = k.reduce(
            [dims[axis]], [a.lowest()], lambda j, acc: [a.max(acc[0], k.load_value(x, at(j[0])))]
        )

        def exp_sum(j: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            e = a.math(math.ExpOp, a.sub(k.load_value(x, at(j[0])), peak))
            k.store_value(e, y, at(j[0]))
            return [a.add(acc[0], e)]

        (total,) = k.reduce([dims[axis]], [a.zero()], exp_sum)
        with k.loop(dims[axis]) as j:
            k.store_value(a.div(k.load_value(y, at(j)), total), y, at(j))


def lower_layer_norm(ctx: LoweringContext, op: graph.LayerNormOp) -> None:
    """Per row over dims axis..: mean, var = mean((x - mean)^2), y = (x - mean) *
    (1 / sqrt(var + eps)) * scale + bias; also writes mean and 1 / std."""
    k = ctx.op_kernel(op)
    a = _float_arith(k, op)
    (x, scale, bias), (y, mean_out, inv_out) = k.inputs, k.outputs
    dims = shape(x)
    axis = graph.normalize_axis(op.attr("axis"), len(dims))
    inner = dims[axis:]
    n = a.const(pymath.prod(inner))
    with k.nest(dims[:axis]) as outer:

        def load_x(ivs: list[Index]) -> SSAValue:
            return k.load_value(x, [*outer, *ivs])

        (total,) = k.reduce(inner, [a.zero()], lambda i, acc: [a.add(acc[0], load_x(i))])
        mean = a.div(total, n)

        def square_diff(i: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            diff = a.sub(load_x(i), mean)
            return [a.add(acc[0], a.mul(diff, diff))]

        (squares,) = k.reduce(inner, [a.zero()], square_diff)
        var_eps = a.add(a.div(squares, n), a.const(op.attr("epsilon")))
        inv_std = a.div(a.one(), a.math(math.SqrtOp, var_eps))
        stat_index = [*outer, *[k.index(0)] * len(inner)]
        k.store_value(mean, mean_out, stat_index)
        k.store_value(inv_std, inv_out, stat_index)
        with k.nest(inner) as ivs:
            full = [*outer, *ivs]
            normed = a.mul(a.sub(load_x(ivs), mean), inv_std)
            s = k.load_value(scale, broadcast_index(k, full, shape(scale)))
            b = k.load_value(bias, broadcast_index(k, full, shape(bias)))
            k.store_value(a.add(a.mul(normed, s), b), y, full)


def lower_batch_norm(ctx: LoweringContext, op: graph.BatchNormOp) -> None:
    """y = scale * (x - mean) / sqrt(var + eps) + bias, parameters per dim-1 channel."""
    k = ctx.op_kernel(op)
    a = _float_arith(k, op)
    (x, scale, bias, mean, var), (y,) = k.inputs, k.outputs
    eps = a.const(op.attr("epsilon"))
    with k.nest(shape(x)) as ivs:
        c = [ivs[1]]
        centered = a.sub(k.load_value(x, ivs), k.load_value(mean, c))
        std = a.math(math.SqrtOp, a.add(k.load_value(var, c), eps))
        scaled = a.div(a.mul(k.load_value(scale, c), centered), std)
        k.store_value(a.add(scaled, k.load_value(bias, c)), y, ivs)


def lower_lrn(ctx: LoweringContext, op: graph.LrnOp) -> None:
    """y = x / (bias + alpha / size * sum(x[c'] ** 2))^beta over the channels
    c' in [c - floor((size-1)/2), c + ceil((size-1)/2)] that exist."""
    k = ctx.op_kernel(op)
    a = _float_arith(k, op)
    (x,), (y,) = k.inputs, k.outputs
    dims = shape(x)
    if len(dims) < 3:
        raise SmeltError(f"{op.name} needs an input of rank >= 3, got {dims}")
    size, channels = op.attr("size"), dims[1]
    before = (size - 1) // 2
    with k.nest(dims) as ivs:

        def square(j: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            c = k.affine([(ivs[1], 1), (j[0], 1)], -before)
            v = k.load_value(x, [ivs[0], k.clamp(c, 0, channels - 1), *ivs[2:]])
            inside = k.in_range(c, 0, channels)
            return [a.select(inside, a.add(acc[0], a.mul(v, v)), acc[0])]

        (total,) = k.reduce([size], [a.zero()], square)
        coeff = a.const(op.attr("alpha") / size)
        base = a.add(a.const(op.attr("bias")), a.mul(coeff, total))
        denom = k.op(math.PowFOp, base, a.const(op.attr("beta")))
        k.store_value(a.div(k.load_value(x, ivs), denom), y, ivs)


LOWERINGS: dict[type[Operation], Callable] = {
    graph.ReduceSumOp: lower_reduce,
    graph.ReduceMeanOp: lower_reduce,
    graph.ReduceMaxOp: lower_reduce,
    graph.GlobalAveragePoolOp: lower_global_average_pool,
    graph.SoftmaxOp: lower_softmax,
    graph.LayerNormOp: lower_layer_norm,
    graph.BatchNormOp: lower_batch_norm,
    graph.LrnOp: lower_lrn,
}
