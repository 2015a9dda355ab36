"""GPU schedules: the one place that picks block sizes, num_warps and num_stages.

The emitter asks for a schedule per phase and writes the block sizes as constexpr
parameters; nothing else decides them. Numbers target Hopper (H100/H200): 64- or
128-row dot tiles so that Triton uses wgmma, three or four pipeline stages within
228 KB of shared memory, and about 2-8 K elements per program for memory-bound
kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from xdsl.ir import SSAValue

from smelt.dialects.loop import ForOp
from smelt.lowering.triton.contraction import Contraction, dot_types, find_contraction
from smelt.lowering.triton.structure import BlockChain, Deps, Phase, block_chain


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class Mode(StrEnum):
    """How a phase maps onto Triton programs."""

    ELEMENTWISE = "elementwise"  # one lane per grid point, BLOCK lanes a program
    ROWS = "rows"  # BLOCK_M grid points a program, inner chains in BLOCK_R blocks
    DOT = "dot"  # a contraction as tl.dot tiles with a K loop
    SERIAL = "serial"  # no grid loops: one program, one lane


@dataclass(frozen=True)
class PhasePlan:
    """The mode of one phase and what it was chosen for: the contraction (dot) or
    the inner chains run as blocks (rows)."""

    mode: Mode
    contraction: Contraction | None = None
    chains: dict[ForOp, BlockChain] = field(default_factory=dict)


def plan(phase: Phase, deps: dict[SSAValue, Deps]) -> PhasePlan:
    """The mode of a phase: a contraction with tl.dot operand types is a dot; grid
    loops with inner chains long enough for blocks are rows, without them
    elementwise; no grid loops is serial."""
    contraction = find_contraction(phase, deps)
    if contraction is not None and dot_types(contraction) is not None:
        return PhasePlan(Mode.DOT, contraction)
    if phase.grid is None or not phase.grid.loops:
        return PhasePlan(Mode.SERIAL)
    chains = {}
    for op in phase.body:
        if isinstance(op, ForOp):
            bc = block_chain(op, deps)
            if bc is not None and rows_wanted(bc.chain.total):
                chains[op] = bc
    return PhasePlan(Mode.ROWS, chains=chains) if chains else PhasePlan(Mode.ELEMENTWISE)


@dataclass(frozen=True)
class Schedule:
    """Block sizes (constexpr name -> value) and launch options of one phase."""

    blocks: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int = 1

    def block(self, name: str) -> int:
        return dict(self.blocks)[name]


ELEMENTWISE_BLOCK = 1024
ROWS_ELEMENTS = 4096  # elements of one [BLOCK_M, BLOCK_R] block
ROWS_MAX_R = 4096  # longest inner extent done in one block; longer ones loop
ROWS_MIN_R = 16  # shorter inner chains stay sequential per lane


def elementwise(total: int) -> Schedule:
    """One lane per grid point, BLOCK lanes per program."""
    block = min(ELEMENTWISE_BLOCK, max(32, next_pow2(total)))
    warps = max(1, min(4, block // 256))
    return Schedule((("BLOCK", block),), warps)


def serial() -> Schedule:
    """One program, one lane (no grid loops)."""
    return Schedule((), 1)


def rows_wanted(inner_total: int) -> bool:
    """Whether an inner chain of this many iterations runs as blocks."""
    return inner_total >= ROWS_MIN_R


def rows(total: int, inner_total: int) -> Schedule:
    """BLOCK_M grid points per program, inner chains in BLOCK_R wide blocks."""
    block_r = min(ROWS_MAX_R, next_pow2(inner_total))
    block_m = max(1, min(ROWS_ELEMENTS // block_r, next_pow2(total)))
    warps = 4 if block_m * block_r <= 2048 else 8
    return Schedule((("BLOCK_M", block_m), ("BLOCK_R", block_r)), warps)


def dot(m: int, n: int, k: int, operand_bits: int) -> Schedule:
    """A tl.dot tile: 128x128 (64 rows when M is small), K step of 128 bytes."""
    block_m = 128 if m > 64 else 64
    block_n = min(128, max(16, next_pow2(n)))
    if operand_bits == 32:
        block_k = 32
    elif operand_bits == 8:
        block_k = 128
    else:
        block_k = 64
    block_k = min(block_k, max(16, next_pow2(k)))
    warps = 8 if block_m * block_n >= 128 * 128 else 4
    smem = (block_m + block_n) * block_k * operand_bits // 8
    stages = max(2, min(4, (160 * 1024) // max(1, smem)))
    return Schedule(
        (("BLOCK_M", block_m), ("BLOCK_N", block_n), ("BLOCK_K", block_k),
         ("GROUP_M", 8)),
        warps,
        stages,
    )  # fmt: skip
