"""Graph dialect foundations: the GraphOp base (inferred result types, one generic
syntax) and the attribute / shape helpers every graph op uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import symbolic_bounds, symbolic_text
from smelt.dialects.symbolic import Dim, DimLike, SymbolicDimError

Shape = tuple[DimLike, ...]  # ints, and symbolic `Dim`s where a dim is not fixed

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
    if isinstance(value, Dim):
        raise SymbolicDimError(
            f"dim '{value}' is symbolic, and a graph attribute needs a number; fix "
            "it with input_shapes="
        )
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


@irdl_attr_definition
class DimsAttr(ParametrizedAttribute):
    """The encoding of a tensor type with symbolic dims: the expression of each `?`
    dim, in order (`tensor<?x3x?xf32, #graph.dims<"batch", "(H + 1) floordiv 2">>`).
    Expressions are kept canonical (`symbolic.Dim`'s text), so equal shapes are
    equal types. A static type has no encoding and prints as before."""

    name = "graph.dims"

    exprs: ArrayAttr[StringAttr]

    def __init__(self, dims: Sequence[Dim]) -> None:
        super().__init__(ArrayAttr([StringAttr(str(d)) for d in dims]))

    def dims(self) -> list[Dim]:
        return [symbolic_text.parse(e.data) for e in self.exprs]  # type: ignore[misc]

    def verify(self) -> None:
        for e in self.exprs:
            try:
                d = symbolic_text.parse(e.data)
            except ValueError as err:
                raise VerifyException(f"#graph.dims: {err}") from None
            if not isinstance(d, Dim):
                raise VerifyException(
                    f"#graph.dims: '{e.data}' is the number {d}; write it in the shape"
                )

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_list(
                self.exprs, lambda e: printer.print_string_literal(e.data)
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list:
        def expr() -> StringAttr:
            pos = parser.pos
            text = parser.parse_str_literal()
            try:
                d = symbolic_text.parse(text)
            except ValueError as e:
                parser.raise_error(f"#graph.dims: {e}", pos, parser.pos)
            return StringAttr(str(d))  # canonical, as inference writes it

        exprs = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, expr)
        return [ArrayAttr(exprs)]


def tensor(element_type: Attribute, shape: Sequence[DimLike]) -> TensorType:
    """The tensor type of `shape`: static, or with `?` dims named by #graph.dims."""
    dims = [d for d in shape if isinstance(d, Dim)]
    if not dims:
        return TensorType(element_type, [int(d) for d in shape])
    static = [DYNAMIC_INDEX if isinstance(d, Dim) else int(d) for d in shape]
    return TensorType(element_type, static, DimsAttr(dims))


def shape_of(value: SSAValue | TensorType) -> Shape:
    """The dims of a tensor: ints, and a `symbolic.Dim` for each `?`."""
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    shape = tuple(t.get_shape())
    if DYNAMIC_INDEX not in shape:
        return shape
    names = t.encoding.dims() if isinstance(t.encoding, DimsAttr) else []
    if len(names) != shape.count(DYNAMIC_INDEX):
        raise VerifyException(
            f"{t}: each ? dim needs its expression in a #graph.dims encoding "
            f"({shape.count(DYNAMIC_INDEX)} ? dims, {len(names)} expressions)"
        )
    it = iter(names)
    return tuple(next(it) if d == DYNAMIC_INDEX else d for d in shape)


def shape_str(shape: Sequence[DimLike]) -> str:
    """`[2, 3]`, `[batch, 3, (H + 1) floordiv 2]`: a shape for messages."""
    return "[" + ", ".join(map(str, shape)) + "]"


def is_static(value: SSAValue | TensorType) -> bool:
    t = value if isinstance(value, TensorType) else value.type
    return isinstance(t, TensorType) and DYNAMIC_INDEX not in t.get_shape()


def element_type_of(value: SSAValue | TensorType) -> Attribute:
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    return t.element_type


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy's broadcast of `shapes`; a symbolic dim broadcasts with an equal one
    or 1 (and with a number n > 1 to n: the symbol must be 1 or n when run)."""
    if not any(isinstance(d, Dim) for s in shapes for d in s):
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise VerifyException(f"shapes {list(shapes)} do not broadcast") from None
    rank = max(len(s) for s in shapes)
    out: list[DimLike] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        numbers = {d for d in dims if not isinstance(d, Dim)}
        if len(dims) > 1 and (len(numbers) != 1 or 0 in numbers):
            shown = ", ".join(map(shape_str, shapes))
            raise VerifyException(
                f"shapes {shown} broadcast only if dims {sorted(map(str, dims))} "
                "are equal; fix them with input_shapes="
            )
        if numbers and dims - numbers:  # a symbol broadcast with n: it is 1 or n
            n = next(iter(numbers))
            for d in dims - numbers:
                symbolic_bounds.assume(f"{d} in {{1, {n}}}")
        out.append(numbers.pop() if numbers else dims.pop() if dims else 1)
    return tuple(out)


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
        for t in (*types, *(r.type for r in self.results)):
            if isinstance(t, TensorType) and DYNAMIC_INDEX in t.get_shape():
                shape_of(t)  # each ? dim has its expression
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
