"""Elementwise and rows phases: the grid loops flattened into lanes, BLOCK (or
BLOCK_M) grid points a program with a tail mask; in rows mode the inner chains
chosen by `schedule.plan` run as [BLOCK_M, BLOCK_R] blocks with block
accumulators, reduced after their loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from smelt.lowering.triton import schedule as sched
from smelt.lowering.triton.ops import constant
from smelt.lowering.triton.prelude import COMBINE, IDENTITY, REDUCE
from smelt.lowering.triton.structure import BlockChain

if TYPE_CHECKING:
    from smelt.lowering.triton.emit import PhaseEmitter


def emit_lanes(e: PhaseEmitter) -> tuple[sched.Schedule, int]:
    grid = e.phase.grid
    assert grid is not None
    total = grid.total
    w = e.w
    w.line("pid = tl.program_id(0)")
    if e.mode is sched.Mode.ROWS:
        inner = max(bc.chain.total for bc in e.block_chains.values())
        schedule = sched.rows(total, inner)
        w.line("offs = pid * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]")
        block = schedule.block("BLOCK_M")
    else:
        schedule = sched.elementwise(total)
        w.line("offs = pid * BLOCK + tl.arange(0, BLOCK)")
        block = schedule.block("BLOCK")
    w.line(f"mask_l = offs < {total}")
    e.delinearize("offs", grid.ivs, grid.extents, frozenset({"L"}))
    e.statements(e.phase.grid_level_ops() + e.phase.body)
    return schedule, -(-total // block)


def emit_block_loop(e: PhaseEmitter, bc: BlockChain) -> None:
    """A chain run in [BLOCK_M, BLOCK_R] blocks with block accumulators."""
    chain = bc.chain
    total = chain.total
    shape = "[BLOCK_M, BLOCK_R]"
    accs = []
    for acc, combiner in zip(chain.accs, bc.combiners):
        ident = constant(IDENTITY[combiner], acc.type)
        accs.append(e.w.assign(f"tl.broadcast_to({ident}, {shape})", "acc"))
    r0 = e.w.fresh("r")
    with e.w.indented(f"for {r0} in range(0, {total}, BLOCK_R):"), e.scope():
        r = e.w.assign(f"{r0} + tl.arange(0, BLOCK_R)[None, :]", "r")
        e.w.line(f"mask_r = {r} < {total}")
        e.delinearize(r, chain.ivs, chain.extents, frozenset({"R"}))
        for acc, name in zip(chain.accs, accs):
            e.place(acc, frozenset({"L", "R"}), name)
        e.statements(chain.all_ops())
        full = e.mask(frozenset({"L", "R"}))
        new = [e.value(v) for v in chain.yielded]
        for name, expr in zip(accs, new):
            e.w.line(f"{name} = tl.where({full}, {expr}, {name})")
    for res, init, name, combiner in zip(
        chain.results, chain.inits, accs, bc.combiners
    ):
        reduced = REDUCE[combiner].format(name) + "[:, None]"
        combined = COMBINE[combiner].format(e.value(init), reduced)
        e.place(res, frozenset({"L"}), e.w.assign(combined))
