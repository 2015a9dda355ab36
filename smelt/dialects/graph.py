"""The graph dialect: ONNX-like tensor ops with static shapes and value semantics.

Every op knows how to infer its result types from its operand types and attributes
(`infer`); the verifier checks the result types against that inference, and the
builder `Op.build(operands, **attrs)` uses it, so the frontend and the passes never
compute a shape by hand. Attributes are builtin attributes, readable with `attrs()`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    TypeAttribute,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    attr_def,
    irdl_op_definition,
    operand_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes

Shape = tuple[int, ...]

# Constants with more elements than this print as `dense_resource<__elided__>`.
ELIDE_ELEMENTS_LIMIT = 16


def to_attr(value: Any) -> Attribute:
    """A Python attribute value as a builtin attribute."""
    if isinstance(value, Attribute):
        return value
    if isinstance(value, bool | np.bool_):
        return IntegerAttr(int(value), i64)
    if isinstance(value, int | np.integer):
        return IntegerAttr(int(value), i64)
    if isinstance(value, float | np.floating):
        return FloatAttr(float(value), f32)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, Sequence | np.ndarray):
        return DenseArrayBase.from_list(i64, [int(v) for v in value])
    raise TypeError(f"cannot store {value!r} as a graph attribute")


def from_attr(attr: Attribute) -> Any:
    """A builtin attribute as a plain Python value."""
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        return tuple(attr.get_values())
    return attr


def tensor(element_type: Attribute, shape: Sequence[int]) -> TensorType:
    return TensorType(element_type, [int(d) for d in shape])


def shape_of(value: SSAValue | TensorType) -> Shape:
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def element_type_of(value: SSAValue | TensorType) -> Attribute:
    t = value if isinstance(value, TensorType) else value.type
    assert isinstance(t, TensorType)
    return t.element_type


def broadcast_shapes(*shapes: Shape) -> Shape:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise VerifyException(f"shapes {list(shapes)} do not broadcast") from None


def same_element_type(types: Sequence[TensorType], what: str) -> None:
    """Raises unless every type in `types` has the element type of the first."""
    if any(t.element_type != types[0].element_type for t in types[1:]):
        found = ", ".join(str(t.element_type) for t in types)
        raise VerifyException(f"{what} must share one element type, got {found}")


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise VerifyException(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


class GraphOp(IRDLOperation):
    """Base of all graph ops: inferred result types and one generic syntax.

    `%r = graph.op %a, %b {attr = ...} : (tensor<...>, ...) -> tensor<...>`
    """

    traits = traits_def(Pure())

    @classmethod
    def infer(cls, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        raise NotImplementedError

    def attrs(self) -> dict[str, Any]:
        return {name: from_attr(a) for name, a in self.attributes.items()}

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attributes.get(name)
        return default if a is None else from_attr(a)

    @classmethod
    def build(
        cls,
        operands: Sequence[SSAValue],
        result_types: Sequence[TensorType] | None = None,
        **attrs: Any,
    ) -> GraphOp:
        attributes = {k: to_attr(v) for k, v in attrs.items() if v is not None}
        if result_types is None:
            py_attrs = {k: from_attr(v) for k, v in attributes.items()}
            types = [o.type for o in operands]
            result_types = cls.infer(types, py_attrs)  # type: ignore[arg-type]
        return cls.create(
            operands=list(operands),
            result_types=list(result_types),
            attributes=attributes,
        )

    def verify_(self) -> None:
        types = [o.type for o in self.operands]
        if not all(isinstance(t, TensorType) for t in types):
            raise VerifyException(f"{self.name} expects tensor operands")
        try:
            expected = self.infer(types, self.attrs())  # type: ignore[arg-type]
        except NotImplementedError:
            return
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise VerifyException(f"{self.name}: {e}") from e
        actual = [r.type for r in self.results]
        if list(expected) != actual:
            raise VerifyException(
                f"{self.name}: result types {[str(t) for t in actual]} do not match "
                f"the inferred {[str(t) for t in expected]}"
            )

    def print(self, printer: Printer) -> None:
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type(
            [o.type for o in self.operands], [r.type for r in self.results]
        )

    @classmethod
    def parse(cls, parser: Parser) -> GraphOp:
        unresolved = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        ) or []
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        operands = parser.resolve_operands(unresolved, ftype.inputs.data, parser.pos)
        return cls.create(
            operands=operands,
            result_types=list(ftype.outputs.data),
            attributes=attributes,
        )


# --- elementwise -------------------------------------------------------------------


class UnaryOp(GraphOp):
    """Elementwise map: the result has the operand's type."""

    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        return [types[0]]


class BinaryOp(GraphOp):
    """Elementwise with numpy broadcasting; both operands share the element type."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        a, b = types
        if a.element_type != b.element_type:
            raise VerifyException(
                f"operand element types {a.element_type} and {b.element_type} differ"
            )
        shape = broadcast_shapes(shape_of(a), shape_of(b))
        return [tensor(a.element_type, shape)]


class CompareOp(BinaryOp):
    """Elementwise comparison with broadcasting; the result is i1."""

    @classmethod
    def infer(cls, types, attrs):
        return [tensor(dtypes.i1, shape_of(BinaryOp.infer(types, attrs)[0]))]


def _unary(op_name: str, doc: str) -> type[UnaryOp]:
    cls = type(op_name.title().replace("_", "") + "Op", (UnaryOp,), {"name": f"graph.{op_name}", "__doc__": doc, "__module__": __name__})
    return irdl_op_definition(cls)


def _binary(op_name: str, doc: str, base: type[BinaryOp] = BinaryOp) -> type[BinaryOp]:
    cls = type(
        op_name.title().replace("_", "") + "Op",
        (base,),
        {"name": f"graph.{op_name}", "__doc__": doc, "__module__": __name__},
    )
    return irdl_op_definition(cls)


ReluOp = _unary("relu", "max(x, 0)")
SigmoidOp = _unary("sigmoid", "1 / (1 + exp(-x))")
TanhOp = _unary("tanh", "tanh(x)")
ExpOp = _unary("exp", "exp(x)")
LogOp = _unary("log", "log(x)")
ErfOp = _unary("erf", "erf(x)")
SqrtOp = _unary("sqrt", "sqrt(x)")
NegOp = _unary("neg", "-x")
AbsOp = _unary("abs", "|x|")
ReciprocalOp = _unary("reciprocal", "1 / x")
FloorOp = _unary("floor", "floor(x)")
CeilOp = _unary("ceil", "ceil(x)")
IdentityOp = _unary("identity", "x; removed by graph-simplify")
DropoutOp = _unary("dropout", "x at inference; removed by graph-simplify")

AddOp = _binary("add", "a + b")
SubOp = _binary("sub", "a - b")
MulOp = _binary("mul", "a * b")
DivOp = _binary("div", "a / b (integer division truncates toward zero)")
PowOp = _binary("pow", "a ** b")
MaxOp = _binary("max", "max(a, b)")
MinOp = _binary("min", "min(a, b)")
EqualOp = _binary("equal", "a == b", base=CompareOp)
LessOp = _binary("less", "a < b", base=CompareOp)
GreaterOp = _binary("greater", "a > b", base=CompareOp)


@irdl_op_definition
class LeakyReluOp(UnaryOp):
    """x if x >= 0 else alpha * x."""

    name = "graph.leaky_relu"
    alpha = attr_def(FloatAttr)


@irdl_op_definition
class CastOp(GraphOp):
    """Converts the element type to `to` (ONNX Cast semantics)."""

    name = "graph.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    to = attr_def(TypeAttribute)

    @classmethod
    def infer(cls, types, attrs):
        return [tensor(attrs["to"], shape_of(types[0]))]


@irdl_op_definition
class ClipOp(GraphOp):
    """min(max(x, lo), hi) with scalar bounds lo and hi."""

    name = "graph.clip"
    input = operand_def(TensorType)
    min = operand_def(TensorType)
    max = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        for t in types[1:]:
            if math.prod(shape_of(t)) != 1:
                raise VerifyException("clip bounds must hold one element")
        same_element_type(types, "clip input and bounds")
        return [types[0]]


@irdl_op_definition
class WhereOp(GraphOp):
    """cond ? x : y with broadcasting."""

    name = "graph.where"
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        c, a, b = types
        if c.element_type != dtypes.i1 or a.element_type != b.element_type:
            raise VerifyException("where expects an i1 condition and equal branch types")
        return [tensor(a.element_type, broadcast_shapes(*map(shape_of, types)))]


# --- reductions and normalizations -------------------------------------------------


class ReduceOp(GraphOp):
    """Reduces `axes` (all when empty); keeps them as size 1 when keepdims = 1."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axes = attr_def(DenseArrayBase)
    keepdims = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        axes = reduced_axes(attrs["axes"], len(shape))
        keep = attrs["keepdims"]
        out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]
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
class SoftmaxOp(UnaryOp):
    """exp(x - max) / sum(exp(x - max)) along `axis`."""

    name = "graph.softmax"
    axis = attr_def(IntegerAttr)


@irdl_op_definition
class LayerNormOp(GraphOp):
    """Normalizes over the dims from `axis` on: y, mean and 1/std (ONNX semantics)."""

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
        stat_type = dtypes.f32 if not dtypes.is_float(x.element_type) else x.element_type
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
        c = shape_of(types[0])[1]
        if any(shape_of(t) != (c,) for t in types[1:]):
            raise VerifyException(f"batch_norm parameters must have shape ({c},)")
        return [types[0]]


@irdl_op_definition
class LrnOp(UnaryOp):
    """Local response normalization across channels (ONNX LRN)."""

    name = "graph.lrn"
    size = attr_def(IntegerAttr)
    alpha = attr_def(FloatAttr)
    beta = attr_def(FloatAttr)
    bias = attr_def(FloatAttr)


# --- data movement -------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(GraphOp):
    """Same elements in row-major order, new shape (the result type)."""

    name = "graph.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        src, dst = self.input.type, self.result.type
        if src.element_type != dst.element_type or math.prod(
            shape_of(src)
        ) != math.prod(shape_of(dst)):
            raise VerifyException(f"cannot reshape {src} to {dst}")


@irdl_op_definition
class ExpandOp(GraphOp):
    """Broadcasts the operand to `shape` (numpy rules, ONNX Expand)."""

    name = "graph.expand"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    shape = attr_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, attrs):
        shape = broadcast_shapes(shape_of(types[0]), tuple(attrs["shape"]))
        return [tensor(types[0].element_type, shape)]


@irdl_op_definition
class TransposeOp(GraphOp):
    """result[i_perm[0], ...] = input[i_0, ...]: dim k of the result is perm[k]."""

    name = "graph.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = attr_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, attrs):
        shape, perm = shape_of(types[0]), attrs["perm"]
        if sorted(perm) != list(range(len(shape))):
            raise VerifyException(f"perm {perm} is not a permutation of rank {len(shape)}")
        return [tensor(types[0].element_type, [shape[p] for p in perm])]


@irdl_op_definition
class ConcatOp(GraphOp):
    name = "graph.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shapes = [shape_of(t) for t in types]
        same_element_type(types, "concat inputs")
        axis = normalize_axis(attrs["axis"], len(shapes[0]))
        for s in shapes:
            if len(s) != len(shapes[0]) or any(
                a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis
            ):
                raise VerifyException(f"concat shapes {shapes} differ off axis {axis}")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tensor(types[0].element_type, out)]


@irdl_op_definition
class SplitOp(GraphOp):
    name = "graph.split"
    input = operand_def(TensorType)
    outputs = var_result_def(TensorType)
    axis = attr_def(IntegerAttr)
    sizes = attr_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        axis = normalize_axis(attrs["axis"], len(shape))
        if sum(attrs["sizes"]) != shape[axis]:
            raise VerifyException(f"split sizes {attrs['sizes']} do not sum to {shape[axis]}")
        return [
            tensor(types[0].element_type, shape[:axis] + (n,) + shape[axis + 1 :])
            for n in attrs["sizes"]
        ]


def slice_size(start: int, end: int, step: int) -> int:
    return max(0, -(-(end - start) // step)) if step > 0 else max(0, -(-(start - end) // -step))


@irdl_op_definition
class SliceOp(GraphOp):
    """result[i] = input[starts + i * steps] per dim; starts/ends normalized, ends
    exclusive (an end of -1 with a negative step means "through index 0")."""

    name = "graph.slice"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    starts = attr_def(DenseArrayBase)
    ends = attr_def(DenseArrayBase)
    steps = attr_def(DenseArrayBase)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        starts, ends, steps = attrs["starts"], attrs["ends"], attrs["steps"]
        if not len(starts) == len(ends) == len(steps) == len(shape) or 0 in steps:
            raise VerifyException("slice needs one nonzero start/end/step per dim")
        out = [slice_size(s, e, st) for s, e, st in zip(starts, ends, steps)]
        return [tensor(types[0].element_type, out)]


@irdl_op_definition
class GatherOp(GraphOp):
    """ONNX Gather: takes `indices` (negative counts from the end) along `axis`."""

    name = "graph.gather"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        index_type = types[1].element_type
        if not isinstance(index_type, IntegerType) or index_type == dtypes.i1:
            raise VerifyException("gather indices must be integers")
        axis = normalize_axis(attrs["axis"], len(shape))
        return [tensor(types[0].element_type, shape[:axis] + ishape + shape[axis + 1 :])]


@irdl_op_definition
class PadOp(GraphOp):
    """Pads by `pads` (all begins, then all ends) in mode constant/edge/reflect/wrap;
    the second operand is the scalar fill value."""

    name = "graph.pad"
    input = operand_def(TensorType)
    value = operand_def(TensorType)
    result = result_def(TensorType)
    pads = attr_def(DenseArrayBase)
    mode = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, pads = shape_of(types[0]), attrs["pads"]
        r = len(shape)
        if len(pads) != 2 * r:
            raise VerifyException(f"pad needs {2 * r} pads, got {len(pads)}")
        if math.prod(shape_of(types[1])) != 1:
            raise VerifyException("the pad value must hold one element")
        same_element_type(types, "pad input and value")
        out = [d + pads[i] + pads[i + r] for i, d in enumerate(shape)]
        return [tensor(types[0].element_type, out)]


# --- convolution, pooling, contractions -------------------------------------------------


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dil: int, ceil: bool) -> int:
    span = size + pad_lo + pad_hi - dil * (k - 1) - 1
    n = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (n - 1) * stride >= size + pad_lo:
        n -= 1  # the last window must start inside the input or its left padding
    return n


def window_shape(shape: Shape, kernel: Sequence[int], attrs: dict[str, Any], ceil: bool = False) -> list[int]:
    nsp = len(shape) - 2
    strides = attrs.get("strides") or (1,) * nsp
    pads = attrs.get("pads") or (0,) * (2 * nsp)
    dil = attrs.get("dilations") or (1,) * nsp
    return [
        window_out(shape[2 + i], kernel[i], strides[i], pads[i], pads[i + nsp], dil[i], ceil)
        for i in range(nsp)
    ]


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
        return [tensor(types[0].element_type, channels_last([x[0], w[0], *out], layout))]


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
        return [tensor(types[0].element_type, channels_last([x[0], x[1], *out], layout))]


@irdl_op_definition
class MaxPoolOp(PoolOp):
    name = "graph.max_pool"


@irdl_op_definition
class AveragePoolOp(PoolOp):
    name = "graph.average_pool"
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


@irdl_op_definition
class ConstantOp(GraphOp):
    """A tensor held as bytes in a dense attribute."""

    name = "graph.constant"
    value = attr_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())

    @classmethod
    def infer(cls, types, attrs):
        return [attrs["value"].type]

    @staticmethod
    def from_array(array: np.ndarray) -> ConstantOp:
        array = np.ascontiguousarray(array)
        t = tensor(dtypes.from_numpy(array.dtype), array.shape)
        storage = array.astype(np.uint8) if array.dtype == np.bool_ else array
        attr = DenseIntOrFPElementsAttr(t, BytesAttr(_bytes_of(storage)))
        return ConstantOp.create(result_types=[t], attributes={"value": attr})

    def to_array(self) -> np.ndarray:
        return dense_to_array(self.value)

    def print(self, printer: Printer) -> None:
        t = self.result.type
        if math.prod(shape_of(t)) > ELIDE_ELEMENTS_LIMIT and not PRINT_LARGE_CONSTANTS[0]:
            printer.print_string(" dense_resource<__elided__> : ")
            printer.print_attribute(t)
        else:
            printer.print_string(" ")
            printer.print_attribute(self.value)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(
                "graph.constant needs a dense value (elided constants cannot be parsed)"
            )
        return cls.create(result_types=[value.type], attributes={"value": value})


def _bytes_of(array: np.ndarray) -> bytes:
    """The bytes of contiguous `array`: its own buffer when it views a whole bytes
    object (weights from ONNX or from another constant), else a copy."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if (
        isinstance(base, bytes)
        and len(base) == array.nbytes
        and array.flags.c_contiguous
        and np.frombuffer(base, np.uint8).ctypes.data == array.ctypes.data
    ):
        return base
    return array.tobytes()


# Set PRINT_LARGE_CONSTANTS[0] = True (smelt-opt --print-constants) to print all weights.
PRINT_LARGE_CONSTANTS = [False]


def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The dense attribute's bytes as a numpy array (no per-element Python objects)."""
    dtype = dtypes.to_numpy(attr.get_element_type())
    raw = attr.data.data
    storage = np.uint8 if dtype == np.bool_ else dtype
    array = np.frombuffer(raw, dtype=storage).reshape(attr.get_shape())
    return array.astype(np.bool_) if dtype == np.bool_ else array



# --- fusion ---------------------------------------------------------------------------


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends a `graph.fused` region with the values the kernel produces."""

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), Pure())
    assembly_format = "$values attr-dict `:` type($values)"


@irdl_op_definition
class FusedOp(IRDLOperation):
    """The ops of one future kernel: the region's block arguments are the operands,
    its `graph.yield` gives the results. `kind` names the anchor (the op that decides
    the loop nest: conv2d, matmul, gemm, softmax, ... or elementwise).

        %r = graph.fused %x, %w, %b {kind = "conv2d"} : (...) -> tensor<...> {
        ^bb0(%a: ..., %b: ..., %c: ...):
          %0 = graph.conv2d %a, %b, %c {...} : ...
          %1 = graph.relu %0 : ...
          graph.yield %1 : tensor<...>
        }
    """

    name = "graph.fused"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    kind = attr_def(StringAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        block = self.body.block
        if [a.type for a in block.args] != [o.type for o in self.inputs]:
            raise VerifyException("graph.fused block arguments must match its operands")
        last = block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.fused region must end with graph.yield")
        if [v.type for v in last.values] != [r.type for r in self.outputs]:
            raise VerifyException("graph.yield types must match the graph.fused results")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_function_type(
            [o.type for o in self.inputs], [r.type for r in self.outputs]
        )
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=True)

    @classmethod
    def parse(cls, parser: Parser) -> FusedOp:
        unresolved = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        ) or []
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ftype = parser.parse_function_type()
        operands = parser.resolve_operands(unresolved, ftype.inputs.data, parser.pos)
        body = parser.parse_region()
        return cls.create(
            operands=operands,
            result_types=list(ftype.outputs.data),
            attributes=attributes,
            regions=[body],
        )


Graph = Dialect(
    "graph",
    [
        ReluOp, SigmoidOp, TanhOp, ExpOp, LogOp, ErfOp, SqrtOp, NegOp, AbsOp,
        ReciprocalOp, FloorOp, CeilOp, IdentityOp, DropoutOp, LeakyReluOp,
        AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp, LessOp, GreaterOp,
        CastOp, ClipOp, WhereOp,
        ReduceSumOp, ReduceMeanOp, ReduceMaxOp, SoftmaxOp, LayerNormOp, BatchNormOp,
        LrnOp,
        ReshapeOp, ExpandOp, TransposeOp, ConcatOp, SplitOp, SliceOp, GatherOp, PadOp,
        Conv2dOp, MaxPoolOp, AveragePoolOp, MaxPoolWithIndicesOp, GlobalAveragePoolOp,
        MatMulOp, GemmOp,
        ConstantOp, FusedOp, YieldOp,
    ],
    [],
)
