"""The quant ops as scalar functions of the elementwise lowering: round half to
even, add the zero point, saturate to the storage range (NaN to its minimum).

A dequantize of a quantize in the same fused kernel (a QDQ model's fake-quant pair
between two float ops) reads the saturated float itself: it is an integer of the
storage range, so converting it to the storage type and back is the identity."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import AnyFloat, Float32Type, Float64Type, IntegerType
from xdsl.ir import Attribute, Operation, SSAValue

from smelt.dialects import graph
from smelt.dialects import quant as q
from smelt.lowering.loop_builder import KernelBuilder
from smelt.lowering.scalar_ops import Arith, cast

Scalar = Callable[[KernelBuilder, Operation, list[SSAValue]], SSAValue]


def _to_float(k: KernelBuilder, op: Operation, i: int, v: SSAValue, t: Attribute):
    """Operand `i` (value `v` in its compute type) as a float of type `t`."""
    src = Arith(k, graph.element_type_of(op.operands[i]))
    if v in k.exact_floats:  # a quantize's result in this kernel: no round trip
        return k.float_to(k.exact_floats[v], t)
    if src.is_float:
        return k.float_to(v, t)
    return cast(k, v, src, Arith(k, t))


def _saturate(k: KernelBuilder, op: Operation, rounded: SSAValue) -> SSAValue:
    """Integral float `rounded` clamped to the result's storage range and stored."""
    storage = graph.element_type_of(op.results[0])
    lo, hi = q.storage_range(storage)
    f = Arith(k, rounded.type)
    low, high = f.const(lo), f.const(hi)
    # compare and select (vmaxps / vminps): NaN compares false, so it takes `lo`
    above = f.select(f.cmp("gt", rounded, low), rounded, low)
    clamped = f.select(f.cmp("lt", above, high), above, high)
    out = Arith(k, storage)
    if out.is_float or out.width > 16:
        return cast(k, clamped, f, out)
    # in range: through i32, not cast's i64 (a cheaper vector conversion)
    wide = k.op(arith.FPToSIOp, clamped, IntegerType(32))
    stored = k.op(arith.TruncIOp, wide, out.type)
    k.exact_floats[stored] = clamped  # an integer in the storage range, exactly
    return stored


def _quantize(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    f32 = Float32Type()
    x = _to_float(k, op, 0, v[0], f32)
    scale = _to_float(k, op, 1, v[1], f32)
    quotient = k.op(arith.DivfOp, x, scale)
    x_type, s_type = (graph.element_type_of(o) for o in op.operands[:2])
    if x_type == s_type and isinstance(x_type, AnyFloat) and x_type.bitwidth < 32:
        # numpy divides 16-bit floats in f32 and rounds the quotient to 16 bits
        quotient = k.float_to(k.float_to(quotient, x_type), f32)
    rounded = k.op(math.RoundEvenOp, quotient)
    shifted = k.op(arith.AddfOp, rounded, _to_float(k, op, 2, v[2], f32))
    return _saturate(k, op, shifted)


def _dequantize(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    f32 = Float32Type()
    shifted = k.op(
        arith.SubfOp, _to_float(k, op, 0, v[0], f32), _to_float(k, op, 2, v[2], f32)
    )
    return k.op(arith.MulfOp, shifted, _to_float(k, op, 1, v[1], f32))


def _requantize(k: KernelBuilder, op: Operation, v: list[SSAValue]) -> SSAValue:
    f64 = Float64Type()
    scaled = k.op(
        arith.MulfOp, _to_float(k, op, 0, v[0], f64), _to_float(k, op, 1, v[1], f64)
    )
    rounded = k.op(math.RoundEvenOp, scaled)
    return _saturate(
        k, op, k.op(arith.AddfOp, rounded, _to_float(k, op, 2, v[2], f64))
    )


SCALAR: dict[type[Operation], Scalar] = {
    q.QuantizeOp: _quantize,
    q.DequantizeOp: _dequantize,
    q.RequantizeOp: _requantize,
}

