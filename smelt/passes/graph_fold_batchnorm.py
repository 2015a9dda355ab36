"""graph-fold-batchnorm: inference BatchNormalization folded into weights and bias."""

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import dtypes, graph, locations


def _constant(value) -> np.ndarray | None:
    owner = value.owner
    return owner.to_array() if isinstance(owner, graph.ConstantOp) else None


def _affine(bn: graph.BatchNormOp) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, c) with batch_norm(x) = a * x + c per channel, if the params are constant."""
    params = [_constant(v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)
    a = scale / np.sqrt(var + bn.attr("epsilon"))
    return a, bias - mean * a


def _const(array: np.ndarray, like) -> graph.ConstantOp:
    return graph.ConstantOp.from_array(array.astype(dtypes.to_numpy(like)))


class FoldIntoConv(RewritePattern):
    """batch_norm(conv2d(x, w, b)) → conv2d(x, w * a, b * a + c)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, bn: graph.BatchNormOp, rewriter: PatternRewriter) -> None:
        conv = bn.input.owner
        if not isinstance(conv, graph.Conv2dOp) or not conv.result.has_one_use():
            return
        affine, w, b = _affine(bn), _constant(conv.weight), _constant(conv.bias)
        if affine is None or w is None or b is None:
            return
        a, c = affine
        new_w = _const(w * a.reshape(-1, 1, 1, 1), graph.element_type_of(conv.weight.type))
        new_b = _const(b * a + c, graph.element_type_of(conv.bias.type))
        new_conv = graph.Conv2dOp.build(
            [conv.input, new_w.result, new_b.result], **conv.attrs()
        )
        locations.inherit([new_w, new_b, new_conv], conv, bn)
        rewriter.replace(bn, [new_w, new_b, new_conv])
        rewriter.erase(conv)


class FoldIntoGemm(RewritePattern):
    """batch_norm(gemm(A, B, C)) with constant B, C → gemm(A, B * a, (βC) * a + c)
    with β = 1 (the per-column scale goes into B's output columns)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, bn: graph.BatchNormOp, rewriter: PatternRewriter) -> None:
        gemm = bn.input.owner
        if not isinstance(gemm, graph.GemmOp) or not gemm.result.has_one_use():
            return
        affine, w, addend = _affine(bn), _constant(gemm.rhs), _constant(gemm.addend)
        if affine is None or w is None or addend is None:
            return
        a, c = affine
        attrs = gemm.attrs()
        w = w * (a.reshape(-1, 1) if attrs["trans_b"] else a.reshape(1, -1))
        n = a.shape[0]
        addend = np.broadcast_to(addend * attrs["beta"], (*addend.shape[:-1], n)) * a + c
        new_w = _const(w, graph.element_type_of(gemm.rhs.type))
        new_c = _const(addend, graph.element_type_of(gemm.addend.type))
        new_gemm = graph.GemmOp.build(
            [gemm.lhs, new_w.result, new_c.result], **{**attrs, "beta": 1.0}
        )
        locations.inherit([new_w, new_c, new_gemm], gemm, bn)
        rewriter.replace(bn, [new_w, new_c, new_gemm])
        rewriter.erase(gemm)


class BatchNormToAffine(RewritePattern):
    """A batch_norm that could not be folded → x * a + c with per-channel constants,
    which later fuse with their neighbours."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, bn: graph.BatchNormOp, rewriter: PatternRewriter) -> None:
        affine = _affine(bn)
        if affine is None:
            return
        a, c = affine
        rank = len(graph.shape_of(bn.input))
        shape = (-1,) + (1,) * (rank - 2)
        et = graph.element_type_of(bn.input.type)
        a_op, c_op = _const(a.reshape(shape), et), _const(c.reshape(shape), et)
        mul = graph.MulOp.build([bn.input, a_op.result])
        add = graph.AddOp.build([mul.results[0], c_op.result])
        locations.inherit([a_op, c_op, mul, add], bn)
        rewriter.replace(bn, [a_op, c_op, mul, add])


@dataclass(frozen=True)
class GraphFoldBatchnormPass(ModulePass):
    """Folds inference batch norm into the conv / gemm before it (constant weights,
    single use); otherwise rewrites it as a per-channel multiply-add.

        %c = graph.conv2d %x, %w, %b ; %y = graph.batch_norm %c, %s, %t, %m, %v
        → %y = graph.conv2d %x, %w2, %b2        (w2 = w·s/√(v+ε), b2 = (b−m)·s/√(v+ε)+t)
    """

    name = "graph-fold-batchnorm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FoldIntoConv()).rewrite_module(op)
        PatternRewriteWalker(FoldIntoGemm()).rewrite_module(op)
        PatternRewriteWalker(BatchNormToAffine()).rewrite_module(op)
        dce(op)
