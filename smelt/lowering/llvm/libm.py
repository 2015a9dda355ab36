"""The C math library functions that generated code calls, and their JIT symbols."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import llvmlite.binding as llvm

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
_LOWERED_INTRINSICS = [
    "exp",
    "exp2",
    "log",
    "log2",
    "log10",
    "pow",
    "sin",
    "cos",
    "tan",
    "fmod",
    "round",
    "roundeven",
    "trunc",
    "floor",
    "ceil",
    "fma",
]


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
