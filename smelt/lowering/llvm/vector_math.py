"""exp, tanh and erf on f32 vectors as straight-line LLVM IR (no libm calls).

LLVM has no vector library here, so `llvm.exp.v8f32` becomes eight `expf` calls
and tanh/erf go to libm lane by lane: loops over them do not vectorize. These
versions are polynomials in IR, so a vector of lanes costs about as much as one.

* exp(x): x = n·ln2 + r with |r| ≤ ln2/2 (Cody-Waite, two-part ln2 with FMAs),
  e^r = 1 + r + r²·q(r) (degree 4), times 2^n built from exponent bits in two
  halves, so results down to the subnormals are right; overflow gives inf, x below
  -104 gives 0, NaN passes through.
* tanh(x): with a = |x| clamped to 9.01 (tanh is 1 in f32 beyond) and
  m = e^(-2a) - 1 (expm1, from the exp reduction: 2^n·(e^r - 1) + (2^n - 1) in
  one FMA, accurate down to a → 0), tanh(a) = -m / (m + 2): one formula for
  every lane, no second branch to compute and select; the sign restored with
  copysign, NaN passed through.
* erf(x): |x| < 1: x·P(x²) (degree 6); else 1 - e^(-x²)·R(1/|x|) with R ≈
  erfc(x)·e^(x²) (degree 9 around 1/x = 0.625, |x| clamped to 4 where erf is 1
  in f32, so e^(-x²) needs no range checks either).

Coefficients are near-minimax fits of the relative error (Lawson's iteratively
reweighted least squares on Chebyshev nodes, in float64): relative fit errors
3e-9 (exp, also tanh's expm1), 1e-9 and 1.5e-8 (erf), below f32 rounding. Measured over
millions of f32 inputs the results are within a few ulp of the correctly rounded
values (test/unit/test_vector_math.py pins the bounds). f16 vectors are computed
in f32.
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
ERF_P = [
    1.1283791657322926, -0.37612625839605646, 0.11283585269684879,
    -0.026853816032027522, 0.0051883344393119785, -0.0008010247161202022,
    7.854024807778248e-05,
]  # fmt: skip
ERFC_R_CENTER = 0.625
ERFC_R = [
    0.30595298923296615, 0.38228383647331715, -0.17239360427981257,
    0.04376080234971651, 0.02326198187802961, -0.04678601724661213,
    0.04461991782317072, -0.028408550915956184, -0.006946581165688244,
    0.030714071334661558,
]  # fmt: skip

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


def _expm1_normal(m: _Math, x: ir.Value) -> ir.Value:
    """e^x - 1 for x in [-87, 88] (no NaN), relative error a few ulp also as
    x → 0: 2^n·(e^r - 1) + (2^n - 1) in one FMA, where 2^n - 1 is exact for
    the n that matter (|n| ≤ 24) and for n = 0 the sum is e^r - 1 itself."""
    scale, em1 = _exp_reduced(m, x)
    return m.fma(scale, em1, m.b.fsub(scale, m.c(1.0)))


ROUNDER = 1.5 * 2**23 + 127
"""Adding it to |y| < 2^22 rounds y to an integer n (to nearest even) and leaves
n + 127 in the low 9 mantissa bits (1.5·2^23's are zero)."""


TANH_ONE = 9.01
"""tanh(x) rounds to 1 in f32 from about x = 9.01 on: |x| is clamped there."""


def _tanh(m: _Math, x: ir.Value) -> ir.Value:
    """tanh(|x|) = -m / (m + 2) with m = e^(-2|x|) - 1 in (-1, 0]: 2.49 ulp at
    most over 2.1M uniform and geometric f32 inputs. The old two-branch form (a
    polynomial below 0.625, 1 - 2/(e^2a + 1) above) computed both for every
    lane: the chain tanh(1.5x + 0.5)·x of 16M floats ran at 73% of the copy
    bandwidth."""
    b = m.b
    a = m.clamp_above(m.call("llvm.fabs", x), TANH_ONE)
    em = _expm1_normal(m, b.fmul(a, m.c(-2.0)))
    # m / (m + 2) is -tanh(|x|): copysign gives it x's sign either way
    return _signed(m, b.fdiv(em, b.fadd(em, m.c(2.0))), x)


def _erf(m: _Math, x: ir.Value) -> ir.Value:
    b = m.b
    a = m.call("llvm.fabs", x)
    s = b.fmul(a, a)
    small = b.fmul(a, m.horner(s, ERF_P))
    ac = m.clamp_above(a, 4.0)
    u = b.fdiv(m.c(1.0), ac)
    tail = m.horner(b.fsub(u, m.c(ERFC_R_CENTER)), ERFC_R)
    big = b.fsub(m.c(1.0), b.fmul(_exp_normal(m, b.fneg(b.fmul(ac, ac))), tail))
    return _signed(m, m.select_if("<", a, 1.0, small, big), x)


def _signed(m: _Math, magnitude: ir.Value, x: ir.Value) -> ir.Value:
    """`magnitude` with the sign of x (a NaN stays NaN through both branches:
    the clamps keep it, and so does 2^n made from its bits)."""
    return m.call("llvm.copysign", magnitude, x)
