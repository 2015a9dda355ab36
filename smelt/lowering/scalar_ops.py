"""Scalar arithmetic with ONNX semantics on signless loop-level values.

Graph element types carry signedness (`ui8`); the loop level is signless (`i8`), so
`Arith` remembers whether the graph type was unsigned and picks `divui`, `cmpi ult`,
`uitofp`, `extui`. Floats compute in `compute_type` (f16 widened to f32).
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.arith import FastMathFlag, FastMathFlagsAttr
from xdsl.dialects.builtin import (
    AnyFloat,
    Float32Type,
    IntegerType,
    MemRefType,
    TensorType,
)
from xdsl.ir import Attribute, SSAValue

from smelt.dialects import dtypes
from smelt.dialects.arith_ext import RemFOp
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import KernelBuilder, compute_type

_SUPPORTED = (
    dtypes.f16, dtypes.bf16, dtypes.f32, dtypes.f64,
    dtypes.i1, dtypes.i8, dtypes.i16, dtypes.i32, dtypes.i64,
    dtypes.ui8, dtypes.ui16, dtypes.ui32, dtypes.ui64,
)  # fmt: skip


def storage_type(element_type: Attribute) -> Attribute:
    """The signless type that stores a graph element type (ui8 -> i8)."""
    if element_type not in _SUPPORTED:
        raise SmeltError(f"element type {element_type} cannot be lowered to loops yet")
    if isinstance(element_type, IntegerType):
        return IntegerType(element_type.width.data)
    return element_type


def memref_type(t: TensorType) -> MemRefType:
    """The loop-level buffer type for a static graph tensor type."""
    dims = tuple(t.get_shape())
    if any(d < 0 for d in dims):
        raise SmeltError(
            f"tensor type {t} has a dynamic dimension; shapes must be static"
        )
    return MemRefType(storage_type(t.element_type), dims)


class Arith:
    """Typed scalar ops for one graph element type, emitted into a kernel."""

    def __init__(self, k: KernelBuilder, element_type: Attribute):
        self.k = k
        self.graph_type = element_type
        self.storage = storage_type(element_type)
        self.type = compute_type(self.storage)
        self.is_float = isinstance(self.storage, AnyFloat)
        # i1 behaves as an unsigned integer (false < true).
        self.unsigned = dtypes.is_unsigned(element_type) or element_type == dtypes.i1

    @property
    def width(self) -> int:
        assert isinstance(self.type, IntegerType)
        return self.type.width.data

    # --- constants -----------------------------------------------------------------

    def const(self, value: float) -> SSAValue:
        if self.is_float:
            return self.k.constant(float(value), self.type)
        return self.k.constant(int(value), self.type)

    def zero(self) -> SSAValue:
        return self.const(0)

    def one(self) -> SSAValue:
        return self.const(1)

    def lowest(self) -> SSAValue:
        """The identity of max: -inf, INT_MIN or 0."""
        if self.is_float:
            return self.const(float("-inf"))
        return self.const(0 if self.unsigned else -(1 << (self.width - 1)))

    def highest(self) -> SSAValue:
        """The identity of min: +inf, INT_MAX or all ones (unsigned, i1)."""
        if self.is_float:
            return self.const(float("inf"))
        return self.const(-1 if self.unsigned else (1 << (self.width - 1)) - 1)

    # --- binary ops ----------------------------------------------------------------

    def _op(self, float_op, int_op, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.k.op(float_op if self.is_float else int_op, a, b)

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """a + b; on i1 it is `or` (numpy sums booleans with dtype=bool that way)."""
        if self.storage == dtypes.i1:
            return self.k.op(arith.OrIOp, a, b)
        return self._op(arith.AddfOp, arith.AddiOp, a, b)

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._op(arith.SubfOp, arith.SubiOp, a, b)

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._op(arith.MulfOp, arith.MuliOp, a, b)

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """Float division, or integer division truncating toward zero. x / 0 gives 0
        and INT_MIN / -1 wraps, instead of trapping the CPU."""
        if self.is_float:
            return self.k.op(arith.DivfOp, a, b)
        k, zero, one = self.k, self.zero(), self.one()
        by_zero = k.op(arith.CmpiOp, b, zero, "eq")
        if self.unsigned:
            safe = k.op(arith.SelectOp, by_zero, one, b)
            return k.op(arith.SelectOp, by_zero, zero, k.op(arith.DivUIOp, a, safe))
        by_minus_one = k.op(arith.CmpiOp, b, self.const(-1), "eq")
        risky = k.op(arith.OrIOp, by_zero, by_minus_one)
        quotient = k.op(arith.DivSIOp, a, k.op(arith.SelectOp, risky, one, b))
        negated = k.op(arith.SubiOp, zero, a)
        quotient = k.op(arith.SelectOp, by_minus_one, negated, quotient)
        return k.op(arith.SelectOp, by_zero, zero, quotient)

    def rem(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """The remainder with the dividend's sign (C fmod). On integers x rem 0 is
        0 and MIN rem -1 is 0, guarded here so that no target traps; on floats
        x rem 0 is NaN."""
        if self.is_float:
            return self.k.op(RemFOp, a, b)
        k, zero, one = self.k, self.zero(), self.one()
        risky = k.op(arith.CmpiOp, b, zero, "eq")
        if not self.unsigned:  # a rem -1 is 0 for every a
            minus_one = k.op(arith.CmpiOp, b, self.const(-1), "eq")
            risky = k.op(arith.OrIOp, risky, minus_one)
        rem = arith.RemUIOp if self.unsigned else arith.RemSIOp
        return self.select(risky, zero, k.op(rem, a, self.select(risky, one, b)))

    def mod(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """The remainder with the divisor's sign (Python's %): rem, plus b where a
        nonzero remainder's sign differs from b's."""
        r = self.rem(a, b)
        if self.unsigned and not self.is_float:
            return r
        zero = self.zero()
        below = self.cmp("lt", r, zero)
        differ = self.k.op(arith.XOrIOp, below, self.cmp("lt", b, zero))
        fix = self.k.op(arith.AndIOp, self.cmp("ne", r, zero), differ)
        return self.select(fix, self.add(r, b), r)

    def shift(self, left: bool, a: SSAValue, b: SSAValue) -> SSAValue:
        """a << b or a >> b (arithmetic on signed types); shifting by the bit width
        or more leaves 0 (the sign fill), as the llvm target defines it."""
        if left:
            return self.k.op(arith.ShLIOp, a, b)
        return self.k.op(arith.ShRUIOp if self.unsigned else arith.ShRSIOp, a, b)

    def bitwise(self, op_class: type, a: SSAValue, b: SSAValue) -> SSAValue:
        """andi / ori / xori, on integers only."""
        if self.is_float:
            raise SmeltError(f"bitwise operations on {self.graph_type} are undefined")
        return self.k.op(op_class, a, b)

    def max(self, a: SSAValue, b: SSAValue, signed_zeros: bool = True) -> SSAValue:
        """NaN-propagating for floats (numpy.maximum). `signed_zeros=False`
        (fastmath nsz) lets max(-0, +0) be either zero: a window's maximum then
        costs one vmaxps and a NaN check on x86 instead of six instructions."""
        if self.is_float:
            nsz = FastMathFlagsAttr([FastMathFlag.NO_SIGNED_ZEROS])
            flags = None if signed_zeros else nsz
            return self.k.op(arith.MaximumfOp, a, b, flags)
        return self.k.op(arith.SelectOp, self.cmp("gt", a, b), a, b)

    def min(self, a: SSAValue, b: SSAValue) -> SSAValue:
        if self.is_float:
            return self.k.op(arith.MinimumfOp, a, b)
        return self.k.op(arith.SelectOp, self.cmp("lt", a, b), a, b)

    def pow(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """a ** b: `math.powf` for floats; for integers exact square-and-multiply
        (wrapping like numpy), and a ** -n truncated toward zero (0 unless |a| = 1)."""
        if self.is_float:
            return self.k.op(math.PowFOp, a, b)
        k, zero, one = self.k, self.zero(), self.one()
        negative = None if self.unsigned else self.cmp("lt", b, zero)
        exponent = b if negative is None else self.select(negative, zero, b)

        def step(_ivs, accs):
            result, base, e = accs
            odd = k.op(arith.CmpiOp, k.op(arith.AndIOp, e, one), zero, "ne")
            result = self.select(odd, self.mul(result, base), result)
            return [result, self.mul(base, base), k.op(arith.DivUIOp, e, self.const(2))]

        power = k.reduce([self.width], [one, a, exponent], step)[0]
        if negative is None:
            return power
        odd = k.op(arith.CmpiOp, k.op(arith.AndIOp, b, one), zero, "ne")
        minus_one = self.const(-1)
        sign = self.select(odd, minus_one, one)
        truncated = self.select(
            self.cmp("eq", a, one),
            one,
            self.select(self.cmp("eq", a, minus_one), sign, zero),
        )
        return self.select(negative, truncated, power)

    def cmp(self, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        """pred in eq/ne/lt/le/gt/ge; ordered for floats (NaN compares false but ne)."""
        if self.is_float:
            fpred = "une" if pred == "ne" else "o" + pred
            return self.k.op(arith.CmpfOp, a, b, fpred)
        ipred = pred if pred in ("eq", "ne") else ("u" if self.unsigned else "s") + pred
        return self.k.op(arith.CmpiOp, a, b, ipred)

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.k.op(arith.SelectOp, cond, a, b)

    # --- unary ops -----------------------------------------------------------------

    def neg(self, a: SSAValue) -> SSAValue:
        if self.is_float:
            return self.k.op(arith.NegfOp, a)
        return self.k.op(arith.SubiOp, self.zero(), a)

    def abs(self, a: SSAValue) -> SSAValue:
        if self.is_float:
            return self.k.op(math.AbsFOp, a)
        if self.unsigned:
            return a
        return self.select(self.cmp("lt", a, self.zero()), self.neg(a), a)

    def invert(self, a: SSAValue) -> SSAValue:
        """Every bit flipped: a xor all-ones (logical not on i1)."""
        ones = self.k.constant(1 if self.width == 1 else -1, self.type)
        return self.bitwise(arith.XOrIOp, a, ones)

    def sign(self, a: SSAValue) -> SSAValue:
        """1 above zero, -1 below, a itself otherwise (0, -0.0 and NaN)."""
        zero = self.zero()
        below = self.select(self.cmp("lt", a, zero), self.const(-1), a)
        return self.select(self.cmp("gt", a, zero), self.one(), below)

    def math(self, op_class: type, a: SSAValue) -> SSAValue:
        """A float-only `math` op; integer types are rejected by the caller's table."""
        return self.k.op(op_class, a)


def cast(k: KernelBuilder, value: SSAValue, src: Arith, dst: Arith) -> SSAValue:
    """ONNX Cast of a value in `src`'s compute type, in `dst`'s compute type: a
    float is rounded once to the destination storage type (no double rounding) and
    widened back when that type computes wider (f16 / bf16 in f32)."""
    result = _cast_to_storage(k, value, src, dst)
    return k.float_to(result, dst.type) if dst.is_float else result


def _cast_to_storage(
    k: KernelBuilder, value: SSAValue, src: Arith, dst: Arith
) -> SSAValue:
    if dst.graph_type == dtypes.i1:
        return src.cmp("ne", value, src.zero())
    if src.is_float and dst.is_float:
        return k.float_to(value, dst.storage)
    if src.is_float:
        width = dst.width
        if dst.unsigned and width == 64:
            return k.op(arith.FPToUIOp, value, dst.type)
        # Through i64 so that out-of-range values of narrow types wrap like numpy.
        wide = k.op(arith.FPToSIOp, value, IntegerType(64))
        return wide if width == 64 else k.op(arith.TruncIOp, wide, dst.type)
    if dst.is_float:
        op = arith.UIToFPOp if src.unsigned else arith.SIToFPOp
        if isinstance(dst.storage, AnyFloat) and dst.storage.bitwidth < 32:
            # to f16 / bf16 through f32 (as numpy and ml_dtypes do): targets have
            # no direct conversion, and every integer f16 holds is exact in f32
            return k.float_to(k.op(op, value, Float32Type()), dst.storage)
        return k.op(op, value, dst.storage)
    if src.width == dst.width:
        return value
    if src.width > dst.width:
        return k.op(arith.TruncIOp, value, dst.type)
    return k.op(arith.ExtUIOp if src.unsigned else arith.ExtSIOp, value, dst.type)
