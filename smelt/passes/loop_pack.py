"""loop-pack: copies the tile of an operand that a loop reads into a contiguous
scratch buffer (GEMM packing), in the order its loops visit it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import dtypes, loop
from smelt.passes import loop_nest, remarks
from smelt.passes.loop_nest import INDEX_OPS, index_constant, role, set_role

PACK_ROLE = "pack"
NAME = "loop-pack"  # also on the remarks of loop-schedule-apply's packs


class Refused(Exception):
    """The load is not packed; the message says why (kept as a remark)."""


def _index_leaves(value: SSAValue, inside: loop.ForOp, leaves: set[SSAValue]) -> None:
    """Collects the induction variables of loops inside `inside` that `value` depends
    on; raises Refused if it depends on anything else computed inside."""
    owner = value.owner
    if isinstance(value, BlockArgument):
        parent = owner.parent_op()
        if parent is None or parent is inside or not inside.is_ancestor(parent):
            return  # fixed while one iteration of the pack loop runs
        if not (isinstance(parent, loop.ForOp) and value.index == 0):
            raise Refused("index uses an iter_arg")
        leaves.add(value)
        return
    if not inside.is_ancestor(owner):
        return
    if not isinstance(owner, INDEX_OPS):
        raise Refused(f"index computed by {owner.name}")
    for operand in owner.operands:
        _index_leaves(operand, inside, leaves)


def _clone_index(value: SSAValue, mapping: dict, dest: Block, inside: loop.ForOp):
    """`value` recomputed in `dest` with induction variables remapped."""
    if value in mapping:
        return mapping[value]
    owner = value.owner
    if isinstance(value, BlockArgument) or not inside.is_ancestor(owner):
        return value
    for operand in owner.operands:
        _clone_index(operand, mapping, dest, inside)
    new = owner.clone(mapping)
    dest.add_op(new)
    return mapping[value]


def pack_load(at: loop.ForOp, load: memref.LoadOp, max_bytes: int) -> None:
    """Reads `load`'s operand from a scratch buffer filled at the start of `at`.

    The scratch holds one element per combination of the loops (inside `at`)
    that the load's indices use, in their nesting order, so the innermost loop
    walks it with unit stride whatever the operand's layout:

        loop.for %j0 {"n.0"} {                     loop.for %j0 {"n.0"} {
          loop.for %k { loop.for %j1 {               %p = memref.alloca : memref<K*16xf32>
            %b = memref.load %B[%j1, %k]    →        loop.for %k { loop.for %j1 {  (copy)
        } } }                                          %p[k*16 + j1] = %B[%j1, %k] } }
                                                     loop.for %k { loop.for %j1 {
                                                       %b = memref.load %p[%k*16 + %j1] } } }
    """
    leaves: set[SSAValue] = set()
    for index in load.indices:
        _index_leaves(index, at, leaves)
    loops = [p for p in reversed(list(loop_nest.ancestors(load))) if p.iv in leaves]
    loops = [p for p in loops if at.is_ancestor(p) and p is not at]
    if not loops:
        raise Refused("the load does not vary inside the pack loop")
    extents = [p.trip_count for p in loops]
    strides = [math.prod(extents[i + 1 :]) for i in range(len(loops))]
    if any(s % p.step.data for s, p in zip(strides, loops)):
        raise Refused("a loop step does not divide its stride in the scratch")
    element = load.results[0].type
    t = load.memref.type
    assert isinstance(t, MemRefType)
    size = math.prod(extents)
    if size * dtypes.byte_size(t.element_type) > max_bytes:
        raise Refused("the scratch would exceed max-bytes")
    scratch_type = MemRefType(t.element_type, [size])
    body = at.body.block
    first = body.first_op
    alloca = memref.AllocaOp.get(t.element_type, shape=[size])
    alloca.results[0].name_hint = "pack"
    body.insert_op_before(alloca, first)
    scratch = alloca.results[0]
    # the copy nest: the same loops, in the same order, around load + store
    holder = body
    copies: list[loop.ForOp] = []
    for p in loops:
        c = loop.ForOp(p.lb.data, p.ub.data, p.step.data, loop.PARALLEL)
        set_role(c, PACK_ROLE)
        c.iv.name_hint = p.iv.name_hint
        if holder is body:
            body.insert_op_before(c, first)
        else:
            holder.add_op(c)
        copies.append(c)
        holder = c.body.block
    mapping: dict[SSAValue, SSAValue] = {p.iv: c.iv for p, c in zip(loops, copies)}
    indices = [_clone_index(i, mapping, holder, at) for i in load.indices]
    value = memref.LoadOp.get(load.memref, indices)
    holder.add_op(value)
    holder.add_op(
        memref.StoreOp.get(
            value.results[0], scratch, [_linear(holder, copies, loops, strides)]
        )
    )
    for c in reversed(copies):
        c.body.block.add_op(loop.YieldOp())
    # the consumer reads the scratch
    parent = load.parent_block()
    assert parent is not None
    offset = _linear_before(parent, load, loops, strides)
    new = memref.LoadOp.get(scratch, [offset])
    new.results[0].name_hint = load.results[0].name_hint
    parent.insert_op_before(new, load)
    load.results[0].replace_all_uses_with(new.results[0])
    loop_nest.remove(load)
    assert element == new.results[0].type
    _ = scratch_type


def _terms(ivs, loops, strides):
    for iv, p, s in zip(ivs, loops, strides):
        yield iv, p.lb.data, s // p.step.data


def _linear(block: Block, copies, loops, strides) -> SSAValue:
    return _emit_linear(block, None, [c.iv for c in copies], loops, strides)


def _linear_before(block: Block, before: Operation, loops, strides) -> SSAValue:
    return _emit_linear(block, before, [p.iv for p in loops], loops, strides)


def _emit_linear(block, before, ivs, loops, strides) -> SSAValue:
    """Σ (iv - lb)·(stride/step), as index arithmetic."""
    from xdsl.dialects import arith

    def add(op: Operation) -> SSAValue:
        if before is None:
            block.add_op(op)
        else:
            block.insert_op_before(op, before)
        return op.results[0]

    total: SSAValue | None = None
    offset = 0
    for iv, lb, scale in _terms(ivs, loops, strides):
        term = iv
        if scale != 1:
            term = add(arith.MuliOp(iv, add(index_constant(scale))))
        offset -= lb * scale
        total = term if total is None else add(arith.AddiOp(total, term))
    assert total is not None
    if offset:
        total = add(arith.AddiOp(total, add(index_constant(offset))))
    return total


def pack(at: loop.ForOp, buffer: SSAValue, max_bytes: int) -> int:
    """Packs every load of `buffer` inside `at` (a kernel argument that nothing
    inside `at` stores to). Returns how many loads now read a scratch; each load
    left alone is a remark (`smelt.passes.remarks`)."""
    root = buffer
    stores = [
        o
        for o in at.walk()
        if isinstance(o, memref.StoreOp) and _root(o.memref) is _root(root)
    ]
    if stores:
        remarks.missed(NAME, at, "the operand is stored to inside the pack loop")
        return 0
    packed = 0
    reads = [
        o for o in at.walk() if isinstance(o, memref.LoadOp) and _root(o.memref) is root
    ]
    if not reads:
        remarks.missed(NAME, at, "the pack loop does not read the operand")
    for load in reads:
        if load.memref is not buffer:
            remarks.missed(NAME, load, "the load reads the operand through a loop.view")
            continue
        try:
            pack_load(at, load, max_bytes)
            packed += 1
        except Refused as e:
            remarks.missed(NAME, load, str(e))
    return packed


def _root(buffer: SSAValue) -> SSAValue:
    while isinstance(buffer.owner, loop.ViewOp):
        buffer = buffer.owner.source
    return buffer


@dataclass(frozen=True)
class LoopPackPass(ModulePass):
    """Packs kernel argument `operand` at the loops of role `at`.

    Expects loop-level kernels. In each kernel matching `kernel`, at each loop
    whose role is one of the comma-separated `at` roles (the outermost one that
    encloses a load), every scalar `memref.load` of argument number `operand`
    whose indices are index arithmetic over induction variables of inner loops
    and values fixed inside the pack loop reads instead from a `memref.alloca`
    scratch, filled by a copy nest at the start of the pack loop's body. The
    scratch has one element per iteration of the loops the indices use, laid out
    in their nesting order (the innermost loop walks it with unit stride: a
    transposed operand is packed transposed). Refused (left alone): the operand
    is stored to inside the pack loop, an index depends on a loaded value or an
    iter_arg, or the scratch would exceed `max_bytes`. The loaded values are the
    same, so the result is exact.

        loop.for %j0 {"n.0"} { ... %b = memref.load %B[%k, %j] ... }   (operand=1)
      → loop.for %j0 {"n.0"} { %p = memref.alloca  (copy nest)  ... memref.load %p[..] }
    """

    name = NAME

    at: str
    operand: int
    kernel: str = "*"
    max_bytes: int = 1 << 20

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        roles = {r.strip() for r in self.at.split(",") if r.strip()}
        for kernel in loop_nest.kernels(op, self.kernel):
            pack_kernel(kernel, roles, self.operand, self.max_bytes)


def pack_kernel(
    kernel: func.FuncOp, roles: set[str], operand: int, max_bytes: int
) -> int:
    args = kernel.body.block.args
    if not 0 <= operand < len(args):
        remarks.missed(NAME, kernel, f"no operand {operand}: it takes {len(args)}")
        return 0
    buffer = args[operand]
    packed = 0
    ats = [o for o in loop_nest.loops_under(kernel) if role(o) in roles]
    if not ats:
        wanted = ", ".join(sorted(roles))
        remarks.missed(NAME, kernel, f"no loop of role {wanted} to pack at")
    for at in ats:
        if any(role(p) in roles for p in loop_nest.ancestors(at)):
            continue  # an enclosing loop packs it
        packed += pack(at, buffer, max_bytes)
    return packed
