"""The quant dialect: uniform quantized element types and the ops that move values
between real numbers and their integer storage, after MLIR's `quant` dialect.

A uniform quantized value stores an integer Q and means R = S · (Q − Z) (scale S,
zero point Z). The types spell that mapping statically:

    !quant.uniform<i8:f32, 0.0125:-3>            per tensor (storage:expressed, S:Z)
    !quant.uniform<u8:f32:1, {0.1:0, 0.2:5}>     per axis 1 (one S:Z per slice)

The ops take scale and zero point as tensor operands (ONNX's QuantizeLinear takes
them at run time) that broadcast to the value: a per-axis scale of a rank-3 value on
axis 1 has shape [C, 1]. `uniform_type` reads the static type back when both are
constants. Every op computes with round half to even and saturates to the storage
range; none is folded into a float constant (a quantized weight stays int8 data
plus its scale and zero point), a quantize of a constant folds to its integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerType,
    NoneAttr,
    TensorType,
    f64,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition, irdl_op_definition, operand_def, result_def
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects.graph_base import GraphOp, broadcast_shapes, shape_of, tensor
from smelt.dialects.quant_conv import DwConvOp
from smelt.dialects.quant_gemm import Im2ColOp, QGemmOp

# --- storage and expressed types ---------------------------------------------------

_STORAGE = {
    "i8": dtypes.i8, "u8": dtypes.ui8, "i16": dtypes.i16, "u16": dtypes.ui16,
    "i32": dtypes.i32,
}  # fmt: skip
_EXPRESSED = (Float32Type, Float16Type, BFloat16Type)


def storage_range(storage: Attribute) -> tuple[int, int]:
    """The smallest and largest value of integer storage type `storage`."""
    if storage not in _STORAGE.values():
        names = ", ".join(_STORAGE)
        raise VerifyException(f"quantized storage must be one of {names}: {storage}")
    info = np.iinfo(dtypes.to_numpy(storage))
    return int(info.min), int(info.max)


def _storage_name(storage: Attribute) -> str:
    return next(n for n, t in _STORAGE.items() if t == storage)


def _verify_common(storage: Attribute, expressed: Attribute) -> None:
    storage_range(storage)
    if not isinstance(expressed, _EXPRESSED):
        raise VerifyException(
            f"quantized expressed type must be f32, f16 or bf16, not {expressed}"
        )


def _verify_scale_zero_point(scale: float, zero_point: int, storage) -> None:
    if not (math.isfinite(scale) and scale > 0):
        raise VerifyException(f"quantized scale must be positive and finite: {scale}")
    lo, hi = storage_range(storage)
    if not lo <= zero_point <= hi:
        raise VerifyException(
            f"zero point {zero_point} is outside the storage range [{lo}, {hi}]"
        )


def _format_float(value: float) -> str:
    """A float literal the parser reads back exactly (it needs a '.')."""
    text = repr(float(value))
    if "." not in text and "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _parse_storage_expressed(parser: AttrParser) -> tuple[Attribute, Attribute]:
    pos = parser.pos
    name = parser.parse_identifier()
    if name not in _STORAGE:
        parser.raise_error(f"storage type must be one of {', '.join(_STORAGE)}", pos)
    parser.parse_punctuation(":")
    return _STORAGE[name], parser.parse_type()


def _parse_scale_zero_point(parser: AttrParser) -> tuple[float, int]:
    scale = float(parser.parse_number())
    zero_point = 0
    if parser.parse_optional_punctuation(":") is not None:
        zero_point = parser.parse_integer()
    return scale, zero_point


# --- types ---------------------------------------------------------------------------


@irdl_attr_definition
class UniformQuantizedType(ParametrizedAttribute, TypeAttribute):
    """Uniform quantization per tensor (one scale and zero point; `axis` is
    NoneAttr) or per axis (one per slice of `axis`, e.g. per output channel)."""

    name = "quant.uniform"

    storage_type: IntegerType
    expressed_type: Attribute
    axis: IntAttr | NoneAttr
    scales: ArrayAttr[FloatAttr]
    zero_points: ArrayAttr[IntAttr]

    @staticmethod
    def per_tensor(
        storage: Attribute, expressed: Attribute, scale: float, zero_point: int
    ) -> UniformQuantizedType:
        return UniformQuantizedType(
            storage, expressed, NoneAttr(), _floats([scale]), _ints([zero_point])
        )

    @staticmethod
    def per_axis(
        storage: Attribute,
        expressed: Attribute,
        axis: int,
        scales: Sequence[float],
        zero_points: Sequence[int],
    ) -> UniformQuantizedType:
        return UniformQuantizedType(
            storage, expressed, IntAttr(axis), _floats(scales), _ints(zero_points)
        )

    @property
    def quantized_dimension(self) -> int | None:
        return self.axis.data if isinstance(self.axis, IntAttr) else None

    def scale_values(self) -> list[float]:
        return [s.value.data for s in self.scales]

    def zero_point_values(self) -> list[int]:
        return [z.data for z in self.zero_points]

    def verify(self) -> None:
        _verify_common(self.storage_type, self.expressed_type)
        axis = self.quantized_dimension
        if axis is None and len(self.scales) != 1:
            raise VerifyException("per-tensor quantization has exactly one scale")
        if axis is not None and axis < 0:
            raise VerifyException(f"quantized dimension must be >= 0: {axis}")
        if len(self.scales) != len(self.zero_points) or not self.scales.data:
            raise VerifyException(
                "quantization needs as many zero points as scales (at least one)"
            )
        for s, z in zip(self.scale_values(), self.zero_point_values(), strict=True):
            _verify_scale_zero_point(s, z, self.storage_type)

    def verify_for(self, t: TensorType) -> None:
        """Checks that the axis and the number of scales fit tensor type `t`."""
        dims, axis = shape_of(t), self.quantized_dimension
        if axis is None:
            return
        if axis >= len(dims):
            raise VerifyException(
                f"quantized dimension {axis} is out of range for rank {len(dims)}"
            )
        if dims[axis] != len(self.scales):
            raise VerifyException(
                f"{len(self.scales)} scales for dimension {axis} of size {dims[axis]}"
            )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{_storage_name(self.storage_type)}:")
        printer.print_attribute(self.expressed_type)
        pairs = [
            f"{_format_float(s)}:{z}"
            for s, z in zip(self.scale_values(), self.zero_point_values(), strict=True)
        ]
        axis = self.quantized_dimension
        if axis is None:
            printer.print_string(f", {pairs[0]}>")
        else:
            printer.print_string(f":{axis}, {{{', '.join(pairs)}}}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        parser.parse_punctuation("<")
        storage, expressed = _parse_storage_expressed(parser)
        axis: IntAttr | NoneAttr = NoneAttr()
        if parser.parse_optional_punctuation(":") is not None:
            axis = IntAttr(parser.parse_integer())
        parser.parse_punctuation(",")
        if isinstance(axis, NoneAttr):
            pairs = [_parse_scale_zero_point(parser)]
        else:
            pairs = parser.parse_comma_separated_list(
                parser.Delimiter.BRACES, lambda: _parse_scale_zero_point(parser)
            )
        parser.parse_punctuation(">")
        scales, zero_points = zip(*pairs, strict=True)
        return [storage, expressed, axis, _floats(scales), _ints(zero_points)]


def _floats(values: Sequence[float]) -> ArrayAttr[FloatAttr]:
    return ArrayAttr([FloatAttr(float(v), f64) for v in values])


def _ints(values: Sequence[int]) -> ArrayAttr[IntAttr]:
    return ArrayAttr([IntAttr(int(v)) for v in values])


# --- ops -----------------------------------------------------------------------------


def _check_broadcast(value: TensorType, param: TensorType, what: str) -> None:
    """`param` (a scale or zero point) must broadcast to `value`'s shape."""
    if broadcast_shapes(shape_of(value), shape_of(param)) != shape_of(value):
        raise VerifyException(
            f"{what} of shape {list(shape_of(param))} does not broadcast to "
            f"{list(shape_of(value))}"
        )


def _check_storage(zero_point: TensorType) -> None:
    storage_range(zero_point.element_type)


class _QuantOp(GraphOp):
    """Base of the quant ops: value, scale and zero point operands. The ops are
    never folded into float constants (see the module docstring)."""

    FOLDABLE: ClassVar[bool] = False

    def uniform_type(self) -> UniformQuantizedType | None:
        """The static quantized type of the storage side when scale and zero point
        are `graph.constant`s of at most one non-unit dim; else None."""
        from smelt.dialects.graph_data import ConstantOp

        producers = [o.owner for o in self.operands[1:3]]
        if not all(isinstance(p, ConstantOp) for p in producers):
            return None
        scale, zp = (p.to_array() for p in producers)  # type: ignore[union-attr]
        storage_side, float_side = self._sides()
        storage = storage_side.element_type
        expressed = float_side.element_type
        axes = [i for i, d in enumerate(np.broadcast_shapes(scale.shape, zp.shape))
                if d != 1]  # fmt: skip
        rank = len(shape_of(storage_side))
        if not axes:
            return UniformQuantizedType.per_tensor(
                storage, expressed, float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0])
            )
        if len(axes) > 1:
            return None
        n = np.broadcast_shapes(scale.shape, zp.shape)[axes[0]]
        axis = axes[0] + rank - max(scale.ndim, zp.ndim)
        return UniformQuantizedType.per_axis(
            storage,
            expressed,
            axis,
            list(np.broadcast_to(scale.reshape(-1), n)),
            list(np.broadcast_to(zp.reshape(-1), n)),
        )

    def _sides(self) -> tuple[TensorType, TensorType]:
        raise NotImplementedError


@irdl_op_definition
class QuantizeOp(_QuantOp):
    """q = saturate(round_half_even(x / scale) + zero_point): float x to the
    storage type of `zero_point`."""

    ELEMENTWISE: ClassVar[bool] = True
    # a constant quantizes to integer data (a weight reached through a Reshape is
    # quantized as an activation): folded, the contraction finds an int8 weight
    FOLDABLE: ClassVar[bool] = True

    name = "quant.quantize"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        x, scale, zp = types
        if not dtypes.is_float(x.element_type) or x.element_type == dtypes.f64:
            raise VerifyException(f"quantize expects f32, f16 or bf16, not {x}")
        if not dtypes.is_float(scale.element_type):
            raise VerifyException(f"the scale must be a float tensor, not {scale}")
        _check_storage(zp)
        _check_broadcast(x, scale, "scale")
        _check_broadcast(x, zp, "zero point")
        return [tensor(zp.element_type, shape_of(x))]

    def _sides(self):
        return self.result.type, self.input.type


@irdl_op_definition
class DequantizeOp(_QuantOp):
    """x = (q - zero_point) * scale, in the scale's float type."""

    ELEMENTWISE: ClassVar[bool] = True

    name = "quant.dequantize"
    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        q, scale, zp = types
        _check_storage(q)
        if zp.element_type != q.element_type:
            raise VerifyException(
                f"the zero point's type {zp.element_type} differs from the "
                f"input's {q.element_type}"
            )
        if not isinstance(scale.element_type, _EXPRESSED):
            raise VerifyException(f"the scale must be f32, f16 or bf16, not {scale}")
        _check_broadcast(q, scale, "scale")
        _check_broadcast(q, zp, "zero point")
        return [tensor(scale.element_type, shape_of(q))]

    def _sides(self):
        return self.input.type, self.result.type


@irdl_op_definition
class RequantizeOp(_QuantOp):
    """q = saturate(round_half_even(acc * multiplier) + zero_point): an i32
    accumulator (an integer matmul or conv) to the storage type of `zero_point`;
    `multiplier` is S_in / S_out. The product is computed in f64, exactly as
    ONNX's QLinearMatMul / QLinearConv define it."""

    ELEMENTWISE: ClassVar[bool] = True

    name = "quant.requantize"
    input = operand_def(TensorType)
    multiplier = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        acc, multiplier, zp = types
        if acc.element_type != dtypes.i32:
            raise VerifyException(f"requantize expects an i32 accumulator, not {acc}")
        if not dtypes.is_float(multiplier.element_type):
            raise VerifyException(
                f"the multiplier must be a float tensor, not {multiplier}"
            )
        _check_storage(zp)
        _check_broadcast(acc, multiplier, "multiplier")
        _check_broadcast(acc, zp, "zero point")
        return [tensor(zp.element_type, shape_of(acc))]

    def uniform_type(self) -> None:
        return None


Quant = Dialect(
    "quant",
    [QuantizeOp, DequantizeOp, RequantizeOp, QGemmOp, Im2ColOp, DwConvOp],
    [UniformQuantizedType],
)
