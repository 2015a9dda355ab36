"""Graph dialect: ops that sweep one axis carrying state: arg-reductions, cumulative
sums and products, top-k."""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, TensorType, i64
from xdsl.irdl import attr_def, irdl_op_definition, operand_def, result_def
from xdsl.utils.exceptions import VerifyException

from smelt.dialects.graph_base import GraphOp, normalize_axis, shape_of, tensor


class ArgReduceOp(GraphOp):
    """The i64 position of the extreme along `axis`: the first one, or the last when
    `select_last_index` = 1; a NaN counts as the extreme (numpy's argmax/argmin).
    `axis` is kept as size 1 when keepdims = 1."""

    ANCHOR: ClassVar[str | None] = "reduction"

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    keepdims = attr_def(IntegerAttr)
    select_last_index = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape = shape_of(types[0])
        axis = normalize_axis(attrs["axis"], len(shape))
        if shape and shape[axis] == 0:
            raise VerifyException("an arg-reduction needs a non-empty axis")
        out = [
            1 if i == axis else d
            for i, d in enumerate(shape)
            if attrs["keepdims"] or i != axis
        ]
        return [tensor(i64, out)]


@irdl_op_definition
class ArgMaxOp(ArgReduceOp):
    name = "graph.arg_max"


@irdl_op_definition
class ArgMinOp(ArgReduceOp):
    name = "graph.arg_min"


class CumulativeOp(GraphOp):
    """Running sum / product along `axis`; `exclusive` = 1 leaves the element itself
    out (the first gets the identity), `reverse` = 1 runs from the end."""

    ANCHOR: ClassVar[str | None] = "reduction"

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    exclusive = attr_def(IntegerAttr)
    reverse = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        normalize_axis(attrs["axis"], len(shape_of(types[0])))
        return [types[0]]


@irdl_op_definition
class CumSumOp(CumulativeOp):
    name = "graph.cum_sum"


@irdl_op_definition
class CumProdOp(CumulativeOp):
    name = "graph.cum_prod"


@irdl_op_definition
class TopKOp(GraphOp):
    """The `k` largest (smallest when largest = 0) elements along `axis`, in order
    (best first; equal values by increasing position), and their i64 positions."""

    ANCHOR: ClassVar[str | None] = "reduction"

    name = "graph.top_k"
    input = operand_def(TensorType)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    axis = attr_def(IntegerAttr)
    k = attr_def(IntegerAttr)
    largest = attr_def(IntegerAttr)

    @classmethod
    def infer(cls, types, attrs):
        shape = list(shape_of(types[0]))
        axis = normalize_axis(attrs["axis"], len(shape))
        k = attrs["k"]
        if not 0 <= k <= shape[axis]:
            raise VerifyException(f"k = {k} is not within [0, {shape[axis]}]")
        shape[axis] = k
        return [tensor(types[0].element_type, shape), tensor(i64, shape)]
