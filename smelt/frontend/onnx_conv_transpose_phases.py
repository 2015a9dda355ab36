"""ConvTranspose by sub-pixel decomposition: no multiplication by inserted zeros.

With stride s along a dim (dilation 1), output cell o' = t·s + p of the full
(uncropped) output is

    y[t·s + p] = sum over m < M_p of x[t - m] · w[m·s + p],  M_p = ceil((K - p) / s),

so each phase p is a stride-1 correlation of x with the flipped sub-kernel
w[(M_p - 1 - j)·s + p]. When s divides K (every M_p = M = K / s) all s_h·s_w
phases run as one `graph.conv2d` whose output channels are (c_out, p_h, p_w) (the
phases of a group stay in its block of channels); otherwise each phase is its own
conv with its own taps (K = 3, s = 2: 2x2, 2x1, 1x2 and 1x1), the results
concatenated (p_h, p_w, c_out); a phase without taps (s > K) is the bias. Either
way a DepthToSpace-style reshape / transpose / reshape interleaves the phases and a
slice applies the pads, output_padding and output_shape. The convs read x itself
(their pads are the conv's own zero borders) and do the op's own multiply-adds,
c_in·c_out/g·kH·kW per input cell, plus the phase rows that the pads cut in part.
They take the existing conv schedules (NCHW; the NHWC implicit GEMM) and the bias;
an activation after the ConvTranspose follows the interleave, so it is a kernel of
its own (graph-fuse fuses only what directly follows the conv). A dim with stride 1
keeps its dilation in the conv; a dim with both stride and dilation > 1 dilates
the kernel (zero weights: rare).

A 3-D ConvTranspose takes the same phases along the depth: per depth phase, the
sum over its depth taps of 2-D ConvTransposes of depth slices of x (the depth
folded into the batch), interleaved along the depth, cropped, plus the bias.

The weight transform is made of graph ops, so it folds at import when the weight
is a constant and runs as kernels when it is computed.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

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
    spread: int = 1  # the dilation folded into the kernel (stride and dilation > 1)

    @staticmethod
    def of(size: int, k: int, s: int, d: int, lo: int, hi: int, out_pad: int) -> Dim:
        full = (size - 1) * s + (k - 1) * d + 1 + out_pad
        length = full - lo - hi
        kernel = (k - 1) * d + 1 if s > 1 else k
        dilation = d if s == 1 else 1
        t_lo, t_hi = lo // s, (lo + length - 1) // s
        start = lo - t_lo * s
        dim = Dim(s, 0, dilation, kernel, t_lo, t_hi - t_lo + 1, 0, 0, start, length,
                  d if s > 1 else 1)  # fmt: skip
        return dim.with_taps(-(-kernel // s), size)

    def with_taps(self, taps: int, size: int) -> Dim:
        """This dim for a conv of `taps` taps over x of `size` rows."""
        span = (taps - 1) * self.dilation
        before = span - self.t_lo
        after = self.rows + span - size - before
        return replace(self, taps=taps, before=before, after=after)

    def phase_taps(self, p: int) -> int:
        """The real taps of phase p: k = p + m·s < K."""
        if self.stride == 1:
            return self.taps
        real = range(0, self.kernel, self.spread)  # the rest are dilation's zeros
        if not any(k % self.stride == p for k in real):
            return 0
        return max(0, -(-(self.kernel - p) // self.stride))

    @property
    def exact(self) -> bool:
        """Whether every phase has all M taps (the stride divides the kernel)."""
        if self.stride == 1:
            return True
        return self.kernel % self.stride == 0 and self.spread == 1


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
    plus bias b, or None when the pads leave no output or x would be cropped to
    nothing (the caller's zero-insertion form refuses or handles those)."""
    n, c_in, *spatial = shape_of(x)
    _, og, *kernel = shape_of(w)
    c_out = og * group
    dims = [
        Dim.of(spatial[i], kernel[i], strides[i], dilations[i], lo[i], hi[i],
               out_pad[i])
        for i in range(2)
    ]  # fmt: skip
    if any(d.length <= 0 for d in dims) or _cropped_away(dims, spatial):
        return None  # the zero-insertion form names the pads that do this
    sh, sw = dims[0].stride, dims[1].stride
    phases = sh * sw
    weight = _phase_weight(ctx, w, group, dims, dilations)
    rows = [d.rows for d in dims]
    if all(d.exact for d in dims):
        # one conv, output channels (c_out, p_h, p_w)
        bias = ctx.emit(g.ExpandOp, [ctx.reshape(b, (c_out, 1))],
                        shape=[c_out, phases])[0]  # fmt: skip
        bias = ctx.reshape(bias, (c_out * phases,))
        y = _conv(ctx, x, weight, bias, group, dims)
        split = (n, c_out, sh, sw, *rows)
        perm = [0, 1, 4, 2, 5, 3]
    else:
        # one conv per phase, each with its own taps; concatenated (p_h, p_w, c_out)
        parts = []
        for ph, pw in itertools.product(range(sh), range(sw)):
            taps = [dims[0].phase_taps(ph), dims[1].phase_taps(pw)]
            parts.append(_phase(ctx, x, weight, b, group, dims, (ph, pw), taps))
        y = parts[0] if phases == 1 else ctx.emit(g.ConcatOp, parts, axis=1)[0]
        split = (n, sh, sw, c_out, *rows)
        perm = [0, 3, 4, 1, 5, 2]
    if phases > 1:
        y = ctx.reshape(y, split)
        y = ctx.emit(g.TransposeOp, [y], perm=perm)[0]
        rows = [rows[0] * sh, rows[1] * sw]
        y = ctx.reshape(y, (n, c_out, *rows))
    starts = [d.start for d in dims]
    ends = [d.start + d.length for d in dims]
    if starts == [0, 0] and ends == rows:
        return y
    return ctx.emit(
        g.SliceOp,
        [y],
        starts=[0, 0, *starts],
        ends=[n, c_out, *ends],
        steps=[1, 1, 1, 1],
    )[0]


def _conv(
    ctx: NodeContext, x: Value, w: Value, b: Value, group: int, dims: Sequence[Dim]
) -> Value:
    """The stride-1 conv of x (cropped where a pad is negative) by w."""
    x = _crop(ctx, x, dims)
    pads = [max(0, d.before) for d in dims] + [max(0, d.after) for d in dims]
    return ctx.emit(
        g.Conv2dOp,
        [x, w, b],
        strides=[1, 1],
        pads=pads,
        dilations=[d.dilation for d in dims],
        group=group,
        layout="nchw",
    )[0]


def _phase(
    ctx: NodeContext,
    x: Value,
    weight: Value,
    b: Value,
    group: int,
    dims: Sequence[Dim],
    phase: tuple[int, int],
    taps: Sequence[int],
) -> Value:
    """Phase (p_h, p_w) alone: the conv by its real taps (the last `taps` of the
    flipped sub-kernel; channel o·P + p of `weight`), or the bias where it has
    none (a stride larger than the kernel)."""
    n, _, *spatial = shape_of(x)
    c_all, cg, m_h, m_w = shape_of(weight)
    phases = dims[0].stride * dims[1].stride
    c_out = c_all // phases
    own = [d.with_taps(t, size) for d, t, size in zip(dims, taps, spatial)]
    if 0 in taps or _cropped_away(own, spatial):
        rows = [d.rows for d in dims]
        bias = ctx.reshape(b, (1, c_out, 1, 1))
        return ctx.emit(g.ExpandOp, [bias], shape=[n, c_out, *rows])[0]
    first = phase[0] * dims[1].stride + phase[1]
    sub = ctx.emit(
        g.SliceOp,
        [weight],
        starts=[first, 0, m_h - taps[0], m_w - taps[1]],
        ends=[c_all, cg, m_h, m_w],
        steps=[phases, 1, 1, 1],
    )[0]
    return _conv(ctx, x, sub, b, group, own)


def _cropped_away(dims: Sequence[Dim], spatial: Sequence[int]) -> bool:
    """Whether the negative pads of `dims` would leave no row of x."""
    return any(size - max(0, -d.before) - max(0, -d.after) <= 0
               for d, size in zip(dims, spatial))  # fmt: skip


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


def conv_transpose_3d(
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
    """The 3-D ConvTranspose of x (N, C_in, D, H, W): per depth phase p, the sum
    over its depth taps (offset c, kernel index k) of the 2-D ConvTranspose
    (`conv_transpose_2d`) of the depth slices x[t - c] (depth folded into the
    batch) by w[:, :, k]; the phases interleaved along the depth, then the depth
    cropped and the bias added. None where the 2-D form gives None."""
    n, c_in, depth, *_ = shape_of(x)
    _, og, k_d, *_ = shape_of(w)
    c_out = og * group
    dim = Dim.of(depth, k_d, strides[0], dilations[0], lo[0], hi[0], out_pad[0])
    if dim.length <= 0:
        return None
    taps = [_depth_taps(dim, p, k_d, dilations[0]) for p in range(dim.stride)]
    reach = max((c for phase in taps for c, _ in phase), default=0)
    before = max(0, reach - dim.t_lo)
    after = max(0, dim.t_lo + dim.rows - depth)
    dtype = numpy_type_of(x)
    zero = Const(np.zeros((), dtype))
    if before or after:
        pads = [0, 0, before, 0, 0, 0, 0, after, 0, 0]
        x = ctx.emit(g.PadOp, [x, zero], pads=pads, mode="constant")[0]
    x = ctx.emit(g.TransposeOp, [x], perm=[0, 2, 1, 3, 4])[0]  # N, D, C, H, W
    _, padded, _, h, wd = shape_of(x)
    no_bias = Const(np.zeros(c_out, dtype))
    phases = []
    for phase in taps:
        total: Value | None = None
        for c, k in phase:
            first = dim.t_lo - c + before
            window = ctx.emit(
                g.SliceOp,
                [x],
                starts=[0, first, 0, 0, 0],
                ends=[n, first + dim.rows, c_in, h, wd],
                steps=[1] * 5,
            )[0]
            window = ctx.reshape(window, (n * dim.rows, c_in, h, wd))
            tap = ctx.emit(
                g.SliceOp,
                [w],
                starts=[0, 0, k, 0, 0],
                ends=[c_in, og, k + 1, *shape_of(w)[3:]],
                steps=[1] * 5,
            )[0]
            tap = ctx.reshape(tap, (c_in, og, *shape_of(w)[3:]))
            hw = (strides[1:], dilations[1:], out_pad[1:], lo[1:], hi[1:])
            y = conv_transpose_2d(ctx, window, tap, no_bias, group, *hw)
            if y is None:
                return None
            total = y if total is None else ctx.emit(g.AddOp, [total, y])[0]
        phases.append(total)
    out_hw = next(shape_of(p)[2:] for p in phases if p is not None)
    shape = (n, dim.rows, 1, c_out, *out_hw)
    parts = [
        ctx.reshape(p, shape) if p is not None else Const(np.zeros(shape, dtype))
        for p in phases
    ]
    y = parts[0] if len(parts) == 1 else ctx.emit(g.ConcatOp, parts, axis=2)[0]
    y = ctx.reshape(y, (n, dim.rows * dim.stride, c_out, *out_hw))
    if dim.start or dim.length != dim.rows * dim.stride:
        y = ctx.emit(
            g.SliceOp,
            [y],
            starts=[0, dim.start, 0, 0, 0],
            ends=[n, dim.start + dim.length, c_out, *out_hw],
            steps=[1] * 5,
        )[0]
    y = ctx.emit(g.TransposeOp, [y], perm=[0, 2, 1, 3, 4])[0]
    return ctx.emit(g.AddOp, [y, ctx.reshape(b, (c_out, 1, 1, 1))])[0]


def _depth_taps(dim: Dim, p: int, k: int, dilation: int) -> list[tuple[int, int]]:
    """(offset c, kernel index) of the real taps of depth phase p: output row
    t·s + p reads x[t - c]·w[index]."""
    if dim.stride == 1:
        return [(i * dilation, i) for i in range(k)]
    taps = []
    for m in range(dim.phase_taps(p)):
        spread = m * dim.stride + p  # in the dilated kernel
        if spread % dilation == 0 and spread // dilation < k:
            taps.append((m, spread // dilation))
    return taps
