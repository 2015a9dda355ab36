"""Graph dialect: `graph.loop`, a counted loop whose region is the body's graph ops
(ONNX Loop with a constant trip count and no data-dependent exit)."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove, Pure
from xdsl.utils.exceptions import VerifyException

from smelt.dialects.graph_base import GraphOp, parse_signature, print_signature, tensor
from smelt.dialects.graph_fused import YieldOp


@irdl_op_definition
class LoopOp(GraphOp):
    """`trip_count` runs of the body region, carrying `carried` values.

    Operands: the carried values' initial values, then the values the body reads
    from outside (invariant across iterations). Block arguments: the iteration
    number (tensor<i64>, rank 0), the carried values, the invariants. The body ends
    in `graph.yield` with the carried values' next values (same types), then one
    element per scan output. Results: the carried values after the last iteration,
    then each scan output: its elements stacked along a new leading axis of
    length `trip_count` (>= 1).

        %c, %s = graph.loop %x0, %w {carried = 1, trip_count = 10} : ... {
        ^bb0(%i: tensor<i64>, %x: tensor<4xf32>, %v: tensor<4xf32>):
          %n = graph.add %x, %v : ...
          graph.yield %n, %n : tensor<4xf32>, tensor<4xf32>
        }
    """

    FOLDABLE: ClassVar[bool] = False  # folding would run every iteration at compile
    # The body sees outer values only as block arguments: CSE keeps its scope, and
    # the lowering and the reference executor run the body on its own.
    traits = traits_def(Pure(), IsolatedFromAbove())

    name = "graph.loop"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    trip_count = attr_def(IntegerAttr)
    carried = attr_def(IntegerAttr)

    @property
    def n_carried(self) -> int:
        return self.attr("carried")

    @property
    def trips(self) -> int:
        return self.attr("trip_count")

    def verify_(self) -> None:
        n, trips = self.n_carried, self.trips
        if trips < 1:
            raise VerifyException("graph.loop needs a trip_count of at least 1")
        if not 0 <= n <= len(self.inputs) or n > len(self.outputs):
            raise VerifyException("graph.loop carries more values than it has")
        block = self.body.block
        arg_types = [a.type for a in block.args]
        if arg_types != [tensor(i64, ())] + [o.type for o in self.inputs]:
            raise VerifyException(
                "graph.loop block arguments must be the iteration number "
                "(tensor<i64>) and then its operands' types"
            )
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.loop region must end with graph.yield")
        yielded = [v.type for v in last.values]
        if len(yielded) != len(self.outputs):
            raise VerifyException("graph.yield must give one value per result")
        carried = [o.type for o in self.inputs[:n]]
        if yielded[:n] != carried or [r.type for r in self.outputs[:n]] != carried:
            raise VerifyException(
                "graph.loop carried values must keep their type across iterations"
            )
        for t, r in zip(yielded[n:], self.outputs[n:]):
            assert isinstance(t, TensorType) and isinstance(r.type, TensorType)
            want = tensor(t.element_type, (trips, *t.get_shape()))
            if r.type != want:
                raise VerifyException(
                    f"graph.loop scan output has type {r.type}, expected {want}"
                )

    def print(self, printer: Printer) -> None:
        print_signature(printer, self)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)

    @classmethod
    def parse(cls, parser: Parser) -> LoopOp:
        operands, result_types, attributes = parse_signature(parser)
        return cls.create(
            operands=operands,
            result_types=result_types,
            attributes=attributes,
            regions=[parser.parse_region()],
        )
