"""quant.qgemm: an int8 GEMM with prepacked weights and a fused requantization.

    y[m, n] = requant(Σ_k a[m, k] · W[k, n] + bias[n])          (i32 accumulation)
    a       = x, or x + 128 (`shift_input`: an s8 x read as u8 by `vpdpbusd`)
    requant = saturate(round_half_even(f32(acc) · multiplier[n]) + zero_point),
              then max(·, zero_point) with `relu`

x is u8 / s8 [..., K]; W (int, [K, N]) is stored packed for one micro-kernel
`variant` (`VARIANTS`): wp[N_p / NR, K_p / KG, NR, KG] with
wp[j, g, c, t] = W[g · KG + t, j · NR + c], zero past K and N (so a padded k or
column adds nothing). bias (i32) and multiplier (f32) are padded to N_p. quant-pack-gemm
builds it; the LLVM target emits `lowering/llvm/int8_gemm.py` for it.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects.graph_base import GraphOp, shape_of, tensor


class Variant(NamedTuple):
    """A micro-kernel family: i32 lanes per vector, columns per panel (NR), k per
    i32 lane (KG), weight storage, rows per register tile (MR), the dot intrinsic
    and the CPU feature it needs."""

    lanes: int
    nr: int
    kg: int
    weight: type
    mr: int
    intrinsic: str
    feature: str


VARIANTS: dict[str, Variant] = {
    # u8 × s8, 4 k per lane: acc += Σ_t a[t] · b[t]
    "vnni512": Variant(16, 32, 4, np.int8, 8, "llvm.x86.avx512.vpdpbusd.512",
                       "avx512vnni"),
    "vnni256": Variant(8, 16, 4, np.int8, 6, "llvm.x86.avx512.vpdpbusd.256",
                       "avxvnni"),
    # i16 × i16, 2 k per lane (operands widened: weights at pack time)
    "pmaddwd512": Variant(16, 32, 2, np.int16, 8, "llvm.x86.avx512.pmaddw.d.512",
                          "avx512bw"),
    "pmaddwd256": Variant(8, 16, 2, np.int16, 6, "llvm.x86.avx2.pmadd.wd", "avx2"),
}  # fmt: skip


def choose_variant(has) -> str | None:
    """The best variant for a CPU (`has(feature)`), or None (generic loops)."""
    for name in ("vnni512", "vnni256", "pmaddwd512", "pmaddwd256"):
        if has(VARIANTS[name].feature):
            return name
    return None


def padded(k: int, n: int, variant: str) -> tuple[int, int]:
    v = VARIANTS[variant]
    return -(-k // v.kg) * v.kg, -(-n // v.nr) * v.nr


def pack_weights(w: np.ndarray, variant: str) -> np.ndarray:
    """W[K, N] → wp[N_p / NR, K_p / KG, NR, KG] (see the module docstring)."""
    v = VARIANTS[variant]
    k, n = w.shape
    kp, np_ = padded(k, n, variant)
    full = np.zeros((kp, np_), v.weight)
    full[:k, :n] = w
    blocks = full.reshape(kp // v.kg, v.kg, np_ // v.nr, v.nr)
    return np.ascontiguousarray(blocks.transpose(2, 0, 3, 1))


def unpack_weights(wp: np.ndarray, k: int, n: int) -> np.ndarray:
    panels, groups, nr, kg = wp.shape
    full = wp.transpose(1, 3, 0, 2).reshape(groups * kg, panels * nr)
    return full[:k, :n]


def reference(
    x: np.ndarray, wp: np.ndarray, bias: np.ndarray, mult: np.ndarray,
    zp: np.ndarray, k: int, n: int, relu: bool, shift_input: bool,
) -> np.ndarray:  # fmt: skip
    """quant.qgemm in numpy (exact: the f32 product as the kernel computes it)."""
    w = unpack_weights(wp, k, n).astype(np.int64)
    a = x.astype(np.int64) + (128 if shift_input else 0)
    acc = (a.reshape(-1, k) @ w + bias[:n].astype(np.int64)).astype(np.int32)
    scaled = acc.astype(np.float32) * mult[:n].astype(np.float32)
    info = np.iinfo(zp.dtype)
    lo = max(info.min, int(zp)) if relu else info.min
    y = np.clip(np.rint(scaled.astype(np.float64)) + int(zp), lo, info.max)
    return y.astype(zp.dtype).reshape(*x.shape[:-1], n)


@irdl_op_definition
class QGemmOp(GraphOp):
    """y = requant(x @ W + bias) with W packed (see the module docstring)."""

    FOLDABLE: ClassVar[bool] = False

    name = "quant.qgemm"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    multiplier = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        x, wp, bias, mult, zp = types
        variant = attrs.get("variant")
        if variant not in VARIANTS:
            raise VerifyException(f"unknown qgemm variant {variant!r}")
        eight = (dtypes.i8, dtypes.ui8)
        if x.element_type not in eight or zp.element_type not in eight:
            raise VerifyException("qgemm reads and writes 8-bit integers")
        xs = shape_of(x)
        k, n = int(attrs["k"]), int(attrs["n"])
        kp, np_ = padded(k, n, variant)
        v = VARIANTS[variant]
        if len(xs) < 2 or xs[-1] != k:
            raise VerifyException(f"qgemm input {xs} must be [..., {k}]")
        if shape_of(wp) != (np_ // v.nr, kp // v.kg, v.nr, v.kg):
            raise VerifyException(f"qgemm weight {shape_of(wp)} is not packed for "
                                  f"{variant}, k={k}, n={n}")  # fmt: skip
        if shape_of(bias) != (np_,) or shape_of(mult) != (np_,):
            raise VerifyException(f"qgemm bias and multiplier must be [{np_}]")
        return [tensor(zp.element_type, (*xs[:-1], n))]
