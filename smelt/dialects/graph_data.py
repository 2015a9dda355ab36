"""Graph dialect: data movement (reshape, transpose, concat, slice, ...) and constants."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.ir import TypeAttribute
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes, weights
from smelt.dialects.graph_base import (
    GraphOp,
    broadcast_shapes,
    elides,
    normalize_axis,
    same_element_type,
    shape_of,
    shape_str,
    tensor,
)
from smelt.dialects.symbolic import Dim, DimLike

# --- data movement -------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(GraphOp):
    """Same elements in row-major order, new shape (the result type)."""

    KERNEL_FREE: ClassVar[bool] = True

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
class BitcastOp(GraphOp):
    """The same bytes seen as element type `to` of the same width (ONNX BitCast);
    bools come only from bools (other bytes are no valid bool)."""

    KERNEL_FREE: ClassVar[bool] = True

    name = "graph.bitcast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    to = attr_def(TypeAttribute)

    @classmethod
    def infer(cls, types, attrs):
        src, to = types[0].element_type, attrs["to"]
        if dtypes.byte_size(src) != dtypes.byte_size(to):
            raise VerifyException(f"cannot bitcast {src} to {to}: widths differ")
        if to == dtypes.i1 and src != dtypes.i1:
            raise VerifyException(f"cannot bitcast {src} to i1 (bytes other than 0/1)")
        return [tensor(to, shape_of(types[0]))]


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
            raise VerifyException(
                f"perm {perm} is not a permutation of rank {len(shape)}"
            )
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
                shown = ", ".join(map(shape_str, shapes))
                hint = (
                    " (for some values of their symbolic dims only; fix those "
                    "with input_shapes=)"
                    if any(isinstance(d, Dim) for t in shapes for d in t)
                    else ""
                )
                raise VerifyException(
                    f"concat shapes {shown} differ off axis {axis}{hint}"
                )
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
            raise VerifyException(
                f"split sizes {attrs['sizes']} do not sum to {shape[axis]}"
            )
        return [
            tensor(types[0].element_type, shape[:axis] + (n,) + shape[axis + 1 :])
            for n in attrs["sizes"]
        ]


def slice_size(start: int, end: int, step: int) -> int:
    return (
        max(0, -(-(end - start) // step))
        if step > 0
        else max(0, -(-(start - end) // -step))
    )


def clamp_slice(start: int, end: int, step: int, dim: DimLike) -> tuple:
    """ONNX Slice's start and end on an axis of extent `dim`, normalized: negative
    ones count from the end, then clamped (an end of -1 with a negative step
    means "through index 0")."""
    start += dim if start < 0 else 0
    end += dim if end < 0 else 0
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


@irdl_op_definition
class SliceOp(GraphOp):
    """result[i] = input[starts + i * steps] per dim; starts/ends normalized, ends
    exclusive (an end of -1 with a negative step means "through index 0"). On a
    symbolic dim they are ONNX's, which `clamp_slice` normalizes: negative ones
    count from the end, ends past it (2**63 - 1) stop there."""

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
        out = [
            slice_size(*clamp_slice(s, e, st, d), st) if isinstance(d, Dim)
            else slice_size(s, e, st)
            for s, e, st, d in zip(starts, ends, steps, shape)
        ]  # fmt: skip
        return [tensor(types[0].element_type, out)]


@irdl_op_definition
class GatherOp(GraphOp):
    """ONNX Gather: takes `indices` (negative counts from the end) along `axis`;
    `what` names the indices in the run-time error of one out of range (default:
    the indices input of a Gather)."""

    name = "graph.gather"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    what = opt_attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        index_type = types[1].element_type
        if not isinstance(index_type, IntegerType) or index_type == dtypes.i1:
            raise VerifyException("gather indices must be integers")
        axis = normalize_axis(attrs["axis"], len(shape))
        return [
            tensor(types[0].element_type, shape[:axis] + ishape + shape[axis + 1 :])
        ]


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


@irdl_op_definition
class ConstantOp(GraphOp):
    """A tensor held as bytes in a dense attribute."""

    KERNEL_FREE: ClassVar[bool] = True

    name = "graph.constant"
    value = attr_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())

    @classmethod
    def infer(cls, types, attrs):
        return [attrs["value"].type]

    @staticmethod
    def from_array(array: np.ndarray) -> ConstantOp:
        attr = array_to_dense(array)
        return ConstantOp.create(result_types=[attr.type], attributes={"value": attr})

    def to_array(self) -> np.ndarray:
        return dense_to_array(self.value)

    def drop_all_references(self) -> None:
        """Erasing the op (xDSL calls this) also drops its bytes: an erased op
        lives on in reference cycles until the next garbage collection, which a
        compile makes rare (runner.fewer_collections), and a pass that replaces
        a weight would otherwise hold it twice until then."""
        super().drop_all_references()
        self.attributes.pop("value", None)

    def print(self, printer: Printer) -> None:
        t = self.result.type
        if elides(printer, math.prod(shape_of(t))):
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


def array_to_dense(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """`array` as a dense attribute (its bytes: `weights.storage_of`, shared with
    `array` when it views the whole of a constant's bytes, else copied); what a
    loop.constant takes, with no graph.constant made for it (an unused op lives
    on in reference cycles)."""
    t = tensor(dtypes.from_numpy(array.dtype), array.shape)
    storage = array.astype(np.uint8) if array.dtype == np.bool_ else array
    return DenseIntOrFPElementsAttr(t, BytesAttr(weights.storage_of(storage)))


def dense_to_array(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The dense attribute's bytes as a numpy array (no per-element Python objects)."""
    dtype = dtypes.to_numpy(attr.get_element_type())
    raw = attr.data.data  # bytes, or a WeightBytes (`weights`)
    storage = np.uint8 if dtype == np.bool_ else dtype
    array = np.frombuffer(raw, dtype=storage).reshape(attr.get_shape())
    return array.astype(np.bool_) if dtype == np.bool_ else array
