"""quant-pack-gemm: quant-fold-qdq's integer matmul + requantize chain becomes one
`quant.qgemm` with int8 (or int16) weights packed for the target CPU's dot
instruction (`dialects/quant_gemm.py`).

Expects the module's `#target.cpu` (no target, or a CPU without AVX2: nothing
changes, the chain runs as generic loops). Matches

    %a = graph.cast(%x_q) to i32                     x_q: u8 / s8 [..., K]
    %c = graph.matmul(%a, %w)                        %w: i32 constant [K, N]
    %s = graph.add(%c, %bias)                        %bias: i32 constant [N]
    %f = graph.cast(%s) to f32
    %p = graph.mul(%f, %mult)                        %mult: f32 constant [N]
    %q = quant.quantize(%p, 1.0, %zp)                %zp: u8 / s8 scalar constant
    [%r = graph.max(%q, %zp)]                        relu

and produces `%q = quant.qgemm(%x_q, %wp, %bias', %mult', %zp)` with the packed
weight, the bias (less 128 · Σ_k w when s8 activations are shifted to u8 for
vpdpbusd) and the multiplier padded to the panel width. The weights must fit the
variant (vpdpbusd: s8; else the vpmaddwd variant of the same width is used).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.rewriter import InsertPoint
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import dtypes, graph, locations
from smelt.dialects import quant as q
from smelt.dialects.quant_gemm import VARIANTS, QGemmOp, choose_variant, pack_weights
from smelt.dialects.quant_gemm import padded as padded_shape
from smelt.dialects.target import cpu_target
from smelt.targets.cpu_spec import CpuSpec


def _const(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return owner.to_array() if isinstance(owner, graph.ConstantOp) else None


def _single(value: SSAValue, cls: type[Operation]) -> Operation | None:
    """The op of type `cls` that produces `value`, used only once."""
    owner = value.owner
    return owner if isinstance(owner, cls) and value.has_one_use() else None


@dataclass
class PackGemm(RewritePattern):
    variant: str

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp):
            return
        scale, zp = _const(op.scale), _const(op.zero_point)
        if scale is None or zp is None or zp.size != 1 or scale.size != 1:
            return
        if float(scale.reshape(-1)[0]) != 1.0:
            return
        mul = _single(op.input, graph.MulOp)
        if mul is None or (mult := _const(mul.operands[1])) is None:
            return
        to_float = _single(mul.operands[0], graph.CastOp)
        if to_float is None or to_float.result.type.element_type != dtypes.f32:
            return
        add = _single(to_float.operands[0], graph.AddOp)
        if add is None or (bias := _const(add.operands[1])) is None:
            return
        matmul = _single(add.operands[0], graph.MatMulOp)
        if matmul is None or (w := _const(matmul.operands[1])) is None:
            return
        widen = _single(matmul.operands[0], graph.CastOp)
        if widen is None or w.ndim != 2 or w.dtype != np.int32:
            return
        x_q = widen.operands[0]
        if len(x_q.type.get_shape()) < 2:
            return
        signed = x_q.type.element_type == dtypes.i8
        if not signed and x_q.type.element_type != dtypes.ui8:
            return
        k, n = w.shape
        if bias.size not in (1, n) or mult.size not in (1, n):
            return
        relu, last = self._relu(op, zp)
        variant = self._variant(w)
        if variant is None:
            return
        shift = signed and VARIANTS[variant].kg == 4
        bias64 = np.broadcast_to(bias.reshape(-1), (n,)).astype(np.int64)
        if shift:
            bias64 = bias64 - 128 * w.astype(np.int64).sum(axis=0)
        if np.abs(bias64).max(initial=0) > np.iinfo(np.int32).max:
            return
        _, np_ = padded_shape(k, n, variant)
        bias_p = np.zeros(np_, np.int32)
        bias_p[:n] = bias64
        mult_p = np.zeros(np_, np.float32)
        mult_p[:n] = np.broadcast_to(mult.reshape(-1), (n,))
        consts = [
            graph.ConstantOp.from_array(a)
            for a in (pack_weights(w, variant), bias_p, mult_p, zp.reshape(()))
        ]
        gemm = QGemmOp.build(
            [x_q, *(c.results[0] for c in consts)],
            variant=variant, k=k, n=n, relu=int(relu), shift_input=int(shift),
        )  # fmt: skip
        locations.inherit([*consts, gemm], widen, matmul, add, to_float, mul, op, last)
        rewriter.insert([*consts, gemm], InsertPoint.before(op))
        rewriter.replace(last, [], [gemm.results[0]])

    @staticmethod
    def _relu(op: q.QuantizeOp, zp: np.ndarray) -> tuple[bool, Operation]:
        uses = list(op.result.uses)
        if len(uses) == 1 and isinstance(user := uses[0].operation, graph.MaxOp):
            other = user.operands[1 - uses[0].index]
            c = _const(other)
            if c is not None and c.size == 1 and c.reshape(-1)[0] == zp.reshape(-1)[0]:
                if user.result.type == op.result.type:
                    return True, user
        return False, op

    def _variant(self, w: np.ndarray) -> str | None:
        if VARIANTS[self.variant].kg == 2 or (w.min() >= -128 and w.max() <= 127):
            return self.variant
        wide = "pmaddwd512" if VARIANTS[self.variant].lanes == 16 else "pmaddwd256"
        fits = w.min() >= -(2**15) and w.max() < 2**15
        return wide if fits else None


@dataclass(frozen=True)
class QuantPackGemmPass(ModulePass):
    """Integer matmul + requantize chains → quant.qgemm (see the module docstring)."""

    name = "quant-pack-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = cpu_target(op)
        if target is None:
            return
        variant = choose_variant(CpuSpec.from_attr(target).has)
        if variant is None:
            return
        walker = PatternRewriteWalker(PackGemm(variant), apply_recursively=False)
        walker.rewrite_module(op)
        dce(op)
