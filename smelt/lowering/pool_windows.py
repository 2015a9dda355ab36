"""Pool windows that hold no input cell (a dilated window can lie wholly in the
padding): which dims have one, and what such a window gives. onnxruntime's
dilated-pool path starts MaxPool at the lowest finite value of the type and
AveragePool without count_include_pad at a sum of 0 over a count of 0, which it
reports as 0; smelt's pool kernels do the same."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.ir import SSAValue

from smelt.dialects import dtypes
from smelt.lowering.scalar_ops import Arith


def hollow(
    in_sp: Sequence[int],
    out_sp: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    lows: Sequence[int],
    dilations: Sequence[int],
    highs: Sequence[int] | None = None,
) -> bool:
    """Whether some output position's window holds no cell of [0, in) in some dim
    (of [-low, in + high) when `highs` is given: the cells count_include_pad
    counts)."""
    for d, size in enumerate(in_sp):
        lo = -lows[d] if highs is not None else 0
        hi = size + highs[d] if highs is not None else size
        for o in range(out_sp[d]):
            start = o * strides[d] - lows[d]
            cells = (start + j * dilations[d] for j in range(kernel[d]))
            if not any(lo <= i < hi for i in cells):
                return True
    return False


def finite_lowest(a: Arith) -> SSAValue:
    """The lowest value of the stored type: -FLT_MAX for f32 (not -inf), the type's
    minimum for integers (what `Arith.lowest` gives them)."""
    if not a.is_float:
        return a.lowest()
    storage = a.storage
    if storage == dtypes.bf16:
        return a.const(-float.fromhex("0x1.fep127"))
    if storage == dtypes.f16:
        return a.const(float(np.finfo(np.float16).min))
    if storage == dtypes.f64:
        return a.const(float(np.finfo(np.float64).min))
    return a.const(float(np.finfo(np.float32).min))


def nonzero_count(a: Arith, count: SSAValue) -> SSAValue:
    """max(count, 1): a window that counts no cell sums to 0, and 0 / 1 is the 0
    onnxruntime gives for it (0 / 0 would be NaN)."""
    return a.max(count, a.one())
