"""ONNX ConvTranspose as graph ops, by sub-pixel decomposition
(onnx_conv_transpose_phases.py: convs over the input itself, no inserted zeros;
1-D as 2-D of height 1, 3-D as depth phases of 2-D ones). Only the corner where
that form would crop the input to nothing, or the pads leave no output (refused
here, naming the pads), takes the older form: a `graph.conv2d` over the input
with zeros inserted between its cells (the stride), padded by the kernel span less
the pads, with the weight's channels swapped per group and its kernel flipped:

    y[o] = sum over i, k with o + pad_lo = i * stride + k * dilation of x[i] * w[k]

is, with x' = x with stride - 1 zeros between cells and k' = K - 1 - k, a plain
correlation of x' (padded by (K - 1) * dilation - pad_lo before, the same less
pad_hi plus output_padding after) with the flipped kernel. 1-D runs as 2-D of
height 1; 3-D as a sum over the kernel depth of 2-D convs with the depth folded
into the batch. The weight transform folds at import when the weight is constant.

Col2Im, the scatter-add half of a transposed convolution, is a sum over the block
offsets of the input's columns for that offset, spread by the strides (`_dilate`)
and placed at the offset times the dilation (a slice and a pad).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_conv_transpose_phases import (
    conv_transpose_2d,
    conv_transpose_3d,
)
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register


def transpose_pads(
    ctx: NodeContext, spatial: Sequence[int], kernel: Sequence[int]
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(strides, dilations, output_padding, pads_lo, pads_hi) of a ConvTranspose,
    with auto_pad and output_shape resolved as the ONNX reference does."""
    n = len(spatial)
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    out_pad = list(ctx.attr("output_padding", [0] * n))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if not len(strides) == len(dilations) == len(out_pad) == n:
        raise SmeltError(
            f"{ctx.label}: strides/dilations/output_padding do not fit {n} dims"
        )
    full = [
        strides[i] * (spatial[i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(n)
    ]
    output_shape = ctx.attr("output_shape")
    if output_shape is not None:
        output_shape = list(output_shape)[-n:]
        if len(output_shape) != n:
            raise SmeltError(f"{ctx.label}: output_shape does not fit {n} dims")
    pads = ctx.attr("pads")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and pads is None:
        if output_shape is None:
            output_shape = [spatial[i] * strides[i] for i in range(n)]
        total = [full[i] - output_shape[i] for i in range(n)]
        half = [t // 2 for t in total]
        if auto_pad == "SAME_UPPER":
            lo, hi = half, [t - h for t, h in zip(total, half)]
        else:
            lo, hi = [t - h for t, h in zip(total, half)], half
        return strides, dilations, out_pad, lo, hi
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise SmeltError(f"{ctx.label}: unknown auto_pad '{auto_pad}'")
    pads = [0] * 2 * n if pads is None or auto_pad == "VALID" else list(pads)
    if len(pads) != 2 * n:
        raise SmeltError(f"{ctx.label}: pads do not fit {n} dims")
    lo, hi = pads[:n], pads[n:]
    if output_shape is not None:
        # The result takes output_shape: cells past the full output are zeros
        # (plus bias), cells short of it are cut at the end.
        hi = [full[i] - lo[i] - output_shape[i] for i in range(n)]
    return strides, dilations, out_pad, lo, hi


@handles("ConvTranspose")
def _conv_transpose(ctx: NodeContext) -> list[Value]:
    x, w = ctx.inputs[:2]
    xs, ws = shape_of(x), shape_of(w)
    rank = len(xs) - 2
    if rank < 1 or len(ws) != len(xs):
        raise SmeltError(f"{ctx.label}: input {xs} and weight {ws} do not fit")
    if rank > 3:
        raise ctx.unsupported(
            f"{rank}-D ConvTranspose is not supported (only 1-D, 2-D and 3-D)"
        )
    group = int(ctx.attr("group", 1))
    kernel = list(ctx.attr("kernel_shape", ws[2:]))
    if tuple(kernel) != tuple(ws[2:]):
        raise SmeltError(f"{ctx.label}: weight shape {ws} and kernel_shape disagree")
    if group < 1 or xs[1] != ws[0] or ws[0] % group:
        raise SmeltError(f"{ctx.label}: {xs[1]} input channels, weight {ws}, group")
    c_out = ws[1] * group
    b = ctx.input(2)
    if b is None:
        b = Const(np.zeros(c_out, numpy_type_of(x)))
    strides, dils, out_pad, lo, hi = transpose_pads(ctx, xs[2:], kernel)
    if rank == 1:
        x = ctx.reshape(x, (xs[0], xs[1], 1, xs[2]))
        w = ctx.reshape(w, (ws[0], ws[1], 1, ws[2]))
        strides, dils, out_pad = [1, *strides], [1, *dils], [0, *out_pad]
        lo, hi, kernel = [0, *lo], [0, *hi], [1, *kernel]
    by_phases = conv_transpose_2d if rank < 3 else conv_transpose_3d
    y = by_phases(ctx, x, w, b, group, strides, dils, out_pad, lo, hi)
    if y is not None:
        if rank == 1:
            n, c, _, length = shape_of(y)
            y = ctx.reshape(y, (n, c, length))
        return [y]
    x = _dilate(ctx, x, strides)
    # Conv pads: the kernel span less the ConvTranspose pads; negative ones cut x'.
    span = [(k - 1) * d for k, d in zip(kernel, dils)]
    before = [span[i] - lo[i] for i in range(len(span))]
    after = [span[i] - hi[i] + out_pad[i] for i in range(len(span))]
    x = _cut(ctx, x, before, after)
    w = _conv_weight(ctx, w, group)
    before, after = [max(0, p) for p in before], [max(0, p) for p in after]
    if rank == 3:
        return [_conv3d(ctx, x, w, b, group, dils, before, after)]
    y = _conv2d(ctx, x, w, b, group, dils, before + after)
    if rank == 1:
        n, c, _, length = shape_of(y)
        y = ctx.reshape(y, (n, c, length))
    return [y]


def _conv2d(
    ctx: NodeContext,
    x: Value,
    w: Value,
    b: Value,
    group: int,
    dilations: Sequence[int],
    pads: Sequence[int],
) -> Value:
    return ctx.emit(
        g.Conv2dOp,
        [x, w, b],
        strides=[1, 1],
        pads=list(pads),
        dilations=list(dilations),
        group=group,
        layout="nchw",
    )[0]


def _conv3d(
    ctx: NodeContext,
    x: Value,
    w: Value,
    b: Value,
    group: int,
    dils: Sequence[int],
    before: Sequence[int],
    after: Sequence[int],
) -> Value:
    """The stride-1 correlation of x (N, C, D, H, W) with w (O, C / g, kD, kH, kW)
    as a sum over kD of 2-D convs, the depth folded into the batch."""
    dtype = numpy_type_of(x)
    zero = Const(np.zeros((), dtype))
    pads = [0, 0, before[0], 0, 0, 0, 0, after[0], 0, 0]
    if before[0] or after[0]:
        x = ctx.emit(g.PadOp, [x, zero], pads=pads, mode="constant")[0]
    n, c, d, h, wd = shape_of(x)
    c_out, c_g, kd, kh, kw = shape_of(w)
    depth = d - (kd - 1) * dils[0]
    x = ctx.emit(g.TransposeOp, [x], perm=[0, 2, 1, 3, 4])[0]  # N, D, C, H, W
    no_bias = Const(np.zeros(c_out, dtype))
    total: Value | None = None
    for k in range(kd):
        first = k * dils[0]
        window = ctx.emit(
            g.SliceOp,
            [x],
            starts=[0, first, 0, 0, 0],
            ends=[n, first + depth, c, h, wd],
            steps=[1] * 5,
        )[0]
        window = ctx.reshape(window, (n * depth, c, h, wd))
        tap = ctx.emit(
            g.SliceOp,
            [w],
            starts=[0, 0, k, 0, 0],
            ends=[c_out, c_g, k + 1, kh, kw],
            steps=[1] * 5,
        )[0]
        tap = ctx.reshape(tap, (c_out, c_g, kh, kw))
        pads = [before[1], before[2], after[1], after[2]]
        y = _conv2d(ctx, window, tap, b if k == 0 else no_bias, group, dils[1:], pads)
        total = y if total is None else ctx.emit(g.AddOp, [total, y])[0]
    _, _, ho, wo = shape_of(total)
    total = ctx.reshape(total, (n, depth, c_out, ho, wo))
    return ctx.emit(g.TransposeOp, [total], perm=[0, 2, 1, 3, 4])[0]


def _dilate(ctx: NodeContext, x: Value, strides: Sequence[int]) -> Value:
    """x (N, C, spatial...) with strides - 1 zeros between neighbouring cells."""
    if all(s == 1 for s in strides):
        return x
    shape = shape_of(x)
    spatial = shape[2:]
    split = [d for size in spatial for d in (size, 1)]
    x = ctx.reshape(x, (*shape[:2], *split))
    zero = Const(np.zeros((), numpy_type_of(x)))
    rank = 2 + len(split)
    ends = [0, 0] + [p for s in strides for p in (0, s - 1)]
    x = ctx.emit(g.PadOp, [x, zero], pads=[0] * rank + ends, mode="constant")[0]
    x = ctx.reshape(x, (*shape[:2], *(d * s for d, s in zip(spatial, strides))))
    ends = [*shape[:2], *((d - 1) * s + 1 for d, s in zip(spatial, strides))]
    return ctx.emit(
        g.SliceOp, [x], starts=[0] * len(ends), ends=ends, steps=[1] * len(ends)
    )[0]


def _cut(
    ctx: NodeContext, x: Value, before: Sequence[int], after: Sequence[int]
) -> Value:
    """x without the cells that negative conv pads would remove."""
    if all(p >= 0 for p in [*before, *after]):
        return x
    shape = shape_of(x)
    starts = [0, 0] + [max(0, -p) for p in before]
    ends = list(shape[:2]) + [d + min(0, p) for d, p in zip(shape[2:], after)]
    if any(e <= s for s, e in zip(starts, ends)):
        raise ctx.invalid(
            f"pads {[*before, *after]} crop its output {list(shape[2:])} to nothing; "
            "negative pads must leave at least one cell along each spatial dim"
        )
    steps = [1] * len(shape)
    return ctx.emit(g.SliceOp, [x], starts=starts, ends=ends, steps=steps)[0]


def _conv_weight(ctx: NodeContext, w: Value, group: int) -> Value:
    """ConvTranspose weight (C_in, C_out / g, k...) as a conv weight
    (C_out, C_in / g, k...) with its kernel flipped."""
    c_in, c_out_g, *kernel = shape_of(w)
    w = ctx.reshape(w, (group, c_in // group, c_out_g, *kernel))
    perm = [0, 2, 1, *range(3, 3 + len(kernel))]
    w = ctx.emit(g.TransposeOp, [w], perm=perm)[0]
    w = ctx.reshape(w, (group * c_out_g, c_in // group, *kernel))
    return ctx.emit(
        g.SliceOp,
        [w],
        starts=[0, 0, *(k - 1 for k in kernel)],
        ends=[group * c_out_g, c_in // group, *(-1 for _ in kernel)],
        steps=[1, 1, *(-1 for _ in kernel)],
    )[0]


def _ints(ctx: NodeContext, i: int, what: str) -> list[int]:
    value = ctx.const(i, f"{what} (it decides the output shape)")
    return [int(v) for v in value.reshape(-1)]


@handles("Col2Im")
def _col2im(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    image, block = _ints(ctx, 1, "image_shape"), _ints(ctx, 2, "block_shape")
    k, shape = len(image), shape_of(x)
    dilations = list(ctx.attr("dilations", [1] * k))
    pads = list(ctx.attr("pads", [0] * 2 * k))
    strides = list(ctx.attr("strides", [1] * k))
    size = math.prod(block)
    if (
        len(shape) != 3 or k == 0 or len(block) != k or len(dilations) != k
        or len(pads) != 2 * k or len(strides) != k
        or min(*image, *block, *dilations, *strides) <= 0 or min(pads) < 0
        or shape[1] % size
    ):  # fmt: skip
        raise ctx.invalid(
            f"input {list(shape)} (N, C * prod(block_shape), L), "
            f"image_shape {image}, block_shape {block}, dilations {dilations}, "
            f"pads {pads} and strides {strides} do not fit together (sizes, "
            "dilations and strides positive, pads not negative)"
        )
    counts = [
        (image[d] + pads[d] + pads[d + k] - dilations[d] * (block[d] - 1) - 1)
        // strides[d] + 1
        for d in range(k)
    ]
    if min(counts) < 1 or math.prod(counts) != shape[2]:
        raise SmeltError(
            f"{ctx.label}: image_shape {image} holds {counts} blocks, not the "
            f"input's {shape[2]}"
        )
    n, c = shape[0], shape[1] // size
    cols = _dilate(ctx, ctx.reshape(x, (n, shape[1], *counts)), strides)
    spread = shape_of(cols)[2:]
    cols = ctx.reshape(cols, (n, c, *block, *spread))
    zero = Const(np.zeros((), numpy_type_of(x)))
    total: Value | None = None
    for offset in itertools.product(*(range(b) for b in block)):
        starts = [o * dl - p for o, dl, p in zip(offset, dilations, pads)]
        lo = [max(0, -s) for s in starts]
        hi = [min(sp, im - s) for sp, im, s in zip(spread, image, starts)]
        if any(h <= l for l, h in zip(lo, hi)):
            continue  # these columns fall in the pads only
        part = ctx.emit(
            g.SliceOp, [cols],
            starts=[0, 0, *offset, *lo],
            ends=[n, c, *(o + 1 for o in offset), *hi],
            steps=[1] * (2 + 2 * k),
        )[0]  # fmt: skip
        part = ctx.reshape(part, (n, c, *(h - l for l, h in zip(lo, hi))))
        before = [max(0, s) for s in starts]
        after = [im - b - (h - l) for im, b, l, h in zip(image, before, lo, hi)]
        if any(before) or any(after):
            pad = [0, 0, *before, 0, 0, *after]
            part = ctx.emit(g.PadOp, [part, zero], pads=pad, mode="constant")[0]
        total = part if total is None else ctx.emit(g.AddOp, [total, part])[0]
    if total is None:
        return [Const(np.zeros((n, c, *image), numpy_type_of(x)))]
    return [total]
