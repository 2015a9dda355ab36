"""ONNX DFT and STFT as matmuls with constant Fourier matrices; MelWeightMatrix as
elementwise math over its bins.

Every DFT variant (forward or inverse, real or complex input, one-sided output or
a one-sided input expanded to a real signal) is linear in the input, so with a
static length it is one `graph.matmul` of the signal (its axis and real/imaginary
dim moved last and flattened) with a constant matrix built here in float64. STFT
gathers its frames with constant indices, multiplies by the window and takes the
same one-sided DFT. There is no FFT kernel: a transform whose matrix would be too
large is refused.
"""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import (
    Const,
    NodeContext,
    Value,
    element_type,
    numpy_type_of,
    shape_of,
)
from smelt.frontend.onnx_arith import Arith
from smelt.frontend.onnx_ops import axis_of
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
handles = HANDLERS.register

MAX_MATRIX = 1 << 24  # elements of a Fourier matrix (64 MiB in f32)


def fourier_matrix(
    length: int, n: int, complex_in: bool, inverse: bool, onesided: bool
) -> np.ndarray:
    """The (length * c_in, bins * c_out) float64 matrix of one DFT: rows are the
    input positions (real, imaginary interleaved when complex_in), columns the
    output bins (real, imaginary interleaved; real only for an inverse of a
    one-sided spectrum). Input positions past n are cut, missing ones are zeros."""
    used = min(length, n)
    j = np.arange(used)[:, None]  # input position
    if inverse and onesided:  # one-sided spectrum -> real signal of length n
        k = np.arange(n)[None, :]  # output sample
        bins = np.arange(used)[:, None]
        weight = np.where((bins == 0) | (2 * bins == n), 1.0, 2.0) / n
        weight = np.where(bins <= n // 2, weight, 0.0)  # bins past n//2 unused
        angle = 2 * np.pi * ((bins * k) % n) / n
        real = np.stack([weight * np.cos(angle), -weight * np.sin(angle)], axis=1)
        out = np.zeros((length, 2, n, 1))
        out[:used, :, :, 0] = real
        return _rows(out, complex_in)
    bins = n // 2 + 1 if onesided and not inverse else n
    k = np.arange(bins)[None, :]
    angle = 2 * np.pi * ((j * k) % n) / n
    sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
    cos, sin = scale * np.cos(angle), sign * scale * np.sin(angle)
    # (a + ib)(cos + i sin) = (a cos - b sin) + i (a sin + b cos)
    out = np.zeros((length, 2, bins, 2))
    out[:used, 0, :, 0], out[:used, 0, :, 1] = cos, sin
    out[:used, 1, :, 0], out[:used, 1, :, 1] = -sin, cos
    return _rows(out, complex_in)


def _rows(out: np.ndarray, complex_in: bool) -> np.ndarray:
    """(length, 2, bins, c_out) -> the matrix for real (c_in 1) or complex input."""
    if not complex_in:
        out = out[:, :1]
    return out.reshape(out.shape[0] * out.shape[1], -1)


def dft(
    ctx: NodeContext,
    x: Value,
    axis: int,
    n: int,
    inverse: bool,
    onesided: bool,
) -> Value:
    """The DFT of x (..., 1 or 2) along `axis` as one matmul."""
    shape = shape_of(x)
    rank, length, c_in = len(shape), shape[axis], shape[-1]
    matrix_shape = (length * c_in, (n if inverse or not onesided else n // 2 + 1))
    if math.prod(matrix_shape) * 2 > MAX_MATRIX:
        raise ctx.unsupported(
            f"a DFT of length {n} over {length} inputs is not supported: smelt "
            "computes it as a matmul with a dense Fourier matrix (no FFT kernel), "
            f"which would hold more than {MAX_MATRIX} elements"
        )
    matrix = fourier_matrix(length, n, c_in == 2, inverse, onesided)
    c_out = 1 if inverse and onesided else 2
    bins = matrix.shape[1] // c_out
    dtype = numpy_type_of(x)
    # f16 / bf16 signals are transformed in f32 (a sum of n terms).
    work = np.dtype(np.float32) if dtype.itemsize < 4 else dtype
    if dtype != work:
        x = ctx.emit(g.CastOp, [x], to=dtypes.from_numpy(work))[0]
    rest = [d for i, d in enumerate(shape[:-1]) if i != axis]
    perm = [i for i in range(rank - 1) if i != axis] + [axis, rank - 1]
    if perm != list(range(rank)):
        x = ctx.emit(g.TransposeOp, [x], perm=perm)[0]
    flat = ctx.reshape(x, (math.prod(rest), length * c_in))
    y = ctx.emit(g.MatMulOp, [flat, Const(matrix.astype(work))])[0]
    if dtype != work:
        y = ctx.emit(g.CastOp, [y], to=dtypes.from_numpy(dtype))[0]
    y = ctx.reshape(y, (*rest, bins, c_out))
    back = list(range(rank - 2))
    back.insert(axis, rank - 2)
    back.append(rank - 1)
    if back != list(range(rank)):
        y = ctx.emit(g.TransposeOp, [y], perm=back)[0]
    return y


def _scalar(ctx: NodeContext, i: int, what: str) -> int | None:
    value = ctx.const(i, what)
    if value is None:
        return None
    if value.size != 1:
        raise SmeltError(f"{ctx.label}: its {what} must hold one value")
    return int(value.reshape(-1)[0])


def _float_signal(ctx: NodeContext, x: Value) -> tuple[int, ...]:
    shape = shape_of(x)
    if numpy_type_of(x).kind != "f":
        raise SmeltError(f"{ctx.label}: the signal must be floats")
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise SmeltError(
            f"{ctx.label}: the signal's last dim holds the real (1) or real and "
            f"imaginary (2) parts; got shape {list(shape)}"
        )
    return shape


@handles("DFT")
def _dft(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    shape = _float_signal(ctx, x)
    rank = len(shape)
    if ctx.opset >= 20:
        given = _scalar(ctx, 2, "axis (it decides the output shape)")
        axis = -2 if given is None else given
    else:
        axis = int(ctx.attr("axis", 1))
    axis = axis_of(ctx, axis, rank)
    if axis == rank - 1:
        raise SmeltError(f"{ctx.label}: axis {axis} is the real/imaginary dim")
    inverse = bool(ctx.attr("inverse", 0))
    onesided = bool(ctx.attr("onesided", 0))
    n = _scalar(ctx, 1, "dft_length (it decides the output shape)")
    if n is None:
        n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if n <= 0:
        raise SmeltError(f"{ctx.label}: dft_length {n} must be positive")
    return [dft(ctx, x, axis, n, inverse, onesided)]


@handles("STFT")
def _stft(ctx: NodeContext) -> list[Value]:
    """Frames (gathered with constant indices) times the window, then a DFT of
    each frame along the frame axis."""
    x = ctx.inputs[0]
    shape = _float_signal(ctx, x)
    if len(shape) != 3:
        raise SmeltError(f"{ctx.label}: the signal must be [batch, length, 1 or 2]")
    step = _scalar(ctx, 1, "frame_step (it decides the output shape)")
    window = ctx.input(2)
    length = _scalar(ctx, 3, "frame_length (it decides the output shape)")
    if window is not None:
        wshape = shape_of(window)
        if len(wshape) != 1 or (length is not None and wshape[0] != length):
            raise SmeltError(
                f"{ctx.label}: the window must be 1-D of frame_length {length}, got "
                f"shape {list(wshape)}"
            )
        length = wshape[0]
    if length is None:
        length = shape[1]
    if step is None or step <= 0 or not 0 < length <= shape[1]:
        raise SmeltError(
            f"{ctx.label}: needs a positive frame_step and a frame_length in "
            f"[1, {shape[1]}]; got {step} and {length}"
        )
    frames = 1 + (shape[1] - length) // step
    index = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    y = ctx.emit(g.GatherOp, [x, Const(index.astype(np.int64))], axis=1)[0]
    if window is not None:
        y = ctx.emit(g.MulOp, [y, ctx.reshape(window, (1, 1, length, 1))])[0]
    onesided = bool(ctx.attr("onesided", 1))
    return [dft(ctx, y, 2, length, False, onesided)]


@handles("MelWeightMatrix")
def _mel_weight_matrix(ctx: NodeContext) -> list[Value]:
    """Triangular filters over the spectrogram bins, one per mel bin: the band
    edges are mel-spaced frequencies (computed at run time from sample_rate and
    the edge frequencies, in f64) floored to bins; the weights rise from a
    filter's lower edge to its center and fall to its upper edge."""
    mels = _scalar(ctx, 0, "num_mel_bins (it decides the output shape)")
    length = _scalar(ctx, 1, "dft_length (it decides the output shape)")
    if mels is None or length is None or mels < 1 or length < 1:
        raise SmeltError(f"{ctx.label}: needs positive num_mel_bins and dft_length")
    rate, low, high = ctx.inputs[2:5]
    m = Arith(ctx, np.float64)
    to_mel = 2595.0 / math.log(10)

    def mel(hz: Value) -> Value:
        return m.mul(m.op(g.LogOp, m.add(m.div(m.cast(hz, np.float64), 700.0), 1.0)),
                     to_mel)  # fmt: skip

    low_mel, high_mel = mel(low), mel(high)
    step = m.div(m.sub(high_mel, low_mel), float(mels + 2))
    points = m.add(m.mul(np.arange(mels + 2, dtype=np.float64), step), low_mel)
    hz = m.mul(m.sub(m.op(g.ExpOp, m.div(points, to_mel)), 1.0), 700.0)
    edges = m.floor(m.div(m.mul(hz, float(length + 1)), m.cast(rate, np.float64)))
    lo, center, hi = (
        ctx.reshape(_slice(ctx, edges, s, s + mels), (1, mels)) for s in (0, 1, 2)
    )
    j = np.arange(length // 2 + 1, dtype=np.float64).reshape(-1, 1)
    ge, le, lt, eq = g.GreaterEqualOp, g.LessEqualOp, g.LessOp, g.EqualOp
    rise_span, fall_span = m.sub(center, lo), m.sub(hi, center)
    rising = m.both(m.both(m.op(ge, j, lo), m.op(le, j, center)),
                    m.greater(rise_span, 0.0))  # fmt: skip
    falling = m.both(m.both(m.op(ge, j, center), m.op(lt, j, hi)),
                     m.greater(fall_span, 0.0))  # fmt: skip
    peak = m.both(m.op(eq, rise_span, 0.0), m.op(eq, j, center))
    safe_rise = m.where(rising, rise_span, 1.0)
    safe_fall = m.where(falling, fall_span, 1.0)
    up = m.div(m.sub(j, lo), safe_rise)
    down = m.div(m.sub(hi, j), safe_fall)
    weights = m.where(falling, down, m.where(rising, up, m.where(peak, 1.0, 0.0)))
    to = element_type(ctx.attr("output_datatype", 1), f"{ctx.label}: output_datatype")
    return [m.cast(weights, dtypes.to_numpy(to))]


def _slice(ctx: NodeContext, x: Value, start: int, end: int) -> Value:
    return ctx.emit(g.SliceOp, [x], starts=[start], ends=[end], steps=[1])[0]
