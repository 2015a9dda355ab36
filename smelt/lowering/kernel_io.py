"""KernelIO: how an anchor op's kernel reads operands and writes results, straight
from buffers or through the prologue and epilogue of a `graph.fused` region."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, OpResult, SSAValue

from smelt.dialects import graph
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import Index, KernelBuilder
from smelt.lowering.lower_elementwise import evaluate
from smelt.lowering.scalar_ops import memref_type


class KernelIO:
    """The anchor's view of its kernel.

    `read(i, idx)` is operand i at idx (in its compute type): a load, or the fused
    prologue evaluated at idx. `write(j, value, idx)` hands result j's element to the
    epilogue and stores every kernel output that depends on it. Anchors that keep
    partial results in memory use `result_buffer(j)` as scratch of result j's type and
    then, when `has_epilogue`, call `write(j, load(scratch, idx), idx)` at each idx.
    """

    def __init__(
        self,
        k: KernelBuilder,
        anchor: Operation,
        inputs: dict[SSAValue, SSAValue],
        outputs: Sequence[tuple[SSAValue, SSAValue]],
        extra: Sequence[SSAValue] = (),
    ):
        self.k = k
        self.anchor = anchor
        self.inputs = inputs
        self.extra = list(extra)
        self._outputs: dict[int, list[tuple[SSAValue, SSAValue]]] = {}
        for value, buffer in outputs:
            j = self._source_result(value)
            if graph.shape_of(value) != graph.shape_of(anchor.results[j]):
                raise SmeltError(
                    f"graph.fused: an output of {anchor.name}'s epilogue changes its "
                    "shape; only shape-preserving epilogues can be fused"
                )
            self._outputs.setdefault(j, []).append((value, buffer))

    def _source_result(self, value: SSAValue) -> int:
        """The one anchor result that `value` is computed from."""
        found: set[int] = set()
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            if v in seen or v in self.inputs:
                continue
            seen.add(v)
            if isinstance(v, OpResult) and v.op is self.anchor:
                found.add(v.index)
            elif isinstance(v, OpResult):
                stack.extend(v.op.operands)
        if len(found) != 1:
            raise SmeltError(
                f"graph.fused: each output must be computed from exactly one result "
                f"of its anchor {self.anchor.name}"
            )
        return found.pop()

    @property
    def has_epilogue(self) -> bool:
        return any(v is not self.anchor.results[0] for v, _ in self._outputs.get(0, []))

    def read(self, i: int, idx: Sequence[Index]) -> SSAValue:
        return evaluate(self.k, self.anchor.operands[i], list(idx), self.inputs, {})

    def write(self, j: int, value: SSAValue, idx: Sequence[Index]) -> None:
        known = {self.anchor.results[j]: value}
        for v, buffer in self._outputs.get(j, []):
            self.k.store_value(
                evaluate(self.k, v, list(idx), self.inputs, known), buffer, idx
            )

    def operand_buffer(self, i: int) -> SSAValue:
        """The buffer holding operand i (an error when a prologue computes it)."""
        value = self.anchor.operands[i]
        if value not in self.inputs:
            raise SmeltError(
                f"graph.fused: {self.anchor.name} cannot take a fused prologue on "
                f"operand {i}"
            )
        return self.inputs[value]

    def result_buffer(self, j: int) -> SSAValue | None:
        """An output buffer usable as scratch for result j (same type), if any."""
        wanted = memref_type(self.anchor.results[j].type)
        for _, buffer in self._outputs.get(j, []):
            if isinstance(buffer.type, MemRefType) and buffer.type == wanted:
                return buffer
        return None


def writes_own_type(op: Operation) -> bool:
    """Whether `op`'s kernel stores a value of its result's own type: the result
    itself, or an output of its `graph.fused` region typed as the result. When it
    does not (a fused epilogue casts, e.g. an f32 conv or matmul whose result
    quant-cast stores as bf16), no output can hold the partial sums that the
    scheduled (tiled, register-blocked) forms accumulate in memory, and the anchor
    asks its `prepare` for a scratch buffer instead."""
    result = op.results[0]
    fused = op.parent_op()
    if not isinstance(fused, graph.FusedOp):
        return True
    outputs = fused.body.block.last_op.operands  # type: ignore[union-attr]
    return any(v.type == result.type for v in outputs)


# prepare(ctx, op, operand_buffer) -> extra kernel inputs, made before the kernel runs
Prepare = Callable[[object, Operation, Callable[[int], SSAValue]], list[SSAValue]]


@dataclass(frozen=True)
class Anchor:
    """How to lower an op that decides a kernel's loop nest (it may anchor a fusion)."""

    emit: Callable[[KernelIO, Operation], None]
    prepare: Prepare | None = None
