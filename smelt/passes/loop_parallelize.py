"""loop-parallelize: marks each kernel's outermost parallel loop to run on threads."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.dialects.loop import THREADS_ATTR
from smelt.passes.loop_analysis import work


def _index(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def _perfect_inner(op: loop.ForOp) -> loop.ForOp | None:
    """The loop that is the only op of `op`'s body, if it is parallel, plain and
    not innermost (collapsing the innermost loop would cost a division per element
    and take the vector loop apart)."""
    ops = list(op.body.block.ops)
    if len(ops) != 2 or not isinstance(ops[0], loop.ForOp):
        return None
    inner = ops[0]
    if inner.kind.data != loop.PARALLEL or inner.iter_inits:
        return None
    if not any(isinstance(o, loop.ForOp) for o in inner.body.block.ops):
        return None
    return inner


def collapse(nest: list[loop.ForOp]) -> loop.ForOp:
    """Perfectly nested parallel loops without iter_args → one parallel loop.

    `for a: for b: body` → `for t in 0..A·B: a = lb_a + (t / B)·step_a;
    b = lb_b + (t % B)·step_b; body`; loops of one trip become a constant before
    the loop, so a batch-1 nest loses its outer loop without any division.
    """
    outer, innermost = nest[0], nest[-1]
    parent = outer.parent_block()
    assert parent is not None
    total = 1
    for op in nest:
        total *= op.trip_count
    new = loop.ForOp(0, total, 1, loop.PARALLEL)
    new.attributes.update(outer.attributes)
    block = new.body.block
    t = block.args[0]
    varying = [op for op in nest if op.trip_count > 1]
    hints = [op.iv.name_hint for op in varying if op.iv.name_hint]
    t.name_hint = "_".join(hints) if len(hints) == len(varying) and hints else None

    def add(op: Operation) -> SSAValue:
        block.add_op(op)
        return op.results[0]

    rest: SSAValue = t
    ivs: dict[int, SSAValue] = {}
    for level, op in enumerate(nest):
        if op.trip_count == 1:
            constant = _index(op.lb.data)
            parent.insert_op_before(constant, outer)
            ivs[level] = constant.result
    for op in reversed(varying):
        level = nest.index(op)
        if op is varying[0]:
            index = rest
        else:
            n = add(_index(op.trip_count))
            index = add(arith.RemUIOp(rest, n))
            rest = add(arith.DivUIOp(rest, n))
        if op.step.data != 1:
            index = add(arith.MuliOp(index, add(_index(op.step.data))))
        if op.lb.data != 0:
            index = add(arith.AddiOp(index, add(_index(op.lb.data))))
        ivs[level] = index
    for level, op in enumerate(nest):
        if ivs[level] is not t and ivs[level].name_hint is None:
            ivs[level].name_hint = op.iv.name_hint
        op.iv.replace_all_uses_with(ivs[level])
    for op in list(innermost.body.block.ops):
        op.detach()
        block.add_op(op)
    parent.insert_op_before(new, outer)
    parent.erase_op(outer)
    return new


def _uses_outer_scratch(op: loop.ForOp) -> bool:
    """Whether the body uses a scratch buffer allocated outside the loop: threads
    would share it."""
    for inner in op.walk():
        for operand in inner.operands:
            owner = operand.owner
            if isinstance(owner, memref.AllocaOp) and not op.is_ancestor(owner):
                return True
    return False


@dataclass(frozen=True)
class LoopParallelizePass(ModulePass):
    """Marks the outermost parallel loops of each kernel with `loop.threads`.

    Expects loop-level kernels. For each top-level `loop.for` of a kernel that is
    parallel and carries no iter_args: while it runs fewer than
    `tasks_per_thread`·`threads` iterations and its body is exactly one parallel
    loop, the two are collapsed into one (batch 1 nests: 1×12×128 → 12·128...).
    The loop is then marked `{loop.threads = threads}` if its estimated work
    (ops executed, `loop_analysis.work`) reaches `min_work`, so tiny kernels stay
    serial, and if no scratch buffer from outside the loop is shared by its
    iterations. In the kernel of a `graph.loop` (`loop.iterations`), the loops
    directly inside its sequential iteration loop count as top-level too. With
    `threads=1` the pass does nothing.

        loop.for %i = 0 to 1 step 1 parallel {          loop.for %t = 0 to 128 step 1 parallel {
          loop.for %j = 0 to 128 step 1 parallel {  →     %i = arith.constant 0 : index
            body                                          body(%j = %t)
        } }                                             } {loop.threads = 2 : i64}

    The llvm target runs a marked loop as one task per slice of iterations on a
    thread pool that lives as long as the compiled program.
    """

    name = "loop-parallelize"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    threads: int = 1
    min_work: int = 1 << 15
    tasks_per_thread: int = 4

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.threads <= 1:
            return
        for kernel in op.ops:
            if isinstance(kernel, func.FuncOp) and loop.is_kernel(kernel):
                for top in list(kernel.body.block.ops):
                    if isinstance(top, loop.ForOp):
                        self.parallelize(top)
                        if loop.ITERATIONS_ATTR in kernel.attributes:
                            self.iterations(top)

    def iterations(self, op: loop.ForOp) -> None:
        """A graph.loop kernel: the nests inside its sequential iteration loop are
        the outermost parallel loops (each runs on the threads in its turn)."""
        if op.kind.data != loop.REDUCTION or op.iter_inits:
            return
        for inner in list(op.body.block.ops):
            if isinstance(inner, loop.ForOp):
                self.parallelize(inner)

    def parallelize(self, op: loop.ForOp) -> None:
        if (
            op.kind.data != loop.PARALLEL
            or op.iter_inits
            or THREADS_ATTR in op.attributes
        ):
            return
        if any(THREADS_ATTR in o.attributes for o in op.walk()):
            return
        nest, trips = [op], op.trip_count
        while trips < self.tasks_per_thread * self.threads:
            inner = _perfect_inner(nest[-1])
            if inner is None:
                break
            nest.append(inner)
            trips *= inner.trip_count
        if len(nest) > 1:
            op = collapse(nest)
        if op.trip_count < 2 or op.trip_count * work(op.body.block) < self.min_work:
            return
        if _uses_outer_scratch(op):
            return
        op.attributes[THREADS_ATTR] = IntegerAttr(self.threads, 64)
