"""arith ops that xDSL 0.75 lacks (arith.remf) or has on scalars only, and the arith
dialect with remf.

xDSL 0.75's compares, select and int / float casts verify scalars only (MLIR's
take vectors too); loop-vectorize needs their vector forms to vectorize the
quantize / dequantize chains of int8 models. `VECTOR_FORMS` maps each such op name
to a class of the same name, properties and printed form whose verifier accepts
vectors of the scalar types (an i1 per lane for compares and select conditions).
Only loop-vectorize makes them (the LLVM target emits casts and compares on
vectors as on scalars); they are virtual subclasses of xDSL's classes, so
`isinstance(op, arith.CmpfOp)` holds for both, and the parser makes them (a
printed vector compare or cast parses back); tables keyed by xDSL's classes
look ours up through `XDSL_FORM`.

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
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """C fmod: a - b * trunc(a / b), exactly; the result has the sign of a."""

    name = "arith.remf"



_INT = container_of(IntegerType)
_FLOAT = container_of(AnyFloat)
_BOOL = container_of(i1)


def _shape(t: Attribute) -> tuple[int, ...] | None:
    return tuple(t.get_shape()) if isinstance(t, VectorType) else None


def _element(t: Attribute) -> Attribute:
    return t.element_type if isinstance(t, VectorType) else t


def _compare_parsed(cls: type[IRDLOperation], scalar: Operation) -> IRDLOperation:
    """`cls` in place of the compare xDSL's parser built (its result is always
    i1): a vector of i1 for vector operands."""
    operands = list(scalar.operands)
    shape = _shape(operands[0].type)
    result = i1 if shape is None else VectorType(i1, shape)
    scalar.drop_all_references()
    return cls.create(
        operands=operands,
        result_types=[result],
        properties=dict(scalar.properties),
        attributes=dict(scalar.attributes),
    )


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

    @classmethod
    def parse(cls, parser: Parser) -> CmpfOp:
        return _compare_parsed(cls, arith.CmpfOp.parse(parser))

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

    @classmethod
    def parse(cls, parser: Parser) -> CmpiOp:
        return _compare_parsed(cls, arith.CmpiOp.parse(parser))

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

    @classmethod
    def parse(cls, parser: Parser) -> SelectOp:
        """MLIR's two forms: `: type` (an i1 condition) and `: cond-type, type`."""
        names = [parser.parse_unresolved_operand()]
        for _ in range(2):
            parser.parse_punctuation(",")
            names.append(parser.parse_unresolved_operand())
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        first = parser.parse_type()
        if parser.parse_optional_punctuation(","):
            cond_type, result_type = first, parser.parse_type()
        else:
            cond_type, result_type = i1, first
        operands = parser.resolve_operands(
            names, [cond_type, result_type, result_type], parser.pos
        )
        return cls.create(
            operands=operands, result_types=[result_type], attributes=attributes
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        if isinstance(self.cond.type, VectorType):
            printer.print_attribute(self.cond.type)
            printer.print_string(", ")
        printer.print_attribute(self.result.type)

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
XDSL_FORM: dict[type[Operation], type[Operation]] = {
    ours: xdsl for xdsl, ours in _VECTOR_CAPABLE
}
"""xDSL's class of each vector-capable op (tables keyed by xDSL's classes)."""

# The dialect smelt parses: xDSL's arith with remf, the vector-capable classes
# in place of xDSL's (so printed vector compares, selects and casts parse back).
ArithWithRemF = Dialect(
    "arith",
    [*(VECTOR_FORMS.get(o.name, o) for o in Arith.operations), RemFOp],
    [*Arith.attributes],
)
"""op name → the class whose verifier accepts its vector form."""
