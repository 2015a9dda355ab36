"""graph-simplify: CSE, DCE, no-op removal and reshape/transpose chain folding."""

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.common_subexpression_elimination import cse
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import graph


class RemoveIdentity(RewritePattern):
    """identity(x) / dropout(x) → x."""

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        if isinstance(op, graph.IdentityOp | graph.DropoutOp):
            rewriter.replace(op, (), (op.input,))


class FoldReshape(RewritePattern):
    """reshape(x) to x's own type → x; reshape(reshape(x)) → reshape(x)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.ReshapeOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type:
            rewriter.replace(op, (), (op.input,))
            return
        producer = op.input.owner
        if isinstance(producer, graph.ReshapeOp):
            rewriter.replace(
                op, graph.ReshapeOp.build([producer.input], [op.result.type])
            )


class FoldTranspose(RewritePattern):
    """transpose with the identity perm → x; transpose(transpose(x)) → one
    transpose with the composed perm (or x when they cancel)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TransposeOp, rewriter: PatternRewriter) -> None:
        perm = op.attr("perm")
        if list(perm) == sorted(perm):
            rewriter.replace(op, (), (op.input,))
            return
        producer = op.input.owner
        if isinstance(producer, graph.TransposeOp):
            inner = producer.attr("perm")
            composed = [inner[p] for p in perm]
            if composed == sorted(composed):
                rewriter.replace(op, (), (producer.input,))
            else:
                rewriter.replace(
                    op, graph.TransposeOp.build([producer.input], perm=composed)
                )


@dataclass(frozen=True)
class GraphSimplifyPass(ModulePass):
    """Removes work that changes nothing: duplicates, dead ops, identities, and
    reshape / transpose chains.

    Expects a graph-level module; keeps it graph-level and equivalent.
        %1 = graph.identity %0 ; %2 = graph.relu %1   →   %2 = graph.relu %0
    """

    name = "graph-simplify"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [RemoveIdentity(), FoldReshape(), FoldTranspose()]
            )
        ).rewrite_module(op)
        cse(op)
        dce(op)
