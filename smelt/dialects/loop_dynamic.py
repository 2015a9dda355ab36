"""Loop-dialect ops for run-time dims (issue 34, first loop-level step).

A dim known only at run time (a symbolic batch) is an SSA `index` value: an
argument of `@main` and of each kernel that needs it. Two ops use it:

* `loop.for_dim %b = 0 to %batch step 1 parallel { ... loop.yield }`: a loop
  whose upper bound is that value (at least one trip: the runtime checks every
  dim against its declared range, whose minimum is >= 1). It carries no
  iter_args. The static loop passes do not match it (they see `loop.for` only),
  so loops with static bounds inside it are scheduled as usual and the dynamic
  loop itself is left as it is: never tiled, unrolled, vectorized or threaded.
* `%r = loop.row %x[%b] : memref<?x64xf32> -> memref<1x64xf32>`: rows
  `%b .. %b + n` of a buffer whose leading dim is dynamic, as a buffer of
  static shape (memref.subview with one dynamic offset on axis 0; contiguous
  row-major, so the row's bytes start at `%b * row bytes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import IndexType, IntAttr, MemRefType, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

DYNAMIC = -9223372036854775808  # xDSL's `?` in a memref shape
DIMS_ATTR = "loop.dims"
"""On @main: the names of its trailing `index` arguments (the run-time dims)."""


@irdl_op_definition
class ForDimOp(IRDLOperation):
    """`for iv in range(lb, ub)` with `ub` an SSA index value (a run-time dim)."""

    name = "loop.for_dim"
    ub = operand_def(IndexType)
    lb = prop_def(IntAttr)
    step = prop_def(IntAttr)
    kind = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self, ub: SSAValue, kind: str = "parallel", body: Region | None = None
    ):
        if body is None:
            body = Region(Block(arg_types=[IndexType()]))
        super().__init__(
            operands=[ub],
            properties={
                "lb": IntAttr(0),
                "step": IntAttr(1),
                "kind": StringAttr(kind),
            },
            regions=[body],
        )

    @property
    def iv(self) -> SSAValue:
        return self.body.block.args[0]

    @property
    def res(self) -> tuple:
        return ()

    def verify_(self) -> None:
        if self.lb.data != 0 or self.step.data != 1:
            raise VerifyException("loop.for_dim runs from 0 in steps of 1")
        args = self.body.block.args
        if len(args) != 1 or not isinstance(args[0].type, IndexType):
            raise VerifyException("loop.for_dim body takes one index argument")
        last = self.body.block.last_op
        if last is None or last.name != "loop.yield" or last.operands:
            raise VerifyException("loop.for_dim body must end with an empty loop.yield")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.iv)
        printer.print_string(" = 0 to ")
        printer.print_ssa_value(self.ub)
        printer.print_string(f" step 1 {self.kind.data} ")
        printer.print_region(self.body, print_entry_block_args=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForDimOp:
        iv = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        if parser.parse_integer() != 0:
            parser.raise_error("loop.for_dim runs from 0")
        parser.parse_keyword("to")
        ub = parser.parse_operand()
        parser.parse_keyword("step")
        if parser.parse_integer() != 1:
            parser.raise_error("loop.for_dim runs in steps of 1")
        kind = parser.parse_identifier()
        body = parser.parse_region([iv.resolve(IndexType())])
        op = cls(ub, kind, body)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class RowOp(IRDLOperation):
    """Rows `%b ..` of a buffer with a dynamic leading dim, as a static buffer:
    k rows `memref<k x D..>`, or those rows with leading dims joined (loop-flatten
    at batch k: `memref<?x1000x1x1>` -> `memref<8000>` for 8 rows)."""

    name = "loop.row"
    source = operand_def(MemRefType)
    index = operand_def(IndexType)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = (
        "$source `[` $index `]` attr-dict `:` type($source) `->` type($result)"
    )

    def __init__(self, source: SSAValue, index: SSAValue, memref_type: MemRefType):
        super().__init__(operands=[source, index], result_types=[memref_type])

    def verify_(self) -> None:
        src, dst = self.source.type, self.result.type
        assert isinstance(src, MemRefType) and isinstance(dst, MemRefType)
        s, d = src.get_shape(), dst.get_shape()
        if (
            src.element_type != dst.element_type
            or not s
            or not d
            or s[0] != DYNAMIC
            or DYNAMIC in s[1:]
            or DYNAMIC in d
            or not joined_rows(s[1:], d)
        ):
            raise VerifyException(f"loop.row cannot take rows of {src} as {dst}")


def joined_rows(row: Sequence[int], rows: Sequence[int]) -> bool:
    """Whether `rows` is k rows of shape `row` ([k, *row]) with its leading dims
    joined into one (row-major: the same bytes)."""
    kept = len(rows) - 1
    if kept > len(row):
        return False
    joined = math.prod(row[: len(row) - kept])
    return tuple(rows[1:]) == tuple(row[len(row) - kept :]) and rows[0] % joined == 0


def is_dynamic(t: object) -> bool:
    return isinstance(t, MemRefType) and DYNAMIC in t.get_shape()


def ops_with_dims(root: Operation) -> list[Operation]:
    return [op for op in root.walk() if isinstance(op, ForDimOp | RowOp)]
