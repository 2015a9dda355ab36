"""Builtin types and constants → llvmlite types and constants (values and memory)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
    MemRefType,
    NoneAttr,
    StridedLayoutAttr,
    UnregisteredOp,
    VectorType,
)
from xdsl.ir import Attribute, Operation

from smelt.errors import SmeltError

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


def op_name(op: Operation) -> str:
    """The op's name, also for ops xDSL parsed as unregistered (like arith.remf)."""
    if isinstance(op, UnregisteredOp):
        return op.op_name.data
    return op.name


def value_type(t: Attribute) -> ir.Type:
    """The LLVM type of an SSA value of builtin type `t` (index is i64).

    bf16 is held as its 16 bits (i16): LLVM's `bfloat` needs runtime helpers on x86
    without AVX512-BF16, and smelt computes bf16 in f32 anyway (extf / truncf).
    """
    match t:
        case BFloat16Type():
            return ir.IntType(16)
        case Float16Type():
            return ir.HalfType()
        case Float32Type():
            return ir.FloatType()
        case Float64Type():
            return ir.DoubleType()
        case IntegerType():
            return ir.IntType(t.width.data)
        case IndexType():
            return I64
        case VectorType():
            shape = t.get_shape()
            if len(shape) != 1 or t.get_num_scalable_dims():
                raise SmeltError(
                    f"the llvm target handles only 1-d fixed vectors, not {t}"
                )
            return ir.VectorType(value_type(t.get_element_type()), shape[0])
    raise SmeltError(f"the llvm target does not handle the type {t} yet")


def memory_type(t: Attribute) -> ir.Type:
    """The LLVM type of one element in memory: i1 is stored as one byte."""
    if isinstance(t, IntegerType) and t.width.data == 1:
        return I8
    return value_type(t)


def element_of(ty: ir.Type) -> ir.Type:
    """The scalar type of a (possibly vector) LLVM type."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def is_float(ty: ir.Type) -> bool:
    return isinstance(element_of(ty), ir.HalfType | ir.FloatType | ir.DoubleType)


def suffix(ty: ir.Type) -> str:
    """The overload suffix of an LLVM intrinsic: f32, v8f32, i64, ..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{suffix(ty.element)}"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    return f"i{ty.width}"


def scalar_constant(ty: ir.Type, value: float) -> ir.Constant:
    """An exact scalar constant; floats keep inf and nan, ints wrap to the width."""
    if isinstance(ty, ir.IntType):
        mask = (1 << ty.width) - 1
        v = int(value) & mask
        if ty.width > 1 and v >> (ty.width - 1):
            v -= 1 << ty.width
        return ir.Constant(ty, v)
    if isinstance(ty, ir.HalfType):
        # LLVM wants half constants either exact in double hex or as 0xH bits.
        bits = int(np.array(value, dtype=np.float16).view(np.uint16))
        return ir.FormattedConstant(ty, f"0xH{bits:04X}")
    # f32 and f64 constants are written as the bits of the (f32-rounded) double.
    value = float(np.float32(value)) if isinstance(ty, ir.FloatType) else float(value)
    bits = int(np.array(value, dtype=np.float64).view(np.uint64))
    return ir.FormattedConstant(ty, f"0x{bits:016X}")


def constant(ty: ir.Type, value: float) -> ir.Constant:
    """`value` as a constant of `ty`, splatted when `ty` is a vector."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [scalar_constant(ty.element, value)] * ty.count)
    return scalar_constant(ty, value)


def bf16_bits(value: float) -> int:
    """The bf16 bit pattern nearest to `value` (round to nearest even, quiet NaN)."""
    if math.isnan(value):
        return 0x7FC0
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def is_bf16(t: Attribute) -> bool:
    """Whether `t` is bf16 or a vector of bf16."""
    if isinstance(t, VectorType):
        t = t.get_element_type()
    return isinstance(t, BFloat16Type)


@dataclass(frozen=True)
class BufferInfo:
    """Shape facts of a static, contiguous, row-major memref."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    element: Attribute
    element_bytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_bytes


def buffer_info(t: Attribute) -> BufferInfo:
    """Static shape and row-major strides of memref type `t`, or a SmeltError."""
    if not isinstance(t, MemRefType):
        raise SmeltError(f"the llvm target expects memref buffers, not {t}")
    shape = tuple(t.get_shape())
    if any(d < 0 for d in shape):
        raise SmeltError(f"the llvm target needs static shapes, not {t}")
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    layout = t.layout
    if not isinstance(layout, NoneAttr):
        given = layout.get_strides() if isinstance(layout, StridedLayoutAttr) else None
        offset = layout.get_offset() if isinstance(layout, StridedLayoutAttr) else None
        if given is None or offset not in (0, None) or list(given) != strides:
            raise SmeltError(
                f"the llvm target needs contiguous row-major buffers, not {t}"
            )
    element = t.get_element_type()
    return BufferInfo(shape, tuple(strides), element, _byte_size(element))


def _byte_size(t: Attribute) -> int:
    match t:
        case IntegerType():
            return max(1, (t.width.data + 7) // 8)
        case IndexType():
            return 8
        case Float16Type() | BFloat16Type():
            return 2
        case Float32Type():
            return 4
        case Float64Type():
            return 8
    raise SmeltError(f"the llvm target does not handle buffers of {t} yet")
