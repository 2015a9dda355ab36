"""Graph dialect: `graph.fused`, the ops of one future kernel, and `graph.yield`."""

from __future__ import annotations

from xdsl.dialects.builtin import (
    StringAttr,
    TensorType,
)
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from smelt.dialects.graph_base import parse_signature, print_signature

# --- fusion ---------------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `graph.fused` region with the values the kernel produces."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "$values attr-dict `:` type($values)"


@irdl_op_definition
class FusedOp(IRDLOperation):
    """The ops of one future kernel: the region's block arguments are the operands,
    its `graph.yield` gives the results. `kind` names the anchor (the op that decides
    the loop nest: conv2d, matmul, gemm, softmax, ... or elementwise).

        %r = graph.fused %x, %w, %b {kind = "conv2d"} : (...) -> tensor<...> {
        ^bb0(%a: ..., %b: ..., %c: ...):
          %0 = graph.conv2d %a, %b, %c {...} : ...
          %1 = graph.relu %0 : ...
          graph.yield %1 : tensor<...>
        }
    """

    name = "graph.fused"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    kind = attr_def(StringAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        block = self.body.block
        if [a.type for a in block.args] != [o.type for o in self.inputs]:
            raise VerifyException("graph.fused block arguments must match its operands")
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.fused region must end with graph.yield")
        if [v.type for v in last.values] != [r.type for r in self.outputs]:
            raise VerifyException(
                "graph.yield types must match the graph.fused results"
            )

    def print(self, printer: Printer) -> None:
        print_signature(printer, self)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        operands, result_types, attributes = parse_signature(parser)
        return cls.create(
            operands=operands,
            result_types=result_types,
            attributes=attributes,
            regions=[parser.parse_region()],
        )
