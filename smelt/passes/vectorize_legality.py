"""loop-vectorize's legality: whether an innermost `loop.for` keeps its meaning
when run a vector of iterations at a time (contiguous or invariant accesses, no
store that may overlap another access, reductions it knows)."""

from __future__ import annotations

from xdsl.dialects import memref, vector
from xdsl.dialects.builtin import (
    AnyFloat,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    MemRefType,
    VectorType,
)
from xdsl.ir import Block, Operation, SSAValue

from smelt.dialects import dtypes, loop
from smelt.passes.loop_analysis import (
    Access,
    Affine,
    affine_form,
    enclosing_kernel,
    is_elementwise_kernel,
    may_alias,
)
from smelt.passes.vector_ops import ELEMENTWISE, REDUCTIONS, Reduction


class Refused(Exception):
    """The loop cannot be vectorized; the message says why (loop-vectorize keeps
    it as a remark: `smelt.passes.remarks`)."""


class VectorLegality:
    """Whether one innermost loop can be vectorized (`check` raises Refused, and
    records the loop's accesses and reductions for `LoopVectorizer.rewrite`)."""

    def __init__(
        self,
        op: loop.ForOp,
        width: int,
        reassoc: bool,
        stream_bytes: int = 0,
        mask_min: int = 0,
        accumulators: int = 1,
    ):
        self.loop = op
        self.width = width
        self.accumulators = accumulators
        self.mask_min = mask_min  # 0: no masked tails
        self.mask: SSAValue | None = None  # the lane mask of the loop being built
        self.reassoc = reassoc
        self.stream_bytes = stream_bytes
        self.block = op.body.block
        self.iv = self.block.args[0]
        self.varying: set[SSAValue] = set()
        self.accesses: dict[Operation, Access] = {}
        self.reductions: list[Reduction] = []

    # --- legality -------------------------------------------------------------

    def check(self) -> None:
        """Raises Refused unless vectorizing keeps the loop's meaning."""
        op = self.loop
        if op.step.data != 1:
            raise Refused("step is not 1")
        if op.trip_count < self.width and not (
            self.mask_min and op.trip_count >= self.mask_min
        ):
            raise Refused("fewer iterations than lanes")
        self.varying = {self.iv, *self.block.args[1:]}
        forms: dict[SSAValue, Affine | None] = {}
        for inner in self.block.ops:
            if inner.regions:
                raise Refused(f"not an innermost loop: {inner.name} holds a region")
            if isinstance(inner, loop.YieldOp):
                continue
            if isinstance(inner, memref.LoadOp | memref.StoreOp):
                self._check_access(inner, forms)
            elif isinstance(inner, loop.CheckOp):
                if inner.ok in self.varying:
                    raise Refused("a run-time check that varies along the loop")
            elif inner.name not in ELEMENTWISE or inner.name == "math.fpowi":
                raise Refused(f"cannot vectorize {inner.name}")
            if any(v in self.varying for v in inner.operands):
                self.varying.update(inner.results)
        for v in self.varying:
            if isinstance(v.type, VectorType | MemRefType):
                raise Refused("already vector code")
        self._check_aliasing()
        self._check_reductions()

    def _check_access(self, op: Operation, forms) -> None:
        is_store = isinstance(op, memref.StoreOp)
        buffer = op.memref
        if self._in_loop(buffer):
            raise Refused("buffer defined in the loop")
        indices = []
        for index in op.indices:
            form = affine_form(index, self.varying, forms)
            if form is None:
                raise Refused("index is not iv + invariant")
            indices.append(form)
        coeffs = [f.coeff(self.iv) for f in indices]
        contiguous = bool(coeffs) and coeffs[-1] == 1 and not any(coeffs[:-1])
        if any(coeffs) and not contiguous:
            raise Refused("non-contiguous access")
        if is_store and not contiguous:
            raise Refused("store to a loop-invariant address")
        self.accesses[op] = Access(op, buffer, indices, is_store)
        if contiguous and not is_store:
            self.varying.update(op.results)

    def _streams(self, buffer: SSAValue) -> bool:
        """A store bypasses the caches (nontemporal) when it writes a buffer of
        `stream_bytes` or more that its kernel never reads: nothing reads it back
        soon, and streaming saves the read for ownership of every line."""
        t = buffer.type
        if not (
            self.stream_bytes > 0
            and isinstance(t, MemRefType)
            and isinstance(t.element_type, IntegerType | AnyFloat)
            and dtypes.nbytes(t) >= self.stream_bytes
        ):
            return False
        kernel = enclosing_kernel(self.loop)
        return kernel is not None and not any(
            isinstance(o, memref.LoadOp | vector.LoadOp) and o.operands[0] is buffer
            for o in kernel.walk()
        )

    def _check_aliasing(self) -> None:
        """Vector order (all lanes of each op, op after op) must not change what any
        load sees: accesses that may overlap a store must hit the same address."""
        elementwise = is_elementwise_kernel(self.loop)
        accesses = list(self.accesses.values())
        for i, a in enumerate(accesses):
            for b in accesses[i + 1 :]:
                if not (a.is_store or b.is_store):
                    continue
                if may_alias(a.root, b.root, elementwise) and not (
                    a.byte_offset().same_as(b.byte_offset())
                ):
                    raise Refused("a store may overlap another access")

    def _check_reductions(self) -> None:
        yielded = self.block.last_op
        assert isinstance(yielded, loop.YieldOp)  # the verifier guarantees it
        for k, (arg, out) in enumerate(zip(self.block.args[1:], yielded.values)):
            combine = out.owner
            if not (arg.has_one_use() and out.has_one_use()):
                raise Refused("iter_arg used beyond one combining op")
            if not isinstance(combine, Operation) or combine.name not in REDUCTIONS:
                raise Refused("iter_arg is not a known reduction")
            if arg not in combine.operands or all(o is arg for o in combine.operands):
                raise Refused("iter_arg is not combined with a loop value")
            kind, neutral, reassoc = REDUCTIONS[combine.name]
            if reassoc and not self.reassoc:
                raise Refused("float reduction needs reassoc=true")
            if not isinstance(
                arg.type, IntegerType | Float16Type | Float32Type | Float64Type
            ):
                raise Refused("reduction over an unsupported type")
            self.reductions.append(Reduction(k, combine, kind, neutral, reassoc))

    def _in_loop(self, value: SSAValue) -> bool:
        owner = value.owner
        if isinstance(owner, Block):
            return owner is self.block
        return owner.parent_block() is self.block
