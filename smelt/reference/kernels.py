"""Every kernel of the reference executor, module by module (each module keeps its
own `KERNELS` table; an op class with two kernels is an error at import)."""

from __future__ import annotations

from smelt.reference import executor, index, loop, nn, quant, rnn, scan
from smelt.registry import merge

ALL_KERNELS = merge(
    executor.KERNELS,  # elementwise, data movement, reductions, softmax
    nn.KERNELS,  # convolutions, pools, normalizations, contractions
    scan.KERNELS,  # arg-reductions, cumulative sums, top-k
    index.KERNELS,  # gathers and scatters by index, one-hot, trilu
    rnn.KERNELS,  # LSTM, GRU, RNN time loops
    loop.KERNELS,  # counted loops (graph.loop)
    quant.KERNELS,  # quantize, dequantize, requantize
)
