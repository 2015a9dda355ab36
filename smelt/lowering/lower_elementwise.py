"""Elementwise graph ops as scalar functions, their evaluator and their kernels."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IntegerAttr, IntegerType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph, loop
from smelt.errors import SmeltError
from smelt.lowering import lower_quant
from smelt.lowering.loop_builder import Index, KernelBuilder, shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import broadcast_index
from smelt.lowering.scalar_ops import Arith, cast

# scalar(k, op, operand values in compute types) -> the result value
Scalar = Callable[[KernelBuilder, Operation, list[SSAValue]], SSAValue]
Unary = Callable[[Arith, SSAValue], SSAValue]
Binary = Callable[[Arith, SSAValue, SSAValue], SSAValue]


def _math(op_class: type[Operation]) -> Unary:
    return lambda a, x: a.math(op_class, x)


def _sigmoid(a: Arith, x: SSAValue) -> SSAValue:
    """e / (1 + e) below zero, 1 / (1 + e) above, with e = e^-|x| in (0, 1]: no
    overflow, and far below zero the result is e^x itself down to the subnormals
    (1 + e rounds to 1), not 0. The rounding of 1 + e (up to 0.9 ulp of the
    result) is taken back to first order: 1 + e = d - over exactly, so
    q·(1 + over / d), where 1 / d is q above zero and 1 - q below. No branch:
    the loop vectorizes. NaN passes through (e is NaN). 1.3 ulp at most."""
    e = a.math(math.ExpOp, a.neg(a.abs(x)))
    below = a.cmp("lt", x, a.zero())
    d = a.add(a.one(), e)
    q = a.div(a.select(below, e, a.one()), d)
    over = a.sub(a.sub(d, a.one()), e)
    inverse = a.select(below, a.sub(a.one(), q), q)
    return a.add(q, a.mul(a.mul(q, over), inverse))


def _float_or_identity(fn: Unary) -> Unary:
    """floor and ceil leave integers unchanged."""
    return lambda a, x: fn(a, x) if a.is_float else x


def _prelu(a: Arith, x: SSAValue, slope: SSAValue) -> SSAValue:
    """x where x >= 0, else slope * x. On floats max(x, 0) + slope * min(x, 0),
    without a compare so that the loop vectorizes: one of the terms is 0, so the
    sum is exact, and NaN propagates."""
    zero = a.zero()
    if a.is_float:
        return a.add(a.max(x, zero), a.mul(slope, a.min(x, zero)))
    return a.select(a.cmp("lt", x, zero), a.mul(x, slope), x)


UNARY: dict[type[Operation], Unary] = {
    graph.ReluOp: lambda a, x: a.max(x, a.zero()),
    graph.SigmoidOp: _sigmoid,
    graph.TanhOp: _math(math.TanhOp),
    graph.ExpOp: _math(math.ExpOp),
    graph.LogOp: _math(math.LogOp),
    graph.ErfOp: _math(math.ErfOp),
    graph.SqrtOp: _math(math.SqrtOp),
    graph.FloorOp: _float_or_identity(_math(math.FloorOp)),
    graph.CeilOp: _float_or_identity(_math(math.CeilOp)),
    graph.NegOp: lambda a, x: a.neg(x),
    graph.AbsOp: lambda a, x: a.abs(x),
    graph.ReciprocalOp: lambda a, x: a.div(a.one(), x),
    graph.IdentityOp: lambda a, x: x,
    graph.DropoutOp: lambda a, x: x,
    graph.SignOp: Arith.sign,
    graph.RoundOp: _float_or_identity(_math(math.RoundEvenOp)),
    graph.SinOp: _math(math.SinOp),
    graph.CosOp: _math(math.CosOp),
    graph.TanOp: _math(math.TanOp),
    graph.AsinOp: _math(math.AsinOp),
    graph.AcosOp: _math(math.AcosOp),
    graph.AtanOp: _math(math.AtanOp),
    graph.SinhOp: _math(math.SinhOp),
    graph.CoshOp: _math(math.CoshOp),
    graph.AsinhOp: _math(math.AsinhOp),
    graph.AcoshOp: _math(math.AcoshOp),
    graph.AtanhOp: _math(math.AtanhOp),
    graph.NotOp: Arith.invert,
    graph.IsNanOp: lambda a, x: a.k.op(arith.CmpfOp, x, x, "uno"),
}
FLOAT_ONLY = (
    graph.SigmoidOp, graph.TanhOp, graph.ExpOp, graph.LogOp, graph.ErfOp,
    graph.SqrtOp, graph.ReciprocalOp, graph.LeakyReluOp, graph.SinOp, graph.CosOp,
    graph.TanOp, graph.AsinOp, graph.AcosOp, graph.AtanOp, graph.SinhOp,
    graph.CoshOp, graph.AsinhOp, graph.AcoshOp, graph.AtanhOp, graph.IsNanOp,
    graph.IsInfOp,
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
    graph.LessEqualOp: lambda a, x, y: a.cmp("le", x, y),
    graph.GreaterEqualOp: lambda a, x, y: a.cmp("ge", x, y),
    graph.AndOp: lambda a, x, y: a.bitwise(arith.AndIOp, x, y),
    graph.OrOp: lambda a, x, y: a.bitwise(arith.OrIOp, x, y),
    graph.XorOp: lambda a, x, y: a.bitwise(arith.XOrIOp, x, y),
    graph.ShiftLeftOp: lambda a, x, y: a.shift(True, x, y),
    graph.ShiftRightOp: lambda a, x, y: a.shift(False, x, y),
    graph.PreluOp: _prelu,
}


def _arith(k: KernelBuilder, op: Operation) -> Arith:
    a = Arith(k, graph.element_type_of(op.operands[0]))
    if isinstance(op, FLOAT_ONLY) and not a.is_float:
        raise SmeltError(
            f"{op.name} on {a.graph_type} is not supported: it needs a float tensor"
        )
    return a


def _leaky_relu(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    a = _arith(k, op)
    x = v[0]
    alpha = a.const(op.attr("alpha"))  # type: ignore[attr-defined]
    return a.select(a.cmp("ge", x, a.zero()), x, a.mul(x, alpha))


def _mod(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    a = _arith(k, op)
    return a.rem(v[0], v[1]) if op.attr("fmod") else a.mod(v[0], v[1])  # type: ignore


def _is_inf(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    a = _arith(k, op)
    found = k.constant(False, IntegerType(1))
    inf = float("inf")
    for attr, value in (("detect_positive", inf), ("detect_negative", -inf)):
        if op.attr(attr):  # type: ignore[attr-defined]
            found = k.op(arith.OrIOp, found, a.cmp("eq", v[0], a.const(value)))
    return found


def _cast(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    src = Arith(k, graph.element_type_of(op.operands[0]))
    return cast(k, v[0], src, Arith(k, graph.element_type_of(op.results[0])))


def _clip(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    a = _arith(k, op)
    return a.min(a.max(v[0], v[1]), v[2])


SCALAR: dict[type[Operation], Scalar] = {
    **{
        cls: (lambda k, op, v, fn=fn: fn(_arith(k, op), v[0]))
        for cls, fn in UNARY.items()
    },
    **{
        cls: (lambda k, op, v, fn=fn: fn(_arith(k, op), v[0], v[1]))
        for cls, fn in BINARY.items()
    },
    graph.LeakyReluOp: _leaky_relu,
    graph.ModOp: _mod,
    graph.IsInfOp: _is_inf,
    graph.CastOp: _cast,
    graph.ClipOp: _clip,
    graph.WhereOp: lambda k, op, v: k.op(arith.SelectOp, v[0], v[1], v[2]),
    **lower_quant.SCALAR,
}


def evaluate(
    k: KernelBuilder,
    value: SSAValue,
    idx: list[Index],
    buffers: dict[SSAValue, SSAValue],
    known: dict[SSAValue, SSAValue],
) -> SSAValue:
    """The scalar of graph `value` at idx (an index into a shape that `value` and
    everything it is computed from broadcast to): a load from `buffers`, an entry of
    `known`, or elementwise ops applied to those. Memoized in `known`."""
    if value in known:
        return known[value]
    if value in buffers:
        buffer = buffers[value]
        result = k.load_value(buffer, broadcast_index(k, idx, shape(buffer)))
    else:
        op = value.owner
        scalar = SCALAR.get(type(op))  # type: ignore[arg-type]
        if scalar is None:
            name = getattr(op, "name", "a block argument")
            raise SmeltError(f"{name} cannot be computed elementwise inside a kernel")
        operands = [evaluate(k, v, idx, buffers, known) for v in op.operands]
        result = scalar(k, op, operands)  # type: ignore[arg-type]
    known[value] = result
    return result


def emit_elementwise(
    k: KernelBuilder,
    outputs: list[tuple[SSAValue, SSAValue]],
    buffers: dict[SSAValue, SSAValue],
) -> None:
    """Stores each graph value of `outputs` (value, buffer) computed elementwise from
    `buffers`; outputs of one shape share a loop nest. A kernel of one output is
    marked `loop.elementwise`: each element is stored after every load of its
    own index, so buffer-plan may place the output over an input of its shape
    that dies at the call."""
    by_shape: dict[tuple[int, ...], list[tuple[SSAValue, SSAValue]]] = {}
    for value, buffer in outputs:
        by_shape.setdefault(shape(buffer), []).append((value, buffer))
    for dims, group in by_shape.items():
        with k.nest(dims) as ivs:
            known: dict[SSAValue, SSAValue] = {}
            for value, buffer in group:
                k.store_value(evaluate(k, value, ivs, buffers, known), buffer, ivs)
    if len(outputs) == 1:
        k.func.attributes[loop.ELEMENTWISE_ATTR] = IntegerAttr(1, 64)


def lower_elementwise(ctx: LoweringContext, op: Operation) -> None:
    k = ctx.op_kernel(op)
    buffers = dict(zip(op.operands, k.inputs))
    emit_elementwise(k, list(zip(op.results, k.outputs)), buffers)


LOWERINGS: dict[type[Operation], Callable] = {
    cls: lower_elementwise
    for cls in SCALAR
    if cls not in (graph.IdentityOp, graph.DropoutOp)  # those alias their operand
}
