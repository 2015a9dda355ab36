"""exp, tanh and erf on f32 vectors as straight-line LLVM IR (no libm calls).

LLVM has no vector library here, so `llvm.exp.v8f32` becomes eight `expf` calls
and tanh/erf go to libm lane by lane: loops over them do not vectorize. These
versions are polynomials in IR, so a vector of lanes costs about as much as one.

* exp(x): x = n·ln2 + r with |r| ≤ ln2/2 (Cody-Waite, two-part ln2 with FMAs),
  e^r = 1 + r + r²·q(r) (degree 4), times 2^n built from exponent bits in two
  halves, so results down to the subnormals are right; overflow gives inf, x below
  -104 gives 0, NaN passes through.
* tanh(x): a = |x| clamped to 9.1 (tanh is 1 in f32 beyond); below 0.55
  a + a·s·T(s), s = a² (degree 4); above, 1 - 2e / (e + 1) with e = e^(-2a) from
  a bounded exp: the last rounding is that of a value near 1, and the division's
  errors are those of a term below 0.67. The sign restored with copysign, NaN
  passed through.
* erf(x): a = |x|; below 0.9 a + a·R(a²) (degree 5); else 1 - e^L(a) with
  L ≈ log erfc (degree 6 in a, a clamped to 3.925 where erf is 1 in f32, so
  e^L needs no range checks). No division.

Coefficients are near-minimax fits (Lawson's iteratively reweighted least squares
on Chebyshev nodes, in float64) of the relative error, or for erf's tail of the
error in erf: fit errors 3e-9 (exp), 1e-9 (tanh), 1.2e-8 and 1.6e-9 (erf), below
f32 rounding. Over every 256th f32 bit pattern and its negation (16.7M inputs,
subnormals and the values that round to ±1 included) the largest errors against
float64 are 1.17 ulp (erf) and 1.43 ulp (tanh) (test/unit/test_vector_math.py and
test/numerics/test_activation_ulp.py pin 2 ulp). f16 vectors are computed in f32.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from llvmlite import ir

from smelt.lowering.llvm.types import constant

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter

EXP_Q = [
    0.49999993451472635, 0.16666520687563086, 0.041668387408547586,
    0.00836871003530985, 0.001381461100102857,
]  # fmt: skip
ERF_SMALL_BELOW = 0.9
ERF_SMALL = [
    0.12837915536657446, -0.37612532565013707, 0.11282230801967859,
    -0.02678198085931867, 0.005016258148150058, -0.0006111426438200095,
]  # fmt: skip
"""erf(a) = a + a·R(a²) for a < 0.9: R(s) ≈ erf(√s)/√s - 1 (degree 5)."""
ERF_ONE = 3.925
"""erf rounds to 1 in f32 from about 3.86 on: |x| is clamped here."""
ERFC_LOG = [
    -0.00017748763050076042, -1.127749593866755, -0.6370596958917173,
    -0.10403741403777218, 0.022277115491001538, -0.0030556152728833173,
    0.0001971825755506496,
]  # fmt: skip
"""log(erfc(a)) ≈ L(a) for a in [0.9, 3.925] (degree 6): erf(a) = 1 - e^L(a)."""

LN2_HI = 0.693145751953125  # ln 2 with the low 12 bits of its f32 mantissa zero
LN2_LO = math.log(2) - LN2_HI
EXP_MAX = 88.72283172607422  # the largest f32 whose exp is finite
EXP_MIN = -104.0  # exp is 0 in f32 below this

FUNCTIONS = ("exp", "tanh", "erf")


def applies(name: str, ty: ir.Type) -> bool:
    """Whether math.`name` on `ty` (an f32 / f16 vector or scalar) has a
    polynomial version here. Scalars too: straight-line code where libm would be
    a call (`llvm.exp` included: it becomes `expf`), so that LLVM's loop
    vectorizer can still vectorize the loop around it (one that loop-vectorize
    left scalar: a quantized GELU's or softmax's int / float casts)."""
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    return name in FUNCTIONS and isinstance(element, ir.FloatType | ir.HalfType)


def emit(em: KernelEmitter, name: str, x: ir.Value) -> ir.Value:
    """math.`name`(x) for an f32 or f16 vector or scalar `x` (see `applies`)."""
    b = em.builder
    ty = x.type
    element = ty.element if isinstance(ty, ir.VectorType) else ty
    if isinstance(element, ir.HalfType):
        wide: ir.Type = ir.FloatType()
        if isinstance(ty, ir.VectorType):
            wide = ir.VectorType(wide, ty.count)
        return b.fptrunc(emit(em, name, b.fpext(x, wide)), ty)
    return {"exp": _exp, "tanh": _tanh, "erf": _erf}[name](_Math(em, ty), x)


class _Math:
    """Small IR helpers over one f32 type (a vector or a scalar)."""

    def __init__(self, em: KernelEmitter, ty: ir.Type):
        self.em, self.b, self.ty = em, em.builder, ty
        self.ity: ir.Type = ir.IntType(32)
        if isinstance(ty, ir.VectorType):
            self.ity = ir.VectorType(self.ity, ty.count)

    def c(self, value: float) -> ir.Constant:
        return constant(self.ty, value)

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        return self.em.call_intrinsic(name, list(args), self.ty)

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self.call("llvm.fma", a, b, c)

    def horner(self, x: ir.Value, coeffs: list[float]) -> ir.Value:
        acc: ir.Value = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def select_if(self, pred: str, a: ir.Value, bound: float, then, other):
        return self.b.select(self.b.fcmp_ordered(pred, a, self.c(bound)), then, other)

    def clamp_above(self, a: ir.Value, bound: float) -> ir.Value:
        """min(a, bound), NaN kept: one vminps (llvm.minnum would add a NaN fix)."""
        below = self.b.fcmp_unordered("<", a, self.c(bound))
        return self.b.select(below, a, self.c(bound))

    def pow2(self, n: ir.Value) -> ir.Value:
        """2^n for an i32 vector n in [-126, 127]."""
        biased = self.b.add(n, constant(self.ity, 127))
        return self.b.bitcast(self.b.shl(biased, constant(self.ity, 23)), self.ty)


def _exp(m: _Math, x: ir.Value) -> ir.Value:
    b = m.b
    xc = m.call("llvm.minnum", m.call("llvm.maxnum", x, m.c(EXP_MIN)), m.c(EXP_MAX))
    n = m.call("llvm.roundeven", b.fmul(xc, m.c(1 / math.log(2))))
    r = m.fma(n, m.c(-LN2_HI), xc)
    r = m.fma(n, m.c(-LN2_LO), r)
    p = b.fadd(m.fma(b.fmul(r, r), m.horner(r, EXP_Q), r), m.c(1.0))
    ni = b.fptosi(n, m.ity)
    half = b.ashr(ni, constant(m.ity, 1))
    scaled = b.fmul(b.fmul(p, m.pow2(half)), m.pow2(b.sub(ni, half)))
    scaled = m.select_if(">", x, EXP_MAX, m.c(math.inf), scaled)
    scaled = m.select_if("<", x, EXP_MIN, m.c(0.0), scaled)
    return b.select(b.fcmp_unordered("uno", x, x), x, scaled)


def _exp_reduced(m: _Math, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(2^n, e^r - 1) with e^x = 2^n · e^r, for x in [-87, 88] (no NaN): no
    clamps, no NaN test and one power of two, which that range does not need
    (2^n is a normal f32 for n in [-126, 127]). tanh and erf work on bounded
    arguments: this is half the work of `_exp`, and every lane pays for it."""
    b = m.b
    # x/ln2 rounded to an integer n by adding ROUNDER (its ulp is 1), whose low
    # mantissa bits then hold n + 127, the biased exponent of 2^n: no round or
    # float-to-int conversion (whose result for NaN would be poison)
    k = m.fma(x, m.c(1 / math.log(2)), m.c(ROUNDER))
    n = b.fsub(k, m.c(ROUNDER))
    r = m.fma(n, m.c(-LN2_HI), x)
    r = m.fma(n, m.c(-LN2_LO), r)
    scale = b.bitcast(b.shl(b.bitcast(k, m.ity), constant(m.ity, 23)), m.ty)
    return scale, m.fma(b.fmul(r, r), m.horner(r, EXP_Q), r)


def _exp_normal(m: _Math, x: ir.Value) -> ir.Value:
    """e^x for x in [-87, 88] (no NaN)."""
    scale, em1 = _exp_reduced(m, x)
    return m.b.fmul(m.b.fadd(em1, m.c(1.0)), scale)


ROUNDER = 1.5 * 2**23 + 127
"""Adding it to |y| < 2^22 rounds y to an integer n (to nearest even) and leaves
n + 127 in the low 9 mantissa bits (1.5·2^23's are zero)."""


TANH_ONE = 9.1
"""tanh(x) rounds to 1 in f32 from about x = 9.01 on: |x| is clamped a little
above (at 9.01 itself 1 - 2e/(e + 1) fell just below the rounding boundary)."""


TANH_SMALL_BELOW = 0.55
TANH_SMALL = [
    -0.3333331755994393, 0.13332586146464773, -0.05385231065816966,
    0.021071681868927522, -0.006274243214975388,
]  # fmt: skip
"""tanh(a) = a + a·s·T(s), s = a², for a < 0.55 (degree 4, relative fit error
1e-9)."""


def _tanh(m: _Math, x: ir.Value) -> ir.Value:
    """a = |x|: below 0.55 a + a·s·T(s); above, 1 - 2e / (e + 1) with e = e^(-2a)
    (a clamped to 9.1, where tanh is 1 in f32), whose rounding errors are those of
    a term below 0.67 subtracted from 1: 1.43 ulp at most. One division; the sign
    restored with copysign, NaN passed through (the clamp keeps it). Both forms
    are computed for every lane: a [256, 56, 56] Tanh took 1.4x the time of the
    one-formula -m / (m + 2), m = e^(-2a) - 1 (shared host, indicative), whose
    2.47 ulp (the rounding of m + 2 near a = 4.5, and m's own error near 0.2)
    exceeded the 2 ulp bound."""
    b = m.b
    a = m.clamp_above(m.call("llvm.fabs", x), TANH_ONE)
    s = b.fmul(a, a)
    small = m.fma(a, b.fmul(s, m.horner(s, TANH_SMALL)), a)
    e = _exp_normal(m, b.fmul(a, m.c(-2.0)))
    big = b.fsub(m.c(1.0), b.fdiv(b.fmul(e, m.c(2.0)), b.fadd(e, m.c(1.0))))
    return _signed(m, m.select_if("<", a, TANH_SMALL_BELOW, small, big), x)


def _erf(m: _Math, x: ir.Value) -> ir.Value:
    """|x| < 0.9: a + a·R(a²); else 1 - e^L(a) with L ≈ log erfc (a clamped to
    3.925, so e^L needs no range checks): no division, 1.17 ulp at most."""
    b = m.b
    a = m.call("llvm.fabs", x)
    small = m.fma(a, m.horner(b.fmul(a, a), ERF_SMALL), a)
    tail = _exp_normal(m, m.horner(m.clamp_above(a, ERF_ONE), ERFC_LOG))
    big = b.fsub(m.c(1.0), tail)
    return _signed(m, m.select_if("<", a, ERF_SMALL_BELOW, small, big), x)


def _signed(m: _Math, magnitude: ir.Value, x: ir.Value) -> ir.Value:
    """`magnitude` with the sign of x (a NaN stays NaN through both branches:
    the clamps keep it, and so does 2^n made from its bits)."""
    return m.call("llvm.copysign", magnitude, x)
