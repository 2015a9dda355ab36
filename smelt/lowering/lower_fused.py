"""Kernels of anchor ops (alone) and of `graph.fused` regions (anchor + prologue and
epilogue, or an elementwise chain): one kernel each."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph
from smelt.errors import SmeltError
from smelt.lowering import (
    lower_conv,
    lower_conv_bf16,
    lower_conv_nchw,
    lower_matmul,
    lower_matmul_bf16,
    lower_pool_indices,
    lower_reduce,
    lower_scan,
)
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_elementwise import SCALAR, emit_elementwise

ANCHORS: dict[type[Operation], Anchor] = {
    **lower_conv.ANCHORS,
    **lower_conv_nchw.ANCHORS,  # overrides: NCHW convs as a GEMM on a CPU
    **lower_conv_bf16.ANCHORS,  # overrides: bf16 convs as the bf16 GEMM call
    **lower_matmul.ANCHORS,
    **lower_matmul_bf16.ANCHORS,  # overrides: a bf16 GEMM call where it applies
    **lower_reduce.ANCHORS,
    **lower_pool_indices.ANCHORS,
    **lower_scan.ANCHORS,
}


def _emit_anchored(
    ctx: LoweringContext,
    name: str,
    anchor_op: Operation,
    inputs: list[tuple[SSAValue, SSAValue]],
    outputs: list[tuple[SSAValue, SSAValue]],
) -> None:
    """The kernel `name` of `anchor_op` over (graph value, @main buffer) pairs."""
    anchor = ANCHORS[type(anchor_op)]
    buffer_of = dict(inputs)

    def operand_buffer(i: int) -> SSAValue:
        value = anchor_op.operands[i]
        if value not in buffer_of:
            raise SmeltError(
                f"{anchor_op.name} cannot take a fused prologue on operand {i}"
            )
        return buffer_of[value]

    extra = anchor.prepare(ctx, anchor_op, operand_buffer) if anchor.prepare else []
    k = ctx.kernel(name, [b for _, b in inputs] + extra, [b for _, b in outputs])
    n = len(inputs)
    io = KernelIO(
        k,
        anchor_op,
        dict(zip((v for v, _ in inputs), k.inputs[:n])),
        list(zip((v for v, _ in outputs), k.outputs)),
        k.inputs[n:],
    )
    anchor.emit(io, anchor_op)


def lower_anchor(ctx: LoweringContext, op: Operation) -> None:
    inputs = [(v, ctx.buffer(v)) for v in op.operands]
    outputs = [(r, ctx.result_buffer(r)) for r in op.results]
    _emit_anchored(ctx, op.name.removeprefix("graph."), op, inputs, outputs)


def lower_fused(ctx: LoweringContext, op: graph.FusedOp) -> None:
    """One kernel: the anchor's loop nest reading operands through the prologue and
    writing through the epilogue; without an anchor, one elementwise loop nest."""
    block = op.body.block
    terminator = block.last_op
    assert isinstance(terminator, graph.YieldOp)
    members = [o for o in block.ops if o is not terminator]
    anchors = [o for o in members if type(o) not in SCALAR]
    for o in anchors:
        if type(o) not in ANCHORS:
            raise SmeltError(f"graph.fused cannot hold {o.name}: it is not fusable")
    if len(anchors) > 1:
        names = ", ".join(o.name for o in anchors)
        raise SmeltError(f"graph.fused holds several anchors ({names}); it needs one")
    inputs = [(arg, ctx.buffer(v)) for arg, v in zip(block.args, op.inputs)]
    outputs = [(v, ctx.result_buffer(r)) for v, r in zip(terminator.values, op.outputs)]
    name = "fused_" + op.kind.data
    if anchors:
        _emit_anchored(ctx, name, anchors[0], inputs, outputs)
        return
    k = ctx.kernel(name, [b for _, b in inputs], [b for _, b in outputs])
    buffers = dict(zip((v for v, _ in inputs), k.inputs))
    emit_elementwise(k, list(zip((v for v, _ in outputs), k.outputs)), buffers)


LOWERINGS: dict[type[Operation], Callable] = {
    **{cls: lower_anchor for cls in ANCHORS},
    graph.FusedOp: lower_fused,
}
