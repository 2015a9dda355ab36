"""ConvTranspose by sub-pixel decomposition: no multiplication by inserted zeros.

With stride s along a dim (dilation 1), output cell o' = t·s + p of the full
(uncropped) output is

    y[t·s + p] = sum over m < M of x[t - m] · w[m·s + p],   M = ceil(K / s),

w zero-padded to M·s taps: each phase p is a stride-1 correlation of x with the
flipped sub-kernel w[(M - 1 - j)·s + p]. All s_h·s_w phases run as one
`graph.conv2d` whose output channels are (c_out, p_h, p_w) (the phases of a group
stay in its block of channels), so the existing conv schedules (NCHW, the NHWC
implicit GEMM) and the bias / activation fusion apply; a DepthToSpace-style
reshape / transpose / reshape interleaves the phases and a slice applies the pads
and output_padding. The conv reads x itself (its pads are in-kernel zero borders),
and does (c_out·s_h·s_w)·(c_in/g)·M_h·M_w multiply-adds per input-sized output
cell: the op's own count when s divides K; with K = 3, s = 2 the sub-kernels are
zero-padded from 2 and 1 taps to 2 (9 → 16 products per four outputs, where zero
insertion did 36). A dim with stride 1 keeps its dilation in the conv; a dim with
both stride and dilation > 1 dilates the kernel (zero weights, rare).

The weight transform is made of graph ops, so it folds at import when the weight
is a constant and runs as kernels when it is computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of


@dataclass(frozen=True)
class Dim:
    """One spatial dim of the decomposition."""

    stride: int  # phases
    taps: int  # M: sub-kernel taps per phase
    dilation: int  # of the conv: the ConvTranspose's when stride is 1, else 1
    kernel: int  # K of the (dilated, when stride > 1) kernel
    t_lo: int  # the first phase row (t) the output needs
    rows: int  # U: phase rows computed
    before: int  # conv pads of x (negative: x cropped)
    after: int
    start: int  # the slice of the interleaved rows that is the output
    length: int

    @staticmethod
    def of(size: int, k: int, s: int, d: int, lo: int, hi: int, out_pad: int) -> Dim:
        full = (size - 1) * s + (k - 1) * d + 1 + out_pad
        length = full - lo - hi
        kernel = (k - 1) * d + 1 if s > 1 else k
        taps = -(-kernel // s)
        dilation = d if s == 1 else 1
        t_lo, t_hi = lo // s, (lo + length - 1) // s
        rows = t_hi - t_lo + 1
        span = (taps - 1) * dilation
        before = span - t_lo
        after = rows + span - size - before
        start = lo - t_lo * s
        return Dim(s, taps, dilation, kernel, t_lo, rows, before, after, start, length)


def conv_transpose_2d(
    ctx: NodeContext,
    x: Value,
    w: Value,
    b: Value,
    group: int,
    strides: Sequence[int],
    dilations: Sequence[int],
    out_pad: Sequence[int],
    lo: Sequence[int],
    hi: Sequence[int],
) -> Value | None:
    """The 2-D ConvTranspose of x (N, C_in, H, W) by w (C_in, C_out / g, kH, kW)
    plus bias b, or None when x would be cropped to nothing (the caller's
    zero-insertion form handles that corner)."""
    n, c_in, *spatial = shape_of(x)
    _, og, *kernel = shape_of(w)
    dims = [
        Dim.of(spatial[i], kernel[i], strides[i], dilations[i], lo[i], hi[i],
               out_pad[i])
        for i in range(2)
    ]  # fmt: skip
    if any(size - max(0, -d.before) - max(0, -d.after) <= 0
           for d, size in zip(dims, spatial)):  # fmt: skip
        return None
    x = _crop(ctx, x, dims)
    phases = dims[0].stride * dims[1].stride
    weight = _phase_weight(ctx, w, group, dims, dilations)
    bias = ctx.emit(g.ExpandOp, [ctx.reshape(b, (og * group, 1))],
                    shape=[og * group, phases])[0]  # fmt: skip
    bias = ctx.reshape(bias, (og * group * phases,))
    pads = [max(0, d.before) for d in dims] + [max(0, d.after) for d in dims]
    y = ctx.emit(
        g.Conv2dOp,
        [x, weight, bias],
        strides=[1, 1],
        pads=pads,
        dilations=[d.dilation for d in dims],
        group=group,
        layout="nchw",
    )[0]
    rows = [d.rows for d in dims]
    if phases > 1:
        sh, sw = dims[0].stride, dims[1].stride
        y = ctx.reshape(y, (n, og * group, sh, sw, *rows))
        y = ctx.emit(g.TransposeOp, [y], perm=[0, 1, 4, 2, 5, 3])[0]
        rows = [rows[0] * sh, rows[1] * sw]
        y = ctx.reshape(y, (n, og * group, *rows))
    starts = [d.start for d in dims]
    ends = [d.start + d.length for d in dims]
    if starts == [0, 0] and ends == rows:
        return y
    return ctx.emit(
        g.SliceOp,
        [y],
        starts=[0, 0, *starts],
        ends=[n, og * group, *ends],
        steps=[1, 1, 1, 1],
    )[0]


def _crop(ctx: NodeContext, x: Value, dims: Sequence[Dim]) -> Value:
    """x without the rows that negative conv pads would remove."""
    if all(d.before >= 0 and d.after >= 0 for d in dims):
        return x
    shape = shape_of(x)
    starts = [0, 0] + [max(0, -d.before) for d in dims]
    ends = list(shape[:2]) + [s + min(0, d.after) for s, d in zip(shape[2:], dims)]
    return ctx.emit(g.SliceOp, [x], starts=starts, ends=ends, steps=[1] * 4)[0]


def _phase_weight(
    ctx: NodeContext,
    w: Value,
    group: int,
    dims: Sequence[Dim],
    dilations: Sequence[int],
) -> Value:
    """ConvTranspose weight (C_in, C_out / g, kH, kW) as the conv weight
    (C_out·s_h·s_w, C_in / g, M_h, M_w): channel (o·s_h + p_h)·s_w + p_w holds
    phase (p_h, p_w) of output channel o, tap j at w[(M - 1 - j)·s + p]."""
    c_in, og, *kernel = shape_of(w)
    zero = Const(np.zeros((), numpy_type_of(w)))
    for axis, (d, k, dil) in enumerate(zip(dims, kernel, dilations), start=2):
        if d.stride > 1 and dil > 1:
            w = _dilate_axis(ctx, w, axis, k, dil)
        pad = d.taps * d.stride - d.kernel
        if pad:
            pads = [0] * 8
            pads[4 + axis] = pad
            w = ctx.emit(g.PadOp, [w, zero], pads=pads, mode="constant")[0]
    shape = shape_of(w)
    split = (group, c_in // group, og, dims[0].taps, dims[0].stride,
             dims[1].taps, dims[1].stride)  # fmt: skip
    assert shape[2] == split[3] * split[4] and shape[3] == split[5] * split[6]
    w = ctx.reshape(w, split)
    # flip the taps: j = M - 1 - m
    w = ctx.emit(
        g.SliceOp,
        [w],
        starts=[0, 0, 0, split[3] - 1, 0, split[5] - 1, 0],
        ends=[split[0], split[1], split[2], -1, split[4], -1, split[6]],
        steps=[1, 1, 1, -1, 1, -1, 1],
    )[0]
    # (g, C_in/g, og, M_h, s_h, M_w, s_w) -> (g, og, s_h, s_w, C_in/g, M_h, M_w)
    w = ctx.emit(g.TransposeOp, [w], perm=[0, 2, 4, 6, 1, 3, 5])[0]
    phases = split[4] * split[6]
    return ctx.reshape(w, (group * og * phases, split[1], split[3], split[5]))


def _dilate_axis(ctx: NodeContext, w: Value, axis: int, k: int, d: int) -> Value:
    """w with d - 1 zero taps between neighbouring taps along `axis`."""
    shape = list(shape_of(w))
    zero = Const(np.zeros((), numpy_type_of(w)))
    split = shape[: axis + 1] + [1] + shape[axis + 1 :]
    w = ctx.reshape(w, split)
    pads = [0] * (2 * len(split))
    pads[len(split) + axis + 1] = d - 1
    w = ctx.emit(g.PadOp, [w, zero], pads=pads, mode="constant")[0]
    shape[axis] = k * d
    w = ctx.reshape(w, shape)
    ends = list(shape)
    ends[axis] = (k - 1) * d + 1
    return ctx.emit(
        g.SliceOp, [w], starts=[0] * len(shape), ends=ends, steps=[1] * len(shape)
    )[0]
