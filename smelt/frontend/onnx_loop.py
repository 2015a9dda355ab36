"""ONNX Loop as `graph.loop`: the body imported once into the op's region, run
`trip_count` times by the compiled code (not unrolled). Used by the Loop handler
(frontend/onnx_control.py) when the trip count is a constant, the loop starts
running and the body's continue condition folds to true; otherwise it says why,
and the handler unrolls a short loop or refuses."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from xdsl.dialects.builtin import TensorType, i64
from xdsl.ir import Block, BlockArgument, OpResult, Region, SSAValue

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.errors import ResourceLimit
from smelt.frontend.onnx import _POISON, Const, NodeContext, Value
from smelt.targets.memory import describe_limit, gib, resolve_limit


class NotALoop(Exception):
    """Why a Loop node cannot be `graph.loop` (the handler may unroll it)."""


def _type_name(v: Value) -> str:
    t = v.type
    return f"{list(g.shape_of(t))} {t.element_type}"


Bind = Callable[[SSAValue, list[SSAValue]], list[Value]]


def as_loop(
    ctx: NodeContext,
    body: onnx.GraphProto,
    carried: list[Value],
    trips: int,
    bind: Bind | None = None,
) -> list[Value]:
    """The results of `graph.loop` running `body` `trips` (>= 1) times over the
    carried values `carried`; NotALoop when the body does not fit (a run-time
    condition, a carried value that changes shape, a body node that needs the
    iteration number at compile time). Nothing stays recorded then.

    Without `bind`, `body` is a Loop body (inputs: iteration number, condition,
    carried values; outputs: condition, carried values, scan elements). With it,
    bind(iteration number, carried values) gives the body's inputs (emitting the
    graph ops that compute them) and the body has no condition output (Scan)."""
    imp = ctx.importer
    outer = imp.block
    marks = len(imp.unsupported), len(imp.errors), len(imp.dynamic)
    block = Block(arg_types=[g.tensor(i64, ()), *(v.type for v in carried)])
    counter, *state = block.args
    imp.block = block
    imp.loop_counters[counter] = trips
    try:
        if bind is None:
            bindings = [counter, Const(np.array(True)), *state]
        else:
            bindings = bind(counter, state)
        outputs = imp.inline(body, bindings, ctx.node, ctx.label, ctx.opset)
        problems = _problems_since(imp, marks)
        if problems or any(v is _POISON for v in outputs):
            raise NotALoop(
                "a node of its body cannot be compiled inside a loop, where the "
                "iteration number and the carried values are run-time values ("
                + "; ".join(problems)
                + ")"
            )
        if bind is None:
            _check_condition(outputs[0])
            outputs = outputs[1:]
        first = 2 if bind is None else 0
        n = len(carried)
        for i, (before, after) in enumerate(zip(carried, outputs[:n])):
            if before.type != after.type:
                raise NotALoop(
                    f"its carried value {i} ('{body.input[first + i].name}') changes "
                    f"from "
                    f"{_type_name(before)} to {_type_name(after)} in an iteration; "
                    "a loop needs it to keep its shape"
                )
        yielded = [imp.materialize(v) for v in outputs]
        block.add_op(g.YieldOp.create(operands=yielded))
    except BaseException:
        imp.block = outer
        del imp.loop_counters[counter]
        _forget(imp, block, marks)
        raise
    imp.block = outer
    del imp.loop_counters[counter]
    _release_constants(imp, block)
    invariants = _close_over(block)
    inits = [imp.materialize(v) for v in carried]
    scans = [
        g.tensor(t.element_type, (trips, *t.get_shape()))
        for t in (v.type for v in yielded[n:])
    ]
    _check_scan_sizes(ctx, scans)
    result_types = [v.type for v in carried] + scans
    op = g.LoopOp.create(
        operands=[*inits, *invariants],
        result_types=result_types,
        attributes={
            "trip_count": g.to_attr(trips),
            "carried": g.to_attr(n),
        },
        regions=[Region(block)],
    )
    op.location = imp.location
    op.verify()
    outer.add_op(op)
    return list(op.results)


def _check_scan_sizes(ctx: NodeContext, scans: list[TensorType]) -> None:
    """A ResourceLimit when the scan outputs would not fit the memory limit (an
    endless loop, trip count 2**63 - 1, that stacks a scan output)."""
    nbytes = sum(
        dtypes.byte_size(t.element_type) * math.prod(t.get_shape()) for t in scans
    )
    limit = resolve_limit(ctx.importer.memory_limit)
    if limit and nbytes > limit:
        raise ResourceLimit(
            f"{ctx.label}: its scan outputs ({', '.join(str(t) for t in scans[:2])}) "
            f"would take {gib(nbytes)}, more than "
            f"{describe_limit(ctx.importer.memory_limit)}"
        )


def _check_condition(cond: Value) -> None:
    if not isinstance(cond, Const):
        raise NotALoop(
            "its body computes its continue condition at run time (a "
            "data-dependent exit, or one that depends on the iteration number)"
        )
    if cond.array.size != 1:
        raise NotALoop("its body's condition output does not hold one element")
    if not bool(cond.array.reshape(-1)[0]):
        raise NotALoop("its body stops it after the first iteration")


def _problems_since(imp, marks: tuple[int, int, int]) -> list[str]:  # noqa: ANN001
    u, e, d = marks
    return imp.unsupported[u:] + imp.errors[e:] + imp.dynamic[d:]


def _forget(imp, block: Block, marks: tuple[int, int, int]) -> None:  # noqa: ANN001
    """Undoes a failed attempt: its problems and the constants it materialized."""
    u, e, d = marks
    del imp.unsupported[u:], imp.errors[e:], imp.dynamic[d:]
    _release_constants(imp, block)
    for op in reversed(list(block.ops)):  # outer values lose these uses
        op.drop_all_references()


def _release_constants(imp, block: Block) -> None:  # noqa: ANN001
    """Constants first used inside the body were materialized there: outside it,
    the importer must make them anew."""
    inside = {
        op.result for op in block.ops if isinstance(op, g.ConstantOp)
    }
    if not inside:
        return
    for v in imp.values.values():
        if isinstance(v, Const) and v.ssa in inside:
            v.ssa = None


def _defined_in(v: SSAValue, block: Block) -> bool:
    if isinstance(v, BlockArgument):
        return v.block is block
    assert isinstance(v, OpResult)
    return v.op.parent_block() is block


def _close_over(block: Block) -> list[SSAValue]:
    """Makes the body isolated: outer constants are copied in, every other outer
    value becomes a new block argument. Returns those outer values in order."""
    replacements: dict[SSAValue, SSAValue] = {}
    invariants: list[SSAValue] = []
    first = block.first_op
    for op in list(block.ops):
        operands = list(op.operands)
        for i, v in enumerate(operands):
            if _defined_in(v, block):
                continue
            if v not in replacements:
                owner = v.owner
                if isinstance(owner, g.ConstantOp):
                    copy = owner.clone()
                    block.insert_op_before(copy, first)  # type: ignore[arg-type]
                    replacements[v] = copy.result
                else:
                    replacements[v] = block.insert_arg(v.type, len(block.args))
                    invariants.append(v)
            operands[i] = replacements[v]
        if operands != list(op.operands):
            op.operands = operands
    return invariants
