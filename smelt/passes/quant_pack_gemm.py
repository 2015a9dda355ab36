"""quant-pack-gemm: quant-fold-qdq's integer matmul and NHWC conv chains become
one `quant.qgemm` each, with int8 (or int16) weights packed for the target CPU's
dot instruction (`dialects/quant_gemm.py`); a QDQ bias add or batch norm after
one joins its epilogue.

Expects the module's `#target.cpu` (no target, or a CPU without AVX2: nothing
changes, the chains run as generic loops) and, for convs, graph-convert-layout's
NHWC. Matches

    %a = graph.cast(%x_q) to i32                     x_q: u8 / s8 [..., K]
    %c = graph.matmul(%a, %w)                        %w: i32 constant [K, N]
    %s = graph.add(%c, %bias)                        %bias: i32 constant [N]
      or
    %s = graph.conv2d{nhwc, group 1}(sub?(%a, z_x), %w, %bias)   (a transpose of
                                                     %a or x_q on the way too)
    %f = graph.cast(%s) to f32
    %p = graph.mul(%f, %mult)                        %mult: f32 constant [N]
    then either (requantize)
    %q = quant.quantize(%p, 1.0, %zp)                %zp: u8 / s8 scalar constant
    [%r = graph.max(%q, %zp)]                        relu
    or (dequantize: a float result, no quantize after it)
    [%o = graph.add(%p, %addend)]                    %addend: f32 constant [N]

and produces `quant.qgemm(%rows, %wp, %bias', %mult', %zp [, %addend'])` with the
packed weight, the bias (less 128 · Σ_k w when s8 activations are shifted to u8
for vpdpbusd) and the per-column constants padded to the panel width. The
weights must fit the variant (vpdpbusd: s8; else the vpmaddwd variant of the
same width is used). The rows are x_q for a matmul; for a conv, x_q (NHWC, in 8
bits) padded with z_x (`graph.pad`: the real zero) and gathered by
`quant.im2col` unless the conv is 1×1 with stride 1, by w [O, KH, KW, C] as
[KH·KW·C, O] (z_x folds into the bias with the weight's column sums). Then a
requantizing qgemm read only by

    quant.quantize(relu?(graph.add?(graph.mul?(
                   quant.dequantize(%qgemm, s_mid, %zp), %scale), %b)), s_out,
                   z_out)                            %scale, %b: constants [N], f32
                                                     or dequantized
    [graph.max(·, z_out)]                            relu

(onnxruntime's QDQ MatMul → Q → DQ → Add → Q; a conv's batch norm after its
quantize, as quant-fold-qdq makes it x · a + c) becomes its `affine_requantize`
epilogue: the affine map and second rounding run on the GEMM's register tile.
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
from smelt.dialects.graph_base import shape_of
from smelt.dialects.quant_gemm import (
    VARIANTS,
    QGemmOp,
    choose_variant,
    pack_weights,
    pairs_fit,
)
from smelt.dialects.quant_gemm import padded as padded_shape
from smelt.dialects.target import cpu_target
from smelt.passes.quant_depthwise import FoldConstantDequantize, PackDepthwise
from smelt.passes.quant_epilogue import FuseDwEpilogue
from smelt.passes.quant_gemm_chain import Chain, const, match_chain, single
from smelt.targets.cpu_spec import CpuSpec


def _padded(values: np.ndarray, n: int, np_: int, dtype) -> np.ndarray:
    out = np.zeros(np_, dtype)
    out[:n] = np.broadcast_to(values.reshape(-1), (n,))
    return out


def _relu_after(op: Operation, zp: np.ndarray) -> Operation | None:
    """The `graph.max(op, zp)` that alone reads op's 8-bit result, if any."""
    uses = list(op.results[0].uses)
    if len(uses) == 1 and isinstance(user := uses[0].operation, graph.MaxOp):
        c = const(user.operands[1 - uses[0].index])
        same = c is not None and c.size == 1 and c.reshape(-1)[0] == zp.reshape(-1)[0]
        if same and user.result.type == op.results[0].type:
            return user
    return None


def _scalar_params(
    op: q.QuantizeOp | q.DequantizeOp,
) -> tuple[float, np.ndarray] | None:
    scale, zp = const(op.scale), const(op.zero_point)
    if scale is None or zp is None or zp.size != 1 or scale.size != 1:
        return None
    return float(scale.reshape(-1)[0]), zp.reshape(())


def _is_requantize(op: Operation) -> bool:
    if not isinstance(op, q.QuantizeOp):
        return False
    params = _scalar_params(op)
    return params is not None and params[0] == 1.0


@dataclass
class PackGemm(RewritePattern):
    """The matched chain (module docstring) → a requantize or dequantize qgemm."""

    variant: str

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        chain = match_chain(op)
        if chain is None:
            return
        uses = list(op.results[0].uses)
        if len(uses) == 1 and _is_requantize(quant := uses[0].operation):
            zp = _scalar_params(quant)[1]  # type: ignore[index]
            relu = _relu_after(quant, zp)
            last = relu or quant
            self._rewrite(rewriter, chain, last, zp, [], relu=int(relu is not None))
            return
        if chain.mul.result.type.element_type != dtypes.f32:
            return
        n, last, addend = chain.w.shape[1], op, np.zeros(1, np.float32)
        if len(uses) == 1 and isinstance(add := uses[0].operation, graph.AddOp):
            other = const(add.operands[1 - uses[0].index])
            fits = other is not None and other.dtype == np.float32
            if fits and other.size in (1, n) and add.result.type == op.results[0].type:
                last, addend = add, other
        zero = np.zeros((), np.uint8)
        self._rewrite(rewriter, chain, last, zero, [addend], epilogue="dequantize")

    def _rewrite(
        self, rewriter, chain: Chain, last: Operation, zp: np.ndarray,
        post: list[np.ndarray], **attrs,
    ) -> None:  # fmt: skip
        w = chain.w
        k, n = w.shape
        variant = self._variant(w)
        if variant is None:
            return
        shift = chain.signed and VARIANTS[variant].kg == 4
        bias64 = np.broadcast_to(chain.bias.reshape(-1), (n,)).astype(np.int64)
        if shift:
            bias64 = bias64 - 128 * w.astype(np.int64).sum(axis=0)
        if np.abs(bias64).max(initial=0) > np.iinfo(np.int32).max:
            return
        _, np_ = padded_shape(k, n, variant)
        arrays = [
            pack_weights(w, variant),
            _padded(bias64, n, np_, np.int32),
            _padded(chain.mult, n, np_, np.float32),
            zp.reshape(()),
            *(_padded(a, n, np_, np.float32) for a in post),
        ]
        consts = [graph.ConstantOp.from_array(a) for a in arrays]
        prep, rows = chain.prep()
        gemm = QGemmOp.build(
            [rows, *(c.results[0] for c in consts)],
            variant=variant, k=k, n=n, relu=attrs.pop("relu", 0),
            shift_input=int(shift), **attrs,
        )  # fmt: skip
        locations.inherit([*prep, *consts, gemm], chain.mul, last)
        rewriter.insert([*prep, *consts, gemm], InsertPoint.before(last))
        rewriter.replace(last, [], [gemm.results[0]])

    def _variant(self, w: np.ndarray) -> str | None:
        """The CPU's variant for these weights: VNNI for s8 weights; without it,
        vpmaddubsw where no pair can saturate (7-bit weights), else vpmaddwd, the
        one that takes weights outside s8 too (up to i16)."""
        wide = VARIANTS[self.variant].lanes == 16
        s8 = w.min(initial=0) >= -128 and w.max(initial=0) <= 127
        if self.variant.startswith("vnni") and s8:
            return self.variant
        if s8 and pairs_fit(w):
            return "maddubs512" if wide else "maddubs256"
        fits = w.min(initial=0) >= -(2**15) and w.max(initial=0) < 2**15
        return ("pmaddwd512" if wide else "pmaddwd256") if fits else None


def _bias_f32(value: SSAValue, n: int) -> np.ndarray | None:
    """A constant bias of [N] (or broadcast to it along N only) in f32, as the
    graph computes it: a constant, or a dequantize of one in f32 arithmetic."""
    data = const(value)
    if isinstance(value.owner, q.DequantizeOp):
        dq = value.owner
        qv, s, z = (const(o) for o in dq.operands)
        if qv is None or s is None or z is None:
            return None
        data = (qv.astype(np.float32) - z.astype(np.float32)) * s.astype(np.float32)
    if data is None or data.dtype != np.float32:
        return None
    dims = data.shape
    if any(d != 1 for d in dims[:-1]) or (dims and dims[-1] not in (1, n)):
        return None
    return np.broadcast_to(data.reshape(-1), (n,)).astype(np.float32)


def _peel(value: SSAValue, cls: type[Operation]) -> tuple[SSAValue, SSAValue] | None:
    """(the side towards a qgemm, the other operand) of a `cls` op (add / mul)
    read only here: the side a mul or the dequantize of a qgemm makes."""
    op = single(value, cls)
    if op is None or op.results[0].type.element_type != dtypes.f32:
        return None
    for side in (0, 1):
        owner = op.operands[side].owner
        if isinstance(owner, graph.MulOp) or (
            isinstance(owner, q.DequantizeOp) and isinstance(owner.input.owner, QGemmOp)
        ):
            return op.operands[side], op.operands[1 - side]
    return None


def _requantizing_gemm(value: SSAValue) -> tuple[QGemmOp, float] | None:
    """(the qgemm, s_mid) when `value` is dequantize(a requantizing qgemm read
    only here) with the qgemm's own zero point."""
    dq = single(value, q.DequantizeOp)
    gemm = single(dq.operands[0], QGemmOp) if dq is not None else None
    if gemm is None or gemm.attrs().get("epilogue", "requantize") != "requantize":
        return None
    mid, gemm_zp = _scalar_params(dq), const(gemm.zero_point)  # type: ignore[arg-type]
    if mid is None or gemm_zp is None or mid[1].dtype != gemm_zp.dtype:
        return None
    if int(mid[1]) != int(gemm_zp.reshape(-1)[0]):
        return None
    return gemm, mid[0]  # type: ignore[return-value]


class FoldAffine(RewritePattern):
    """quantize(relu?(add?(mul?(dequantize(requantizing qgemm), scale), bias)))
    [max] with constant per-column scale and bias → the qgemm's
    affine_requantize epilogue (see the module docstring)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.QuantizeOp) or op.input.type.element_type != dtypes.f32:
            return
        out = _scalar_params(op)
        if out is None or op.result.type.element_type not in (dtypes.i8, dtypes.ui8):
            return
        value, relu = op.input, False
        if (r := single(value, graph.ReluOp)) is not None:
            value, relu = r.operands[0], True
        bias = scale = None
        if (added := _peel(value, graph.AddOp)) is not None:
            value, bias = added
        if (scaled := _peel(value, graph.MulOp)) is not None:
            value, scale = scaled
        found = _requantizing_gemm(value)
        if found is None or (bias is None and scale is None):
            return
        gemm, s_mid = found
        n = int(gemm.attr("n"))
        addend = np.zeros(n, np.float32) if bias is None else _bias_f32(bias, n)
        factor = np.ones(n, np.float32) if scale is None else _bias_f32(scale, n)
        if addend is None or factor is None:
            return
        if shape_of(op.input.type) != shape_of(gemm.result.type):
            return
        s_out, z_out = out
        relu_op = _relu_after(op, z_out)
        last = relu_op or op
        np_ = shape_of(gemm.bias.type)[0]
        consts = [
            graph.ConstantOp.from_array(a)
            for a in (
                _padded(addend, n, np_, np.float32),
                _padded(factor, n, np_, np.float32),
                np.array([s_mid, s_out], np.float32),
                z_out,
            )
        ]
        attrs = gemm.attrs()
        attrs.update(epilogue="affine_requantize", post_relu=int(relu or bool(relu_op)))
        new = QGemmOp.build(
            [*gemm.operands[:5], *(c.results[0] for c in consts)], **attrs
        )
        locations.inherit([*consts, new], gemm, op, relu_op)
        rewriter.insert([*consts, new], InsertPoint.before(last))
        rewriter.replace(last, [], [new.results[0]])


@dataclass(frozen=True)
class QuantPackGemmPass(ModulePass):
    """Integer matmul chains → quant.qgemm (see the module docstring)."""

    name = "quant-pack-gemm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # depthwise convs: a loop nest of their own, on any target
        depthwise = PatternRewriteWalker(PackDepthwise(), apply_recursively=False)
        depthwise.rewrite_module(op)
        dce(op)
        self._pack(op)
        # what stays float: its constant weights dequantized once, here
        PatternRewriteWalker(FoldConstantDequantize()).rewrite_module(op)
        dce(op)
        # the float chain after a depthwise conv: in its kernel (quant_epilogue)
        fuse = PatternRewriteWalker(FuseDwEpilogue(), apply_recursively=False)
        fuse.rewrite_module(op)
        dce(op)

    def _pack(self, op: ModuleOp) -> None:
        target = cpu_target(op)
        if target is None:
            return
        variant = choose_variant(CpuSpec.from_attr(target).has)
        if variant is None:
            return
        walker = PatternRewriteWalker(PackGemm(variant), apply_recursively=False)
        walker.rewrite_module(op)
        dce(op)
        PatternRewriteWalker(FoldAffine(), apply_recursively=False).rewrite_module(op)
        dce(op)
