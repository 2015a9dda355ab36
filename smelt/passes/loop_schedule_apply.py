"""loop-schedule-apply: applies the steps of one kind of the `loop.schedule` plans
that loop-schedule-plan recorded on kernels."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.errors import SmeltError
from smelt.passes import (
    loop_fuse,
    loop_interchange,
    loop_nest,
    loop_pack,
    loop_pack_constant,
    loop_tile,
    loop_unroll,
)
from smelt.passes.loop_schedule_plan import STEP_KINDS, planned, set_plan
from smelt.targets.cpu import Step


def apply_step(
    module: ModuleOp, kernel: func.FuncOp, step: Step, max_pack_bytes: int
) -> None:
    """The loop primitive of `step` on `kernel` (the mechanics of each pass); a
    step without what its primitive needs (tile sizes > 0) does nothing."""
    if step.kind == "tile":
        if not step.sizes or min(step.sizes) <= 0:
            return
        for target in loop_nest.loops_with_role(kernel, step.role):
            loop_tile.tile(target, step.sizes)
    elif step.kind == "interchange":
        loop_interchange.apply_order(kernel, list(step.order))
    elif step.kind == "pack":
        loop_pack.pack_kernel(kernel, {step.role}, step.operand, max_pack_bytes)
    elif step.kind == "fuse":
        loop_fuse.fuse_kernel(kernel)
    elif step.kind == "pack_constant":
        loop_pack_constant.pack_constant(module, kernel, step.operand)
    elif step.kind == "unroll":
        for target in reversed(loop_nest.loops_with_role(kernel, step.role)):
            loop_unroll.unroll(target, step.sizes[0] if step.sizes else 0)


def apply_planned(
    module: ModuleOp, kind: str, kernel_glob: str = "*", max_pack_bytes: int = 1 << 20
) -> None:
    """Applies and drops the planned steps of `kind` of every matching kernel, in
    the order each plan lists them."""
    for kernel in loop_nest.kernels(module, kernel_glob):
        steps = planned(kernel)
        for step in steps:
            if step.kind == kind:
                apply_step(module, kernel, step, max_pack_bytes)
        set_plan(kernel, [s for s in steps if s.kind != kind])


@dataclass(frozen=True)
class LoopScheduleApplyPass(ModulePass):
    """Applies the `step` steps of each kernel's `loop.schedule` plan and drops
    them from it (the plan attribute goes with its last step).

    Expects kernels with plans from loop-schedule-plan. `step` is one of tile,
    interchange, fuse, pack, pack_constant, unroll: the primitive of loop-tile,
    loop-interchange, loop-fuse, loop-pack (scratch up to `max_pack_bytes`),
    loop-pack-constant or loop-unroll (full) with the plan's per-kernel roles,
    sizes, order and operand. Plans list their steps in that order of kinds, so
    one run per kind, in that order, applies each plan as it was made. Kernels
    without a plan, and steps of other kinds, are left alone. Each primitive is
    exact, so the result is too.

        {loop.schedule = [{kind = "tile", role = "k", sizes = array<i64: 64>}]}
        loop.for %k = 0 to 256 {"k"} { S }                        (step=tile)
      → loop.for %k0 = 0 to 256 step 64 {"k.0"} { loop.for %k1 = 0 to 64 {"k.1"} {
          S } }   (no loop.schedule left)
    """

    name = "loop-schedule-apply"

    step: str
    kernel: str = "*"
    max_pack_bytes: int = 1 << 20

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.step not in STEP_KINDS:
            raise SmeltError(
                f"loop-schedule-apply: unknown step '{self.step}': choose one of "
                f"{', '.join(STEP_KINDS)}"
            )
        apply_planned(op, self.step, self.kernel, self.max_pack_bytes)
