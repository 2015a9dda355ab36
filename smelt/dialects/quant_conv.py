"""quant.dwconv: an int8 depthwise convolution (NHWC, one filter per channel) with
its requantizing epilogue, the integer kernel of a QDQ depthwise conv.

    acc[n, oh, ow, c] = bias[c] + Σ_{i, j} x[n, oh·sh + i·dh, ow·sw + j·dw, c]
                                           · w[i, j, c]                    (i32)
    y = saturate(round_half_even(f32(acc) · multiplier[c]) + zero_point)
                                                    [max(y, zero_point): relu]

x is u8 / s8 with its padding already in place (padded with the input's zero
point, so z_x folds into the bias: bias = bias_q − z_x · Σ_{i,j} w), w i32
[KH, KW, C] (int8 values), bias i32 [C], multiplier f32 [C] (s_x·s_w / s_y), the
zero point a u8 / s8 scalar that gives the result's type. Channels are the
innermost (unit-stride) dim of x, w and y: the lowering puts them in vector lanes.

With an `epilogue` (a program of `quant_epilogue`, on the post operands after
the first five), y goes on through it in f32 (the dequantize, BatchNorm's
affine, HardSwish, a residual add … that the QDQ graph has between this conv's
QuantizeLinear and the next) and the result is its final quantize.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, result_def, var_operand_def
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects import quant_epilogue as epi
from smelt.dialects.graph_base import GraphOp, shape_of, tensor

_EIGHT = (dtypes.i8, dtypes.ui8)


def dwconv_shape(
    x: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]
) -> tuple[int, ...]:
    n, h, w, c = x
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    return n, (h - (kh - 1) * dh - 1) // sh + 1, (w - (kw - 1) * dw - 1) // sw + 1, c


def dwconv(
    x: np.ndarray, w: np.ndarray, bias: np.ndarray, mult: np.ndarray,
    zp: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int],
    relu: bool, post: list[np.ndarray] | None = None, epilogue: str = "",
) -> np.ndarray:  # fmt: skip
    """quant.dwconv in numpy (see the module docstring)."""
    n, oh, ow, c = dwconv_shape(x.shape, kernel, strides, dilations)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    acc = np.broadcast_to(bias.astype(np.int64), (n, oh, ow, c)).copy()
    xi = x.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xi[:, i * dh : i * dh + (oh - 1) * sh + 1 : sh,
                       j * dw : j * dw + (ow - 1) * sw + 1 : sw, :]  # fmt: skip
            acc += patch * w[i, j].astype(np.int64)
    scaled = acc.astype(np.int32).astype(np.float32) * mult.astype(np.float32)
    info = np.iinfo(zp.dtype)
    y = np.rint(scaled) + np.float32(zp)
    y = np.clip(y, info.min, info.max)
    if relu:
        y = np.maximum(y, np.float32(zp))
    if epilogue:
        return epi.evaluate(epilogue, y.astype(zp.dtype), post or [])
    return y.astype(zp.dtype)


@irdl_op_definition
class DwConvOp(GraphOp):
    """y = requantize(depthwise_conv_i32(x, w) + bias) (see the module docstring);
    attributes kernel_shape [KH, KW], strides, dilations, relu (0 / 1)."""

    FOLDABLE: ClassVar[bool] = False

    name = "quant.dwconv"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    multiplier = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    post = var_operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        x, w, bias, mult, zp, *post = types
        if x.element_type not in _EIGHT or len(shape_of(x)) != 4:
            raise VerifyException("dwconv takes an NHWC tensor of 8-bit integers")
        if zp.element_type not in _EIGHT or shape_of(zp) != ():
            raise VerifyException("dwconv's zero point is an 8-bit scalar")
        params = [list(attrs[a]) for a in ("kernel_shape", "strides", "dilations")]
        if any(len(p) != 2 or min(p) < 1 for p in params):
            raise VerifyException("dwconv needs two positive kernel dims, strides "
                                  "and dilations")  # fmt: skip
        c = shape_of(x)[-1]
        kh, kw = params[0]
        if shape_of(w) != (kh, kw, c) or w.element_type != dtypes.i32:
            raise VerifyException(f"dwconv weight must be i32 [{kh}, {kw}, {c}]")
        if shape_of(bias) != (c,) or bias.element_type != dtypes.i32:
            raise VerifyException(f"dwconv bias must be i32 [{c}]")
        if shape_of(mult) != (c,) or mult.element_type != dtypes.f32:
            raise VerifyException(f"dwconv multiplier must be f32 [{c}]")
        out = dwconv_shape(shape_of(x), *params)
        if min(out) < 1:
            raise VerifyException(f"dwconv window larger than the input {shape_of(x)}")
        program = attrs.get("epilogue", "")
        if not program:
            if post:
                raise VerifyException("dwconv post operands need an epilogue")
            return [tensor(zp.element_type, out)]
        try:
            used = epi.posts_used(program)
            storage = epi.result_storage(program)
        except ValueError as e:
            raise VerifyException(f"dwconv: {e}") from e
        if used != set(range(len(post))):
            raise VerifyException("dwconv's epilogue must read each post operand")
        for p in post:
            if shape_of(p) not in ((c,), out) or (
                shape_of(p) == (c,) and p.element_type != dtypes.f32
            ):
                raise VerifyException(f"dwconv post operands are f32 [{c}] or "
                                      f"tensors of the result's shape {out}")  # fmt: skip
        return [tensor(dtypes.i8 if storage == "i8" else dtypes.ui8, out)]
