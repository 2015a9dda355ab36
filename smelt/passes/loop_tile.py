"""loop-tile: splits a loop into tile loops and point loops (multi-level)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntAttr, ModuleOp
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.passes import loop_nest
from smelt.passes.loop_nest import add_index, role, set_role


def split(
    op: loop.ForOp, size: int
) -> tuple[loop.ForOp | None, loop.ForOp, loop.ForOp | None]:
    """Splits `op` (T iterations) into full tiles of `size` iterations and a
    remainder, keeping every bound static:

        loop.for %i = 0 to 10 step 1 { body(%i) }
      → loop.for %t = 0 to 8 step 4 {
          loop.for %p = 0 to 4 step 1 { %i = arith.addi %t, %p; body(%i) } }
        loop.for %i = 8 to 10 step 1 { body(%i) }          (the remainder)

    Returns (tile loop, point loop, remainder loop). Without a full tile the loop
    itself is returned as the point loop; without leftover there is no remainder.
    iter_args are threaded through all three (the reduction keeps its order).
    """
    lb, step, trips = op.lb.data, op.step.data, op.trip_count
    full = trips // size
    if full == 0 or size <= 1:
        return None, op, None
    parent = op.parent_block()
    assert parent is not None
    remainder = None
    if full * size < trips:
        remainder = op.clone()
        remainder.lb = IntAttr(lb + full * size * step)
    tile = loop.ForOp(
        lb, lb + full * size * step, size * step, op.kind.data, op.iter_inits
    )
    tile.attributes.update(op.attributes)
    point = loop.ForOp(0, size * step, step, op.kind.data, tile.body.block.args[1:])
    point.attributes.update(op.attributes)
    tile.body.block.add_op(point)
    tile.body.block.add_op(loop.YieldOp(*point.res))
    block = point.body.block
    for inner in list(op.body.block.ops):
        inner.detach()
        block.add_op(inner)
    iv = add_index(block, block.first_op, tile.iv, point.iv)
    iv.name_hint = op.iv.name_hint
    op.iv.replace_all_uses_with(iv)
    for old, new in zip(op.body.block.args[1:], block.args[1:]):
        old.replace_all_uses_with(new)
    parent.insert_op_before(tile, op)
    results = tile.res
    if remainder is not None:
        parent.insert_op_before(remainder, op)
        remainder.operands = list(tile.res)
        results = remainder.res
    for old, new in zip(op.res, results):
        old.replace_all_uses_with(new)
    loop_nest.remove(op)
    if remainder is not None and not op.iter_inits:
        remainder = hoist(tile, remainder, op.kind.data == loop.PARALLEL)
    return tile, point, remainder


def hoist(tile: loop.ForOp, remainder: loop.ForOp, parallel: bool) -> loop.ForOp:
    """Distributes the enclosing loops over (tile loop, remainder) while they nest
    perfectly, so both parts stay perfect nests:

        loop.for %k { loop.for %t {...}  loop.for %r {...} }
      → loop.for %k { loop.for %t {...} }   loop.for %k { loop.for %r {...} }

    Legal for a parallel loop, whose remainder iterations touch other data than
    its tiles; for a reduction loop only across parallel loops (each element
    still sees its terms in order). Returns the remainder loop (now inside the
    copies of the enclosing loops)."""
    part = remainder
    while True:
        parent = tile.parent_op()
        if not isinstance(parent, loop.ForOp) or parent.iter_inits:
            return remainder
        if not parallel and parent.kind.data != loop.PARALLEL:
            return remainder
        ops = list(parent.body.block.ops)
        others = [
            o
            for o in loop_nest.body_ops(parent)
            if o is not tile and o is not part and not loop_nest.is_index_op(o)
        ]
        if others:
            return remainder
        outer_block = parent.parent_block()
        assert outer_block is not None
        mapping: dict = {}
        copy = parent.clone(mapping)
        copied = list(copy.body.block.ops)
        loop_nest.remove(copied[ops.index(tile)])
        new_part = copied[ops.index(part)]
        remainder = _find_clone(remainder, part, new_part)
        loop_nest.remove(part)
        outer_block.insert_op_after(copy, parent)
        part, tile = copy, parent


def _find_clone(op: loop.ForOp, root: loop.ForOp, clone: loop.ForOp) -> loop.ForOp:
    """The op in `clone` at the place of `op` in `root` (a structural copy)."""
    if op is root:
        return clone
    found = [o for o in root.walk()]
    mirrored = [o for o in clone.walk()]
    return mirrored[found.index(op)]


def tile(op: loop.ForOp, sizes: tuple[int, ...]) -> list[loop.ForOp]:
    """Tiles `op` by `sizes` (in iterations, outermost level first). A loop of role
    `r` becomes loops of roles `r.0` (tiles of sizes[0]) ... `r.<len(sizes)>` (the
    points); each remainder loop takes the role of the level it stands for and is
    tiled by the remaining sizes. Returns every loop made."""
    base = role(op) or "loop"
    made: list[loop.ForOp] = []

    def go(target: loop.ForOp, level: int) -> None:
        if level == len(sizes):
            set_role(target, f"{base}.{level}")
            made.append(target)
            return
        outer, point, rest = split(target, sizes[level])
        if outer is not None:
            set_role(outer, f"{base}.{level}")
            made.append(outer)
        go(point, level + 1)
        if rest is not None:
            go(rest, level + 1)

    go(op, 0)
    return made


@dataclass(frozen=True)
class LoopTilePass(ModulePass):
    """Tiles the loops of role `loop` in kernels matching `kernel` by `sizes`.

    Expects loop-level kernels. Each target loop (static bounds, any kind, with or
    without iter_args) becomes a tile loop per size and a point loop, plus a
    remainder loop (same body, shorter static range) per level where the size
    does not divide the trip count; sizes are in iterations, outermost first.
    The induction variable is rebuilt as `tile + point` at the start of the
    point loop's body. Loops with fewer iterations than a size skip that level.
    The remainder of a parallel loop is distributed out of the loops that nest
    it perfectly (a copy of them around it), so the full tiles and the remainder
    each stay a perfect band for loop-interchange. Each element is computed from
    the same operands as before (reductions keep their order), so the result is
    exact.

        loop.for %n = 0 to 40 step 1 parallel {loop.role = "n"}   (sizes=16)
      → loop.for %t = 0 to 32 step 16 parallel {loop.role = "n.0"} {
          loop.for %p = 0 to 16 step 1 parallel {loop.role = "n.1"} { %n = %t + %p } }
        loop.for %n = 32 to 40 step 1 parallel {loop.role = "n.1"}
    """

    name = "loop-tile"

    loop: str
    sizes: tuple[int, ...]
    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.sizes or any(s <= 0 for s in self.sizes):
            return
        for kernel in loop_nest.kernels(op, self.kernel):
            for target in loop_nest.loops_with_role(kernel, self.loop):
                tile(target, tuple(self.sizes))
