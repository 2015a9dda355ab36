"""Lowering of graph.max_pool_with_indices (ONNX MaxPool with its Indices output):
one kernel that keeps, per window, the max and the flat input index where it was
first found."""

from __future__ import annotations

import math as pymath

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph
from smelt.errors import SmeltError
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.loop_builder import Index
from smelt.lowering.pool_windows import finite_lowest, hollow
from smelt.lowering.scalar_ops import Arith

I64 = IntegerType(64)


def _window_attrs(op: Operation, spatial: int) -> tuple[list[int], ...]:
    """strides, pads (begins then ends) and dilations, with ONNX defaults."""
    attr = op.attr  # type: ignore[attr-defined]
    strides = list(attr("strides") or (1,) * spatial)
    pads = list(attr("pads") or (0,) * (2 * spatial))
    dilations = list(attr("dilations") or (1,) * spatial)
    if any(p < 0 for p in pads) or any(s <= 0 for s in strides + dilations):
        raise SmeltError(f"{op.name}: negative pads or non-positive strides/dilations")
    return strides, pads, dilations


def index_places(spatial: list[int], storage_order: int) -> list[int]:
    """The factor of each spatial index in the flat index of one (n, c) block:
    row-major (storage_order 0) or column-major (1)."""
    dims = range(len(spatial))
    if storage_order:
        return [pymath.prod(spatial[:d]) for d in dims]
    return [pymath.prod(spatial[d + 1 :]) for d in dims]


def emit_max_pool_with_indices(io: KernelIO, op: graph.MaxPoolWithIndicesOp) -> None:
    """Per output position, reduce the window carrying (best, index): a position
    inside the input replaces them when no position was taken yet, or when its value
    is greater (or the first NaN). So the index is the first position of the max,
    and the value is the max. A window that covers no input cell gives the index
    -1 and, as onnxruntime does, the lowest finite value of the type (like
    graph.max_pool). (onnxruntime's index for such a window is the flat index of
    spatial position (-1, ..., -1), which can point into the previous channel's
    block: an artifact, not a contract.)"""
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    _, channels, *in_sp = graph.shape_of(op.input)
    out_sp = graph.shape_of(op.result)[2:]
    nsp = len(in_sp)
    kernel = list(op.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(op, nsp)
    lows = pads[:nsp]
    block = pymath.prod(in_sp)
    places = index_places(in_sp, op.attr("storage_order"))

    def reaches_out(d: int) -> bool:
        last = (out_sp[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] - lows[d]
        return lows[d] > 0 or last >= in_sp[d]

    guarded = [reaches_out(d) for d in range(nsp)]
    unset = k.constant(-1, I64)
    # a window wholly in the padding keeps the lowest finite value (onnxruntime)
    empty = hollow(in_sp, out_sp, kernel, strides, lows, dilations)
    lowest = finite_lowest(a) if empty else a.lowest()

    with k.nest(graph.shape_of(op.result)) as ivs:
        n, c = ivs[0], ivs[1]

        def step(kivs: list[Index], accs: list[SSAValue]) -> list[SSAValue]:
            best, where = accs
            index, inside = [], []
            for d in range(nsp):
                i = k.affine(
                    [(ivs[2 + d], strides[d]), (kivs[d], dilations[d])], -lows[d]
                )
                if guarded[d]:
                    inside.append(k.in_range(i, 0, in_sp[d]))
                    i = k.clamp(i, 0, in_sp[d] - 1)
                index.append(i)
            value = io.read(0, [n, c, *index])
            take = a.cmp("gt", value, best)
            if a.is_float:  # the first NaN wins: value is NaN, best is not
                value_nan = a.cmp("ne", value, value)
                best_number = a.cmp("eq", best, best)
                nan_first = k.op(arith.AndIOp, value_nan, best_number)
                take = k.op(arith.OrIOp, take, nan_first)
            first = k.op(arith.CmpiOp, where, unset, "eq")
            take = k.op(arith.OrIOp, take, first)
            valid = k.and_all(inside)
            if valid is not None:
                take = k.op(arith.AndIOp, take, valid)
            flat = k.affine(
                [(n, channels * block), (c, block)]
                + [(i, p) for i, p in zip(index, places)]
            )
            flat = k.op(arith.IndexCastOp, flat, I64)
            return [
                a.select(take, value, best),
                k.op(arith.SelectOp, take, flat, where),
            ]

        best, where = k.reduce(kernel, [lowest, unset], step)
        io.write(0, best, ivs)
        io.write(1, where, ivs)


ANCHORS: dict[type[Operation], Anchor] = {
    graph.MaxPoolWithIndicesOp: Anchor(emit_max_pool_with_indices),  # type: ignore[arg-type]
}
