"""CPU schedules: which loop primitives run on which kernel pattern, with which
sizes. Decisions only; the mechanics are the loop passes (tile, interchange,
pack, unroll, promote) that `loop-schedule` applies in this order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CpuTarget:
    """What the schedule is sized for (2-core AVX2+FMA host: 16 ymm registers)."""

    width: int = 8  # f32 lanes of a vector register
    mr: int = 4  # micro-kernel rows: accumulators = mr · nr / width
    nr: int = 16  # micro-kernel columns (a multiple of width)
    kc: int = 256  # reduction block: an mr×kc A sliver and a kc×nr B sliver in L1
    mc: int = 120  # rows of A packed per block (L2)
    nc: int = 512  # columns of B packed per block (L2/L3)
    min_pack_reuse: int = 2  # pack an operand only if its tile is reused this often


@dataclass(frozen=True)
class Step:
    """One primitive application: `kind` is tile, interchange or pack."""

    kind: str
    role: str = ""
    sizes: tuple[int, ...] = ()
    order: tuple[str, ...] = ()
    operand: int = -1


MATMUL_ORDER = ("n.0", "k.0", "m.0", "n.1", "m.1", "m.2", "k.1", "n.2")
"""Goto/BLIS loop order: B block (k.0 × n.0) packed once, A block (m.0 × k.0)
packed per row block, the mr × nr micro-tile accumulated over k.1 in registers."""

POST_VECTORIZE = (
    'loop-unroll{loop="n.2"},loop-unroll{loop="m.2" jam=true},loop-promote{loop="k.1"}'
)
"""What turns the vectorized micro-tile into a register-blocked kernel: unroll the
vector columns, unroll-and-jam the rows into the k loop, keep C in registers."""


def _fit(size: int, extent: int, multiple: int) -> int:
    """`size` capped to `extent` rounded down to `multiple` (at least `multiple`)."""
    return max(multiple, min(size, extent // multiple * multiple))


def matmul(m: int, n: int, k: int, t: CpuTarget) -> list[Step]:
    """Register-blocked, cache-blocked, packed GEMM on the m-k-n band."""
    mr = min(t.mr, m)
    nr = t.nr if n >= t.nr else max(t.width, n // t.width * t.width)
    if n < t.width:
        return []  # nothing to vectorize along n: keep the plain band
    nc, kc, mc = _fit(t.nc, n, nr), min(t.kc, k), _fit(t.mc, m, mr)
    steps = [
        Step("tile", "n", (nc, nr)),
        Step("tile", "k", (kc,)),
        Step("tile", "m", (mc, mr)),
        Step("interchange", order=MATMUL_ORDER),
    ]
    if m >= t.min_pack_reuse * mr:
        steps.append(Step("pack", "k.0", operand=1))
    if n >= t.min_pack_reuse * nr:
        steps.append(Step("pack", "m.0", operand=0))
    return steps
