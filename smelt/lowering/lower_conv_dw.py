"""NHWC depthwise conv (one filter per channel) in registers: one loop nest n, oh,
ow-tile, c with the KH·KW taps unrolled in the body and a register tile of T
output pixels along W, so that each weight vector is loaded once per tap and
used T times. The channels are innermost and unit-stride in x, w and out
(loop-vectorize puts them in vector lanes), the accumulators are values (never
stored), the bias is their start and the fused epilogue (BatchNorm already folded
into weights and bias, HardSwish / Relu6 / ...) runs in the same body:

    loop.for n, oh, owt, c parallel {
      acc[t] = bias[c] + Σ_{i,j} x[n, oh·sh + i·dh, (owt·T + t)·sw + j·dw, c]·w[i, j, c]
      y[n, oh, owt·T + t, c] = epilogue(acc[t])      for t < T
    }

x is the zero-padded copy (prepare_conv2d), so no tap is guarded. OW not a
multiple of T: a second nest for the last OW mod T columns, one pixel each.
"""

from __future__ import annotations

from xdsl.ir import SSAValue

from smelt.lowering.kernel_io import KernelIO
from smelt.lowering.loop_builder import Index
from smelt.lowering.scalar_ops import Arith

TILE = 1

CHAINS = 4
"""Partial sums per pixel (taps round-robin): FMA chains of KH·KW / CHAINS steps,
so the FMA latency overlaps instead of one chain of KH·KW dependent FMAs."""
"""Output pixels along W per register tile (T accumulators + 1 weight + 1 input
vector per tap stay well inside the 16 / 32 vector registers)."""


def conv_depthwise_registers(
    io: KernelIO, a: Arith, conv, x: SSAValue, w: SSAValue
) -> None:
    """out = epilogue(bias + window sum) per channel, T pixels at a time; `conv`
    is lower_conv_nhwc.Conv with cg == og == 1."""
    k = io.k
    c_size = conv.groups
    (sh, sw), (dh, dw) = conv.strides, conv.dilations
    tile = min(TILE, conv.ow)
    full, rest = divmod(conv.ow, tile)

    def body(n: Index, oh: Index, ows: list[Index], c: Index) -> None:
        taps = [(i, j) for i in range(conv.kh) for j in range(conv.kw)]
        chains = min(CHAINS, len(taps))
        # accs[t][p]: pixel t's partial sum over the taps p, p + chains, ...
        accs: list[list[SSAValue | None]] = [[None] * chains for _ in ows]
        for tap, (i, j) in enumerate(taps):
            row = k.affine([(oh, sh)], i * dh)
            wv = k.load_value(w, [k.index(i), k.index(j), c])
            for t, ow in enumerate(ows):
                col = k.affine([(ow, sw)], j * dw)
                product = a.mul(k.load_value(x, [n, row, col, c]), wv)
                p = tap % chains
                prev = accs[t][p]
                accs[t][p] = product if prev is None else a.add(prev, product)
        bias = io.read(2, [c])
        for partial, ow in zip(accs, ows):
            total = bias
            for value in partial:
                total = a.add(total, value)
            io.write(0, total, [n, oh, ow, c])

    if full:
        with k.nest([conv.n, conv.oh, full, c_size]) as (n, oh, owt, c):
            body(n, oh, [k.affine([(owt, tile)], t) for t in range(tile)], c)
    if rest:
        with k.nest([conv.n, conv.oh, rest, c_size]) as (n, oh, r, c):
            body(n, oh, [k.affine([(r, 1)], full * tile)], c)
