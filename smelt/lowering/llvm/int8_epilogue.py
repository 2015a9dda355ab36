"""An epilogue program (`dialects/quant_epilogue.py`) on the f32 vectors of an
int8 micro-kernel's store step (`int8_gemm.py`): each step the vector form of
the f32 operation of the unfused graph (fsub / fmul for a dequantize, fadd …,
llvm.minimum / llvm.maximum, which propagate NaN as numpy does), the final
quantize a division, round half to even, + zero point and the clamp to the
storage range by compare and select (NaN to its minimum, as the reference).
Returns the saturated value as an i32 vector, or for a program without a quant
step its last value (an f32 vector)."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from smelt.dialects import quant_epilogue as epi

F32 = ir.FloatType()
I32 = ir.IntType(32)


def emit_program(
    b: ir.IRBuilder, program: str, y: ir.Value, post: Callable[[int], ir.Value]
) -> ir.Value:
    """`program` on y (the requantized result, f32 vector); post(n) loads post
    operand n as an f32 vector (per column or per element)."""
    fv = y.type
    lanes = fv.count
    module = b.module
    iv = ir.VectorType(I32, lanes)

    def intrinsic(name: str, args: int) -> ir.Function:
        full = f"{name}.v{lanes}f32"
        existing = module.globals.get(full)
        if isinstance(existing, ir.Function):
            return existing
        return ir.Function(module, ir.FunctionType(fv, [fv] * args), full)

    def splat(value: float) -> ir.Constant:
        return ir.Constant(fv, [value] * lanes)

    values: list[ir.Value] = []

    def operand(a: str) -> ir.Value:
        if a == "y":
            return y
        if a.startswith("#"):
            return splat(float.fromhex(a[1:]))
        if a.startswith("v"):
            return values[int(a[1:])]
        return post(int(a[1:]))

    binary = {
        "add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv,
        "min": lambda x, z: b.call(intrinsic("llvm.minimum", 2), [x, z]),
        "max": lambda x, z: b.call(intrinsic("llvm.maximum", 2), [x, z]),
    }  # fmt: skip
    for step in epi.parse(program, float_result=True):
        if step.op == "deq":
            a, s, z = step.args
            values.append(b.fmul(b.fsub(operand(a), splat(float(int(z)))), operand(s)))
        elif step.op == "quant":
            a, s, z, t = step.args
            lo, hi = (-128, 127) if t == "i8" else (0, 255)
            rounded = b.call(
                intrinsic("llvm.roundeven", 1), [b.fdiv(operand(a), operand(s))]
            )
            shifted = b.fadd(rounded, splat(float(int(z))))
            low, high = splat(float(lo)), splat(float(hi))
            above = b.select(b.fcmp_ordered(">", shifted, low), shifted, low)
            clamped = b.select(b.fcmp_ordered("<", above, high), above, high)
            return b.fptosi(clamped, iv)
        else:
            values.append(binary[step.op](*(operand(x) for x in step.args)))
    return values[-1]
