"""loop-schedule: applies the CPU schedule of `smelt.targets.cpu` to every kernel
whose lowering marked a pattern (`loop.pattern`: matmul, conv2d, window)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.targets import cpu as schedules
from smelt.targets.cpu_spec import of_module
from smelt.passes import (
    loop_fuse,
    loop_interchange,
    loop_nest,
    loop_pack,
    loop_pack_constant,
    loop_tile,
    loop_unroll,
)


def gemm_band(kernel: func.FuncOp) -> tuple[loop.ForOp, loop.ForOp, loop.ForOp] | None:
    """The m, k and n loops of the band m k n of a matmul, or m [kh] [kw] k n of
    an implicit-GEMM conv."""
    for op in loop_nest.loops_with_role(kernel, "k"):
        inner = loop_nest.only_loop(op)
        parent = op.parent_op()
        while isinstance(parent, loop.ForOp) and loop_nest.role(parent) in ("kh", "kw"):
            parent = parent.parent_op()
        if (
            isinstance(parent, loop.ForOp)
            and loop_nest.role(parent) == "m"
            and inner is not None
            and loop_nest.role(inner) == "n"
        ):
            return parent, op, inner
    return None


def _uses(value: SSAValue, iv: SSAValue) -> bool:
    if value is iv:
        return True
    owner = value.owner
    return isinstance(owner, Operation) and any(_uses(v, iv) for v in owner.operands)


def stationary_operand(kernel: func.FuncOp, m: loop.ForOp, n: loop.ForOp) -> int:
    """The kernel argument that the band's n loop loads along n and not along m
    (the B operand of the GEMM: weights), or -1."""
    args = kernel.body.block.args
    for op in n.body.block.ops:
        if (
            isinstance(op, memref.LoadOp)
            and op.memref in args
            and not any(_uses(i, m.iv) for i in op.indices)
            and any(_uses(i, n.iv) for i in op.indices)
        ):
            return list(args).index(op.memref)
    return -1


def window_size(kernel: func.FuncOp) -> int | None:
    """Positions of the window of a window-reduction kernel: its kw loop, times
    its kh loop when the kw loop is the only loop in it."""
    for op in loop_nest.loops_with_role(kernel, "kw"):
        parent = op.parent_op()
        if isinstance(parent, loop.ForOp) and loop_nest.role(parent) == "kh":
            return parent.trip_count * op.trip_count
        return op.trip_count
    return None


def transposed_dim(kernel: func.FuncOp) -> tuple[int, int] | None:
    """(rank, d) of a transpose copy: the loop d{d} walks the source's last dim."""
    loads = [o for o in kernel.walk() if isinstance(o, memref.LoadOp)]
    if len(loads) != 1 or not loads[0].indices:
        return None
    last = loads[0].indices[-1]
    owner = last.owner.parent_op() if isinstance(last.owner, Block) else None
    role = loop_nest.role(owner) if isinstance(owner, loop.ForOp) else None
    if role is None or not role.startswith("d"):
        return None
    return len(loads[0].indices), int(role[1:])


def schedule(
    module: ModuleOp, kernel: func.FuncOp, target: schedules.CpuSchedule
) -> list[schedules.Step]:
    """The schedule steps for a kernel, by its pattern; a `pack_constant` step gets
    the kernel argument of the GEMM's B operand."""
    kind = loop_nest.pattern(kernel)
    if kind == "window" and (window := window_size(kernel)) is not None:
        return schedules.window(window, target)
    if kind == "transpose" and (read := transposed_dim(kernel)) is not None:
        return schedules.transpose(read[0], read[1], target)
    band = gemm_band(kernel)
    if kind not in ("matmul", "conv2d") or band is None:
        return []
    m, k, n = band
    b = stationary_operand(kernel, m, n)
    sizes = (m.trip_count, n.trip_count, k.trip_count)
    if kind == "conv2d":
        steps = schedules.conv2d(*sizes, target)
    else:
        constant = loop_pack_constant.is_constant(module, kernel, b)
        steps = schedules.matmul(*sizes, target, constant_b=constant)
    return [
        replace(step, operand=b) if step.kind == "pack_constant" else step
        for step in steps
    ]


def apply_step(
    module: ModuleOp, kernel: func.FuncOp, step: schedules.Step, max_pack_bytes: int
) -> None:
    if step.kind == "tile":
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
            loop_unroll.unroll(target, step.sizes[0])
    else:
        raise ValueError(f"unknown schedule step {step.kind}")


@dataclass(frozen=True)
class LoopSchedulePass(ModulePass):
    """Tiles, reorders and packs pattern kernels for the CPU, sized by one table.

    Expects loop-level kernels from convert-graph-to-loop. For each kernel marked
    `loop.pattern = "matmul"` (matmul, gemm, their fusions) it reads M, N, K from
    the m-k-n band and applies `schedules.matmul`: tile n by (nc, nr), k by (kc),
    m by (mc, mr), reorder into the BLIS order n.0 k.0 m.0 n.1 m.1 m.2 k.1 n.2,
    pack B per k.0 × n.0 block and A per m.0 × k.0 block. For `"conv2d"`
    (NHWC implicit GEMM, band m [kh] [kw] k n) it applies `schedules.conv2d`:
    the same tiling without run-time packing, the window loops inside the
    micro-tile when the channels fit one kc block, then the weights (a
    constant) packed at compile time in that loop order (loop-pack-constant).
    For `"window"` (pools, LRN) it unrolls small windows (`schedules.window`),
    so the loop around them is innermost and vectorizes. Every size is an
    option; 0 (the default) takes it from the module's `#target.cpu`
    (`CpuSchedule.for_spec`; an AVX2 core when the module has none). Kernels without a pattern, or too
    small to vectorize, are left alone. The result computes the same sums in the
    same k order; `loop-vectorize` and `schedules.POST_VECTORIZE` then build the
    register-blocked micro-kernel.

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

    def target(self, op: ModuleOp) -> schedules.CpuSchedule:
        """The module's target sizes (`#target.cpu`, see `CpuSchedule.for_spec`),
        each one replaced by its option where that is not 0."""
        derived = schedules.CpuSchedule.for_spec(of_module(op), self.min_blocks)
        names = ("mr", "nr", "kc", "mc", "nc", "width", "transpose_tile")
        given = {n: getattr(self, n) for n in names if getattr(self, n)}
        return replace(derived, **given)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = self.target(op)
        for kernel in loop_nest.kernels(op, self.kernel):
            for step in schedule(op, kernel, target):
                apply_step(op, kernel, step, self.max_pack_bytes)
