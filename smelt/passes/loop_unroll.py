"""loop-unroll: full unrolling, unrolling by a factor, and unroll-and-jam."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntAttr, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.passes import loop_nest
from smelt.passes.loop_nest import add_index, index_constant


def _copies(
    op: loop.ForOp, factor: int, full: bool, jam: bool = False, last: bool = False
) -> tuple[list[Block], int]:
    """`factor` clones of `op`'s body in fresh blocks; clone j sees the induction
    variable iv + j·step (a constant when `full`; with `jam` clone 0 too adds
    its 0, so that every clone holds the same ops, which the jam pairs up).
    With `last` (the caller removes `op` afterwards) the last copy is `op`'s own
    body ops, moved rather than cloned. Returns them and the number of
    iterations they cover."""
    blocks = []
    for j in range(factor):
        block = Block(arg_types=[a.type for a in op.body.block.args])
        mapping: dict[SSAValue, SSAValue] = dict(
            zip(op.body.block.args[1:], block.args[1:])
        )
        if full:
            c = index_constant(op.lb.data + j * op.step.data)
            block.add_op(c)
            mapping[op.iv] = c.result
        elif j == 0 and not jam:
            mapping[op.iv] = block.args[0]
        else:
            c = index_constant(j * op.step.data)
            block.add_op(c)
            mapping[op.iv] = add_index(block, None, block.args[0], c.result)
        mapping[op.iv].name_hint = op.iv.name_hint
        if last and j == factor - 1:
            yielded = _move_body_into(op.body.block, block, mapping)
        else:
            yielded = loop_nest.clone_body_into(op.body.block, block, mapping)
        block.add_op(loop.YieldOp(*yielded))
        blocks.append(block)
    return blocks, factor


def _move_body_into(
    src: Block, dest: Block, mapping: dict[SSAValue, SSAValue]
) -> list[SSAValue]:
    """What clone_body_into does, but the ops of `src` (without its yield, which
    is erased) move into `dest`: `src`'s arguments are replaced by their images
    under `mapping` (the clone of `src`'s last copy, without the cloning)."""
    for arg in src.args:
        image = mapping.get(arg)
        if image is not None:
            hint = image.name_hint  # a clone's block arguments take no hint
            arg.replace_all_uses_with(image)
            image.name_hint = hint
    yielded: list[SSAValue] = []
    for op in list(src.ops):
        op.detach()
        if isinstance(op, loop.YieldOp):
            yielded = list(op.values)
            op.erase()
            continue
        dest.add_op(op)
    return yielded


def _chain(blocks: list[Block], dest: Block, inits: list[SSAValue]) -> list[SSAValue]:
    """Moves the copies into `dest` one after the other, each copy's iter_args fed
    by the previous copy's yield; returns the last yield."""
    values = list(inits)
    for block in blocks:
        for arg, value in zip(block.args[1:], values):
            arg.replace_all_uses_with(value)
        for op in list(block.ops):
            op.detach()
            if isinstance(op, loop.YieldOp):
                values = list(op.values)
                loop_nest.remove(op)
            else:
                dest.add_op(op)
    return values


def _jam_ops(seqs: list[list[Operation]], dest: Block) -> list[SSAValue]:
    """Moves the copies' ops into `dest`, loops at the same place fused into one;
    between loops, each copy's ops stay together (copy after copy), so a copy's
    values die before the next copy's are made (register pressure)."""
    yielded: list[SSAValue] = []
    pending: list[list[Operation]] = [[] for _ in seqs]

    def flush() -> None:
        for ops in pending:
            for op in ops:
                op.detach()
                dest.add_op(op)
            ops.clear()

    for ops in zip(*seqs):
        first = ops[0]
        if isinstance(first, loop.YieldOp):
            flush()
            for op in ops:
                yielded += list(op.values)
                op.detach()
                loop_nest.remove(op)
            continue
        if not isinstance(first, loop.ForOp):
            for copy, op in zip(pending, ops):
                copy.append(op)
            continue
        flush()
        inits = [v for op in ops for v in op.iter_inits]
        fused = loop.ForOp(
            first.lb.data, first.ub.data, first.step.data, first.kind.data, inits
        )
        fused.attributes.update(first.attributes)
        dest.add_op(fused)
        args = list(fused.body.block.args[1:])
        for op in ops:
            n = len(op.iter_inits)
            op.iv.replace_all_uses_with(fused.iv)
            for old, new in zip(op.body.block.args[1:], args[:n]):
                old.replace_all_uses_with(new)
            args = args[n:]
        fused.iv.name_hint = first.iv.name_hint
        inner = _jam_ops([list(op.body.block.ops) for op in ops], fused.body.block)
        fused.body.block.add_op(loop.YieldOp(*inner))
        results = list(fused.res)
        for op in ops:
            n = len(op.res)
            for old, new in zip(op.res, results[:n]):
                old.replace_all_uses_with(new)
            results = results[n:]
            op.detach()
            loop_nest.remove(op)
    flush()
    return yielded


def unroll(op: loop.ForOp, factor: int = 0, jam: bool = False) -> None:
    """Unrolls `op` by `factor` (0 or ≥ its trip count: fully).

    Fully: the loop is replaced by its body, once per iteration, with a constant
    induction variable. By a factor: a loop of step factor·step runs `factor`
    copies of the body per iteration, then the original loop runs the leftover
    iterations. With `jam` (parallel loops without iter_args only), the copies
    are not placed one after the other but fused: loops at the same place in the
    body become one loop holding every copy's body, recursively, so the copies
    interleave down to the innermost loops (unroll-and-jam):

        loop.for %i = 0 to 2 { loop.for %k iter_args(%a) { A(%i, %k) } }   (jam, full)
      → loop.for %k iter_args(%a0, %a1) { A(0, %k); A(1, %k) }
    """
    trips = op.trip_count
    if trips == 0:
        return
    if jam and (op.kind.data != loop.PARALLEL or op.iter_inits):
        return
    full = factor <= 0 or factor >= trips
    factor = trips if full else factor
    if factor <= 1 and not full:
        return
    parent = op.parent_block()
    assert parent is not None
    main_ub = op.lb.data + (trips // factor) * factor * op.step.data
    # `op` goes when the copies cover all its iterations: its body is the last copy
    blocks, _ = _copies(op, factor, full, jam, last=full or main_ub == op.ub.data)
    if full:
        # the copies go straight into the parent block before `op`
        holder = Block()
        values = (
            _jam_ops([list(b.ops) for b in blocks], holder)
            if jam
            else _chain(blocks, holder, list(op.iter_inits))
        )
        for inner in list(holder.ops):
            inner.detach()
            parent.insert_op_before(inner, op)
        for old, new in zip(op.res, values):
            old.replace_all_uses_with(new)
        loop_nest.remove(op)
        return
    main = loop.ForOp(
        op.lb.data, main_ub, op.step.data * factor, op.kind.data, op.iter_inits
    )
    main.attributes.update(op.attributes)
    for block in blocks:
        block.args[0].replace_all_uses_with(main.iv)
    main.iv.name_hint = op.iv.name_hint
    body = main.body.block
    if jam:
        values = _jam_ops([list(b.ops) for b in blocks], body)
    else:
        values = _chain(blocks, body, list(body.args[1:]))
    body.add_op(loop.YieldOp(*values))
    parent.insert_op_before(main, op)
    if main_ub == op.ub.data:
        for old, new in zip(op.res, main.res):
            old.replace_all_uses_with(new)
        loop_nest.remove(op)
    else:
        op.lb = IntAttr(main_ub)
        op.operands = list(main.res)


@dataclass(frozen=True)
class LoopUnrollPass(ModulePass):
    """Unrolls the loops of role `loop` in kernels matching `kernel`.

    Expects loop-level kernels. `factor=0` (or a factor at least the trip count)
    unrolls fully: the loop disappears, its body repeated with constant induction
    variables. Otherwise a loop of step factor·step holds `factor` copies and a
    remainder loop keeps the leftover iterations. With `jam=true` the target must
    be parallel without iter_args (else it is left alone) and the copies of each
    inner loop are fused into one loop, recursively (unroll-and-jam: register
    blocking). Loops targeted from the innermost out, so nested targets compose.
    The copies compute what the iterations computed, in an order that parallel
    loops allow; reductions stay in order. With `hint=true` (a factor, no jam)
    the loop stays and gets `loop.unroll = factor`: the target unrolls it.
    With `tail` > 0, a target with fewer iterations than another target of its
    kernel (the remainder tile of a register block) is unrolled by `tail`
    instead: a smaller copy that loops, rather than one more full-size copy.

        loop.for %i = 0 to 3 step 1 {loop.role = "u"} { S(%i) }    (factor=0)
      → %c0 = arith.constant 0 : index  S(%c0)  ...  S(%c2)
    """

    name = "loop-unroll"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    loop: str
    factor: int = 0
    jam: bool = False
    hint: bool = False
    tail: int = 0
    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            targets = loop_nest.loops_with_role(kernel, self.loop)
            most = max((t.trip_count for t in targets), default=0)
            for target in reversed(targets):
                if self.hint and self.factor > 1 and not self.jam:
                    target.attributes[loop.UNROLL_ATTR] = IntegerAttr(
                        self.factor, 64
                    )
                elif self.tail > 0 and target.trip_count < most:
                    unroll(target, self.tail, self.jam)
                else:
                    unroll(target, self.factor, self.jam)
