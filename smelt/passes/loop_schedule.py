"""loop-schedule: loop-schedule-plan then every kind of loop-schedule-apply, in one
pass (the presets list those passes one by one, so that each step shows)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.passes.loop_schedule_apply import apply_planned
from smelt.passes.loop_schedule_plan import STEP_KINDS, LoopSchedulePlanPass


@dataclass(frozen=True)
class LoopSchedulePass(ModulePass):
    """Tiles, reorders, fuses, packs and unrolls pattern kernels for the CPU,
    sized by one table: the same as

        loop-schedule-plan{options},loop-schedule-apply{step=tile},
        loop-schedule-apply{step=interchange},loop-schedule-apply{step=fuse},
        loop-schedule-apply{step=pack},loop-schedule-apply{step=pack_constant},
        loop-schedule-apply{step=unroll}

    (see those passes; the options are loop-schedule-plan's, and
    `max_pack_bytes` loop-schedule-apply's). Expects loop-level kernels from
    convert-graph-to-loop; leaves no `loop.schedule` plan behind. The result
    computes the same sums in the same k order; `loop-vectorize` and the
    presets' `POST_VECTORIZE` then build the register-blocked micro-kernel.

        loop.for %m {"m"} { loop.for %k {"k"} { loop.for %n {"n"} { C += A·B } } }
      → loop.for {"n.0"} { loop.for {"k.0"} { %pb = memref.alloca ... (pack B)
          loop.for {"m.0"} { %pa = ... loop.for {"n.1"} { loop.for {"m.1"} {
            loop.for {"m.2"} { loop.for {"k.1"} { loop.for {"n.2"} { ... } } } } } } } }
    """

    name = "loop-schedule"

    kernel: str = "*"
    mr: int = 0
    nr: int = 0
    kc: int = 0
    mc: int = 0
    nc: int = 0
    width: int = 0
    transpose_tile: int = 0
    min_blocks: int = 1
    max_pack_bytes: int = 1 << 20
    l2: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        LoopSchedulePlanPass(
            self.kernel, self.mr, self.nr, self.kc, self.mc, self.nc, self.width,
            self.transpose_tile, self.min_blocks, self.l2,
        ).apply(ctx, op)  # fmt: skip
        for kind in STEP_KINDS:
            apply_planned(op, kind, self.kernel, self.max_pack_bytes)
