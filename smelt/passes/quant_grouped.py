"""A grouped QDQ conv (1 < group, not depthwise) split into one conv per group
(#32), each then an integer conv that quant-pack-gemm makes a qgemm:

    %x = quant.dequantize(%x_q, s, z)                    s, z per tensor
    %c = graph.conv2d{group = G}(%x, dequantize(W_q, s_w, z_w)[, bias])
    %q = quant.quantize(relu?(%c), s_y, z_y)             per tensor
  becomes
    %p… = graph.split(%x_q) {axis = 1, G equal parts}
    %q_g = quant.quantize(relu?(graph.conv2d{group = 1}(dequantize(%p_g, s, z),
             dequantize(W_q[g], s_w[g], z_w[g])[, bias[g]])), s_y, z_y)
    %q = graph.concat(%q_0, …) {axis = 1}

Exact: a quantize with per-tensor parameters is elementwise, so quantizing the
concatenation is concatenating the quantized parts, and group g of a grouped
conv is the plain conv of input channels g and output channels g. The 8-bit
tensor is split, not its dequantized copy (fold-qdq then reads each part's
dequantize as its integer conv's input).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from smelt.dialects import graph, locations
from smelt.dialects import quant as q
from smelt.dialects.graph_base import shape_of
from smelt.dialects.quant_gemm import choose_variant
from smelt.dialects.target import cpu_target
from smelt.passes.quant_gemm_chain import const
from smelt.passes.quant_integer import dequantized, quantize_params
from smelt.targets.cpu_spec import CpuSpec


def qgemm_target(module: ModuleOp) -> bool:
    """Whether quant-pack-gemm makes a qgemm of a plain integer conv here (a CPU
    target with a micro-kernel variant): elsewhere the per-group convs would be
    i32 loop nests, slower than the float conv they replace."""
    target = cpu_target(module)
    return target is not None and choose_variant(CpuSpec.from_attr(target).has) is not None


def _sliced(value: SSAValue, part: int, parts: int, ops: list[Operation]) -> SSAValue:
    """Output channels `part` of a conv weight / bias `value`: a constant, or a
    dequantize of a constant with scale and zero point per tensor or per dim 0."""
    def cut(a: np.ndarray, whole: int) -> np.ndarray:
        if a.ndim == 0 or a.shape[0] != whole:
            return a  # per tensor (or broadcast along dim 0)
        n = whole // parts
        return np.ascontiguousarray(a[part * n : (part + 1) * n])

    whole = shape_of(value.type)[0]
    data = const(value)
    if data is not None:
        ops.append(graph.ConstantOp.from_array(cut(data, whole)))
        return ops[-1].results[0]
    deq = value.owner
    assert isinstance(deq, q.DequantizeOp)
    args = []
    for operand in deq.operands:
        arr = const(operand)
        assert arr is not None
        ops.append(graph.ConstantOp.from_array(cut(arr, whole)))
        args.append(ops[-1].results[0])
    ops.append(q.DequantizeOp.build(args))
    return ops[-1].results[0]


def _constant_operand(value: SSAValue, whole: int) -> bool:
    """A constant, or a dequantize of constants, whose per-channel parameters
    (if any) run along dim 0."""
    if const(value) is not None:
        return True
    deq = value.owner
    if not isinstance(deq, q.DequantizeOp):
        return False
    arrays = [const(v) for v in deq.operands]
    if any(a is None for a in arrays):
        return False
    return all(
        a.size == 1 or (a.shape[0] == whole and a.size == whole)
        for a in arrays[1:]  # type: ignore[union-attr]
    )


class SplitGroupedConv(RewritePattern):
    """The grouped conv chain of the module docstring → one conv per group."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp) or quantize_params(op) is None:
            return
        value, relu = op.input, None
        if isinstance(value.owner, graph.ReluOp) and value.has_one_use():
            relu, value = value.owner, value.owner.input
        conv = value.owner
        if not isinstance(conv, graph.Conv2dOp) or not value.has_one_use():
            return
        if conv.attr("layout", "nchw") != "nchw":
            return
        groups = conv.attr("group")
        c_in = shape_of(conv.input.type)[1]
        c_out = shape_of(conv.result.type)[1]
        if groups <= 1 or groups == c_in or c_out % groups or c_in % groups:
            return
        x = dequantized(conv.input)
        if x is None or not x.per_tensor:
            return
        operands = [conv.weight, *conv.operands[2:]]
        if not all(_constant_operand(v, c_out) for v in operands):
            return
        if const(conv.weight) is not None:
            return  # a float weight: no integer conv to make
        split = graph.SplitOp.build(
            [x.op.input], axis=1, sizes=[c_in // groups] * groups
        )
        ops: list[Operation] = [split]
        parts = []
        attrs = {**conv.attrs(), "group": 1}
        for g in range(groups):
            deq = q.DequantizeOp.build([split.results[g], x.op.scale, x.op.zero_point])
            ops.append(deq)
            args = [_sliced(v, g, groups, ops) for v in operands]
            ops.append(graph.Conv2dOp.build([deq.results[0], *args], **attrs))
            if relu is not None:
                ops.append(graph.ReluOp.build([ops[-1].results[0]]))
            ops.append(q.QuantizeOp.build([ops[-1].results[0], op.scale, op.zero_point]))
            parts.append(ops[-1].results[0])
        concat = graph.ConcatOp.build(parts, axis=1)
        ops.append(concat)
        locations.inherit(ops, conv, op, relu)
        rewriter.insert(ops, InsertPoint.before(op))
        rewriter.replace(op, [], [concat.results[0]])

