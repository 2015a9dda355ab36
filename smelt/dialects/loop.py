"""The loop dialect: static loop nests over memref buffers, the kernel level.

A lowered model is a module of kernels and one `@main`:

* a kernel is a `func.func` marked with the unit attribute `loop.kernel`; its arguments
  are memrefs (inputs first, then outputs) and its body is `loop.for` nests whose
  bodies use `memref.load` / `memref.store` and xDSL's `arith`, `math` and `vector`;
* `@main` takes the model inputs and outputs as memrefs, makes buffers with
  `loop.alloc` (intermediates), `loop.constant` (weights) and `loop.view` (a reshape
  that shares bytes), and calls the kernels in order with `func.call`.

`loop.for` has static bounds and knows its kind (parallel or reduction), so tiling,
unrolling and vectorization are rewrites of one op. Buffers are contiguous row-major.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IndexType,
    IntAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    UnitAttr,
    VectorType,
    i1,
)
from xdsl.dialects.utils import parse_assignment, print_assignment
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes

PARALLEL = "parallel"
REDUCTION = "reduction"
KERNEL_ATTR = "loop.kernel"
UNROLL_ATTR = "loop.unroll"
"""On a `loop.for`: a hint that the target unrolls the loop by this factor (the
llvm target: `llvm.loop.unroll.count`), where unrolling in the IR would only
make the IR, and the time to compile it, that much bigger."""
ACCUMULATORS_ATTR = "loop.accumulators"
"""On a reduction `loop.for`: loop-vectorize gives each of its reductions this many
vector accumulators, combined after the loop (independent FMA chains: a long dot
product over a streamed weight, `lower_matmul`)."""
ITERATIONS_ATTR = "loop.iterations"
"""On a kernel: it runs a sequential loop of this many iterations around several
loop nests (the kernel of a `graph.loop`, smelt/lowering/lower_loop.py)."""
ELEMENTWISE_ATTR = "loop.elementwise"
"""On a kernel of one elementwise loop nest with this many outputs (the last
arguments): an output may be the very bytes of an input of its shape that dies at
the call (buffer-plan's in-place reuse); the passes and the llvm target then
assume that its buffers may alias (`loop_analysis.may_alias`)."""
WORK_ATTR = "loop.work"
"""On an op inside a kernel (a `func.call` of a library routine): the ops one run of
it stands for, in `loop_analysis.work`'s estimate."""
THREADS_ATTR = "loop.threads"
"""On a `loop.for`: run its iterations on this many threads (loop-parallelize sets
it, the llvm target reads it)."""
ROLE_ATTR = "loop.role"
"""On a `loop.for`: its role in a pattern kernel ("m", "n", "k", "batch", ...),
what the scheduling passes key on."""
PATTERN_ATTR = "loop.pattern"
"""On a kernel: the pattern it was lowered from (matmul, conv2d, ...)."""
SCHEDULE_ATTR = "loop.schedule"
"""On a kernel: the schedule steps that loop-schedule-plan chose and
loop-schedule-apply has yet to run (a list of dictionaries: kind, role, sizes,
order, operand)."""


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `loop.for` body; yields the next values of its iter_args."""

    name = "loop.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[values])


@irdl_op_definition
class ForOp(IRDLOperation):
    """`for iv in range(lb, ub, step)` with static bounds and a kind.

    `kind` is "parallel" (iterations are independent) or "reduction" (they carry a
    value through iter_args or accumulate into memory).

        %r = loop.for %i = 0 to 64 step 1 reduction iter_args(%acc = %zero) -> (f32) {
          ...
          loop.yield %next : f32
        }
    """

    name = "loop.for"
    lb = prop_def(IntAttr)
    ub = prop_def(IntAttr)
    step = prop_def(IntAttr)
    kind = prop_def(StringAttr)
    iter_inits = var_operand_def()
    res = var_result_def()
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        lb: int,
        ub: int,
        step: int,
        kind: str,
        iter_inits: Sequence[SSAValue] = (),
        body: Region | None = None,
    ):
        if body is None:
            body = Region(
                Block(arg_types=[IndexType(), *(v.type for v in iter_inits)])
            )
        super().__init__(
            operands=[list(iter_inits)],
            result_types=[[v.type for v in iter_inits]],
            properties={
                "lb": IntAttr(lb),
                "ub": IntAttr(ub),
                "step": IntAttr(step),
                "kind": StringAttr(kind),
            },
            regions=[body],
        )

    @property
    def iv(self) -> SSAValue:
        return self.body.block.args[0]

    @property
    def trip_count(self) -> int:
        lb, ub, step = self.lb.data, self.ub.data, self.step.data
        return max(0, -(-(ub - lb) // step))

    def verify_(self) -> None:
        if self.step.data <= 0:
            raise VerifyException("loop.for step must be positive")
        if self.kind.data not in (PARALLEL, REDUCTION):
            raise VerifyException(f"loop.for kind must be parallel or reduction, not {self.kind.data}")
        args = self.body.block.args
        if not args or not isinstance(args[0].type, IndexType):
            raise VerifyException("loop.for body must start with an index argument")
        if [a.type for a in args[1:]] != [v.type for v in self.iter_inits]:
            raise VerifyException("loop.for iter_args types must match the body arguments")
        last = self.body.block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("loop.for body must end with loop.yield")
        if [v.type for v in last.values] != [r.type for r in self.res]:
            raise VerifyException("loop.yield types must match the loop results")

    def print(self, printer: Printer) -> None:
        iv, *iter_args = self.body.block.args
        printer.print_string(" ")
        printer.print_ssa_value(iv)
        printer.print_string(
            f" = {self.lb.data} to {self.ub.data} step {self.step.data} {self.kind.data}"
        )
        if iter_args:
            printer.print_string(" iter_args(")
            printer.print_list(
                zip(iter_args, self.iter_inits),
                lambda pair: print_assignment(printer, *pair),
            )
            printer.print_string(") -> (")
            printer.print_list((a.type for a in iter_args), printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)
        printer.print_op_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        iv = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        lb = parser.parse_integer()
        parser.parse_keyword("to")
        ub = parser.parse_integer()
        parser.parse_keyword("step")
        step = parser.parse_integer()
        kind = parser.parse_identifier()
        pos = parser.pos
        args, inits, types = [], [], []
        if parser.parse_optional_keyword("iter_args"):
            pairs = parser.parse_comma_separated_list(
                Parser.Delimiter.PAREN, lambda: parse_assignment(parser)
            )
            args, inits = [p[0] for p in pairs], [p[1] for p in pairs]
            parser.parse_punctuation("->")
            types = parser.parse_comma_separated_list(
                Parser.Delimiter.PAREN, parser.parse_type
            )
        operands = parser.resolve_operands(inits, types, pos)
        block_args = [iv.resolve(IndexType())] + [
            a.resolve(t) for a, t in zip(args, types)
        ]
        body = parser.parse_region(block_args)
        op = cls(lb, ub, step, kind, operands, body)
        op.attributes |= parser.parse_optional_attr_dict()
        return op


@irdl_op_definition
class AllocOp(IRDLOperation):
    """An intermediate buffer of @main. buffer-plan sets `offset` in the arena."""

    name = "loop.alloc"
    offset = opt_prop_def(IntAttr)
    result = result_def(MemRefType)

    def __init__(self, memref_type: MemRefType, offset: int | None = None):
        props = {} if offset is None else {"offset": IntAttr(offset)}
        super().__init__(result_types=[memref_type], properties=props)

    def print(self, printer: Printer) -> None:
        if self.offset is not None:
            printer.print_string(f" offset({self.offset.data})")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> AllocOp:
        offset = None
        if parser.parse_optional_keyword("offset"):
            parser.parse_punctuation("(")
            offset = parser.parse_integer()
            parser.parse_punctuation(")")
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(parser.parse_type(), offset)
        op.attributes |= attrs
        return op


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A read-only buffer filled with `value` (the weights of @main)."""

    KERNEL_FREE: ClassVar[bool] = True

    name = "loop.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(MemRefType)
    traits = traits_def(Pure())

    def __init__(self, value: DenseIntOrFPElementsAttr, memref_type: MemRefType):
        super().__init__(result_types=[memref_type], properties={"value": value})

    def drop_all_references(self) -> None:
        """Erasing the op also drops its bytes (see graph.ConstantOp's)."""
        super().drop_all_references()
        self.properties.pop("value", None)

    def print(self, printer: Printer) -> None:
        from smelt.dialects.graph_base import elides

        if "smelt.released" in self.attributes:  # its bytes went to the program
            printer.print_string(" dense_resource<__released__>")
        elif elides(printer, len(self.value)):
            printer.print_string(" dense_resource<__elided__>")
        else:
            printer.print_string(" ")
            printer.print_attribute(self.value)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("loop.constant needs a dense value")
        parser.parse_punctuation("->")
        t = parser.parse_type()
        return cls(value, t)


@irdl_op_definition
class ViewOp(IRDLOperation):
    """The same bytes seen with another shape (reshape of a contiguous buffer) or
    another element type of the same width (bitcast)."""

    name = "loop.view"
    source = operand_def(MemRefType)
    result = result_def(MemRefType)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, memref_type: MemRefType):
        super().__init__(operands=[source], result_types=[memref_type])

    def verify_(self) -> None:
        src, dst = self.source.type, self.result.type
        width = dtypes.byte_size(src.element_type)
        if width != dtypes.byte_size(dst.element_type) or _numel(src) != _numel(dst):
            raise VerifyException(f"loop.view cannot see {src} as {dst}")


def _numel(t: MemRefType) -> int:
    n = 1
    for d in t.get_shape():
        n *= d
    return n


def is_kernel(op: Operation) -> bool:
    return KERNEL_ATTR in op.attributes


def kernel_attr() -> dict[str, Attribute]:
    return {KERNEL_ATTR: UnitAttr()}


@irdl_op_definition
class CheckOp(IRDLOperation):
    """A run-time check: when `%ok` is false the run fails with `message` (the llvm
    target raises it from `run`, after the kernels finish). The check does not stop
    the kernel: the code after it must stay in bounds on its own (clamp).

        loop.check %in_range, "Gather 'g': an index is out of range [-5, 5)"
    """

    name = "loop.check"
    ok = operand_def(i1)
    message = prop_def(StringAttr)
    assembly_format = "$ok `,` $message attr-dict"

    def __init__(self, ok: SSAValue, message: str):
        super().__init__(operands=[ok], properties={"message": StringAttr(message)})


@irdl_op_definition
class SelectOp(IRDLOperation):
    """A select per lane: lane l of the result is `%a`'s where lane l of `%mask` is
    set, else `%b`'s (`arith.select` with a vector condition, which xDSL's
    arith.select does not take). Masked vector tails keep a reduction's inactive
    lanes with it:

        %acc1 = loop.select %mask, %sum, %acc0 : vector<16xi1>, vector<16xf32>
    """

    name = "loop.select"
    T: ClassVar = VarConstraint("T", base(VectorType))
    mask = operand_def(VectorType[IntegerType])
    true_value = operand_def(T)
    false_value = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = (
        "$mask `,` $true_value `,` $false_value attr-dict `:` type($mask) `,` "
        "type($result)"
    )

    def __init__(self, mask: SSAValue, a: SSAValue, b: SSAValue):
        super().__init__(operands=[mask, a, b], result_types=[a.type])

    def verify_(self) -> None:
        mask, value = self.mask.type, self.result.type
        assert isinstance(mask, VectorType) and isinstance(value, VectorType)
        if mask.element_type != i1 or mask.get_shape() != value.get_shape():
            raise VerifyException(
                f"loop.select needs an i1 mask of the values' shape, not {mask}"
            )


from smelt.dialects.loop_dynamic import ForDimOp, RowOp  # noqa: E402  (run-time dims)

Loop = Dialect(
    "loop",
    [ForOp, YieldOp, AllocOp, ConstantOp, ViewOp, CheckOp, SelectOp, ForDimOp, RowOp],
    [],
)


def loops_under(root: Operation) -> list[ForOp]:
    """The loops under `root` (itself included), in walk order: a walk that
    enters only ops with regions (most of a kernel's ops have none), several
    times faster than Operation.walk, which every loop pass runs per kernel."""
    found: list[ForOp] = []
    stack = [root]
    while stack:
        op = stack.pop()
        if isinstance(op, ForOp):
            found.append(op)
        inner = [
            o for region in op.regions for block in region.blocks
            for o in block.ops if o.regions
        ]  # fmt: skip
        stack.extend(reversed(inner))
    return found
