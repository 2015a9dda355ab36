"""quant-fold-qdq: QDQ patterns (dequantize → float op → quantize) become integer
arithmetic with int32 accumulation.

A QDQ model (onnxruntime's quantize_static, QDQ format) computes every quantized
layer in float between a dequantize and a quantize. This pass rewrites the patterns
where the integer form is exact or within the rounding of the requantization:

  contraction  quantize(relu?(op(dequantize(x_q), dequantize(w_q), bias?)))
               op = matmul / gemm (trans_a = 0) / conv2d, w_q a constant (per
               tensor or per output channel), x per tensor, the quantize per
               tensor; the bias a float or dequantized constant. Becomes
                 acc = op_i32(cast(x_q) [− z_x], w_q − z_w) + bias_acc
                 y_q = requantize(acc, s_x·s_w / s_y, z_y)   [max(y_q, z_y): relu]
               (`quant_integer.py` has the details).
  float        matmul / gemm (+ add of a constant bias) of such operands whose
               result stays float (no quantize follows it): the same i32
               contraction, then f32(acc) · s_x·s_w (+ bias), so that the weight
               stays int8 instead of being dequantized on every run.
  carried      relu / max_pool / reshape / transpose of a per-tensor dequantize
               run on the integers (relu as max(q, z)) and concat of dequantizes
               with equal scale and zero point concatenates the integers; the
               dequantize moves after them.
  identity     quantize(dequantize(q, s, z), s, z) → q.
  batch norm   batch_norm(dequantize(q)) with constant parameters → x · a + c
               per channel (elementwise: NHWC-able, a qgemm epilogue).

Anything else stays as it is (correct, in float). graph-fuse then puts the cast,
contraction, bias, requantize and max into one kernel.
"""

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

from smelt.dialects import dtypes, graph, locations
from smelt.dialects import quant as q
from smelt.dialects.graph_base import shape_of, tensor
from smelt.passes.quant_depthwise import MAX_TAPS
from smelt.passes.quant_grouped import SplitGroupedConv, qgemm_target
from smelt.passes.quant_integer import (
    Dq,
    bias_real,
    const_op,
    constant,
    dequantized,
    fold_conv,
    fold_matmul,
    quantize_params,
)


@dataclass
class FoldContraction(RewritePattern):
    """quantize(relu?(matmul / gemm / conv2d of dequantized operands)) → integer
    contraction + requantize (+ max for the relu); conv2d only with `conv`."""

    conv: bool = True
    grouped_conv: bool = True

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp):
            return
        out = quantize_params(op)
        if out is None or op.input.type.element_type != dtypes.f32:
            return
        value, relu, matched = op.input, False, [op]
        if isinstance(value.owner, graph.ReluOp) and value.has_one_use():
            matched.append(value.owner)
            value, relu = value.owner.input, True
        core = value.owner
        if not value.has_one_use():
            return
        bias: SSAValue | None = None
        if isinstance(core, graph.AddOp) and isinstance(
            core.operands[0].owner, graph.MatMulOp | graph.GemmOp
        ):
            if not core.operands[0].has_one_use():
                return
            matched.append(core)
            bias, core = core.operands[1], core.operands[0].owner
            if isinstance(core, graph.GemmOp):
                return  # gemm + add: left alone (rare)
        if isinstance(core, graph.MatMulOp | graph.GemmOp):
            new = fold_matmul(core, bias, out, relu)
        elif isinstance(core, graph.Conv2dOp) and self.conv:
            if core.attr("group") != 1 and not (
                self.grouped_conv or _depthwise(core)
            ):
                return
            new = fold_conv(core, out, relu)
        else:
            return
        if new is None:
            return
        locations.inherit(new, core, *reversed(matched))
        rewriter.replace(op, new, [new[-1].results[0]])


def _depthwise(conv: graph.Conv2dOp) -> bool:
    """One filter per channel (group = C in = C out): quant-pack-gemm makes its
    NHWC integer form a quant.dwconv, channels in vector lanes."""
    nhwc = conv.attr("layout", "nchw") == "nhwc"
    channels = shape_of(conv.input.type)[-1 if nhwc else 1]
    out = shape_of(conv.weight.type)  # [O, C / group, KH, KW] (nhwc: [O, KH, KW, ·])
    taps = out[1] * out[2] if nhwc else out[2] * out[3]
    per_group = out[3] if nhwc else out[1]
    group = conv.attr("group")
    return group == channels == out[0] and per_group == 1 and taps <= MAX_TAPS


class FoldFloatContraction(RewritePattern):
    """matmul / gemm (+ add of a constant bias) of dequantized operands whose result
    stays float → integer contraction, f32(acc) · s_x·s_w (+ bias): the int8
    weight is read as it is, not dequantized on every run. Runs after
    FoldContraction, which takes the ones that a quantize follows."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.MatMulOp | graph.GemmOp):
            return
        if op.result.type.element_type != dtypes.f32:
            return
        root, bias = op, None
        uses = list(op.result.uses)
        add = uses[0].operation if len(uses) == 1 else None
        if isinstance(op, graph.MatMulOp) and isinstance(add, graph.AddOp):
            other = add.operands[1 - uses[0].index]
            real = bias_real(other)
            if isinstance(real, np.ndarray) and add.result.type == op.result.type:
                root, bias = add, other
        new = fold_matmul(op, bias, None, False)
        if new is None and root is not op:  # the add's operand is no bias: alone
            root, new = op, fold_matmul(op, None, None, False)
        if new is None:
            return
        locations.inherit(new, op, root)
        rewriter.replace(root, new, [new[-1].results[0]])


class BatchNormAffine(RewritePattern):
    """batch_norm(dequantize(q)) with constant (or dequantized constant) params →
    x · a + c per channel (a = scale / sqrt(var + ε), c = bias − mean · a, in
    f32, as onnxruntime computes it): elementwise, so that it moves to NHWC
    with the convs around it and joins a qgemm's epilogue (a QDQ model keeps a
    batch norm after a conv's quantize, where graph-fold-batchnorm cannot go)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.BatchNormOp) or dequantized(op.input) is None:
            return
        if op.result.type.element_type != dtypes.f32:
            return
        params = [bias_real(v) for v in (op.scale, op.bias, op.mean, op.var)]
        if not all(isinstance(p, np.ndarray) for p in params):
            return
        scale, bias, mean, var = params  # type: ignore[misc]
        shape = shape_of(op.result.type)
        channels = shape[1] if len(shape) > 1 else 1
        if any(p.size not in (1, channels) for p in params):  # type: ignore[union-attr]
            return
        a = scale / np.sqrt(var + float(op.attr("epsilon")))
        c = bias - mean * a
        param_shape = (channels,) + (1,) * (len(shape) - 2)
        a_op, c_op = (
            const_op(np.broadcast_to(v.reshape(-1), (channels,)).astype(np.float32)
                     .reshape(param_shape))
            for v in (a, c)
        )  # fmt: skip
        mul = graph.MulOp.build([op.input, a_op.results[0]])
        add = graph.AddOp.build([mul.results[0], c_op.results[0]])
        rewriter.replace(op, [a_op, c_op, mul, add])


# --- integers carried through data movement ------------------------------------------

_CARRIED = (graph.ReluOp, graph.MaxPoolOp, graph.ReshapeOp, graph.TransposeOp)


class CarryThrough(RewritePattern):
    """op(dequantize(q)) → dequantize(op(q)) for relu (as max(q, z)), max_pool,
    reshape and transpose of a per-tensor dequantize."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _CARRIED):
            return
        dq = dequantized(op.operands[0])
        if dq is None or not dq.per_tensor:
            return
        q_in = dq.op.input
        storage = q_in.type.element_type
        scale = const_op(dq.scale.reshape(()))
        zero = const_op(dq.zero_point.reshape(()))
        if isinstance(op, graph.ReluOp):
            moved = graph.MaxOp.build([q_in, zero.results[0]])
        elif isinstance(op, graph.ReshapeOp):
            moved = graph.ReshapeOp.build(
                [q_in], [tensor(storage, shape_of(op.result.type))]
            )
        else:
            moved = type(op).build([q_in], **op.attrs())
        new_dq = q.DequantizeOp.build([moved.results[0], scale.results[0], zero.results[0]])
        locations.inherit([scale, zero, moved, new_dq], op)
        rewriter.replace(op, [scale, zero, moved, new_dq])


class CarryConcat(RewritePattern):
    """concat(dequantize(q_i, s, z)...) with equal s, z → dequantize(concat(q_i))."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.ConcatOp) or not op.operands:
            return
        dqs = [dequantized(v) for v in op.operands]
        if any(d is None or not d.per_tensor for d in dqs):
            return
        first = dqs[0]
        if not all(first.same_params(d) for d in dqs[1:]):  # type: ignore[union-attr]
            return
        concat = graph.ConcatOp.build([d.op.input for d in dqs], **op.attrs())  # type: ignore[union-attr]
        scale = const_op(first.scale.reshape(()))  # type: ignore[union-attr]
        zero = const_op(first.zero_point.reshape(()))  # type: ignore[union-attr]
        new_dq = q.DequantizeOp.build([concat.results[0], scale.results[0], zero.results[0]])
        locations.inherit([concat, scale, zero, new_dq], op)
        rewriter.replace(op, [concat, scale, zero, new_dq])


class QuantizeOfDequantize(RewritePattern):
    """quantize(dequantize(q, s, z), s, z) → q (same storage type)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp):
            return
        dq = dequantized(op.input)
        scale, zp = constant(op.scale), constant(op.zero_point)
        if dq is None or scale is None or zp is None:
            return
        if op.result.type != dq.op.input.type:
            return
        if not dq.same_params(Dq(dq.op, scale, zp)):
            return
        rewriter.replace(op, [], [dq.op.input])


@dataclass(frozen=True)
class QuantFoldQdqPass(ModulePass):
    """Integer kernels for QDQ patterns (see the module docstring)."""

    name = "quant-fold-qdq"

    conv: bool = True
    """Fold conv2d too (quant-pack-gemm makes an NHWC one a qgemm; left as an i32
    loop nest it is slower than the float conv: the presets without NHWC turn
    it off)."""
    grouped_conv: bool = True
    """Fold convs with groups > 1 too (no qgemm takes them: an i32 loop nest).
    Depthwise convs (group = C in = C out) are folded either way: quant-pack-gemm
    makes them a quant.dwconv; and with `conv`, on a CPU that a qgemm runs on,
    a grouped conv of a per-tensor dequantized input and constant weights is
    split first into one conv per group (quant_grouped), each a plain conv."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.conv and qgemm_target(op):  # grouped: a qgemm per group
            split = PatternRewriteWalker(SplitGroupedConv(), apply_recursively=False)
            split.rewrite_module(op)
        fold = FoldContraction(self.conv, self.grouped_conv)
        patterns = GreedyRewritePatternApplier(
            [BatchNormAffine(), CarryThrough(), CarryConcat(), QuantizeOfDequantize(),
             fold]  # fmt: skip
        )
        PatternRewriteWalker(patterns).rewrite_module(op)
        # what no quantize took: float results of integer contractions
        PatternRewriteWalker(FoldFloatContraction()).rewrite_module(op)
        dce(op)
