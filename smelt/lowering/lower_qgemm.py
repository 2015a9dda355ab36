"""quant.qgemm → a kernel that runs the int8 GEMM micro-kernel by units, a parallel
loop that loop-parallelize can spread over threads:

    loop.for %u = 0 to U parallel {
      func.call @smelt.qgemm(%x, %wp, %bias, %mult, %zp, %post..., %y, %u)
          {quant.qgemm = {variant, m, k, n, ...}}
    }

(`quant_gemm.units` splits rows and columns into U units; the LLVM target defines
@smelt.qgemm per parameter set, `lowering/llvm/int8_gemm.py`: the packed
micro-kernel has no loop-level form). The call's attribute carries what the
emitter needs: {variant, m, k, n, zero_point, relu, shift_input, signed_input,
signed_output, signed_zero_point, epilogue, post_relu, post_zero_point,
post_kinds, row_blocks, block_rows, chunks, chunk_panels}; an epilogue program
(`quant_epilogue`) goes as it is, `post_kinds` says how each post operand is
read: "c" a per-column f32 [N_p], "f32" / "ui8" / "i8" a tensor of the result's
shape (a residual, read at the output element).

For the pmaddwd variants (AVX2, AVX-512 without VNNI) a `qgemm_widen` kernel
first widens x to i16 [..., K_p] (zeros past K), and the qgemm kernel reads that:
the micro-kernel then broadcasts each row's k pair with one load.

quant.im2col → a copy nest.
"""

from __future__ import annotations

import math

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue

from smelt.dialects.dtypes import i8, i16
from smelt.dialects.graph_base import shape_of
from smelt.dialects.graph_data import ConstantOp
from smelt.dialects.loop import WORK_ATTR
from smelt.dialects.quant_gemm import (
    CALLEE,
    PARAMS_ATTR,
    VARIANTS,
    Im2ColOp,
    QGemmOp,
    padded,
    units,
)
from smelt.errors import SmeltError
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_qconv_dw import LOWERINGS as DWCONV_LOWERINGS


def _constant_int(op: QGemmOp, value: SSAValue, what: str) -> int:
    owner = value.owner
    if not isinstance(owner, ConstantOp):
        raise SmeltError(f"{op.name}: the {what} must be a constant")
    return int(owner.to_array().reshape(-1)[0])


def lower_qgemm(ctx: LoweringContext, op: QGemmOp) -> None:
    a = op.attrs()
    epilogue = str(a.get("epilogue", "requantize"))
    zp = 0
    if epilogue != "dequantize":
        zp = _constant_int(op, op.zero_point, "output zero point")
    post_zp = 0
    if epilogue == "affine_requantize":
        post_zp = _constant_int(op, op.post[3], "output zero point")
    xs = shape_of(op.input.type)
    kinds = [
        "c" if len(shape_of(p.type)) == 1 else str(p.type.element_type)
        for p in op.post
    ]
    params = {
        "variant": StringAttr(str(a["variant"])),
        "m": IntegerAttr(math.prod(xs[:-1]), i64),
        "k": IntegerAttr(int(a["k"]), i64),
        "n": IntegerAttr(int(a["n"]), i64),
        "zero_point": IntegerAttr(zp, i64),
        "relu": IntegerAttr(int(a.get("relu", 0)), i64),
        "shift_input": IntegerAttr(int(a.get("shift_input", 0)), i64),
        "signed_input": IntegerAttr(int(op.input.type.element_type == i8), i64),
        "signed_output": IntegerAttr(int(op.result.type.element_type == i8), i64),
        "signed_zero_point": IntegerAttr(
            int(op.zero_point.type.element_type == i8), i64
        ),
        "epilogue": StringAttr(epilogue),
        "post_relu": IntegerAttr(int(a.get("post_relu", 0)), i64),
        "post_zero_point": IntegerAttr(post_zp, i64),
        "post_kinds": StringAttr(",".join(kinds)),
    }
    m, kk, n, variant = math.prod(xs[:-1]), int(a["k"]), int(a["n"]), str(a["variant"])
    split = units(m, kk, n, variant)
    params.update({f: IntegerAttr(getattr(split, f), i64) for f in split._fields})
    v = VARIANTS[variant]
    kp, _ = padded(kk, n, variant)
    if v.kg == 2:  # vpmaddwd reads i16 pairs: x widened once, not per tile
        x = _widened(ctx, ctx.buffer(op.input), kk, kp, params["signed_input"])
        ins = [x, *(ctx.buffer(value) for value in op.operands[1:])]
        outs = [ctx.result_buffer(r) for r in op.results]
        k = ctx.kernel("quant_qgemm", ins, outs)
    else:
        k = ctx.op_kernel(op)
    # vector dot ops of one unit: rows / MR tiles × MR rows × vectors × k groups
    work = split.block_rows * split.chunk_panels * (v.nr // v.lanes) * (kp // v.kg)
    with k.loop(split.count) as u:
        call = func.CallOp(CALLEE, [*k.inputs, *k.outputs, u], [])
        attrs: dict[str, Attribute] = {PARAMS_ATTR: DictionaryAttr(params)}
        attrs[WORK_ATTR] = IntegerAttr(work, 64)
        call.attributes.update(attrs)
        k.emit(call)


def _widened(
    ctx: LoweringContext, x: SSAValue, k: int, kp: int, signed: IntegerAttr
) -> SSAValue:
    """x[..., K] (8-bit) as i16 [..., K_p], zeros past K: what the pmaddwd
    micro-kernels read (a pair of k per i32 lane, one broadcast load), made by a
    kernel of its own, vectorized along k."""
    shape = list(x.type.get_shape())  # type: ignore[attr-defined]
    wide = ctx.alloc(MemRefType(i16, [*shape[:-1], kp]))
    kb = ctx.kernel("qgemm_widen", [x], [wide])
    extend = arith.ExtSIOp if signed.value.data else arith.ExtUIOp
    with kb.nest([*shape[:-1], k]) as ivs:
        kb.store(kb.op(extend, kb.load(kb.inputs[0], ivs), i16), kb.outputs[0], ivs)
    if kp > k:  # the k pair's second half past K
        with kb.nest(shape[:-1]) as rows:
            kb.store(kb.constant(0, i16), kb.outputs[0], [*rows, kb.index(k)])
    return wide


def lower_im2col(ctx: LoweringContext, op: Im2ColOp) -> None:
    """A copy nest n, oh, ow, i, j, c: contiguous along c on both sides (so it
    vectorizes for C of a vector or more)."""
    k = ctx.op_kernel(op)
    (src,), (dst,) = k.inputs, k.outputs
    a = op.attrs()
    (kh, kw), (sh, sw), (dh, dw) = (
        list(a[key]) for key in ("kernel_shape", "strides", "dilations")
    )
    n, oh, ow, _ = shape_of(op.result.type)
    c = shape_of(op.input.type)[-1]
    with k.nest([n, oh, ow, kh, kw, c]) as (b, y, x, i, j, ch):
        row = k.affine([(y, sh), (i, dh)])
        col = k.affine([(x, sw), (j, dw)])
        value = k.load(src, [b, row, col, ch])
        k.store(value, dst, [b, y, x, k.affine([(i, kw * c), (j, c), (ch, 1)])])


LOWERINGS = {QGemmOp: lower_qgemm, Im2ColOp: lower_im2col, **DWCONV_LOWERINGS}
