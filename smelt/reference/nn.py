"""Reference kernels of the graph dialect's neural-network ops: normalizations,
convolution, pooling and contractions (listed in `reference/kernels.py`).

Convolution is im2col (a strided window view, one copy) and a batched matmul per
group; pools reduce a window view; nothing loops in Python per element.

Contractions (Conv, MatMul, Gemm) accumulate float32 in float64 and round once
(`contract`): float32 BLAS sums in an order that depends on the host's kernel and
on where a column falls in its tile, so outputs equal in exact arithmetic came
out an ulp apart, column by column and host by host (light_squeezenet's equal
1e10 logits then gave a softmax of zeros and 1/k's instead of 0.001 everywhere).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.reference.executor import lowest, result_shape
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register

# --- normalizations ------------------------------------------------------------


@kernel(g.LayerNormOp)
def _layer_norm(op: g.GraphOp, args: list[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias = (
        a.astype(np.float32) if a.dtype == np.float16 else a for a in args
    )
    axes = tuple(range(g.normalize_axis(op.attr("axis"), x.ndim), x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(var + x.dtype.type(op.attr("epsilon")))
    y = d * inv_std * scale + bias
    types = [dtypes.to_numpy(r.type.element_type) for r in op.results]
    return [r.astype(t) for r, t in zip((y, mean, inv_std), types)]


@kernel(g.BatchNormOp)
def _batch_norm(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, scale, bias, mean, var = args
    shape = (1, -1) + (1,) * (x.ndim - 2)
    std = np.sqrt(var + var.dtype.type(op.attr("epsilon")))
    return (x - mean.reshape(shape)) / std.reshape(shape) * scale.reshape(
        shape
    ) + bias.reshape(shape)


@kernel(g.LrnOp)
def _lrn(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    size = op.attr("size")
    lo = (size - 1) // 2  # channels c - lo ... c + (size - 1 - lo) are summed
    widths = [(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2)
    sq = np.pad(x * x, widths)
    total = sliding_window_view(sq, size, axis=1).sum(axis=-1)
    t = x.dtype.type
    base = t(op.attr("bias")) + t(op.attr("alpha")) / t(size) * total
    return x / base ** t(op.attr("beta"))


# --- convolution, pooling, contractions ----------------------------------------------


_ACCUMULATOR = {
    np.dtype(np.float32): np.float64,
    np.dtype(np.float16): np.float32,
    dtypes.to_numpy(dtypes.bf16): np.float32,
}


def contract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`np.matmul(a, b)` in a host-independent order: float32 accumulates in float64
    and rounds once (a product of two float32 is exact in float64, and a float64
    sum's error lies far below a float32 ulp); f16 / bf16 accumulate in float32
    and round once, as the compiled kernels do (numpy has no bf16 matmul and
    rounds f16 sums at every step); integers and float64 as numpy does."""
    wide = _ACCUMULATOR.get(a.dtype)
    if wide is None:
        return np.matmul(a, b)
    return np.matmul(a.astype(wide), b.astype(wide)).astype(a.dtype)


def _geometry(
    op: g.GraphOp, spatial: tuple[int, ...], kernel: tuple[int, ...], pads
) -> tuple[list[int], list[tuple[int, int]]]:
    """The window spans of `op` and the (before, after) padding of each spatial
    dim; `after` grows where ceil_mode lets the last window run past the pads."""
    nsp = len(kernel)
    out = result_shape(op)[2:]
    strides, dil = op.attr("strides"), op.attr("dilations")
    span = [d * (k - 1) + 1 for d, k in zip(dil, kernel)]
    widths = []
    for i in range(nsp):
        need = (out[i] - 1) * strides[i] + span[i]
        widths.append((pads[i], max(pads[i + nsp], need - spatial[i] - pads[i])))
    return span, widths


def _strided(win: np.ndarray, op: g.GraphOp, first: int) -> np.ndarray:
    """`win`, a window view with its spatial dims from `first` on and the window
    dims last, cut to the strided, dilated windows of `op`."""
    out = result_shape(op)[2:]
    strides, dil = op.attr("strides"), op.attr("dilations")
    nsp = len(strides)
    index = [slice(None)] * win.ndim
    index[first : first + nsp] = [slice(0, o * s, s) for o, s in zip(out, strides)]
    index[win.ndim - nsp :] = [slice(None, None, d) for d in dil]
    return win[tuple(index)]


def _windows(
    x: np.ndarray,
    op: g.GraphOp,
    kernel: tuple[int, ...],
    pads: tuple[int, ...],
    fill: float = 0,
) -> np.ndarray:
    """View (N, C, *out, *kernel) of the windows of `op` over `x` padded by `pads`
    with `fill`; windows that ceil_mode lets run past the padding read `fill` too."""
    span, widths = _geometry(op, x.shape[2:], kernel, pads)
    xp = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=fill)
    axes = tuple(range(2, 2 + len(kernel)))
    return _strided(sliding_window_view(xp, span, axis=axes), op, 2)


def _window_axes(op: g.GraphOp) -> tuple[int, ...]:
    """The trailing window dims of a `_windows` view."""
    return tuple(range(-len(op.attr("kernel_shape")), 0))


@kernel(g.Conv2dOp)
def _conv2d(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, w, b = args
    n, groups = x.shape[0], op.attr("group")
    o, cg, kh, kw = w.shape
    oh, ow = result_shape(op)[2:]
    span, widths = _geometry(op, x.shape[2:], (kh, kw), op.attr("pads"))
    # im2col from an NHWC copy, so that the copy moves whole channel rows:
    # (G, N*OH*OW, KH*KW*Cg) @ (G, KH*KW*Cg, O/G) per group.
    xp = np.pad(x.transpose(0, 2, 3, 1), [(0, 0), *widths, (0, 0)])
    win = _strided(sliding_window_view(xp, span, axis=(1, 2)), op, 1)
    cols = win.reshape(n, oh, ow, groups, cg, kh, kw).transpose(3, 0, 1, 2, 5, 6, 4)
    cols = cols.reshape(groups, n * oh * ow, kh * kw * cg)
    wmat = w.reshape(groups, o // groups, cg, kh, kw).transpose(0, 3, 4, 2, 1)
    y = contract(cols, wmat.reshape(groups, kh * kw * cg, o // groups))
    y = y.reshape(groups, n, oh, ow, o // groups).transpose(1, 0, 4, 2, 3)
    return y.reshape(n, o, oh, ow) + b.reshape(1, o, 1, 1)


@kernel(g.MaxPoolOp)
def _max_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    fill = lowest(x.dtype)
    win = _windows(x, op, op.attr("kernel_shape"), op.attr("pads"), fill)
    return _hollow_lowest(x, op, win.max(axis=_window_axes(op)))


def _cells(x: np.ndarray, op: g.GraphOp, pad_cell: int) -> np.ndarray:
    """Per window, the cells it covers: the real ones, plus the explicit padding
    when `pad_cell` is 1 (never the cells ceil_mode adds past it)."""
    kernel_shape, pads = op.attr("kernel_shape"), op.attr("pads")
    nsp = len(kernel_shape)
    cells = np.pad(
        np.ones((1, 1) + x.shape[2:], dtype=np.int64),
        [(0, 0), (0, 0), *((pads[i], pads[i + nsp]) for i in range(nsp))],
        constant_values=pad_cell,
    )
    count = _windows(cells, op, kernel_shape, (0,) * (2 * nsp))
    return count.sum(axis=_window_axes(op))


def _hollow_lowest(x: np.ndarray, op: g.GraphOp, y: np.ndarray) -> np.ndarray:
    """A window wholly in the padding (dilated pools) gives the lowest finite
    value of a float type, as onnxruntime does (not the -inf the fill gives)."""
    if x.dtype.kind != "f" and x.dtype != dtypes.to_numpy(dtypes.bf16):
        return y
    hollow = _cells(x, op, 0) == 0
    if not hollow.any():
        return y
    return np.where(hollow, ml_dtypes.finfo(x.dtype).min, y).astype(x.dtype)


@kernel(g.MaxPoolWithIndicesOp)
def _max_pool_with_indices(op: g.GraphOp, args: list[np.ndarray]) -> list[np.ndarray]:
    """max_pool, and the flat input index of the first window position holding the
    max (a NaN counts as the max); -1 where a window covers no input cell."""
    x = args[0]
    kernel_shape, pads = op.attr("kernel_shape"), op.attr("pads")
    n, c, *spatial = x.shape
    cells = math.prod(spatial)
    order = "F" if op.attr("storage_order") else "C"
    flat = np.arange(cells, dtype=np.int64).reshape(spatial, order=order)
    positions = _windows(flat[None, None], op, kernel_shape, pads, -1)
    values = _windows(x, op, kernel_shape, pads, lowest(x.dtype))
    y = values.max(axis=_window_axes(op))
    out_shape = y.shape
    values = values.reshape(*out_shape, -1)
    positions = positions.reshape(*positions.shape[: 2 + len(spatial)], -1)
    inside = positions >= 0
    hit = (values == y[..., None]) & inside
    if x.dtype.kind == "f":
        hit |= np.isnan(values) & np.isnan(y)[..., None] & inside
    first = hit.argmax(axis=-1)[..., None]
    local = np.take_along_axis(np.broadcast_to(positions, hit.shape), first, -1)[..., 0]
    block = np.arange(n * c, dtype=np.int64).reshape(n, c, *[1] * len(spatial)) * cells
    indices = np.where(hit.any(axis=-1), local + block, np.int64(-1))
    return [_hollow_lowest(x, op, y), indices.astype(np.int64)]


@kernel(g.AveragePoolOp)
def _average_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    kernel_shape, pads = op.attr("kernel_shape"), op.attr("pads")
    win = _windows(x, op, kernel_shape, pads)
    total = win.sum(axis=_window_axes(op), dtype=x.dtype)
    # Each window divides by the cells it covers; one wholly in the padding
    # (dilated pools) covers none and gives 0, as onnxruntime does (not 0/0).
    count = _cells(x, op, 1 if op.attr("count_include_pad") else 0)
    return total / np.maximum(count, 1).astype(x.dtype)


@kernel(g.GlobalAveragePoolOp)
def _global_average_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    return np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel(g.MatMulOp)
def _matmul(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return contract(*args)


@kernel(g.GemmOp)
def _gemm(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    a, b, c = args
    a = a.T if op.attr("trans_a") else a
    b = b.T if op.attr("trans_b") else b
    t = a.dtype.type
    alpha, beta = op.attr("alpha"), op.attr("beta")
    y = contract(a, b) if alpha == 1 else contract(a, b) * t(alpha)
    if beta == 0:
        return y
    return y + (c if beta == 1 else c * t(beta))


@kernel(g.ConstantOp)
def _constant(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    assert isinstance(op, g.ConstantOp)
    return op.to_array()
