"""Every kernel of the reference executor, module by module (each module keeps its
own `KERNELS` table; an op class with two kernels is an error at import)."""

from __future__ import annotations

from smelt.registry import merge
from smelt.runtime import (
    reference,
    reference_index,
    reference_loop,
    reference_nn,
    reference_quant,
    reference_rnn,
    reference_scan,
)

ALL_KERNELS = merge(
    reference.KERNELS,  # elementwise, data movement, reductions, softmax
    reference_nn.KERNELS,  # convolutions, pools, normalizations, contractions
    reference_scan.KERNELS,  # arg-reductions, cumulative sums, top-k
    reference_index.KERNELS,  # gathers and scatters by index, one-hot, trilu
    reference_rnn.KERNELS,  # LSTM, GRU, RNN time loops
    reference_loop.KERNELS,  # counted loops (graph.loop)
    reference_quant.KERNELS,  # quantize, dequantize, requantize
)
