"""Graph dialect: reductions, normalizations, convolution, pooling and contractions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects.graph_base import (
    GraphOp,
    Shape,
    broadcast_shapes,
    normalize_axis,
    same_element_type,
    shape_of,
    tensor,
)
from smelt.dialects.graph_elementwise import UnaryOp

# --- reductions and normalizations -------------------------------------------------


class ReduceOp(GraphOp):
    """Reduces `axes` (all when empty); keeps them as size 1 when keepdims = 1."""

    ANCHOR: ClassVar[str | None] = "reduction"

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axes = attr_def(DenseArrayBase)
    keepdims = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        axes = reduced_axes(attrs["axes"], len(shape))
        keep = attrs["keepdims"]
        out = [
            1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes
        ]
        return [tensor(types[0].element_type, out)]


def reduced_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    if not axes:
        return tuple(range(rank))
    return tuple(sorted({normalize_axis(a, rank) for a in axes}))


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    name = "graph.reduce_sum"


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    name = "graph.reduce_mean"


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    name = "graph.reduce_max"


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    name = "graph.reduce_min"


@irdl_op_definition
class ReduceProdOp(ReduceOp):
    name = "graph.reduce_prod"


@irdl_op_definition
class SoftmaxOp(UnaryOp):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""

    ELEMENTWISE: ClassVar[bool] = False
    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.softmax"
    axis = attr_def(IntegerAttr)


@irdl_op_definition
class LogSoftmaxOp(UnaryOp):
    """(x - max) - log(sum(exp(x - max))) along `axis`."""

    ELEMENTWISE: ClassVar[bool] = False
    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.log_softmax"
    axis = attr_def(IntegerAttr)


@irdl_op_definition
class HardmaxOp(UnaryOp):
    """1 at the first maximum along `axis` (a NaN counts as the maximum), else 0."""

    ELEMENTWISE: ClassVar[bool] = False
    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.hardmax"
    axis = attr_def(IntegerAttr)


@irdl_op_definition
class LayerNormOp(GraphOp):
    """Normalizes over the dims from `axis` on: y, mean and 1/std (ONNX semantics)."""

    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.layer_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    mean = result_def(TensorType)
    inv_std_dev = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    epsilon = attr_def(FloatAttr)

    @classmethod
    def infer(cls, types, attrs):
        x = types[0]
        shape = shape_of(x)
        axis = normalize_axis(attrs["axis"], len(shape))
        stat_shape = shape[:axis] + (1,) * (len(shape) - axis)
        stat_type = (
            dtypes.f32 if not dtypes.is_float(x.element_type) else x.element_type
        )
        return [x, tensor(stat_type, stat_shape), tensor(stat_type, stat_shape)]


@irdl_op_definition
class BatchNormOp(GraphOp):
    """Inference batch norm over channel dim 1: (x - mean) / sqrt(var + eps) * s + b."""

    name = "graph.batch_norm"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = operand_def(TensorType)
    mean = operand_def(TensorType)
    var = operand_def(TensorType)
    result = result_def(TensorType)
    epsilon = attr_def(FloatAttr)

    @classmethod
    def infer(cls, types, attrs):
        if len(shape_of(types[0])) < 2:
            raise VerifyException("batch_norm needs an input of rank >= 2 (N, C…)")
        c = shape_of(types[0])[1]
        if any(shape_of(t) != (c,) for t in types[1:]):
            raise VerifyException(f"batch_norm parameters must have shape ({c},)")
        return [types[0]]


@irdl_op_definition
class LrnOp(UnaryOp):
    """Local response normalization across channels (ONNX LRN)."""

    ELEMENTWISE: ClassVar[bool] = False
    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.lrn"
    size = attr_def(IntegerAttr)
    alpha = attr_def(FloatAttr)
    beta = attr_def(FloatAttr)
    bias = attr_def(FloatAttr)


# --- convolution, pooling, contractions -------------------------------------------------


def window_out(
    size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int
) -> int:
    """The number of convolution windows along one dim (floor division: 0 or
    negative when the dilated kernel is larger than the padded input, which the
    importer refuses)."""
    return (size + pad_lo + pad_hi - dil * (k - 1) - 1) // stride + 1


def pool_out(
    size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int, ceil: bool
) -> int:
    """The number of pool windows along one dim, as onnx's shape inference and
    onnxruntime count them: the division truncates toward zero, so a window that
    overhangs the padded input by less than a stride still counts (size 1, kernel
    3, stride 3: one window, over the one cell); ceil_mode rounds up, but the last
    window must start inside the input or its left padding. Negative when the
    kernel overhangs by two strides or more (onnxruntime refuses the model)."""
    span = size + pad_lo + pad_hi - dil * (k - 1) - 1
    if not ceil:
        whole = abs(span) // stride
        return (whole if span >= 0 else -whole) + 1
    n = -(-span // stride) + 1
    if (n - 1) * stride >= size + pad_lo:
        n -= 1
    return n


def window_shape(
    shape: Shape, kernel: Sequence[int], attrs: dict[str, Any], ceil: bool | None = None
) -> list[int]:
    """The spatial output dims of a window op over NC... `shape`: a convolution's
    when `ceil` is None, else a pool's (`pool_out`) with that ceil_mode."""
    nsp = len(shape) - 2
    strides = attrs.get("strides") or (1,) * nsp
    pads = attrs.get("pads") or (0,) * (2 * nsp)
    dil = attrs.get("dilations") or (1,) * nsp
    out = []
    for i in range(nsp):
        args = (shape[2 + i], kernel[i], strides[i], pads[i], pads[i + nsp], dil[i])
        out.append(window_out(*args) if ceil is None else pool_out(*args, ceil))
    return out


def channels_first(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """`shape` in NC... order: for "nhwc" the last dim moves to position 1."""
    shape = tuple(shape)
    return shape if layout != "nhwc" else (shape[0], shape[-1], *shape[1:-1])


def channels_last(shape: Sequence[int], layout: str) -> tuple[int, ...]:
    """Inverse of channels_first."""
    shape = tuple(shape)
    return shape if layout != "nhwc" else (shape[0], *shape[2:], shape[1])


@irdl_op_definition
class Conv2dOp(GraphOp):
    """Conv with bias [O] and `group` channel groups. layout "nchw": input NCHW,
    weight OIHW, result NCHW; layout "nhwc": input NHWC, weight OHWI, result NHWC."""

    ANCHOR: ClassVar[str | None] = "contraction"

    name = "graph.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    strides = attr_def(DenseArrayBase)
    pads = attr_def(DenseArrayBase)
    dilations = attr_def(DenseArrayBase)
    group = attr_def(IntegerAttr)
    layout = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        layout = attrs.get("layout", "nchw")
        x, w, b = map(shape_of, types)
        if len(x) != 4 or len(w) != 4:
            raise VerifyException("conv2d expects rank-4 input and weight")
        x, w = channels_first(x, layout), channels_first(w, layout)
        if x[1] != w[1] * attrs["group"] or w[0] % attrs["group"] or b != (w[0],):
            raise VerifyException(f"conv2d shapes {x}, {w}, {b} and group disagree")
        out = window_shape(x, w[2:], attrs)
        return [
            tensor(types[0].element_type, channels_last([x[0], w[0], *out], layout))
        ]


class PoolOp(GraphOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel_shape = attr_def(DenseArrayBase)
    strides = attr_def(DenseArrayBase)
    pads = attr_def(DenseArrayBase)
    dilations = attr_def(DenseArrayBase)
    ceil_mode = attr_def(IntegerAttr)
    layout = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        layout = attrs.get("layout", "nchw")
        x = channels_first(shape_of(types[0]), layout)
        out = window_shape(x, attrs["kernel_shape"], attrs, bool(attrs["ceil_mode"]))
        return [
            tensor(types[0].element_type, channels_last([x[0], x[1], *out], layout))
        ]


@irdl_op_definition
class MaxPoolOp(PoolOp):
    name = "graph.max_pool"
    ANCHOR: ClassVar[str | None] = "reduction"


@irdl_op_definition
class AveragePoolOp(PoolOp):
    name = "graph.average_pool"
    ANCHOR: ClassVar[str | None] = "reduction"
    count_include_pad = attr_def(IntegerAttr)


@irdl_op_definition
class MaxPoolWithIndicesOp(PoolOp):
    """max_pool (NCHW only) that also gives, per window, the i64 index of its maximum
    (ONNX MaxPool's Indices): the first window position holding the max (a NaN
    counts as the max), as an index into the unpadded input flattened per (n, c)
    block in row-major order (`storage_order` = 0) or with the spatial dims in
    column-major order (`storage_order` = 1); -1 for a window with no input cell."""

    name = "graph.max_pool_with_indices"
    result = result_def(TensorType)  # redeclared so that it stays result 0
    indices = result_def(TensorType)
    storage_order = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        if attrs.get("layout", "nchw") != "nchw":
            raise VerifyException("max_pool_with_indices supports layout nchw only")
        if attrs["storage_order"] not in (0, 1):
            raise VerifyException("max_pool_with_indices storage_order must be 0 or 1")
        (y,) = PoolOp.infer(types, attrs)
        return [y, tensor(i64, shape_of(y))]


@irdl_op_definition
class GlobalAveragePoolOp(GraphOp):
    name = "graph.global_average_pool"
    ANCHOR: ClassVar[str | None] = "reduction"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    layout = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        layout = attrs.get("layout", "nchw")
        x = channels_first(shape_of(types[0]), layout)
        out = channels_last([x[0], x[1]] + [1] * (len(x) - 2), layout)
        return [tensor(types[0].element_type, out)]


@irdl_op_definition
class MatMulOp(GraphOp):
    """numpy matmul semantics, batch dims broadcast."""

    ANCHOR: ClassVar[str | None] = "contraction"

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        a, b = map(shape_of, types)
        if not a or not b:
            raise VerifyException("matmul operands must have rank >= 1")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise VerifyException(f"matmul contraction dims differ: {a} @ {b}")
        same_element_type(types, "matmul operands")
        out = list(broadcast_shapes(a2[:-2], b2[:-2])) + [a2[-2], b2[-1]]
        if len(a) == 1:
            out.pop(-2)
        if len(b) == 1:
            out.pop(-1)
        return [tensor(types[0].element_type, out)]


@irdl_op_definition
class GemmOp(GraphOp):
    """alpha * op(A) @ op(B) + beta * C, op = transpose when trans_a / trans_b."""

    ANCHOR: ClassVar[str | None] = "contraction"

    name = "graph.gemm"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    addend = operand_def(TensorType)
    result = result_def(TensorType)
    alpha = attr_def(FloatAttr)
    beta = attr_def(FloatAttr)
    trans_a = attr_def(IntegerAttr)
    trans_b = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        a, b, c = map(shape_of, types)
        if len(a) != 2 or len(b) != 2:
            raise VerifyException("gemm expects rank-2 A and B")
        m, k = a[::-1] if attrs["trans_a"] else a
        k2, n = b[::-1] if attrs["trans_b"] else b
        if k != k2:
            raise VerifyException(f"gemm contraction dims differ: {a} and {b}")
        if broadcast_shapes(c, (m, n)) != (m, n):
            raise VerifyException(f"gemm addend {c} does not broadcast to {(m, n)}")
        same_element_type(types, "gemm operands")
        return [tensor(types[0].element_type, [m, n])]
