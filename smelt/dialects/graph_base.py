"""Graph dialect foundations: the GraphOp base (inferred result types, one generic
syntax) and the attribute / shape helpers every graph op uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

Shape = tuple[int, ...]

# Constants with more elements than this print as `dense_resource<__elided__>`,
# unless the printer is a FullConstantsPrinter.
ELIDE_ELEMENTS_LIMIT = 16


class FullConstantsPrinter(Printer):
    """A Printer that prints every constant in full (smelt-opt --print-constants,
    dumps with `print_constants`, crash reproducers); a plain Printer elides
    those of more than ELIDE_ELEMENTS_LIMIT elements, so that a dump of a big
    model stays readable (an elided constant does not parse back)."""


def elides(printer: Printer, elements: int) -> bool:
    """Whether `printer` prints a constant of `elements` elements elided."""
    return elements > ELIDE_ELEMENTS_LIMIT and not isinstance(
        printer, FullConstantsPrinter
    )


def to_attr(value: Any) -> Attribute:
    """A Python attribute value as a builtin attribute."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool | np.bool_):
        return IntegerAttr(int(value), i64)
    if isinstance(value, int | np.integer):
        return IntegerAttr(int(value), i64)
    if isinstance(value, float | np.floating):
        return FloatAttr(float(value), f32)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, Sequence | np.ndarray):
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    raise TypeError(f"cannot store {value!r} as a graph attribute")


def from_attr(attr: Attribute) -> Any:
    """A builtin attribute as a plain Python value."""
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        return tuple(attr.get_values())
    return attr


def tensor(element_type: Attribute, shape: Sequence[int]) -> TensorType:
    return TensorType(element_type, [int(d) for d in shape])


def shape_of(value: SSAValue | TensorType) -> Shape:
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def element_type_of(value: SSAValue | TensorType) -> Attribute:
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    return t.element_type


def broadcast_shapes(*shapes: Shape) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise VerifyException(f"shapes {list(shapes)} do not broadcast") from None


def same_element_type(types: Sequence[TensorType], what: str) -> None:
    """Raises unless every type in `types` has the element type of the first."""
    if any(t.element_type != types[0].element_type for t in types[1:]):
        found = ", ".join(str(t.element_type) for t in types)
        raise VerifyException(f"{what} must share one element type, got {found}")


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise VerifyException(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


class GraphOp(IRDLOperation):
    """Base of all graph ops: inferred result types and one generic syntax.

    `%r = graph.op %a, %b {attr = ...} : (tensor<...>, ...) -> tensor<...>`
    """

    traits = traits_def(Pure())
    # An op's facts, declared once here and read by the frontend, the passes, the
    # reference executor and the lowering alike (never kept as tuples elsewhere).
    # False for ops whose constant operands must stay as they are (a dequantized
    # weight keeps its int8 data): the importer and graph-fold-constants skip them.
    FOLDABLE: ClassVar[bool] = True
    # Each result element depends only on the operand elements at the same
    # (broadcast) index: fusable into chains, prologues and epilogues.
    ELEMENTWISE: ClassVar[bool] = False
    # Decides the loop nest of a fused kernel: "contraction" (conv, matmul: takes
    # an epilogue) or "reduction" (softmax, pools, reductions, scans).
    ANCHOR: ClassVar[str | None] = None
    # Makes no kernel: the result aliases an operand's bytes or is a constant.
    KERNEL_FREE: ClassVar[bool] = False

    @classmethod
    def infer(cls, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        raise NotImplementedError

    def attrs(self) -> dict[str, Any]:
        return {name: from_attr(a) for name, a in self.attributes.items()}

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attributes.get(name)
        return default if a is None else from_attr(a)

    @classmethod
    def build(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[TensorType] | None = None,
        **attrs: Any,
    ) -> GraphOp:
        attributes = {k: to_attr(v) for k, v in attrs.items() if v is not None}
        if result_types is None:
            py_attrs = {k: from_attr(v) for k, v in attributes.items()}
            types = [o.type for o in operands]
            result_types = cls.infer(types, py_attrs)  # type: ignore[arg-type]
        return cls.create(
            operands=list(operands),
            result_types=list(result_types),
            attributes=attributes,
        )

    def verify_(self) -> None:
        types = [o.type for o in self.operands]
        if not all(isinstance(t, TensorType) for t in types):
            raise VerifyException(f"{self.name} expects tensor operands")
        try:
            expected = self.infer(types, self.attrs())  # type: ignore[arg-type]
        except NotImplementedError:
            return
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise VerifyException(f"{self.name}: {e}") from e
        actual = [r.type for r in self.results]
        if list(expected) != actual:
            raise VerifyException(
                f"{self.name}: result types {[str(t) for t in actual]} do not match "
                f"the inferred {[str(t) for t in expected]}"
            )

    def print(self, printer: Printer) -> None:
        print_signature(printer, self)

    @classmethod
    def parse(cls, parser: Parser) -> GraphOp:
        operands, result_types, attributes = parse_signature(parser)
        return cls.create(
            operands=operands, result_types=result_types, attributes=attributes
        )


def print_signature(printer: Printer, op: IRDLOperation) -> None:
    """` %a, %b {attrs} : (types) -> types`, the syntax every graph op shares."""
    if op.operands:
        printer.print_string(" ")
        printer.print_list(op.operands, printer.print_operand)
    printer.print_op_attributes(op.attributes)
    printer.print_string(" : ")
    printer.print_function_type(
        [o.type for o in op.operands], [r.type for r in op.results]
    )


def parse_signature(parser: Parser) -> tuple[list[SSAValue], list[Attribute], dict]:
    """Operands, result types and attributes written as print_signature writes them."""
    unresolved = (
        parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand,
            parser.parse_unresolved_operand,
        )
        or []
    )
    attributes = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    ftype = parser.parse_function_type()
    operands = parser.resolve_operands(unresolved, ftype.inputs.data, parser.pos)
    return operands, list(ftype.outputs.data), attributes
