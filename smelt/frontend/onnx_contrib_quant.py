"""com.microsoft quantized matmuls as graph ops:

* MatMulNBits (onnxruntime's weight-only 2/4/8-bit blocks, as its
  matmul_nbits_quantizer writes them): the constant weights are dequantized at
  import, w[n, k] = (q[n, k] - zero_point[n, block]) * scale[n, block] with the
  block of k from block_size or g_idx, and the node becomes a float MatMul
  (+ bias). The weights are then float in the compiled model (bits / 32 of
  their size before).
* QGemm: (A - a_zero_point) @ (B - b_zero_point) (+ C) accumulated in int32,
  as QLinearMatMul; times alpha * a_scale * b_scale, then requantized with
  y_scale / y_zero_point, or float when y_scale is absent.
* MatMulIntegerToFloat, DynamicQuantizeMatMul (what onnxruntime's optimizer
  makes of quantize_dynamic's DynamicQuantizeLinear + MatMulInteger + scale):
  the int32 product as float times a_scale * b_scale, + bias; A quantized at
  run time to uint8 as DynamicQuantizeLinear for the second.
"""

from __future__ import annotations

import numpy as np

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.dialects import quant as q
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_contrib import MS, float_input, refuse_attrs
from smelt.frontend.onnx_quant import (
    _col_param,
    _matmul_integer,
    _out_zero_point,
    _scalar_scale,
)
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py


def handles(*ops: str):
    return HANDLERS.register(*(MS + op for op in ops))


def _unpack(data: np.ndarray, bits: int) -> np.ndarray:
    """The bits-wide unsigned values packed in the last dim of uint8 `data`,
    lowest bits first: [..., bytes] -> [..., bytes * 8 / bits]."""
    shifts = np.arange(8 // bits, dtype=np.uint8) * bits
    values = (data[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*data.shape[:-1], -1)


def dequantize_nbits(
    ctx: NodeContext,
    packed: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    g_idx: np.ndarray | None,
) -> np.ndarray:
    """MatMulNBits' weights as float (N, K), in the scales' type."""
    k, n = int(ctx.attr("K")), int(ctx.attr("N"))
    bits, block = int(ctx.attr("bits", 4)), int(ctx.attr("block_size"))
    blocks = -(-k // block)
    blob = block * bits // 8
    if packed.dtype != np.uint8 or packed.size != n * blocks * blob:
        raise ctx.invalid(
            f"its B is {packed.dtype}{list(packed.shape)}; with N={n}, K={k}, "
            f"bits={bits}, block_size={block} it must be uint8 [{n}, {blocks}, {blob}]"
        )
    if scales.size != n * blocks:
        raise ctx.invalid(
            f"its scales have {scales.size} values; they must be N x blocks = "
            f"{n * blocks}"
        )
    values = _unpack(packed.reshape(n, blocks * blob), bits)[:, :k]
    scales = scales.reshape(n, blocks)
    dtype = scales.dtype
    if zero_points is None:
        zp = np.full((n, blocks), 1 << (bits - 1), dtype)
    elif zero_points.dtype == np.uint8:
        per_row = -(-blocks * bits // 8)
        if zero_points.size != n * per_row:
            raise ctx.invalid(
                f"its packed zero_points have {zero_points.size} bytes; they must "
                f"be N x ceil(blocks * bits / 8) = {n * per_row}"
            )
        zp = _unpack(zero_points.reshape(n, per_row), bits)[:, :blocks].astype(dtype)
    elif zero_points.dtype == dtype and zero_points.size == n * blocks:
        zp = zero_points.reshape(n, blocks)
    else:
        raise ctx.invalid(
            f"its zero_points are {zero_points.dtype}{list(zero_points.shape)}; they "
            f"must be packed uint8, or {dtype} like the scales ({n * blocks} values)"
        )
    if g_idx is not None and zero_points is not None and zero_points.dtype == np.uint8:
        raise ctx.unsupported(
            "packed uint8 zero_points together with g_idx are not supported: "
            "onnxruntime 1.32 ignores such zero points (it subtracts 8), its "
            "schema says to subtract them; which one is meant is not clear"
        )
    if g_idx is not None and bits != 4:
        raise ctx.unsupported(
            f"g_idx with bits = {bits} is not supported (only with 4 bits: "
            "onnxruntime 1.32 refuses 8 bits there and computes other values "
            "than the schema's for 2 bits)"
        )
    if g_idx is None:
        block_of = np.arange(k) // block
    else:
        block_of = g_idx.astype(np.int64).reshape(-1)
        if block_of.size != k or block_of.min() < 0 or block_of.max() >= blocks:
            raise ctx.invalid(f"its g_idx must be K = {k} block indices < {blocks}")
    centered = values.astype(dtype) - zp[:, block_of]
    return centered * scales[:, block_of]


@handles("MatMulNBits")
def _matmul_nbits(ctx: NodeContext) -> list[Value]:
    a = ctx.inputs[0]
    dtype = float_input(ctx, a, "A")
    refuse_attrs(ctx, {"bits": (2, 4, 8)})
    if ctx.attr("accuracy_level", 0) == 4:
        raise ctx.unsupported(
            "attribute 'accuracy_level' = 4 is not supported: onnxruntime then "
            "quantizes A to int8 per block and its results differ from the float "
            "product that smelt computes (levels 0 to 3 compute in float for "
            "float32 A; set 0 to accept that)"
        )
    if ctx.attr("K") is None or ctx.attr("N") is None or not ctx.attr("block_size"):
        raise ctx.invalid("it needs attributes K, N and block_size")
    block = int(ctx.attr("block_size"))
    if block < 16 or block & (block - 1):
        raise ctx.invalid(f"attribute 'block_size' is {block}; it must be a power "
                          "of 2, 16 or more")  # fmt: skip
    packed = ctx.const(1, "quantized weights B")
    scales = ctx.const(2, "scales")
    if packed is None:
        raise ctx.invalid("its quantized weights B (input 1) are missing")
    if scales is None or scales.dtype != dtype:
        raise ctx.invalid(f"its scales must be {dtype} like A")
    weights = dequantize_nbits(
        ctx, packed, scales, ctx.const(3, "zero_points"), ctx.const(4, "g_idx")
    )
    k = int(ctx.attr("K"))
    if shape_of(a)[-1:] != (k,):
        raise ctx.invalid(f"its A has shape {list(shape_of(a))}; the last dim must "
                          f"be K = {k}")  # fmt: skip
    ctx.check_size(weights.shape, dtype)
    y = ctx.emit(g.MatMulOp, [a, Const(np.ascontiguousarray(weights.T))])[0]
    bias = ctx.input(5)
    if bias is not None:
        y = ctx.emit(g.AddOp, [y, bias])[0]
    return [y]


def _transposed(ctx: NodeContext, x: Value, flag: str) -> Value:
    if not ctx.attr(flag, 0):
        return x
    return ctx.emit(g.TransposeOp, [x], perm=[1, 0])[0]


@handles("QGemm")
def _qgemm(ctx: NodeContext) -> list[Value]:
    a, a_scale, a_zp, b, b_scale, b_zp = (ctx.input(i) for i in range(6))
    c, y_scale, y_zp = ctx.input(6), ctx.input(7), ctx.input(8)
    refuse_attrs(ctx, {"transA": (0, 1), "transB": (0, 1)})
    if len(shape_of(a)) != 2 or len(shape_of(b)) != 2:
        raise ctx.invalid(
            f"its A {list(shape_of(a))} and B {list(shape_of(b))} must be 2-D"
        )
    a = _transposed(ctx, a, "transA")
    b = _transposed(ctx, b, "transB")
    n = shape_of(b)[1]
    if shape_of(b_scale) not in ((), (1,), (n,)):
        raise ctx.invalid(f"its b_scale must be a scalar or [{n}]")
    if a_zp is not None:
        a_zp = _scalar_scale(ctx, a_zp, "a zero point")
    acc = _matmul_integer(ctx, a, b, a_zp, b_zp)
    if c is not None:
        if numpy_type_of(c) != np.int32:
            raise ctx.invalid(f"its C is {numpy_type_of(c)}; it must be int32")
        acc = ctx.emit(g.AddOp, [acc, c])[0]
    scale = ctx.emit(g.MulOp, [_scalar_scale(ctx, a_scale, "a scale"),
                               _col_param(ctx, b_scale)])[0]  # fmt: skip
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        scale = ctx.emit(g.MulOp, [scale, Const(np.array(alpha, np.float32))])[0]
    if y_scale is None:
        wide = ctx.emit(g.CastOp, [acc], to=dtypes.f32)[0]
        return ctx.emit(g.MulOp, [wide, scale])
    multiplier = ctx.emit(
        g.DivOp, [scale, _scalar_scale(ctx, y_scale, "output scale")]
    )[0]
    return ctx.emit(q.RequantizeOp, [acc, multiplier, _out_zero_point(ctx, y_zp, a)])


def integer_to_float(
    ctx: NodeContext, acc: Value, a_scale: Value, b_scale: Value, bias: Value | None
) -> Value:
    """float(acc) * (a_scale * b_scale) (+ bias), onnxruntime's order."""
    n = shape_of(acc)[-1]
    if shape_of(b_scale) not in ((), (1,), (n,)):
        raise ctx.invalid(f"its b_scale has shape {list(shape_of(b_scale))}; it "
                          f"must be a scalar or [{n}]")  # fmt: skip
    scale = ctx.emit(g.MulOp, [_scalar_scale(ctx, a_scale, "a scale"),
                               _col_param(ctx, b_scale)])[0]  # fmt: skip
    y = ctx.emit(g.MulOp, [ctx.emit(g.CastOp, [acc], to=dtypes.f32)[0], scale])[0]
    if bias is not None:
        if tuple(shape_of(bias)) != (n,):
            raise ctx.invalid(f"its bias has shape {list(shape_of(bias))}; [{n}]")
        y = ctx.emit(g.AddOp, [y, bias])[0]
    return y


def matmul_integer(
    ctx: NodeContext, a: Value, b: Value, a_zp: Value | None, b_zp: Value | None
) -> Value:
    """(a - a_zp) @ (b - b_zp) in int32, a_zp a scalar."""
    if a_zp is not None:
        a_zp = _scalar_scale(ctx, a_zp, "a zero point")
    return _matmul_integer(ctx, a, b, a_zp, b_zp)


@handles("MatMulIntegerToFloat")
def _matmul_integer_to_float(ctx: NodeContext) -> list[Value]:
    """(A - a_zero_point) @ (B - b_zero_point) in int32, then as float times
    a_scale * b_scale, + bias."""
    a, b, a_scale, b_scale, a_zp, b_zp, bias = (ctx.input(i) for i in range(7))
    acc = matmul_integer(ctx, a, b, a_zp, b_zp)
    return [integer_to_float(ctx, acc, a_scale, b_scale, bias)]


@handles("DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(ctx: NodeContext) -> list[Value]:
    """A quantized to uint8 over the whole tensor as DynamicQuantizeLinear does
    (its range widened to hold 0; a scale of 1 for an all-zero A, as onnxruntime),
    then MatMulIntegerToFloat with B."""
    a, b, b_scale, b_zp, bias = (ctx.input(i) for i in range(5))
    float_input(ctx, a, "A")
    if numpy_type_of(a) != np.float32:
        raise ctx.unsupported(f"A of {numpy_type_of(a)} is not supported (float32)")
    axes = list(range(len(shape_of(a))))
    low = ctx.emit(g.ReduceMinOp, [a], axes=axes, keepdims=0)[0]
    high = ctx.emit(g.ReduceMaxOp, [a], axes=axes, keepdims=0)[0]
    zero, one = Const(np.float32(0)), Const(np.float32(1))
    low = ctx.emit(g.MinOp, [low, zero])[0]
    high = ctx.emit(g.MaxOp, [high, zero])[0]
    span = ctx.emit(g.SubOp, [high, low])[0]
    scale = ctx.emit(g.DivOp, [span, Const(np.float32(255))])[0]
    flat = ctx.emit(g.EqualOp, [span, zero])[0]
    scale = ctx.emit(g.WhereOp, [flat, one, scale])[0]
    zp = ctx.emit(g.RoundOp, [ctx.emit(g.DivOp, [ctx.emit(g.NegOp, [low])[0],
                                                  scale])[0]])[0]  # fmt: skip
    zp = ctx.emit(g.ClipOp, [zp, zero, Const(np.float32(255))])[0]
    zp = ctx.emit(g.CastOp, [zp], to=dtypes.ui8)[0]
    quantized = ctx.emit(q.QuantizeOp, [a, scale, zp])[0]
    acc = _matmul_integer(ctx, quantized, b, zp, b_zp)
    return [integer_to_float(ctx, acc, scale, b_scale, bias)]
