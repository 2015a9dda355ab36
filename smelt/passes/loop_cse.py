"""loop-cse: index arithmetic, constants and broadcasts computed twice become one."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.passes import loop_nest

PURE = (
    arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivUIOp, arith.DivSIOp,
    arith.RemUIOp, arith.RemSIOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp,
    arith.CmpiOp, arith.SelectOp, arith.IndexCastOp, vector.BroadcastOp,
    vector.ShuffleOp,
)  # fmt: skip
"""Ops without memory effects whose result depends on their operands and
properties alone (a division that traps would have trapped at the first copy)."""

COMMUTATIVE = (arith.AddiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp)

_PURE = frozenset(PURE)
_COMMUTATIVE = frozenset(COMMUTATIVE)


def _key(op: Operation) -> tuple | None:
    """What makes two ops compute the same value, or None for an op kept as is."""
    kind = type(op)
    if kind is arith.ConstantOp:
        value = op.value
        if isinstance(value, IntegerAttr):
            return (kind, value, op.result.type)
        if isinstance(value, FloatAttr):  # by repr: -0.0 == 0.0, and NaN != NaN
            return (kind, repr(value.value.data), op.result.type)
        return None
    if kind not in _PURE or len(op.results) != 1:
        return None
    # the operand tuple itself (`Operation.operands` builds a view per call: this
    # pass looks at every op of every kernel)
    operands: tuple[SSAValue, ...] = op._operands
    if kind in _COMMUTATIVE and id(operands[0]) > id(operands[1]):
        operands = (operands[1], operands[0])
    props = tuple(op.properties.items()) if op.properties else ()
    attrs = tuple(op.attributes.items()) if op.attributes else ()
    return (kind, operands, props, attrs, op.results[0].type)


def cse_block(block: Block, known: dict[tuple, SSAValue], added: list[tuple]) -> int:
    """Replaces the ops of `block` (and of the regions in it) that recompute a
    value of `known` (values that dominate the block) by that value; returns
    how many were erased. Entries made inside a nested region are dropped when
    it ends (they do not dominate what follows it)."""
    erased = 0
    for op in list(block.ops):
        if op.regions:
            for region in op.regions:
                for inner in region.blocks:
                    mark = len(added)
                    erased += cse_block(inner, known, added)
                    for key in added[mark:]:
                        del known[key]
                    del added[mark:]
            continue
        key = _key(op)
        if key is None:
            continue
        same = known.get(key)
        if same is None:
            known[key] = op.results[0]
            added.append(key)
            continue
        op.results[0].replace_all_uses_with(same)
        block.detach_op(op)
        op.erase(safe_erase=False)
        erased += 1
    return erased


@dataclass(frozen=True)
class LoopCsePass(ModulePass):
    """Common-subexpression elimination of the pure scalar ops of loop kernels.

    Expects loop-level kernels. An integer / index op (addi, muli, divui, cmpi,
    select, ...), a scalar constant or a vector.broadcast that computes what an
    op before it computes (same kind, operands, properties; a value of an
    enclosing block or earlier in the same block) is replaced by that op's
    value. Loads, stores, float arithmetic and loops stay. The unrolling
    passes repeat the address arithmetic of every copy; this shares it.

        %a = arith.addi %i, %c16 : index   %b = arith.addi %i, %c16 : index
      → %a = arith.addi %i, %c16 : index   (uses of %b use %a)
    """

    name = "loop-cse"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            for block in kernel.body.blocks:
                cse_block(block, {}, [])
