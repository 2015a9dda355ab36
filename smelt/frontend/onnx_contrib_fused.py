"""The com.microsoft ops of onnxruntime's session optimizer (what a model saved
with `optimized_model_filepath` at ORT_ENABLE_EXTENDED holds) as graph ops:
FusedConv (Conv, + Z, then an activation), FusedGemm (Gemm, then an
activation) and QuickGelu (x * sigmoid(alpha * x)). Activations onnxruntime
fuses that these do not cover are refused naming the node and the value."""

from __future__ import annotations

import numpy as np

from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.frontend.onnx_contrib import MS, float_input
from smelt.frontend.onnx_nn import conv
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py


def handles(*ops: str):
    return HANDLERS.register(*(MS + op for op in ops))


# activation -> how many parameters it reads, and their defaults
ACTIVATIONS = {
    "": (), "Relu": (), "Sigmoid": (), "Tanh": (), "LeakyRelu": (0.01,),
    "Clip": (float("-inf"), float("inf")), "HardSigmoid": (0.2, 0.5),
}  # fmt: skip


def activation(ctx: NodeContext, x: Value, kind: str, params: list[float]) -> Value:
    """`kind` (onnxruntime's fused activation) of x with `params`."""
    if kind not in ACTIVATIONS:
        raise ctx.unsupported(
            f"attribute 'activation' = '{kind}' is not supported (smelt imports "
            f"{', '.join(k for k in ACTIVATIONS if k)})"
        )
    defaults = ACTIVATIONS[kind]
    values = [*params[: len(defaults)], *defaults[len(params) :]]
    m = Arith(ctx, numpy_type_of(x))
    if kind == "Relu":
        return m.op(g.ReluOp, x)
    if kind in ("Sigmoid", "Tanh"):
        return m.op(g.SigmoidOp if kind == "Sigmoid" else g.TanhOp, x)
    if kind == "LeakyRelu":
        return ctx.emit(g.LeakyReluOp, [x], alpha=float(values[0]))[0]
    if kind == "Clip":
        return m.clip(x, values[0], values[1])
    if kind == "HardSigmoid":
        return m.clip(m.add(m.mul(x, values[0]), values[1]), 0.0, 1.0)
    return x


@handles("FusedConv")
def _fused_conv(ctx: NodeContext) -> list[Value]:
    """activation(Conv(X, W, B) + Z); the parameters in activation_params."""
    x, w = ctx.inputs[:2]
    float_input(ctx, x, "X")
    y = conv(ctx, x, w, ctx.input(2))
    z = ctx.input(3)
    if z is not None:
        if tuple(shape_of(z)) != tuple(shape_of(y)):
            raise ctx.invalid(
                f"its Z has shape {list(shape_of(z))}; it must be the convolution's "
                f"{list(shape_of(y))}"
            )
        y = ctx.emit(g.AddOp, [y, z])[0]
    params = [float(p) for p in ctx.attr("activation_params", [])]
    return [activation(ctx, y, ctx.attr("activation", ""), params)]


@handles("FusedGemm")
def _fused_gemm(ctx: NodeContext) -> list[Value]:
    """activation(Gemm(A, B, C)); the parameters in activation_alpha / _beta
    (LeakyRelu's alpha also as leaky_relu_alpha)."""
    a, b = ctx.inputs[:2]
    dtype = float_input(ctx, a, "A")
    c = ctx.input(2)
    if c is None:
        c = Const(np.zeros((), dtype))
    y = ctx.emit(
        g.GemmOp,
        [a, b, c],
        alpha=float(ctx.attr("alpha", 1.0)),
        beta=float(ctx.attr("beta", 1.0)),
        trans_a=int(ctx.attr("transA", 0)),
        trans_b=int(ctx.attr("transB", 0)),
    )[0]
    kind = ctx.attr("activation", "")
    if kind == "Clip":
        raise ctx.unsupported("attribute 'activation' = 'Clip' is not supported")
    first = ctx.attr("activation_alpha", ctx.attr("leaky_relu_alpha"))
    params = [p for p in (first, ctx.attr("activation_beta")) if p is not None]
    if ctx.attr("activation_beta") is not None and first is None:
        params = [ACTIVATIONS.get(kind, (0.0,))[0], ctx.attr("activation_beta")]
    return [activation(ctx, y, kind, [float(p) for p in params])]


@handles("QuickGelu")
def _quick_gelu(ctx: NodeContext) -> list[Value]:
    """x * sigmoid(alpha * x), alpha 1.702 by default."""
    x = ctx.inputs[0]
    m = Arith(ctx, float_input(ctx, x))
    alpha = float(ctx.attr("alpha", 1.702))
    return [m.mul(x, m.op(g.SigmoidOp, m.mul(x, alpha)))]
