"""loop-vectorize: innermost `loop.for` loops → vector loops plus a remainder
(one masked vector iteration, or the scalar loop)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, vector
from xdsl.dialects.builtin import (
    BoolAttr,
    DenseIntOrFPElementsAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    VectorType,
    i1,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, VerifyException

from smelt.dialects import loop
from smelt.dialects.arith_ext import VECTOR_FORMS
from smelt.errors import SmeltError
from smelt.passes import remarks
from smelt.passes import vectorize_interleave as interleave
from smelt.passes.vector_ops import ELEMENTWISE, neutral, vector_of, zeros
from smelt.passes.vectorize_legality import Refused, VectorLegality
from smelt.targets.cpu_spec import of_module

MIN_INTERLEAVED_TRIPS = 4
"""A reduction loop marked `loop.accumulators` gets them where its vector loop
runs at least this many iterations per accumulator."""

TAILS = ("auto", "masked", "scalar")
"""How loop-vectorize runs the iterations after the last whole vector: `masked`,
one vector iteration whose lane mask covers only them (AVX-512 opmasks), or
`scalar`, the original loop; `auto`: masked where the target has mask registers.
The default is `scalar`: on the light_* conv models masked tails compiled faster
but ran 8-16% slower (paired, benchmarks/masked_tails.py), so the presets keep
the scalar tails until that is understood."""


class LoopVectorizer(VectorLegality):
    """Vectorizes one innermost loop: `check` refuses (`VectorLegality`),
    `rewrite` commits."""

    # --- rewrite --------------------------------------------------------------

    def rewrite(self) -> None:
        """Inserts the vector loop and, where the target has masks and `mask_min`
        or more iterations remain, one masked vector iteration for the rest; else
        the original loop keeps the remainder."""
        op, w = self.loop, self.width
        lb, ub, trips = op.lb.data, op.ub.data, op.trip_count
        main_ub = lb + (trips // w) * w
        masked = bool(self.mask_min) and ub - main_ub >= self.mask_min
        neutral_ops = [
            neutral(arg.type, r.neutral, w)
            for r, arg in zip(self.reductions, self.block.args[1:])
        ]
        neutrals = [o for ops in neutral_ops for o in ops]
        accs = [ops[-1].results[0] for ops in neutral_ops]
        self.pre: list[Operation] = []  # loop-invariant ops, hoisted before the loop
        self.combined: list[Operation] = []  # accumulators merged after the first
        self.scalar: dict[SSAValue, SSAValue] = {}
        self.vec: dict[SSAValue, SSAValue] = {}
        loops: list[loop.ForOp] = []
        try:
            copies, start = self._copies(trips), lb
            if copies > 1:  # `copies` accumulators per reduction, then combined
                start = lb + trips // (w * copies) * (w * copies)
                loops.append(self._vector_loop(lb, start, accs, copies=copies))
                accs = self._combine(list(loops[-1].res), copies)
            if main_ub > start:
                loops.append(self._vector_loop(start, main_ub, accs))
                accs = list(loops[-1].res)
            if masked:
                loops.append(self._vector_loop(main_ub, ub, accs, ub - main_ub))
                accs = list(loops[-1].res)
        except (VerifyException, DiagnosticException, Refused) as e:
            dead_ops = (*reversed(loops), *reversed(self.combined), *reversed(self.pre))
            for dead in (*dead_ops, *reversed(neutrals)):
                dead.drop_all_references()
            why = " ".join(str(e).split())  # one line: a remark is one line
            raise Refused(f"vector form does not verify: {why}") from e
        parent = op.parent_block()
        assert parent is not None
        parent.insert_ops_before([*neutrals, *self.pre, *self.between(loops)], op)
        results = []
        for r, vres in zip(self.reductions, accs):
            flags = arith.FastMathFlagsAttr(
                [arith.FastMathFlag.REASSOC] if r.reassoc else "none"
            )
            red = vector.ReductionOp.create(
                operands=[vres, op.iter_inits[r.index]],
                result_types=[vres.type.element_type],
                properties={"kind": vector.CombiningKindAttr(
                    vector.CombiningKindFlag(r.kind)), "fastmath": flags},
            )  # fmt: skip
            parent.insert_op_before(red, op)
            results.append(red.results[0])
        if masked or main_ub == ub:
            for old, new in zip(op.res, results):
                old.replace_all_uses_with(new)
            parent.erase_op(op)
        else:
            op.lb = IntAttr(main_ub)
            inits = list(op.iter_inits)
            for r, new in zip(self.reductions, results):
                inits[r.index] = new
            op.operands = inits

    def _copies(self, trips: int) -> int:
        """How many accumulators each reduction of the main vector loop gets:
        `accumulators` where every reduction may be reassociated and the loop
        runs at least MIN_INTERLEAVED_TRIPS vector iterations per accumulator,
        else 1 (a batch-1 layer streaming a 4096 × 9216 weight took 1.26× the
        packed GEMM's time with one FMA chain, 0.97× with four, on the Zen 5
        host at 1 thread)."""
        copies = self.accumulators
        if copies < 2 or not self.reductions:
            return 1  # (a float sum got here only where it may be reassociated)
        if trips < MIN_INTERLEAVED_TRIPS * copies * self.width:
            return 1
        return copies

    def _combine(self, accs: list[SSAValue], copies: int) -> list[SSAValue]:
        """The `copies` accumulators of each reduction (`accs`: copy-major) combined
        pairwise into one, with the reduction's own op on vectors (after the
        interleaved loop: `self.combined`, placed by `between`)."""
        count = len(self.reductions)
        out = []
        for i, r in enumerate(self.reductions):
            values = [accs[c * count + i] for c in range(copies)]
            while len(values) > 1:
                pairs = []
                for a, b in zip(values[::2], values[1::2]):
                    cls = VECTOR_FORMS.get(r.combine.name, type(r.combine))
                    op = cls.create(
                        operands=[a, b], result_types=[a.type],
                        properties=dict(r.combine.properties),
                    )  # fmt: skip
                    self.combined.append(op)
                    pairs.append(op.results[0])
                values = pairs + values[len(pairs) * 2 :]
            out.append(values[0])
        return out

    def between(self, loops: list[loop.ForOp]) -> list[Operation]:
        """The vector loops with the accumulator combination after the first."""
        if not self.combined:
            return loops
        return [loops[0], *self.combined, *loops[1:]]

    def _vector_loop(
        self, lb: int, ub: int, accs: list[SSAValue], active: int = 0, copies: int = 1
    ) -> loop.ForOp:
        """The vector loop over [lb, ub) (`active` > 0: one iteration in which only
        the first `active` lanes load, store and reduce; `copies` > 1: each
        iteration runs the body on `copies` consecutive vectors, each reduction
        into an accumulator of its own). Loop-invariant values made for an
        earlier vector loop are shared with it (`self.pre`)."""
        op, w = self.loop, self.width
        vloop = loop.ForOp(lb, ub, w * copies, op.kind.data, accs * copies)
        vloop.attributes.update(op.attributes)
        self.out = vloop.body.block
        self.out.args[0].name_hint = self.iv.name_hint
        hoisted = {r for o in self.pre for r in o.results}
        self.mask = None
        if active:
            count = arith.ConstantOp(IntegerAttr(active, IndexType()))
            mask = vector.CreateMaskOp([count.result], VectorType(i1, [w]))
            self._add(count, hoist=True)
            self._add(mask, hoist=True)
            self.mask = mask.results[0]
        yielded: list[SSAValue] = []
        try:
            for c in range(copies):
                self.scalar = {k: v for k, v in self.scalar.items() if v in hoisted}
                self.vec = {k: v for k, v in self.vec.items() if v in hoisted}
                hoisted = {r for o in self.pre for r in o.results}
                iv = self.out.args[0]
                if c:
                    offset = arith.ConstantOp(IntegerAttr(c * w, IndexType()))
                    self._add(offset, hoist=True)
                    moved = arith.AddiOp(iv, offset.result)
                    self._add(moved)
                    iv = moved.result
                self.scalar[self.iv] = iv
                first = 1 + c * len(self.reductions)
                for r, acc in zip(self.reductions, self.out.args[first:]):
                    self.vec[self.block.args[1 + r.index]] = acc
                yielded += self._emit_body()
            self._add(loop.YieldOp(*yielded))
            vloop.verify()
        except (VerifyException, DiagnosticException, Refused):
            vloop.drop_all_references()
            raise
        return vloop

    def _emit_body(self) -> list[SSAValue]:
        """The body once, on vectors; returns the reductions' next values."""
        mask = self.mask
        values: list[SSAValue] = []
        for inner in self.block.ops:
            if isinstance(inner, memref.LoadOp):
                indices = [self.lane0(i) for i in inner.indices]
                if inner.results[0] in self.varying:
                    vt = vector_of(inner.results[0].type, self.width)
                    if mask is None:
                        new = vector.LoadOp(inner.memref, indices, vt)
                    else:
                        new = vector.MaskedLoadOp(
                            inner.memref, indices, mask, self._zeros(vt)
                        )
                    self._add(new)
                    self.vec[inner.results[0]] = new.results[0]
                else:  # invariant: no store in the loop may overlap it (check)
                    new = memref.LoadOp.get(inner.memref, indices)
                    self._add(new, hoist=True)
                    self.scalar[inner.results[0]] = new.results[0]
            elif isinstance(inner, memref.StoreOp):
                value = self.vector(inner.value)
                indices = [self.lane0(i) for i in inner.indices]
                if mask is not None:
                    self._add(vector.MaskedStoreOp(inner.memref, indices, mask, value))
                    continue
                stream = self._streams(inner.memref)
                store = vector.StoreOp(value, inner.memref, indices)
                if stream:
                    store.properties["nontemporal"] = BoolAttr.from_bool(True)
                self._add(store)
            elif isinstance(inner, loop.CheckOp):  # invariant (check): once, before
                check = loop.CheckOp(self.lane0(inner.ok), inner.message.data)
                check.location = inner.location
                self._add(check, True)
            elif isinstance(inner, loop.YieldOp):
                for r in self.reductions:
                    value = self.vector(inner.values[r.index])
                    if mask is not None:  # inactive lanes keep their accumulator
                        acc = self.vec[self.block.args[1 + r.index]]
                        select = loop.SelectOp(mask, value, acc)
                        self._add(select)
                        value = select.result
                    values.append(value)
        return values

    def _zeros(self, vt: VectorType) -> SSAValue:
        """A hoisted all-zero vector: what a masked load puts in inactive lanes."""
        key = ("zeros", vt)
        if key not in self.vec:
            const = zeros(vt)
            self._add(const, hoist=True)
            self.vec[key] = const.result  # type: ignore[index]
        return self.vec[key]  # type: ignore[index]

    def _add(self, op: Operation, hoist: bool = False) -> None:
        if hoist:
            self.pre.append(op)
        else:
            self.out.add_op(op)

    def lane0(self, value: SSAValue) -> SSAValue:
        """The scalar that `value` takes in the first lane (loop-invariant values and
        the induction variable's value at the start of the vector)."""
        if not self._in_loop(value):
            return value
        if value in self.scalar:
            return self.scalar[value]
        op = value.owner
        if not isinstance(op, Operation) or op.name not in ELEMENTWISE:
            raise Refused("no scalar form")
        new = op.create(
            operands=[self.lane0(o) for o in op.operands],
            result_types=[r.type for r in op.results],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        self._add(new, hoist=value not in self.varying)
        for old, res in zip(op.results, new.results):
            self.scalar[old] = res
        return self.scalar[value]

    def vector(self, value: SSAValue) -> SSAValue:
        """`value` in all lanes: a broadcast for invariants, a vector op otherwise."""
        if value in self.vec:
            return self.vec[value]
        vt = vector_of(value.type, self.width)
        if value is self.iv:
            base = self._broadcast(self.lane0(value), vt, hoist=False)
            lanes = arith.ConstantOp(
                DenseIntOrFPElementsAttr.from_list(vt, list(range(self.width))), vt
            )
            new: Operation = arith.AddiOp(base, lanes.result)
            self._add(lanes, hoist=True)
            self._add(new)
            result = new.results[0]
        elif value not in self.varying:
            result = self._broadcast(self.lane0(value), vt, hoist=True)
        else:
            op = value.owner
            assert isinstance(op, Operation)
            operands = [self._vector_operand(op, o) for o in op.operands]
            cls = type(op)
            if not (isinstance(op, arith.SelectOp) and operands[0] is op.cond):
                cls = VECTOR_FORMS.get(op.name, cls)  # a vector cond for select
            new = cls.create(
                operands=operands,
                result_types=[vector_of(r.type, self.width) for r in op.results],
                properties=dict(op.properties),
                attributes=dict(op.attributes),
            )
            try:
                new.verify()
            except (VerifyException, DiagnosticException):
                new.drop_all_references()
                raise
            self._add(new)
            result = new.results[op.results.index(value)]
        self.vec[value] = result
        return result

    def _vector_operand(self, op: Operation, operand: SSAValue) -> SSAValue:
        # select with an invariant condition picks whole vectors: keep it scalar
        if (
            isinstance(op, arith.SelectOp)
            and operand is op.cond
            and operand not in self.varying
        ):
            return self.lane0(operand)
        return self.vector(operand)

    def _broadcast(self, scalar: SSAValue, vt: VectorType, hoist: bool) -> SSAValue:
        new = vector.BroadcastOp(scalar, vt)
        self._add(new, hoist)
        return new.results[0]


def innermost_loops(kernel: func.FuncOp) -> list[loop.ForOp]:
    return [
        op
        for op in kernel.walk()
        if isinstance(op, loop.ForOp)
        and not any(isinstance(o, loop.ForOp) for o in op.body.block.ops)
    ]


@dataclass(frozen=True)
class LoopVectorizePass(ModulePass):
    """Rewrites innermost `loop.for` loops into loops over `width`-lane vectors
    (0, the default: the f32 lanes of the module's `#target.cpu`, 8 without one).

    Expects loop-level kernels. A loop is vectorized when its step is 1, it runs at
    least `width` times, its body holds only loads, stores, elementwise
    arith/math ops and loop-invariant `loop.check`s (hoisted before the loop), every memory index is `iv + invariant` in the last dimension
    (contiguous, becomes vector.load/store) or does not use the iv (invariant,
    stays a scalar load, broadcast where needed), any store that may overlap
    another access hits the same address in the same iteration, and every
    iter_arg is a reduction (add, mul, min, max, and, or, xor). Anything else is
    left unchanged.

    Output: a vector loop of step `width` over the first ⌊n/width⌋·width
    iterations, then the original loop over the rest (the remainder; `tail`
    "scalar", the default, or "auto" on a target without mask registers). With
    masks (`tail` "masked", or "auto" where `CpuSpec.mask_registers`), a remainder of
    `mask_min` or more iterations, and a loop of `mask_min` to `width` - 1
    iterations, run as one vector iteration under the lane mask
    `vector.create_mask r` (r: the iterations left): `vector.maskedload` (zeros in
    the inactive lanes), `vector.maskedstore`, and reductions that keep the
    inactive lanes' accumulators (`loop.select`). Vector
    stores to buffers of `stream_bytes` or more that the kernel never reads are
    `nontemporal` (0, the default: the module's `CpuSpec.streaming_store_bytes`;
    -1: never).
    Loop-invariant values (invariant loads included: no store of the loop may
    touch them) are computed once before the vector loop and broadcast.
    Reductions accumulate per lane from the neutral element and meet the initial
    value in one `vector.reduction` after the vector loop.

    Numerics: float add/mul reductions are reassociated that way, so they run only
    with `reassoc=true`; their result then differs from the in-order sum by
    rounding (typically less: `width` partial sums). min/max and integer
    reductions are exact. Every other op is the same op on vectors; how a target
    computes it is the target's business (the llvm target evaluates exp, tanh and
    erf on f32 vectors with polynomials within a few ulp, `vector_math.py`).

    Aliasing: distinct kernel buffers are taken to be disjoint, except in kernels
    marked `loop.elementwise`, where buffer-plan may place an output over an input
    of the same size (`loop_analysis.may_alias`); a loop whose store may overlap
    another access at a different address is left alone.

        loop.for %i = 0 to 10 step 1 parallel {         (width=8)
          %x = memref.load %a[%i]  ...                 →  loop.for %i = 0 to 8 step 8 parallel {
          memref.store %x, %b[%i]                          %x = vector.load %a[%i] ...
        }                                                  vector.store %x, %b[%i] ... }
                                                         loop.for %i = 8 to 10 step 1 parallel {...}
    """

    name = "loop-vectorize"
    scope = "kernel"  # each kernel on its own (smelt.compiler.deferred)

    width: int = 0
    reassoc: bool = True
    stream_bytes: int = 0
    tail: str = "scalar"
    mask_min: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        spec = of_module(op)
        width = self.width or spec.lanes(32)
        stream = self.stream_bytes or spec.streaming_store_bytes
        if self.tail not in TAILS:
            raise SmeltError(
                f"loop-vectorize: tail={self.tail!r}; choose one of {', '.join(TAILS)}"
            )
        masked = self.tail == "masked" or (
            self.tail == "auto" and spec.mask_registers > 0
        )
        mask_min = max(self.mask_min, 1) if masked else 0
        if width < 2:
            remarks.missed(self.name, op, f"{width} lane(s) of 32 bits: nothing to do")
            return
        for kernel in op.ops:
            if not (isinstance(kernel, func.FuncOp) and loop.is_kernel(kernel)):
                continue
            for pair in interleave.candidates(kernel):
                copy = interleave.InterleaveCopy(pair, width)
                try:
                    copy.check()
                except interleave.NotInterleave as e:
                    if _is_copy(pair):  # any other two-loop nest: not a miss
                        remarks.missed(self.name, pair, f"copy not interleaved: {e}")
                    continue
                copy.rewrite()
            for target in innermost_loops(kernel):
                accumulators = target.attributes.get(loop.ACCUMULATORS_ATTR)
                vectorizer = LoopVectorizer(
                    target, width, self.reassoc, max(stream, 0), mask_min,
                    accumulators.value.data if isinstance(accumulators, IntegerAttr) else 1,
                )  # fmt: skip
                try:
                    vectorizer.check()
                    vectorizer.rewrite()
                except Refused as e:
                    remarks.missed(self.name, target, str(e))


def _is_copy(outer: loop.ForOp) -> bool:
    """Whether the one loop inside `outer` stores the one value it loads: the nests
    whose interleave refusal is worth a remark (of the others, every two-loop
    nest, it is no news)."""
    inner = next(o for o in outer.body.block.ops if isinstance(o, loop.ForOp))
    loads = [o for o in inner.body.block.ops if isinstance(o, memref.LoadOp)]
    stores = [o for o in inner.body.block.ops if isinstance(o, memref.StoreOp)]
    return len(loads) == len(stores) == 1 and stores[0].value is loads[0].res
