"""The shape of a loop-level kernel as the Triton target sees it: phases (one launch
each), loop chains, static dependences of every value on loop sources, and which inner
chains can run as blocks along a second axis."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, memref
from xdsl.ir import Operation, SSAValue

from smelt.dialects.loop import PARALLEL, REDUCTION, ForOp, YieldOp

Deps = frozenset[SSAValue]
EMPTY: Deps = frozenset()


def is_statement(op: Operation) -> bool:
    """Ops with effects or structure; every other op is a pure value (loads too)."""
    return isinstance(op, ForOp | memref.StoreOp | YieldOp | func.ReturnOp)


def body_ops(loop: ForOp) -> list[Operation]:
    """The ops of a loop body without its terminator."""
    return [op for op in loop.body.block.ops if not isinstance(op, YieldOp)]


@dataclass
class Chain:
    """Loops nested through bodies that hold pure ops and exactly one inner loop.

    A reduction chain carries its iter_args down: each inner loop starts from the
    outer loop's block arguments and each outer loop yields the inner results, so
    the chain is one loop over the flattened extents with `inits`."""

    loops: list[ForOp]

    @property
    def ivs(self) -> list[SSAValue]:
        return [loop.iv for loop in self.loops]

    @property
    def extents(self) -> list[int]:
        return [loop.trip_count for loop in self.loops]

    @property
    def total(self) -> int:
        n = 1
        for e in self.extents:
            n *= e
        return n

    @property
    def kind(self) -> str:
        return self.loops[0].kind.data

    @property
    def inner(self) -> ForOp:
        return self.loops[-1]

    @property
    def accs(self) -> list[SSAValue]:
        """The innermost loop's iter block arguments (the running accumulators)."""
        return list(self.inner.body.block.args[1:])

    @property
    def inits(self) -> list[SSAValue]:
        return list(self.loops[0].iter_inits)

    @property
    def results(self) -> list[SSAValue]:
        return list(self.loops[0].res)

    @property
    def yielded(self) -> list[SSAValue]:
        last = self.inner.body.block.last_op
        assert isinstance(last, YieldOp)
        return list(last.values)

    def level_ops(self, i: int) -> list[Operation]:
        """The pure ops of level i (the inner loop excluded; all ops for the last)."""
        return [op for op in body_ops(self.loops[i]) if op is not self._next(i)]

    def _next(self, i: int) -> ForOp | None:
        return self.loops[i + 1] if i + 1 < len(self.loops) else None

    def all_ops(self) -> list[Operation]:
        ops = []
        for i in range(len(self.loops)):
            ops.extend(self.level_ops(i))
        return ops


def chain_from(loop: ForOp, kinds: Sequence[str] = (PARALLEL, REDUCTION)) -> Chain:
    """The longest chain that starts at `loop` with loops of loop's kind."""
    loops = [loop]
    while True:
        cur = loops[-1]
        ops = body_ops(cur)
        inner = [op for op in ops if isinstance(op, ForOp)]
        if len(inner) != 1 or any(is_statement(o) for o in ops if o is not inner[0]):
            break
        nxt = inner[0]
        if nxt.kind.data != cur.kind.data or nxt.kind.data not in kinds:
            break
        carried = list(cur.body.block.args[1:])
        last = cur.body.block.last_op
        assert isinstance(last, YieldOp)
        if list(nxt.iter_inits) != carried or list(last.values) != list(nxt.res):
            break
        if any(u.operation is not nxt for a in carried for u in a.uses):
            break
        loops.append(nxt)
    return Chain(loops)


def grid_chain(loop: ForOp) -> Chain:
    """The outer parallel loops without iter_args that become a launch grid."""
    chain = chain_from(loop, (PARALLEL,))
    for i, lp in enumerate(chain.loops):
        if lp.iter_inits:
            return Chain(chain.loops[:i])
    return chain


# --- phases --------------------------------------------------------------------------


@dataclass
class Phase:
    """One launch of a kernel: a grid chain (maybe empty) and the ops under it."""

    grid: Chain | None
    ops: list[Operation]  # without grid: top-level statements run by one program

    @property
    def body(self) -> list[Operation]:
        """The ops of the innermost grid body (or the serial ops)."""
        if self.grid is None or not self.grid.loops:
            return self.ops
        return self.grid.level_ops(len(self.grid.loops) - 1)

    def grid_level_ops(self) -> list[Operation]:
        """Pure ops between grid loops, outermost first."""
        if self.grid is None:
            return []
        ops = []
        for i in range(len(self.grid.loops) - 1):
            ops.extend(self.grid.level_ops(i))
        return ops


def kernel_phases(kernel: func.FuncOp) -> list[Phase]:
    """Top-level parallel loops become one phase each; runs of other top-level ops
    become serial phases. If a value crosses phases, the whole kernel is one serial
    phase (correct, slow)."""
    stmts = [
        op
        for op in kernel.body.block.ops
        if not isinstance(op, arith.ConstantOp | func.ReturnOp)
    ]
    phases: list[Phase] = []
    serial: list[Operation] = []
    for op in stmts:
        if isinstance(op, ForOp) and op.kind.data == PARALLEL and not op.iter_inits:
            if serial:
                phases.append(Phase(None, serial))
                serial = []
            chain = grid_chain(op)
            phases.append(Phase(chain, [op]))
        else:
            serial.append(op)
    if serial:
        phases.append(Phase(None, serial))
    owner: dict[SSAValue, int] = {}
    for i, phase in enumerate(phases):
        for top in phase.ops:
            for op in top.walk():
                for r in op.results:
                    owner[r] = i
    for i, phase in enumerate(phases):
        for top in phase.ops:
            for op in top.walk():
                if any(owner.get(v, i) != i for v in op.operands):
                    return [Phase(None, stmts)]
    return phases


# --- dependences ---------------------------------------------------------------------


def dependences(kernel: func.FuncOp) -> dict[SSAValue, Deps]:
    """For every value, the loop sources it depends on: loop ivs, iter block
    arguments and loop results (buffers and constants depend on nothing)."""
    deps: dict[SSAValue, Deps] = {}
    for op in kernel.walk():
        if isinstance(op, ForOp):
            for a in op.body.block.args:
                deps[a] = frozenset([a])
            for r in op.res:
                deps[r] = frozenset([r])
            continue
        d = union(deps.get(v, EMPTY) for v in op.operands)
        for r in op.results:
            deps[r] = d
    return deps


def union(sets: Iterable[Deps]) -> Deps:
    out: set[SSAValue] = set()
    for s in sets:
        out |= s
    return frozenset(out)


def walk_ops(ops: Iterable[Operation]) -> Iterable[Operation]:
    for op in ops:
        yield from op.walk()


def stored_buffers(ops: Iterable[Operation]) -> set[SSAValue]:
    return {op.memref for op in walk_ops(ops) if isinstance(op, memref.StoreOp)}


def loaded_buffers(ops: Iterable[Operation]) -> set[SSAValue]:
    return {op.memref for op in walk_ops(ops) if isinstance(op, memref.LoadOp)}


# --- chains that run as blocks ------------------------------------------------------

COMBINERS = (
    arith.AddfOp, arith.AddiOp, arith.MulfOp, arith.MuliOp, arith.MaximumfOp,
    arith.MinimumfOp,
)  # fmt: skip


@dataclass
class BlockChain:
    """An inner chain run as blocks along a second axis; accumulators are blocks
    combined with `combiners[i]` and reduced across the axis after the loop."""

    chain: Chain
    combiners: list[type[Operation]] = field(default_factory=list)


def combine_op(acc: SSAValue, yielded: SSAValue) -> type[Operation] | None:
    """The combiner when `yielded` is combine(acc, v) or select(c, combine(acc, v),
    acc), with acc and the running value used nowhere else (a scan that stores its
    running total, like cum_sum, is sequential); else None."""
    op = yielded.owner
    uses = {u.operation for u in acc.uses}
    if not yielded.has_one_use():
        return None
    if isinstance(op, arith.SelectOp) and op.rhs is acc:
        inner = op.lhs.owner
        if (
            isinstance(inner, COMBINERS)
            and uses == {op, inner}
            and inner.result.has_one_use()
            and acc in inner.operands
            and list(inner.operands).count(acc) == 1
        ):
            return type(inner)
        return None
    if isinstance(op, COMBINERS) and uses == {op} and list(op.operands).count(acc) == 1:
        return type(op)
    return None


def block_chain(loop: ForOp, deps: dict[SSAValue, Deps]) -> BlockChain | None:
    """`loop`'s chain as a block chain if its iterations can run side by side: no
    inner loops, every accumulator combined associatively, every store indexed by
    all chain ivs, and a buffer both loaded and stored only at one same index."""
    chain = chain_from(loop)
    ops = chain.all_ops()
    if any(isinstance(op, ForOp) for op in ops):
        return None
    combiners = []
    for acc, y in zip(chain.accs, chain.yielded):
        c = combine_op(acc, y)
        if c is None:
            return None
        combiners.append(c)
    ivs = set(chain.ivs)
    indices: dict[SSAValue, set[tuple[SSAValue, ...]]] = {}
    stored = set()
    for op in ops:
        if isinstance(op, memref.StoreOp):
            index = tuple(op.indices)
            if not ivs <= union(deps.get(i, EMPTY) for i in index):
                return None
            stored.add(op.memref)
            indices.setdefault(op.memref, set()).add(index)
        elif isinstance(op, memref.LoadOp):
            indices.setdefault(op.memref, set()).add(tuple(op.indices))
    if any(len(indices[b]) > 1 for b in stored):
        return None
    return BlockChain(chain, combiners)
