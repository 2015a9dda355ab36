"""Facts about `loop.for` bodies that loop passes share: affine index forms,
memory accesses and which buffers may overlap, and a rough work estimate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import IndexType, IntegerAttr, MemRefType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from smelt.dialects import dtypes, loop


@dataclass(frozen=True)
class Affine:
    """`const + Σ coeff·symbol` over index values; symbols are SSA values whose
    value is fixed while the analysed loop runs (or its induction variable)."""

    const: int = 0
    terms: tuple[tuple[SSAValue, int], ...] = ()

    @staticmethod
    def symbol(value: SSAValue) -> Affine:
        return Affine(0, ((value, 1),))

    def coeff(self, value: SSAValue) -> int:
        return sum(c for v, c in self.terms if v is value)

    def __add__(self, other: Affine) -> Affine:
        merged: dict[int, tuple[SSAValue, int]] = {}
        for v, c in (*self.terms, *other.terms):
            old = merged.get(id(v), (v, 0))[1]
            merged[id(v)] = (v, old + c)
        terms = tuple(sorted((t for t in merged.values() if t[1]), key=_order))
        return Affine(self.const + other.const, terms)

    def scale(self, k: int) -> Affine:
        if k == 0:
            return Affine()
        return Affine(self.const * k, tuple((v, c * k) for v, c in self.terms))

    def same_as(self, other: Affine) -> bool:
        return self.const == other.const and [(id(v), c) for v, c in self.terms] == [
            (id(v), c) for v, c in other.terms
        ]


def _order(term: tuple[SSAValue, int]) -> int:
    return id(term[0])


def affine_form(
    value: SSAValue, varying: set[SSAValue], memo: dict[SSAValue, Affine | None]
) -> Affine | None:
    """`value` as an affine form, or None when it depends on a `varying` value in a
    way that is not `iv·c + invariant` (a division, a load, a cast...).

    Values that do not vary become symbols unless they fold further (constants,
    sums, products with a constant, induction variables of one-trip loops), so that
    two indices that differ only in how they were written compare equal."""
    if value in memo:
        return memo[value]
    form = _affine_form(value, varying, memo)
    memo[value] = form
    return form


def _affine_form(value, varying, memo) -> Affine | None:
    owner = value.owner
    if isinstance(value, BlockArgument):
        parent = owner.parent_op() if isinstance(owner, Block) else None
        is_iv = isinstance(parent, loop.ForOp) and value.index == 0
        if is_iv and parent.trip_count == 1 and value not in varying:
            return Affine(parent.lb.data)
        if value in varying and not is_iv:  # an iter_arg: changes every iteration
            return None
        return Affine.symbol(value)
    if (
        isinstance(owner, arith.ConstantOp)
        and isinstance(owner.value, IntegerAttr)
        and isinstance(value.type, IndexType)
    ):
        return Affine(owner.value.value.data)
    if isinstance(owner, arith.AddiOp | arith.SubiOp | arith.MuliOp):
        lhs = affine_form(owner.lhs, varying, memo)
        rhs = affine_form(owner.rhs, varying, memo)
        if lhs is not None and rhs is not None:
            if isinstance(owner, arith.AddiOp):
                return lhs + rhs
            if isinstance(owner, arith.SubiOp):
                return lhs + rhs.scale(-1)
            if not rhs.terms:
                return lhs.scale(rhs.const)
            if not lhs.terms:
                return rhs.scale(lhs.const)
    return None if value in varying else Affine.symbol(value)


def strides(t: MemRefType) -> list[int]:
    """Row-major element strides of a static, contiguous memref."""
    shape = t.get_shape()
    out = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        out[i] = out[i + 1] * shape[i + 1]
    return out


def root(buffer: SSAValue) -> SSAValue:
    """The buffer that `buffer` is a view of (itself when it is no view)."""
    while isinstance(buffer.owner, loop.ViewOp):
        buffer = buffer.owner.source
    return buffer


@dataclass
class Access:
    """One memref.load or memref.store and the affine form of each index."""

    op: Operation
    buffer: SSAValue
    indices: list[Affine]
    is_store: bool
    root: SSAValue = field(init=False)

    def __post_init__(self) -> None:
        self.root = root(self.buffer)

    def byte_offset(self) -> Affine:
        """The byte offset from the start of the root buffer."""
        t = self.buffer.type
        assert isinstance(t, MemRefType)
        flat = Affine()
        for form, stride in zip(self.indices, strides(t)):
            flat = flat + form.scale(stride)
        return flat.scale(dtypes.byte_size(t.element_type))


def may_alias(a: SSAValue, b: SSAValue, elementwise_kernel: bool) -> bool:
    """Whether two root buffers of one kernel may share bytes.

    @main passes a kernel buffers that are either disjoint or the very same bytes
    (a view, or buffer-plan's in-place reuse, which it grants only to kernels marked
    `loop.elementwise` and only between buffers of equal size)."""
    if a is b:
        return True
    if not elementwise_kernel:
        return False
    ta, tb = a.type, b.type
    both_args = all(
        isinstance(v, BlockArgument) and isinstance(v.owner.parent_op(), func.FuncOp)
        for v in (a, b)
    )
    return (
        both_args
        and isinstance(ta, MemRefType)
        and isinstance(tb, MemRefType)
        and dtypes.nbytes(ta) == dtypes.nbytes(tb)
    )


def enclosing_kernel(op: Operation) -> func.FuncOp | None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        parent = parent.parent_op()
    return parent


def is_elementwise_kernel(op: Operation) -> bool:
    kernel = enclosing_kernel(op)
    return kernel is not None and loop.ELEMENTWISE_ATTR in kernel.attributes


def memory_ops(block: Block) -> Iterator[Operation]:
    for op in block.ops:
        if isinstance(op, memref.LoadOp | memref.StoreOp):
            yield op


def work(block: Block) -> int:
    """A rough count of the scalar or vector ops one run of `block` executes."""
    total = 0
    for op in block.ops:
        if isinstance(op, loop.ForOp):
            total += op.trip_count * work(op.body.block)
        elif isinstance(hint := op.attributes.get(loop.WORK_ATTR), IntegerAttr):
            total += hint.value.data  # a call of a library routine
        elif not isinstance(op, loop.YieldOp):
            total += 1
    return total
