"""quant.dwconv → one loop nest n, oh, ow, c with the KH·KW taps unrolled in the
body: channels innermost and unit-stride in x, w and y (loop-vectorize puts them
in vector lanes), the i32 accumulator a value (a register, never stored), the
requantization in the same body, the 8-bit result stored once:

    loop.for n, oh, ow, c parallel {
      acc = bias[c] + Σ_{i,j} ext(x[n, oh·sh + i·dh, ow·sw + j·dw, c])·w[i, j, c]
      y[n, oh, ow, c] = saturate(roundeven(sitofp(acc) · mult[c]) + zp)  [max zp]
    }

With an epilogue (`quant_epilogue`), the saturated f32 value goes on through its
steps in the same body (post operands loaded at [c], or at [n, oh, ow, c] for a
residual), and the final quantize's value is stored instead.
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float32Type, IntegerType

from smelt.dialects import dtypes
from smelt.dialects import quant as q
from smelt.dialects import quant_epilogue as epi
from smelt.dialects.graph_base import shape_of
from smelt.dialects.graph_data import ConstantOp
from smelt.dialects.quant_conv import DwConvOp
from smelt.errors import SmeltError
from smelt.lowering.loop_context import LoweringContext


def lower_dwconv(ctx: LoweringContext, op: DwConvOp) -> None:
    zp_owner = op.zero_point.owner
    if not isinstance(zp_owner, ConstantOp):
        raise SmeltError(f"{op.name}: the output zero point must be a constant")
    zp = int(zp_owner.to_array().reshape(-1)[0])
    a = op.attrs()
    (kh, kw), (sh, sw), (dh, dw) = (
        list(a[key]) for key in ("kernel_shape", "strides", "dilations")
    )
    relu = bool(a.get("relu", 0))
    post = list(op.post)
    k = ctx.op_kernel(op, [op.input, op.weight, op.bias, op.multiplier, *post])
    (x, w, bias, mult, *post_buffers), (y,) = k.inputs, k.outputs
    i32, f32 = IntegerType(32), Float32Type()
    signed = op.input.type.element_type == dtypes.i8
    extend = arith.ExtSIOp if signed else arith.ExtUIOp
    storage = op.zero_point.type.element_type
    lo, hi = q.storage_range(storage)
    with k.nest(list(shape_of(op.result.type))) as (b, oy, ox, c):
        acc = k.load(bias, [c])
        for i in range(kh):
            row = k.affine([(oy, sh)], i * dh)
            for j in range(kw):
                col = k.affine([(ox, sw)], j * dw)
                xv = k.op(extend, k.load(x, [b, row, col, c]), i32)
                wv = k.load(w, [k.index(i), k.index(j), c])
                acc = k.op(arith.AddiOp, acc, k.op(arith.MuliOp, xv, wv))
        scaled = k.op(arith.MulfOp, k.op(arith.SIToFPOp, acc, f32), k.load(mult, [c]))
        rounded = k.op(math.RoundEvenOp, scaled)
        shifted = k.op(arith.AddfOp, rounded, k.constant(zp, f32))
        low = k.constant(max(lo, zp) if relu else lo, f32)
        high = k.constant(hi, f32)
        # compare and select (vmaxps / vminps), as lower_quant's saturation
        above = k.op(
            arith.SelectOp, k.op(arith.CmpfOp, shifted, low, "ogt"), shifted, low
        )
        clamped = k.op(
            arith.SelectOp, k.op(arith.CmpfOp, above, high, "olt"), above, high
        )
        program = str(a.get("epilogue", ""))
        if program:
            channels = shape_of(op.result.type)[-1]

            def load_post(n: int):
                value = post[n]
                at = [c] if shape_of(value.type) == (channels,) else [b, oy, ox, c]
                loaded = k.load(post_buffers[n], at)
                element = value.type.element_type
                if element == f32:
                    return loaded
                ext = arith.ExtSIOp if element == dtypes.i8 else arith.ExtUIOp
                return k.op(arith.SIToFPOp, k.op(ext, loaded, i32), f32)

            clamped = _epilogue(k, program, clamped, load_post)
        wide = k.op(arith.FPToSIOp, clamped, i32)
        k.store(k.op(arith.TruncIOp, wide, IntegerType(8)), y, [b, oy, ox, c])


_BINARY = {
    "add": arith.AddfOp,
    "sub": arith.SubfOp,
    "mul": arith.MulfOp,
    "div": arith.DivfOp,
    "min": arith.MinimumfOp,
    "max": arith.MaximumfOp,
}


def _epilogue(k, program: str, y, load_post):
    """The steps of `program` on y (f32) in the kernel body: the saturated f32
    value of the final quantize (an integer in the storage range)."""
    f32 = Float32Type()
    values = []

    def operand(a: str):
        if a == "y":
            return y
        if a.startswith("#"):
            return k.constant(float.fromhex(a[1:]), f32)
        if a.startswith("v"):
            return values[int(a[1:])]
        return load_post(int(a[1:]))

    for step in epi.parse(program):
        if step.op == "deq":
            a, s, z = step.args
            shifted = k.op(arith.SubfOp, operand(a), k.constant(int(z), f32))
            values.append(k.op(arith.MulfOp, shifted, operand(s)))
        elif step.op == "quant":
            a, s, z, t = step.args
            lo, hi = q.storage_range(dtypes.i8 if t == "i8" else dtypes.ui8)
            quotient = k.op(arith.DivfOp, operand(a), operand(s))
            rounded = k.op(math.RoundEvenOp, quotient)
            shifted = k.op(arith.AddfOp, rounded, k.constant(int(z), f32))
            low, high = k.constant(lo, f32), k.constant(hi, f32)
            above = k.op(
                arith.SelectOp, k.op(arith.CmpfOp, shifted, low, "ogt"), shifted, low
            )
            return k.op(
                arith.SelectOp, k.op(arith.CmpfOp, above, high, "olt"), above, high
            )
        else:
            values.append(k.op(_BINARY[step.op], *(operand(x) for x in step.args)))
    raise AssertionError("unreachable: parse checks the quant step")


LOWERINGS = {DwConvOp: lower_dwconv}
