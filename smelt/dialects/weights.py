"""Where the bytes of constants live: big weights in aligned memory of their own.

A dense attribute holds its bytes in a `BytesAttr`. For small constants those are
a Python `bytes` object; for big ones (`ALIGNED_BYTES` and more) they are a
`WeightBytes`, a read-only uint8 array on an `ALIGN` boundary, which the compiled
program reads where it lies (`plan_memory`'s weight segments): a weight is then
held once while the module compiles and runs, never copied into a blob beside
it, and vector loads from it never straddle a cache line (a Python `bytes`
object's data sits 48 bytes past a 64-byte boundary, which slowed a GEMV
streaming one by a third)."""

from __future__ import annotations

import mmap

import numpy as np

__all__ = [
    "ALIGN", "ALIGNED_BYTES", "WeightBytes", "aligned_empty", "held", "storage_of"
]

ALIGN = 64
"""Byte alignment of every arena buffer and weight (a cache line, an AVX-512 vector)."""

ALIGNED_BYTES = 1 << 20
"""Constants of at least this many bytes are stored as `WeightBytes`."""

_SAMPLE = 4096
"""Bytes from each end that a `WeightBytes` hashes (hashing all of a 300 MB weight
would cost a tenth of a second each time a new attribute holds it)."""

_PIECE = 1 << 20
"""Bytes that `WeightBytes.__eq__` compares at a time."""


def aligned_empty(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of `nbytes` (at least one) starting on an ALIGN boundary."""
    raw = np.zeros(max(1, nbytes) + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + max(1, nbytes)]


class WeightBytes(np.ndarray):
    """A read-only 1-D uint8 array on an ALIGN boundary that stands in for `bytes`
    in a `BytesAttr`: readers take it through the buffer protocol
    (`np.frombuffer`, `struct`), as they take `bytes`. Like `bytes` it hashes
    and compares by content (two attributes holding equal weights are equal),
    but it hashes a sample (its length and both ends) and compares in full only
    when the samples agree."""

    @classmethod
    def empty(cls, nbytes: int) -> WeightBytes:
        """Zeroed, writable until `freeze`: what a pass fills, then hands to an
        attribute. Its memory is an anonymous mapping of its own (page-aligned,
        touched only as it is filled, returned to the system when the last view
        of it dies); numpy's views of it keep it as their base, so that
        `storage_of` finds it again under a reshaped or retyped view."""
        return np.ndarray.__new__(
            cls, (nbytes,), np.uint8, buffer=mmap.mmap(-1, max(1, nbytes))
        )

    @classmethod
    def copy_of(cls, array: np.ndarray) -> WeightBytes:
        """The elements of `array` in C order, copied into aligned memory (one
        copy, also from a strided view)."""
        out = cls.empty(array.nbytes)
        np.copyto(out.view(np.ndarray).view(array.dtype).reshape(array.shape), array)
        return out.freeze()

    def freeze(self) -> WeightBytes:
        self.flags.writeable = False
        return self

    def as_array(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """A view of these bytes as an array (which `storage_of` traces back)."""
        return np.frombuffer(self, dtype).reshape(shape)

    def __hash__(self) -> int:  # type: ignore[override]
        plain = self.view(np.ndarray)
        return hash((len(self), plain[:_SAMPLE].tobytes(), plain[-_SAMPLE:].tobytes()))

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if self is other:
            return True
        if not isinstance(other, WeightBytes | bytes) or len(other) != len(self):
            return False
        mine, theirs = self.view(np.ndarray), np.frombuffer(other, np.uint8)
        return all(  # a piece at a time: no temporary the size of the weight
            np.array_equal(mine[i : i + _PIECE], theirs[i : i + _PIECE])
            for i in range(0, len(mine), _PIECE)
        )

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        return not self == other

    def hex(self) -> str:
        """As `bytes.hex` (xDSL prints a dense attribute's bytes with it)."""
        return self.tobytes().hex()


def held(array: np.ndarray) -> np.ndarray:
    """`array` when small, else a read-only view of an aligned copy of it: how the
    importer keeps a big tensor, so that the constant made of it shares its
    bytes (`storage_of`) instead of copying them while it still holds them."""
    if array.nbytes < ALIGNED_BYTES:
        return array
    return WeightBytes.copy_of(array).as_array(array.dtype, array.shape)


def storage_of(array: np.ndarray) -> bytes | WeightBytes:
    """The bytes of `array` in C order for a `BytesAttr`: the buffer it views when
    it views the whole of one (a `bytes` object from ONNX, the frozen
    `WeightBytes` of another constant), else a copy: into aligned memory from
    `ALIGNED_BYTES` on."""
    base = array
    while isinstance(base, np.ndarray) and not isinstance(base, WeightBytes):
        base = base.base
    whole = (
        isinstance(base, bytes | WeightBytes)
        and len(base) == array.nbytes
        and array.flags.c_contiguous
        and np.frombuffer(base, np.uint8).ctypes.data == array.ctypes.data
    )
    big = array.nbytes >= ALIGNED_BYTES
    if whole and isinstance(base, WeightBytes) and not base.flags.writeable:
        return base
    if whole and isinstance(base, bytes) and not big:
        return base
    return WeightBytes.copy_of(array) if big else array.tobytes(order="C")
