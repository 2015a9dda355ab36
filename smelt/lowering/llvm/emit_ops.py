"""Per-op emitters of the llvm target for `arith` ops → LLVM IR.

Each op family has one emitter; `ARITH_EMITTERS` maps op names to them. Emitters
read operands generically (`op.operands`, `op.results`) so that ops xDSL does not
define (like `arith.remf`, parsed as unregistered) are handled the same way. Every
emitter also accepts 1-d vector operands, so vectorized bodies reuse them.

Semantics chosen where MLIR leaves them undefined, so a bad input can never trap the
host process: integer division or remainder by zero gives 0, `MIN / -1` wraps to
`MIN`, and shifting by the bit width or more gives 0 (`shrsi`: the sign fill).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
)
from xdsl.ir import Operation

from smelt.errors import SmeltError
from smelt.lowering.llvm.emit_kernel import (
    OpEmitter,
    op_table,
    property_of,
    result_type,
)
from smelt.lowering.llvm.types import (
    bf16_bits,
    constant,
    element_of,
    is_bf16,
    op_name,
    scalar_constant,
)

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter


# --- arith: constants, arithmetic -------------------------------------------


def emit_constant(em: KernelEmitter, op: Operation) -> None:
    ty = result_type(op)
    attr = property_of(op, "value")
    match attr:
        case IntegerAttr():
            value = constant(ty, attr.value.data)
        case FloatAttr() if is_bf16(attr.type):
            value = constant(ty, bf16_bits(attr.value.data))
        case FloatAttr():
            value = constant(ty, attr.value.data)
        case DenseIntOrFPElementsAttr() if isinstance(ty, ir.VectorType):
            items = list(attr.iter_values())
            if is_bf16(attr.get_element_type()):
                items = [bf16_bits(v) for v in items]
            if len(items) == 1:
                items *= ty.count
            value = ir.Constant(ty, [scalar_constant(ty.element, v) for v in items])
        case _:
            raise SmeltError(f"constant {attr} of type {op.results[0].type}")
    em.bind(op.results[0], value)


_FLOAT_BINARY = {
    "arith.addf": "fadd",
    "arith.subf": "fsub",
    "arith.mulf": "fmul",
    "arith.divf": "fdiv",
    "arith.remf": "frem",
}

_INT_BINARY = {
    "arith.addi": "add",
    "arith.subi": "sub",
    "arith.muli": "mul",
    "arith.andi": "and_",
    "arith.ori": "or_",
    "arith.xori": "xor",
}


def emit_float_binary(em: KernelEmitter, op: Operation) -> None:
    a, b = em.operands(op)
    method = getattr(em.builder, _FLOAT_BINARY[op_name(op)])
    em.bind(op.results[0], method(a, b, flags=em.fp_flags(op)))


def emit_negf(em: KernelEmitter, op: Operation) -> None:
    (a,) = em.operands(op)
    em.bind(op.results[0], em.builder.fneg(a, flags=em.fp_flags(op)))


def emit_int_binary(em: KernelEmitter, op: Operation) -> None:
    a, b = em.operands(op)
    em.bind(op.results[0], getattr(em.builder, _INT_BINARY[op_name(op)])(a, b))


def emit_shift(em: KernelEmitter, op: Operation) -> None:
    a, amount = em.operands(op)
    b, ty = em.builder, a.type
    width = element_of(ty).width
    too_far = b.icmp_unsigned(">=", amount, constant(ty, width))
    if op_name(op) == "arith.shrsi":
        clamped = b.select(too_far, constant(ty, width - 1), amount)
        em.bind(op.results[0], b.ashr(a, clamped))
        return
    shifted = b.shl(a, amount) if op_name(op) == "arith.shli" else b.lshr(a, amount)
    em.bind(op.results[0], b.select(too_far, constant(ty, 0), shifted))


_INT_DIVISION = [
    "arith.divsi",
    "arith.divui",
    "arith.remsi",
    "arith.remui",
    "arith.floordivsi",
    "arith.ceildivsi",
    "arith.ceildivui",
]


def emit_int_division(em: KernelEmitter, op: Operation) -> None:
    """divsi divui remsi remui floordivsi ceildivsi ceildivui, made total."""
    a, d = em.operands(op)
    b, ty = em.builder, a.type
    signed = op_name(op).endswith("si")
    zero, one = constant(ty, 0), constant(ty, 1)
    by_zero = b.icmp_unsigned("==", d, zero)
    safe = b.select(by_zero, one, d)
    if signed:
        width = element_of(ty).width
        overflow = b.and_(
            b.icmp_signed("==", a, constant(ty, -(1 << (width - 1)))),
            b.icmp_signed("==", d, constant(ty, -1)),
        )
        safe = b.select(overflow, one, safe)
    kind = op_name(op).removeprefix("arith.")[:-2]
    if kind in ("div", "rem"):
        method = {
            "div": "sdiv" if signed else "udiv",
            "rem": "srem" if signed else "urem",
        }
        result = getattr(b, method[kind])(a, safe)
    else:
        quotient = b.sdiv(a, safe) if signed else b.udiv(a, safe)
        rem = b.srem(a, safe) if signed else b.urem(a, safe)
        inexact = b.icmp_unsigned("!=", rem, zero)
        if kind == "floordiv":
            # round toward -inf: one less when the remainder's sign differs from d's
            differ = b.icmp_signed("<", b.xor(rem, safe), zero)
            result = b.sub(quotient, b.zext(b.and_(inexact, differ), ty))
        elif signed:  # ceildivsi: one more when the signs agree
            agree = b.icmp_signed(">=", b.xor(rem, safe), zero)
            result = b.add(quotient, b.zext(b.and_(inexact, agree), ty))
        else:
            result = b.add(quotient, b.zext(inexact, ty))
    em.bind(op.results[0], b.select(by_zero, zero, result))


_MIN_MAX = {
    "arith.maximumf": "llvm.maximum",  # propagates NaN, like numpy.maximum
    "arith.minimumf": "llvm.minimum",
    "arith.maxnumf": "llvm.maxnum",  # ignores a NaN operand
    "arith.minnumf": "llvm.minnum",
    "arith.maxsi": "llvm.smax",
    "arith.minsi": "llvm.smin",
    "arith.maxui": "llvm.umax",
    "arith.minui": "llvm.umin",
}


def emit_min_max(em: KernelEmitter, op: Operation) -> None:
    a, b = em.operands(op)
    flags = em.fp_flags(op) if op_name(op).endswith("f") else ()
    if op_name(op) in ("arith.maxnumf", "arith.minnumf"):
        # compare + select, not llvm.maxnum: LLVM 20's loop vectorizer turns a
        # maxnum reduction over a trip count that is not a multiple of its width
        # into a loop that skips the tail (measured: 7 elements, 4 summed)
        bigger = ">" if op_name(op) == "arith.maxnumf" else "<"
        builder = em.builder
        pick = builder.select(builder.fcmp_ordered(bigger, b, a, flags=flags), b, a)
        a_nan = builder.fcmp_unordered("uno", a, a, flags=flags)
        em.bind(op.results[0], builder.select(a_nan, b, pick))
        return
    em.bind(
        op.results[0],
        em.call_intrinsic(_MIN_MAX[op_name(op)], [a, b], a.type, flags=flags),
    )


# --- arith: comparisons, select, casts ----------------------------------------

# arith.cmpf predicates in order: false oeq ogt oge olt ole one ord
#                                 ueq ugt uge ult ule une uno true
_CMPF = ["==", ">", ">=", "<", "<=", "!=", "ord"]
# arith.cmpi predicates in order: eq ne slt sle sgt sge ult ule ugt uge
_CMPI = [
    ("==", True),
    ("!=", True),
    ("<", True),
    ("<=", True),
    (">", True),
    (">=", True),
    ("<", False),
    ("<=", False),
    (">", False),
    (">=", False),
]


def _predicate(op: Operation) -> int:
    attr = property_of(op, "predicate")
    if not isinstance(attr, IntegerAttr):
        raise SmeltError("comparison without an integer predicate")
    return attr.value.data


def emit_cmpf(em: KernelEmitter, op: Operation) -> None:
    a, b = em.operands(op)
    pred = _predicate(op)
    if pred in (0, 15):
        em.bind(op.results[0], constant(result_type(op), int(pred == 15)))
        return
    flags = em.fp_flags(op)
    if pred <= 7:
        value = em.builder.fcmp_ordered(_CMPF[pred - 1], a, b, flags=flags)
    elif pred == 14:
        value = em.builder.fcmp_unordered("uno", a, b, flags=flags)
    else:
        value = em.builder.fcmp_unordered(_CMPF[pred - 8], a, b, flags=flags)
    em.bind(op.results[0], value)


def emit_cmpi(em: KernelEmitter, op: Operation) -> None:
    a, b = em.operands(op)
    cmp, signed = _CMPI[_predicate(op)]
    method = em.builder.icmp_signed if signed else em.builder.icmp_unsigned
    em.bind(op.results[0], method(cmp, a, b))


def emit_select(em: KernelEmitter, op: Operation) -> None:
    cond, a, b = em.operands(op)
    em.bind(op.results[0], em.builder.select(cond, a, b))


_CASTS = {
    "arith.extf": "fpext",
    "arith.truncf": "fptrunc",
    "arith.sitofp": "sitofp",
    "arith.uitofp": "uitofp",
    "arith.fptosi": "fptosi",
    "arith.fptoui": "fptoui",
    "arith.extsi": "sext",
    "arith.extui": "zext",
    "arith.trunci": "trunc",
    "arith.bitcast": "bitcast",
}


def _bf16_to_float(em: KernelEmitter, bits: ir.Value, ty: ir.Type) -> ir.Value:
    """bf16 is the high half of an f32: shift its bits up, then widen further."""
    b = em.builder
    i32 = _like(bits.type, ir.IntType(32))
    wide = b.bitcast(
        b.shl(b.zext(bits, i32), constant(i32, 16)), _like(i32, ir.FloatType())
    )
    return wide if wide.type == ty else b.fpext(wide, ty)


def _float_to_bf16(em: KernelEmitter, value: ir.Value, ty: ir.Type) -> ir.Value:
    """Rounds to nearest even on the f32 bits; NaN becomes the quiet NaN 0x7FC0."""
    b = em.builder
    f32 = _like(value.type, ir.FloatType())
    if value.type != f32:
        value = b.fptrunc(value, f32)
    i32 = _like(f32, ir.IntType(32))
    bits = b.bitcast(value, i32)
    odd = b.and_(b.lshr(bits, constant(i32, 16)), constant(i32, 1))
    rounded = b.lshr(b.add(b.add(bits, constant(i32, 0x7FFF)), odd), constant(i32, 16))
    is_nan = b.fcmp_unordered("uno", value, value)
    return b.select(is_nan, constant(ty, 0x7FC0), b.trunc(rounded, ty))


def _like(shape_of: ir.Type, element: ir.Type) -> ir.Type:
    if isinstance(shape_of, ir.VectorType):
        return ir.VectorType(element, shape_of.count)
    return element


def emit_cast(em: KernelEmitter, op: Operation) -> None:
    (a,) = em.operands(op)
    ty = result_type(op)
    if op_name(op) == "arith.extf" and is_bf16(op.operands[0].type):
        value = _bf16_to_float(em, a, ty)
    elif op_name(op) == "arith.truncf" and is_bf16(op.results[0].type):
        value = _float_to_bf16(em, a, ty)
    elif op_name(op) in ("arith.index_cast", "arith.index_castui"):
        src, dst = element_of(a.type).width, element_of(ty).width
        if src == dst:
            value = a
        elif src > dst:
            value = em.builder.trunc(a, ty)
        elif op_name(op) == "arith.index_cast":
            value = em.builder.sext(a, ty)
        else:
            value = em.builder.zext(a, ty)
    else:
        value = getattr(em.builder, _CASTS[op_name(op)])(a, ty)
    em.bind(op.results[0], value)


ARITH_EMITTERS: dict[str, OpEmitter] = op_table(
    [
        (emit_constant, ["arith.constant"]),
        (emit_float_binary, _FLOAT_BINARY),
        (emit_int_binary, _INT_BINARY),
        (emit_shift, ["arith.shli", "arith.shrsi", "arith.shrui"]),
        (emit_int_division, _INT_DIVISION),
        (emit_min_max, _MIN_MAX),
        (emit_negf, ["arith.negf"]),
        (emit_cmpf, ["arith.cmpf"]),
        (emit_cmpi, ["arith.cmpi"]),
        (emit_select, ["arith.select"]),
        (emit_cast, [*_CASTS, "arith.index_cast", "arith.index_castui"]),
    ]
)
"""Op name → emitter for the arith ops of the llvm target."""
