"""Per-op emitters of the llvm target for `math` ops → LLVM intrinsics or libm.

LLVM intrinsics where they exist (exp, log, sqrt, pow, fabs, floor, fma, ...); the C
math library for the rest (tanh, erf, ...), called in f32 for f16 values as numpy
computes them, and lane by lane for vectors. exp, tanh and erf on f32/f16 vectors
are polynomials in IR instead (`vector_math.py`) unless `EmitOptions.vector_math`
is off: they are what vectorized GELU, softmax and tanh layers spend their time in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.ir import Operation

from smelt.errors import SmeltError
from smelt.lowering.llvm import libm, vector_math
from smelt.lowering.llvm.emit_kernel import (
    OpEmitter,
    declare_function,
    op_table,
    result_type,
)
from smelt.lowering.llvm.types import I1, I32, constant, op_name

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter


_MATH_INTRINSICS = {
    "math.exp": "llvm.exp",
    "math.exp2": "llvm.exp2",
    "math.log": "llvm.log",
    "math.log2": "llvm.log2",
    "math.log10": "llvm.log10",
    "math.sqrt": "llvm.sqrt",
    "math.absf": "llvm.fabs",
    "math.floor": "llvm.floor",
    "math.ceil": "llvm.ceil",
    "math.trunc": "llvm.trunc",
    "math.round": "llvm.round",
    "math.roundeven": "llvm.roundeven",
    "math.sin": "llvm.sin",
    "math.cos": "llvm.cos",
    "math.tan": "llvm.tan",
    "math.powf": "llvm.pow",
    "math.fma": "llvm.fma",
    "math.copysign": "llvm.copysign",
    "math.ctpop": "llvm.ctpop",
}


def _vector_math(em: KernelEmitter, op: Operation) -> bool:
    """Emits `op` with `vector_math.py` if it applies; says whether it did."""
    name = op_name(op).removeprefix("math.")
    ty = result_type(op)
    if not (em.options.vector_math and vector_math.applies(name, ty)):
        return False
    em.bind(op.results[0], vector_math.emit(em, name, em.get(op.operands[0])))
    return True


def emit_math_intrinsic(em: KernelEmitter, op: Operation) -> None:
    if _vector_math(em, op):
        return
    args = em.operands(op)
    ty = result_type(op)
    flags = em.fp_flags(op) if op_name(op) not in ("math.ctpop",) else ()
    em.bind(
        op.results[0],
        em.call_intrinsic(_MATH_INTRINSICS[op_name(op)], args, ty, flags=flags),
    )


def emit_int_intrinsic(em: KernelEmitter, op: Operation) -> None:
    """absi ctlz cttz: LLVM's versions take a flag; false keeps them total."""
    (a,) = em.operands(op)
    base = {"math.absi": "llvm.abs", "math.ctlz": "llvm.ctlz", "math.cttz": "llvm.cttz"}
    em.bind(
        op.results[0],
        em.call_intrinsic(base[op_name(op)], [a, ir.Constant(I1, 0)], a.type),
    )


def emit_fpowi(em: KernelEmitter, op: Operation) -> None:
    base, exponent = em.operands(op)
    value = em.call_intrinsic(
        "llvm.powi", [base, exponent], base.type, overloads=[base.type, exponent.type]
    )
    em.bind(op.results[0], value)


def emit_rsqrt(em: KernelEmitter, op: Operation) -> None:
    (a,) = em.operands(op)
    flags = em.fp_flags(op)
    root = em.call_intrinsic("llvm.sqrt", [a], a.type, flags=flags)
    em.bind(op.results[0], em.builder.fdiv(constant(a.type, 1.0), root, flags=flags))


def emit_math_libm(em: KernelEmitter, op: Operation) -> None:
    """tanh, erf, ... have no LLVM intrinsic: call libm, lane by lane for vectors."""
    if _vector_math(em, op):
        return
    args = em.operands(op)
    ty = result_type(op)
    name = op_name(op).removeprefix("math.")
    em.bind(op.results[0], libm_call(em, name, args, ty))


def _libm_scalar(
    em: KernelEmitter, name: str, args: list[ir.Value], ty: ir.Type
) -> ir.Value:
    b = em.builder
    if isinstance(ty, ir.HalfType):  # f16: compute in f32, as numpy does
        wide = [b.fpext(a, ir.FloatType()) for a in args]
        return b.fptrunc(_libm_scalar(em, name, wide, ir.FloatType()), ty)
    symbol = name + "f" if isinstance(ty, ir.FloatType) else name
    if not isinstance(ty, ir.FloatType | ir.DoubleType):
        raise SmeltError(f"math.{name} on {ty}")
    fn = declare_function(em.module, symbol, ty, [ty] * len(args))
    return b.call(fn, args)


def libm_call(
    em: KernelEmitter, name: str, args: list[ir.Value], ty: ir.Type
) -> ir.Value:
    """`name(args)` from libm, element by element when `ty` is a vector."""
    if not isinstance(ty, ir.VectorType):
        return _libm_scalar(em, name, args, ty)
    b = em.builder
    result: ir.Value = ir.Constant(ty, ir.Undefined)
    for lane in range(ty.count):
        index = constant(I32, lane)
        lane_args = [b.extract_element(a, index) for a in args]
        result = b.insert_element(
            result, _libm_scalar(em, name, lane_args, ty.element), index
        )
    return result


MATH_EMITTERS: dict[str, OpEmitter] = op_table(
    [
        (emit_math_intrinsic, _MATH_INTRINSICS),
        (emit_int_intrinsic, ["math.absi", "math.ctlz", "math.cttz"]),
        (emit_fpowi, ["math.fpowi"]),
        (emit_rsqrt, ["math.rsqrt"]),
        (emit_math_libm, [f"math.{name}" for name in libm.FUNCTIONS]),
    ]
)
"""Op name → emitter for the math ops of the llvm target."""
