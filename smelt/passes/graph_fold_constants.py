"""graph-fold-constants: evaluates ops whose operands are all constants."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import dtypes, graph, locations


@dataclass
class FoldConstantOp(RewritePattern):
    max_bytes: int

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.GraphOp) or isinstance(op, graph.ConstantOp):
            return
        if not op.FOLDABLE:
            return
        producers = [o.owner for o in op.operands]
        if not all(isinstance(p, graph.ConstantOp) for p in producers):
            return
        from smelt.reference.executor import evaluate

        if sum(dtypes.nbytes(r.type) for r in op.results) > self.max_bytes:
            return
        values = evaluate(op, [p.to_array() for p in producers])
        constants = [graph.ConstantOp.from_array(v) for v in values]
        locations.inherit(constants, op)
        rewriter.replace(op, constants, [c.result for c in constants])


@dataclass(frozen=True)
class GraphFoldConstantsPass(ModulePass):
    """Replaces every op whose operands are all `graph.constant` by the constant it
    computes (numpy reference semantics), unless its results take more than
    `max_bytes` (a large broadcast is cheaper to compute than to store).

        %0 = graph.constant dense<2.0> : tensor<f32>
        %1 = graph.sqrt %0 : (tensor<f32>) -> tensor<f32>
        → %1 = graph.constant dense<1.41421354> : tensor<f32>
    """

    name = "graph-fold-constants"

    max_bytes: int = 1 << 26

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldConstantOp(self.max_bytes)).rewrite_module(op)
        dce(op)
