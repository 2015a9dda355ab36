"""loop-schedule-plan: decides the CPU schedule of `smelt.targets.cpu` for every
kernel whose lowering marked a pattern, and records it on the kernel."""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.passes import loop_nest, loop_pack_constant
from smelt.targets import cpu as schedules
from smelt.targets.cpu_spec import of_module

STEP_KINDS = ("tile", "interchange", "fuse", "pack", "pack_constant", "unroll")
"""The kinds of schedule step, in the order `loop-schedule-apply` runs them: the
steps of every schedule in `smelt.targets.cpu` come in this order."""


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


def stationary_operand(
    kernel: func.FuncOp, m: loop.ForOp, n: loop.ForOp, along: str = "n"
) -> int:
    """The kernel argument that the band's n loop loads along n and not along m
    (the B operand of the GEMM: weights), or with `along` "m" along m and not
    along n (the A operand: an NCHW conv's weights), or -1."""
    args = kernel.body.block.args
    on, off = (n, m) if along == "n" else (m, n)
    for op in n.body.block.ops:
        if (
            isinstance(op, memref.LoadOp)
            and op.memref in args
            and not any(_uses(i, off.iv) for i in op.indices)
            and any(_uses(i, on.iv) for i in op.indices)
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
        steps = schedules.conv2d(*sizes, target, window=window_size(kernel) or 1)
        a = stationary_operand(kernel, m, n, along="m")
        if a >= 0 and (b < 0 or not loop_pack_constant.is_constant(module, kernel, b)):
            b = a  # B is the input (an NCHW conv): pack the weights, A, instead
    else:
        constant = loop_pack_constant.is_constant(module, kernel, b)
        steps = schedules.matmul(*sizes, target, constant_b=constant)
    return [
        replace(step, operand=b) if step.kind == "pack_constant" else step
        for step in steps
    ]


def step_attr(step: schedules.Step) -> DictionaryAttr:
    """`step` as the dictionary that `loop.schedule` lists (its set fields)."""
    entries: dict[str, Attribute] = {"kind": StringAttr(step.kind)}
    if step.role:
        entries["role"] = StringAttr(step.role)
    if step.sizes:
        entries["sizes"] = DenseArrayBase.from_list(i64, step.sizes)
    if step.order:
        entries["order"] = ArrayAttr([StringAttr(r) for r in step.order])
    if step.operand >= 0:
        entries["operand"] = IntegerAttr(step.operand, i64)
    return DictionaryAttr(entries)


def step_of(attr: Attribute) -> schedules.Step | None:
    """The step a `loop.schedule` entry holds, or None for anything else."""
    if not isinstance(attr, DictionaryAttr):
        return None
    data = attr.data
    kind = data.get("kind")
    if not isinstance(kind, StringAttr) or kind.data not in STEP_KINDS:
        return None
    role, sizes = data.get("role"), data.get("sizes")
    order, operand = data.get("order"), data.get("operand")
    return schedules.Step(
        kind.data,
        role.data if isinstance(role, StringAttr) else "",
        tuple(sizes.get_values()) if isinstance(sizes, DenseArrayBase) else (),
        tuple(r.data for r in order.data if isinstance(r, StringAttr))
        if isinstance(order, ArrayAttr) else (),
        operand.value.data if isinstance(operand, IntegerAttr) else -1,
    )  # fmt: skip


def planned(kernel: func.FuncOp) -> list[schedules.Step]:
    """The steps recorded on `kernel` that are still to apply."""
    attr = kernel.attributes.get(loop.SCHEDULE_ATTR)
    if not isinstance(attr, ArrayAttr):
        return []
    return [s for s in map(step_of, attr.data) if s is not None]


def set_plan(kernel: func.FuncOp, steps: list[schedules.Step]) -> None:
    """Records `steps` on `kernel` (none: no `loop.schedule` attribute)."""
    if steps:
        kernel.attributes[loop.SCHEDULE_ATTR] = ArrayAttr(map(step_attr, steps))
    else:
        kernel.attributes.pop(loop.SCHEDULE_ATTR, None)


@dataclass(frozen=True)
class LoopSchedulePlanPass(ModulePass):
    """Decides how to tile, reorder, pack and unroll pattern kernels for the CPU,
    sized by one table, and records it as `loop.schedule` on each kernel.

    Expects loop-level kernels from convert-graph-to-loop; rewrites no loop. For
    each kernel marked `loop.pattern = "matmul"` (matmul, gemm, their fusions)
    it reads M, N, K from the m-k-n band and takes `schedules.matmul`: tile n by
    (nc, nr), k by (kc), m by (mc, mr), reorder into the BLIS order n.0 k.0 m.0
    n.1 m.1 m.2 k.1 n.2, pack B per k.0 × n.0 block and A per m.0 × k.0 block
    (with a constant B: B packed at compile time instead). For `"conv2d"` (NHWC
    implicit GEMM, band m [kh] [kw] k n) it takes `schedules.conv2d`: the same
    tiling without run-time packing, the window loops inside the micro-tile when
    the channels fit one kc block or the whole reduction's B sliver is at most
    `WHOLE_K_SLIVER` times `l2` (bytes), the weights packed at compile time. For
    `"window"` (pools, LRN) it unrolls small windows, for `"transpose"` it tiles
    the two contiguous dims. Every size is an option; 0 (the default) takes it
    from the module's `#target.cpu` (`CpuSchedule.for_spec`; an AVX2 core when
    the module has none). Kernels without a pattern or too small to vectorize
    get no plan. `loop-schedule-apply` then applies the steps, one kind per run.

        func.func @k(...) attributes {loop.kernel, loop.pattern = "matmul"}
      → func.func @k(...) attributes {loop.kernel, loop.pattern = "matmul",
          loop.schedule = [{kind = "tile", role = "n", sizes = array<i64: 512, 16>},
                           ..., {kind = "interchange", order = ["n.0", ...]}, ...]}
    """

    name = "loop-schedule-plan"

    kernel: str = "*"
    mr: int = 0
    nr: int = 0
    kc: int = 0
    mc: int = 0
    nc: int = 0
    width: int = 0
    transpose_tile: int = 0
    min_blocks: int = 1
    l2: int = 0

    def target(self, op: ModuleOp) -> schedules.CpuSchedule:
        """The module's target sizes (`#target.cpu`, see `CpuSchedule.for_spec`),
        each one replaced by its option where that is not 0."""
        derived = schedules.CpuSchedule.for_spec(of_module(op), self.min_blocks)
        names = ("mr", "nr", "kc", "mc", "nc", "width", "transpose_tile", "l2")
        given = {n: getattr(self, n) for n in names if getattr(self, n)}
        return replace(derived, **given)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = self.target(op)
        for kernel in loop_nest.kernels(op, self.kernel):
            set_plan(kernel, schedule(op, kernel, target))
