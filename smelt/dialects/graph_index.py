"""Graph dialect: ops driven by run-time indices or positions (gather / scatter by
elements and by index tuples, one-hot, triangular masks, sequence reversal).

Indices are integer tensors computed at run time; negative ones count from the end.
An index out of range is a run-time error (the loop lowering checks every one), never
a read or a write outside a buffer.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import IntegerAttr, IntegerType, StringAttr, TensorType
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects.graph_base import (
    GraphOp,
    Shape,
    normalize_axis,
    same_element_type,
    shape_of,
    tensor,
)

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")

# --- the run-time errors (the compiled run and the reference raise the same) -------


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def axis_index_message(op: str, axis: int, shape, size: int) -> str:
    """The run-time error of an index out of range along one axis."""
    return (
        f"{op} along axis {axis} of a {_dims(shape)} tensor: an index is out of "
        f"range [-{size}, {size}); check the indices input"
    )


def nd_index_message(op: str, dim: int, shape, size: int) -> str:
    """The run-time error of an index tuple component out of range."""
    return (
        f"{op} into a {_dims(shape)} tensor: an index for dim {dim} is out of range "
        f"[-{size}, {size}); check the indices input"
    )


def reverse_message(steps: int) -> str:
    return (
        f"ReverseSequence: a sequence length is out of range [0, {steps}]; check "
        "the sequence_lens input"
    )


# --- ops ----------------------------------------------------------------------------


def _integer_indices(t: TensorType, what: str) -> None:
    index_type = t.element_type
    if not isinstance(index_type, IntegerType) or index_type == dtypes.i1:
        raise VerifyException(f"{what} must be integers")


def _reduction(attrs) -> str:
    reduction = attrs.get("reduction", "none")
    if reduction not in SCATTER_REDUCTIONS:
        raise VerifyException(f"unknown scatter reduction {reduction!r}")
    return reduction


@irdl_op_definition
class GatherElementsOp(GraphOp):
    """result[i] = input[i with dim `axis` replaced by indices[i]] (ONNX
    GatherElements); the result has the shape of `indices`."""

    name = "graph.gather_elements"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        _integer_indices(types[1], "gather_elements indices")
        axis = normalize_axis(attrs["axis"], len(shape))
        if len(ishape) != len(shape) or any(
            i > d for a, (i, d) in enumerate(zip(ishape, shape)) if a != axis
        ):
            raise VerifyException(
                f"indices of shape {list(ishape)} do not fit data of shape "
                f"{list(shape)} off axis {axis}"
            )
        return [tensor(types[0].element_type, ishape)]


@irdl_op_definition
class GatherNDOp(GraphOp):
    """ONNX GatherND: the last dim of `indices` (size k) indexes the dims
    batch_dims .. batch_dims + k of `input`; the first batch_dims dims are shared."""

    name = "graph.gather_nd"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    batch_dims = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        _integer_indices(types[1], "gather_nd indices")
        b = attrs["batch_dims"]
        _check_nd(shape, ishape, b)
        k = ishape[-1]
        return [tensor(types[0].element_type, ishape[:-1] + shape[b + k :])]


def _check_nd(shape: Shape, ishape: Shape, b: int) -> None:
    if not ishape or b < 0 or b >= min(len(shape), len(ishape)):
        raise VerifyException(
            f"batch_dims {b} does not fit data rank {len(shape)} and indices rank "
            f"{len(ishape)}"
        )
    if shape[:b] != ishape[:b]:
        raise VerifyException(
            f"the first {b} dims of data {list(shape)} and indices {list(ishape)} "
            "differ"
        )
    if not 1 <= ishape[-1] <= len(shape) - b:
        raise VerifyException(
            f"the last dim of indices ({ishape[-1]}) must be in [1, {len(shape) - b}]"
        )


@irdl_op_definition
class ScatterElementsOp(GraphOp):
    """ONNX ScatterElements: result = input, then for each position i of `indices`,
    result[i with dim `axis` replaced by indices[i]] (op)= updates[i], in order
    (`reduction`: none, add, mul, max, min)."""

    name = "graph.scatter_elements"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    reduction = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        _integer_indices(types[1], "scatter_elements indices")
        _reduction(attrs)
        same_element_type([types[0], types[2]], "scatter data and updates")
        axis = normalize_axis(attrs["axis"], len(shape))
        if shape_of(types[2]) != ishape:
            raise VerifyException("scatter updates must have the shape of indices")
        if len(ishape) != len(shape) or any(
            i > d for a, (i, d) in enumerate(zip(ishape, shape)) if a != axis
        ):
            raise VerifyException(
                f"indices of shape {list(ishape)} do not fit data of shape "
                f"{list(shape)} off axis {axis}"
            )
        return [types[0]]


@irdl_op_definition
class ScatterNDOp(GraphOp):
    """ONNX ScatterND: result = input, then for each index tuple t of `indices`
    (its last dim, size k), result[t] (op)= updates[position of t], in order."""

    name = "graph.scatter_nd"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    reduction = attr_def(StringAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape, ishape = shape_of(types[0]), shape_of(types[1])
        _integer_indices(types[1], "scatter_nd indices")
        _reduction(attrs)
        same_element_type([types[0], types[2]], "scatter data and updates")
        if not ishape or not 1 <= ishape[-1] <= len(shape):
            raise VerifyException(
                f"indices of shape {list(ishape)} do not index data of rank "
                f"{len(shape)}"
            )
        want = ishape[:-1] + shape[ishape[-1] :]
        if shape_of(types[2]) != want:
            raise VerifyException(
                f"scatter_nd updates must have shape {list(want)}, got "
                f"{list(shape_of(types[2]))}"
            )
        return [types[0]]


@irdl_op_definition
class TriluOp(GraphOp):
    """ONNX Trilu on the last two dims: keeps the elements with col - row >= k
    (`upper` = 1) or col - row <= k (`upper` = 0), zeroes the rest; `k` is a
    one-element integer tensor read at run time."""

    name = "graph.trilu"
    input = operand_def(TensorType)
    k = operand_def(TensorType)
    result = result_def(TensorType)
    upper = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        if len(shape_of(types[0])) < 2:
            raise VerifyException("trilu needs a tensor of rank 2 or more")
        k = types[1]
        if k.element_type != dtypes.i64 or math.prod(shape_of(k)) != 1:
            raise VerifyException("trilu's k must be one i64 element")
        return [types[0]]


@irdl_op_definition
class OneHotOp(GraphOp):
    """ONNX OneHot: a new dim of size `depth` at `axis`; values[1] where its
    position equals the index (negative ones count from the end), else values[0]."""

    name = "graph.one_hot"
    indices = operand_def(TensorType)
    values = operand_def(TensorType)
    result = result_def(TensorType)
    depth = attr_def(IntegerAttr)
    axis = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        ishape, depth = shape_of(types[0]), attrs["depth"]
        if math.prod(shape_of(types[1])) != 2:
            raise VerifyException("one_hot values must hold [off, on]")
        if depth < 0:
            raise VerifyException(f"one_hot depth {depth} is negative")
        axis = normalize_axis(attrs["axis"], len(ishape) + 1)
        out = ishape[:axis] + (depth,) + ishape[axis:]
        return [tensor(types[1].element_type, out)]


@irdl_op_definition
class ReverseSequenceOp(GraphOp):
    """ONNX ReverseSequence: along `time_axis`, the first lens[b] elements of each
    batch entry b (along `batch_axis`) are reversed; the rest are copied."""

    name = "graph.reverse_sequence"
    input = operand_def(TensorType)
    lens = operand_def(TensorType)
    result = result_def(TensorType)
    batch_axis = attr_def(IntegerAttr)
    time_axis = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        _integer_indices(types[1], "reverse_sequence lens")
        b, t = attrs["batch_axis"], attrs["time_axis"]
        if len(shape) < 2 or {b, t} != {0, 1}:
            raise VerifyException("reverse_sequence needs axes 0 and 1 of rank >= 2")
        if shape_of(types[1]) != (shape[b],):
            raise VerifyException(
                f"reverse_sequence lens must have shape [{shape[b]}]"
            )
        return [types[0]]

