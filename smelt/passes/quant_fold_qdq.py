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
               matmul / gemm fold z_x into the bias with the weight's column sums
               (bias_acc = round(β·bias / (α·s_x·s_w)) − z_x·Σ_k w); conv subtracts
               z_x from its input (padding must read the real zero).
  carried      relu / max_pool / reshape / transpose of a per-tensor dequantize
               run on the integers (relu as max(q, z)) and concat of dequantizes
               with equal scale and zero point concatenates the integers; the
               dequantize moves after them.
  identity     quantize(dequantize(q, s, z), s, z) → q.

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


def _constant(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return owner.to_array() if isinstance(owner, graph.ConstantOp) else None


@dataclass(frozen=True)
class _Dq:
    """A dequantize with constant scale and zero point."""

    op: q.DequantizeOp
    scale: np.ndarray
    zero_point: np.ndarray

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def same_params(self, other: _Dq) -> bool:
        return (
            self.scale.shape == other.scale.shape
            and self.zero_point.shape == other.zero_point.shape
            and self.zero_point.dtype == other.zero_point.dtype
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point, other.zero_point)
        )


def _dq(value: SSAValue) -> _Dq | None:
    op = value.owner
    if not isinstance(op, q.DequantizeOp):
        return None
    scale, zp = _constant(op.scale), _constant(op.zero_point)
    if scale is None or zp is None or not np.all(scale > 0):
        return None
    return _Dq(op, scale, zp)


def _const_op(array: np.ndarray) -> graph.ConstantOp:
    return graph.ConstantOp.from_array(np.asarray(array))


def _per_channel(param: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """`param` broadcast to `shape` as one value per index of `axis`, or None if it
    varies along another axis."""
    full = np.broadcast_to(param, shape)
    moved = np.moveaxis(full, axis, 0).reshape(shape[axis], -1)
    if moved.shape[1] and not np.all(moved == moved[:, :1]):
        return None
    return moved[:, 0] if moved.shape[1] else np.zeros(shape[axis], param.dtype)


def _bias_real(value: SSAValue | None) -> np.ndarray | None | bool:
    """The float bias a contraction adds (None: no bias; False: not constant)."""
    if value is None:
        return None
    dq = _dq(value)
    if dq is not None:
        data = _constant(dq.op.input)
        if data is None:
            return False
        zp = dq.zero_point.astype(np.float64)
        return (data.astype(np.float64) - zp) * dq.scale.astype(np.float64)
    c = _constant(value)
    return False if c is None else c.astype(np.float64)


def _quantize_params(op: q.QuantizeOp) -> tuple[float, np.ndarray] | None:
    scale, zp = _constant(op.scale), _constant(op.zero_point)
    if scale is None or zp is None or scale.size != 1 or zp.size != 1:
        return None
    if not scale.reshape(-1)[0] > 0:
        return None
    return float(scale.reshape(-1)[0]), zp.reshape(())


def _eight_bit(x: _Dq | None, w: _Dq | None) -> bool:
    """Both dequantized from int8 / uint8, x per tensor (i32 sums cannot overflow
    for any realistic reduction length)."""
    if x is None or w is None or not x.per_tensor:
        return False
    eight = (dtypes.i8, dtypes.ui8)
    return all(d.op.input.type.element_type in eight for d in (x, w))


@dataclass
class FoldContraction(RewritePattern):
    """quantize(relu?(matmul / gemm / conv2d of dequantized operands)) → integer
    contraction + requantize (+ max for the relu); conv2d only with `conv`."""

    conv: bool = True

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp):
            return
        out = _quantize_params(op)
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
            new = self._matmul(core, bias, out, relu)
        elif isinstance(core, graph.Conv2dOp) and self.conv:
            new = self._conv(core, out, relu)
        else:
            return
        if new is None:
            return
        locations.inherit(new, core, *reversed(matched))
        rewriter.replace(op, new, [new[-1].results[0]])

    # --- matmul / gemm ---------------------------------------------------------

    def _matmul(self, core, extra_bias, out, relu) -> list[Operation] | None:
        x, w = _dq(core.operands[0]), _dq(core.operands[1])
        if not _eight_bit(x, w):
            return None
        w_data = _constant(w.op.input)
        if w_data is None or w_data.ndim != 2:
            return None
        alpha, beta, trans_b = 1.0, 1.0, False
        bias_value = extra_bias
        if isinstance(core, graph.GemmOp):
            attrs = core.attrs()
            if attrs.get("trans_a", 0):
                return None
            alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
            trans_b = bool(attrs.get("trans_b", 0))
            bias_value = core.addend if len(core.operands) > 2 else None
        shape = tuple(w_data.shape)
        axis = 0 if trans_b else 1
        s_w = _per_channel(w.scale, shape, axis)
        if s_w is None or alpha <= 0:
            return None
        wc = w_data.astype(np.int64) - np.broadcast_to(w.zero_point, shape)
        if trans_b:
            wc = wc.T
        k, n = wc.shape
        bias = _bias_real(bias_value)
        if bias is False:
            return None
        if bias is not None:
            if bias.size not in (1, n) or bias.ndim > 2 or (
                bias.ndim == 2 and bias.shape[0] != 1
            ):
                return None
            bias = np.broadcast_to(bias.reshape(-1), (n,)) * beta
        return self._epilogue_ops(
            core, x, wc, s_w * alpha, bias, out, relu, fold_input_zero=True
        )

    # --- conv ------------------------------------------------------------------

    def _conv(self, core: graph.Conv2dOp, out, relu) -> list[Operation] | None:
        x, w = _dq(core.input), _dq(core.weight)
        if not _eight_bit(x, w):
            return None
        w_data = _constant(w.op.input)
        if w_data is None:
            return None
        shape = tuple(w_data.shape)
        s_w = _per_channel(w.scale, shape, 0)
        if s_w is None:
            return None
        wc = w_data.astype(np.int64) - np.broadcast_to(w.zero_point, shape)
        bias = _bias_real(core.bias)
        if bias is False:
            return None
        return self._epilogue_ops(core, x, wc, s_w, bias, out, relu, False)

    # --- shared ----------------------------------------------------------------

    @staticmethod
    def _epilogue_ops(core, x: _Dq, wc, s_w, bias, out, relu, fold_input_zero):
        s_x = float(x.scale.reshape(-1)[0])
        z_x = int(x.zero_point.reshape(-1)[0])
        s_y, z_y = out
        n = s_w.shape[0]
        acc_scale = s_x * s_w.astype(np.float64)
        bias_acc = np.zeros(n, np.int64)
        if bias is not None:
            bias_acc += np.rint(bias / acc_scale).astype(np.int64)
        ops: list[Operation] = []
        x_q = x.op.input
        cast = graph.CastOp.build([x_q], to=dtypes.i32)
        ops.append(cast)
        lhs = cast.results[0]
        if fold_input_zero:
            bias_acc -= z_x * wc.sum(axis=0)
        elif z_x:
            zero = _const_op(np.array(z_x, np.int32))
            sub = graph.SubOp.build([lhs, zero.results[0]])
            ops += [zero, sub]
            lhs = sub.results[0]
        limit = np.iinfo(np.int32)
        if np.abs(bias_acc).max(initial=0) > limit.max or np.abs(wc).max() > limit.max:
            return None
        weight = _const_op(wc.astype(np.int32))
        ops.append(weight)
        if isinstance(core, graph.Conv2dOp):
            bias_op = _const_op(bias_acc.astype(np.int32))
            contraction = graph.Conv2dOp.build(
                [lhs, weight.results[0], bias_op.results[0]], **core.attrs()
            )
            ops += [bias_op, contraction]
            acc = contraction.results[0]
            rank = len(shape_of(acc.type))
            layout = core.attr("layout", "nchw")
            param_shape = (n,) + (1,) * (rank - 2) if layout == "nchw" else (n,)
        else:
            contraction = graph.MatMulOp.build([lhs, weight.results[0]])
            bias_op = _const_op(bias_acc.astype(np.int32))
            add = graph.AddOp.build([contraction.results[0], bias_op.results[0]])
            ops += [contraction, bias_op, add]
            acc = add.results[0]
            param_shape = (n,)
        multiplier = (np.float32(s_x) * s_w.astype(np.float32)) / np.float32(s_y)
        mult_op = _const_op(multiplier.astype(np.float32).reshape(param_shape))
        zp_op = _const_op(z_y)
        # float(acc) · multiplier in f32, then round half to even, + z_y, saturate:
        # onnxruntime's (MLAS) requantization, bit for bit.
        to_float = graph.CastOp.build([acc], to=dtypes.f32)
        scaled = graph.MulOp.build([to_float.results[0], mult_op.results[0]])
        one = _const_op(np.array(1.0, np.float32))
        requant = q.QuantizeOp.build([scaled.results[0], one.results[0], zp_op.results[0]])
        ops += [mult_op, zp_op, to_float, scaled, one, requant]
        if relu:
            ops.append(graph.MaxOp.build([requant.results[0], zp_op.results[0]]))
        return ops


# --- integers carried through data movement ------------------------------------------

_CARRIED = (graph.ReluOp, graph.MaxPoolOp, graph.ReshapeOp, graph.TransposeOp)


class CarryThrough(RewritePattern):
    """op(dequantize(q)) → dequantize(op(q)) for relu (as max(q, z)), max_pool,
    reshape and transpose of a per-tensor dequantize."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, _CARRIED):
            return
        dq = _dq(op.operands[0])
        if dq is None or not dq.per_tensor:
            return
        q_in = dq.op.input
        storage = q_in.type.element_type
        scale = _const_op(dq.scale.reshape(()))
        zero = _const_op(dq.zero_point.reshape(()))
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
        dqs = [_dq(v) for v in op.operands]
        if any(d is None or not d.per_tensor for d in dqs):
            return
        first = dqs[0]
        if not all(first.same_params(d) for d in dqs[1:]):  # type: ignore[union-attr]
            return
        concat = graph.ConcatOp.build([d.op.input for d in dqs], **op.attrs())  # type: ignore[union-attr]
        scale = _const_op(first.scale.reshape(()))  # type: ignore[union-attr]
        zero = _const_op(first.zero_point.reshape(()))  # type: ignore[union-attr]
        new_dq = q.DequantizeOp.build([concat.results[0], scale.results[0], zero.results[0]])
        locations.inherit([concat, scale, zero, new_dq], op)
        rewriter.replace(op, [concat, scale, zero, new_dq])


class QuantizeOfDequantize(RewritePattern):
    """quantize(dequantize(q, s, z), s, z) → q (same storage type)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp):
            return
        dq = _dq(op.input)
        scale, zp = _constant(op.scale), _constant(op.zero_point)
        if dq is None or scale is None or zp is None:
            return
        if op.result.type != dq.op.input.type:
            return
        if not dq.same_params(_Dq(dq.op, scale, zp)):
            return
        rewriter.replace(op, [], [dq.op.input])


@dataclass(frozen=True)
class QuantFoldQdqPass(ModulePass):
    """Integer kernels for QDQ patterns (see the module docstring)."""

    name = "quant-fold-qdq"

    conv: bool = True
    """Fold conv2d too (its i32 loop nest is far slower than the float one for now:
    the CPU presets turn it off; matmul / gemm become quant-pack-gemm's qgemm)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fold = FoldContraction(self.conv)
        patterns = GreedyRewritePatternApplier(
            [CarryThrough(), CarryConcat(), QuantizeOfDequantize(), fold]
        )
        PatternRewriteWalker(patterns).rewrite_module(op)
        dce(op)
