"""ONNX GridSample and RoiAlign as graph ops: sampling an image at coordinates
computed at run time.

The sampling coordinates are elementwise math on the grid (denormalize, round or
split into a cell and a fraction, fold by the padding mode); each tap of the
interpolation kernel (1 nearest, 2 linear, 4 cubic per spatial dim) becomes one
`graph.gather_nd` of the pixel rows it reads (all channels at once, from the image
laid out channels-last), weighted and summed. Taps outside the image read a clamped
index and are masked to 0 (padding_mode zeros).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest",
          "linear": "linear", "cubic": "cubic"}  # fmt: skip
_PADDING = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # GridSample's cubic convolution coefficient (PyTorch's)


def reflect(m: Arith, x: Value, lo: float, hi: float) -> Value:
    """x folded into [lo, hi] by reflecting at the borders as often as needed;
    values inside are kept."""
    span = hi - lo
    if span <= 0:
        return m.mul(x, 0.0)  # a one-pixel axis (align_corners): all at 0
    below = m.less(x, lo)
    outside = m.either(below, m.greater(x, hi))
    dx = m.where(below, m.sub(lo, x), m.sub(x, hi))
    folds = m.floor(m.div(dx, span))
    rest = m.sub(dx, m.mul(folds, span))
    odd = m.greater(m.sub(folds, m.mul(m.floor(m.mul(folds, 0.5)), 2.0)), 0.5)
    from_lo, from_hi = m.add(lo, rest), m.sub(hi, rest)
    up = m.where(odd, from_hi, from_lo)  # folded back from below lo
    down = m.where(odd, from_lo, from_hi)  # folded back from above hi
    return m.where(outside, m.where(below, up, down), x)


def cubic_weights(m: Arith, t: Value, a: float = CUBIC_A) -> list[Value]:
    """The 4 cubic convolution weights of the taps at -1, 0, 1, 2 from the cell
    of a coordinate whose fraction past it is t (Keys' kernel)."""

    def near(d: Value) -> Value:  # |d| <= 1
        return m.add(m.mul(m.mul(m.sub(m.mul(d, a + 2), a + 3), d), d), 1.0)

    def far(d: Value) -> Value:  # 1 < |d| < 2
        inner = m.add(m.mul(m.sub(m.mul(d, a), 5 * a), d), 8 * a)
        return m.sub(m.mul(inner, d), 4 * a)

    one_minus = m.sub(1.0, t)
    return [far(m.add(t, 1.0)), near(t), near(one_minus), far(m.sub(2.0, t))]


def axis_taps(m: Arith, x: Value, mode: str) -> list[tuple[Value, Value | None]]:
    """(source index as a float, weight or None) of every tap of one axis."""
    if mode == "nearest":
        return [(x, None)]
    cell = m.floor(x)
    t = m.sub(x, cell)
    if mode == "linear":
        return [(cell, m.sub(1.0, t)), (m.add(cell, 1.0), t)]
    weights = cubic_weights(m, t)
    return [(m.add(cell, float(k)), w) for k, w in zip((-1, 0, 1, 2), weights)]


def axis_index(
    m: Arith, i: Value, size: int, padding: str, lo: float = 0.0, hi: float = 0.0
) -> tuple[Value, Value | None]:
    """(int64 index inside [0, size), in-range mask or None) of float index i;
    reflection folds it into [lo, hi] first."""
    inside = None
    if padding == "zeros":
        low_ok = m.op(g.GreaterEqualOp, i, 0.0)
        inside = m.both(low_ok, m.op(g.LessEqualOp, i, size - 1.0))
    elif padding == "reflection":
        i = reflect(m, i, lo, hi)
    index = m.cast(m.clip(i, 0.0, size - 1.0), np.int64)
    return index, inside


@handles("GridSample")
def _grid_sample(ctx: NodeContext) -> list[Value]:
    x, grid = ctx.inputs[:2]
    shape, gshape = shape_of(x), shape_of(grid)
    k = len(shape) - 2
    if k < 1 or len(gshape) != k + 2 or gshape[-1] != k or gshape[0] != shape[0]:
        raise SmeltError(
            f"{ctx.label}: X of shape {list(shape)} needs a grid of shape "
            f"[N, out dims..., {max(k, 1)}] with N = {shape[0] if shape else '?'}, "
            f"got {list(gshape)}"
        )
    mode = _MODES.get(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    padding = ctx.attr("padding_mode", "zeros")
    if mode is None or padding not in _PADDING:
        raise SmeltError(
            f"{ctx.label}: unknown mode '{ctx.attr('mode')}' or padding_mode "
            f"'{padding}'"
        )
    align = bool(ctx.attr("align_corners", 0))
    xtype, gtype = numpy_type_of(x), numpy_type_of(grid)
    if mode != "nearest" and xtype.kind != "f":
        raise ctx.unsupported(f"{mode} GridSample of {xtype} X is not supported")
    if gtype.kind != "f":
        raise SmeltError(f"{ctx.label}: the grid must be floats, not {gtype}")
    if 0 in shape or 0 in gshape:
        raise ctx.unsupported("GridSample of an empty tensor is not supported")
    # Coordinates in f32, as onnx's reference computes them (f64 stays f64); a
    # float image is sampled in the same type.
    wide = np.dtype(np.float64) in (gtype, xtype)
    work = np.dtype(np.float64 if wide else np.float32)
    m = Arith(ctx, work)
    grid = m.cast(grid, work)
    if xtype.kind == "f":
        x = m.cast(x, work)
    dims = shape[2:]
    taps, bounds = [], []
    for i, d in enumerate(dims):
        # The grid lists coordinates innermost dim first: x (width), y, ...
        n = ctx.emit(g.GatherOp, [grid, m.const(k - 1 - i, np.int64)], axis=k + 1)[0]
        if align:
            c = m.mul(m.mul(m.add(n, 1.0), 0.5), float(d - 1))
            lo, hi = 0.0, d - 1.0
        else:
            c = m.mul(m.sub(m.mul(m.add(n, 1.0), float(d)), 1.0), 0.5)
            lo, hi = -0.5, d - 0.5
        if mode == "nearest":
            c = m.op(g.RoundOp, c)
        if padding == "border":
            c = m.where(m.less(c, lo), 0.0, m.where(m.greater(c, hi), d - 1.0, c))
        elif padding == "reflection":
            c = reflect(m, c, lo, hi)
        taps.append(axis_taps(m, c, mode))
        bounds.append((lo, hi))
    y = _gather_taps(ctx, m, x, taps, bounds, padding)
    out = (shape[0], shape[1], *gshape[1:-1])
    perm = [0, k + 1, *range(1, k + 1)]
    y = ctx.emit(g.TransposeOp, [y], perm=perm)[0]
    if shape_of(y) != out:
        raise SmeltError(f"{ctx.label}: internal shape error {shape_of(y)} != {out}")
    return [m.cast(y, xtype)]


def _gather_taps(
    ctx: NodeContext,
    m: Arith,
    x: Value,
    taps_per_axis: list[list[tuple[Value, Value | None]]],
    bounds_per_axis: list[tuple[float, float]],
    padding: str,
) -> Value:
    """sum over every combination of one tap per axis of weight * pixel, the pixel
    rows (N, out dims..., C) gathered from x laid out (N, pixels, C)."""
    shape = shape_of(x)
    n, c, dims = shape[0], shape[1], shape[2:]
    k = len(dims)
    rows = ctx.emit(g.TransposeOp, [x], perm=[0, *range(2, k + 2), 1])[0]
    rows = ctx.reshape(rows, (n, math.prod(dims), c))
    strides = [math.prod(dims[i + 1 :]) for i in range(k)]
    indexed = [
        [(*axis_index(m, i, d, padding, *bounds), w) for i, w in taps]
        for taps, d, bounds in zip(taps_per_axis, dims, bounds_per_axis)
    ]
    total: Value | None = None
    for combo in itertools.product(*indexed):
        flat, weight, inside = None, None, None
        for (index, ok, w), stride in zip(combo, strides):
            term = index if stride == 1 else m.mul(index, m.const(stride, np.int64))
            flat = term if flat is None else m.add(flat, term)
            if w is not None:
                weight = w if weight is None else m.mul(weight, w)
            if ok is not None:
                inside = ok if inside is None else m.both(inside, ok)
        index_shape = (*shape_of(flat), 1)
        index = ctx.reshape(flat, index_shape)
        pixel = ctx.emit(g.GatherNDOp, [rows, index], batch_dims=1)[0]
        if inside is not None:
            zero = Const(np.zeros((), numpy_type_of(x)))
            pixel = m.where(ctx.reshape(inside, index_shape), pixel, zero)
        if weight is not None:
            weight = ctx.reshape(weight, index_shape)
            pixel = m.mul(pixel, weight)
        total = pixel if total is None else m.add(total, pixel)
    return total  # type: ignore[return-value]  (every axis has a tap)


# --- RoiAlign -----------------------------------------------------------------------


def _roi_axis(
    m: Arith, c: Value, size: int
) -> tuple[Value, Value, Value, Value]:
    """(low index, high index, low weight, high weight) of RoiAlign's bilinear
    taps along one axis of `size` cells: a sample past one cell beyond the border
    weighs 0; one before the first cell reads it; at or past the last, reads it."""
    valid = m.both(m.op(g.GreaterEqualOp, c, -1.0), m.op(g.LessEqualOp, c, float(size)))
    c = m.op(g.MaxOp, c, 0.0)
    low = m.floor(c)
    edge = m.op(g.GreaterEqualOp, low, size - 1.0)
    low = m.where(edge, size - 1.0, low)
    c = m.where(edge, size - 1.0, c)
    high = m.where(edge, size - 1.0, m.add(low, 1.0))
    frac = m.sub(c, low)
    w_low = m.where(valid, m.sub(1.0, frac), 0.0)
    w_high = m.where(valid, frac, 0.0)
    return m.cast(low, np.int64), m.cast(high, np.int64), w_low, w_high


@handles("RoiAlign")
def _roi_align(ctx: NodeContext) -> list[Value]:
    """Each roi's bins sampled on a fixed grid (sampling_ratio per bin and axis):
    the sample coordinates are computed per roi, each of the 4 bilinear corners is
    one gather of channel rows from x laid out (N * H * W, C), and the samples of a
    bin are averaged (avg) or their largest weighted corner taken (max, as ONNX
    defines it)."""
    x, rois, batch = ctx.inputs[:3]
    shape, rshape, bshape = shape_of(x), shape_of(rois), shape_of(batch)
    if len(shape) != 4 or len(rshape) != 2 or rshape[1] != 4 or bshape != rshape[:1]:
        raise SmeltError(
            f"{ctx.label}: needs X (N, C, H, W), rois (R, 4) and batch_indices (R,); "
            f"got {list(shape)}, {list(rshape)} and {list(bshape)}"
        )
    mode = ctx.attr("mode", "avg")
    default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    coords = ctx.attr("coordinate_transformation_mode", default)
    if mode not in ("avg", "max") or coords not in ("half_pixel", "output_half_pixel"):
        raise SmeltError(
            f"{ctx.label}: unknown mode '{mode}' or coordinate_transformation_mode "
            f"'{coords}'"
        )
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    ratio = int(ctx.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise ctx.unsupported(
            "RoiAlign with sampling_ratio 0 is not supported: the samples per bin "
            "then depend on each roi's size at run time; export with a fixed "
            "sampling_ratio (e.g. 2)"
        )
    xtype, rtype = numpy_type_of(x), numpy_type_of(rois)
    if xtype.kind != "f" or rtype.kind != "f" or min(oh, ow) < 1:
        raise SmeltError(f"{ctx.label}: needs float X and rois and output dims >= 1")
    n, c, h, w = shape
    r = rshape[0]
    if 0 in shape or r == 0:
        raise ctx.unsupported("RoiAlign of an empty tensor is not supported")
    work = np.dtype(np.float64 if np.float64 in (xtype, rtype) else np.float32)
    m = Arith(ctx, work)
    rois = m.cast(rois, work)
    scale = float(ctx.attr("spatial_scale", 1.0))
    offset = 0.5 if coords == "half_pixel" else 0.0
    ends = {}
    for i, name in enumerate(("x1", "y1", "x2", "y2")):
        col = ctx.emit(g.GatherOp, [rois, m.const(i, np.int64)], axis=1)[0]
        ends[name] = m.sub(m.mul(col, scale), offset)  # (R,)
    taps = []
    for lo, hi, bins, size, where in (
        ("y1", "y2", oh, h, (r, oh, ratio, 1, 1)),
        ("x1", "x2", ow, w, (r, 1, 1, ow, ratio)),
    ):
        length = m.sub(ends[hi], ends[lo])
        if coords == "output_half_pixel":
            length = m.op(g.MaxOp, length, 1.0)
        step = ctx.reshape(m.div(length, float(bins)), (r, 1, 1))
        cell = np.arange(bins, dtype=work).reshape(1, bins, 1)
        sub = (np.arange(ratio, dtype=work) + 0.5).reshape(1, 1, ratio)
        start = ctx.reshape(ends[lo], (r, 1, 1))
        c_ = m.add(m.add(start, m.mul(cell, step)), m.div(m.mul(sub, step), ratio))
        taps.append([ctx.reshape(t, where) for t in _roi_axis(m, c_, size)])
    (y_lo, y_hi, wy_lo, wy_hi), (x_lo, x_hi, wx_lo, wx_hi) = taps
    rows = ctx.emit(g.TransposeOp, [x], perm=[0, 2, 3, 1])[0]
    rows = m.cast(ctx.reshape(rows, (n * h * w, c)), work)
    base = m.mul(ctx.reshape(m.cast(batch, np.int64), (r, 1, 1, 1, 1)),
                 m.const(h * w, np.int64))  # fmt: skip
    corners = []
    for yi, wy in ((y_lo, wy_lo), (y_hi, wy_hi)):
        row = m.add(base, m.mul(yi, m.const(w, np.int64)))
        for xi, wx in ((x_lo, wx_lo), (x_hi, wx_hi)):
            pixels = ctx.emit(g.GatherOp, [rows, m.add(row, xi)], axis=0)[0]
            weight = ctx.reshape(m.mul(wy, wx), (r, oh, ratio, ow, ratio, 1))
            corners.append(m.mul(weight, pixels))  # (R, OH, s, OW, s, C)
    if mode == "avg":
        total = m.add(m.add(corners[0], corners[1]), m.add(corners[2], corners[3]))
        y = ctx.emit(g.ReduceSumOp, [total], axes=[2, 4], keepdims=0)[0]
        y = m.div(y, float(ratio * ratio))
    else:
        top = m.op(g.MaxOp, m.op(g.MaxOp, corners[0], corners[1]),
                   m.op(g.MaxOp, corners[2], corners[3]))  # fmt: skip
        y = ctx.emit(g.ReduceMaxOp, [top], axes=[2, 4], keepdims=0)[0]
    y = ctx.emit(g.TransposeOp, [y], perm=[0, 3, 1, 2])[0]
    return [m.cast(y, xtype)]
