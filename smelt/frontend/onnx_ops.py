"""ONNX op handlers: each maps one node to graph ops (elementwise, shapes, data
movement); the neural-network ops live in `onnx_nn`.

A handler takes a `NodeContext` and returns the values of the node's outputs, in
order. Axes it emits are normalized (non-negative); attributes that depend on the
opset are read the way that opset defines them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import (
    Const,
    NodeContext,
    Value,
    element_type,
    element_type_of,
    numpy_type_of,
    shape_of,
)

Handler = Callable[[NodeContext], list[Value]]
HANDLERS: dict[str, Handler] = {}


def handles(*op_types: str) -> Callable[[Handler], Handler]:
    """Registers the decorated function as the handler of ONNX `op_types`."""

    def register(fn: Handler) -> Handler:
        for t in op_types:
            HANDLERS[t] = fn
        return fn

    return register


def axis_of(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise SmeltError(f"{ctx.label}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def axes_input(ctx: NodeContext, attr_until: int, index: int = 1) -> list[int] | None:
    """The `axes` of a node: an attribute before opset `attr_until`, then an input."""
    if ctx.opset < attr_until:
        axes = ctx.attr("axes")
    else:
        axes = ctx.const(index, "axes")
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


# --- elementwise ---------------------------------------------------------------------

_UNARY = {
    "Relu": g.ReluOp, "Sigmoid": g.SigmoidOp, "Tanh": g.TanhOp, "Exp": g.ExpOp,
    "Log": g.LogOp, "Erf": g.ErfOp, "Sqrt": g.SqrtOp, "Neg": g.NegOp, "Abs": g.AbsOp,
    "Reciprocal": g.ReciprocalOp, "Floor": g.FloorOp, "Ceil": g.CeilOp,
    "Identity": g.IdentityOp,
}  # fmt: skip
_BINARY = {
    "Add": g.AddOp, "Sub": g.SubOp, "Mul": g.MulOp, "Div": g.DivOp,
    "Equal": g.EqualOp, "Less": g.LessOp, "Greater": g.GreaterOp,
}  # fmt: skip
_VARIADIC = {"Max": g.MaxOp, "Min": g.MinOp, "Sum": g.AddOp}


@handles(*_UNARY)
def _unary(ctx: NodeContext) -> list[Value]:
    return ctx.emit(_UNARY[ctx.node.op_type], [ctx.inputs[0]])


@handles(*_BINARY)
def _binary(ctx: NodeContext) -> list[Value]:
    return ctx.emit(_BINARY[ctx.node.op_type], ctx.inputs[:2])


@handles(*_VARIADIC)
def _variadic(ctx: NodeContext) -> list[Value]:
    cls = _VARIADIC[ctx.node.op_type]
    values = [v for v in ctx.inputs if v is not None]
    return [functools.reduce(lambda a, b: ctx.emit(cls, [a, b])[0], values)]


@handles("Pow")
def _pow(ctx: NodeContext) -> list[Value]:
    base, exp = ctx.inputs[:2]
    bt, et = element_type_of(base), element_type_of(exp)
    if bt == et:
        return ctx.emit(g.PowOp, [base, exp])
    if numpy_type_of(base).kind == "f" or numpy_type_of(exp).kind != "f":
        exp = ctx.emit(g.CastOp, [exp], to=bt)[0]
        return ctx.emit(g.PowOp, [base, exp])
    # An integer base with a float exponent: compute in floats, truncate back.
    base = ctx.emit(g.CastOp, [base], to=et)[0]
    return ctx.emit(g.CastOp, ctx.emit(g.PowOp, [base, exp]), to=bt)


@handles("LeakyRelu")
def _leaky_relu(ctx: NodeContext) -> list[Value]:
    return ctx.emit(
        g.LeakyReluOp, [ctx.inputs[0]], alpha=float(ctx.attr("alpha", 0.01))
    )


@handles("Clip")
def _clip(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    dtype = numpy_type_of(x)
    if dtype.kind == "f":
        lo, hi = dtype.type(-np.inf), dtype.type(np.inf)
    else:
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    if ctx.opset < 11:
        bounds = [
            Const(np.array(ctx.attr(n, d), dtype))
            for n, d in (("min", lo), ("max", hi))
        ]
    else:
        bounds = [
            ctx.input(i) if ctx.input(i) is not None else Const(np.array(d, dtype))
            for i, d in ((1, lo), (2, hi))
        ]
    return ctx.emit(g.ClipOp, [x, *bounds])


@handles("Where")
def _where(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.WhereOp, ctx.inputs[:3])


@handles("Cast")
def _cast(ctx: NodeContext) -> list[Value]:
    to = element_type(ctx.attr("to"), f"{ctx.label}: 'to'")
    return ctx.emit(g.CastOp, [ctx.inputs[0]], to=to)


@handles("Dropout")
def _dropout(ctx: NodeContext) -> list[Value]:
    if ctx.output_used(1):
        raise ctx.unsupported("the mask output of Dropout (training) is not supported")
    training = ctx.const(2, "training_mode") if ctx.opset >= 12 else None
    if training is not None and bool(training.reshape(-1)[0]):
        raise ctx.unsupported("Dropout in training mode is not supported")
    return ctx.emit(g.DropoutOp, [ctx.inputs[0]])


# --- reductions ----------------------------------------------------------------------

_REDUCE = {
    "ReduceSum": (g.ReduceSumOp, 13),
    "ReduceMean": (g.ReduceMeanOp, 18),
    "ReduceMax": (g.ReduceMaxOp, 18),
}


@handles(*_REDUCE)
def _reduce(ctx: NodeContext) -> list[Value]:
    cls, axes_as_input_since = _REDUCE[ctx.node.op_type]
    x = ctx.inputs[0]
    rank = len(shape_of(x))
    axes = axes_input(ctx, axes_as_input_since)
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({axis_of(ctx, a, rank) for a in axes})
    return ctx.emit(cls, [x], axes=axes, keepdims=int(ctx.attr("keepdims", 1)))


@handles("Softmax")
def _softmax(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", 1 if ctx.opset < 13 else -1), len(shape))
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return ctx.emit(g.SoftmaxOp, [x], axis=axis)
    # Before opset 13 the input is coerced to 2-D: dims from `axis` on are one row.
    flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    y = ctx.emit(g.SoftmaxOp, [flat], axis=1)[0]
    return [ctx.reshape(y, shape)]


# --- shapes and data movement --------------------------------------------------------


@handles("Constant")
def _constant(ctx: NodeContext) -> list[Value]:
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):  # fmt: skip
        if name in ctx.attrs:
            return [Const(np.array(ctx.attrs[name], dtype))]
    if "value" not in ctx.attrs:
        raise ctx.unsupported(f"Constant with {sorted(ctx.attrs)} is not supported")
    return [Const(_tensor_value(ctx, ctx.attrs["value"]))]


def _tensor_value(ctx: NodeContext, tensor) -> np.ndarray:
    from onnx import numpy_helper

    element_type(tensor.data_type, f"{ctx.label}: its value")  # supported at all?
    return numpy_helper.to_array(tensor)


@handles("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> list[Value]:
    shape = [int(d) for d in ctx.const(0, "shape").reshape(-1)]
    value = ctx.attrs.get("value")
    fill = _tensor_value(ctx, value).reshape(-1) if value is not None else None
    if fill is None:
        fill = np.zeros(1, np.float32)
    # Repeating the bytes of one element is the fastest way to a big filled
    # buffer, and graph.constant then keeps those very bytes.
    data = fill[:1].tobytes() * math.prod(shape)
    return [Const(np.frombuffer(data, fill.dtype).reshape(shape))]


@handles("Shape")
def _shape(ctx: NodeContext) -> list[Value]:
    shape = shape_of(ctx.inputs[0])
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [Const(np.array(shape[start:end], np.int64))]


def reshape_target(
    ctx: NodeContext, src: Sequence[int], spec: Sequence[int]
) -> list[int]:
    """ONNX Reshape's output shape: 0 copies the input dim (unless allowzero), one -1
    is inferred."""
    allowzero = ctx.attr("allowzero", 0)
    out = [src[i] if d == 0 and not allowzero and i < len(src) else d
           for i, d in enumerate(spec)]  # fmt: skip
    total, known = math.prod(src), math.prod(d for d in out if d != -1)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise SmeltError(f"{ctx.label}: bad target shape {list(spec)}")
    if -1 in out:
        if known == 0 or total % known:
            raise SmeltError(f"{ctx.label}: cannot reshape {list(src)} to {list(spec)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        raise SmeltError(f"{ctx.label}: cannot reshape {list(src)} to {list(spec)}")
    return out


@handles("Reshape")
def _reshape(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    spec = ctx.attr("shape") if ctx.opset < 5 else ctx.const(1, "shape")
    target = reshape_target(ctx, shape_of(x), [int(d) for d in np.reshape(spec, -1)])
    return [ctx.reshape(x, target)]


@handles("Flatten")
def _flatten(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axis = ctx.attr("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise SmeltError(f"{ctx.label}: axis {axis} is out of range")
    axis += len(shape) if axis < 0 else 0
    return [ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@handles("Unsqueeze")
def _unsqueeze(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = list(shape_of(x))
    axes = axes_input(ctx, 13) or []
    rank = len(shape) + len(axes)
    for a in sorted(axis_of(ctx, a, rank) for a in axes):
        shape.insert(a, 1)
    return [ctx.reshape(x, shape)]


@handles("Squeeze")
def _squeeze(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axes = axes_input(ctx, 13)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {axis_of(ctx, a, len(shape)) for a in axes}
        if any(shape[a] != 1 for a in drop):
            raise SmeltError(f"{ctx.label}: cannot squeeze non-1 dims of {list(shape)}")
    return [ctx.reshape(x, [d for i, d in enumerate(shape) if i not in drop])]


@handles("Expand")
def _expand(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    spec = [int(d) for d in ctx.const(1, "shape").reshape(-1)]
    try:
        shape = np.broadcast_shapes(shape_of(x), tuple(spec))
    except ValueError:
        raise SmeltError(
            f"{ctx.label}: cannot expand {shape_of(x)} to {spec}"
        ) from None
    return ctx.emit(g.ExpandOp, [x], shape=list(shape))


@handles("Transpose")
def _transpose(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    rank = len(shape_of(x))
    perm = ctx.attr("perm", list(range(rank))[::-1])
    return ctx.emit(g.TransposeOp, [x], perm=[axis_of(ctx, p, rank) for p in perm])


@handles("Concat")
def _concat(ctx: NodeContext) -> list[Value]:
    values = [v for v in ctx.inputs if v is not None]
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(values[0])))
    return ctx.emit(g.ConcatOp, values, axis=axis)


@handles("Split")
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape))
    n, dim = len(ctx.node.output), shape[axis]
    sizes = ctx.attr("split") if ctx.opset < 13 else ctx.const(1, "split")
    if sizes is not None:
        sizes = [int(s) for s in np.reshape(sizes, -1)]
    elif ctx.attr("num_outputs") is not None:
        n = ctx.attr("num_outputs")
        chunk = -(-dim // n)  # the last chunk is smaller when dim % n != 0
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    elif dim % n == 0:
        sizes = [dim // n] * n
    else:
        raise SmeltError(f"{ctx.label}: cannot split {dim} into {n} equal parts")
    return ctx.emit(g.SplitOp, [x], axis=axis, sizes=sizes)


def slice_bounds(
    ctx: NodeContext, shape: Sequence[int], starts, ends, axes, steps
) -> dict[str, list[int]]:
    """ONNX Slice's starts/ends/axes/steps, normalized for `graph.slice`."""
    rank = len(shape)
    axes = range(rank) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    out = {"starts": [0] * rank, "ends": list(shape), "steps": [1] * rank}
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = axis_of(ctx, int(axis), rank)
        dim, start, end, step = shape[a], int(start), int(end), int(step)
        if step == 0 or a in seen:
            raise SmeltError(f"{ctx.label}: zero step or repeated axis {axis}")
        seen.add(a)
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        out["starts"][a], out["ends"][a], out["steps"][a] = start, end, step
    return out


@handles("Slice")
def _slice(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    if ctx.opset < 10:
        args = [ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None]
    else:
        names = ("starts", "ends", "axes", "steps")
        args = [ctx.const(i + 1, n) for i, n in enumerate(names)]
        args = [None if a is None else a.reshape(-1).tolist() for a in args]
    return ctx.emit(g.SliceOp, [x], **slice_bounds(ctx, shape_of(x), *args))


@handles("Gather")
def _gather(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.inputs[:2]
    axis = axis_of(ctx, ctx.attr("axis", 0), len(shape_of(x)))
    return ctx.emit(g.GatherOp, [x, indices], axis=axis)


@handles("Pad")
def _pad(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    rank, dtype = len(shape), numpy_type_of(x)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.unsupported(f"Pad mode '{mode}' is not supported")
    if ctx.opset < 11:
        pads = list(ctx.attr("pads", ctx.attr("paddings")))
        value: Value = Const(np.array(ctx.attr("value", 0.0), dtype))
    else:
        pads = ctx.const(1, "pads").reshape(-1).tolist()
        given = ctx.input(2)
        value = given if given is not None else Const(np.zeros((), dtype))
        axes = ctx.const(3, "axes") if ctx.opset >= 18 else None
        if axes is not None:
            axes = [axis_of(ctx, int(a), rank) for a in axes.reshape(-1)]
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise SmeltError(f"{ctx.label}: needs {2 * rank} pads, got {len(pads)}")
    if any(p < 0 for p in pads):  # negative pads crop: a slice, then the pad
        bounds = {"starts": [max(-p, 0) for p in pads[:rank]],
                  "ends": [d + min(p, 0) for d, p in zip(shape, pads[rank:])],
                  "steps": [1] * rank}  # fmt: skip
        x = ctx.emit(g.SliceOp, [x], **bounds)[0]
        pads = [max(p, 0) for p in pads]
    return ctx.emit(g.PadOp, [x, value], pads=pads, mode=mode)


from smelt.frontend import onnx_nn  # noqa: F401  (registers the nn handlers)
