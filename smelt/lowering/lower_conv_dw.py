"""NHWC f32 depthwise conv (one filter per channel) in registers: one loop nest
n, channel block, oh, ow, c with the KH·KW taps unrolled in the body. The channels
are innermost and unit-stride in x, w and out (loop-vectorize puts them in vector
lanes); the sums are values (never stored): CHAINS partial sums per pixel, so that
the FMA latency overlaps, then the bias and the fused epilogue (BatchNorm already
folded into weights and bias by graph-fold-batchnorm; HardSwish, Relu6, ...) in the
same body, and one store per output vector:

    loop.for n, cb, oh, ow, ci parallel {          c = cb·CB + ci
      acc_p = Σ_{taps t ≡ p mod CHAINS} x[n, oh·sh + i·dh, ow·sw + j·dw, c]·w[i, j, c]
      y[n, oh, ow, c] = epilogue(bias[c] + acc_0 + ... + acc_{CHAINS-1})
    }

No padded copy of x: the interior pixels (every tap inside the input) run in a
nest without guards; the border rows and columns in four small nests whose taps
clamp the index and select 0 outside (the loop-invariant condition costs a
broadcast, not a per-lane test). Channel
blocks CB where the weights outgrow L1 (512 channels of a 5x5 window: 51 KiB of
weights and 5 input rows of 18·512 floats, 184 KiB, read from L2 otherwise).

No register tile of several pixels along W: loop-vectorize refuses a loop that
stores to one buffer at two addresses in one iteration ("a store may overlap
another access"), even where the addresses are a whole row apart.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from smelt.dialects import dtypes, graph
from smelt.lowering.kernel_io import KernelIO
from smelt.lowering.loop_builder import shape
from smelt.lowering.scalar_ops import Arith

CHAINS = 4
"""Partial sums per pixel (taps round-robin): FMA chains of KH·KW / CHAINS steps
instead of one chain of KH·KW dependent FMAs."""

L1_BYTES = 48 << 10
"""The L1d a channel block's weights and KH input rows should fit."""

WEIGHT_BYTES = 16 << 10
"""Weights up to this size stay in L1 unblocked: no channel blocks (blocks of a
64- or 128-channel 3x3 layer measured slower: each pixel's channels are then
read in part, by cache line halves)."""


def channel_block(channels: int, kh: int, kw: int, padded_width: int,
                  elem: int = 4) -> int:  # fmt: skip
    """CB: all channels while the weights fit WEIGHT_BYTES (or 32 does not divide
    the channels); else the widest block of 32·2^k channels dividing them whose
    weights and KH padded input rows fit L1_BYTES (32 at least)."""
    if kh * kw * channels * elem <= WEIGHT_BYTES or channels % 32:
        return channels
    per_channel = (kh * padded_width + kh * kw) * elem
    block = 32
    while channels % (block * 2) == 0 and per_channel * block * 2 <= L1_BYTES:
        block *= 2
    return block


def handles(op: graph.Conv2dOp) -> bool:
    """Whether the NHWC conv `op` lowers here: f32 in and out, depthwise."""
    from smelt.lowering.lower_conv_nhwc import Conv

    values = (op.input, op.weight, op.result)
    return (
        all(graph.element_type_of(v) == dtypes.f32 for v in values)
        and Conv.of(op).depthwise
    )


def _interior(out: int, size: int, k: int, stride: int, dilation: int,
              low: int) -> tuple[int, int]:  # fmt: skip
    """[lo, hi): the outputs of one spatial dim whose every tap is inside the
    input (0 <= o·stride + t·dilation - low < size for all taps t)."""
    lo = min(out, -(-low // stride))
    last = size - 1 + low - (k - 1) * dilation  # o·stride <= last
    hi = min(out, last // stride + 1) if last >= 0 else 0
    return lo, max(lo, hi)


def conv_depthwise_registers(
    io: KernelIO, a: Arith, conv, x: SSAValue, w: SSAValue, pads: list[int]
) -> None:
    """out = epilogue(bias + window sum) per channel; `conv` is
    lower_conv_nhwc.Conv with cg == og == 1, x the unpadded NHWC input: the
    interior (every tap inside) in one nest without guards, the border rows and
    columns in nests whose taps are clamped and selected (0 outside)."""
    k = io.k
    channels = conv.groups
    _, height, width, _ = shape(x)
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    cb = channel_block(channels, conv.kh, conv.kw, width + pads[1] + pads[3])
    taps = [(i, j) for i in range(conv.kh) for j in range(conv.kw)]
    chains = min(CHAINS, len(taps))
    rows = _interior(conv.oh, height, conv.kh, sh, dh, pads[0])
    cols = _interior(conv.ow, width, conv.kw, sw, dw, pads[1])

    def body(n, block, oh, ow, ci, guard_rows: bool, guard_cols: bool) -> None:
        c = k.affine([(block, cb), (ci, 1)]) if cb < channels else ci
        partial: list[SSAValue | None] = [None] * chains
        for tap, (i, j) in enumerate(taps):
            row = k.affine([(oh, sh)], i * dh - pads[0])
            col = k.affine([(ow, sw)], j * dw - pads[1])
            inside = []
            if guard_rows:
                inside.append(k.in_range(row, 0, height))
                row = k.clamp(row, 0, height - 1)
            if guard_cols:
                inside.append(k.in_range(col, 0, width))
                col = k.clamp(col, 0, width - 1)
            xv = k.load_value(x, [n, row, col, c])
            valid = k.and_all(inside)
            if valid is not None:
                xv = a.select(valid, xv, a.zero())
            product = a.mul(xv, k.load_value(w, [k.index(i), k.index(j), c]))
            prev = partial[tap % chains]
            partial[tap % chains] = product if prev is None else a.add(prev, product)
        total = io.read(2, [c])
        for value in partial:
            total = a.add(total, value)
        io.write(0, total, [n, oh, ow, c])

    def region(oh_range, ow_range, guard_rows: bool, guard_cols: bool) -> None:
        if oh_range[0] >= oh_range[1] or ow_range[0] >= ow_range[1]:
            return
        with (
            k.nest([conv.n, channels // cb]) as (n, block),
            k.loop(oh_range[1], lb=oh_range[0]) as oh,
            k.loop(ow_range[1], lb=ow_range[0]) as ow,
            k.loop(cb) as ci,
        ):
            body(n, block, oh, ow, ci, guard_rows, guard_cols)

    full_w = (0, conv.ow)
    region((0, rows[0]), full_w, True, True)
    region(rows, (0, cols[0]), False, True)
    region(rows, cols, False, False)
    region(rows, (cols[1], conv.ow), False, True)
    region((rows[1], conv.oh), full_w, True, True)
