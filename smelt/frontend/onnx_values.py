"""What the ONNX importer's node handlers work with: `Const` (a value known at
import), `Value` (a Const or an SSA value of the graph being built), the
`NodeContext` of one node, and the type helpers that see both kinds of value."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.dialects.symbolic import SymbolicDimError
from smelt.errors import InvalidModel, SmeltError, UnsupportedModel

if TYPE_CHECKING:
    from smelt.frontend.onnx import _Importer as Importer


class Unsupported(UnsupportedModel):
    """A node that uses an op or a feature smelt cannot import."""


class Const:
    """A value known at import: a numpy array, made a `graph.constant` on first use."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.asarray(array)
        self.ssa: SSAValue | None = None
        try:
            dtypes.from_numpy(self.array.dtype)
        except SmeltError:
            raise Unsupported(
                f"element type {self.array.dtype} is not supported"
            ) from None

    @property
    def type(self) -> TensorType:
        return g.tensor(dtypes.from_numpy(self.array.dtype), self.array.shape)


class DimArray:
    """An integer array known at import whose entries are ints and symbolic dims
    (`Shape` of a tensor with symbolic dims; `onnx_dims` folds the shape
    arithmetic on it). It is never run-time data: an op that would read it at
    run time is refused."""

    def __init__(self, array: np.ndarray, dtype: np.dtype = np.dtype(np.int64)):
        self.array = np.asarray(array, dtype=object)
        self.dtype = np.dtype(dtype)

    @property
    def type(self) -> TensorType:
        return g.tensor(dtypes.from_numpy(self.dtype), self.array.shape)

    def text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.array.reshape(-1)) + "]"

    def refusal(self, what: str) -> SymbolicDimError:
        return SymbolicDimError(
            f"the shape value {self.text()} holds symbolic dims, and {what}; fix "
            "them with input_shapes="
        )


Value = SSAValue | Const | DimArray


def element_type(onnx_type: int, what: str) -> Attribute:
    """The element type of ONNX tensor type `onnx_type` (SmeltError if none)."""
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(onnx_type)
    except (KeyError, ValueError, TypeError):
        np_dtype = None
    valid = onnx_type in onnx.TensorProto.DataType.values()
    name = onnx.TensorProto.DataType.Name(onnx_type) if valid else str(onnx_type)
    if np_dtype is None or np_dtype == np.dtype(object):
        raise Unsupported(f"{what}: element type {name} is not supported")
    try:
        return dtypes.from_numpy(np_dtype)
    except SmeltError:
        raise Unsupported(f"{what}: element type {name} is not supported") from None


class NodeContext:
    """What a handler sees of one node: its inputs, attributes and an emitter."""

    def __init__(
        self,
        importer: Importer,
        node: onnx.NodeProto,
        label: str,
        inputs: list,
        opset: int,
    ) -> None:
        self.importer, self.node, self.label = importer, node, label
        self.inputs: list[Value | None] = inputs
        self.opset = opset
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def attr(self, name: str, default: Any = None) -> Any:
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def input(self, i: int) -> Value | None:
        """Input `i`, or None when it is absent (optional inputs)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int, what: str) -> np.ndarray | None:
        """Input `i` as an array; it must be known at import (None when absent)."""
        v = self.input(i)
        if v is None:
            return None
        if isinstance(v, DimArray):  # int() of a symbolic entry refuses by name
            return v.array
        if not isinstance(v, Const):
            raise SmeltError(
                f"{self.label}: its {what} (input {i} '{self.node.input[i]}') must be "
                "a constant, but it is computed from the model inputs"
            )
        return v.array

    def check_size(self, shape: Sequence[int], dtype: np.dtype) -> None:
        """Refuses a constant of `shape` and `dtype` that the handler is about to
        make when it would not fit the memory limit (ResourceLimit)."""
        if any(d < 0 for d in shape):
            raise self.invalid(
                f"its result would have shape {list(shape)}; dims must be >= 0"
            )
        nbytes = np.dtype(dtype).itemsize * math.prod(shape)
        self.importer.check_bytes(nbytes, f"{list(shape)} {np.dtype(dtype).name}")

    def output_used(self, i: int) -> bool:
        return i < len(self.node.output) and self.node.output[i] in self.importer.used

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"{self.label}: {what}")

    def invalid(self, what: str) -> InvalidModel:
        """The error for a node that breaks its op's rules (an attribute or an
        input shape that onnxruntime refuses too): `what` names the attribute and
        says what is expected."""
        return InvalidModel(f"{self.label}: {what}")

    def emit(
        self,
        cls: type[g.GraphOp],
        operands: Sequence[Value],
        result_types: Sequence[TensorType] | None = None,
        **attrs: Any,
    ) -> list[Value]:
        """The results of graph op `cls`: folded when all operands are constants.
        A result shape with a negative dim is refused here, naming the node (an
        attribute that does not fit its input)."""
        results = self.importer.emit(cls, operands, result_types, **attrs)
        for v in results:
            shape = shape_of(v)
            if any(d < 0 for d in shape):
                inputs = ", ".join(str(list(shape_of(x))) for x in operands)
                raise SmeltError(
                    f"{self.label}: its result would have shape {list(shape)}; do "
                    f"its attributes fit its input shapes ({inputs})?"
                )
        return results

    def reshape(self, v: Value, shape: Sequence[int]) -> Value:
        return self.emit(g.ReshapeOp, [v], [g.tensor(element_type_of(v), shape)])[0]


def shape_of(v: Value) -> tuple[int, ...]:
    if isinstance(v, Const | DimArray):
        return tuple(v.array.shape)
    return g.shape_of(v)


def element_type_of(v: Value) -> Attribute:
    if isinstance(v, Const | DimArray):
        return v.type.element_type
    return g.element_type_of(v)


def numpy_type_of(v: Value) -> np.dtype:
    if isinstance(v, DimArray):
        return v.dtype
    return (
        v.array.dtype if isinstance(v, Const) else dtypes.to_numpy(v.type.element_type)
    )
