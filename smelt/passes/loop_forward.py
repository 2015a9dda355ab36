"""loop-forward: store-to-load forwarding and dead-store elimination in a block."""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func, memref, vector
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop
from smelt.passes import loop_nest
from smelt.passes.loop_promote import (
    MEMORY_OPS,
    _accessed_type,
    _buffer,
    _is_store,
    _root,
    byte_range,
)

PLAIN = (memref.LoadOp, memref.StoreOp, vector.LoadOp, vector.StoreOp)
"""Accesses whose every lane is touched: the only ones forwarded or removed."""


_KIND = {
    **{t: "plain" for t in PLAIN},
    **{t: "masked" for t in MEMORY_OPS if t not in PLAIN},
    func.CallOp: "call",
    loop.ViewOp: "pure",
}
"""What each op type is to the walk (by exact type: isinstance on the op
classes cost most of the pass); any other op with regions is a nest, any other
op without them may take buffers (`_other_buffers`)."""

SCALAR = ("arith.", "math.")
"""Ops of these dialects take no buffers."""


def _kind(op: Operation) -> str:
    kind = _KIND.get(type(op))
    if kind is not None:
        return kind
    if op.regions:
        return "nest"
    return "pure" if op.name.startswith(SCALAR) else "other"


def _stored(op: Operation) -> SSAValue:
    return op.operands[0]


@dataclass
class _Access:
    """Where an access lands: its buffer's root and its byte range (None when
    the indices are not affine)."""

    root: SSAValue
    place: tuple | None
    type: object

    def same(self, other: _Access) -> bool:
        return (
            self.place is not None
            and self.root is other.root
            and self.place == other.place
            and self.type == other.type
        )

    def apart(self, other: _Access) -> bool:
        """Provably no byte in common."""
        if self.root is not other.root:
            return True
        if self.place is None or other.place is None:
            return False
        (terms, lo, hi), (terms2, lo2, hi2) = self.place, other.place
        return terms == terms2 and (hi <= lo2 or hi2 <= lo)


class _Forward:
    """One straight-line walk of a block: per buffer root, the last plain stores
    whose values are known (`known`) and the stores nothing has read since
    (`unread`)."""

    def __init__(self, memo: dict, roots: set) -> None:
        self.memo = memo
        self.places: dict[tuple, _Access] = {}
        self.roots = roots  # the buffers stored to in the block: the others
        # neither take nor lose a forwarded value
        self.known: dict[SSAValue, list[tuple[_Access, SSAValue]]] = {}
        self.unread: dict[SSAValue, list[tuple[_Access, Operation]]] = {}
        self.changed = 0

    def access(self, op: Operation) -> _Access:
        buffer, accessed = _buffer(op), _accessed_type(op)
        key = (buffer, tuple(op.indices), accessed)
        where = self.places.get(key)
        if where is None:  # the copies of a cell's address are one SSA tuple
            where = _Access(_root(buffer), byte_range(op, self.memo), accessed)
            self.places[key] = where
        return where

    def read(self, where: _Access) -> None:
        stores = self.unread.get(where.root)
        if stores:
            self.unread[where.root] = [(a, s) for a, s in stores if a.apart(where)]

    def written(self, where: _Access) -> None:
        values = self.known.get(where.root)
        if values:
            self.known[where.root] = [(a, v) for a, v in values if a.apart(where)]

    def run(self, block: Block, nested: dict[Operation, _Touched]) -> None:
        for op in list(block.ops):
            kind = _kind(op)
            if kind == "pure":
                continue
            if kind in ("plain", "masked"):
                if _root(_buffer(op)) not in self.roots:
                    continue
                if kind == "plain":
                    self.plain(op)
                    continue
                where = self.access(op)  # masked: some lanes only
                self.read(where)
                if _is_store(op):
                    self.written(where)
            elif kind == "call":  # a library routine: any buffer
                self.known, self.unread = {}, {}
            elif kind == "other":  # anything else on a buffer
                for root in _other_buffers(op):
                    self.unread.pop(root, None)
                    self.known.pop(root, None)
            elif op in nested:  # a nested loop: its accesses, anywhere in them
                touched = nested[op]
                if touched.calls:
                    self.known, self.unread = {}, {}
                for root in touched.reads:
                    self.unread.pop(root, None)
                for root in touched.writes:
                    self.known.pop(root, None)

    def plain(self, op: Operation) -> None:
        where = self.access(op)
        if not _is_store(op):
            for a, value in reversed(self.known.get(where.root, ())):
                if a.same(where):
                    op.results[0].replace_all_uses_with(value)
                    op.detach()
                    op.erase()
                    self.changed += 1
                    return
            self.read(where)
            return
        for a, earlier in self.unread.get(where.root, ()):
            if a.same(where):  # overwritten before anything read it
                earlier.detach()
                earlier.erase()
                self.changed += 1
        self.read(where)
        self.written(where)
        self.known.setdefault(where.root, []).append((where, _stored(op)))
        self.unread.setdefault(where.root, []).append((where, op))


@dataclass
class _Touched:
    """The buffer roots that the ops of a region read and write."""

    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)
    calls: bool = False

    def add(self, other: _Touched) -> None:
        self.reads |= other.reads
        self.writes |= other.writes
        self.calls |= other.calls


def _other_buffers(op: Operation) -> set:
    """The buffer roots that an op of kind "other" takes (a copy, a gather, a
    check: assumed to read and write them)."""
    return {_root(v) for v in op.operands if isinstance(v.type, MemRefType)}


def forward(block: Block, memo: dict) -> tuple[int, _Touched]:
    """Forwards stores to loads and drops overwritten stores in `block` and the
    blocks nested in it; returns how many loads and stores went and the roots
    that the block's ops read and write."""
    changed, touched, stored = 0, _Touched(), set()
    nested: dict[Operation, _Touched] = {}
    for op in block.ops:
        kind = _kind(op)
        if kind == "pure":
            continue
        if kind == "nest":
            inner = _Touched()
            for region in op.regions:
                for b in region.blocks:
                    n, t = forward(b, memo)
                    changed += n
                    inner.add(t)
            nested[op] = inner
            touched.add(inner)
        elif kind in ("plain", "masked"):
            root = _root(_buffer(op))
            (touched.writes if _is_store(op) else touched.reads).add(root)
            if kind == "plain" and _is_store(op):
                stored.add(root)
        elif kind == "call":
            touched.calls = True
        else:
            for root in _other_buffers(op):
                touched.reads.add(root)
                touched.writes.add(root)
    if not stored:  # nothing to forward or to remove at this level
        return changed, touched
    walker = _Forward(memo, stored)
    walker.run(block, nested)
    return changed + walker.changed, touched


@dataclass(frozen=True)
class LoopForwardPass(ModulePass):
    """Replaces a load by the value that a store in the same block put at the
    same place, and removes a store that a later store in the block overwrites
    before anything reads it.

    Expects loop-level kernels. Within each block, straight-line order: a plain
    (unmasked) load at exactly the byte range, element type and buffer of an
    earlier store takes the stored value, unless something in between may have
    written any of those bytes; an earlier store is removed when a later one
    covers exactly its bytes and nothing in between may have read them. Places
    are compared as affine byte ranges (as loop-promote does); a nested loop
    counts as all of its accesses at once, its own indices covering anything.
    Kernels whose buffers may share bytes (`loop.elementwise`) are left alone.
    After loop-promote this removes a micro-kernel's C-tile traffic around its
    reduction: the bias stored, then loaded into the accumulators; the
    accumulators stored, then loaded by the epilogue and stored again.

        vector.store %b, %c[%i]                 %r = loop.for ... iter_args(%a = %b)
        %a0 = vector.load %c[%i]          →     %y = arith.addf %r, %res
        %r = loop.for ... iter_args(%a = %a0)   vector.store %y, %c[%i]
        vector.store %r, %c[%i]
        %e = vector.load %c[%i]
        %y = arith.addf %e, %res
        vector.store %y, %c[%i]
    """

    name = "loop-forward"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            if loop.ELEMENTWISE_ATTR in kernel.attributes:
                continue
            forward(kernel.body.block, {})
