"""loop-fuse: merges sibling loop nests that walk the same tiles, so the second runs
on each tile right after the first (a GEMM's fill, band and epilogue)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import dtypes, loop
from smelt.passes import loop_nest
from smelt.passes.loop_analysis import Affine, affine_form, root, strides

MEMORY_OPS = (memref.LoadOp, memref.StoreOp)


@dataclass(frozen=True)
class Access:
    """A load or store of a nest: its root buffer, and its position as affine forms
    over induction variables: per index (`dims`) and as a byte offset (`offset`);
    None where a form uses another value (a division...)."""

    op: Operation
    root: SSAValue
    is_store: bool
    dims: list[Affine] | None
    offset: Affine | None
    size: int  # bytes


def _ivs_only(form: Affine) -> Affine | None:
    return form if all(_is_iv(v) for v, _ in form.terms) else None


def _accesses(nest: loop.ForOp) -> list[Access] | None:
    """Every memory access of `nest` (None if it touches memory some other way)."""
    found = []
    memo: dict = {}
    for op in nest.walk():
        if isinstance(op, memref.AllocaOp):
            continue  # scratch of the nest: no other nest sees it
        if not isinstance(op, MEMORY_OPS):
            if op.name.startswith(("vector.", "memref.")):
                return None
            continue
        t = op.memref.type
        assert isinstance(t, MemRefType)
        size = dtypes.byte_size(t.element_type)
        forms = [affine_form(i, set(), memo) for i in op.indices]
        offset = Affine()
        for form, stride in zip(forms, strides(t)):
            offset = offset + form.scale(stride)
        dims = [_ivs_only(f) for f in forms]
        found.append(
            Access(
                op,
                root(op.memref),
                isinstance(op, memref.StoreOp),
                None if None in dims else dims,  # type: ignore[arg-type]
                _ivs_only(offset.scale(size)),
                size,
            )
        )
    return found


def _is_iv(value: SSAValue) -> bool:
    return (
        isinstance(value, BlockArgument)
        and value.index == 0
        and isinstance(value.owner.parent_op(), loop.ForOp)
    )


def _loop_of(iv: SSAValue) -> loop.ForOp:
    op = iv.owner.parent_op()  # type: ignore[union-attr]
    assert isinstance(op, loop.ForOp)
    return op


def _span(form: Affine, fixed: set[SSAValue]) -> tuple[int, int]:
    """[min, max] of `form` over the iterations of its induction variables, those in
    `fixed` counted as zero."""
    lo = hi = form.const
    for iv, c in form.terms:
        if iv in fixed:
            continue
        p = _loop_of(iv)
        first, last = p.lb.data, p.lb.data + (p.trip_count - 1) * p.step.data
        lo += min(c * first, c * last)
        hi += max(c * first, c * last)
    return lo, hi


def _conflicts(a: list[Access], b: list[Access]) -> set[SSAValue]:
    """Root buffers that both touch, one of them storing."""
    shared = {x.root for x in a} & {x.root for x in b}
    return {r for r in shared if any(x.is_store for x in a + b if x.root is r)}


def independent(a: loop.ForOp, b: loop.ForOp) -> bool:
    """Whether `a` and `b` may run in either order: the byte ranges that one stores
    to and the other touches are apart."""
    return _independent(_accesses(a), _accesses(b))


def _independent(xs: list[Access] | None, ys: list[Access] | None) -> bool:
    if xs is None or ys is None:
        return False
    for r in _conflicts(xs, ys):
        ranges = []
        for side in (xs, ys):
            mine = [x for x in side if x.root is r]
            if any(x.offset is None for x in mine):
                return False
            spans = [_span(x.offset, set()) for x in mine]  # type: ignore[arg-type]
            end = max(s[1] + x.size for s, x in zip(spans, mine))
            ranges.append((min(s[0] for s in spans), end))
        (lo_a, hi_a), (lo_b, hi_b) = ranges
        if lo_a < hi_b and lo_b < hi_a:
            return False
    return True


def _prefix(a: loop.ForOp, b: loop.ForOp) -> tuple[list[loop.ForOp], list[loop.ForOp]]:
    """The loops from `a` and from `b` down that have the same header (bounds, step,
    role) and are parallel without iter_args, nesting perfectly."""
    chain_a, chain_b = [], []
    while (
        a is not None
        and b is not None
        and (a.lb.data, a.ub.data, a.step.data) == (b.lb.data, b.ub.data, b.step.data)
        and loop_nest.role(a) == loop_nest.role(b)
        and a.kind.data == b.kind.data == loop.PARALLEL
        and not a.iter_inits
        and not b.iter_inits
    ):
        chain_a.append(a)
        chain_b.append(b)
        a, b = loop_nest.only_loop(a), loop_nest.only_loop(b)  # type: ignore[assignment]
    return chain_a, chain_b


def _separated(
    forms: list[tuple[Affine, int]], fused: list[loop.ForOp]
) -> set[int] | None:
    """The fused loops that one coordinate pins down: the forms (with the width
    they touch) must have the same coefficient on each fused loop, and those
    loops must be the digits of a mixed-radix number whose lower digits, plus the
    span of the other loops, never reach the next digit. None if they differ."""
    ivs = {p.iv: i for i, p in enumerate(fused)}
    coeffs: list[int] | None = None
    lo = hi = None
    for form, width in forms:
        c = [0] * len(fused)
        for iv, k in form.terms:
            if iv in ivs:
                c[ivs[iv]] += k
        if coeffs is not None and c != coeffs:
            return None
        coeffs = c
        s_lo, s_hi = _span(form, set(ivs))
        lo = s_lo if lo is None else min(lo, s_lo)
        hi = s_hi + width if hi is None else max(hi, s_hi + width)
    assert coeffs is not None and lo is not None and hi is not None
    span, pinned = hi - lo, set()
    digits = sorted(
        (abs(c) * p.step.data, abs(c) * p.step.data * (p.trip_count - 1), i)
        for i, (c, p) in enumerate(zip(coeffs, fused))
        if c and p.trip_count > 1
    )
    for unit, reach, i in digits:
        if unit < span:
            return set()
        span += reach
        pinned.add(i)
    return pinned


def _tiles_apart(
    xs: list[Access], ys: list[Access], fused_a: list[loop.ForOp], fused_b
) -> bool:
    """Whether fusing at depth len(fused_a) keeps every conflicting pair of accesses
    in one fused iteration: for each buffer one nest stores to and the other
    touches, every fused loop (with more than one trip) is pinned down by some
    coordinate (an index, or the byte offset), so different fused iterations touch
    different elements."""
    mapping = {q.iv: p.iv for p, q in zip(fused_a, fused_b)}

    def renamed(form: Affine) -> Affine:
        total = Affine(form.const)
        for v, c in form.terms:
            total = total + Affine.symbol(mapping.get(v, v)).scale(c)
        return total

    wanted = {i for i, p in enumerate(fused_a) if p.trip_count > 1}
    for r in _conflicts(xs, ys):
        mine = [x for x in xs + ys if x.root is r]
        pinned: set[int] = set()
        if all(x.dims is not None for x in mine):
            for d in range(len(mine[0].dims)):  # type: ignore[arg-type]
                forms = [(renamed(x.dims[d]), 1) for x in mine]  # type: ignore[index]
                found = _separated(forms, fused_a)
                if found is None:
                    return False
                pinned |= found
        if pinned != wanted and all(x.offset is not None for x in mine):
            forms = [(renamed(x.offset), x.size) for x in mine]  # type: ignore[arg-type]
            pinned |= _separated(forms, fused_a) or set()
        if pinned != wanted:
            return False
    return True


class Nests:
    """The accesses of nests, computed once per nest while none changes."""

    def __init__(self) -> None:
        self._found: dict[int, list[Access] | None] = {}

    def accesses(self, nest: loop.ForOp) -> list[Access] | None:
        if id(nest) not in self._found:
            self._found[id(nest)] = _accesses(nest)
        return self._found[id(nest)]

    def forget(self, nest: loop.ForOp) -> None:
        self._found.pop(id(nest), None)


def fuse(a: loop.ForOp, b: loop.ForOp, nests: Nests | None = None) -> bool:
    """Runs `b`'s body inside `a`'s nest at the deepest common header where that is
    legal; `b` must follow `a` in the same block, with only independent ops in
    between (they then run after the fused nest). Returns whether it fused."""
    nests = nests or Nests()
    block = a.parent_block()
    if block is None or b.parent_block() is not block:
        return False
    chain_a, chain_b = _prefix(a, b)
    if not chain_a:
        return False
    between = []
    op = a.next_op
    while op is not None and op is not b:
        between.append(op)
        op = op.next_op
    if op is None:
        return False
    ys = nests.accesses(b)
    if ys is None:
        return False
    for other in between:
        if isinstance(other, loop.ForOp):
            if not _independent(nests.accesses(other), ys):
                return False
        elif not loop_nest.is_index_op(other):
            return False
    xs = nests.accesses(a)
    if xs is None:
        return False
    while chain_a and not _tiles_apart(xs, ys, chain_a, chain_b):
        chain_a, chain_b = chain_a[:-1], chain_b[:-1]
    if all(p.trip_count == 1 for p in chain_a):
        return False  # no tile to share: fusing would only glue nests together
    loop_nest.sink_index_ops(chain_b)
    for p, q in zip(chain_a, chain_b):
        q.iv.replace_all_uses_with(p.iv)
    dest: Block = chain_a[-1].body.block
    terminator = dest.last_op
    for inner in list(chain_b[-1].body.block.ops):
        if isinstance(inner, loop.YieldOp):
            continue
        inner.detach()
        dest.insert_op_before(inner, terminator)  # type: ignore[arg-type]
    loop_nest.remove(b)
    nests.forget(a)
    nests.forget(b)
    return True


def _fuse_siblings(block: Block) -> int:
    """Fuses each nest of `block` into the earliest one it can join."""
    fused, nests = 0, Nests()
    changed = True
    while changed:
        changed = False
        loops = [o for o in block.ops if isinstance(o, loop.ForOp)]
        for i, a in enumerate(loops):
            if any(fuse(a, b, nests) for b in loops[i + 1 :]):
                fused += 1
                changed = True
                break
    return fused


def fuse_kernel(kernel: func.FuncOp) -> int:
    """Fuses sibling nests in `kernel`, the outermost first, then inside the loops
    they share (where the tile remainders stand side by side)."""
    fused = 0
    for block in [kernel.body.block] + [
        o.body.block for o in loop_nest.loops_under(kernel)
    ]:
        if (
            block.parent is not None
            and sum(isinstance(o, loop.ForOp) for o in block.ops) > 1
        ):
            fused += _fuse_siblings(block)
    return fused


@dataclass(frozen=True)
class LoopFusePass(ModulePass):
    """Fuses sibling loop nests of kernels matching `kernel`.

    Expects loop-level kernels. A nest B joins an earlier sibling nest A at the
    deepest level d where the outer d loops of both have the same bounds, step
    and role, are parallel without iter_args and nest perfectly, and the fusion
    keeps every dependence: for each buffer that one nest stores to and the other
    touches, all accesses have affine byte offsets with the same coefficients on
    the d loops, and those loops select disjoint byte ranges (mixed-radix digits
    above the span of the inner loops). Nests between A and B must touch bytes
    apart from B's. Loops of one trip alone are not worth fusing (they would glue
    a tile nest to its remainder nest, out of reach of loop-parallelize). B's
    body then runs in A's innermost fused loop after A's body; then nests side
    by side in the fused loops fuse the same way. Each element gets the same
    values in the same order per element, so the result is exact.

        loop.for %i {"m"} { fill(%i) }   loop.for %i {"m"} { band(%i) }
      → loop.for %i {"m"} { fill(%i)  band(%i) }
    """

    name = "loop-fuse"

    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            fuse_kernel(kernel)
