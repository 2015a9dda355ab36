"""bf16 conv2d (group 1) → im2col and a call of the AVX512-BF16 GEMM
(llvm/emit_bf16_gemm.py), on an avx512bf16 target (quant-cast makes group-1
convs bf16 by default where `bf16_path.conv_has_fast_path` holds: a CPU whose
bf16 dot beats f32, Zen 4 / 5; anywhere with `contractions=true`):

    cols[M, K] = window of x at each output pixel      // bf16, zeros in the pads
    loop.for %u = 0 to U parallel {                   // f32 C = cols @ W, vdpbf16ps
      func.call @smelt.bf16_gemm(%cols, %wp, %scratch, %u)
    }
    loop.for n, oh, ow, o: write(epilogue(scratch[0, pixel, o] + bias[o]))

M = N·OH·OW output pixels, K the window ((kh, kw, c) in NHWC, the OHWI weights'
own order; (c, kh, kw) in NCHW), W[K, O] packed at compile time (`pack_b`); an
NHWC 1x1 stride-1 conv without pads reads its input in place as cols. Everything
else (f32 convs, groups, another target, weights computed at run time) lowers
through lower_conv_nchw.py / lower_conv.py as before.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop
from smelt.errors import SmeltError
from smelt.lowering import lower_conv_nchw
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.llvm.bf16_gemm import NR, pack_b
from smelt.lowering.llvm.emit_bf16_gemm import CALLEE, units
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.scalar_ops import Arith, memref_type
from smelt.targets.bf16_path import ConvPlan, conv_fits, conv_plan


def _bf16(op: graph.Conv2dOp) -> bool:
    values = [op.input, op.weight, op.result]
    return all(graph.element_type_of(v) == dtypes.bf16 for v in values)


def prepare(
    ctx: LoweringContext, op: graph.Conv2dOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[cols (unless direct), packed W, f32 scratch] on the fast path, else what
    the f32 conv lowering prepares."""
    return _prepare_fast(ctx, op, operand_buffer) or lower_conv_nchw.prepare(
        ctx, op, operand_buffer
    )


def _prepare_fast(
    ctx: LoweringContext, op: graph.Conv2dOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    plan = conv_plan(op)
    if plan is None or not _bf16(op) or not conv_fits(op):
        return []
    try:
        x = operand_buffer(0)
        w = operand_buffer(1)
    except SmeltError:  # a fused prologue computes x or w: the generic lowering
        return []
    if not isinstance(w.owner, loop.ConstantOp):
        return []
    weight = graph.dense_to_array(w.owner.value).reshape(plan.o, plan.k)
    value = graph.array_to_dense(pack_b(weight.T))
    memref = memref_type(value.type)  # type: ignore[arg-type]
    wp = ctx.emit(loop.ConstantOp(value, memref))
    np_ = -(-plan.o // NR) * NR
    extra = [] if plan.direct else [_im2col(ctx, plan, x)]
    return [*extra, wp, ctx.alloc(MemRefType(dtypes.f32, [1, plan.m, np_]))]


def _im2col(ctx: LoweringContext, plan: ConvPlan, x: SSAValue) -> SSAValue:
    """A kernel writing cols[m, k] = x at output pixel m's window position k (zero
    where the window is in the pads)."""
    cols = ctx.alloc(MemRefType(dtypes.bf16, [plan.m, plan.k]))
    k = ctx.kernel("conv2d_im2col", [x], [cols])
    zero = k.constant(0.0, dtypes.bf16)
    (sh, sw), (dh, dw), (pt, pl) = plan.strides, plan.dilations, plan.pads[:2]
    if plan.nhwc:  # k = (kh, kw, c): c innermost, contiguous in x and cols
        sizes = [plan.n, plan.oh, plan.ow, plan.kh, plan.kw, plan.c]
    else:  # k = (c, kh, kw)
        sizes = [plan.n, plan.oh, plan.ow, plan.c, plan.kh, plan.kw]
    with k.nest(sizes) as ivs:
        if plan.nhwc:
            n, oh, ow, kh, kw, c = ivs
            col = k.affine([(kh, plan.kw * plan.c), (kw, plan.c), (c, 1)])
        else:
            n, oh, ow, c, kh, kw = ivs
            col = k.affine([(c, plan.kh * plan.kw), (kh, plan.kw), (kw, 1)])
        row = k.affine([(n, plan.oh * plan.ow), (oh, plan.ow), (ow, 1)])
        ih = k.affine([(oh, sh), (kh, dh)], -pt)
        iw = k.affine([(ow, sw), (kw, dw)], -pl)
        checks = [k.in_range(i, 0, size) for i, size, pad in
                  ((ih, plan.h, pt + plan.pads[2]), (iw, plan.w, pl + plan.pads[3]))
                  if pad]  # fmt: skip
        ih, iw = (k.clamp(ih, 0, plan.h - 1) if pt + plan.pads[2] else ih,
                  k.clamp(iw, 0, plan.w - 1) if pl + plan.pads[3] else iw)  # fmt: skip
        src = [n, ih, iw, c] if plan.nhwc else [n, c, ih, iw]
        value = k.load(k.inputs[0], src)
        ok = k.and_all(checks)
        if ok is not None:
            value = k.op(arith.SelectOp, ok, value, zero)
        k.store(value, k.outputs[0], [row, col])
    return cols


def _fast(io: KernelIO) -> bool:
    """Whether `prepare` took the fast path: its last two extras are a packed W
    ([P, Kh, 32, 2] bf16) and the f32 [1, M, P·32] scratch."""
    if len(io.extra) < 2:
        return False
    wp, scratch = (v.type for v in io.extra[-2:])
    if not (isinstance(wp, MemRefType) and isinstance(scratch, MemRefType)):
        return False
    w_shape, s_shape = list(wp.get_shape()), list(scratch.get_shape())
    return (
        wp.element_type == dtypes.bf16 and scratch.element_type == dtypes.f32
        and len(w_shape) == 4 and w_shape[2:] == [NR, 2] and len(s_shape) == 3
        and s_shape[0] == 1 and s_shape[2] == w_shape[0] * NR
    )  # fmt: skip


def emit(io: KernelIO, op: graph.Conv2dOp) -> None:
    if not _fast(io):
        lower_conv_nchw.emit(io, op)
        return
    plan = conv_plan(op)
    assert plan is not None
    *cols, wp, scratch = io.extra
    a = cols[0] if cols else io.operand_buffer(0)
    _, m, np_ = (scratch.type.get_shape())  # type: ignore[attr-defined]
    count, chunk = units(1, np_)
    k = io.k
    with k.loop(count) as u:
        call = func.CallOp(CALLEE, [a, wp, scratch, u], [])
        # vector ops per call: 2·MR dp per MR rows, k pair and panel
        call.attributes[loop.WORK_ATTR] = IntegerAttr(m * chunk * (plan.k + 1), 64)
        k.emit(call)
    ar = Arith(k, graph.element_type_of(op.result))
    with k.nest(list(graph.shape_of(op.result))) as ivs:
        if plan.nhwc:
            n, oh, ow, o = ivs
        else:
            n, o, oh, ow = ivs
        row = k.affine([(n, plan.oh * plan.ow), (oh, plan.ow), (ow, 1)])
        acc = k.load_value(scratch, [k.index(0), row, o])
        io.write(0, ar.add(acc, io.read(2, [o])), ivs)


ANCHORS: dict[type[Operation], Anchor] = {
    graph.Conv2dOp: Anchor(emit, prepare),  # type: ignore[arg-type]
}
"""Overrides lower_conv_nchw.ANCHORS' conv2d: the bf16 GEMM where it applies."""
