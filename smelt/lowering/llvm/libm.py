"""Calls into the C math library for math ops without an LLVM intrinsic (tanh, erf)."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import TYPE_CHECKING

import llvmlite.binding as llvm
import llvmlite.ir as ir

from smelt.errors import SmeltError
from smelt.lowering.llvm.types import I32, constant

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter

FUNCTIONS = {
    "tanh": 1,
    "erf": 1,
    "expm1": 1,
    "log1p": 1,
    "sinh": 1,
    "cosh": 1,
    "asin": 1,
    "acos": 1,
    "atan": 1,
    "asinh": 1,
    "acosh": 1,
    "atanh": 1,
    "cbrt": 1,
    "atan2": 2,
}
"""math.<name> → number of float arguments."""

# What LLVM itself lowers some intrinsics (llvm.exp, frem, ...) into.
_LOWERED_INTRINSICS = ["exp", "exp2", "log", "log2", "log10", "pow", "sin", "cos", "tan",
                       "fmod", "round", "roundeven", "trunc", "floor", "ceil", "fma"]


def _scalar_call(em: KernelEmitter, name: str, args: list[ir.Value], ty: ir.Type) -> ir.Value:
    b = em.builder
    if isinstance(ty, ir.HalfType):  # f16: compute in f32, as numpy does
        wide = [b.fpext(a, ir.FloatType()) for a in args]
        return b.fptrunc(_scalar_call(em, name, wide, ir.FloatType()), ty)
    symbol = name + "f" if isinstance(ty, ir.FloatType) else name
    if not isinstance(ty, ir.FloatType | ir.DoubleType):
        raise SmeltError(f"math.{name} on {ty}")
    from smelt.lowering.llvm.emit_kernel import declare_function

    fn = declare_function(em.module, symbol, ty, [ty] * len(args))
    return b.call(fn, args)


def call(em: KernelEmitter, name: str, args: list[ir.Value], ty: ir.Type) -> ir.Value:
    """`name(args)` from libm, element by element when `ty` is a vector."""
    if not isinstance(ty, ir.VectorType):
        return _scalar_call(em, name, args, ty)
    b = em.builder
    result: ir.Value = ir.Constant(ty, ir.Undefined)
    for lane in range(ty.count):
        index = constant(I32, lane)
        lane_args = [b.extract_element(a, index) for a in args]
        result = b.insert_element(result, _scalar_call(em, name, lane_args, ty.element), index)
    return result


@cache
def register_symbols() -> None:
    """Makes the libm functions that generated code calls known to the JIT linker."""
    path = ctypes.util.find_library("m")
    lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
    for base in [*FUNCTIONS, *_LOWERED_INTRINSICS]:
        for symbol in (base, base + "f"):
            try:
                address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                continue
            if address:
                llvm.add_symbol(symbol, address)
