"""Lowerings of elementwise graph ops: one broadcasting loop nest and a scalar body."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, math
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph
from smelt.errors import SmeltError
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import map_elementwise
from smelt.lowering.scalar_ops import Arith, cast

Unary = Callable[[Arith, SSAValue], SSAValue]
Binary = Callable[[Arith, SSAValue, SSAValue], SSAValue]


def _math(op_class: type[Operation]) -> Unary:
    return lambda a, x: a.math(op_class, x)


def _sigmoid(a: Arith, x: SSAValue) -> SSAValue:
    one = a.one()
    return a.div(one, a.add(one, a.math(math.ExpOp, a.neg(x))))


# Ops in FLOAT_ONLY reject integer element types with a SmeltError.
UNARY: dict[type[Operation], Unary] = {
    graph.ReluOp: lambda a, x: a.max(x, a.zero()),
    graph.SigmoidOp: _sigmoid,
    graph.TanhOp: _math(math.TanhOp),
    graph.ExpOp: _math(math.ExpOp),
    graph.LogOp: _math(math.LogOp),
    graph.ErfOp: _math(math.ErfOp),
    graph.SqrtOp: _math(math.SqrtOp),
    graph.FloorOp: _math(math.FloorOp),
    graph.CeilOp: _math(math.CeilOp),
    graph.NegOp: lambda a, x: a.neg(x),
    graph.AbsOp: lambda a, x: a.abs(x),
    graph.ReciprocalOp: lambda a, x: a.div(a.one(), x),
}
FLOAT_ONLY = (
    graph.SigmoidOp, graph.TanhOp, graph.ExpOp, graph.LogOp, graph.ErfOp,
    graph.SqrtOp, graph.FloorOp, graph.CeilOp, graph.ReciprocalOp, graph.LeakyReluOp,
)  # fmt: skip

BINARY: dict[type[Operation], Binary] = {
    graph.AddOp: Arith.add,
    graph.SubOp: Arith.sub,
    graph.MulOp: Arith.mul,
    graph.DivOp: Arith.div,
    graph.PowOp: Arith.pow,
    graph.MaxOp: Arith.max,
    graph.MinOp: Arith.min,
    graph.EqualOp: lambda a, x, y: a.cmp("eq", x, y),
    graph.LessOp: lambda a, x, y: a.cmp("lt", x, y),
    graph.GreaterOp: lambda a, x, y: a.cmp("gt", x, y),
}


def _arith_for(k, op: Operation, value: SSAValue) -> Arith:
    a = Arith(k, graph.element_type_of(value))
    if isinstance(op, FLOAT_ONLY) and not a.is_float:
        raise SmeltError(
            f"{op.name} on {a.graph_type} is not supported: it needs a float tensor"
        )
    return a


def lower_unary(ctx: LoweringContext, op: Operation) -> None:
    k = ctx.op_kernel(op)
    a = _arith_for(k, op, op.operands[0])
    fn = UNARY[type(op)]
    map_elementwise(k, k.outputs[0], k.inputs, lambda v: fn(a, v[0]))


def lower_binary(ctx: LoweringContext, op: Operation) -> None:
    k = ctx.op_kernel(op)
    a = _arith_for(k, op, op.operands[0])
    fn = BINARY[type(op)]
    map_elementwise(k, k.outputs[0], k.inputs, lambda v: fn(a, v[0], v[1]))


def lower_leaky_relu(ctx: LoweringContext, op: graph.LeakyReluOp) -> None:
    k = ctx.op_kernel(op)
    a = _arith_for(k, op, op.input)
    alpha = a.const(op.attr("alpha"))

    def body(v: list[SSAValue]) -> SSAValue:
        x = v[0]
        return a.select(a.cmp("gt", x, a.zero()), x, a.mul(x, alpha))

    map_elementwise(k, k.outputs[0], k.inputs, body)


def lower_cast(ctx: LoweringContext, op: graph.CastOp) -> None:
    k = ctx.op_kernel(op)
    src = Arith(k, graph.element_type_of(op.input))
    dst = Arith(k, graph.element_type_of(op.result))
    map_elementwise(k, k.outputs[0], k.inputs, lambda v: cast(k, v[0], src, dst))


def lower_clip(ctx: LoweringContext, op: graph.ClipOp) -> None:
    k = ctx.op_kernel(op)
    a = Arith(k, graph.element_type_of(op.input))
    x, lo_buf, hi_buf = k.inputs
    # The bounds hold one element each; load them once, before the loops.
    lo = k.load_value(lo_buf, [k.index(0)] * len(graph.shape_of(op.min)))
    hi = k.load_value(hi_buf, [k.index(0)] * len(graph.shape_of(op.max)))
    map_elementwise(k, k.outputs[0], [x], lambda v: a.min(a.max(v[0], lo), hi))


def lower_where(ctx: LoweringContext, op: graph.WhereOp) -> None:
    k = ctx.op_kernel(op)
    map_elementwise(
        k, k.outputs[0], k.inputs, lambda v: k.op(arith.SelectOp, v[0], v[1], v[2])
    )


LOWERINGS: dict[type[Operation], Callable] = {
    **{cls: lower_unary for cls in UNARY},
    **{cls: lower_binary for cls in BINARY},
    graph.LeakyReluOp: lower_leaky_relu,
    graph.CastOp: lower_cast,
    graph.ClipOp: lower_clip,
    graph.WhereOp: lower_where,
}
