"""What loop-vectorize knows of ops: which are elementwise, which combine
reductions (and their neutral elements), and the constants vector code needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import (
    AnyFloat,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    VectorType,
)
from xdsl.ir import Attribute, Operation

_ARITH = (
    "constant addf subf mulf divf remf negf maximumf minimumf maxnumf minnumf addi "
    "subi muli andi ori xori shli shrsi shrui divsi divui remsi remui floordivsi "
    "ceildivsi ceildivui maxsi minsi maxui minui select extf truncf bitcast cmpf "
    "cmpi sitofp uitofp fptosi fptoui extsi extui trunci index_cast index_castui"
)
_MATH = (
    "absf absi ceil copysign cos ctlz ctpop cttz erf exp exp2 expm1 floor fma log "
    "log10 log1p log2 powf round roundeven rsqrt sin sqrt tan tanh trunc atan atan2 "
    "sinh cosh asin acos asinh acosh atanh cbrt"
)
ELEMENTWISE = frozenset(
    [f"arith.{n}" for n in _ARITH.split()] + [f"math.{n}" for n in _MATH.split()]
)
"""Pure elementwise ops. A varying one becomes the same op on vectors, if xDSL's
verifier accepts that form (compares, select and int / float casts: smelt's vector
forms, `dialects/arith_ext.VECTOR_FORMS`, as xDSL 0.75 verifies scalars only)."""

# combining op → (vector.reduction kind, neutral element, needs reassociation)
REDUCTIONS: dict[str, tuple[str, float | str, bool]] = {
    "arith.addf": ("add", -0.0, True),
    "arith.mulf": ("mul", 1.0, True),
    "arith.maximumf": ("maximumf", -math.inf, False),
    "arith.minimumf": ("minimumf", math.inf, False),
    "arith.maxnumf": ("maxnumf", math.nan, False),
    "arith.minnumf": ("minnumf", math.nan, False),
    "arith.addi": ("add", 0, False),
    "arith.muli": ("mul", 1, False),
    "arith.andi": ("and", "ones", False),
    "arith.ori": ("or", 0, False),
    "arith.xori": ("xor", 0, False),
    "arith.maxsi": ("maxsi", "smin", False),
    "arith.minsi": ("minsi", "smax", False),
    "arith.maxui": ("maxui", 0, False),
    "arith.minui": ("minui", "ones", False),
}


@dataclass
class Reduction:
    index: int  # position among the iter_args
    combine: Operation
    kind: str
    neutral: float | str
    reassoc: bool


def vector_of(t: Attribute, width: int) -> VectorType:
    return VectorType(t, [width])


def neutral(t: Attribute, value: float | str, width: int) -> list[Operation]:
    """The neutral element of a reduction in every lane: a scalar constant and its
    broadcast (a dense vector constant of inf or NaN does not survive xDSL's
    printer and parser)."""
    if isinstance(t, IntegerType) and isinstance(value, str):
        bits = t.width.data
        limits = {"ones": -1, "smin": -(1 << (bits - 1)), "smax": (1 << (bits - 1)) - 1}
        value = limits[value]
        if bits == 1:  # i1 holds -1 and 0; "ones" and smin are true, smax false
            value = {-1: 1}.get(value, value)
    if isinstance(t, IntegerType):
        scalar = arith.ConstantOp(IntegerAttr(int(value), t))
    else:
        scalar = arith.ConstantOp(FloatAttr(float(value), t))
    return [scalar, vector.BroadcastOp(scalar.result, vector_of(t, width))]


def zeros(vt: VectorType) -> arith.ConstantOp:
    """An all-zero vector constant (0.0 or 0 in every lane)."""
    zero = 0.0 if isinstance(vt.element_type, AnyFloat) else 0
    return arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(vt, [zero]), vt)
