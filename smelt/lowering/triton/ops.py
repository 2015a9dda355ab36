"""Scalar loop-level ops (arith, math) as Triton expressions over block tensors.

Each emitter takes the op and its operands' Python expressions and returns the
expression of its result. Floats follow the loop level's IEEE semantics: maximumf /
minimumf propagate NaN, sqrt is correctly rounded, integer division truncates (as
Triton's `//` and `%` do on integers)."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects import math as mathd
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from smelt.dialects.arith_ext import RemFOp
from smelt.errors import SmeltError

OpText = Callable[[Operation, list[str]], str]

INDEX = "tl.int32"


def dtype(t: Attribute) -> str:
    """The Triton dtype of a loop-level scalar type."""
    if isinstance(t, IndexType):
        return INDEX
    if isinstance(t, IntegerType):
        return f"tl.int{t.width.data}"
    if isinstance(t, Float16Type):
        return "tl.float16"
    if isinstance(t, BFloat16Type):
        return "tl.bfloat16"
    if isinstance(t, Float32Type):
        return "tl.float32"
    if isinstance(t, Float64Type):
        return "tl.float64"
    raise SmeltError(f"the triton target does not support the type {t}")


def pointer_type(t: Attribute) -> str:
    """The Triton signature string of a pointer to `t` elements (`*fp32`)."""
    names = {
        "float16": "fp16",
        "bfloat16": "bf16",
        "float32": "fp32",
        "float64": "fp64",
    }
    name = dtype(t).removeprefix("tl.")
    return "*" + names.get(name, name.replace("int", "i"))


def unsigned(t: Attribute) -> str:
    return dtype(t).replace("tl.int", "tl.uint")


def width(t: Attribute) -> int:
    if isinstance(t, IndexType):
        return 32
    assert isinstance(t, IntegerType)
    return t.width.data


def constant(value: float, t: Attribute) -> str:
    """A typed 0-d constant; inf and NaN go through their bit patterns."""
    dt = dtype(t)
    if isinstance(t, AnyFloat):
        v = float(value)
        if math.isfinite(v):
            return f"tl.full([], {v!r}, {dt})"
        bits, int_dt = _float_bits(v, t)
        return f"tl.full([], {bits}, {int_dt}).to({dt}, bitcast=True)"
    w = width(t)
    v = int(value)
    if w == 1:
        return f"tl.full([], {v & 1}, tl.int1)"
    v = ((v + (1 << (w - 1))) % (1 << w)) - (1 << (w - 1))
    return f"tl.full([], {v}, {dt})"


def _float_bits(v: float, t: Attribute) -> tuple[int, str]:
    if isinstance(t, Float64Type):
        (bits,) = struct.unpack("<q", struct.pack("<d", v))
        return bits, "tl.int64"
    (bits,) = struct.unpack("<i", struct.pack("<f", v))
    if isinstance(t, Float32Type):
        return bits, "tl.int32"
    if isinstance(t, BFloat16Type):
        b = (bits >> 16) & 0xFFFF
    else:
        b = {float("inf"): 0x7C00, float("-inf"): 0xFC00}.get(v, 0x7E00)
    return (b - 0x10000 if b >= 0x8000 else b), "tl.int16"


def is_zero_constant(v: SSAValue) -> bool:
    """Whether `v` is an arith.constant 0 (an index that adds nothing)."""
    owner = v.owner
    return isinstance(owner, arith.ConstantOp) and owner.value.value.data == 0


def _binary(symbol: str) -> OpText:
    return lambda op, a: f"({a[0]} {symbol} {a[1]})"


def _call(fn: str) -> OpText:
    return lambda op, a: f"{fn}({', '.join(a)})"


def _nan_max(fn: str) -> OpText:
    return lambda op, a: f"{fn}({a[0]}, {a[1]}, propagate_nan=tl.PropagateNan.ALL)"


def _as_unsigned(expr: str, t: Attribute) -> str:
    return f"{expr}.to({unsigned(t)}, bitcast=True)"


def _unsigned_binary(symbol: str) -> OpText:
    def text(op: Operation, a: list[str]) -> str:
        t = op.operands[0].type
        value = f"({_as_unsigned(a[0], t)} {symbol} {_as_unsigned(a[1], t)})"
        return f"{value}.to({dtype(t)}, bitcast=True)"

    return text


_CMPI = {
    0: "==",
    1: "!=",
    2: "<",
    3: "<=",
    4: ">",
    5: ">=",
    6: "<",
    7: "<=",
    8: ">",
    9: ">=",
}
_CMPF = {1: "==", 2: ">", 3: ">=", 4: "<", 5: "<=", 13: "!="}


def _cmpi(op: Operation, a: list[str]) -> str:
    assert isinstance(op, arith.CmpiOp)
    pred = op.predicate.value.data
    if pred >= 6:  # ult ule ugt uge
        t = op.lhs.type
        return f"({_as_unsigned(a[0], t)} {_CMPI[pred]} {_as_unsigned(a[1], t)})"
    return f"({a[0]} {_CMPI[pred]} {a[1]})"


def _cmpf(op: Operation, a: list[str]) -> str:
    assert isinstance(op, arith.CmpfOp)
    pred = op.predicate.value.data
    if pred == 14:  # uno: either operand is NaN
        return f"(({a[0]} != {a[0]}) | ({a[1]} != {a[1]}))"
    if pred not in _CMPF:
        raise SmeltError(
            f"the triton target does not support arith.cmpf predicate {pred}"
        )
    return f"({a[0]} {_CMPF[pred]} {a[1]})"


def _convert(op: Operation, a: list[str]) -> str:
    return f"{a[0]}.to({dtype(op.results[0].type)})"


def _index_cast(op: Operation, a: list[str]) -> str:
    # tl.cast, not .to: a loop index is a plain int under the interpreter
    return f"tl.cast({a[0]}, {dtype(op.results[0].type)})"


def _from_unsigned(op: Operation, a: list[str]) -> str:
    source = op.operands[0].type
    if width(source) == 1:
        return f"{a[0]}.to({dtype(op.results[0].type)})"
    return f"{_as_unsigned(a[0], source)}.to({dtype(op.results[0].type)})"


def _extui(op: Operation, a: list[str]) -> str:
    source, target = op.operands[0].type, op.results[0].type
    if width(source) == 1:
        return f"{a[0]}.to({dtype(target)})"
    wide = f"{_as_unsigned(a[0], source)}.to({unsigned(target)})"
    return f"{wide}.to({dtype(target)}, bitcast=True)"


def _extsi(op: Operation, a: list[str]) -> str:
    target = op.results[0].type
    if width(op.operands[0].type) == 1:
        return f"tl.where({a[0]}, -1, 0).to({dtype(target)})"
    return f"{a[0]}.to({dtype(target)})"


def _trunci(op: Operation, a: list[str]) -> str:
    if width(op.results[0].type) == 1:
        return f"(({a[0]} & 1) != 0)"
    return f"{a[0]}.to({dtype(op.results[0].type)})"


def _fptoui(op: Operation, a: list[str]) -> str:
    target = op.results[0].type
    return f"{a[0]}.to({unsigned(target)}).to({dtype(target)}, bitcast=True)"


def _shift(op: Operation, a: list[str]) -> str:
    """shli / shrui / shrsi with the loop level's total semantics: an amount of the
    bit width or more (read as unsigned) gives 0, or the sign fill for shrsi."""
    t = op.operands[0].type
    w = width(t)
    far = f"({_as_unsigned(a[1], t)} >= {w})"
    if isinstance(op, arith.ShRSIOp):
        return f"({a[0]} >> tl.where({far}, {constant(w - 1, t)}, {a[1]}))"
    amount = f"tl.where({far}, {constant(0, t)}, {a[1]})"
    if isinstance(op, arith.ShLIOp):
        shifted = f"({a[0]} << {amount})"
    else:
        logical = f"({_as_unsigned(a[0], t)} >> {_as_unsigned(amount, t)})"
        shifted = f"{logical}.to({dtype(t)}, bitcast=True)"
    return f"tl.where({far}, {constant(0, t)}, {shifted})"


def _sqrt(op: Operation, a: list[str]) -> str:
    if isinstance(op.results[0].type, Float32Type):
        return f"tl.sqrt_rn({a[0]})"
    return f"tl.sqrt({a[0]})"


OP_TEXT: dict[type[Operation], OpText] = {
    arith.AddiOp: _binary("+"),
    arith.SubiOp: _binary("-"),
    arith.MuliOp: _binary("*"),
    arith.DivSIOp: _binary("//"),
    arith.RemSIOp: _binary("%"),
    arith.DivUIOp: _unsigned_binary("//"),
    arith.RemUIOp: _unsigned_binary("%"),
    arith.AndIOp: _binary("&"),
    arith.OrIOp: _binary("|"),
    arith.XOrIOp: _binary("^"),
    arith.ShLIOp: _shift,
    arith.ShRUIOp: _shift,
    arith.ShRSIOp: _shift,
    arith.CmpiOp: _cmpi,
    arith.SelectOp: _call("tl.where"),
    arith.IndexCastOp: _index_cast,
    arith.AddfOp: _binary("+"),
    arith.SubfOp: _binary("-"),
    arith.MulfOp: _binary("*"),
    arith.DivfOp: _binary("/"),
    RemFOp: _binary("%"),  # Triton's float % is frem: C fmod
    arith.NegfOp: lambda op, a: f"(-{a[0]})",
    arith.MaximumfOp: _nan_max("tl.maximum"),
    arith.MinimumfOp: _nan_max("tl.minimum"),
    arith.CmpfOp: _cmpf,
    arith.ExtFOp: _convert,
    arith.TruncFOp: _convert,
    arith.SIToFPOp: _convert,
    arith.UIToFPOp: _from_unsigned,
    arith.FPToSIOp: _convert,
    arith.FPToUIOp: _fptoui,
    arith.ExtSIOp: _extsi,
    arith.ExtUIOp: _extui,
    arith.TruncIOp: _trunci,
    mathd.ExpOp: _call("tl.exp"),
    mathd.LogOp: _call("tl.log"),
    mathd.TanhOp: _call("_tanh"),
    mathd.ErfOp: _call("tl.erf"),
    mathd.SqrtOp: _sqrt,
    mathd.PowFOp: _call("_pow"),
    mathd.AbsFOp: _call("tl.abs"),
    mathd.FloorOp: _call("tl.floor"),
    mathd.CeilOp: _call("tl.ceil"),
    mathd.RoundEvenOp: _call("libdevice.rint"),  # rounds halves to even
    mathd.SinOp: _call("tl.sin"),
    mathd.CosOp: _call("tl.cos"),
    mathd.TanOp: _call("libdevice.tan"),
    mathd.AsinOp: _call("libdevice.asin"),
    mathd.AcosOp: _call("libdevice.acos"),
    mathd.AtanOp: _call("libdevice.atan"),
    mathd.SinhOp: _call("libdevice.sinh"),
    mathd.CoshOp: _call("libdevice.cosh"),
    mathd.AsinhOp: _call("libdevice.asinh"),
    mathd.AcoshOp: _call("libdevice.acosh"),
    mathd.AtanhOp: _call("libdevice.atanh"),
}
"""Op class -> emitter: the scalar ops the triton target supports."""
