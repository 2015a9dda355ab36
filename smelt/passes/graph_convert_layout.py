"""graph-convert-layout: conv / pool regions to NHWC, transposes only at region borders."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import graph, locations
from smelt.dialects.graph_fused import FusedOp
from smelt.passes.graph_fuse import is_elementwise
from smelt.passes.graph_simplify import FoldTranspose

LAYOUT_OPS = (graph.Conv2dOp, graph.MaxPoolOp, graph.AveragePoolOp, graph.GlobalAveragePoolOp)
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def _transpose(value: SSAValue, perm) -> graph.GraphOp:
    owner = value.owner
    if isinstance(owner, graph.ConstantOp):  # weights: transpose at compile time
        return graph.ConstantOp.from_array(np.transpose(owner.to_array(), perm))
    return graph.TransposeOp.build([value], perm=list(perm))


@dataclass
class ToLayout(RewritePattern):
    """op{layout=nchw}(x, w, ...) → transpose(op{layout=nhwc}(transpose(x), w', ...))."""

    layout: str

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, LAYOUT_OPS) or op.attr("layout") == self.layout:
            return
        if _in_fused(op):
            return  # a fused body keeps its layout (graph-fuse ran first)
        if len(graph.shape_of(op.operands[0])) != 4:
            return  # only 2-D spatial ops have an NHWC form
        moved = [_transpose(op.operands[0], TO_NHWC)]
        if isinstance(op, graph.Conv2dOp):
            moved.append(_transpose(op.operands[1], TO_NHWC))  # OIHW → OHWI
        operands = [m.results[0] for m in moved] + list(op.operands[len(moved):])
        new = type(op).build(operands, **{**op.attrs(), "layout": self.layout})
        back = graph.TransposeOp.build([new.results[0]], perm=list(TO_NCHW))
        locations.inherit([*moved, new, back], op)
        rewriter.replace(op, [*moved, new, back])


class SinkTranspose(RewritePattern):
    """An elementwise op whose operands are the same transpose (or constants and
    scalars, permuted to match) runs before the transpose instead:
    f(transpose(a), transpose(b)) → transpose(f(a, b)); concat likewise, with its
    axis mapped. Transposes that then meet cancel (graph-simplify's rule)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if _in_fused(op):
            return
        if isinstance(op, graph.ConcatOp):
            return self.concat(op, rewriter)
        if not is_elementwise(op) or not op.operands:
            return
        perm = _common_perm(op.operands)
        if perm is None:
            return
        rank = len(perm)
        inverse = tuple(int(i) for i in np.argsort(perm))
        new_ops, operands = [], []
        for v in op.operands:
            if isinstance(v.owner, graph.TransposeOp):
                operands.append(v.owner.input)
            elif _is_scalar(v):
                operands.append(v)
            else:
                array = v.owner.to_array()
                array = array.reshape((1,) * (rank - array.ndim) + array.shape)
                c = graph.ConstantOp.from_array(np.transpose(array, inverse))
                new_ops.append(c)
                operands.append(c.result)
        new = type(op).build(operands, **op.attrs())
        back = graph.TransposeOp.build([new.results[0]], perm=list(perm))
        locations.inherit([*new_ops, new, back], op)
        rewriter.replace(op, [*new_ops, new, back])

    def concat(self, op: graph.ConcatOp, rewriter: PatternRewriter) -> None:
        owners = [v.owner for v in op.operands]
        if not all(isinstance(o, graph.TransposeOp) for o in owners):
            return
        perms = {o.attr("perm") for o in owners}
        if len(perms) != 1:
            return
        (perm,) = perms
        axis = graph.normalize_axis(op.attr("axis"), len(perm))
        new = graph.ConcatOp.build([o.input for o in owners], axis=perm[axis])
        back = graph.TransposeOp.build([new.result], perm=list(perm))
        locations.inherit([new, back], op)
        rewriter.replace(op, [new, back])


def _in_fused(op: Operation) -> bool:
    return isinstance(op.parent_op(), FusedOp)


def _is_scalar(v: SSAValue) -> bool:
    shape = graph.shape_of(v)
    return all(d == 1 for d in shape) and len(shape) <= 1


def _common_perm(operands) -> tuple[int, ...] | None:
    """The one transpose perm among the operands, when every other operand is a
    constant of at most that rank or a scalar; else None."""
    perms = {v.owner.attr("perm") for v in operands if isinstance(v.owner, graph.TransposeOp)}
    if len(perms) != 1:
        return None
    (perm,) = perms
    for v in operands:
        if isinstance(v.owner, graph.TransposeOp) or _is_scalar(v):
            continue
        if not isinstance(v.owner, graph.ConstantOp) or len(graph.shape_of(v)) > len(perm):
            return None
    return tuple(perm)


@dataclass(frozen=True)
class GraphConvertLayoutPass(ModulePass):
    """Switches conv / pool ops to `layout` ("nhwc"), then sinks the transposes
    through elementwise ops and concats so that they meet and cancel; transposes stay
    only where a layout region borders ops that need NCHW (a reshape, a softmax...).

    Expects a graph-level module with NCHW conv / pools (after graph-fold-batchnorm).
        %y = graph.conv2d %x, %w, %b {layout = "nchw"} ; %z = graph.relu %y
        → %t = graph.transpose %x ; %y = graph.conv2d %t, %w2, %b {layout = "nhwc"}
          %r = graph.relu %y ; %z = graph.transpose %r        (w2 = OHWI weights)
    """

    name = "graph-convert-layout"

    layout: str = "nhwc"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.layout not in ("nhwc", "nchw"):
            raise ValueError(f"layout must be nhwc or nchw, not {self.layout}")
        if self.layout == "nchw":
            return
        PatternRewriteWalker(ToLayout(self.layout)).rewrite_module(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([SinkTranspose(), FoldTranspose()])
        ).rewrite_module(op)
        dce(op)
