"""ONNX control flow: If with a condition known at compile time is replaced by its
chosen branch; Loop with a constant trip count and no data-dependent exit, and
Scan (opset 9 on) over a static sequence length, become `graph.loop` (a loop in the
compiled code, frontend/onnx_loop.py); a short one that cannot (a condition that
depends on the iteration number, a carried value that grows, a body node that
needs the iteration number at compile time), and Scan-8, are unrolled into graph
ops (at most MAX_UNROLL iterations). Anything else is refused, naming the reason:
smelt compiles one static graph."""

from __future__ import annotations

import numpy as np
import onnx

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import _POISON, Const, NodeContext, Value, shape_of
from smelt.frontend.onnx_loop import NotALoop, as_loop
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

MAX_UNROLL = 64  # iterations a Loop or Scan is unrolled into at most


def _fix_hint(ctx: NodeContext, v: Value) -> str:
    names = ctx.importer.inputs_behind(v)
    if not names:
        return "fix the model inputs it depends on with constants="
    fixes = ", ".join(f"'{n}': value" for n in names)
    flags = " ".join(f"--constant {n}=VALUE" for n in names)
    return (
        f"it depends on input(s) {', '.join(names)}: fix them with "
        f"constants={{{fixes}}} ({flags} on the command line)"
    )


@handles("If")
def _if(ctx: NodeContext) -> list[Value]:
    cond = ctx.inputs[0]
    if not isinstance(cond, Const):
        raise ctx.unsupported(
            "its condition is computed at run time; smelt compiles one static "
            "graph, so it must choose the branch at compile time: "
            + _fix_hint(ctx, cond)
        )
    if cond.array.size != 1:
        raise SmeltError(
            f"{ctx.label}: its condition must hold one element, it has shape "
            f"{list(cond.array.shape)}"
        )
    taken = bool(cond.array.reshape(-1)[0])
    branch = ctx.attr("then_branch" if taken else "else_branch")
    outputs = ctx.importer.inline(branch, [], ctx.node, ctx.label, ctx.opset)
    if len(outputs) != len(ctx.node.output):
        raise SmeltError(
            f"{ctx.label}: its {'then' if taken else 'else'} branch has "
            f"{len(outputs)} outputs, the node {len(ctx.node.output)}"
        )
    return outputs


def _tensor_body(ctx: NodeContext, body: onnx.GraphProto, first: int) -> None:
    """Refuses a body whose carried values (inputs from `first` on) are not
    tensors: smelt imports tensors only."""
    for i in body.input[first:]:
        kind = i.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):
            raise ctx.unsupported(
                f"its body carries '{i.name}' of {kind.replace('_', ' ')}; only "
                "tensors can be carried"
            )


def _too_long(ctx: NodeContext, n: int, what: str) -> SmeltError:
    return ctx.unsupported(
        f"its {what} is {n}; smelt unrolls loops of at most {MAX_UNROLL} iterations "
        "at import (only a Loop with a constant trip count, or a Scan of opset 9 "
        "or later, becomes a loop in the compiled code)"
    )


def _stack(ctx: NodeContext, values: list[Value], axis: int) -> Value:
    """`values` (of one shape) stacked along a new axis `axis`."""
    shape = list(shape_of(values[0]))
    axis = axis_of(ctx, axis, len(shape) + 1)
    rows = [ctx.reshape(v, shape[:axis] + [1] + shape[axis:]) for v in values]
    if len(rows) == 1:
        return rows[0]
    return ctx.emit(g.ConcatOp, rows, axis=axis)[0]


def _take(ctx: NodeContext, x: Value, index: int, axis: int) -> Value:
    """Slice `index` of `x` along `axis`, the axis dropped."""
    shape = list(shape_of(x))
    starts, ends = [0] * len(shape), list(shape)
    starts[axis], ends[axis] = index, index + 1
    row = ctx.emit(g.SliceOp, [x], starts=starts, ends=ends, steps=[1] * len(shape))
    return ctx.reshape(row[0], shape[:axis] + shape[axis + 1 :])


def _scalar(ctx: NodeContext, i: int, what: str) -> Const | None:
    v = ctx.input(i)
    if v is None:
        return None
    if not isinstance(v, Const):
        raise ctx.unsupported(
            f"its {what} is computed at run time; smelt compiles a Loop whose "
            "iteration count is known at compile time: " + _fix_hint(ctx, v)
        )
    if v.array.size != 1:
        raise SmeltError(f"{ctx.label}: its {what} must hold one element")
    return v


@handles("Loop")
def _loop(ctx: NodeContext) -> list[Value]:
    body: onnx.GraphProto = ctx.attr("body")
    trip = _scalar(ctx, 0, "trip count M")
    cond = _scalar(ctx, 1, "condition")
    carried = list(ctx.inputs[2:])
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    if n_scan < 0 or len(body.input) != 2 + n_carried:
        raise SmeltError(
            f"{ctx.label}: its body has {len(body.input)} inputs and "
            f"{len(body.output)} outputs for {n_carried} carried values"
        )
    _tensor_body(ctx, body, 2)
    limit = None if trip is None else int(trip.array.reshape(-1)[0])
    going = True if cond is None else bool(cond.array.reshape(-1)[0])
    if limit is None and cond is None:
        raise ctx.unsupported("it has neither a trip count nor a condition")
    if limit is not None and limit >= 1 and going:
        try:
            return as_loop(ctx, body, carried, limit)
        except NotALoop as why:
            if limit > MAX_UNROLL:
                raise ctx.unsupported(
                    f"it cannot be compiled as a loop: {why}; and its trip count "
                    f"{limit} is too many iterations to unroll at import (at most "
                    f"{MAX_UNROLL})"
                ) from None
            # a short loop is unrolled: its iterations may fold what a loop cannot
    scans: list[list[Value]] = [[] for _ in range(n_scan)]
    i = 0
    while going and (limit is None or i < limit):
        if i >= MAX_UNROLL:
            raise _too_long(ctx, i + 1, "iteration count (at least)")
        counter = Const(np.array(i, np.int64))
        outputs = ctx.importer.inline(
            body, [counter, Const(np.array(True)), *carried], ctx.node, ctx.label,
            ctx.opset,
        )
        if any(v is _POISON for v in outputs):
            return [_POISON] * len(ctx.node.output)  # the body's problem is recorded
        going = outputs[0]
        if not isinstance(going, Const):
            raise ctx.unsupported(
                "its body computes its continue condition from run-time values (a "
                "data-dependent exit); smelt compiles one static graph and can "
                "only unroll a loop whose iteration count is known at compile time"
            )
        going = bool(going.array.reshape(-1)[0])
        carried = outputs[1 : 1 + n_carried]
        for k, v in enumerate(outputs[1 + n_carried :]):
            scans[k].append(v)
        i += 1
    if n_scan and i == 0:
        raise ctx.unsupported(
            "it runs no iteration but has scan outputs, whose shape only the body "
            "would tell"
        )
    return carried + [_stack(ctx, values, 0) for values in scans]


@handles("Scan")
def _scan(ctx: NodeContext) -> list[Value]:
    body: onnx.GraphProto = ctx.attr("body")
    n_in = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:
        return _scan8(ctx, body, n_in)
    states, xs = list(ctx.inputs[: len(ctx.inputs) - n_in]), ctx.inputs[-n_in:]
    n_out = len(body.output) - len(states)
    in_axes = ctx.attr("scan_input_axes") or [0] * n_in
    in_dirs = ctx.attr("scan_input_directions") or [0] * n_in
    out_axes = ctx.attr("scan_output_axes") or [0] * n_out
    out_dirs = ctx.attr("scan_output_directions") or [0] * n_out
    if n_out < 0 or len(in_axes) != n_in or len(in_dirs) != n_in:
        raise SmeltError(f"{ctx.label}: its attributes do not fit its inputs")
    if len(out_axes) != n_out or len(out_dirs) != n_out:
        raise SmeltError(f"{ctx.label}: its attributes do not fit its body's outputs")
    in_axes = [axis_of(ctx, a, len(shape_of(x))) for a, x in zip(in_axes, xs)]
    steps = {shape_of(x)[a] for x, a in zip(xs, in_axes)}
    if len(steps) == 1 and min(steps) >= 1 and len(body.output) >= len(states):
        try:
            return _scan_loop(
                ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs
            )
        except NotALoop as why:
            if min(steps) > MAX_UNROLL:
                raise ctx.unsupported(
                    f"it cannot be compiled as a loop: {why}; and its sequence "
                    f"length {min(steps)} is too long to unroll at import (at most "
                    f"{MAX_UNROLL})"
                ) from None
    return _scan_steps(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)


def _scan_loop(
    ctx: NodeContext,
    body: onnx.GraphProto,
    states: list[Value],
    xs: list[Value],
    in_axes: list[int],
    in_dirs: list[int],
    out_axes: list[int],
    out_dirs: list[int],
) -> list[Value]:
    """Scan as `graph.loop`: iteration t gathers element t (or steps-1-t) of each
    scan input; each scan output is then reversed and moved to its axis."""
    _tensor_body(ctx, body, 0)
    steps = shape_of(xs[0])[in_axes[0]]

    def bind(counter: Value, state: list[Value]) -> list[Value]:
        back = None
        slices = []
        for x, axis, reverse in zip(xs, in_axes, in_dirs):
            index = counter
            if reverse:
                if back is None:
                    last = Const(np.array(steps - 1, np.int64))
                    back = ctx.emit(g.SubOp, [last, counter])[0]
                index = back
            slices.append(ctx.emit(g.GatherOp, [x, index], axis=axis)[0])
        return [*state, *slices]

    results = as_loop(ctx, body, states, steps, bind)
    finals, stacked = results[: len(states)], results[len(states) :]
    outs = []
    for v, axis, reverse in zip(stacked, out_axes, out_dirs):
        if reverse:
            order = Const(np.arange(steps - 1, -1, -1, dtype=np.int64))
            v = ctx.emit(g.GatherOp, [v, order], axis=0)[0]
        rank = len(shape_of(v))
        axis = axis_of(ctx, axis, rank)
        if axis:
            perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
            v = ctx.emit(g.TransposeOp, [v], perm=perm)[0]
        outs.append(v)
    return finals + outs


def _scan_steps(
    ctx: NodeContext,
    body: onnx.GraphProto,
    states: list[Value],
    xs: list[Value],
    in_axes: list[int],
    in_dirs: list[int],
    out_axes: list[int],
    out_dirs: list[int],
) -> list[Value]:
    """Scan's iterations unrolled: final states, then the stacked scan outputs."""
    _tensor_body(ctx, body, 0)
    lengths = {shape_of(x)[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise SmeltError(
            f"{ctx.label}: its scan inputs have different sequence lengths "
            f"{sorted(lengths)}"
        )
    (steps,) = lengths
    if steps > MAX_UNROLL:
        raise _too_long(ctx, steps, "sequence length")
    if steps == 0 and out_axes:
        raise ctx.unsupported(
            "its sequence is empty: its scan outputs' shape is unknown"
        )
    outs: list[list[Value]] = [[] for _ in out_axes]
    for t in range(steps):
        slices = [
            _take(ctx, x, steps - 1 - t if d else t, a)
            for x, a, d in zip(xs, in_axes, in_dirs)
        ]
        results = ctx.importer.inline(
            body, [*states, *slices], ctx.node, ctx.label, ctx.opset
        )
        if any(v is _POISON for v in results):
            return [_POISON] * len(ctx.node.output)
        states = results[: len(states)]
        for k, v in enumerate(results[len(states) :]):
            outs[k].append(v)
    stacked = [
        _stack(ctx, values[::-1] if d else values, a)
        for values, a, d in zip(outs, out_axes, out_dirs)
    ]
    return states + stacked


def _scan8(ctx: NodeContext, body: onnx.GraphProto, n_in: int) -> list[Value]:
    """Scan-8: inputs are batched (axis 0) and scanned along axis 1; each batch
    row is scanned on its own, the results stacked along axis 0."""
    lens = ctx.input(0)
    rest = list(ctx.inputs[1:])
    states, xs = rest[: len(rest) - n_in], rest[len(rest) - n_in :]
    if lens is not None:
        if not isinstance(lens, Const):
            raise ctx.unsupported(
                "its sequence_lens is computed at run time; smelt needs them known "
                "at compile time: " + _fix_hint(ctx, lens)
            )
        full = {shape_of(x)[1] for x in xs}
        if set(lens.array.reshape(-1).tolist()) - full:
            raise ctx.unsupported(
                "its sequence_lens are shorter than the sequences; only full-length "
                "sequences are supported"
            )
    n_out = len(body.output) - len(states)
    dirs = ctx.attr("directions") or [0] * n_in
    batch = {shape_of(v)[0] for v in states + xs}
    if len(batch) != 1:
        raise SmeltError(f"{ctx.label}: its inputs have different batch sizes")
    rows: list[list[Value]] = []
    for b in range(batch.pop()):
        results = _scan_steps(
            ctx,
            body,
            [_take(ctx, s, b, 0) for s in states],
            [_take(ctx, x, b, 0) for x in xs],
            [0] * n_in,
            dirs,
            [0] * n_out,
            [0] * n_out,
        )
        if any(v is _POISON for v in results):
            return [_POISON] * len(ctx.node.output)
        rows.append(results)
    return [_stack(ctx, list(column), 0) for column in zip(*rows)]
