"""Loop handles shared by the scheduling passes: roles, kernel selection, bands,
index arithmetic and body cloning.

The lowering tags the loops of contraction and convolution kernels with
`loop.role` ("m", "n", "k", "oh", ...) and the kernel with `loop.pattern`
("matmul", "conv2d"). A scheduling pass names its target loops by role (and kernels
by a glob on their names), so the pipeline string says exactly what is rewritten.
Tiling a loop of role `r` into levels gives roles `r.0`, `r.1`, ... outermost first.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

from xdsl.dialects import arith, func, vector
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue

from smelt.dialects import loop
from smelt.dialects.loop import PATTERN_ATTR, ROLE_ATTR, loops_under

INDEX_OPS = (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.ConstantOp, arith.DivUIOp)
"""Pure index arithmetic that may move between the loops of a band (a division
only by a positive constant, so that moving it cannot trap)."""


def role(op: Operation) -> str | None:
    attr = op.attributes.get(ROLE_ATTR)
    return attr.data if isinstance(attr, StringAttr) else None


def set_role(op: Operation, value: str | None) -> None:
    if value is None:
        op.attributes.pop(ROLE_ATTR, None)
    else:
        op.attributes[ROLE_ATTR] = StringAttr(value)


def pattern(kernel: Operation) -> str | None:
    attr = kernel.attributes.get(PATTERN_ATTR)
    return attr.data if isinstance(attr, StringAttr) else None


def kernels(module: ModuleOp, name_glob: str = "*") -> list[func.FuncOp]:
    """The loop kernels of `module` whose names match `name_glob`."""
    return [
        f
        for f in module.ops
        if isinstance(f, func.FuncOp)
        and loop.is_kernel(f)
        and fnmatch.fnmatchcase(f.sym_name.data, name_glob)
    ]


def loops_with_role(root: Operation, name: str) -> list[loop.ForOp]:
    """Loops of role `name` under `root`, outermost (then first) first."""
    return [op for op in loops_under(root) if role(op) == name]


def index_constant(value: int) -> arith.ConstantOp:
    return arith.ConstantOp(IntegerAttr(value, IndexType()))


def body_ops(op: loop.ForOp) -> list[Operation]:
    """The ops of a loop body without its yield."""
    return [o for o in op.body.block.ops if not isinstance(o, loop.YieldOp)]


def is_index_op(op: Operation) -> bool:
    if isinstance(op, arith.DivUIOp) and not _positive_constant(op.rhs):
        return False
    return isinstance(op, INDEX_OPS) and all(
        isinstance(r.type, IndexType) for r in op.results
    )


def _positive_constant(value: SSAValue) -> bool:
    owner = value.owner
    return (
        isinstance(owner, arith.ConstantOp)
        and isinstance(owner.value, IntegerAttr)
        and owner.value.value.data > 0
    )


def only_loop(op: loop.ForOp) -> loop.ForOp | None:
    """The single loop in `op`'s body when everything else is index arithmetic."""
    inner = [o for o in body_ops(op) if not is_index_op(o)]
    if len(inner) == 1 and isinstance(inner[0], loop.ForOp):
        return inner[0]
    return None


def band(top: loop.ForOp, depth: int) -> list[loop.ForOp] | None:
    """`depth` loops nested perfectly (up to index arithmetic) from `top`."""
    nest = [top]
    while len(nest) < depth:
        inner = only_loop(nest[-1])
        if inner is None:
            return None
        nest.append(inner)
    return nest


def sink_index_ops(nest: list[loop.ForOp]) -> None:
    """Moves the index arithmetic between the loops of `nest` to the start of the
    innermost body, so the loops nest perfectly (the ops only use values defined
    outside the nest or its induction variables, which dominate the innermost body)."""
    dest = nest[-1].body.block
    moved: list[Operation] = []
    for op in nest[:-1]:
        for inner in body_ops(op):
            if is_index_op(inner):
                inner.detach()
                moved.append(inner)
    first = dest.first_op
    for inner in moved:
        if first is None:
            dest.add_op(inner)
        else:
            dest.insert_op_before(inner, first)


def add_index(block: Block, before: Operation | None, lhs: SSAValue, rhs: SSAValue):
    """`lhs + rhs` on index, inserted before `before` (or at the end of `block`)."""
    op = arith.AddiOp(lhs, rhs)
    if before is None:
        block.add_op(op)
    else:
        block.insert_op_before(op, before)
    return op.result


def clone_body_into(
    src: Block, dest: Block, mapping: dict[SSAValue, SSAValue], before=None
) -> list[SSAValue]:
    """Clones `src`'s ops (without its yield) into `dest` under `mapping`; returns
    the yielded values, mapped."""
    yielded: list[SSAValue] = []
    for op in src.ops:
        if isinstance(op, loop.YieldOp):
            yielded = [mapping.get(v, v) for v in op.values]
            continue
        # without regions: clone_without_regions is clone less its second
        # pass over the copy's ops
        new = op.clone(mapping) if op.regions else op.clone_without_regions(mapping)
        if before is None:
            dest.add_op(new)
        else:
            dest.insert_op_before(new, before)
    return yielded


def ancestors(op: Operation) -> Iterator[loop.ForOp]:
    """The loops enclosing `op`, innermost first."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, loop.ForOp):
            yield parent
        parent = parent.parent_op()


def iterations(op: loop.ForOp) -> list[int]:
    return list(range(op.lb.data, op.ub.data, op.step.data))


def remove(op: Operation) -> None:
    """Detaches and erases `op` (its results must be unused)."""
    if op.parent is not None:
        op.detach()
    op.erase()


def hoist_invariant_index_ops(op: loop.ForOp) -> None:
    """Moves index arithmetic of `op`'s body that uses no value defined in the body
    in front of `op` (loop-invariant code motion for address computations), and
    the lane masks made from it (`vector.create_mask`, masked vector tails)."""
    parent = op.parent_block()
    assert parent is not None
    body = op.body.block
    for inner in list(body.ops):
        if not (is_index_op(inner) or isinstance(inner, vector.CreateMaskOp)):
            continue
        if any(_defined_in(v, body) for v in inner.operands):
            continue
        inner.detach()
        parent.insert_op_before(inner, op)


def _defined_in(value: SSAValue, block: Block) -> bool:
    owner = value.owner
    if isinstance(owner, Block):
        return owner is block
    return owner.parent_block() is block
