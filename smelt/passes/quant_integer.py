"""The integer forms of QDQ contractions that quant-fold-qdq writes: reading a
dequantize's constant parameters, and matmul / gemm / conv2d of dequantized
operands as an i32 contraction with its requantizing (or dequantizing) epilogue.

    y_q = requantize(op_i32(cast(x_q) [− z_x], w_q − z_w) + bias_acc,
                     s_x·s_w / s_y, z_y)                  [max(y_q, z_y): relu]
    y   = f32(matmul_i32(cast(x_q), w_q − z_w) + bias_acc) · s_x·s_w + bias
                                                          (no quantize after it)

matmul / gemm fold z_x into the bias with the weight's column sums (bias_acc =
round(β·bias / (α·s_x·s_w)) − z_x·Σ_k w; the float form keeps β·bias in f32);
conv subtracts z_x from its input (padding must read the real zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph
from smelt.dialects import quant as q
from smelt.dialects.graph_base import shape_of


def constant(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return owner.to_array() if isinstance(owner, graph.ConstantOp) else None


def const_op(array: np.ndarray) -> graph.ConstantOp:
    return graph.ConstantOp.from_array(np.asarray(array))


@dataclass(frozen=True)
class Dq:
    """A dequantize with constant scale and zero point."""

    op: q.DequantizeOp
    scale: np.ndarray
    zero_point: np.ndarray

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def same_params(self, other: Dq) -> bool:
        return (
            self.scale.shape == other.scale.shape
            and self.zero_point.shape == other.zero_point.shape
            and self.zero_point.dtype == other.zero_point.dtype
            and np.array_equal(self.scale, other.scale)
            and np.array_equal(self.zero_point, other.zero_point)
        )


def dequantized(value: SSAValue) -> Dq | None:
    """The dequantize that makes `value`, if its scale and zero point are constant
    and every scale positive."""
    op = value.owner
    if not isinstance(op, q.DequantizeOp):
        return None
    scale, zp = constant(op.scale), constant(op.zero_point)
    if scale is None or zp is None or not np.all(scale > 0):
        return None
    return Dq(op, scale, zp)


def per_channel(
    param: np.ndarray, shape: tuple[int, ...], axis: int
) -> np.ndarray | None:
    """`param` broadcast to `shape` as one value per index of `axis`, or None if it
    varies along another axis."""
    full = np.broadcast_to(param, shape)
    moved = np.moveaxis(full, axis, 0).reshape(shape[axis], -1)
    if moved.shape[1] and not np.all(moved == moved[:, :1]):
        return None
    return moved[:, 0] if moved.shape[1] else np.zeros(shape[axis], param.dtype)


def bias_real(value: SSAValue | None) -> np.ndarray | None | bool:
    """The float bias a contraction adds (None: no bias; False: not constant)."""
    if value is None:
        return None
    dq = dequantized(value)
    if dq is not None:
        data = constant(dq.op.input)
        if data is None:
            return False
        zp = dq.zero_point.astype(np.float64)
        return (data.astype(np.float64) - zp) * dq.scale.astype(np.float64)
    c = constant(value)
    return False if c is None else c.astype(np.float64)


def quantize_params(op: q.QuantizeOp) -> tuple[float, np.ndarray] | None:
    """(scale, zero point) of a per-tensor quantize with constant parameters."""
    scale, zp = constant(op.scale), constant(op.zero_point)
    if scale is None or zp is None or scale.size != 1 or zp.size != 1:
        return None
    if not scale.reshape(-1)[0] > 0:
        return None
    return float(scale.reshape(-1)[0]), zp.reshape(())


def _eight_bit(x: Dq | None, w: Dq | None) -> bool:
    """Both dequantized from int8 / uint8, x per tensor (i32 sums cannot overflow
    for any realistic reduction length)."""
    if x is None or w is None or not x.per_tensor:
        return False
    eight = (dtypes.i8, dtypes.ui8)
    return all(d.op.input.type.element_type in eight for d in (x, w))


Out = tuple[float, np.ndarray] | None
"""The output quantize's (scale, zero point); None: a float result."""


def fold_matmul(
    core: graph.MatMulOp | graph.GemmOp, extra_bias: SSAValue | None, out: Out,
    relu: bool,
) -> list[Operation] | None:  # fmt: skip
    """The integer form of matmul / gemm `core` (+ `extra_bias`) [relu] of a
    per-tensor dequantized x and a constant dequantized 2-D weight, or None."""
    x, w = dequantized(core.operands[0]), dequantized(core.operands[1])
    if not _eight_bit(x, w):
        return None
    assert x is not None and w is not None
    w_data = constant(w.op.input)
    if w_data is None or w_data.ndim != 2:
        return None
    alpha, beta, trans_b = 1.0, 1.0, False
    bias_value = extra_bias
    if isinstance(core, graph.GemmOp):
        attrs = core.attrs()
        if attrs.get("trans_a", 0):
            return None
        alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
        trans_b = bool(attrs.get("trans_b", 0))
        bias_value = core.addend if len(core.operands) > 2 else None
    shape = tuple(w_data.shape)
    s_w = per_channel(w.scale, shape, 0 if trans_b else 1)
    if s_w is None or alpha <= 0:
        return None
    wc = w_data.astype(np.int64) - np.broadcast_to(w.zero_point, shape)
    if trans_b:
        wc = wc.T
    n = wc.shape[1]
    bias = bias_real(bias_value)
    if bias is False:
        return None
    if bias is not None:
        if bias.size not in (1, n) or bias.ndim > 2 or (
            bias.ndim == 2 and bias.shape[0] != 1
        ):
            return None
        bias = np.broadcast_to(bias.reshape(-1), (n,)) * beta
    return _integer_ops(core, x, wc, s_w * alpha, bias, out, relu, True)


def fold_conv(core: graph.Conv2dOp, out: Out, relu: bool) -> list[Operation] | None:
    """The integer form of conv2d `core` [relu] requantized to `out`, or None."""
    x, w = dequantized(core.input), dequantized(core.weight)
    if out is None or not _eight_bit(x, w):
        return None
    assert x is not None and w is not None
    w_data = constant(w.op.input)
    if w_data is None:
        return None
    shape = tuple(w_data.shape)
    s_w = per_channel(w.scale, shape, 0)
    if s_w is None:
        return None
    wc = w_data.astype(np.int64) - np.broadcast_to(w.zero_point, shape)
    bias = bias_real(core.bias)
    if bias is False:
        return None
    return _integer_ops(core, x, wc, s_w, bias, out, relu, False)


def _integer_ops(
    core, x: Dq, wc, s_w, bias, out: Out, relu: bool, fold_input_zero: bool
) -> list[Operation] | None:
    """The i32 contraction of `core`'s kind and its epilogue (the module docstring)."""
    s_x = float(x.scale.reshape(-1)[0])
    z_x = int(x.zero_point.reshape(-1)[0])
    n = s_w.shape[0]
    bias_acc = np.zeros(n, np.int64)
    if bias is not None and out is not None:
        bias_acc += np.rint(bias / (s_x * s_w.astype(np.float64))).astype(np.int64)
    cast = graph.CastOp.build([x.op.input], to=dtypes.i32)
    ops: list[Operation] = [cast]
    lhs = cast.results[0]
    if fold_input_zero:
        bias_acc -= z_x * wc.sum(axis=0)
    elif z_x:
        zero = const_op(np.array(z_x, np.int32))
        sub = graph.SubOp.build([lhs, zero.results[0]])
        ops += [zero, sub]
        lhs = sub.results[0]
    limit = np.iinfo(np.int32).max
    if np.abs(bias_acc).max(initial=0) > limit or np.abs(wc).max() > limit:
        return None
    weight = const_op(wc.astype(np.int32))
    bias_op = const_op(bias_acc.astype(np.int32))
    ops.append(weight)
    if isinstance(core, graph.Conv2dOp):
        contraction = graph.Conv2dOp.build(
            [lhs, weight.results[0], bias_op.results[0]], **core.attrs()
        )
        ops += [bias_op, contraction]
        acc = contraction.results[0]
        rank = len(shape_of(acc.type))
        nchw = core.attr("layout", "nchw") == "nchw"
        param_shape = (n,) + (1,) * (rank - 2) if nchw else (n,)
    else:
        contraction = graph.MatMulOp.build([lhs, weight.results[0]])
        add = graph.AddOp.build([contraction.results[0], bias_op.results[0]])
        ops += [contraction, bias_op, add]
        acc = add.results[0]
        param_shape = (n,)
    to_float = graph.CastOp.build([acc], to=dtypes.f32)
    if out is None:  # f32(acc) · s_x·s_w (+ bias)
        mult_op = const_op(np.float32(s_x) * s_w.astype(np.float32))
        scaled = graph.MulOp.build([to_float.results[0], mult_op.results[0]])
        ops += [to_float, mult_op, scaled]
        if bias is not None:
            addend = const_op(bias.astype(np.float32))
            ops += [addend, graph.AddOp.build([scaled.results[0], addend.results[0]])]
        return ops
    s_y, z_y = out
    multiplier = (np.float32(s_x) * s_w.astype(np.float32)) / np.float32(s_y)
    mult_op = const_op(multiplier.astype(np.float32).reshape(param_shape))
    zp_op = const_op(z_y)
    # float(acc) · multiplier in f32, then round half to even, + z_y, saturate:
    # onnxruntime's (MLAS) requantization, bit for bit.
    scaled = graph.MulOp.build([to_float.results[0], mult_op.results[0]])
    one = const_op(np.array(1.0, np.float32))
    requant = q.QuantizeOp.build([scaled.results[0], one.results[0], zp_op.results[0]])
    ops += [mult_op, zp_op, to_float, scaled, one, requant]
    if relu:
        ops.append(graph.MaxOp.build([requant.results[0], zp_op.results[0]]))
    return ops
