"""loop-interchange: permutes a perfectly nested band of loops."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.passes import loop_nest
from smelt.passes.loop_nest import role


class Illegal(Exception):
    """The permutation is not applied; the message says why."""


def check(nest: list[loop.ForOp], order: list[int]) -> None:
    """Raises Illegal unless running `nest` in `order` computes the same values.

    Parallel loops reorder freely (their iterations are independent); reduction
    loops keep their relative order (a float sum would be reassociated), and no
    loop of the band may carry iter_args."""
    if any(op.iter_inits for op in nest):
        raise Illegal("a loop of the band carries iter_args")
    reductions = [i for i in order if nest[i].kind.data == loop.REDUCTION]
    if reductions != sorted(reductions):
        raise Illegal("reduction loops would change their relative order")


def interchange(nest: list[loop.ForOp], order: list[int]) -> None:
    """Runs the loops of a perfect band in `order` (position → old loop index),
    by swapping loop headers and induction variables in place:

        loop.for %i = 0 to 4 { loop.for %j = 0 to 8 { body(%i, %j) } }   (order 1,0)
      → loop.for %j = 0 to 8 { loop.for %i = 0 to 4 { body(%i, %j) } }
    """
    loop_nest.sink_index_ops(nest)
    headers = [
        (op.lb, op.ub, op.step, op.kind, dict(op.attributes), op.iv.name_hint)
        for op in nest
    ]
    old_ivs = [op.iv for op in nest]
    new_iv: dict[SSAValue, SSAValue] = {
        old_ivs[src]: nest[pos].iv for pos, src in enumerate(order)
    }
    for inner in list(nest[0].walk()):
        if inner in nest:
            continue
        new_operands = [new_iv.get(v, v) for v in inner.operands]
        if new_operands != list(inner.operands):
            inner.operands = new_operands
    for pos, src in enumerate(order):
        lb, ub, step, kind, attrs, _ = headers[src]
        op = nest[pos]
        op.lb, op.ub, op.step, op.kind = lb, ub, step, kind
        op.attributes.clear()
        op.attributes.update(attrs)
    for pos, src in enumerate(order):
        nest[pos].iv.name_hint = headers[src][5]


def reorder(top: loop.ForOp, roles: list[str]) -> list[loop.ForOp] | None:
    """Permutes the band under `top` (the perfectly nested loops whose roles are
    in `roles`, each at most once) into the order of `roles`; returns the band
    when it did, None when the band is shorter than two loops or illegal."""
    nest = [top]
    while (inner := loop_nest.only_loop(nest[-1])) is not None:
        if role(inner) not in roles or role(inner) in map(role, nest):
            break
        nest.append(inner)
    if len(nest) < 2 or role(top) not in roles:
        return None
    have = [role(op) for op in nest]
    order = [have.index(r) for r in roles if r in have]
    try:
        check(nest, order)
    except Illegal:
        return None
    if order != list(range(len(order))):
        interchange(nest, order)
    return nest


@dataclass(frozen=True)
class LoopInterchangePass(ModulePass):
    """Permutes bands of perfectly nested loops into the role order `order`.

    Expects loop-level kernels. A band is the loops nested with nothing between
    them but index arithmetic (which moves into the innermost body), from an
    outermost loop with a role in `order`, as deep as the roles are in `order`
    (each once); roles of `order` missing from a band (a remainder nest) are
    skipped. The band is permuted when no loop of it carries iter_args and the
    reduction loops keep their relative order; otherwise it is left alone. The
    same element computations run with the same operands, in another order.

        loop.for %m {loop.role = "m"} {           (order="n,m")
          loop.for %n {loop.role = "n"} { S }   → loop.for %n {"n"} { loop.for %m {"m"} { S } }
        }
    """

    name = "loop-interchange"

    order: str
    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        roles = [r.strip() for r in self.order.split(",") if r.strip()]
        if len(roles) < 2:
            return
        for kernel in loop_nest.kernels(op, self.kernel):
            apply_order(kernel, roles)


def apply_order(root: Operation, roles: list[str]) -> None:
    """Reorders every band under `root` whose loops carry roles of `roles`."""
    done: set[int] = set()
    for top in loop_nest.loops_under(root):
        if id(top) in done or role(top) not in roles:
            continue
        if any(id(p) in done for p in loop_nest.ancestors(top)):
            continue
        nest = reorder(top, roles)
        if nest is not None:
            done.update(id(o) for o in nest)
