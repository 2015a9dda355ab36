"""Reference kernels of the quant dialect (ONNX QuantizeLinear / DequantizeLinear
semantics; requantization as ONNX's QLinearMatMul and QLinearConv compute it)."""

from __future__ import annotations

import numpy as np

from smelt.dialects import dtypes
from smelt.dialects import quant as q
from smelt.dialects.quant_conv import DwConvOp, dwconv
from smelt.dialects.quant_gemm import Im2ColOp, QGemmOp, im2col
from smelt.dialects.quant_gemm import reference as qgemm_reference
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register


def saturate(values: np.ndarray, storage: np.dtype) -> np.ndarray:
    """Integral float `values` clamped to `storage`'s range (NaN to its minimum, as
    numpy's cast of NaN does on x86) and stored as `storage`."""
    info = np.iinfo(storage)
    values = np.where(np.isnan(values), info.min, values)
    return np.clip(values, info.min, info.max).astype(storage)


def quotient_type(x: np.dtype, scale: np.dtype) -> np.dtype:
    """The float type x / scale is rounded to: numpy's promotion of the two (f16
    only when both are f16, likewise bf16), computed through f32."""
    return x if x == scale else np.dtype(np.float32)


@kernel(q.QuantizeOp)
def _quantize(op: q.QuantizeOp, args: list[np.ndarray]) -> np.ndarray:
    x, scale, zp = args
    quotient = x.astype(np.float32) / scale.astype(np.float32)
    quotient = quotient.astype(quotient_type(x.dtype, scale.dtype))
    rounded = np.rint(quotient.astype(np.float64)) + zp.astype(np.float64)
    return saturate(rounded, zp.dtype)


@kernel(q.DequantizeOp)
def _dequantize(op: q.DequantizeOp, args: list[np.ndarray]) -> np.ndarray:
    x, scale, zp = args
    shifted = x.astype(np.float32) - zp.astype(np.float32)
    return (shifted * scale.astype(np.float32)).astype(scale.dtype)


@kernel(q.RequantizeOp)
def _requantize(op: q.RequantizeOp, args: list[np.ndarray]) -> np.ndarray:
    acc, multiplier, zp = args
    scaled = acc.astype(np.float64) * multiplier.astype(np.float64)
    rounded = np.rint(scaled) + zp.astype(np.float64)
    return saturate(rounded, dtypes.to_numpy(op.result.type.element_type))


@kernel(QGemmOp)
def _qgemm(op: QGemmOp, args: list[np.ndarray]) -> np.ndarray:
    a = op.attrs()
    flags = bool(a.get("relu", 0)), bool(a.get("shift_input", 0))
    epilogue = str(a.get("epilogue", "requantize"))
    return qgemm_reference(
        *args[:5], args[5:], int(a["k"]), int(a["n"]), *flags, epilogue,
        bool(a.get("post_relu", 0)),
    )  # fmt: skip


@kernel(Im2ColOp)
def _im2col(op: Im2ColOp, args: list[np.ndarray]) -> np.ndarray:
    a = op.attrs()
    keys = ("kernel_shape", "strides", "dilations")
    return im2col(args[0], *(list(a[k]) for k in keys))


@kernel(DwConvOp)
def _dwconv(op: DwConvOp, args: list[np.ndarray]) -> np.ndarray:
    a = op.attrs()
    keys = ("kernel_shape", "strides", "dilations")
    return dwconv(
        *args[:5], *(list(a[k]) for k in keys), bool(a.get("relu", 0)),
        args[5:], str(a.get("epilogue", "")),
    )  # fmt: skip
