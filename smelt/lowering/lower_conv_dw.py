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

x is the zero-padded copy (prepare_conv2d), so no tap is guarded. Channel
blocks CB where the weights outgrow L1 (512 channels of a 5x5 window: 51 KiB of
weights and 5 input rows of 18·512 floats, 184 KiB, read from L2 otherwise).

No register tile of several pixels along W: loop-vectorize refuses a loop that
stores to one buffer at two addresses in one iteration ("a store may overlap
another access"), even where the addresses are a whole row apart.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

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


def conv_depthwise_registers(
    io: KernelIO, a: Arith, conv, x: SSAValue, w: SSAValue
) -> None:
    """out = epilogue(bias + window sum) per channel; `conv` is
    lower_conv_nhwc.Conv with cg == og == 1, x the padded NHWC input."""
    k = io.k
    channels = conv.groups
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    cb = channel_block(channels, conv.kh, conv.kw, shape(x)[2])
    taps = [(i, j) for i in range(conv.kh) for j in range(conv.kw)]
    chains = min(CHAINS, len(taps))
    bounds = [conv.n, channels // cb, conv.oh, conv.ow, cb]
    with k.nest(bounds) as (n, block, oh, ow, ci):
        c = k.affine([(block, cb), (ci, 1)]) if cb < channels else ci
        partial: list[SSAValue | None] = [None] * chains
        for tap, (i, j) in enumerate(taps):
            row = k.affine([(oh, sh)], i * dh)
            col = k.affine([(ow, sw)], j * dw)
            wv = k.load_value(w, [k.index(i), k.index(j), c])
            product = a.mul(k.load_value(x, [n, row, col, c]), wv)
            prev = partial[tap % chains]
            partial[tap % chains] = product if prev is None else a.add(prev, product)
        total = io.read(2, [c])
        for value in partial:
            total = a.add(total, value)
        io.write(0, total, [n, oh, ow, c])


