"""Reference kernel of `graph.loop`: the body region run once per iteration by the
reference executor itself (listed in `reference/kernels.py`)."""

from __future__ import annotations

import numpy as np

from smelt.dialects import graph as g
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register


@kernel(g.LoopOp)
def _loop(op: g.LoopOp, args: list[np.ndarray]) -> list[np.ndarray]:
    from smelt.reference.executor import run_block  # (it imports the kernel tables)

    n = op.n_carried
    carried, invariants = list(args[:n]), list(args[n:])
    scans: list[list[np.ndarray]] = [[] for _ in op.outputs[n:]]
    for i in range(op.trips):
        results = run_block(
            op.body.block, [np.array(i, np.int64), *carried, *invariants]
        )
        carried = results[:n]
        for column, value in zip(scans, results[n:]):
            column.append(value)
    return carried + [np.stack(column) for column in scans]
