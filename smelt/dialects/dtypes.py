"""Element types shared by every smelt level, and their numpy equivalents."""

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
)
from xdsl.ir import Attribute

from smelt.errors import SmeltError

f16 = Float16Type()
bf16 = BFloat16Type()
f32 = Float32Type()
f64 = Float64Type()
i1 = IntegerType(1)
i8 = IntegerType(8)
i16 = IntegerType(16)
i32 = IntegerType(32)
i64 = IntegerType(64)
ui8 = IntegerType(8, Signedness.UNSIGNED)
ui16 = IntegerType(16, Signedness.UNSIGNED)
ui32 = IntegerType(32, Signedness.UNSIGNED)
ui64 = IntegerType(64, Signedness.UNSIGNED)

# Signless integers are signed, as in ONNX; unsigned ONNX types use `ui`. bf16 is
# ml_dtypes' bfloat16, the numpy type onnx's numpy_helper uses for BFLOAT16.
_TO_NUMPY: list[tuple[Attribute, np.dtype]] = [
    (f16, np.dtype(np.float16)),
    (bf16, np.dtype(ml_dtypes.bfloat16)),
    (f32, np.dtype(np.float32)),
    (f64, np.dtype(np.float64)),
    (i1, np.dtype(np.bool_)),
    (i8, np.dtype(np.int8)),
    (i16, np.dtype(np.int16)),
    (i32, np.dtype(np.int32)),
    (i64, np.dtype(np.int64)),
    (ui8, np.dtype(np.uint8)),
    (ui16, np.dtype(np.uint16)),
    (ui32, np.dtype(np.uint32)),
    (ui64, np.dtype(np.uint64)),
]


def to_numpy(element_type: Attribute) -> np.dtype:
    """The numpy dtype that stores `element_type`."""
    for attr, dtype in _TO_NUMPY:
        if attr == element_type:
            return dtype
    raise SmeltError(f"element type {element_type} has no numpy equivalent yet")


def from_numpy(dtype: np.dtype) -> Attribute:
    """The builtin element type for numpy `dtype`."""
    dtype = np.dtype(dtype)
    for attr, candidate in _TO_NUMPY:
        if candidate == dtype:
            return attr
    raise SmeltError(f"numpy dtype {dtype} is not supported by smelt yet")


def is_float(element_type: Attribute) -> bool:
    return isinstance(element_type, Float16Type | BFloat16Type | Float32Type | Float64Type)


def is_unsigned(element_type: Attribute) -> bool:
    return (
        isinstance(element_type, IntegerType)
        and element_type.signedness.data == Signedness.UNSIGNED
    )


def byte_size(element_type: Attribute) -> int:
    """Bytes one element takes in memory (i1 is stored as one byte)."""
    return to_numpy(element_type).itemsize


def nbytes(shaped: Attribute) -> int:
    """Bytes a static tensor / memref / vector type takes in memory (row-major,
    contiguous): the one byte-size rule every level uses."""
    n = byte_size(shaped.element_type)  # type: ignore[attr-defined]
    for d in shaped.get_shape():  # type: ignore[attr-defined]
        n *= d
    return n
