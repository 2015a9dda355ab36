"""ONNX handlers of the neural-network ops: convolution, pooling, normalizations and
contractions (listed in `frontend/handlers.py`).

Windowed ops get explicit pads (auto_pad resolved), `layout = "nchw"`, and 1-D
windows are run as 2-D ones of height 1 (reshapes around the 2-D op).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register


def window_attrs(
    ctx: NodeContext, spatial: Sequence[int], kernel: Sequence[int]
) -> dict[str, list[int]]:
    """strides, dilations and explicit pads of a windowed node (auto_pad resolved)."""
    n = len(spatial)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * 2 * n))
    elif auto_pad == "VALID":
        pads = [0] * 2 * n
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * 2 * n
        for i in range(n):
            out = -(-spatial[i] // strides[i])
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (out - 1) * strides[i] + span - spatial[i])
            small = total // 2  # SAME_UPPER puts the odd cell at the end
            lo = small if auto_pad == "SAME_UPPER" else total - small
            pads[i], pads[i + n] = lo, total - lo
    else:
        raise ctx.invalid(
            f"auto_pad '{auto_pad}' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"
        )
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise ctx.invalid(
            f"strides {strides}, dilations {dilations} and pads {pads} must hold "
            f"{n}, {n} and {2 * n} values for its {n} spatial dims"
        )
    return {"strides": strides, "dilations": dilations, "pads": pads}


def check_windows(
    ctx: NodeContext,
    spatial: Sequence[int],
    kernel: Sequence[int],
    attrs: dict[str, list[int]],
    ceil: bool | None,
) -> None:
    """Refuses windows that onnxruntime refuses: a convolution's (`ceil` None)
    dilated kernel larger than its padded input, or a pool's kernel overhanging
    it so far that the output size is negative (`g.pool_out`)."""
    n = len(spatial)
    strides, dilations, pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    for i in range(n):
        args = (spatial[i], kernel[i], strides[i], pads[i], pads[i + n], dilations[i])
        out = g.window_out(*args) if ceil is None else g.pool_out(*args, ceil)
        padded = spatial[i] + pads[i] + pads[i + n]
        span = (kernel[i] - 1) * dilations[i] + 1
        if ceil is None and span > padded:
            raise ctx.invalid(
                f"kernel_shape {list(kernel)} with dilations {dilations} spans "
                f"{span} cells along spatial dim {i}, more than the {padded} of its "
                f"padded input (extent {spatial[i]}, pads {pads}); the dilated "
                "kernel must fit inside the padded input"
            )
        if out < 0:
            raise ctx.invalid(
                f"kernel_shape {list(kernel)} with dilations {dilations} spans "
                f"{span} cells along spatial dim {i}, so far past the {padded} of "
                f"its padded input (extent {spatial[i]}, pads {pads}) that its "
                f"output size would be {out}; the kernel must overhang the padded "
                f"input by less than two strides ({strides})"
            )


def _spatial_rank(ctx: NodeContext, x: Value, most: int | None = 2) -> int:
    """The number of spatial dims of `x`: 1 or 2, or any positive number when
    `most` is None."""
    rank = len(shape_of(x)) - 2
    if rank < 1:
        raise SmeltError(
            f"{ctx.label}: the input needs a spatial dim, got shape {shape_of(x)}"
        )
    if most is not None and rank > most:
        raise ctx.unsupported(
            f"{rank}-D {ctx.node.op_type} is not supported (only 1-D and 2-D)"
        )
    return rank


def _lift(attrs: dict[str, list[int]]) -> dict[str, list[int]]:
    """1-D window attributes as 2-D ones over a height-1 image."""
    out = {k: [1, *v] for k, v in attrs.items() if k != "pads"}
    out["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
    return out


def _as_2d(ctx: NodeContext, v: Value) -> Value:
    n, c, length = shape_of(v)
    return ctx.reshape(v, (n, c, 1, length))


@handles("Conv")
def _conv(ctx: NodeContext) -> list[Value]:
    return [conv(ctx, ctx.inputs[0], ctx.inputs[1], ctx.input(2))]


def conv(ctx: NodeContext, x: Value, w: Value, b: Value | None) -> Value:
    """The 1-D or 2-D convolution of node `ctx` (its window attributes) of x by w
    plus bias b (zeros when None)."""
    rank = _spatial_rank(ctx, x)
    ws = shape_of(w)
    kernel = list(ctx.attr("kernel_shape", ws[2:]))
    if len(ws) != rank + 2 or tuple(kernel) != tuple(ws[2:]):
        raise SmeltError(f"{ctx.label}: weight shape {ws} and kernel_shape disagree")
    if b is None:
        b = Const(np.zeros(ws[0], numpy_type_of(x)))
    attrs = window_attrs(ctx, shape_of(x)[2:], kernel)
    check_windows(ctx, shape_of(x)[2:], kernel, attrs, None)
    if rank == 1:
        x, w, attrs = _as_2d(ctx, x), ctx.reshape(w, (*ws[:2], 1, ws[2])), _lift(attrs)
    y = ctx.emit(
        g.Conv2dOp, [x, w, b], group=int(ctx.attr("group", 1)), layout="nchw", **attrs
    )[0]
    return _drop_height(ctx, y) if rank == 1 else y


def _drop_height(ctx: NodeContext, y: Value) -> Value:
    n, c, _, length = shape_of(y)
    return ctx.reshape(y, (n, c, length))


@handles("MaxPool", "AveragePool")
def _pool(ctx: NodeContext) -> list[Value]:
    """Pools of any number of spatial dims (1-D ones as 2-D of height 1); MaxPool's
    Indices output, when used, makes it a `graph.max_pool_with_indices`."""
    x = ctx.inputs[0]
    rank = _spatial_rank(ctx, x, most=None)
    is_max = ctx.node.op_type == "MaxPool"
    kernel = list(ctx.attr("kernel_shape"))
    if len(kernel) != rank:
        raise SmeltError(f"{ctx.label}: kernel_shape {kernel} does not fit the input")
    attrs = {"kernel_shape": kernel, **window_attrs(ctx, shape_of(x)[2:], kernel)}
    ceil = bool(ctx.attr("ceil_mode", 0))
    check_windows(ctx, shape_of(x)[2:], kernel, attrs, ceil)
    out = g.window_shape(shape_of(x), kernel, attrs, ceil)
    if 0 in out:  # no window at all: empty results, nothing to compute
        shape = (*shape_of(x)[:2], *out)
        empty = [np.zeros(shape, numpy_type_of(x)), np.zeros(shape, np.int64)]
        return [Const(a) for a in empty[: len(ctx.node.output)]]
    if rank == 1:
        x, attrs = _as_2d(ctx, x), _lift(attrs)
    if is_max and ctx.output_used(1):
        # Flat indices of (N, C, 1, L) are those of (N, C, L) in either storage order.
        cls = g.MaxPoolWithIndicesOp
        extra = {"storage_order": ctx.attr("storage_order", 0)}
    elif is_max:
        cls, extra = g.MaxPoolOp, {}
    else:
        cls = g.AveragePoolOp
        extra = {"count_include_pad": ctx.attr("count_include_pad", 0)}
    results = ctx.emit(
        cls, [x], ceil_mode=ctx.attr("ceil_mode", 0), layout="nchw", **attrs, **extra
    )
    return [_drop_height(ctx, r) if rank == 1 else r for r in results]


@handles("GlobalAveragePool")
def _global_average_pool(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.GlobalAveragePoolOp, [ctx.inputs[0]], layout="nchw")


@handles("BatchNormalization")
def _batch_norm(ctx: NodeContext) -> list[Value]:
    if ctx.opset < 9 and ctx.attr("spatial", 1) == 0:
        raise ctx.unsupported("BatchNormalization with spatial = 0 is not supported")
    epsilon = float(ctx.attr("epsilon", 1e-5))
    check_channel_params(ctx, ctx.inputs[0], ctx.inputs[1:5], BN_PARAMS)
    if ctx.opset >= 14 and ctx.attr("training_mode", 0):
        return _batch_norm_training(ctx, epsilon)
    if any(ctx.output_used(i) for i in range(1, 5)):
        raise ctx.unsupported(
            "the training outputs of BatchNormalization are supported only with "
            "training_mode = 1 (opset 14 on)"
        )
    return ctx.emit(g.BatchNormOp, ctx.inputs[:5], epsilon=epsilon)


BN_PARAMS = ("scale", "B", "input_mean", "input_var")


def check_channel_params(
    ctx: NodeContext, x: Value, params: Sequence[Value], names: Sequence[str]
) -> None:
    """Refuses per-channel parameters (BatchNormalization's, InstanceNormalization's)
    whose shape is not (C,) for the channel dim C of `x`."""
    shape = shape_of(x)
    if len(shape) < 2:
        raise ctx.invalid(f"the input needs a channel dim (N, C, ...), got {shape}")
    for name, p in zip(names, params, strict=False):
        if shape_of(p) != (shape[1],):
            raise ctx.invalid(
                f"{name} has shape {list(shape_of(p))}; it must be [{shape[1]}], one "
                f"value per channel of the input {list(shape)}"
            )


def _batch_norm_training(ctx: NodeContext, epsilon: float) -> list[Value]:
    """Training-mode BatchNormalization (opset 14+) from graph ops: the batch mean
    and (biased) variance over every dim but channel dim 1 normalize x, and the
    running statistics become input * momentum + batch * (1 - momentum)."""
    x, scale, bias, running_mean, running_var = ctx.inputs[:5]
    dtype = numpy_type_of(x)
    if any(numpy_type_of(v) != dtype for v in ctx.inputs[1:5]):
        raise ctx.unsupported(
            "training-mode BatchNormalization with mixed element types is not supported"
        )
    shape = shape_of(x)
    if len(shape) < 2:
        raise SmeltError(f"{ctx.label}: the input needs a channel dim, got {shape}")
    channels = shape[1]
    axes = [0, *range(2, len(shape))]

    def reduce_mean(v: Value) -> Value:
        return ctx.emit(g.ReduceMeanOp, [v], axes=axes, keepdims=1)[0]

    def scalar(value: float) -> Const:
        return Const(np.array(value, dtype))

    mean = reduce_mean(x)  # (1, C, 1, ...)
    centered = ctx.emit(g.SubOp, [x, mean])[0]
    var = reduce_mean(ctx.emit(g.MulOp, [centered, centered])[0])
    batch_mean = ctx.reshape(mean, (channels,))
    batch_var = ctx.reshape(var, (channels,))
    y = ctx.emit(
        g.BatchNormOp, [x, scale, bias, batch_mean, batch_var], epsilon=epsilon
    )[0]
    momentum = float(ctx.attr("momentum", 0.9))

    def running(old: Value, batch: Value) -> Value:
        kept = ctx.emit(g.MulOp, [old, scalar(momentum)])[0]
        new = ctx.emit(g.MulOp, [batch, scalar(1 - momentum)])[0]
        return ctx.emit(g.AddOp, [kept, new])[0]

    return [y, running(running_mean, batch_mean), running(running_var, batch_var)]


@handles("LRN")
def _lrn(ctx: NodeContext) -> list[Value]:
    return ctx.emit(
        g.LrnOp,
        [ctx.inputs[0]],
        size=int(ctx.attr("size")),
        alpha=float(ctx.attr("alpha", 1e-4)),
        beta=float(ctx.attr("beta", 0.75)),
        bias=float(ctx.attr("bias", 1.0)),
    )


@handles("LayerNormalization")
def _layer_norm(ctx: NodeContext) -> list[Value]:
    x, scale = ctx.inputs[:2]
    bias = ctx.input(2)
    if bias is None:
        bias = Const(np.zeros(shape_of(scale), numpy_type_of(scale)))
    axis = axis_of(ctx, ctx.attr("axis", -1), len(shape_of(x)))
    shape = shape_of(x)
    for name, p in (("Scale", scale), ("B", bias)):
        if not _broadcasts_to(shape_of(p), shape):
            raise ctx.invalid(
                f"{name} has shape {list(shape_of(p))}; it must be X.shape[axis:] = "
                f"{list(shape[axis:])} (axis {axis}) or broadcast to X's shape "
                f"{list(shape)}"
            )
    epsilon = float(ctx.attr("epsilon", 1e-5))
    results = ctx.emit(g.LayerNormOp, [x, scale, bias], axis=axis, epsilon=epsilon)
    return results[: len(ctx.node.output)]


def _broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether numpy broadcasts `shape` to `target` without growing `target`
    (symbolic dims too)."""
    try:
        return g.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except VerifyException:
        return False


@handles("MatMul")
def _matmul(ctx: NodeContext) -> list[Value]:
    return ctx.emit(g.MatMulOp, ctx.inputs[:2])


@handles("Gemm")
def _gemm(ctx: NodeContext) -> list[Value]:
    a, b = ctx.inputs[:2]
    c = ctx.input(2)
    if c is None:
        c = Const(np.zeros((), numpy_type_of(a)))
    return ctx.emit(
        g.GemmOp,
        [a, b, c],
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)),
        trans_a=int(ctx.attr("transA", 0)),
        trans_b=int(ctx.attr("transB", 0)),
    )
