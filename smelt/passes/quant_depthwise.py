"""The integer depthwise conv chain that quant-fold-qdq writes, after
graph-convert-layout's NHWC, as one `quant.dwconv` (dialects/quant_conv.py):

    %a = graph.cast(%x_q) to i32           (a transpose of %x_q / %a on the way too)
    %s = graph.sub(%a, %z_x)                         z_x: scalar constant (optional)
    %c = graph.conv2d{nhwc, group = C}(%s, %w, %b)   %w: i32 [C, KH, KW, 1], %b: i32 [C]
    %f = graph.cast(%c) to f32
    %p = graph.mul(%f, %mult)                        %mult: f32 constant [C]
    %q = quant.quantize(%p, 1.0, %zp)                %zp: u8 / s8 scalar constant
    [%r = graph.max(%q, %zp)]                        relu
  becomes
    %x = graph.pad(transpose?(%x_q), %z_x)           the real zero (no pad: none)
    %r = quant.dwconv(%x, %w', %b', %mult, %zp)      w' [KH, KW, C];
                                                     b' = b − z_x · Σ_{i,j} w
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from smelt.dialects import dtypes, graph, locations
from smelt.dialects import quant as q
from smelt.dialects.graph_base import shape_of
from smelt.dialects.quant_conv import DwConvOp
from smelt.passes.quant_gemm_chain import const, conv_input, single

MAX_TAPS = 49
"""The largest KH·KW unrolled in the kernel body (7×7); larger windows stay as
they are (an i32 loop nest)."""


def _requantize(mul: graph.MulOp) -> tuple[q.QuantizeOp, np.ndarray] | None:
    uses = list(mul.result.uses)
    if len(uses) != 1 or not isinstance(quant := uses[0].operation, q.QuantizeOp):
        return None
    scale, zp = const(quant.scale), const(quant.zero_point)
    if scale is None or zp is None or scale.size != 1 or zp.size != 1:
        return None
    if float(scale.reshape(-1)[0]) != 1.0 or quant.input is not mul.result:
        return None
    if quant.result.type.element_type not in (dtypes.i8, dtypes.ui8):
        return None
    return quant, zp.reshape(())


def _relu(quant: q.QuantizeOp, zp: np.ndarray) -> graph.MaxOp | None:
    uses = list(quant.result.uses)
    if len(uses) == 1 and isinstance(user := uses[0].operation, graph.MaxOp):
        c = const(user.operands[1 - uses[0].index])
        if c is not None and c.size == 1 and c.reshape(-1)[0] == zp:
            return user if user.result.type == quant.result.type else None
    return None


class PackDepthwise(RewritePattern):
    """The chain of the module docstring → pad + quant.dwconv."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.MulOp) or (mult := const(op.operands[1])) is None:
            return
        to_float = single(op.operands[0], graph.CastOp)
        if to_float is None or to_float.result.type.element_type != dtypes.f32:
            return
        conv = single(to_float.operands[0], graph.Conv2dOp)
        if conv is None or conv.attr("layout") != "nhwc":
            return
        c = shape_of(conv.result.type)[-1]
        w, bias = const(conv.weight), const(conv.bias)
        if w is None or bias is None or w.dtype != np.int32 or bias.dtype != np.int32:
            return
        if conv.attr("group") != c or w.shape[0] != c or w.shape[3] != 1:
            return
        kh, kw = w.shape[1:3]
        if kh * kw > MAX_TAPS or mult.size not in (1, c):
            return
        if mult.size > 1 and mult.shape[-1] != c:
            return
        found, req = conv_input(conv), _requantize(op)
        if found is None or req is None:
            return
        x_q, z_x, perm = found
        quant, zp = req
        relu = _relu(quant, zp)
        taps = np.ascontiguousarray(w[:, :, :, 0].transpose(1, 2, 0))  # [KH, KW, C]
        bias64 = np.broadcast_to(bias.reshape(-1), (c,)).astype(np.int64)
        bias64 = bias64 - z_x * taps.astype(np.int64).sum(axis=(0, 1))
        if np.abs(bias64).max(initial=0) > np.iinfo(np.int32).max:
            return
        ops: list[Operation] = []
        rows = x_q
        if perm is not None:
            ops.append(graph.TransposeOp.build([rows], perm=perm))
            rows = ops[-1].results[0]
        pads = list(conv.attr("pads"))
        if any(pads):
            top, left, bottom, right = pads
            storage = dtypes.to_numpy(x_q.type.element_type)
            fill = graph.ConstantOp.from_array(np.array(z_x, storage))
            ops.append(fill)
            ops.append(graph.PadOp.build(
                [rows, fill.results[0]], pads=[0, top, left, 0, 0, bottom, right, 0],
                mode="constant",
            ))  # fmt: skip
            rows = ops[-1].results[0]
        consts = [
            graph.ConstantOp.from_array(a)
            for a in (
                taps,
                bias64.astype(np.int32),
                np.broadcast_to(mult.reshape(-1), (c,)).astype(np.float32),
                zp,
            )
        ]
        ops += consts
        last = relu or quant
        dw = DwConvOp.build(
            [rows, *(k.results[0] for k in consts)],
            kernel_shape=[kh, kw], strides=list(conv.attr("strides")),
            dilations=list(conv.attr("dilations")), relu=int(relu is not None),
        )  # fmt: skip
        ops.append(dw)
        locations.inherit(ops, conv, op, quant, relu)
        rewriter.insert(ops, InsertPoint.before(last))
        rewriter.replace(last, [], [dw.results[0]])


class FoldConstantDequantize(RewritePattern):
    """dequantize(constant q, constant s, constant z) that no integer kernel took
    (a weight or bias of a conv that stays float) → its f32 constant, computed
    once here as onnxruntime computes it ((q − z) · s in f32), and a transpose
    or reshape of an f32 constant (graph-convert-layout's NHWC weight of it) →
    the moved constant: nothing dequantizes a weight per use at run time."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, q.DequantizeOp):
            values = [const(v) for v in op.operands]
            if any(v is None for v in values) or op.result.type.element_type != (
                dtypes.f32
            ):
                return
            data, scale, zp = values  # type: ignore[misc]
            shifted = data.astype(np.int64) - zp.astype(np.int64)  # as onnxruntime
            real = shifted.astype(np.float32) * scale.astype(np.float32)
        elif isinstance(op, graph.TransposeOp | graph.ReshapeOp):
            data = const(op.operands[0])  # the clean-up folded the others before
            if data is None or data.dtype != np.float32:
                return
            if isinstance(op, graph.TransposeOp):
                real = np.transpose(data, list(op.attr("perm")))
            else:
                real = data.reshape(shape_of(op.result.type))
        else:
            return
        new = graph.ConstantOp.from_array(np.ascontiguousarray(real, np.float32))
        locations.inherit(new, op)
        rewriter.replace(op, [new], [new.results[0]])
