"""ONNX Resize and Upsample as graph ops, one axis at a time.

Resize is separable: along each resized axis the output is an affine map of the
input, y = W @ x + c, whose weights W (out, in) depend only on the shapes, the
scales and the attributes. They are computed here at import, as the ONNX reference
computes them (taps, neighbour choice, edge clamping, exclude_outside, antialias),
and the map becomes a `graph.gather` (nearest: W is one-hot) or, for linear and
cubic, a gather of each row's taps, weighted and summed (a `graph.matmul` with the
constant W on short axes); c holds tf_crop_and_resize's
extrapolation_value on the rows whose source lies outside the input. Axes are
applied first to last, as the reference's recursion does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

_MODES = ("nearest", "linear", "cubic")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_COORDS = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
    "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn",
)  # fmt: skip


@dataclass(frozen=True)
class Interp:
    """How one Resize node samples: its mode and the attributes that shape W."""

    mode: str = "nearest"
    coord: str = "half_pixel"
    nearest: str = "round_prefer_floor"  # or "simple" (Resize-10: floor up, ceil down)
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False
    extrapolation: float = 0.0


def source_coords(
    interp: Interp, in_len: int, out_len: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(source coordinate of every output index, mask of the extrapolated ones)."""
    y = np.arange(out_len, dtype=np.float64)
    width = scale * in_len  # the output length before rounding
    coord = interp.coord
    outside = np.zeros(out_len, bool)
    if coord == "align_corners":
        x = np.zeros(out_len) if width == 1 else y * (in_len - 1) / (width - 1)
    elif coord == "asymmetric":
        x = y / scale
    elif coord == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            x = np.full(out_len, (hi - lo) * (in_len - 1) / 2)
        else:
            x = y * (hi - lo) * (in_len - 1) / (width - 1)
        x = x + lo * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    elif coord == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif coord == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif coord == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:  # tf_half_pixel_for_nn (Resize-11)
        x = (y + 0.5) / scale
    return x, outside


def _taps(interp: Interp, ratio: float, scale: float) -> np.ndarray:
    """The weights of the taps around a source coordinate whose distance past the
    tap on its left is `ratio` (in (0, 1]; 1 on an input cell)."""
    a = interp.cubic_a
    if interp.mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        up = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
            "simple": scale < 1,
        }[interp.nearest]
        return np.array([0.0, 1.0] if up else [1.0, 0.0])
    if interp.antialias:
        s = min(scale, 1.0)
        reach = 1 if interp.mode == "linear" else 2
        first = math.floor(-reach / s) + 1
        d = np.abs((np.arange(first, 2 - first) - ratio) * s)
        if interp.mode == "linear":
            w = np.clip(1 - d, 0, 1)
        else:
            w = np.where(
                d <= 1,
                (a + 2) * d**3 - (a + 3) * d**2 + 1,
                np.where(d < 2, a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a, 0.0),
            )
        return w / w.sum()
    if interp.mode == "linear":
        return np.array([1 - ratio, ratio])
    r, q = ratio + 1, 2 - ratio
    return np.array([
        ((a * r - 5 * a) * r + 8 * a) * r - 4 * a,
        ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
        ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
        ((a * q - 5 * a) * q + 8 * a) * q - 4 * a,
    ])  # fmt: skip


def axis_weights(
    interp: Interp, in_len: int, out_len: int, scale: float, roi: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(W (out_len, in_len), extrapolated-row mask) of one resized axis."""
    x, outside = source_coords(interp, in_len, out_len, scale, roi)
    weights = np.zeros((out_len, in_len))
    for o in range(out_len):
        ratio = 1.0 if x[o] == math.floor(x[o]) else x[o] - math.floor(x[o])
        taps = _taps(interp, ratio, scale)
        n = len(taps)
        # The n cells nearest x[o], ties to the smaller index, in a frame padded
        # by ceil(n / 2) cells on each side (edge values: clamped indices).
        pad = -(-n // 2)
        xp = x[o] + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            start = p - n // 2 + (0 if frac == 0 else 1)
        else:
            start = p - (n - 1) // 2 + (0 if frac <= 0.5 else 1)
        cells = np.arange(start, start + n) - pad
        if interp.exclude_outside:
            taps = np.where((cells < 0) | (cells >= in_len), 0.0, taps)
            total = taps.sum()
            taps = taps / (total if total != 0 else 1.0)
        np.add.at(weights[o], np.clip(cells, 0, in_len - 1), taps)
    weights[outside] = 0.0
    return weights, outside


def resize(
    ctx: NodeContext,
    x: Value,
    interp: Interp,
    out_shape: list[int],
    scales: list[float],
    roi: list[tuple[float, float]],
) -> Value:
    """x resized to `out_shape` (scales and roi per axis)."""
    dtype = numpy_type_of(x)
    if interp.mode != "nearest" and dtype.kind != "f":
        raise ctx.unsupported(
            f"{interp.mode} Resize of {dtype} input is not supported (float only)"
        )
    if 0 in out_shape or 0 in shape_of(x):
        raise ctx.unsupported("Resize to or from an empty tensor is not supported")
    for axis, (out_len, scale) in enumerate(zip(out_shape, scales)):
        shape = shape_of(x)
        in_len = shape[axis]
        if (
            math.isclose(scale, 1.0)
            and out_len == in_len
            and math.isclose(roi[axis][0], 0.0)
            and math.isclose(roi[axis][1], 1.0)
        ):
            continue  # the identity, as the reference skips it
        weights, outside = axis_weights(interp, in_len, out_len, scale, roi[axis])
        x = _apply(ctx, x, axis, weights, outside, interp)
    return x


def _apply(
    ctx: NodeContext,
    x: Value,
    axis: int,
    weights: np.ndarray,
    outside: np.ndarray,
    interp: Interp,
) -> Value:
    """y = weights @ x along `axis`, extrapolated rows set to the fill value."""
    shape = shape_of(x)
    out_len, in_len = weights.shape
    dtype = numpy_type_of(x)
    after = (1,) * (len(shape) - axis - 1)
    if interp.mode == "nearest":
        index = Const(weights.argmax(axis=1).astype(np.int64))
        y = ctx.emit(g.GatherOp, [x, index], axis=axis)[0]
        if outside.any():
            fill = Const(np.array(interp.extrapolation, dtype))
            mask = Const(outside.reshape(out_len, *after))
            y = ctx.emit(g.WhereOp, [mask, fill, y])[0]
        return y
    taps = max(1, int((weights != 0).sum(axis=1).max()))
    if 4 * taps <= in_len:
        y = _by_taps(ctx, x, axis, weights, taps)
    else:
        y = _by_matmul(ctx, x, axis, weights)
    if outside.any():
        fill = np.where(outside, interp.extrapolation, 0.0).astype(dtype)
        y = ctx.emit(g.AddOp, [y, Const(fill.reshape(out_len, *after))])[0]
    return y


def _by_taps(
    ctx: NodeContext, x: Value, axis: int, weights: np.ndarray, taps: int
) -> Value:
    """weights @ x along `axis` from the `taps` nonzero weights of each row: one
    gather of every row's cells, a product and a sum over the taps."""
    out_len = weights.shape[0]
    index = np.zeros((out_len, taps), np.int64)
    coeffs = np.zeros((out_len, taps))
    for o, row in enumerate(weights):
        (cells,) = np.nonzero(row)
        index[o, : len(cells)], coeffs[o, : len(cells)] = cells, row[cells]
    after = (1,) * (len(shape_of(x)) - axis - 1)
    y = ctx.emit(g.GatherOp, [x, Const(index)], axis=axis)[0]
    coeffs = Const(coeffs.reshape(out_len, taps, *after).astype(numpy_type_of(x)))
    y = ctx.emit(g.MulOp, [y, coeffs])[0]
    return ctx.emit(g.ReduceSumOp, [y], axes=[axis + 1], keepdims=0)[0]


def _by_matmul(ctx: NodeContext, x: Value, axis: int, weights: np.ndarray) -> Value:
    """weights @ x along `axis` as one matmul (short axes)."""
    shape = shape_of(x)
    out_len, in_len = weights.shape
    dtype = numpy_type_of(x)
    lead, trail = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    if trail == 1:
        flat = ctx.reshape(x, (lead, in_len))
        y = ctx.emit(g.MatMulOp, [flat, Const(weights.T.astype(dtype))])[0]
    else:
        flat = ctx.reshape(x, (lead, in_len, trail))
        y = ctx.emit(g.MatMulOp, [Const(weights.astype(dtype)), flat])[0]
    return ctx.reshape(y, (*shape[:axis], out_len, *shape[axis + 1 :]))


def _floats(a: np.ndarray | None) -> list[float] | None:
    return None if a is None or a.size == 0 else [float(v) for v in a.reshape(-1)]


@handles("Resize")
def _resize(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = shape_of(x)
    rank = len(shape)
    mode = ctx.attr("mode", "nearest")
    if mode not in _MODES:
        raise SmeltError(f"{ctx.label}: unknown mode '{mode}'")
    if ctx.opset < 11:
        interp = Interp(mode=mode, coord="asymmetric", nearest="simple")
        return [_by_scales(ctx, x, interp, _floats(ctx.const(1, "scales")))]
    interp = Interp(
        mode=mode,
        coord=ctx.attr("coordinate_transformation_mode", "half_pixel"),
        nearest=ctx.attr("nearest_mode", "round_prefer_floor"),
        cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(ctx.attr("exclude_outside", 0)),
        antialias=bool(ctx.attr("antialias", 0)) and mode != "nearest",
        extrapolation=float(ctx.attr("extrapolation_value", 0.0)),
    )
    if interp.coord not in _COORDS:
        raise SmeltError(
            f"{ctx.label}: unknown coordinate_transformation_mode '{interp.coord}'"
        )
    if interp.nearest not in _NEAREST:
        raise SmeltError(f"{ctx.label}: unknown nearest_mode '{interp.nearest}'")
    axes = list(range(rank))
    if ctx.opset >= 18 and ctx.attr("axes") is not None:
        axes = [axis_of(ctx, int(a), rank) for a in ctx.attr("axes")]
        if len(set(axes)) != len(axes):
            raise SmeltError(f"{ctx.label}: axes {axes} repeat an axis")
    roi = [(0.0, 1.0)] * rank
    if interp.coord == "tf_crop_and_resize":
        given = _floats(ctx.const(1, "roi"))
        if given is None or len(given) != 2 * len(axes):
            raise SmeltError(f"{ctx.label}: tf_crop_and_resize needs a roi per axis")
        for i, a in enumerate(axes):
            roi[a] = (given[i], given[i + len(axes)])
    scales = _floats(ctx.const(2, "scales"))
    sizes = ctx.const(3, "sizes")
    if sizes is not None and sizes.size:
        if scales is not None:
            raise SmeltError(f"{ctx.label}: give scales or sizes, not both")
        sizes = [int(s) for s in sizes.reshape(-1)]
        if len(sizes) != len(axes):
            raise SmeltError(f"{ctx.label}: sizes {sizes} do not fit axes {axes}")
        if any(s < 0 or (s == 0 and shape[a]) for a, s in zip(axes, sizes)):
            raise ctx.invalid(
                f"sizes {sizes} must be positive (axes {axes} of input {list(shape)})"
            )
        out = list(shape)
        for a, s in zip(axes, sizes):
            out[a] = s
        full = [out[i] / shape[i] if shape[i] else 1.0 for i in range(rank)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            scale = pick(full[a] for a in axes)
            full = [scale if i in axes else 1.0 for i in range(rank)]
            out = [
                int(scale * shape[i] + 0.5) if i in axes else shape[i]
                for i in range(rank)
            ]
        elif policy != "stretch":
            raise SmeltError(f"{ctx.label}: unknown keep_aspect_ratio_policy {policy}")
        return [resize(ctx, x, interp, out, full, roi)]
    if scales is None:
        raise SmeltError(f"{ctx.label}: Resize needs scales or sizes")
    if len(scales) != len(axes):
        raise SmeltError(f"{ctx.label}: scales {scales} do not fit axes {axes}")
    full = [1.0] * rank
    for a, s in zip(axes, scales):
        full[a] = s
    return [_by_scales(ctx, x, interp, full, roi)]


def _by_scales(
    ctx: NodeContext,
    x: Value,
    interp: Interp,
    scales: list[float] | None,
    roi: list[tuple[float, float]] | None = None,
) -> Value:
    """x resized by `scales` (one per dim): each output length is
    floor(scale * input length)."""
    shape = shape_of(x)
    if scales is None or len(scales) != len(shape):
        raise SmeltError(f"{ctx.label}: needs one scale per dim of {shape}")
    if any(not s > 0 for s in scales):
        raise ctx.invalid(f"scales {scales} must all be positive")
    # The scales are float32 in the model; the reference scales in float64.
    scales = [float(np.float32(s)) for s in scales]
    out = [int(s * d) for s, d in zip(scales, shape)]
    return resize(ctx, x, interp, out, scales, roi or [(0.0, 1.0)] * len(shape))


@handles("Upsample")
def _upsample(ctx: NodeContext) -> list[Value]:
    """Upsample (opsets 7 and 9): asymmetric coordinates; nearest takes the cell at
    or before the source coordinate."""
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise SmeltError(f"{ctx.label}: unknown mode '{mode}'")
    if ctx.opset < 9:
        scales = _floats(np.asarray(ctx.attr("scales", []), np.float32))
    else:
        scales = _floats(ctx.const(1, "scales"))
    interp = Interp(mode=mode, coord="asymmetric", nearest="floor")
    return [_by_scales(ctx, ctx.inputs[0], interp, scales)]
