"""loop-vectorize's rule for copies whose output rows are short: a transpose that
moves a small dimension innermost (NCHW → NHWC of a 3-channel image, the
[…, g, C/g] → […, C/g, g] channel shuffle of ShuffleNet) reads long rows of the
input but writes rows of only g elements. The plain vectorizer sees an innermost
loop of g iterations (fewer than the lanes) and leaves it scalar; LLVM then turns
each output row into a gather or each input row into a scatter.

This rule takes the two innermost loops together:

    loop.for %j = 0 to E {            (E ≤ lanes; up to MAX_CHUNKS·lanes in chunks)
      loop.for %i = 0 to g {          (g ≤ MAX_GROUP, the output's last dim)
        %x = memref.load %in[…, %i + a, %j + b]
        memref.store %x, %out[…, %j + c, %i]
      }
    }

becomes g vector loads of E elements (one input row each), one `vector.shuffle`
that interleaves them and one store of the g·E contiguous output elements:

    %r_i = vector.load %in[…, i + a, b] : vector<E×T>   (i = 0 … g-1)
    %cat = vector.shuffle …                              (the rows side by side)
    %y = vector.shuffle %cat, %cat [0, E, 2E, …, 1, E+1, …]
    vector.store %y, %out[…, c, 0] : vector<g·E×T>

A longer j loop gets one such group per `lanes` iterations. On AVX-512 LLVM
lowers the interleave to vpermt2ps pairs (6 for g = 3, E = 16). Every element is
copied unchanged, so the result is bit-identical.
"""

from __future__ import annotations

from xdsl.dialects import arith, memref, vector
from xdsl.dialects.builtin import (
    DenseArrayBase,
    IndexType,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    VectorType,
    i64,
)
from xdsl.ir import Block, Operation, SSAValue

from smelt.dialects import loop
from smelt.passes.loop_analysis import Affine, affine_form, root

MAX_GROUP = 8
"""The longest output row (g) this rule interleaves; longer rows are a tile
transpose, whose g·E-element shuffle LLVM does not lower well."""

MAX_CHUNKS = 4
"""The outer loop runs at most this many vectors of lanes (each chunk of up to
`width` iterations becomes its own loads, shuffle and store)."""

INDEX_OPS = (arith.ConstantOp, arith.AddiOp, arith.SubiOp, arith.MuliOp)


class NotInterleave(Exception):
    """The loop pair is not a short-row copy; the message says why."""


def candidates(kernel: Operation) -> list[loop.ForOp]:
    """Loops whose body holds exactly one loop, itself innermost."""
    found = []
    for op in kernel.walk():
        if not isinstance(op, loop.ForOp):
            continue
        inner = [o for o in op.body.block.ops if isinstance(o, loop.ForOp)]
        if len(inner) == 1 and not any(
            isinstance(o, loop.ForOp) for o in inner[0].body.block.ops
        ):
            found.append(op)
    return found


class InterleaveCopy:
    """One `for j { for i { out[…, j, i] = in[…, i, j] } }` pair: `check`
    raises NotInterleave, `rewrite` replaces the pair."""

    def __init__(self, outer: loop.ForOp, width: int):
        self.outer = outer
        self.width = width
        self.inner: loop.ForOp | None = None
        self.load: memref.LoadOp | None = None
        self.store: memref.StoreOp | None = None

    def check(self) -> None:
        outer = self.outer
        if outer.step.data != 1 or outer.iter_inits:
            raise NotInterleave("outer loop has a step or iter_args")
        if not 2 <= outer.trip_count <= MAX_CHUNKS * self.width:
            raise NotInterleave("outer loop is not 2 to MAX_CHUNKS·lanes iterations")
        inner = _only_loop(outer.body.block)
        if inner.step.data != 1 or inner.lb.data != 0 or inner.iter_inits:
            raise NotInterleave("inner loop does not run 0 to g by 1")
        group = inner.trip_count
        if not 2 <= group <= MAX_GROUP:
            raise NotInterleave("inner loop is not 2 to MAX_GROUP iterations")
        loads = [o for o in inner.body.block.ops if isinstance(o, memref.LoadOp)]
        stores = [o for o in inner.body.block.ops if isinstance(o, memref.StoreOp)]
        for op in inner.body.block.ops:
            if not isinstance(op, (*INDEX_OPS, memref.LoadOp, memref.StoreOp)):
                if not isinstance(op, loop.YieldOp):
                    raise NotInterleave(f"{op.name} in the copy")
        if len(loads) != 1 or len(stores) != 1:
            raise NotInterleave("not one load and one store")
        load, store = loads[0], stores[0]
        if store.value is not load.res or root(load.memref) is root(store.memref):
            raise NotInterleave("not a copy between two buffers")
        src, dst = load.memref.type, store.memref.type
        if not (
            isinstance(src, MemRefType)
            and isinstance(dst, MemRefType)
            and src.element_type == dst.element_type
            and _contiguous(src)
            and _contiguous(dst)
            and dst.get_shape()[-1] == group
            and len(dst.get_shape()) >= 2
        ):
            raise NotInterleave("buffers are not contiguous or rows are not g long")
        i, j = inner.iv, outer.iv
        varying = {i, j}  # and every index computed from them (j·j is not affine)
        for body in (outer.body.block, inner.body.block):
            for op in body.ops:
                if op is not inner and any(v in varying for v in op.operands):
                    varying.update(op.results)
        memo: dict[SSAValue, Affine | None] = {}
        ins = [affine_form(x, varying, memo) for x in load.indices]
        outs = [affine_form(x, varying, memo) for x in store.indices]
        if any(f is None for f in (*ins, *outs)):
            raise NotInterleave("an index is not affine")
        if not (
            outs[-1].same_as(Affine.symbol(i))
            and (outs[-2].coeff(j), outs[-2].coeff(i)) == (1, 0)
            and all(f.coeff(i) == 0 == f.coeff(j) for f in outs[:-2])
        ):
            raise NotInterleave("the store is not out[…, j + c, i]")
        if (ins[-1].coeff(j), ins[-1].coeff(i)) != (1, 0):
            raise NotInterleave("the input row does not run along j")
        along_i = [f for f in ins[:-1] if f.coeff(i) or f.coeff(j)]
        if len(along_i) != 1 or (along_i[0].coeff(i), along_i[0].coeff(j)) != (1, 0):
            raise NotInterleave("the input is not in[…, i + a, …, j + b]")
        self.inner, self.load, self.store = inner, load, store

    def rewrite(self) -> None:
        assert self.inner and self.load and self.store
        outer = self.outer
        block = outer.parent_block()
        assert block is not None
        added: list[Operation] = []
        first, end = outer.lb.data, outer.ub.data
        for start in range(first, end, self.width):
            self._chunk(start, min(self.width, end - start), added)
        block.insert_ops_before(added, outer)
        outer.detach()
        outer.erase()

    def _chunk(self, start: int, length: int, added: list[Operation]) -> None:
        """Loads, interleaves and stores iterations start … start + length - 1
        of the outer loop."""
        assert self.inner and self.load and self.store
        outer, inner = self.outer, self.inner
        group = inner.trip_count
        element = self.store.memref.type.element_type

        def constant(value: int) -> SSAValue:
            op = arith.ConstantOp(IntegerAttr(value, IndexType()))
            added.append(op)
            return op.result

        j = constant(start)

        def indices(op: memref.LoadOp | memref.StoreOp, i: int) -> list[SSAValue]:
            """`op`'s indices at j = `start` and i = `i`: the index arithmetic of
            both bodies cloned with the ivs replaced."""
            mapping: dict[SSAValue, SSAValue] = {outer.iv: j, inner.iv: constant(i)}
            for body in (outer.body.block, inner.body.block):
                for index_op in body.ops:
                    if isinstance(index_op, INDEX_OPS):
                        added.append(index_op.clone(value_mapper=mapping))
            return [mapping.get(x, x) for x in op.indices]

        row = VectorType(element, [length])
        rows = []
        for i in range(group):
            load = vector.LoadOp(self.load.memref, indices(self.load, i), row)
            added.append(load)
            rows.append(load.result)
        joined = _concatenate(rows, element, added)
        order = [(k % group) * length + k // group for k in range(group * length)]
        interleave = vector.ShuffleOp(
            joined,
            joined,
            DenseArrayBase.from_list(i64, order),
            result_type=VectorType(element, [group * length]),
        )
        added.append(interleave)
        store_at = indices(self.store, 0)
        added.append(vector.StoreOp(interleave.result, self.store.memref, store_at))


def _only_loop(block: Block) -> loop.ForOp:
    loops = []
    for op in block.ops:
        if isinstance(op, loop.ForOp):
            loops.append(op)
        elif not isinstance(op, (*INDEX_OPS, loop.YieldOp)):
            raise NotInterleave(f"{op.name} beside the inner loop")
    if len(loops) != 1:
        raise NotInterleave("not one inner loop")
    return loops[0]


def _contiguous(t: MemRefType) -> bool:
    return isinstance(t.layout, NoneAttr) and all(d > 0 for d in t.get_shape())


def _concatenate(
    rows: list[SSAValue], element, added: list[Operation]
) -> SSAValue:
    """The rows side by side in one vector, joined pairwise."""
    while len(rows) > 1:
        joined = []
        for a, b in zip(rows[0::2], rows[1::2]):
            size = a.type.get_shape()[0] + b.type.get_shape()[0]
            op = vector.ShuffleOp(
                a,
                b,
                DenseArrayBase.from_list(i64, list(range(size))),
                result_type=VectorType(element, [size]),
            )
            added.append(op)
            joined.append(op.result)
        if len(rows) % 2:
            joined.append(rows[-1])
        rows = joined
    return rows[0]
