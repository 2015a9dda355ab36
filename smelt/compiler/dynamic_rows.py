"""Which graph ops a run-time batch admits (issue 34): a rule, not an op list.

`compile_dynamic` runs each kernel's batch-1 body once per batch row, which is
right exactly when every computed value leads with the batch (static dims after
it) and every op computes row b of its results from row b of the operands that
carry the batch (the others: constants, broadcast to every row). The first part
is read off the types. The second holds for any op that treats its leading
axis as a batch (elementwise ops, Conv, pools, BatchNorm, MatMul over a
constant or batched right side, Reshape / Flatten, which keep the per-row size:
it is static and the rows lead) unless one of its attributes names axis 0 of an
operand that carries the batch: an `axis` (Softmax, Concat, Split, Gather,
LayerNorm, TopK, CumSum, ...), `axes` (the reductions; none given = all), a
Transpose's `perm` that moves axis 0, a Slice that does not take axis 0 whole.
A few ops mix rows whatever their attributes (recurrences, whose time axis is
axis 0 of the scan; Loop; GatherND / ScatterND without batch dims; a Gemm that
transposes its batch-carrying side or takes the batch on its right; a Trilu
whose matrix rows are the batch: what it keeps depends on the row's index) and
are refused with the reason.
"""

from __future__ import annotations

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, TensorType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import locations
from smelt.dialects.graph_base import shape_of
from smelt.dialects.symbolic import sym
from smelt.errors import UnsupportedModel

MIXING = {
    "graph.lstm_scan": "a recurrence: each step reads the state of the one before",
    "graph.gru_scan": "a recurrence: each step reads the state of the one before",
    "graph.rnn_scan": "a recurrence: each step reads the state of the one before",
    "graph.loop": "a loop body is not checked row by row",
    "graph.fused": "a fused region is not checked row by row",
}
"""Ops refused whatever their operands: why each may mix rows."""


def _where(op: Operation) -> str:
    nodes = ", ".join(locations.names(op)) or "?"
    return f"{op.name} (ONNX node {nodes})"


def _carries(value: SSAValue, dim: str) -> bool:
    t = value.type
    if not isinstance(t, TensorType):
        return False
    shape = shape_of(value)
    return bool(shape) and shape[0] == sym(dim)


def _ints(attr: object) -> list[int] | None:
    if isinstance(attr, IntegerAttr):
        return [attr.value.data]
    if isinstance(attr, DenseArrayBase):
        return [int(x) for x in attr.get_values()]
    return None


def _why_mixing(op: Operation, dim: str) -> str | None:
    """Why `op` may read other rows than its own, or None (row-local)."""
    if op.name in MIXING:
        return MIXING[op.name]
    if not op.operands:
        return None
    first = op.operands[0]
    if op.name == "graph.gemm":
        if _carries(op.operands[1], dim):
            return f"its right side carries '{dim}' (a product over the rows)"
        if op.trans_a.value.data and _carries(first, dim):  # type: ignore[attr-defined]
            return f"transA=1 contracts over '{dim}'"
        return None
    if op.name == "graph.matmul":
        rhs = op.operands[1]
        if _carries(rhs, dim) and len(shape_of(rhs)) < 3:
            return f"its right side carries '{dim}' as the contracted axis"
        return None
    if op.name in ("graph.conv2d", "graph.conv_transpose2d"):
        if any(_carries(v, dim) for v in op.operands[1:]):
            return f"its weight or bias carries '{dim}'"
        return None
    if op.name in ("graph.gather_nd", "graph.scatter_nd"):
        batch_dims = _ints(op.attributes.get("batch_dims"))
        if _carries(first, dim) and not (batch_dims and batch_dims[0] >= 1):
            return f"its indices address the '{dim}' axis"
        return None
    if op.name == "graph.trilu" and _carries(first, dim) and len(shape_of(first)) == 2:
        return f"which elements it keeps depends on the row's index along '{dim}'"
    if op.name == "graph.reverse_sequence":
        if op.batch_axis.value.data != 0:  # type: ignore[attr-defined]
            return f"batch_axis is not the '{dim}' axis"
        return None
    if not _carries(first, dim):  # the attributes below speak of operand 0's axes
        return None
    rank = len(shape_of(first))
    axis = _ints(op.attributes.get("axis"))
    if axis is not None:
        out_rank = rank + (1 if op.name == "graph.one_hot" else 0)
        if axis[0] % max(out_rank, 1) == 0:
            return f"axis={axis[0]} is the '{dim}' axis"
    axes = op.attributes.get("axes")
    if axes is not None:
        listed = _ints(axes) or []
        if not listed or any(a % rank == 0 for a in listed):
            return f"axes={listed or 'all'} take in the '{dim}' axis"
    perm = _ints(op.attributes.get("perm"))
    if perm is not None and perm[0] != 0:
        return f"perm={perm} moves the '{dim}' axis"
    if op.name == "graph.slice":
        starts, steps = _ints(op.starts), _ints(op.steps)  # type: ignore[attr-defined]
        if starts and steps and (starts[0] != 0 or steps[0] != 1):
            return f"it slices the '{dim}' axis"
    return None


def check_row_local(op: Operation, dim: str) -> None:
    """Refuses (naming the op and why) what may read other rows than its own."""
    if op.name == "graph.constant":
        return
    where = _where(op)
    for r in op.results:
        t = r.type
        shape = shape_of(r) if isinstance(t, TensorType) else ()
        if (
            not shape
            or shape[0] != sym(dim)
            or any(not isinstance(d, int) for d in shape[1:])
        ):
            raise UnsupportedModel(
                f"{where} gives {t}: with a run-time '{dim}' every computed value "
                f"must lead with '{dim}' and have static dims after it"
            )
    why = _why_mixing(op, dim)
    if why is not None:
        raise UnsupportedModel(
            f"{where} mixes rows of the run-time '{dim}' ({why}): not supported "
            f"with a run-time '{dim}'; fix '{dim}' with input_shapes= instead"
        )
