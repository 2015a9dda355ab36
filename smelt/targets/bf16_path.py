"""Which contractions take the AVX512-BF16 GEMM path: one decision, read by
quant-cast (whether a matmul's operands become bf16) and by the graph-to-loop
lowering (whether it calls the bf16 GEMM), from the op's shapes and the module's
`#target.cpu`."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from smelt.dialects import graph, target
from smelt.targets.cpu_spec import CpuSpec

FEATURE = "avx512bf16"
"""The CPU feature the bf16 GEMM needs (`vdpbf16ps`)."""


def has_fast_path(op: Operation) -> bool:
    """Whether `op` is a matmul / gemm that runs as the bf16 GEMM once its operands
    are bf16, on a CPU target with avx512bf16: a gemm without trans_a and with a
    constant B, or a matmul of a rank >= 2 A by a 2-D B, or by a B with A's own
    batch dims."""
    if not target_has_bf16(op):
        return False
    return gemm_plan(op) is not None and (
        not isinstance(op, graph.GemmOp) or isinstance(op.rhs.owner, graph.ConstantOp)
    )


def gemm_plan(op: Operation) -> tuple[int, int] | None:
    """(G, M): the GEMM count and rows of `op` on this path, or None."""
    ls, rs = graph.shape_of(op.lhs), graph.shape_of(op.rhs)
    if isinstance(op, graph.GemmOp):
        return None if op.attr("trans_a") else (1, ls[0])
    if not isinstance(op, graph.MatMulOp) or len(ls) < 2 or len(rs) < 2:
        return None
    if len(rs) == 2:
        return 1, int(np.prod(ls[:-1]))
    if ls[:-2] != rs[:-2]:
        return None
    return int(np.prod(ls[:-2])), ls[-2]


def target_has_bf16(op: Operation) -> bool:
    """Whether the module holding `op` is compiled for a CPU with avx512bf16."""
    module = op.get_toplevel_object()
    attr = target.cpu_target(module) if isinstance(module, ModuleOp) else None
    return attr is not None and CpuSpec.from_attr(attr).has(FEATURE)
