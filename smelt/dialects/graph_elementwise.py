"""Graph dialect: elementwise ops (unary maps, broadcasting binaries, comparisons,
bitwise and logical ops, cast, clip, where)."""

from __future__ import annotations

import math
from typing import ClassVar

from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    TensorType,
    TypeAttribute,
)
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects.graph_base import (
    GraphOp,
    broadcast_shapes,
    same_element_type,
    shape_of,
    tensor,
)

# --- elementwise -------------------------------------------------------------------


class UnaryOp(GraphOp):
    """Elementwise map: the result has the operand's type."""

    ELEMENTWISE: ClassVar[bool] = True

    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        return [types[0]]


class BinaryOp(GraphOp):
    """Elementwise with numpy broadcasting; both operands share the element type."""

    ELEMENTWISE: ClassVar[bool] = True

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        a, b = types
        if a.element_type != b.element_type:
            raise VerifyException(
                f"operand element types {a.element_type} and {b.element_type} differ"
            )
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        return [tensor(a.element_type, shape)]


class CompareOp(BinaryOp):
    """Elementwise comparison with broadcasting; the result is i1."""

    @classmethod
    def infer(cls, types, attrs):
        return [tensor(dtypes.i1, shape_of(BinaryOp.infer(types, attrs)[0]))]


class PredicateOp(UnaryOp):
    """Elementwise test of one operand; the result is i1."""

    @classmethod
    def infer(cls, types, attrs):
        return [tensor(dtypes.i1, shape_of(types[0]))]


def _unary(op_name: str, doc: str, base: type[UnaryOp] = UnaryOp) -> type[UnaryOp]:
    cls = type(
        op_name.title().replace("_", "") + "Op",
        (base,),
        {"name": f"graph.{op_name}", "__doc__": doc, "__module__": __name__},
    )
    return irdl_op_definition(cls)


def _binary(op_name: str, doc: str, base: type[BinaryOp] = BinaryOp) -> type[BinaryOp]:
    cls = type(
        op_name.title().replace("_", "") + "Op",
        (base,),
        {"name": f"graph.{op_name}", "__doc__": doc, "__module__": __name__},
    )
    return irdl_op_definition(cls)


ReluOp = _unary("relu", "max(x, 0)")
SigmoidOp = _unary("sigmoid", "1 / (1 + exp(-x))")
TanhOp = _unary("tanh", "tanh(x)")
ExpOp = _unary("exp", "exp(x)")
LogOp = _unary("log", "log(x)")
ErfOp = _unary("erf", "erf(x)")
SqrtOp = _unary("sqrt", "sqrt(x)")
NegOp = _unary("neg", "-x")
AbsOp = _unary("abs", "|x|")
ReciprocalOp = _unary("reciprocal", "1 / x")
FloorOp = _unary("floor", "floor(x)")
CeilOp = _unary("ceil", "ceil(x)")
IdentityOp = _unary("identity", "x; removed by graph-simplify")
DropoutOp = _unary("dropout", "x at inference; removed by graph-simplify")
IdentityOp.KERNEL_FREE = DropoutOp.KERNEL_FREE = True  # they alias their operand
SignOp = _unary("sign", "-1, 0 or 1 by the sign of x (NaN stays NaN)")
RoundOp = _unary("round", "x rounded to the nearest integer, halves to even")
SinOp = _unary("sin", "sin(x)")
CosOp = _unary("cos", "cos(x)")
TanOp = _unary("tan", "tan(x)")
AsinOp = _unary("asin", "asin(x)")
AcosOp = _unary("acos", "acos(x)")
AtanOp = _unary("atan", "atan(x)")
SinhOp = _unary("sinh", "sinh(x)")
CoshOp = _unary("cosh", "cosh(x)")
AsinhOp = _unary("asinh", "asinh(x)")
AcoshOp = _unary("acosh", "acosh(x)")
AtanhOp = _unary("atanh", "atanh(x)")
NotOp = _unary("not", "~x: every bit flipped (logical not on i1)")
IsNanOp = _unary("is_nan", "x is NaN", base=PredicateOp)

AddOp = _binary("add", "a + b")
SubOp = _binary("sub", "a - b")
MulOp = _binary("mul", "a * b")
DivOp = _binary("div", "a / b (integer division truncates toward zero)")
PowOp = _binary("pow", "a ** b")
MaxOp = _binary("max", "max(a, b)")
MinOp = _binary("min", "min(a, b)")
EqualOp = _binary("equal", "a == b", base=CompareOp)
LessOp = _binary("less", "a < b", base=CompareOp)
GreaterOp = _binary("greater", "a > b", base=CompareOp)
LessEqualOp = _binary("less_equal", "a <= b", base=CompareOp)
GreaterEqualOp = _binary("greater_equal", "a >= b", base=CompareOp)
AndOp = _binary("and", "a & b, bit by bit (logical and on i1)")
OrOp = _binary("or", "a | b, bit by bit (logical or on i1)")
XorOp = _binary("xor", "a ^ b, bit by bit (logical xor on i1)")
ShiftLeftOp = _binary("shift_left", "a << b (0 once b reaches the bit width)")
ShiftRightOp = _binary(
    "shift_right", "a >> b, logical on unsigned, arithmetic on signed types"
)
PreluOp = _binary("prelu", "a if a >= 0 else b * a (b: the slope)")


@irdl_op_definition
class ModOp(BinaryOp):
    """a mod b: with fmod = 0 the result has the divisor's sign (Python's %), with
    fmod = 1 the dividend's (C fmod). An integer x mod 0 is 0."""

    name = "graph.mod"
    fmod = attr_def(IntegerAttr)


@irdl_op_definition
class IsInfOp(PredicateOp):
    """x is +inf (when detect_positive = 1) or -inf (when detect_negative = 1)."""

    name = "graph.is_inf"
    detect_negative = attr_def(IntegerAttr)
    detect_positive = attr_def(IntegerAttr)


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x if x >= 0 else alpha * x."""

    name = "graph.leaky_relu"
    alpha = attr_def(FloatAttr)


@irdl_op_definition
class CastOp(GraphOp):
    """Converts the element type to `to` (ONNX Cast semantics)."""

    ELEMENTWISE: ClassVar[bool] = True

    name = "graph.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    to = attr_def(TypeAttribute)

    @classmethod
    def infer(cls, types, attrs):
        return [tensor(attrs["to"], shape_of(types[0]))]


@irdl_op_definition
class ClipOp(GraphOp):
    """min(max(x, lo), hi) with scalar bounds lo and hi."""

    ELEMENTWISE: ClassVar[bool] = True

    name = "graph.clip"
    input = operand_def(TensorType)
    min = operand_def(TensorType)
    max = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        for t in types[1:]:
            if math.prod(shape_of(t)) != 1:
                raise VerifyException("clip bounds must hold one element")
        same_element_type(types, "clip input and bounds")
        return [types[0]]


@irdl_op_definition
class WhereOp(GraphOp):
    """cond ? x : y with broadcasting."""

    ELEMENTWISE: ClassVar[bool] = True

    name = "graph.where"
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        c, a, b = types
        if c.element_type != dtypes.i1 or a.element_type != b.element_type:
            raise VerifyException(
                "where expects an i1 condition and equal branch types"
            )
        return [tensor(a.element_type, broadcast_shapes(*map(shape_of, types)))]
