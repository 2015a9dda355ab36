"""ONNX DeformConv as graph ops: bilinear samples at offset kernel taps, then a
convolution as one matmul.

Each kernel tap of each output position reads the input at its usual place plus a
learned offset (one per offset group), bilinearly, zeros outside the image (what
GridSample does with align_corners=1 and zeros padding: the helpers of
`onnx_sample`). The samples, times the optional mask, form the im2col columns
(N, group, C_in/group * kernel, outputs) that multiply the weight (group, C_out /
group, C_in/group * kernel) in one batched `graph.matmul`.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.frontend.onnx_nn import check_windows
from smelt.frontend.onnx_sample import axis_index, axis_taps
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register


@handles("DeformConv")
def _deform_conv(ctx: NodeContext) -> list[Value]:
    x, w, offset = ctx.inputs[:3]
    bias, mask = ctx.input(3), ctx.input(4)
    shape, wshape, oshape = shape_of(x), shape_of(w), shape_of(offset)
    k = len(shape) - 2
    group = int(ctx.attr("group", 1))
    offset_group = int(ctx.attr("offset_group", 1))
    kernel = list(ctx.attr("kernel_shape", wshape[2:]))
    dilations = list(ctx.attr("dilations", [1] * k))
    pads = list(ctx.attr("pads", [0] * 2 * k))
    strides = list(ctx.attr("strides", [1] * k))
    n, c = shape[:2]
    c_out = wshape[0] if wshape else 0
    taps = math.prod(kernel)
    outs = list(oshape[2:])
    if (
        k < 1 or len(wshape) != k + 2 or len(oshape) != k + 2
        or kernel != list(wshape[2:]) or len(dilations) != k or len(pads) != 2 * k
        or len(strides) != k or group < 1 or offset_group < 1
        or c != wshape[1] * group or c_out % group or c % offset_group
        or oshape[:2] != (n, offset_group * taps * k)
    ):  # fmt: skip
        raise ctx.invalid(
            f"X {list(shape)}, W {list(wshape)} and offset "
            f"{list(oshape)} do not fit group {group}, offset_group {offset_group} "
            f"and kernel_shape {kernel}"
        )
    window = {"strides": strides, "dilations": dilations, "pads": pads}
    check_windows(ctx, shape[2:], kernel, window, None)
    expected = [
        (shape[2 + d] + pads[d] + pads[d + k] - (kernel[d] - 1) * dilations[d] - 1)
        // strides[d] + 1
        for d in range(k)
    ]
    if outs != expected:
        raise ctx.invalid(
            f"offset's output dims {outs} should be {expected} for "
            "these pads, strides and dilations"
        )
    if mask is not None and shape_of(mask) != (n, offset_group * taps, *outs):
        raise ctx.invalid(f"mask must have shape {[n, offset_group * taps, *outs]}")
    dtype = numpy_type_of(x)
    if dtype.kind != "f":
        raise SmeltError(f"{ctx.label}: X must be floats, not {dtype}")
    if 0 in shape or 0 in outs:
        raise ctx.unsupported("DeformConv of an empty tensor is not supported")
    work = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    m = Arith(ctx, work)
    # Sample coordinates: (N, offset groups, kernel..., outputs...) per axis.
    offset = ctx.reshape(m.cast(offset, work), (n, offset_group, *kernel, k, *outs))
    per_axis = []
    for d in range(k):
        shift = ctx.emit(g.GatherOp, [offset, m.const(d, np.int64)], axis=2 + k)[0]
        along = [-1 if i == d else 1 for i in range(k)]
        tap = (np.arange(kernel[d]) * dilations[d]).reshape(along + [1] * k)
        out = (np.arange(outs[d]) * strides[d] - pads[d]).reshape([1] * k + along)
        coord = m.add(shift, (tap + out).astype(work)[None, None])
        per_axis.append(
            [(*axis_index(m, i, shape[2 + d], "zeros"), wt)
             for i, wt in axis_taps(m, coord, "linear")]
        )  # fmt: skip
    # Channel rows of each offset group: (N * offset groups * pixels, C / groups).
    cg = c // offset_group
    pixels = math.prod(shape[2:])
    rows = ctx.reshape(m.cast(x, work), (n, offset_group, cg, pixels))
    rows = ctx.emit(g.TransposeOp, [rows], perm=[0, 1, 3, 2])[0]
    rows = ctx.reshape(rows, (n * offset_group * pixels, cg))
    image = np.arange(n * offset_group).reshape(n, offset_group, *[1] * 2 * k)
    base = m.const(image * pixels, np.int64)
    strides_px = [math.prod(shape[3 + d :]) for d in range(k)]
    sample_shape = (n, offset_group, *kernel, *outs, 1)
    total: Value | None = None
    for combo in itertools.product(*per_axis):
        flat, weight, inside = base, None, None
        for (index, ok, wt), stride in zip(combo, strides_px):
            flat = m.add(flat, m.mul(index, m.const(stride, np.int64)))
            weight = wt if weight is None else m.mul(weight, wt)
            inside = ok if inside is None else m.both(inside, ok)
        pixel = ctx.emit(g.GatherOp, [rows, flat], axis=0)[0]
        zero = Const(np.zeros((), work))
        pixel = m.where(ctx.reshape(inside, sample_shape), pixel, zero)
        pixel = m.mul(pixel, ctx.reshape(weight, sample_shape))
        total = pixel if total is None else m.add(total, pixel)
    if mask is not None:
        mask = ctx.reshape(m.cast(mask, work), sample_shape)
        total = m.mul(total, mask)
    # im2col columns (N, groups, C/groups * taps, outputs) times the weight.
    perm = [0, 1, 2 + 2 * k, *range(2, 2 + 2 * k)]
    cols = ctx.emit(g.TransposeOp, [total], perm=perm)[0]  # N, og, cg, K..., O...
    count = math.prod(outs)
    cols = ctx.reshape(cols, (n, group, (c // group) * taps, count))
    weight = ctx.reshape(m.cast(w, work), (group, c_out // group, (c // group) * taps))
    y = ctx.emit(g.MatMulOp, [weight, cols])[0]  # N, groups, C_out / groups, O
    y = ctx.reshape(y, (n, c_out, *outs))
    if bias is not None:
        y = m.add(y, ctx.reshape(m.cast(bias, work), (c_out, *[1] * k)))
    return [m.cast(y, dtype)]
