"""Which contractions take the AVX512-BF16 GEMM path: one decision, read by
quant-cast (whether a matmul's or conv's operands become bf16) and by the
graph-to-loop lowering (whether it calls the bf16 GEMM), from the op's shapes and
the module's `#target.cpu`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from smelt.dialects import graph, target
from smelt.targets.cpu_spec import CpuSpec

FEATURE = "avx512bf16"
"""The CPU feature the bf16 GEMM needs (`vdpbf16ps`)."""


FAST_DOT = ("znver",)
"""LLVM CPU names (prefixes) whose `vdpbf16ps` outruns f32 FMAs, so that quant-cast
makes contractions bf16 there by default: AMD Zen 4 / 5 (bf16 GEMMs 1.4-1.7x f32
measured on a Zen 4). Not Intel's CPUs with avx512bf16 (cooperlake,
sapphirerapids, emeraldrapids, graniterapids): on an Emerald Rapids (a 2-core
VM, benchmarks/bf16.py's host) a zmm `vdpbf16ps` (2 FMAs' flops) issued every
0.53 ns (4 or 16 independent accumulators; 1.1 ns with the other core busy), a
zmm FMA every 0.13 ns (16): half the flops per second or less, and the bf16 GEMM
ran light_resnet50's 3x3 convs at ~0.1-0.5x the f32 schedule's speed. There
the contractions keep f32 compute (bf16 storage around them), as on AVX2;
their fast bf16 unit is AMX, which smelt does not use yet.
`quant-cast{contractions=true}` still asks for the bf16 GEMM on any avx512bf16
CPU."""


def fast_dot(op: Operation) -> bool:
    """Whether the module holding `op` targets a CPU whose bf16 dot beats f32
    (avx512bf16 and a `FAST_DOT` name)."""
    module = op.get_toplevel_object()
    attr = target.cpu_target(module) if isinstance(module, ModuleOp) else None
    if attr is None:
        return False
    spec = CpuSpec.from_attr(attr)
    return spec.has(FEATURE) and spec.name.startswith(FAST_DOT)


def has_fast_path(op: Operation) -> bool:
    """Whether `op` is a matmul / gemm that runs as the bf16 GEMM once its operands
    are bf16, on a CPU target whose bf16 dot is fast (`fast_dot`): a gemm without
    trans_a and with a constant B, or a matmul of a rank >= 2 A by a 2-D B, or by
    a B with A's own batch dims."""
    if not fast_dot(op):
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


MAX_COL_BYTES = 64 << 20
"""The largest bf16 im2col buffer a conv on the bf16 GEMM path builds; a bigger
one keeps the conv f32 (its f32 lowering has no such buffer)."""


@dataclass(frozen=True)
class ConvPlan:
    """A conv2d (group 1) as one bf16 GEMM: C[M, O] = cols[M, K] @ W[K, O], with
    M = N·OH·OW output pixels and K = the window: (kh, kw, c) in NHWC (the
    weights' OHWI order), (c, kh, kw) in NCHW (OIHW)."""

    nhwc: bool
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]

    @property
    def m(self) -> int:
        return self.n * self.oh * self.ow

    @property
    def k(self) -> int:
        return self.c * self.kh * self.kw

    @property
    def direct(self) -> bool:
        """NHWC 1x1, stride 1, no pads: the input itself is cols (no copy)."""
        return (
            self.nhwc and (self.kh, self.kw) == (1, 1) and self.strides == (1, 1)
            and not any(self.pads)
        )  # fmt: skip


def conv_plan(op: Operation) -> ConvPlan | None:
    """The GEMM form of conv2d `op` (group 1, 4-D), or None."""
    if not isinstance(op, graph.Conv2dOp) or op.attr("group") != 1:
        return None
    shapes = [graph.shape_of(v) for v in (op.input, op.weight, op.result)]
    if any(len(s) != 4 for s in shapes):
        return None
    (x, wt, out), nhwc = shapes, op.attr("layout", "nchw") == "nhwc"
    if nhwc:
        (n, h, w, c), (o, kh, kw, _), (_, oh, ow, _) = x, wt, out
    else:
        (n, c, h, w), (o, _, kh, kw), (_, _, oh, ow) = x, wt, out
    return ConvPlan(
        nhwc, n, c, h, w, o, kh, kw, oh, ow,
        tuple(op.attr("strides") or (1, 1)),  # type: ignore[arg-type]
        tuple(op.attr("dilations") or (1, 1)),  # type: ignore[arg-type]
        tuple(op.attr("pads") or (0, 0, 0, 0)),  # type: ignore[arg-type]
    )  # fmt: skip


def conv_has_fast_path(op: Operation) -> bool:
    """Whether conv2d `op` runs as the bf16 GEMM once its operands are bf16 (see
    lowering/lower_conv_bf16.py): a CPU target whose bf16 dot is fast
    (`fast_dot`), group 1, constant weights, an im2col buffer (where one is
    needed) of at most MAX_COL_BYTES."""
    weight = op.weight.owner if isinstance(op, graph.Conv2dOp) else None
    return isinstance(weight, graph.ConstantOp) and fast_dot(op) and conv_fits(op)


def conv_fits(op: Operation) -> bool:
    """What the lowering needs of a bf16 conv2d for the bf16 GEMM: group 1, an
    avx512bf16 target, an im2col buffer within MAX_COL_BYTES (it sees the weights
    as a `loop.constant` buffer and checks that itself)."""
    plan = conv_plan(op)
    if plan is None or not target_has_bf16(op) or 0 in (plan.m, plan.k, plan.o):
        return False
    return plan.direct or 2 * plan.m * plan.k <= MAX_COL_BYTES
