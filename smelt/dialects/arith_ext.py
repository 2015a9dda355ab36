"""arith ops that xDSL 0.75 lacks (arith.remf), and the arith dialect with them."""

from __future__ import annotations

from xdsl.dialects.arith import Arith, FloatingPointLikeBinaryOperation
from xdsl.ir import Dialect
from xdsl.irdl import irdl_op_definition


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """C fmod: a - b * trunc(a / b), exactly; the result has the sign of a."""

    name = "arith.remf"


ArithWithRemF = Dialect(
    "arith", [*Arith.operations, RemFOp], [*Arith.attributes]
)
