"""Lowerings of windowed graph ops: conv2d (through a zero-padded copy) and pools;
NHWC ones in lower_conv_nhwc.py."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable

from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop
from smelt.errors import SmeltError, UnsupportedModel
from smelt.lowering import lower_conv_nhwc, lower_pool_nchw
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.loop_builder import Index, element_type, shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_data import pad_nest
from smelt.lowering.scalar_ops import Arith


def _window_attrs(
    op: Operation, spatial: int
) -> tuple[list[int], list[int], list[int]]:
    """strides, pads (begins then ends) and dilations, with ONNX defaults."""
    attr = op.attr  # type: ignore[attr-defined]
    strides = list(attr("strides") or (1,) * spatial)
    pads = list(attr("pads") or (0,) * (2 * spatial))
    dilations = list(attr("dilations") or (1,) * spatial)
    if any(p < 0 for p in pads) or any(s <= 0 for s in strides + dilations):
        raise SmeltError(f"{op.name}: negative pads or non-positive strides/dilations")
    return strides, pads, dilations


def _is_nhwc(op: Operation) -> bool:
    layout = op.attr("layout", "nchw")  # type: ignore[attr-defined]
    if layout not in ("nchw", "nhwc"):
        raise SmeltError(f"{op.name}: layout {layout!r} is not supported (nchw, nhwc)")
    return layout == "nhwc"


# --- conv2d -------------------------------------------------------------------------


def prepare_conv2d(
    ctx: LoweringContext, op: graph.Conv2dOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """With `pads`, a kernel first copies the input into a zero-padded scratch
    buffer, so that the conv kernel reads in bounds without guards."""
    if _is_nhwc(op):
        return lower_conv_nhwc.prepare_conv2d(ctx, op, operand_buffer)
    _, pads, _ = _window_attrs(op, 2)
    if not any(pads):
        return []
    src = operand_buffer(0)
    n, c, h, w = shape(src)
    padded_type = MemRefType(
        element_type(src), [n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]]
    )
    padded = ctx.alloc(padded_type)
    k = ctx.kernel("conv2d_pad", [src], [padded])
    zero = 0.0 if dtypes.is_float(element_type(src)) else 0
    fill = k.constant(zero, element_type(src))
    widths = [0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]]
    pad_nest(k, k.inputs[0], k.outputs[0], widths, fill=fill)
    return [padded]


def emit_conv2d(io: KernelIO, op: graph.Conv2dOp) -> None:
    if _is_nhwc(op):
        return lower_conv_nhwc.emit_conv2d(io, op)
    a = Arith(io.k, graph.element_type_of(op.input))
    x = io.extra[0] if io.extra else io.operand_buffer(0)
    strides, _, dilations = _window_attrs(op, 2)
    scratch = io.result_buffer(0)
    # 16-bit floats accumulate in an f32 register; others accumulate in the output.
    if a.type == a.storage and scratch is not None:
        _conv_in_place(io, a, op, x, scratch, strides, dilations)
    else:
        _conv_register(io, a, op, x, strides, dilations)


def _conv_in_place(
    io: KernelIO,
    a: Arith,
    op: graph.Conv2dOp,
    x: SSAValue,
    out: SSAValue,
    strides: list[int],
    dilations: list[int],
) -> None:
    """out[n, o] = bias[o]; then for (ic, kh, kw): out[n, o, :, :] += w * x-plane;
    then the epilogue, if any, over out[n, o].

    The innermost loop runs along an output row, contiguous in out (and in x for
    stride 1), which LLVM vectorizes."""
    k, group = io.k, op.attr("group")
    n_, o_, oh_, ow_ = shape(out)
    _, cg_, kh_, kw_ = graph.shape_of(op.weight)
    og_ = o_ // group
    with k.nest([n_, group, og_]) as (n, g, og):
        o = k.affine([(g, og_), (og, 1)])
        bias = io.read(2, [o])
        with k.nest([oh_, ow_]) as (oh, ow):
            k.store_value(bias, out, [n, o, oh, ow])
        with k.nest([cg_, kh_, kw_], loop.REDUCTION) as (ic, kh, kw):
            c = k.affine([(g, cg_), (ic, 1)])
            weight = io.read(1, [o, ic, kh, kw])
            with k.loop(oh_) as oh:
                ih = k.affine([(oh, strides[0]), (kh, dilations[0])])
                with k.loop(ow_) as ow:
                    iw = k.affine([(ow, strides[1]), (kw, dilations[1])])
                    acc = k.load_value(out, [n, o, oh, ow])
                    product = a.mul(weight, k.load_value(x, [n, c, ih, iw]))
                    k.store_value(a.add(acc, product), out, [n, o, oh, ow])
        if io.has_epilogue:
            with k.nest([oh_, ow_]) as (oh, ow):
                index = [n, o, oh, ow]
                io.write(0, k.load_value(out, index), index)


def _conv_register(
    io: KernelIO,
    a: Arith,
    op: graph.Conv2dOp,
    x: SSAValue,
    strides: list[int],
    dilations: list[int],
) -> None:
    """out[n, o, oh, ow] = bias[o] + sum over (ic, kh, kw), in a scalar iter_arg."""
    k, group = io.k, op.attr("group")
    n_, o_, oh_, ow_ = graph.shape_of(op.result)
    _, cg_, kh_, kw_ = graph.shape_of(op.weight)
    og_ = o_ // group
    with k.nest([n_, group, og_, oh_, ow_]) as (n, g, og, oh, ow):
        o = k.affine([(g, og_), (og, 1)])

        def step(ivs: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            ic, kh, kw = ivs
            c = k.affine([(g, cg_), (ic, 1)])
            ih = k.affine([(oh, strides[0]), (kh, dilations[0])])
            iw = k.affine([(ow, strides[1]), (kw, dilations[1])])
            product = a.mul(
                io.read(1, [o, ic, kh, kw]), k.load_value(x, [n, c, ih, iw])
            )
            return [a.add(acc[0], product)]

        (total,) = k.reduce([cg_, kh_, kw_], [io.read(2, [o])], step)
        io.write(0, total, [n, o, oh, ow])


# --- pools --------------------------------------------------------------------------


def prepare_pool(
    ctx: LoweringContext, op: graph.PoolOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """NCHW: the padded input where windows reach outside it (lower_pool_nchw)."""
    _check_window_work(op)
    if _is_nhwc(op):
        return []
    return lower_pool_nchw.prepare(ctx, _pool_window(op), operand_buffer)


def emit_pool(io: KernelIO, op: graph.PoolOp) -> None:
    """Per output position, reduce the window: NHWC in lower_conv_nhwc.py, NCHW
    (any spatial rank) in lower_pool_nchw.py."""
    _check_window_work(op)
    if _is_nhwc(op):
        return lower_conv_nhwc.emit_pool(io, op)
    lower_pool_nchw.emit(io, op, _pool_window(op))


def _pool_window(op: graph.PoolOp) -> lower_pool_nchw.PoolWindow:
    nsp = len(graph.shape_of(op.input)) - 2
    return lower_pool_nchw.PoolWindow.of(op, *_window_attrs(op, nsp))


POOL_WORK_LIMIT = 1 << 32
"""Window positions a pool may visit in all before `_check_window_work` compares
them with its input (a 2 x 2**40 window over a 4 x 4 input ran for hours)."""


def _check_window_work(op: graph.PoolOp) -> None:
    """Refuses a pool whose windows are mostly padding: the kernel loops visit
    every window position, inside the input or not (onnxruntime clamps each
    window to the input instead), so a huge kernel with pads nearly as large
    would loop for hours over a tiny input."""
    kernel = list(op.attr("kernel_shape"))
    visits = pymath.prod(graph.shape_of(op.result)) * pymath.prod(kernel)
    inputs = pymath.prod(graph.shape_of(op.input))
    if visits > POOL_WORK_LIMIT and visits > 64 * max(inputs, 1):
        raise UnsupportedModel(
            f"{op.name} with kernel_shape {kernel} visits {visits:.3g} window "
            f"positions for an input of {inputs} elements: its windows are mostly "
            "padding, which smelt's pool loops do not skip; use a kernel that fits "
            "the input"
        )


ANCHORS: dict[type[Operation], Anchor] = {
    graph.Conv2dOp: Anchor(emit_conv2d, prepare_conv2d),  # type: ignore[arg-type]
    graph.MaxPoolOp: Anchor(emit_pool, prepare_pool),  # type: ignore[arg-type]
    graph.AveragePoolOp: Anchor(emit_pool, prepare_pool),  # type: ignore[arg-type]
}
