"""Recognizes contractions (matmul, gemm, conv) in a phase so that they become
`tl.dot` tiles: out[T] = finish(init[T] + sum_K lhs[M, K] * rhs[K, N]).

Two loop shapes carry a contraction:

* the dot form: grid ivs T, then a reduction chain over K with one accumulator,
  `acc' = acc + x * y`, whose result flows through straight-line ops to stores;
* the in-memory form: under grid ivs, a parallel chain stores the initial value to
  OUT, a reduction chain over K holds a parallel chain Q doing
  `OUT[I] = OUT[I] + x * y`, and an optional parallel chain reloads OUT[I] for the
  epilogue. The three chains must index OUT the same way (their ivs are matched).

Tile dims are T (plus Q); a tile dim is an M dim when only x depends on it, an N dim
when only y does, and a batch dim otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import AnyFloat, IntegerType
from xdsl.ir import Operation, SSAValue

from smelt.dialects.loop import PARALLEL, REDUCTION, ForOp
from smelt.lowering.triton.structure import (
    EMPTY,
    Chain,
    Deps,
    Phase,
    body_ops,
    chain_from,
    is_statement,
    loaded_buffers,
    stored_buffers,
)

_EXTENSIONS = (arith.ExtFOp, arith.ExtSIOp, arith.SIToFPOp)


@dataclass
class Contraction:
    """What the dot emitter needs; ivs are SSA values of the original loops."""

    tile_ivs: list[SSAValue]
    tile_extents: list[int]
    m_dims: list[int]  # positions in tile_ivs
    n_dims: list[int]
    batch_dims: list[int]
    k_ivs: list[SSAValue]
    k_extents: list[int]
    lhs: SSAValue  # depends on M and K dims
    rhs: SSAValue  # depends on K and N dims
    acc_type: object
    init: SSAValue | None  # None: zero
    result: SSAValue  # bound to init + sum before `post` runs
    post: list[Operation]  # straight-line ops run on the finished tile
    alias: dict[SSAValue, SSAValue] = field(default_factory=dict)  # iv -> tile iv
    final_store: tuple[SSAValue, list[SSAValue]] | None = None  # (OUT, index)

    @property
    def m_total(self) -> int:
        return _prod(self.tile_extents[i] for i in self.m_dims)

    @property
    def n_total(self) -> int:
        return _prod(self.tile_extents[i] for i in self.n_dims)

    @property
    def k_total(self) -> int:
        return _prod(self.k_extents)

    @property
    def batch_total(self) -> int:
        return _prod(self.tile_extents[i] for i in self.batch_dims)


def _prod(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


def _product(value: SSAValue, acc: SSAValue) -> tuple[SSAValue, SSAValue] | None:
    """(x, y) when value is acc + x * y (either operand order)."""
    op = value.owner
    if not isinstance(op, arith.AddfOp | arith.AddiOp) or acc not in op.operands:
        return None
    other = op.rhs if op.lhs is acc else op.lhs
    mul = other.owner
    if not isinstance(mul, arith.MulfOp | arith.MuliOp) or not other.has_one_use():
        return None
    return mul.lhs, mul.rhs


def _supported_acc(t: object) -> bool:
    if isinstance(t, AnyFloat):
        return t.bitwidth == 32
    return isinstance(t, IntegerType) and t.width.data == 32


def _pure(ops: list[Operation]) -> bool:
    return not any(is_statement(op) for op in ops)


def _classify(
    tile_ivs: list[SSAValue],
    lhs: SSAValue,
    rhs: SSAValue,
    deps: dict[SSAValue, Deps],
    alias: dict[SSAValue, SSAValue],
) -> tuple[list[int], list[int], list[int], SSAValue, SSAValue] | None:
    def on(v: SSAValue) -> set[SSAValue]:
        return {alias.get(s, s) for s in deps.get(v, EMPTY)}

    dl, dr = on(lhs), on(rhs)
    m = [i for i, iv in enumerate(tile_ivs) if iv in dl and iv not in dr]
    n = [i for i, iv in enumerate(tile_ivs) if iv in dr and iv not in dl]
    b = [i for i in range(len(tile_ivs)) if i not in m and i not in n]
    return m, n, b, lhs, rhs


def _operands_ok(
    x: SSAValue,
    y: SSAValue,
    allowed: set[SSAValue],
    deps: dict[SSAValue, Deps],
    written: set[SSAValue],
) -> bool:
    for v in (x, y):
        if not deps.get(v, EMPTY) <= allowed:
            return False
        if loaded_buffers(_dag_ops(v)) & written:
            return False
    return True


def _dag_ops(value: SSAValue) -> list[Operation]:
    """The ops that compute `value` (stopping at block arguments)."""
    seen: dict[Operation, None] = {}
    stack = [value]
    while stack:
        v = stack.pop()
        op = v.owner
        if not isinstance(op, Operation) or op in seen or isinstance(op, ForOp):
            continue
        seen[op] = None
        stack.extend(op.operands)
    return list(seen)


def find_contraction(phase: Phase, deps: dict[SSAValue, Deps]) -> Contraction | None:
    """The contraction computed by `phase` (under its grid loops), or None."""
    if phase.grid is None or not phase.grid.loops:
        return memory_form([], [], phase.ops, deps, stored_buffers(phase.ops))
    grid = phase.grid
    body = phase.body
    loops = [op for op in body if isinstance(op, ForOp)]
    written = stored_buffers(phase.ops)
    if (
        len(loops) == 1
        and loops[0].kind.data == REDUCTION
        and _pure(body[: body.index(loops[0])])
    ):
        return _dot_form(grid, body, loops[0], deps, written)
    return memory_form(grid.ivs, grid.extents, body, deps, written)


def _dot_form(
    grid: Chain,
    body: list[Operation],
    red: ForOp,
    deps: dict[SSAValue, Deps],
    written: set[SSAValue],
) -> Contraction | None:
    chain = chain_from(red, (REDUCTION,))
    if len(chain.accs) != 1 or not chain.accs[0].type or len(chain.results) != 1:
        return None
    if any(isinstance(op, ForOp) or is_statement(op) for op in chain.all_ops()):
        return None
    acc = chain.accs[0]
    if not _supported_acc(acc.type) or not acc.has_one_use():
        return None
    xy = _product(chain.yielded[0], acc)
    if xy is None:
        return None
    post = body[body.index(red) + 1 :]
    if any(isinstance(op, ForOp) for op in post):
        return None
    tile = grid.ivs
    allowed = set(tile) | set(chain.ivs)
    if not _operands_ok(*xy, allowed, deps, written):
        return None
    if not deps.get(chain.inits[0], EMPTY) <= set(tile):
        return None
    cls = _classify(tile, *xy, deps, {})
    if cls is None:
        return None
    m, n, b, x, y = cls
    return Contraction(
        tile, grid.extents, m, n, b, chain.ivs, chain.extents, x, y, acc.type,
        chain.inits[0], chain.results[0], post,
    )  # fmt: skip


def _single_store(ops: list[Operation]) -> memref.StoreOp | None:
    stores = [op for op in ops if isinstance(op, memref.StoreOp)]
    if len(stores) != 1 or any(isinstance(op, ForOp) for op in ops):
        return None
    return stores[0]


def _match(
    index: list[SSAValue],
    ivs: list[SSAValue],
    ref: list[SSAValue],
    ref_ivs: list[SSAValue],
) -> dict[SSAValue, SSAValue] | None:
    """iv -> ref iv when `index` addresses like `ref` up to renaming ivs to ref_ivs."""
    if len(index) != len(ref):
        return None
    alias: dict[SSAValue, SSAValue] = {}
    for a, r in zip(index, ref):
        if a in ivs and r in ref_ivs:
            if alias.setdefault(a, r) is not r:
                return None
        elif a is not r or a in ivs or r in ref_ivs:
            return None
    if set(alias) != set(ivs) or set(alias.values()) != set(ref_ivs):
        return None
    return alias


def nest_from(loop: ForOp) -> Chain | None:
    """Loops of any kind nested through bodies of pure ops and one inner loop,
    without iter_args; None if some level carries values."""
    loops = [loop]
    while True:
        if loops[-1].iter_inits:
            return None
        ops = body_ops(loops[-1])
        inner = [op for op in ops if isinstance(op, ForOp)]
        if len(inner) != 1 or not _pure([o for o in ops if o is not inner[0]]):
            return Chain(loops)
        loops.append(inner[0])


def memory_form(
    grid_ivs: list[SSAValue],
    grid_extents: list[int],
    stmts: list[Operation],
    deps: dict[SSAValue, Deps],
    written: set[SSAValue],
) -> Contraction | None:
    """[fill nest, update nest, optional epilogue nest] among pure ops: the fill
    stores OUT's initial value, the update nest (its parallel loops are tile dims,
    its reduction loops K) does OUT[I] += x * y, the epilogue reloads OUT[I]."""
    loops = [op for op in stmts if isinstance(op, ForOp)]
    if len(loops) not in (2, 3) or not _pure([o for o in stmts if o not in loops]):
        return None
    nests = [nest_from(op) for op in loops]
    if any(n is None for n in nests):
        return None
    init_chain, update_nest, *rest = nests
    assert init_chain is not None and update_nest is not None
    if any(lp.kind.data != PARALLEL for n in (init_chain, *rest) for lp in n.loops):
        return None
    q_ivs = [lp.iv for lp in update_nest.loops if lp.kind.data == PARALLEL]
    q_extents = [lp.trip_count for lp in update_nest.loops if lp.kind.data == PARALLEL]
    k_loops = [lp for lp in update_nest.loops if lp.kind.data == REDUCTION]
    if not k_loops:
        return None
    init_store = _single_store(init_chain.all_ops())
    update = _single_store(update_nest.all_ops())
    if init_store is None or update is None or update.memref is not init_store.memref:
        return None
    out = init_store.memref
    index = list(update.indices)
    acc_load = None
    xy = None
    op = update.value.owner
    if isinstance(op, arith.AddfOp | arith.AddiOp):
        for candidate in op.operands:
            ld = candidate.owner
            if (
                isinstance(ld, memref.LoadOp)
                and ld.memref is out
                and list(ld.indices) == index
            ):
                acc_load = candidate
                xy = _product(update.value, candidate)
    if xy is None or acc_load is None or not acc_load.has_one_use():
        return None
    if not _supported_acc(acc_load.type):
        return None
    alias = _match(list(init_store.indices), init_chain.ivs, index, q_ivs)
    if alias is None or init_chain.extents != q_extents:
        return None
    tile = list(grid_ivs) + q_ivs
    post: list[Operation] = []
    result: SSAValue = acc_load
    final_store = None
    if rest:
        epi = rest[0]
        ops = epi.all_ops()
        if epi.extents != q_extents:
            return None
        loads = [o for o in ops if isinstance(o, memref.LoadOp) and o.memref is out]
        if len(loads) != 1:
            return None
        epi_alias = _match(list(loads[0].indices), epi.ivs, index, q_ivs)
        if epi_alias is None:
            return None
        alias |= epi_alias
        result = loads[0].res
        post = [o for o in ops if o is not loads[0]]
    else:
        final_store = (out, index)
    k_ivs = [lp.iv for lp in k_loops]
    allowed = set(tile) | set(k_ivs)
    if not _operands_ok(*xy, allowed, deps, written - {out}):
        return None
    if loaded_buffers(_dag_ops(xy[0]) + _dag_ops(xy[1])) & {out}:
        return None
    init_value = init_store.value
    if not {alias.get(s, s) for s in deps.get(init_value, EMPTY)} <= set(tile):
        return None
    m, n, b, x, y = _classify(tile, *xy, deps, alias)
    extents = list(grid_extents) + q_extents
    return Contraction(
        tile, extents, m, n, b, k_ivs, [lp.trip_count for lp in k_loops], x, y,
        acc_load.type, init_value, result, post, alias, final_store,
    )  # fmt: skip


def _peel(v: SSAValue) -> SSAValue:
    owner = v.owner
    if isinstance(owner, arith.ExtFOp | arith.ExtSIOp) and isinstance(
        owner.input.owner, memref.LoadOp
    ):
        return owner.input
    return v


def dot_types(c: Contraction) -> tuple[SSAValue, SSAValue, int, str | None] | None:
    """(lhs, rhs, operand bits, input precision) for tl.dot, or None."""
    x, y = _peel(c.lhs), _peel(c.rhs)
    if isinstance(c.acc_type, IntegerType):
        ok = all(
            isinstance(v.type, IntegerType) and v.type.width.data == 8 for v in (x, y)
        )
        return (x, y, 8, None) if ok else None
    if x.type == y.type and isinstance(x.type, AnyFloat) and x.type.bitwidth == 16:
        return x, y, 16, None
    if not all(
        isinstance(v.type, AnyFloat) and v.type.bitwidth == 32 for v in (c.lhs, c.rhs)
    ):
        return None
    return c.lhs, c.rhs, 32, "tf32"
