"""MaxPool / AveragePool over channels-first (NCHW, any spatial rank) inputs.

Fast form: where some window reaches outside the input, `prepare` copies the
input into a padded scratch buffer first (the pad cells hold what a position
outside the input contributes: the max's start value, or 0 for a sum), so that
the window loops read without guards; the kernel is marked as a window
reduction (`loop.pattern = "window"`, roles kh / kw), which loop-schedule
unrolls, leaving the output-width loop innermost for the vectorizers. Where the
input comes through a fused prologue, or the padded copy would be much larger
than the input, the window loops guard each position instead (index clamped,
value masked with select). A window wholly in the padding gives what
onnxruntime gives (pool_windows)."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, SSAValue

from smelt.dialects import graph
from smelt.errors import SmeltError
from smelt.lowering.kernel_io import KernelIO
from smelt.lowering.loop_builder import (
    WINDOW_PATTERN,
    Index,
    element_type,
    mark_pattern,
    tag_loops,
)
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.pool_windows import finite_lowest, hollow, nonzero_count
from smelt.lowering.scalar_ops import Arith

MAX_PADDED_GROWTH = 4
"""The padded copy is made only while it holds at most this many times the
input's cells (plus one window's worth per plane); beyond, the guarded loops."""


@dataclass(frozen=True)
class PoolWindow:
    """A pool's window geometry over its spatial dims (ONNX attributes)."""

    is_max: bool
    dtype: Attribute  # the graph element type
    batch: tuple[int, int]  # N, C
    in_sp: tuple[int, ...]
    out_sp: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    lows: tuple[int, ...]
    highs: tuple[int, ...]
    dilations: tuple[int, ...]
    include_pad: bool

    @staticmethod
    def of(
        op: graph.PoolOp, strides: list[int], pads: list[int], dilations: list[int]
    ) -> PoolWindow:
        is_max = isinstance(op, graph.MaxPoolOp)
        in_shape = graph.shape_of(op.input)
        nsp = len(in_shape) - 2
        return PoolWindow(
            is_max,
            graph.element_type_of(op.input),
            (in_shape[0], in_shape[1]),
            tuple(in_shape[2:]),
            tuple(graph.shape_of(op.result)[2:]),
            tuple(op.attr("kernel_shape")),
            tuple(strides),
            tuple(pads[:nsp]),
            tuple(pads[nsp:]),
            tuple(dilations),
            not is_max and bool(op.attr("count_include_pad", 0)),
        )

    @property
    def rank(self) -> int:
        return len(self.in_sp)

    def last(self, d: int) -> int:
        """The last position (input coordinates) a window visits in dim d."""
        o, k = self.out_sp[d] - 1, self.kernel[d] - 1
        return o * self.strides[d] + k * self.dilations[d] - self.lows[d]

    @property
    def guarded(self) -> list[bool]:
        """Dims where some window position falls outside [0, in)."""
        return [
            self.lows[d] > 0 or self.last(d) >= self.in_sp[d] for d in range(self.rank)
        ]

    @property
    def counted(self) -> list[bool]:
        """Dims where some window position falls outside [-low, in + high)."""
        return [self.last(d) >= self.in_sp[d] + self.highs[d] for d in range(self.rank)]

    @property
    def dynamic_count(self) -> bool:
        """Whether an average's divisor varies (some window cut by the borders)."""
        if self.is_max:
            return False
        return any(self.counted if self.include_pad else self.guarded)

    @property
    def empty(self) -> bool:
        """Whether some window holds no cell (see pool_windows.hollow)."""
        return hollow(self.in_sp, self.out_sp, self.kernel, self.strides, self.lows,
                      self.dilations, self.highs if self.include_pad else None)  # fmt: skip

    @property
    def padded_sp(self) -> tuple[int, ...]:
        """The padded copy's spatial dims: every position a window visits."""
        return tuple(
            self.lows[d] + max(self.in_sp[d], self.last(d) + 1)
            for d in range(self.rank)
        )

    def fits_padded(self) -> bool:
        cells, padded = pymath.prod(self.in_sp), pymath.prod(self.padded_sp)
        return padded <= MAX_PADDED_GROWTH * cells + pymath.prod(self.kernel)


def start(a: Arith, w: PoolWindow) -> SSAValue:
    """The accumulator's start, also what a position outside the input adds: the
    lowest value for max (the lowest finite one where a window can be empty, as
    onnxruntime), 0 for a sum."""
    if not w.is_max:
        return a.zero()
    return finite_lowest(a) if w.empty else a.lowest()


def prepare(
    ctx: LoweringContext, w: PoolWindow, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[the padded input] where some window reaches outside the input and the
    copy fits (`fits_padded`); else nothing (the kernel guards or needs none)."""
    if not any(w.guarded) or not w.fits_padded():
        return []
    try:
        src = operand_buffer(0)
    except SmeltError:  # a fused prologue computes the input: the guarded loops
        return []
    n, c = w.batch
    padded = ctx.alloc(MemRefType(element_type(src), [n, c, *w.padded_sp]))
    k = ctx.kernel("pool_pad", [src], [padded])
    a = Arith(k, w.dtype)
    fill = start(a, w)
    # the border slabs of each dim (corners twice), then the input inside them:
    # each nest runs along the rows, so the long ones vectorize
    for d in range(w.rank):
        inner_end = w.lows[d] + w.in_sp[d]
        for begin, size in ((0, w.lows[d]), (inner_end, w.padded_sp[d] - inner_end)):
            if size <= 0:
                continue
            dims = list(w.padded_sp)
            dims[d] = size
            with k.nest([n, c, *dims]) as ivs:
                at = list(ivs)
                at[2 + d] = k.affine([(ivs[2 + d], 1)], begin)
                k.store_value(fill, k.outputs[0], at)
    with k.nest([n, c, *w.in_sp]) as ivs:
        at = [k.affine([(iv, 1)], low) for iv, low in zip(ivs[2:], w.lows)]
        k.store_value(k.load_value(k.inputs[0], ivs), k.outputs[0], [*ivs[:2], *at])
    return [padded]


def emit(io: KernelIO, op: graph.PoolOp, w: PoolWindow) -> None:
    """Per output position, reduce the window in iter_args (window loops
    innermost); average divides by the positions inside the input, or inside
    input + pads with count_include_pad."""
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    if not w.is_max and not a.is_float:
        raise SmeltError(
            f"{op.name} on {a.graph_type} is not supported: it needs floats"
        )
    padded = io.extra[0] if io.extra else None
    guarded = [False] * w.rank if padded is not None else w.guarded
    fast = not any(guarded) and w.rank <= 2
    if fast:
        mark_pattern(k, WINDOW_PATTERN)
    counted, nsp = w.counted, w.rank
    counts_inside = w.dynamic_count and not w.include_pad

    with k.nest(graph.shape_of(op.result)) as ivs:

        def step(kivs: list[Index], accs: list[SSAValue]) -> list[SSAValue]:
            if fast:
                tag_loops(kivs, ["kh", "kw"][2 - nsp :])
            index, inside, in_padded = [], [], []
            for d in range(nsp):
                terms = [(ivs[2 + d], w.strides[d]), (kivs[d], w.dilations[d])]
                # the position in the padded copy; in the input, lows before it
                at = k.affine(terms) if padded is not None else None
                pad_counts = w.include_pad and counted[d]
                # inside the input: a mask (guarded) or what an average counts
                masks = w.guarded[d] and (guarded[d] or counts_inside)
                i = at
                if at is None or pad_counts or masks:
                    i = k.affine(terms, -w.lows[d])
                if pad_counts:
                    in_padded.append(k.in_range(i, -w.lows[d], w.in_sp[d] + w.highs[d]))
                if masks:
                    inside.append(k.in_range(i, 0, w.in_sp[d]))
                if guarded[d]:
                    i = k.clamp(i, 0, w.in_sp[d] - 1)
                index.append(at if at is not None else i)
            if padded is not None:
                value = k.load_value(padded, [ivs[0], ivs[1], *index])
            else:
                value = io.read(0, [ivs[0], ivs[1], *index])
            valid = k.and_all(inside)
            # the sign of a zero maximum is not observable in MaxPool's
            # contract (onnxruntime's vmaxps leaves it to operand order)
            combined = (
                a.max(accs[0], value, signed_zeros=False)
                if w.is_max
                else a.add(accs[0], value)
            )
            masked = padded is None and valid is not None
            new = [a.select(valid, combined, accs[0]) if masked else combined]
            if w.dynamic_count:
                counts = k.and_all(in_padded) if w.include_pad else valid
                new.append(a.add(accs[1], a.select(counts, a.one(), a.zero())))
            return new

        inits = [start(a, w)] + ([a.zero()] if w.dynamic_count else [])
        accs = k.reduce(list(w.kernel), inits, step)
        result = accs[0]
        if not w.is_max:
            count = accs[1] if w.dynamic_count else a.const(pymath.prod(w.kernel))
            result = a.div(result, nonzero_count(a, count) if w.empty else count)
        io.write(0, result, ivs)
