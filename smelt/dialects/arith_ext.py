"""arith ops that xDSL 0.75 lacks (arith.remf) or has on scalars only, and the arith
dialect with remf.

xDSL 0.75's compares, select and int / float casts verify scalars only (MLIR's
take vectors too); loop-vectorize needs their vector forms to vectorize the
quantize / dequantize chains of int8 models. `VECTOR_FORMS` maps each such op name
to a class of the same name, properties and printed form whose verifier accepts
vectors of the scalar types (an i1 per lane for compares and select conditions).
Only loop-vectorize makes them (the LLVM target emits casts and compares on
vectors as on scalars); they are virtual subclasses of xDSL's classes, so
`isinstance(op, arith.CmpfOp)` holds for both. The dialect keeps xDSL's classes:
a printed vector compare or cast does not parse back.

    %c = arith.cmpf uno, %x, %x : vector<16xf32>          (→ vector<16xi1>)
    %s = arith.select %c, %a, %b : vector<16xf32>          (vector<16xi1> cond)
    %f = arith.uitofp %q : vector<16xi8> to vector<16xf32>
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.arith import (
    Arith,
    FastMathFlagsAttr,
    FloatingPointLikeBinaryOperation,
)
from xdsl.dialects.builtin import (
    AnyFloat,
    IndexType,
    IntegerAttr,
    IntegerType,
    VectorType,
    container_of,
    i1,
)
from xdsl.ir import Attribute, Dialect, Operation
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """C fmod: a - b * trunc(a / b), exactly; the result has the sign of a."""

    name = "arith.remf"


ArithWithRemF = Dialect("arith", [*Arith.operations, RemFOp], [*Arith.attributes])

_INT = container_of(IntegerType)
_FLOAT = container_of(AnyFloat)
_BOOL = container_of(i1)


def _shape(t: Attribute) -> tuple[int, ...] | None:
    return tuple(t.get_shape()) if isinstance(t, VectorType) else None


def _element(t: Attribute) -> Attribute:
    return t.element_type if isinstance(t, VectorType) else t


def _check_shapes(op: Operation, *types: Attribute) -> None:
    if len({_shape(t) for t in types}) != 1:
        raise VerifyException(f"'{op.name}': operand and result shapes differ")


@irdl_op_definition
class CmpfOp(IRDLOperation):
    """arith.cmpf on f32 / f64 / … scalars or vectors."""

    name = "arith.cmpf"
    predicate = prop_def(IntegerAttr)
    lhs = operand_def(_FLOAT)
    rhs = operand_def(_FLOAT)
    fastmath = prop_def(FastMathFlagsAttr, default_value=FastMathFlagsAttr("none"))
    result = result_def(_BOOL)
    traits = traits_def(Pure())
    print = arith.CmpfOp.print

    def verify_(self) -> None:
        _check_shapes(self, self.lhs.type, self.rhs.type, self.result.type)


@irdl_op_definition
class CmpiOp(IRDLOperation):
    """arith.cmpi on integer / index scalars or vectors."""

    name = "arith.cmpi"
    predicate = prop_def(IntegerAttr)
    lhs = operand_def(container_of(IntegerType | IndexType))
    rhs = operand_def(container_of(IntegerType | IndexType))
    result = result_def(_BOOL)
    traits = traits_def(Pure())
    print = arith.CmpiOp.print

    def verify_(self) -> None:
        _check_shapes(self, self.lhs.type, self.rhs.type, self.result.type)


@irdl_op_definition
class SelectOp(IRDLOperation):
    """arith.select with an i1 condition or a vector of them (lane by lane)."""

    name = "arith.select"
    _T: ClassVar = VarConstraint("_T", AnyAttr())
    cond = operand_def(_BOOL)
    lhs = operand_def(_T)
    rhs = operand_def(_T)
    result = result_def(_T)
    traits = traits_def(Pure())
    assembly_format = (
        "$cond `,` $lhs `,` $rhs attr-dict `:` type($cond) `,` type($result)"
    )  # MLIR's form when the condition is a vector

    def verify_(self) -> None:
        if isinstance(self.cond.type, VectorType):
            _check_shapes(self, self.cond.type, self.result.type)


def _cast(name: str, src, dst, widths: str = "") -> type[IRDLOperation]:
    """A cast op `name` from `src` to `dst` scalars or vectors (`widths`: "<" the
    result element narrower, ">" wider, "": any)."""

    def verify_(self) -> None:
        _check_shapes(self, self.input.type, self.result.type)
        if widths:
            a, b = _element(self.input.type), _element(self.result.type)
            assert isinstance(a, IntegerType) and isinstance(b, IntegerType)
            if (b.width.data < a.width.data) != (widths == "<") or (
                a.width == b.width
            ):
                raise VerifyException(f"'{name}': wrong destination width")

    body = {
        "name": name,
        "input": operand_def(src),
        "result": result_def(dst),
        "traits": traits_def(Pure()),
        "assembly_format": "$input attr-dict `:` type($input) `to` type($result)",
        "verify_": verify_,
        "__doc__": f"{name} on scalars or vectors.",
    }
    title = name.split(".")[1].capitalize() + "VectorOp"
    return irdl_op_definition(type(title, (IRDLOperation,), body))


_VECTOR_CAPABLE: list[tuple[type[Operation], type[IRDLOperation]]] = [
    (arith.CmpfOp, CmpfOp),
    (arith.CmpiOp, CmpiOp),
    (arith.SelectOp, SelectOp),
    (arith.SIToFPOp, _cast("arith.sitofp", _INT, _FLOAT)),
    (arith.UIToFPOp, _cast("arith.uitofp", _INT, _FLOAT)),
    (arith.FPToSIOp, _cast("arith.fptosi", _FLOAT, _INT)),
    (arith.FPToUIOp, _cast("arith.fptoui", _FLOAT, _INT)),
    (arith.TruncIOp, _cast("arith.trunci", _INT, _INT, "<")),
    (arith.ExtSIOp, _cast("arith.extsi", _INT, _INT, ">")),
    (arith.ExtUIOp, _cast("arith.extui", _INT, _INT, ">")),
]
for _xdsl, _ours in _VECTOR_CAPABLE:
    _xdsl.register(_ours)  # ABCMeta: isinstance(ours, xDSL's class)

VECTOR_FORMS: dict[str, type[IRDLOperation]] = {
    ours.name: ours for _, ours in _VECTOR_CAPABLE
}
"""op name → the class whose verifier accepts its vector form."""
