"""Shared loop-nest shapes: elementwise with broadcasting, copies, reductions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType
from xdsl.ir import SSAValue

from smelt.lowering.loop_builder import Index, KernelBuilder, shape

ScalarBody = Callable[[list[SSAValue]], SSAValue]
IndexMap = Callable[[list[Index]], list[Index]]


def broadcast_index(
    k: KernelBuilder, ivs: Sequence[Index], operand_shape: Sequence[int]
) -> list[Index]:
    """numpy broadcasting: dims align on the right, size-1 operand dims read index 0
    (as do extra leading operand dims, which are all 1 when shapes broadcast)."""
    lead = len(ivs) - len(operand_shape)
    return [
        k.index(0) if d == 1 or lead + i < 0 else ivs[lead + i]
        for i, d in enumerate(operand_shape)
    ]


def checked_index(
    k: KernelBuilder, value: SSAValue, size: int, message: str
) -> Index:
    """A run-time integer index into a dim of `size` (> 0) as an in-bounds `index`:
    negative values count from the end; a value out of [-size, size) fails the run
    with `message` (`loop.check`, as onnxruntime fails) and is clamped meanwhile, so
    that no access leaves the buffer."""
    raw = k.op(arith.IndexCastOp, value, IndexType())
    k.check(k.in_range(raw, -size, size), message)
    wrapped = k.op(arith.AddiOp, raw, k.index(size))
    index = k.op(arith.SelectOp, k.cmp_index(raw, "slt", 0), wrapped, raw)
    return k.clamp(index, 0, size - 1)


def map_elementwise(
    k: KernelBuilder, out: SSAValue, ins: Sequence[SSAValue], body: ScalarBody
) -> None:
    """out[i] = body(in_0[bcast(i)], ...), values in their compute types."""
    with k.nest(shape(out)) as ivs:
        values = [k.load_value(x, broadcast_index(k, ivs, shape(x))) for x in ins]
        k.store_value(body(values), out, ivs)


def copy_nest(
    k: KernelBuilder,
    src: SSAValue,
    dst: SSAValue,
    bounds: Sequence[int],
    src_index: IndexMap,
    dst_index: IndexMap = lambda ivs: ivs,
) -> None:
    """dst[dst_index(i)] = src[src_index(i)] for i over `bounds` (raw elements)."""
    with k.nest(bounds) as ivs:
        value = k.load(src, src_index(ivs))
        k.store(value, dst, dst_index(ivs))


def offset_along(
    k: KernelBuilder, ivs: Sequence[Index], axis: int, offset: int
) -> list[Index]:
    """ivs with `offset` added on `axis`."""
    out = list(ivs)
    out[axis] = k.affine([(ivs[axis], 1)], offset)
    return out


def reduce_axes(
    k: KernelBuilder,
    in_shape: Sequence[int],
    read: Callable[[list[Index]], SSAValue],
    write: Callable[[SSAValue, list[Index]], None],
    axes: Sequence[int],
    keepdims: bool,
    inits: Callable[[], list[SSAValue]],
    combine: Callable[[SSAValue, list[SSAValue]], list[SSAValue]],
    finish: Callable[[list[SSAValue]], SSAValue],
) -> None:
    """write(finish(fold(combine, read(kept + reduced), inits())), kept index).

    Kept dims are parallel loops (outer), reduced dims are reduction loops (inner)
    carrying the accumulators as iter_args; `combine(value, accs)` gives new accs.
    """
    kept = [i for i in range(len(in_shape)) if i not in axes]
    with k.nest([in_shape[i] for i in kept]) as kept_ivs:

        def step(red_ivs: list[Index], accs: list[SSAValue]) -> list[SSAValue]:
            at = dict(zip(kept, kept_ivs)) | dict(zip(axes, red_ivs))
            return combine(read([at[i] for i in range(len(in_shape))]), accs)

        accs = k.reduce([in_shape[i] for i in axes], inits(), step)
        if keepdims:
            at = dict(zip(kept, kept_ivs))
            out_index = [at[i] if i in at else k.index(0) for i in range(len(in_shape))]
        else:
            out_index = list(kept_ivs)
        write(finish(accs), out_index)
