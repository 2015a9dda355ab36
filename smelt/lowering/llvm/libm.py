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


# What LLVM lowers half-precision conversions into where the target has no
# instruction for them (f64 → f16 always; f32 ↔ f16 without F16C): the compiler
# runtime's routines, which libgcc_s carries. Unresolved, the JIT called address 0.
_RUNTIME = ["__truncdfhf2", "__truncsfhf2", "__extendhfsf2"]


def _runtime_library() -> ctypes.CDLL | None:
    for name in (ctypes.util.find_library("gcc_s"), "libgcc_s.so.1"):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None


def missing_runtime() -> list[str]:
    """The compiler-runtime routines this process could not find (register first)."""
    return [s for s in _RUNTIME if llvm.address_of_symbol(s) is None]


@cache
def register_symbols() -> None:
    """Makes the libm functions and compiler-runtime routines that generated code
    calls known to the JIT linker."""
    runtime = _runtime_library()
    for symbol in _RUNTIME:
        address = getattr(runtime, symbol, None) if runtime is not None else None
        if address is not None:
            llvm.add_symbol(symbol, ctypes.cast(address, ctypes.c_void_p).value)
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
