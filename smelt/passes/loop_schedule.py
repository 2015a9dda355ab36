"""loop-schedule: applies the CPU schedule of `smelt.compiler.schedules` to every
kernel whose lowering marked a pattern (`loop.pattern`)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.compiler import schedules
from smelt.dialects import loop
from smelt.passes import loop_interchange, loop_nest, loop_pack, loop_tile


def matmul_sizes(kernel: func.FuncOp) -> tuple[int, int, int] | None:
    """(M, N, K) of the m-k-n band of a matmul kernel."""
    for op in loop_nest.loops_with_role(kernel, "k"):
        parent = op.parent_op()
        inner = loop_nest.only_loop(op)
        if (
            isinstance(parent, loop.ForOp)
            and loop_nest.role(parent) == "m"
            and inner is not None
            and loop_nest.role(inner) == "n"
        ):
            return parent.trip_count, inner.trip_count, op.trip_count
    return None


def apply_step(kernel: func.FuncOp, step: schedules.Step, max_pack_bytes: int) -> None:
    if step.kind == "tile":
        for target in loop_nest.loops_with_role(kernel, step.role):
            loop_tile.tile(target, step.sizes)
    elif step.kind == "interchange":
        loop_interchange.apply_order(kernel, list(step.order))
    elif step.kind == "pack":
        loop_pack.pack_kernel(kernel, {step.role}, step.operand, max_pack_bytes)
    else:
        raise ValueError(f"unknown schedule step {step.kind}")


@dataclass(frozen=True)
class LoopSchedulePass(ModulePass):
    """Tiles, reorders and packs pattern kernels for the CPU, sized by one table.

    Expects loop-level kernels from convert-graph-to-loop. For each kernel marked
    `loop.pattern = "matmul"` (matmul, gemm, their fusions) it reads M, N, K from
    the m-k-n band and applies `schedules.matmul`: tile n by (nc, nr), k by (kc),
    m by (mc, mr), reorder into the BLIS order n.0 k.0 m.0 n.1 m.1 m.2 k.1 n.2,
    pack B per k.0 × n.0 block and A per m.0 × k.0 block. Every size is an
    option (defaults: `schedules.CpuTarget`). Kernels without a pattern, or too
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
    mr: int = schedules.CpuTarget.mr
    nr: int = schedules.CpuTarget.nr
    kc: int = schedules.CpuTarget.kc
    mc: int = schedules.CpuTarget.mc
    nc: int = schedules.CpuTarget.nc
    width: int = schedules.CpuTarget.width
    max_pack_bytes: int = 1 << 20

    def target(self) -> schedules.CpuTarget:
        return schedules.CpuTarget(
            width=self.width, mr=self.mr, nr=self.nr, kc=self.kc, mc=self.mc, nc=self.nc
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = self.target()
        for kernel in loop_nest.kernels(op, self.kernel):
            if loop_nest.pattern(kernel) != "matmul":
                continue
            sizes = matmul_sizes(kernel)
            if sizes is None:
                continue
            for step in schedules.matmul(*sizes, target):
                apply_step(kernel, step, self.max_pack_bytes)
