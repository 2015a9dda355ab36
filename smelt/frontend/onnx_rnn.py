"""ONNX LSTM, GRU and RNN as graph ops: the input projection of every time step
(X * W^T plus the biases) as one `graph.matmul`, then the time loop as one
`graph.lstm_scan` / `graph.gru_scan` / `graph.rnn_scan`; layout 1 by transposes."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import AnyFloat, DenseArrayBase, f32

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import (
    Const,
    NodeContext,
    Value,
    element_type_of,
    numpy_type_of,
    shape_of,
)
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

# op type -> (graph op, gates, default activations of one direction)
_CELLS: dict[str, tuple[type[g.RecurrenceOp], int, tuple[str, ...]]] = {
    "LSTM": (g.LstmScanOp, 4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (g.GruScanOp, 3, ("Sigmoid", "Tanh")),
    "RNN": (g.RnnScanOp, 1, ("Tanh",)),
}
_CANONICAL = {name.lower(): name for name in g.ACTIVATIONS}


def _check(ctx: NodeContext, what: str, v: Value, want: tuple[int, ...]) -> None:
    if shape_of(v) != want:
        raise SmeltError(
            f"{ctx.label}: {what} has shape {list(shape_of(v))}, expected {list(want)}"
        )


def _transpose(ctx: NodeContext, v: Value, perm: list[int]) -> Value:
    return ctx.emit(g.TransposeOp, [v], perm=perm)[0]


def _slice(ctx: NodeContext, v: Value, lo: int, hi: int) -> Value:
    """v[:, lo:hi] of a rank-2 value."""
    d = shape_of(v)[0]
    return ctx.emit(g.SliceOp, [v], starts=[0, lo], ends=[d, hi], steps=[1, 1])[0]


def _functions(ctx: NodeContext, defaults: tuple[str, ...], d: int) -> dict:
    """The activations, alphas and betas attributes of the graph op (one entry per
    function per direction, parameters consumed in order by the functions that
    take them, ONNX's own defaults for the rest)."""
    given = ctx.attr("activations")
    names = (
        [n.decode() if isinstance(n, bytes) else n for n in given]
        if given
        else list(defaults) * d
    )
    if len(names) == len(defaults) and d == 2:
        names = names * 2
    if len(names) != len(defaults) * d:
        raise SmeltError(
            f"{ctx.label}: {len(names)} activations given, {len(defaults) * d} needed "
            f"({len(defaults)} per direction)"
        )
    for n in names:
        if n.lower() not in _CANONICAL:
            raise ctx.unsupported(f"activation '{n}' is not an ONNX RNN activation")
    names = [_CANONICAL[n.lower()] for n in names]
    alpha_list = list(ctx.attr("activation_alpha", []) or [])
    beta_list = list(ctx.attr("activation_beta", []) or [])
    alphas, betas = [], []
    for n in names:
        alpha, beta = g.ACTIVATIONS[n]
        if alpha is not None and alpha_list:
            alpha = alpha_list.pop(0)
        if beta is not None and beta_list:
            beta = beta_list.pop(0)
        alphas.append(0.0 if alpha is None else float(alpha))
        betas.append(0.0 if beta is None else float(beta))
    return {
        "activations": " ".join(names),
        "alphas": DenseArrayBase.from_list(f32, alphas),
        "betas": DenseArrayBase.from_list(f32, betas),
    }


def _seq_lens(ctx: NodeContext, steps: int, batch: int) -> Value | None:
    """The sequence_lens input when it may stop a batch entry early; None when it is
    absent or a constant equal to the sequence length everywhere."""
    lens = ctx.input(4)
    if lens is None:
        return None
    _check(ctx, "sequence_lens", lens, (batch,))
    if numpy_type_of(lens) != np.int32:
        raise SmeltError(f"{ctx.label}: sequence_lens must be int32")
    if isinstance(lens, Const):
        if (lens.array < 0).any() or (lens.array > steps).any():
            raise SmeltError(
                f"{ctx.label}: sequence_lens {lens.array.tolist()} must lie in "
                f"[0, {steps}]"
            )
        if (lens.array == steps).all():
            return None
    return lens


def _state(
    ctx: NodeContext, i: int, what: str, shape: tuple[int, int, int], layout: int
) -> Value:
    """Input i ([D, B, H], or [B, D, H] in layout 1) as [D, B, H]; zeros if absent."""
    v = ctx.input(i)
    if v is None:
        return Const(np.zeros(shape, numpy_type_of(ctx.inputs[0])))
    d, b, h = shape
    _check(ctx, what, v, (b, d, h) if layout else shape)
    return _transpose(ctx, v, [1, 0, 2]) if layout else v


@handles(*_CELLS)
def _recurrent(ctx: NodeContext) -> list[Value]:
    cls, gates, defaults = _CELLS[ctx.node.op_type]
    x, w, r = ctx.inputs[:3]
    if not isinstance(element_type_of(x), AnyFloat):
        raise SmeltError(f"{ctx.label}: X must be a float tensor")
    direction = ctx.attr("direction", "forward")
    if direction not in g.DIRECTIONS:
        raise SmeltError(f"{ctx.label}: unknown direction '{direction}'")
    d = g.DIRECTIONS[direction]
    layout = int(ctx.attr("layout", 0))
    if len(shape_of(x)) != 3:
        raise SmeltError(f"{ctx.label}: X must have rank 3, got {list(shape_of(x))}")
    if layout:
        x = _transpose(ctx, x, [1, 0, 2])
    steps, batch, width = shape_of(x)
    hidden = int(ctx.attr("hidden_size", 0)) or shape_of(r)[-1]
    gh = gates * hidden
    _check(ctx, "W", w, (d, gh, width))
    _check(ctx, "R", r, (d, gh, hidden))
    # Every step's input projection at once: [1, S*B, I] x [D, I, G*H].
    flat = ctx.reshape(x, (1, steps * batch, width))
    xw = ctx.emit(g.MatMulOp, [flat, _transpose(ctx, w, [0, 2, 1])])[0]
    dtype = numpy_type_of(x)
    rbh: Value = Const(np.zeros((d, hidden), dtype))
    bias = ctx.input(3)
    if bias is not None:
        _check(ctx, "B", bias, (d, 2 * gh))
        wb, rb = _slice(ctx, bias, 0, gh), _slice(ctx, bias, gh, 2 * gh)
        if cls is g.GruScanOp:  # Rbh goes to the scan, the others to the projection
            rbh = _slice(ctx, rb, 2 * hidden, gh)
            zeros = Const(np.zeros((d, hidden), dtype))
            rb_zr = _slice(ctx, rb, 0, 2 * hidden)
            rb = ctx.emit(g.ConcatOp, [rb_zr, zeros], axis=1)[0]
        total = ctx.emit(g.AddOp, [wb, rb])[0]
        xw = ctx.emit(g.AddOp, [xw, ctx.reshape(total, (d, 1, gh))])[0]
    xw = ctx.reshape(xw, (d, steps, batch, gh))
    state = (d, batch, hidden)
    h0 = _state(ctx, 5, "initial_h", state, layout)
    operands = [xw, _transpose(ctx, r, [0, 2, 1]), h0]
    attrs = {"direction": direction, **_functions(ctx, defaults, d)}
    clip = ctx.attr("clip")
    if clip is not None:
        attrs["clip"] = float(clip)
    if cls is g.LstmScanOp:
        operands.append(_state(ctx, 6, "initial_c", state, layout))
        p = ctx.input(7)
        if p is None:
            p = Const(np.zeros((d, 3 * hidden), dtype))
        _check(ctx, "P", p, (d, 3 * hidden))
        operands.append(p)
        attrs["input_forget"] = int(ctx.attr("input_forget", 0))
    elif cls is g.GruScanOp:
        operands.append(rbh)
        attrs["linear_before_reset"] = int(ctx.attr("linear_before_reset", 0))
    lens = _seq_lens(ctx, steps, batch)
    if lens is not None:
        operands.append(lens)
    results = ctx.emit(cls, operands, **attrs)
    if layout:  # Y [S, D, B, H] -> [B, S, D, H]; Y_h, Y_c [D, B, H] -> [B, D, H]
        results = [
            _transpose(ctx, v, [2, 0, 1, 3] if i == 0 else [1, 0, 2])
            if ctx.output_used(i)
            else v
            for i, v in enumerate(results)
        ]
    return results
