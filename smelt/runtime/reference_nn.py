"""Reference kernels of the graph dialect's neural-network ops: normalizations,
convolution, pooling and contractions (registered in `reference.KERNELS`).

Convolution is im2col (a strided window view, one copy) and a batched matmul per
group; pools reduce a window view; nothing loops in Python per element.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.runtime.reference import kernel, lowest, result_shape

# --- normalizations ------------------------------------------------------------


@kernel(g.LayerNormOp)
def _layer_norm(op: g.GraphOp, args: list[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias = (a.astype(np.float32) if a.dtype == np.float16 else a for a in args)
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


def _windows(
    x: np.ndarray,
    op: g.GraphOp,
    kernel: tuple[int, ...],
    pads: tuple[int, ...],
    fill: float | int = 0,
) -> np.ndarray:
    """View (N, C, OH, OW, KH, KW) of the windows of `op` over `x` padded by `pads`
    with `fill`; windows that ceil_mode lets run past the padding read `fill` too."""
    out = result_shape(op)[2:]
    strides, dil = op.attr("strides"), op.attr("dilations")
    span = [d * (k - 1) + 1 for d, k in zip(dil, kernel)]
    widths = [(0, 0), (0, 0)]
    for i in range(2):
        need = (out[i] - 1) * strides[i] + span[i]
        widths.append((pads[i], max(pads[i + 2], need - x.shape[2 + i] - pads[i])))
    xp = np.pad(x, widths, constant_values=fill)
    win = sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, :: strides[0], :: strides[1], :: dil[0], :: dil[1]]
    return win[:, :, : out[0], : out[1]]


@kernel(g.Conv2dOp)
def _conv2d(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x, w, b = args
    n, groups = x.shape[0], op.attr("group")
    o, cg, kh, kw = w.shape
    win = _windows(x, op, (kh, kw), op.attr("pads"))
    oh, ow = win.shape[2:4]
    # im2col per group: (G, N*OH*OW, Cg*KH*KW) @ (G, Cg*KH*KW, O/G)
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(groups, n * oh * ow, cg * kh * kw)
    wmat = w.reshape(groups, o // groups, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, wmat).reshape(groups, n, oh, ow, o // groups)
    y = y.transpose(1, 0, 4, 2, 3).reshape(n, o, oh, ow)
    return y + b.reshape(1, o, 1, 1)


@kernel(g.MaxPoolOp)
def _max_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    fill = lowest(x.dtype)
    win = _windows(x, op, op.attr("kernel_shape"), op.attr("pads"), fill)
    return win.max(axis=(-2, -1))


@kernel(g.AveragePoolOp)
def _average_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    kernel_shape, pads = op.attr("kernel_shape"), op.attr("pads")
    total = _windows(x, op, kernel_shape, pads).sum(axis=(-2, -1), dtype=x.dtype)
    # Each window divides by the cells it covers: the real ones, and the explicit
    # padding when count_include_pad (never the cells ceil_mode adds past it).
    pad_cell = 1 if op.attr("count_include_pad") else 0
    cells = np.pad(
        np.ones((1, 1) + x.shape[2:], dtype=x.dtype),
        [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])],
        constant_values=pad_cell,
    )
    count = _windows(cells, op, kernel_shape, (0, 0, 0, 0))
    return total / count.sum(axis=(-2, -1), dtype=x.dtype)


@kernel(g.GlobalAveragePoolOp)
def _global_average_pool(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    return np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel(g.MatMulOp)
def _matmul(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    return np.matmul(args[0], args[1])


@kernel(g.GemmOp)
def _gemm(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    a, b, c = args
    a = a.T if op.attr("trans_a") else a
    b = b.T if op.attr("trans_b") else b
    t = a.dtype.type
    alpha, beta = op.attr("alpha"), op.attr("beta")
    y = a @ b if alpha == 1 else (a @ b) * t(alpha)
    if beta == 0:
        return y
    return y + (c if beta == 1 else c * t(beta))


@kernel(g.ConstantOp)
def _constant(op: g.GraphOp, args: list[np.ndarray]) -> np.ndarray:
    assert isinstance(op, g.ConstantOp)
    return op.to_array()
