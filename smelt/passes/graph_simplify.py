"""graph-simplify: CSE, DCE, no-op removal, reshape/transpose chain folding and
small integer powers as products."""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import AnyFloat, ModuleOp
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

from smelt.dialects import graph, locations
from smelt.passes.data_movement import Atoms


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
            new = graph.ReshapeOp.build([producer.input], [op.result.type])
            locations.inherit(new, producer, op)
            rewriter.replace(op, new)


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
                new = graph.TransposeOp.build([producer.input], perm=composed)
                locations.inherit(new, producer, op)
                rewriter.replace(op, new)


class ComposeDataMovement(RewritePattern):
    """A chain of reshapes and transposes holding two transposes or more → one
    transpose between two reshapes (`data_movement.Atoms`), when each of its
    reshapes regroups whole factors of the dims. Rewrites at the chain's last op.

        transpose{0,3,1,2} → reshape 1x4x28x56x56 → transpose{0,2,1,3,4} →
        reshape 1x112x56x56 → transpose{0,2,3,1}        (channel shuffle, NHWC)
      → reshape 56x56x4x28 → transpose{0,1,3,2} → reshape 1x56x56x112
    """

    def match_and_rewrite(self, op, rewriter: PatternRewriter) -> None:
        chain = []
        node = op
        while isinstance(node, graph.ReshapeOp | graph.TransposeOp):
            chain.append(node)
            producer = node.input.owner
            if not (
                isinstance(producer, graph.ReshapeOp | graph.TransposeOp)
                and producer.result.has_one_use()
            ):
                break
            node = producer
        chain.reverse()
        if sum(isinstance(o, graph.TransposeOp) for o in chain) < 2:
            return
        atoms = Atoms.of_shape(graph.shape_of(chain[0].input))
        for step in chain:
            if isinstance(step, graph.TransposeOp):
                atoms.transpose(list(step.attr("perm")))
            elif not atoms.reshape(graph.shape_of(step.result)):
                return
        shape, perm = atoms.as_one_transpose()
        element = op.result.type.element_type
        new = [graph.ReshapeOp.build([chain[0].input], [graph.tensor(element, shape)])]
        if perm != sorted(perm):
            new.append(graph.TransposeOp.build([new[-1].results[0]], perm=perm))
        new.append(graph.ReshapeOp.build([new[-1].results[0]], [op.result.type]))
        locations.inherit(new, *chain)
        rewriter.replace(op, new)


class PowBySmallInteger(RewritePattern):
    """x ** c with a float x and a constant c that is 1, 2 or 3 everywhere → x,
    x·x, x·x·x (as onnxruntime's Pow does): exporters write GELU's tanh form and
    variances so, and powf per element is a libm call that never vectorizes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.PowOp, rewriter: PatternRewriter) -> None:
        x, c = op.operands
        if not isinstance(c.owner, graph.ConstantOp) or x.type != op.result.type:
            return
        if not isinstance(x.type.element_type, AnyFloat):
            return
        values = np.unique(c.owner.to_array())
        if values.size != 1 or values[0] not in (1, 2, 3):
            return
        if values[0] == 1:
            rewriter.replace(op, (), (x,))
            return
        new = [graph.MulOp.build([x, x])]
        if values[0] == 3:
            new.append(graph.MulOp.build([new[0].results[0], x]))
        locations.inherit(new, op)
        rewriter.replace(op, new)


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
                [
                    RemoveIdentity(),
                    FoldReshape(),
                    FoldTranspose(),
                    ComposeDataMovement(),
                    PowBySmallInteger(),
                ]
            )
        ).rewrite_module(op)
        cse(op)
        dce(op)
