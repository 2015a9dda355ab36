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
    """One primitive application: `kind` is tile, interchange, pack, unroll
    (`sizes[0]` is the factor, 0 for full), fuse (the kernel's sibling nests) or
    pack_constant (argument `operand`, at compile time)."""

    kind: str
    role: str = ""
    sizes: tuple[int, ...] = ()
    order: tuple[str, ...] = ()
    operand: int = -1


MATMUL_ORDER = ("n.0", "k.0", "m.0", "n.1", "m.1", "m.2", "k.1", "n.2")
"""Goto/BLIS loop order: B block (k.0 × n.0) packed once, A block (m.0 × k.0)
packed per row block, the mr × nr micro-tile accumulated over k.1 in registers."""

CONV_ORDER = ("g", "m.0", "n.0", "n.1", "m.1", "m.2", "kh", "kw", "k", "n.2")
"""Implicit-GEMM conv whose input channels fit one reduction block (k not tiled):
the whole K = (kh, kw, ic) runs inside the micro-kernel, so the C tile stays in
registers."""

CONV_ORDER_BLOCKED = (
    "g", "m.0", "n.0", "kh", "kw", "k.0", "n.1", "m.1", "m.2", "k.1", "n.2"
)  # fmt: skip
"""The same with the input channels blocked by kc: the window loops stay outside
the channel blocks (the reduction keeps its order)."""

MAX_WINDOW_UNROLL = 64
"""Window reductions up to this many positions are unrolled."""

POST_VECTORIZE = (
    'loop-unroll{loop="n.2"},loop-unroll{loop="m.2" jam=true},loop-promote{loop="k.1"},'
    'loop-promote{loop="k"},loop-promote{loop="kw"},loop-promote{loop="kh"}'
)
"""What turns the vectorized micro-tile into a register-blocked kernel: unroll the
vector columns, unroll-and-jam the rows into the k loop, keep C in registers (across
the conv window loops too, when they are inside the micro-kernel)."""


def _fit(size: int, extent: int, multiple: int) -> int:
    """`size` capped to `extent` rounded down to `multiple` (at least `multiple`)."""
    return max(multiple, min(size, extent // multiple * multiple))


def matmul(
    m: int, n: int, k: int, t: CpuTarget, constant_b: bool = False
) -> list[Step]:
    """Register-blocked, cache-blocked, packed GEMM on the m-k-n band; a constant
    B (weights) is packed at compile time, in the order the loops read it."""
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
        Step("fuse"),
    ]
    if not constant_b and m >= t.min_pack_reuse * mr:
        steps.append(Step("pack", "k.0", operand=1))
    if n >= t.min_pack_reuse * nr:
        steps.append(Step("pack", "m.0", operand=0))
    if constant_b:
        steps.append(Step("pack_constant"))
    return steps


def _blocks(size: int, block: int, multiple: int) -> int:
    """A block size near `block` that splits `size` into equal blocks (a multiple
    of `multiple`), so no small remainder block is left."""
    count = max(1, -(-size // block))
    even = -(-size // count)
    return max(multiple, -(-even // multiple) * multiple)


def conv2d(m: int, n: int, k: int, t: CpuTarget) -> list[Step]:
    """Implicit GEMM (M output pixels, N output channels, K input channels per
    window position): the matmul blocking without packing (the weights are packed
    at compile time, the input is read in place), window loops inside the
    micro-kernel when the channels fit one kc block."""
    if n < t.width:
        return []
    mr = min(t.mr, m)
    nr = t.nr if n >= t.nr else max(t.width, n // t.width * t.width)
    nc, mc = _fit(t.nc, n, nr), _blocks(m, t.mc, mr)
    steps = [Step("tile", "n", (nc, nr)), Step("tile", "m", (mc, mr))]
    if k <= t.kc:
        steps.append(Step("interchange", order=CONV_ORDER))
    else:
        steps.append(Step("tile", "k", (_blocks(k, t.kc, 1),)))
        steps.append(Step("interchange", order=CONV_ORDER_BLOCKED))
    return [*steps, Step("fuse"), Step("pack_constant")]


def window(size: int, t: CpuTarget) -> list[Step]:
    """Unroll a small window reduction (a pool's kh × kw, LRN's channels), so the
    loop around it is innermost and vectorizes."""
    if size > MAX_WINDOW_UNROLL:
        return []
    return [Step("unroll", "kw", (0,)), Step("unroll", "kh", (0,))]
