"""loop-promote: scalar replacement of loop-invariant memory cells by iter_args."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, memref, vector
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import dtypes, loop
from smelt.passes import loop_nest
from smelt.passes.vector_ops import zeros

MEMORY_OPS = (
    memref.LoadOp,
    memref.StoreOp,
    vector.LoadOp,
    vector.StoreOp,
    vector.MaskedLoadOp,
    vector.MaskedStoreOp,
)


_ACCESS: dict[type, tuple[bool, str, str | None] | None] = {}
"""Per op type (a memory op's: isinstance on op classes, ABCs, costs most of a
walk over a kernel): whether it stores, the name of its buffer operand, the
name of its stored operand (None: a load, whose result type is accessed)."""


def _access(op: Operation) -> tuple[bool, str, str | None] | None:
    t = type(op)
    if t in _ACCESS:
        return _ACCESS[t]
    info = None
    if issubclass(t, MEMORY_OPS):
        store = issubclass(t, memref.StoreOp | vector.StoreOp | vector.MaskedStoreOp)
        buffer = "memref" if issubclass(t, memref.LoadOp | memref.StoreOp) else "base"
        if issubclass(t, memref.LoadOp | vector.LoadOp | vector.MaskedLoadOp):
            stored = None
        elif issubclass(t, vector.MaskedStoreOp):
            stored = "value_to_store"
        else:
            stored = "value" if issubclass(t, memref.StoreOp) else "vector"
        info = (store, buffer, stored)
    _ACCESS[t] = info
    return info


def is_memory(op: Operation) -> bool:
    """isinstance(op, MEMORY_OPS)."""
    return _access(op) is not None


def _buffer(op: Operation) -> SSAValue:
    info = _access(op)
    return getattr(op, info[1] if info is not None else "base")


_VIEW: dict[type, bool] = {}


def _root(buffer: SSAValue) -> SSAValue:
    while True:
        owner = buffer.owner
        t = type(owner)
        view = _VIEW.get(t)
        if view is None:
            view = _VIEW[t] = issubclass(t, loop.ViewOp)
        if not view:
            return buffer
        buffer = owner.source


def _is_store(op: Operation) -> bool:
    info = _access(op)
    return info is not None and info[0]


def _accessed_type(op: Operation) -> Attribute:
    info = _access(op)
    if info is None:  # not a memory op: as the isinstance chain had it
        return op.vector.type
    return op.results[0].type if info[2] is None else getattr(op, info[2]).type


_MASKED: dict[type, bool] = {}


def _mask(op: Operation) -> SSAValue | None:
    """The lane mask of a masked access (its cells are the active lanes only)."""
    t = type(op)
    masked = _MASKED.get(t)
    if masked is None:
        masked = _MASKED[t] = issubclass(t, vector.MaskedLoadOp | vector.MaskedStoreOp)
    return op.mask if masked else None


_ARITH: dict[type, str] = {}
"""Per op type, what `_linear` reads in it: "const", "add", "sub", "mul" or ""."""


def _arith(owner: object) -> str:
    t = type(owner)
    kind = _ARITH.get(t)
    if kind is None:
        kind = ""
        for cls, name in (
            (arith.ConstantOp, "const"),
            (arith.AddiOp, "add"),
            (arith.SubiOp, "sub"),
            (arith.MuliOp, "mul"),
        ):
            if issubclass(t, cls):
                kind = name
                break
        _ARITH[t] = kind
    return kind


def _linear(value: SSAValue, memo: dict) -> tuple[int, tuple] | None:
    """`value` as const + Σ coeff·symbol (symbols: values that are not index
    arithmetic), or None when it is not of that form."""
    if value in memo:
        return memo[value]
    owner, result = value.owner, None
    kind = _arith(owner)
    if kind == "const":
        if isinstance(owner.value, IntegerAttr):
            result = (owner.value.value.data, ())
    elif kind:
        lhs, rhs = _linear(owner.lhs, memo), _linear(owner.rhs, memo)
        if lhs is not None and rhs is not None:
            if kind == "mul":
                if not lhs[1]:
                    lhs, rhs = rhs, lhs
                if not rhs[1]:
                    result = _scale(lhs, rhs[0])
            else:
                sign = 1 if kind == "add" else -1
                result = _add(lhs, _scale(rhs, sign))
    if result is None and isinstance(value.type, IndexType):
        result = (0, ((id(value), 1),))
    memo[value] = result
    return result


def _scale(form, k: int):
    return (form[0] * k, tuple((v, c * k) for v, c in form[1] if c * k))


def _add(a, b):
    terms: dict[int, int] = dict(a[1])
    for v, c in b[1]:
        terms[v] = terms.get(v, 0) + c
    return (a[0] + b[0], tuple(sorted((v, c) for v, c in terms.items() if c)))


def byte_range(op: Operation, memo: dict) -> tuple[tuple, int, int] | None:
    """(symbolic terms, first byte, end byte) of the cells `op` touches."""
    t = _buffer(op).type
    assert isinstance(t, MemRefType)
    shape = t.get_shape()
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    total = (0, ())
    for index, stride in zip(op.indices, strides):
        form = _linear(index, memo)
        if form is None:
            return None
        total = _add(total, _scale(form, stride))
    size = dtypes.byte_size(t.element_type)
    lanes = 1
    accessed = _accessed_type(op)
    if hasattr(accessed, "get_shape"):
        for d in accessed.get_shape():
            lanes *= d
    return total[1], total[0] * size, (total[0] + lanes) * size


@dataclass
class Cell:
    """One promoted memory cell: the accesses to it in the loop body, in order."""

    buffer: SSAValue
    indices: tuple[SSAValue, ...]
    type: Attribute
    mask: SSAValue | None = None
    accesses: list[Operation] = field(default_factory=list)


def _outside(op: loop.ForOp):
    """`value -> whether value is defined outside op` (a block's answer kept:
    `op.is_ancestor` per index climbed to the module for every access)."""
    inside: dict[Block, bool] = {}

    def block_inside(block: Block | None) -> bool:
        path = []
        while block is not None and block not in inside:
            path.append(block)
            parent = block.parent_op()
            if parent is op:
                inside[block] = True
                path.pop()
                break
            block = parent.parent_block() if parent is not None else None
        answer = inside.get(block, False) if block is not None else False
        for b in path:
            inside[b] = answer
        return answer

    def outside(value: SSAValue) -> bool:
        owner = value.owner
        if isinstance(owner, Block):
            return not block_inside(owner)
        return owner is not op and not block_inside(owner.parent_block())

    return outside


def cells(op: loop.ForOp) -> list[Cell]:
    """The cells of `op`'s body that can live in registers while `op` runs:
    accessed only directly in the body, at indices fixed while the loop runs, and
    provably apart from every other access to the same buffer inside the loop."""
    found: dict[tuple, Cell] = {}
    memo: dict = {}
    places: dict[int, tuple | None] = {}  # the body's accesses' byte_range, by id
    outside = _outside(op)
    for inner in op.body.block.ops:
        if not is_memory(inner):
            continue
        if not all(outside(i) for i in inner.indices):
            continue
        if not outside(_buffer(inner)):
            continue
        mask = _mask(inner)
        if mask is not None and not outside(mask):
            continue
        # one cell per address: copies of an index computation (unrolled code)
        # name the same cell
        place = places[id(inner)] = byte_range(inner, memo)
        where = place if place is not None else tuple(inner.indices)
        key = (_root(_buffer(inner)), where, _accessed_type(inner), mask)
        cell = found.get(key)
        if cell is None:
            cell = Cell(_buffer(inner), tuple(inner.indices), key[2], mask)
            found[key] = cell
        cell.accesses.append(inner)
    if not found:
        return []
    roots = {_root(c.buffer) for c in found.values()}
    # every access to those buffers under the loop, by buffer: (id, byte range)
    by_root: dict[SSAValue, list[tuple[int, tuple | None]]] = {r: [] for r in roots}
    for o in op.walk():
        if is_memory(o):
            accesses = by_root.get(_root(_buffer(o)))
            if accesses is not None:
                i = id(o)
                rng = places[i] if i in places else byte_range(o, memo)
                accesses.append((i, rng))
    ranges = {i: rng for accesses in by_root.values() for i, rng in accesses}
    good = []
    for cell in found.values():
        rng = ranges[id(cell.accesses[0])]
        if rng is None or not any(_is_store(a) for a in cell.accesses):
            continue
        # the cell is stored to: no other access to its buffer may touch its bytes
        mine = set(map(id, cell.accesses))
        if all(
            theirs is not None
            and theirs[0] == rng[0]
            and not (theirs[1] < rng[2] and rng[1] < theirs[2])
            for i, theirs in by_root[_root(cell.buffer)]
            if i not in mine
        ):
            good.append(cell)
    return good


def _load(cell: Cell) -> list[Operation]:
    if cell.mask is not None:  # inactive lanes: never stored, any value will do
        assert isinstance(cell.type, vector.VectorType)
        zero = zeros(cell.type)
        load = vector.MaskedLoadOp(cell.buffer, list(cell.indices), cell.mask, zero)
        return [zero, load]
    return [_plain_load(cell)]


def _plain_load(cell: Cell) -> Operation:
    if isinstance(cell.type, vector.VectorType):
        return vector.LoadOp(cell.buffer, list(cell.indices), cell.type)
    return memref.LoadOp.get(cell.buffer, list(cell.indices))


def _store(cell: Cell, value: SSAValue) -> Operation:
    if cell.mask is not None:
        return vector.MaskedStoreOp(cell.buffer, list(cell.indices), cell.mask, value)
    if isinstance(cell.type, vector.VectorType):
        return vector.StoreOp(value, cell.buffer, list(cell.indices))
    return memref.StoreOp.get(value, cell.buffer, list(cell.indices))


def promote(op: loop.ForOp) -> loop.ForOp:
    """Keeps the promotable cells of `op` in iter_args: one load before the loop,
    one store after it, none inside. Returns the (rebuilt) loop.

        loop.for %k ... {                          %c0 = memref.load %c[%i]
          %c = memref.load %c[%i]                  %r = loop.for %k iter_args(%c = %c0) {
          %s = arith.addf %c, %x           →         %s = arith.addf %c, %x
          memref.store %s, %c[%i]                    loop.yield %s }
        }                                          memref.store %r, %c[%i]
    """
    kernel = next((p for p in _parents(op) if loop.is_kernel(p)), None)
    if kernel is not None and loop.ELEMENTWISE_ATTR in kernel.attributes:
        return op
    loop_nest.hoist_invariant_index_ops(op)
    found = cells(op)
    if not found:
        return op
    parent = op.parent_block()
    assert parent is not None
    inits = []
    for cell in found:
        loads = _load(cell)
        parent.insert_ops_before(loads, op)
        inits.append(loads[-1].results[0])
    new = loop.ForOp(
        op.lb.data, op.ub.data, op.step.data, op.kind.data, [*op.iter_inits, *inits]
    )
    new.attributes.update(op.attributes)
    block = new.body.block
    n_old = len(op.iter_inits)
    op.iv.replace_all_uses_with(new.iv)
    new.iv.name_hint = op.iv.name_hint
    for old, arg in zip(op.body.block.args[1:], block.args[1 : 1 + n_old]):
        old.replace_all_uses_with(arg)
    current = {id(c): arg for c, arg in zip(found, block.args[1 + n_old :])}
    owner = {id(a): c for c in found for a in c.accesses}
    for inner in list(op.body.block.ops):
        inner.detach()
        cell = owner.get(id(inner))
        if cell is None:
            if isinstance(inner, loop.YieldOp):
                yielded = [*inner.values, *(current[id(c)] for c in found)]
                inner.erase()
                block.add_op(loop.YieldOp(*yielded))
            else:
                block.add_op(inner)
        elif _is_store(inner):
            current[id(cell)] = (
                inner.value_to_store
                if isinstance(inner, vector.MaskedStoreOp)
                else inner.operands[0]
            )
            inner.erase()
        else:
            inner.results[0].replace_all_uses_with(current[id(cell)])
            inner.erase()
    parent.insert_op_before(new, op)
    for old, res in zip(op.res, new.res[:n_old]):
        old.replace_all_uses_with(res)
    after = op.next_op
    for cell, res in zip(found, new.res[n_old:]):
        store = _store(cell, res)
        if after is None:
            parent.add_op(store)
        else:
            parent.insert_op_before(store, after)
    loop_nest.remove(op)
    return new


def _parents(op: Operation):
    parent = op.parent_op()
    while parent is not None:
        yield parent
        parent = parent.parent_op()


@dataclass(frozen=True)
class LoopPromotePass(ModulePass):
    """Keeps memory cells that loops of role `loop` update in place in registers.

    Expects loop-level kernels. For each target loop, a cell (a load or store
    index fixed while the loop runs, scalar or vector) that the loop's body reads
    and writes directly, and that no other access in the loop may touch
    (indices compared as affine forms; kernels whose buffers may share bytes,
    `loop.elementwise`, are left alone), is loaded once before the loop, carried
    as an iter_arg, and stored once after it. Targets are taken innermost first,
    so a cell climbs out of a whole nest of reduction loops. Values are exactly
    those of the input: only the loads and stores move.

        loop.for %k {"k"} { %v = load C[i]; store %v + x, C[i] }
      → %c = load C[i]; %r = loop.for %k iter_args(%a = %c) { yield %a + x }; store %r, C[i]
    """

    name = "loop-promote"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    loop: str
    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            for target in reversed(loop_nest.loops_with_role(kernel, self.loop)):
                promote(target)
