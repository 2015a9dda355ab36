"""CPU schedules: which loop primitives run on which kernel pattern, with which
sizes, derived from a `CpuSpec`. Decisions only: `loop-schedule-plan` records a
kernel's steps and `loop-schedule-apply` runs the loop primitives (tile,
interchange, fuse, pack, pack_constant, unroll), one kind at a time in that order,
so every schedule lists its steps in that order."""

from __future__ import annotations

from dataclasses import dataclass

from smelt.targets.cpu_spec import CpuSpec


@dataclass(frozen=True)
class CpuSchedule:
    """The sizes a schedule uses (defaults: an AVX2 + FMA core, 16 ymm registers);
    `for_spec` derives them from a CPU."""

    width: int = 8  # f32 lanes of a vector register
    mr: int = 6  # micro-kernel rows: accumulators = mr · nr / width (12 of 16 ymm)
    nr: int = 16  # micro-kernel columns (a multiple of width)
    kc: int = 256  # reduction block: an mr×kc A sliver and a kc×nr B sliver in L1
    mc: int = 120  # rows of A packed per block (L2)
    nc: int = 512  # columns of B packed per block (L2/L3)
    min_pack_reuse: int = 2  # pack an operand only if its tile is reused this often
    unroll_k: int = 4  # a conv's channel loop this short is unrolled (RGB input)
    min_blocks: int = 1  # outer m × n blocks (threads): smaller blocks if fewer
    transpose_tile: int = 16  # tile of a transpose's two contiguous dims (L1)
    l2: int = 256 << 10  # bytes of L2 per core (whole-K convs: WHOLE_K_SLIVER)

    @staticmethod
    def for_spec(spec: CpuSpec, min_blocks: int = 1) -> CpuSchedule:
        """Sizes from the CPU: the micro-kernel holds `vector_registers / 8`
        vector columns of C and as many rows as the registers allow beside one B
        vector per column and the A broadcast (16 ymm: 6 × 16, 12 accumulators;
        32 zmm: 6 × 64, 24 accumulators: measured on Zen 5 against 14 × 32, which
        spills in the k loop, and 8 × 48); the kc × nr B sliver fills half of
        L1d, the mc × kc A block a quarter of L2, the kc × nc B block L2."""
        width = spec.lanes(32)
        columns = max(1, spec.vector_registers // 8)
        nr = columns * width
        mr = (spec.vector_registers - columns - 1) // columns
        kc = _round(spec.l1d // 2 // (nr * 4), 8)
        mc = _round(spec.l2 // 4 // (kc * 4), mr)
        nc = _round(spec.l2 // (kc * 4), nr)
        return CpuSchedule(
            width=width, mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, min_blocks=min_blocks,
            transpose_tile=max(16, width), l2=spec.l2,
        )  # fmt: skip


def _round(size: int, unit: int) -> int:
    """`size` rounded down to a multiple of `unit` (at least one unit)."""
    return max(unit, size // unit * unit)


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

MATMUL_ORDER_CONSTANT_B = ("m.0", "n.0", "k.0", "n.1", "m.1", "m.2", "k.1", "n.2")
"""With B packed at compile time nothing is repacked per block, so the C block
(m.0 × n.0) stays put across k.0 and both block loops are outside the reduction
(parallel blocks for threads); A is packed per (m.0, n.0, k.0) block."""

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

K_UNROLL = 4
"""The micro-kernel's reduction loop is unrolled this many times (the presets'
`POST_VECTORIZE` in smelt/compiler/pipelines.py): 12 FMAs per k step leave the
front end too little room for the loop's own instructions."""

TAIL_ROWS = 2
"""The remainder tile of the micro-kernel's rows (fewer than mr) is unroll-and-
jammed by this many rows and looped (the presets' `POST_VECTORIZE`), not copied
whole: a 2 × 64 block still has 8 independent FMA chains per k step, enough to
hide the FMA latency, and each conv compiles a 2-row copy instead of an
(M mod mr)-row one."""

BLOCKS_PER_THREAD = 4
"""With threads, GEMM / conv blocks are made small enough for this many per thread
(the `min_blocks` of `loop-schedule-plan`), so the threads' shares stay even."""


def _fit(size: int, extent: int, multiple: int) -> int:
    """`size` capped to `extent` rounded down to `multiple` (at least `multiple`)."""
    return max(multiple, min(size, extent // multiple * multiple))


def matmul(
    m: int, n: int, k: int, t: CpuSchedule, constant_b: bool = False
) -> list[Step]:
    """Register-blocked, cache-blocked, packed GEMM on the m-k-n band; a constant
    B (weights) is packed at compile time, in the order the loops read it."""
    if n < t.width:
        return []  # nothing to vectorize along n: keep the plain band
    nr = t.nr if n >= t.nr else max(t.width, n // t.width * t.width)
    mr = _rows(m, t.mr, nr // t.width)
    nc, kc, mc = _block(n, t.nc, nr), min(t.kc, k), _block(m, t.mc, mr)
    if constant_b:
        mc, nc = _parallel(m, n, mc, nc, mr, nr, t.min_blocks)
    else:
        # Only the n.0 blocks are outside the reduction, and each one packs all
        # of A again: one block per thread (4 per thread packed A 8 times at 2
        # threads, and 2 threads ran no faster than 1).
        threads = max(1, t.min_blocks // BLOCKS_PER_THREAD)
        nc = _parallel(1, n, 1, nc, 1, nr, threads)[1]
    order = MATMUL_ORDER_CONSTANT_B if constant_b else MATMUL_ORDER
    steps = [
        Step("tile", "n", (nc, nr)),
        Step("tile", "k", (kc,)),
        Step("tile", "m", (mc, mr)),
        Step("interchange", order=order),
        Step("fuse"),
    ]
    if not constant_b and m >= t.min_pack_reuse * mr:
        steps.append(Step("pack", "k.0", operand=1))
    if n >= t.min_pack_reuse * nr:
        steps.append(Step("pack", "k.0" if constant_b else "m.0", operand=0))
    if constant_b:
        steps.append(Step("pack_constant"))
    return steps


STREAM_ACCUMULATORS = 4
"""Vector accumulators of the dot product of a streamed weight (`streams_weight`)."""


def streams_weight(spec: CpuSpec, m: int, weight_bytes: int) -> bool:
    """Whether a contraction of `m` rows reads its weight (`weight_bytes`,
    contiguous along k) in the dot form where it lies instead of packed: one row
    (a fully connected layer at batch 1) over a weight larger than the
    last-level cache, which every call streams from memory once whatever its
    layout. Packing it would not make the call faster and would hold it twice
    while compiling (light_zfnet512's fc6 is 288 of its 333 MB)."""
    return m == 1 and weight_bytes > spec.l3


MIN_ACCUMULATORS = 16
"""The fewest C registers a micro-tile narrowed by `_rows` keeps: 4 × 64 on
AVX-512 (16 zmm) ran as fast as 6 × 64; on AVX2 a 4 × 16 tile (8 ymm, too few to
hide the FMA latency) made a 1024³ GEMM 1.06-1.09x and the encoder layer
1.09-1.16x slower, so AVX2 keeps 6 rows."""


def _rows(m: int, mr: int, columns: int) -> int:
    """The micro-kernel's rows for a GEMM of M rows: the most, up to `mr`, that
    divide M while the tile keeps MIN_ACCUMULATORS registers of C (`columns`
    vectors per row). The rows left over by mr (M mod mr) run in a nest of
    their own that reads the whole of B again for a few rows (a compile-time
    packed weight streams from memory a second time): the 64-row MLP
    (64 = 10 × 6 + 4) read each 16 MB weight twice. With 4 × 64 tiles on Zen 5
    (paired, one process): the MLP 1.16-1.25x faster, the encoder layer (128
    rows) 1.07-1.17x, a 1024³ GEMM 1.02-1.11x, at 1 and 2 threads."""
    mr = min(mr, m)
    fewest = max(1, -(-MIN_ACCUMULATORS // max(1, columns)))
    if m % mr == 0 or fewest >= mr:
        return mr
    return next((r for r in range(mr, fewest - 1, -1) if m % r == 0), mr)


def _block(size: int, block: int, unit: int, count: int = 0) -> int:
    """A block of whole units near `block` (or making `count` blocks): the size
    is split into equal blocks and a tail of fewer units than blocks, so no big
    remainder block is left (it would run apart from the others, serially).
    Near `block`, up to twice as many blocks are taken where they divide the
    units evenly: a tail block is one more copy of the whole micro-kernel nest
    to compile (light_resnet50's 56 × 56 convs: 522 units of 6 rows in 6
    blocks of 87 instead of 5 of 104 and a tail of 2)."""
    units = max(1, size // unit)
    if not count:
        count = -(-units // max(1, block // unit))
        even = (c for c in range(count, 2 * count + 1) if units % c == 0)
        count = next(even, count)
    return max(1, units // max(1, count)) * unit


def _parallel(
    m: int, n: int, mc: int, nc: int, mr: int, nr: int, want: int
) -> tuple[int, int]:
    """(mc, nc) made smaller until M and N split into `want` blocks (for
    threads). First only splits that divide the whole units evenly (a tail block
    is one more copy of the micro-kernel nest to compile, and a smaller share
    for one thread): along n while blocks keep 128 columns, then along m while
    they keep 4 micro-tiles, then either down to one micro-tile. Where that
    cannot reach `want`, twice the blocks at a time, with tails, in the same
    order."""

    def count(size: int, block: int) -> int:
        return -(-size // block)

    for even in (True, False):
        for n_floor, m_floor in ((128, 4 * mr), (nr, mr)):
            while count(m, mc) * count(n, nc) < want:
                if even:
                    if split := _even_split(n, nc, nr, max(n_floor, nr)):
                        nc = split
                    elif split := _even_split(m, mc, mr, m_floor):
                        mc = split
                    else:
                        break
                elif nc > max(n_floor, nr):
                    nc = _block(n, nc, nr, 2 * count(n, nc))
                elif mc > m_floor:
                    mc = _block(m, mc, mr, 2 * count(m, mc))
                else:
                    break
    return mc, nc


def _even_split(size: int, block: int, unit: int, floor: int) -> int:
    """The largest block of whole units, at most half of `block` and at least
    `floor`, that divides the units of `size` evenly; 0 if there is none."""
    units = max(1, size // unit)
    for blocks in range(max(2, units * unit // block * 2), units + 1):
        split = units // blocks * unit
        if split < floor:
            return 0  # more blocks only make it smaller
        if units % blocks == 0 and split <= block // 2:
            return split
    return 0


WHOLE_K_SLIVER = 4
"""A conv runs its whole reduction (window x input channels) inside the
micro-kernel while that B sliver (window * K * nr floats) is at most this many
times L2: the C tile then stays in registers from the bias to the epilogue, and
the sliver streams from L2 / L3 into each micro-tile. Blocking the channels by
kc instead kept the sliver in L1 but loaded and stored the whole C block once per
channel block, beside a bias pass before and an epilogue pass after: on Zen 5
(1 MiB L2) whole-K convs made light_resnet50 1.07-1.13x faster, light_vgg19
1.14x, light_inception_v2 1.10x, a 3x3 conv of 512 channels (1.2 MB sliver)
1.33x; with AVX2 sizes (x86-64-v3) light_resnet50 1.04x."""


def conv2d(
    m: int, n: int, k: int, t: CpuSchedule, window: int = 1
) -> list[Step]:
    """Implicit GEMM (M output pixels, N output channels, K input channels per
    position of a `window`): the matmul blocking without packing (the weights are
    packed at compile time, the input is read in place), window loops inside the
    micro-kernel when the channels fit one kc block or the whole-K B sliver is
    small enough (`WHOLE_K_SLIVER`), else the channels blocked
    by the largest divisor of K up to kc (a tail block would leave the nest
    imperfect, and the interchange would refuse it: on AVX-512, kc = 96, a 3x3
    conv of 256 channels ran at 114 GFLOP/s instead of 250), unless that
    divisor is below kc / 4."""
    if n < t.width:
        return []
    mr = min(t.mr, m)
    nr = t.nr if n >= t.nr else max(t.width, n // t.width * t.width)
    nc, mc = _block(n, t.nc, nr), _block(m, t.mc, mr)
    # the m.0 and n.0 blocks are outside the reduction in both orders
    mc, nc = _parallel(m, n, mc, nc, mr, nr, t.min_blocks)
    steps = [Step("tile", "n", (nc, nr)), Step("tile", "m", (mc, mr))]
    kc = _divisor(k, t.kc)
    whole_k = window * k * nr * 4 <= WHOLE_K_SLIVER * t.l2
    if k <= t.kc or 4 * kc < t.kc or whole_k:
        steps.append(Step("interchange", order=CONV_ORDER))
    else:
        steps.append(Step("tile", "k", (kc,)))
        steps.append(Step("interchange", order=CONV_ORDER_BLOCKED))
    steps += [Step("fuse"), Step("pack_constant")]
    if k <= t.unroll_k:
        steps.append(Step("unroll", "k", (0,)))
    return steps


def _divisor(size: int, limit: int) -> int:
    """The largest divisor of `size` that is at most `limit`."""
    return max(d for d in range(1, min(size, limit) + 1) if size % d == 0)


def transpose(rank: int, read: int, t: CpuSchedule) -> list[Step]:
    """A transpose copy (loops d0…d{rank-1} over the result, `read` the one along
    the source's contiguous dim): both contiguous dims tiled, the tile loops
    outside, so the source and result lines of a tile stay in L1."""
    last = f"d{rank - 1}"
    if read == rank - 1:
        return []
    tiles = [Step("tile", f"d{read}", (t.transpose_tile,)),
             Step("tile", last, (t.transpose_tile,))]  # fmt: skip
    outer = [f"d{i}.0" if i in (read, rank - 1) else f"d{i}" for i in range(rank)]
    order = (*outer, f"d{read}.1", f"{last}.1")
    return [*tiles, Step("interchange", order=order)]


def window(size: int, t: CpuSchedule) -> list[Step]:
    """Unroll a small window reduction (a pool's kh × kw, LRN's channels), so the
    loop around it is innermost and vectorizes."""
    if size > MAX_WINDOW_UNROLL:
        return []
    return [Step("unroll", "kw", (0,)), Step("unroll", "kh", (0,))]
